package helper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultSMITimeout bounds an nvidia-smi call when Config.SMITimeout is 0.
const DefaultSMITimeout = 10 * time.Second

// The query forms the helper runs; the parsers below expect these columns.
const (
	queryGPUFields  = "index,uuid,name,pci.bus_id,memory.used,memory.total"
	queryAppsFields = "pid,process_name,gpu_uuid,gpu_bus_id,used_memory"
	csvFormat       = "--format=csv,noheader,nounits"
)

// smiFallbacks are tried after PATH, in order.
var smiFallbacks = []string{"/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi"}

// errNoSMI means no nvidia-smi could be found.
var errNoSMI = errors.New("nvidia-smi not found")

// findSMI resolves the nvidia-smi to run.
func findSMI(cfg Config) (string, error) {
	if cfg.NvidiaSMI != "" {
		fi, err := os.Stat(cfg.NvidiaSMI)
		if err != nil {
			return "", fmt.Errorf("%w: nvidia_smi %q: %v", errNoSMI, cfg.NvidiaSMI, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: nvidia_smi %q is not an executable file", errNoSMI, cfg.NvidiaSMI)
		}
		return cfg.NvidiaSMI, nil
	}
	if p, err := exec.LookPath("nvidia-smi"); err == nil {
		return p, nil
	}
	for _, p := range smiFallbacks {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w on PATH, %s", errNoSMI, strings.Join(smiFallbacks, ", "))
}

// smiNoDevices is nvidia-smi's exit status and text for a host without GPUs.
const (
	smiNoDevicesExit = 6
	smiNoDevicesText = "No devices were found"
)

// MaxToolOutput caps what the helper keeps of each output stream of a tool
// it runs (nvidia-smi, systemctl). A real nvidia-smi prints about 100 bytes
// per process, so 100k processes fit; a wedged one printing gigabytes would
// otherwise take the helper's memory with it.
const MaxToolOutput = 16 << 20

// errToolTimeout is the cause when a tool's own timeout (not the request's
// deadline) ends it.
var errToolTimeout = errors.New("tool timeout")

// deadlineError is a tool run cut off by the request's deadline; it is
// context.DeadlineExceeded to errors.Is without saying so twice.
type deadlineError string

func (e deadlineError) Error() string { return string(e) }
func (e deadlineError) Unwrap() error { return context.DeadlineExceeded }

// OutputCapError says a tool printed more than MaxToolOutput on one stream.
type OutputCapError struct {
	Tool   string // argv[0]
	Stream string // "stdout" or "stderr"
	Cap    int
}

func (e *OutputCapError) Error() string {
	return fmt.Sprintf("%s printed more than %d MiB on %s: killed (process group), output dropped", e.Tool, e.Cap>>20, e.Stream)
}

// cappedBuffer keeps at most max bytes; the first write beyond calls over
// once and fails, which stops exec's copy (the tool is killed by then).
type cappedBuffer struct {
	buf  []byte
	max  int
	over func()
	// gate, when set, holds the first write until it closes (or done
	// does): see withOutputGate.
	gate, done <-chan struct{}
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.gate != nil {
		select {
		case <-b.gate:
			b.gate = nil
		case <-b.done:
			return 0, errors.New("interrupted before its output was read")
		}
	}
	if len(b.buf)+len(p) > b.max {
		b.over()
		return 0, errors.New("output cap reached")
	}
	if need := len(b.buf) + len(p); need > cap(b.buf) {
		// Grow by doubling, but never past the cap: no slack beyond it.
		grown := make([]byte, len(b.buf), min(max(2*cap(b.buf), need, 4096), b.max))
		copy(grown, b.buf)
		b.buf = grown
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

type outputGateKey struct{}

// withOutputGate makes the runs under ctx take in no output until gate
// closes: the tool runs, and blocks once its pipe is full. A snapshot that
// starts its listing beside its GPU reading (readEarly) so keeps one
// capture at a time, as one run after the other did: the helper's memory
// bound stays one run's MaxToolOutput per stream.
func withOutputGate(ctx context.Context, gate <-chan struct{}) context.Context {
	return context.WithValue(ctx, outputGateKey{}, gate)
}

// runBounded runs argv in its own process group and kills the whole group
// (a wrapper script's children too) when its timeout passes, when ctx ends
// (the request's deadline: each run gets the lesser of the two), or when it
// prints more than MaxToolOutput on stdout or stderr.
func runBounded(ctx context.Context, timeout time.Duration, argv []string) (stdout, stderr []byte, err error) {
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, timeout, errToolTimeout)
	defer stop()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Negative pid: the whole group the command leads.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// If a grandchild keeps the pipes open after the kill, stop waiting.
	cmd.WaitDelay = time.Second
	capped := func(stream string) *cappedBuffer {
		e := &OutputCapError{Tool: argv[0], Stream: stream, Cap: MaxToolOutput}
		gate, _ := ctx.Value(outputGateKey{}).(<-chan struct{})
		return &cappedBuffer{max: MaxToolOutput, over: func() { cancel(e) }, gate: gate, done: ctx.Done()}
	}
	out, errb := capped("stdout"), capped("stderr")
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	err = cmd.Run()
	if Tracing() {
		Tracef("exec %s %s: %.1f ms, cpu %.1f ms (err %v)", baseName(argv), strings.Join(argv[1:min(len(argv), 2)], " "), float64(time.Since(start).Microseconds())/1000, cpuOf(cmd.ProcessState), err)
	}
	if err == nil {
		// Done and read whole, even if a deadline passed just after.
		return out.buf, errb.buf, nil
	}
	var capErr *OutputCapError
	switch cause := context.Cause(ctx); {
	case errors.As(cause, &capErr):
		return nil, nil, capErr
	case errors.Is(cause, errToolTimeout):
		return out.buf, errb.buf, fmt.Errorf("%s: timed out after %s (process group killed)", argv[0], timeout)
	case errors.Is(cause, context.DeadlineExceeded):
		// The request's deadline came first.
		return out.buf, errb.buf, deadlineError(fmt.Sprintf("%s: cut off by the request's deadline after %s (process group killed)",
			argv[0], time.Since(start).Round(time.Millisecond)))
	case cause != nil:
		return out.buf, errb.buf, fmt.Errorf("%s: interrupted (process group killed): %w", argv[0], cause)
	}
	return out.buf, errb.buf, fmt.Errorf("%s %s: %w", argv[0], strings.Join(argv[1:], " "), err)
}

// withOutput adds what a failed command printed to its error (capped: a
// wedged tool can print pages); err alone when it printed nothing.
func withOutput(err error, out ...[]byte) error {
	msg := strings.TrimSpace(string(bytes.Join(out, []byte("\n"))))
	if msg == "" {
		return err
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return fmt.Errorf("%w: %s", err, msg)
}

// smiRunner runs one resolved nvidia-smi with the configured deadline.
type smiRunner struct {
	path    string
	timeout time.Duration
	// lastGPUs is the latest --query-gpu answer.
	lastGPUs []GPU
	// reuse (a wait-free's memory stream) makes queryGPUs answer with
	// lastGPUs at once, memory unknown (-1) until the caller fills it in
	// from the stream: no nvidia-smi process.
	reuse bool
	// stream, when set (a session's lingering stream), gives the next
	// queryGPUs its GPUs: the first whole round that began after since,
	// when one comes within the stream's roundWait with every column
	// read; else that call runs --query-gpu as without it. Used once.
	stream *memStream
	since  time.Time
	// streamWait bounds the wait for that round when set (a stream the
	// snapshot started: a process start); else the stream's roundWait.
	streamWait time.Duration
}

func newSMIRunner(cfg Config) (*smiRunner, error) {
	p, err := findSMI(cfg)
	if err != nil {
		return nil, err
	}
	return &smiRunner{path: p, timeout: smiTimeout(cfg)}, nil
}

// smiTimeout is the deadline of one nvidia-smi run.
func smiTimeout(cfg Config) time.Duration {
	if t := cfg.SMITimeout.D(); t > 0 {
		return t
	}
	return DefaultSMITimeout
}

// query runs one --query-* form; noDevices is true when the host has none.
func (r *smiRunner) query(ctx context.Context, arg string) (out []byte, noDevices bool, err error) {
	out, errb, err := runBounded(ctx, r.timeout, []string{r.path, arg, csvFormat})
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == smiNoDevicesExit && (bytes.Contains(out, []byte(smiNoDevicesText)) || bytes.Contains(errb, []byte(smiNoDevicesText))) {
			return nil, true, nil
		}
		// nvidia-smi tells what went wrong on stdout as often as on stderr.
		return nil, false, withOutput(err, out, errb)
	}
	return out, false, nil
}

func (r *smiRunner) queryGPUs(ctx context.Context) ([]GPU, error) {
	if r.reuse && len(r.lastGPUs) > 0 {
		// The same GPUs: uuid, bus id and total do not change while the
		// driver is loaded, and a lost GPU breaks the stream.
		gpus := slices.Clone(r.lastGPUs)
		for i := range gpus {
			gpus[i].MemUsedMiB = -1
		}
		return gpus, nil
	}
	if st := r.stream; st != nil {
		r.stream = nil
		wait := r.streamWait
		if wait <= 0 {
			wait = st.roundWait()
		}
		if gpus, ok := st.gpusSince(ctx, r.since, wait); ok && wholeRows(gpus) {
			r.lastGPUs = slices.Clone(gpus)
			if smiStreamHook != nil {
				smiStreamHook()
			}
			return gpus, nil
		}
	}
	out, none, err := r.query(ctx, "--query-gpu="+queryGPUFields)
	if err != nil || none {
		return nil, err
	}
	gpus, err := parseQueryGPU(out)
	if err != nil {
		return nil, fmt.Errorf("%s --query-gpu: %w", r.path, err)
	}
	r.lastGPUs = slices.Clone(gpus)
	return gpus, nil
}

// smiStreamHook, when set by tests, is told each GPU table a snapshot
// took from a session's stream.
var smiStreamHook func()

// wholeRows: every row has its uuid and both memory columns; a row the
// stream read [N/A] may read otherwise in a one-shot, which is asked then.
func wholeRows(gpus []GPU) bool {
	for _, g := range gpus {
		if g.UUID == "" || g.MemUsedMiB < 0 || g.MemTotalMiB < 0 {
			return false
		}
	}
	return len(gpus) > 0
}

func (r *smiRunner) queryApps(ctx context.Context) ([]computeApp, error) {
	out, none, err := r.query(ctx, "--query-compute-apps="+queryAppsFields)
	if err != nil || none {
		return nil, err
	}
	apps, err := parseComputeApps(out)
	if err != nil {
		return nil, fmt.Errorf("%s --query-compute-apps: %w", r.path, err)
	}
	return apps, nil
}

// computeApp is one line of --query-compute-apps.
type computeApp struct {
	PID     int
	Name    string
	GPUUUID string
	BusID   string
	MemMiB  int64 // -1 when [N/A] or [Not Supported]
	// MemUnread is what nvidia-smi printed instead of a number.
	MemUnread string
}

// Memory placeholders of nvidia-smi's CSV. They differ: [Not Supported] is
// a field this GPU, driver or mode (MIG, vGPU, unified memory) never
// reports, so no wait brings a number; [N/A] is no value (the real H200
// prints it for fields it has no value for, fan.speed, and reads memory
// as numbers: helper/testdata/h200-query-gpu-all.csv).
const (
	SMINotSupported = "[Not Supported]"
	SMINotAvailable = "[N/A]"
)

// csvFields splits one nvidia-smi CSV line. nvidia-smi does not quote, so
// a free-text column (a name) is recovered as everything between the fixed
// columns before and after it.
func csvFields(line string, want, freeCol int) ([]string, error) {
	raw := strings.Split(line, ",")
	if len(raw) < want {
		return nil, fmt.Errorf("%d columns, want %d", len(raw), want)
	}
	extra := len(raw) - want
	out := make([]string, 0, want)
	for i := 0; i < len(raw); i++ {
		if i == freeCol {
			out = append(out, strings.TrimSpace(strings.Join(raw[i:i+extra+1], ",")))
			i += extra
			continue
		}
		out = append(out, strings.TrimSpace(raw[i]))
	}
	return out, nil
}

// parseMiB reads a memory value: "1234", "1234 MiB", or a bracketed
// placeholder such as [N/A] / [Not Supported], which reads as -1.
func parseMiB(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") || s == "N/A" || s == "" {
		return -1, nil
	}
	s = strings.TrimSpace(strings.TrimSuffix(s, "MiB"))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("memory value %.40q is not a MiB count", s)
	}
	return v, nil
}

// unreadText is the placeholder s stands for, for a value parseMiB read
// as -1: as printed when bracketed, "[N/A]" for a bare N/A, "" for nothing.
func unreadText(s string) string {
	s = strings.TrimSpace(s)
	if s == "N/A" {
		return SMINotAvailable
	}
	return s
}

// memFigure is a memory figure for a message: "512 MiB", or what
// nvidia-smi printed instead.
func memFigure(v int64, unread string) string {
	switch {
	case v >= 0:
		return fmt.Sprintf("%d MiB", v)
	case unread != "":
		return "memory " + unread
	}
	return "memory unknown"
}

// isSMIMessage reports lines nvidia-smi prints instead of rows.
func isSMIMessage(line string) bool {
	return strings.HasPrefix(line, "No running") || strings.HasPrefix(line, smiNoDevicesText)
}

// parseQueryGPU parses `--query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total`.
func parseQueryGPU(b []byte) ([]GPU, error) {
	var gpus []GPU
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || isSMIMessage(line) {
			continue
		}
		f, err := csvFields(line, 6, 2)
		if err != nil {
			return nil, fmt.Errorf("line %d %.200q: %w", n+1, line, err)
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, fmt.Errorf("line %d %.200q: index %.40q is not a number", n+1, line, f[0])
		}
		g := GPU{Index: idx, UUID: f[1], Name: f[2], BusID: f[3], Minor: -1}
		if g.MemUsedMiB, err = parseMiB(f[4]); err != nil {
			return nil, fmt.Errorf("line %d %.200q: memory.used: %w", n+1, line, err)
		}
		if g.MemTotalMiB, err = parseMiB(f[5]); err != nil {
			return nil, fmt.Errorf("line %d %.200q: memory.total: %w", n+1, line, err)
		}
		switch {
		case g.MemUsedMiB < 0:
			g.MemUnread = unreadText(f[4])
		case g.MemTotalMiB < 0:
			g.MemUnread = unreadText(f[5])
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// parseComputeApps parses `--query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory`.
func parseComputeApps(b []byte) ([]computeApp, error) {
	var apps []computeApp
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || isSMIMessage(line) {
			continue
		}
		f, err := csvFields(line, 5, 1)
		if err != nil {
			return nil, fmt.Errorf("line %d %.200q: %w", n+1, line, err)
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid < 0 {
			return nil, fmt.Errorf("line %d %.200q: pid %.40q is not a number", n+1, line, f[0])
		}
		a := computeApp{PID: pid, Name: f[1], GPUUUID: f[2], BusID: f[3]}
		if a.MemMiB, err = parseMiB(f[4]); err != nil {
			return nil, fmt.Errorf("line %d %.200q: used_memory: %w", n+1, line, err)
		}
		if a.MemMiB < 0 {
			a.MemUnread = unreadText(f[4])
		}
		apps = append(apps, a)
	}
	return apps, nil
}

// baseName is argv[0]'s last element.
func baseName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return filepath.Base(argv[0])
}
