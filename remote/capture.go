package remote

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// Output caps: a host printing without end must fail alone, not grow
// gpush's memory until the OOM killer ends every host's run.
const (
	// DefaultMaxOutput caps each stream of a Run (RunOptions.MaxOutput 0).
	DefaultMaxOutput = 16 << 20
	// HelperMaxOutput caps each stream of a helper call; responses are
	// JSON tables of processes and GPUs, far below it.
	HelperMaxOutput = 64 << 20
)

// ErrOutputCap is wrapped by the error of a command that printed more than
// its cap: gpush stopped reading and stopped the command.
var ErrOutputCap = errors.New("output over its cap")

// OutputCapError says which stream of which command went over its cap.
type OutputCapError struct {
	Host   string
	What   string // the command, as errors name it
	Stream string // "stdout" or "stderr"
	Max    int64
}

func (e *OutputCapError) Error() string {
	return fmt.Sprintf("%s: %s: %s over %s: stopped reading and stopped the command", e.Host, e.What, e.Stream, sizeString(e.Max))
}

func (e *OutputCapError) Unwrap() error { return ErrOutputCap }

func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// capWriter keeps at most max bytes. Past that it reports the overflow
// once (onOver stops the command) and discards the rest while still
// claiming success, so the copier keeps draining the stream and never
// blocks the command before it is stopped.
type capWriter struct {
	mu     sync.Mutex
	buf    []byte
	max    int64
	over   bool
	onOver func(*capWriter)
	stream string
}

func newCapWriter(stream string, max int64, onOver func(*capWriter)) *capWriter {
	return &capWriter{stream: stream, max: max, onOver: onOver}
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.over {
		w.mu.Unlock()
		return len(p), nil
	}
	room := w.max - int64(len(w.buf))
	if int64(len(p)) <= room {
		w.grow(len(p))
		w.buf = append(w.buf, p...)
		w.mu.Unlock()
		return len(p), nil
	}
	w.over = true
	w.mu.Unlock()
	if w.onOver != nil {
		w.onOver(w)
	}
	return len(p), nil
}

// ReadFrom drains an exec stream for x/crypto's copier with a 4 KiB
// buffer rather than io.Copy's 32 KiB: at a thousand hosts in flight the
// copiers' buffers alone were tens of MiB.
func (w *capWriter) ReadFrom(r io.Reader) (int64, error) {
	return copySmall(w, r, 4096)
}

// copySmall is io.Copy through a buffer of size bytes (io.Copy would call
// dst's ReadFrom, which is what calls this).
func copySmall(dst io.Writer, src io.Reader, size int) (int64, error) {
	buf := make([]byte, size)
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if nw != nr {
				return n, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// grow makes room for n more bytes, doubling but never past max: plain
// append (or a bytes.Buffer) would allocate up to twice the cap.
func (w *capWriter) grow(n int) {
	need := len(w.buf) + n
	if need <= cap(w.buf) {
		return
	}
	c := max(2*cap(w.buf), need, 4096)
	c = int(min(int64(c), w.max))
	nb := make([]byte, len(w.buf), c)
	copy(nb, w.buf)
	w.buf = nb
}

// Over reports whether the stream went past its cap.
func (w *capWriter) Over() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

// Bytes returns what was kept; call it once the stream has ended.
func (w *capWriter) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf
}

// capErr is the error for the first of ws that went over, or nil.
func capErr(host, what string, ws ...*capWriter) error {
	for _, w := range ws {
		if w.Over() {
			return &OutputCapError{Host: host, What: what, Stream: w.stream, Max: w.max}
		}
	}
	return nil
}

// maxOutput is the cap a Run uses for opts.
func maxOutput(opts RunOptions) int64 {
	if opts.MaxOutput > 0 {
		return opts.MaxOutput
	}
	return DefaultMaxOutput
}
