package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpush/gpush/lab/sshd"
)

// peakRSSDuring resets the kernel's peak-RSS mark of this process, runs f
// and returns how far the peak rose above the RSS before it, in bytes.
func peakRSSDuring(t *testing.T, f func()) int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
	}
	before := procStatusKB(t, "VmRSS")
	f()
	return (procStatusKB(t, "VmHWM") - before) << 10
}

func procStatusKB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// memoryBound is what reading a capped endless printer may add to gpush's
// peak RSS: the kept bytes, their last copy while the buffer grew, the
// garbage the GC has not yet taken (GOGC=100 lets the heap reach twice
// what is live), SSH window buffers; times three for the race detector's
// shadow memory. Uncapped, the same printer grows without end.
func memoryBound(capBytes int64) int64 {
	b := capBytes*5/2 + 64<<20
	if raceEnabled {
		b *= 3
	}
	return b
}

func wantCapError(t *testing.T, err error, stream string, max int64) *OutputCapError {
	t.Helper()
	var ce *OutputCapError
	if !errors.As(err, &ce) || !errors.Is(err, ErrOutputCap) {
		t.Fatalf("want an *OutputCapError, got %v", err)
	}
	if ce.Stream != stream || ce.Max != max {
		t.Fatalf("cap error for %s at %d, want %s at %d: %v", ce.Stream, ce.Max, stream, max, err)
	}
	if IsUnreachable(err) {
		t.Fatalf("an output cap made the host unreachable: %v", err)
	}
	return ce
}

func TestEndlessPrinterCappedWithBoundedMemory(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	pidFile := filepath.Join(e.tdir, "pid")
	var err error
	grew := peakRSSDuring(t, func() {
		_, err = c.Run(context.Background(), []string{"sh", "-c", "echo $$ > " + pidFile + "; exec cat /dev/zero"}, RunOptions{})
	})
	t.Logf("peak RSS rose %d MiB while an endless printer was read", grew>>20)
	wantCapError(t, err, "stdout", DefaultMaxOutput)
	mustContain(t, err.Error(), "h1: sh: stdout over 16 MiB: stopped reading")
	if grew > memoryBound(DefaultMaxOutput) {
		t.Errorf("peak RSS rose %d MiB, want at most %d MiB", grew>>20, memoryBound(DefaultMaxOutput)>>20)
	}
	waitGone(t, readPid(t, pidFile), "the endless printer")
	// The connection, and so the host's other calls, go on.
	if res, err := c.Run(context.Background(), []string{"echo", "next"}, RunOptions{}); err != nil || string(res.Stdout) != "next\n" {
		t.Fatalf("call after a capped one: %v", err)
	}
}

func TestHelperCallOutputCapped(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	var err error
	grew := peakRSSDuring(t, func() {
		// The helper path: its fixed cap, whatever the helper prints.
		_, err = c.exec(context.Background(), "helper snapshot", "cat /dev/zero", nil, 0, HelperMaxOutput)
	})
	t.Logf("peak RSS rose %d MiB under the helper cap", grew>>20)
	wantCapError(t, err, "stdout", HelperMaxOutput)
	mustContain(t, err.Error(), "h1: helper snapshot: stdout over 64 MiB")
	if grew > memoryBound(HelperMaxOutput) {
		t.Errorf("peak RSS rose %d MiB, want at most %d MiB", grew>>20, memoryBound(HelperMaxOutput)>>20)
	}
}

func TestRunOutputCapOption(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	run := func(script string, max int64) (*Result, error) {
		return c.Run(context.Background(), []string{"sh", "-c", script}, RunOptions{MaxOutput: max})
	}
	// Exactly at the cap is fine; one byte over is not.
	res, err := run("head -c 1024 /dev/zero >&2; echo out", 1024)
	if err != nil || len(res.Stderr) != 1024 || string(res.Stdout) != "out\n" {
		t.Fatalf("at the cap: %v", err)
	}
	_, err = run("head -c 1025 /dev/zero >&2", 1024)
	wantCapError(t, err, "stderr", 1024)
	mustContain(t, err.Error(), "stderr over 1 KiB")
	// Raised above the default.
	res, err = run("head -c 20971520 /dev/zero", 32<<20)
	if err != nil || len(res.Stdout) != 20<<20 {
		t.Fatalf("raised cap: %v", err)
	}
	_, err = run("head -c 20971520 /dev/zero", 0)
	wantCapError(t, err, "stdout", DefaultMaxOutput)
}

func TestLocalEndlessPrinterCapped(t *testing.T) {
	c, _ := localHost(t)
	var err error
	grew := peakRSSDuring(t, func() {
		_, err = c.Run(context.Background(), []string{"cat", "/dev/zero"}, RunOptions{})
	})
	t.Logf("peak RSS rose %d MiB (local)", grew>>20)
	wantCapError(t, err, "stdout", DefaultMaxOutput)
	mustContain(t, err.Error(), "localhost: cat: stdout over 16 MiB")
	if grew > memoryBound(DefaultMaxOutput) {
		t.Errorf("peak RSS rose %d MiB, want at most %d MiB", grew>>20, memoryBound(DefaultMaxOutput)>>20)
	}
	_, err = c.Run(context.Background(), []string{"sh", "-c", "yes >&2"}, RunOptions{MaxOutput: 4096})
	wantCapError(t, err, "stderr", 4096)
}

func TestCapWriter(t *testing.T) {
	var fired int
	w := newCapWriter("stdout", 10, func(*capWriter) { fired++ })
	for _, s := range []string{"01234", "56789", "x", "more"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d %v", s, n, err)
		}
	}
	if !w.Over() || fired != 1 || string(w.Bytes()) != "0123456789" {
		t.Fatalf("over %v fired %d kept %q", w.Over(), fired, w.Bytes())
	}
	if sizeString(16<<20) != "16 MiB" || sizeString(1536) != "1536 bytes" || sizeString(2048) != "2 KiB" {
		t.Fatal(sizeString(16<<20), sizeString(1536), sizeString(2048))
	}
}

// sizedReader serves data in reads no larger than it is asked for and
// records the largest buffer it was handed.
type sizedReader struct {
	data    []byte
	maxBuf  int
	failErr error // returned once data is spent, instead of io.EOF
}

func (r *sizedReader) Read(p []byte) (int, error) {
	r.maxBuf = max(r.maxBuf, len(p))
	if len(r.data) == 0 {
		if r.failErr != nil {
			return 0, r.failErr
		}
		return 0, io.EOF
	}
	n := copy(p, r.data[:min(len(r.data), 700)])
	r.data = r.data[n:]
	return n, nil
}

// The copiers x/crypto starts for a session's Stdout and Stderr use
// io.Copy, which hands the writer's ReadFrom the stream: the buffers are
// then ours (small), not io.Copy's 32 KiB.
func TestCopiersUseSmallBuffers(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80000 bytes
	tb := &tailBuffer{max: 1000}
	r := &sizedReader{data: data}
	n, err := io.Copy(tb, r)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("tailBuffer: copied %d of %d: %v", n, len(data), err)
	}
	if r.maxBuf > 512 {
		t.Errorf("tailBuffer: reads of up to %d bytes, want at most 512", r.maxBuf)
	}
	if got := tb.Bytes(); !bytes.Equal(got, data[len(data)-1000:]) {
		t.Errorf("tailBuffer kept %d bytes ending %q, want the last 1000", len(got), tail(got, 20))
	}

	var fired int
	w := newCapWriter("stderr", 50000, func(*capWriter) { fired++ })
	r = &sizedReader{data: data}
	if n, err = io.Copy(w, r); err != nil || n != int64(len(data)) {
		t.Fatalf("capWriter: copied %d of %d: %v (the stream must be drained past the cap)", n, len(data), err)
	}
	if r.maxBuf > 4096 {
		t.Errorf("capWriter: reads of up to %d bytes, want at most 4096", r.maxBuf)
	}
	if !w.Over() || fired != 1 || !bytes.Equal(w.Bytes(), data[:len(w.Bytes())]) || len(w.Bytes()) > 50000 {
		t.Errorf("capWriter: over %v fired %d kept %d bytes", w.Over(), fired, len(w.Bytes()))
	}

	// A read error other than EOF comes back from the copy.
	boom := errors.New("channel reset")
	r = &sizedReader{data: data[:100], failErr: boom}
	if n, err = io.Copy(&tailBuffer{max: 10}, r); !errors.Is(err, boom) || n != 100 {
		t.Errorf("tailBuffer on a failing stream: %d, %v; want 100, %v", n, err, boom)
	}
}
