package helper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// streamPIDs records the pid of every memory stream started in the test.
func streamPIDs(t *testing.T) func() []int {
	var mu sync.Mutex
	var pids []int
	memStreamHook = func(pid int, _ []string) {
		mu.Lock()
		pids = append(pids, pid)
		mu.Unlock()
	}
	t.Cleanup(func() { memStreamHook = nil })
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), pids...)
	}
}

// reaped: the pid is neither running nor a zombie (waited for).
func reaped(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func checkReaped(t *testing.T, pids []int) {
	t.Helper()
	if len(pids) == 0 {
		t.Fatal("no memory stream was started")
	}
	for _, p := range pids {
		if !reaped(p) {
			t.Errorf("memory stream pid %d still there after the wait", p)
		}
	}
}

// The worker dies after the first poll; the interval is longer than the
// timeout, so only the stream's reading of the release can bring the poll
// that finds the GPU free: without it the wait times out.
func TestWaitFreeStreamTriggersCheck(t *testing.T) {
	h := newHost(t, 1)
	h.fake.ReleaseDelay = "70ms"
	h.save()
	pids := streamPIDs(t)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "10850")
	withHook(t, func(n int) {
		if n == 1 {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(20 * time.Second), Interval: Duration(time.Minute)})
	if r.Outcome != WaitFreed || !r.OK || r.Polls < 2 {
		t.Fatalf("outcome %s polls %d reason %q", r.Outcome, r.Polls, r.Reason)
	}
	if last := r.Timeline[len(r.Timeline)-1]; last.UsedMiB[0] > BaselineMiB || last.Holders != 0 {
		t.Errorf("freed on %+v", last)
	}
	if strings.Contains(r.Reason, "memory stream") {
		t.Errorf("reason %q: the stream should have lasted", r.Reason)
	}
	checkReaped(t, pids())
}

// The stream is killed mid-wait: the wait goes on polling every interval,
// finds the GPU free, and says so.
func TestWaitFreeStreamDiesFallsBack(t *testing.T) {
	h := newHost(t, 1)
	h.fake.ReleaseDelay = "70ms"
	h.save()
	pids := streamPIDs(t)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "10850")
	withHook(t, func(n int) {
		if n == 1 {
			for _, sp := range pids() {
				syscall.Kill(sp, syscall.SIGKILL)
				// Reaped before the next poll, however loaded the machine:
				// the wait must see the end before the worker's release.
				for deadline := time.Now().Add(20 * time.Second); !reaped(sp) && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		if n == 3 {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(20 * time.Second), Interval: Duration(50 * time.Millisecond)})
	if r.Outcome != WaitFreed || !strings.Contains(r.Reason, "memory stream ended") || !strings.Contains(r.Reason, "polled every 50ms") {
		t.Fatalf("outcome %s polls %d reason %q", r.Outcome, r.Polls, r.Reason)
	}
	checkReaped(t, pids())
}

// A stream that prints one reading and then nothing is killed as stalled.
func TestWaitFreeStreamStalls(t *testing.T) {
	h := newHost(t, 1)
	pids := streamPIDs(t)
	old := memStreamStall
	memStreamStall = 200 * time.Millisecond
	t.Cleanup(func() { memStreamStall = old })
	wrap := filepath.Join(h.dir, "stall", "nvidia-smi")
	if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nif [ \"$1\" = -lms ]; then echo '" + smiRow(0, "5000") + "'; exec sleep 600; fi\nexec '" + h.smi + "' \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := h.cfg
	cfg.NvidiaSMI = wrap
	h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "5000")
	// The timeout leaves room for many stall checks on a loaded machine.
	r := waitFree(t, WaitFreeRequest{Config: cfg, Timeout: Duration(5 * time.Second), Interval: Duration(50 * time.Millisecond)})
	if r.Outcome != WaitTimedOut || !strings.Contains(r.Reason, "memory stream stalled") {
		t.Fatalf("outcome %s reason %q timeline %+v", r.Outcome, r.Reason, r.Timeline)
	}
	checkReaped(t, pids())
}

// A wait that is cancelled, or times out, leaves no stream behind.
func TestWaitFreeStreamCancelAndTimeout(t *testing.T) {
	h := newHost(t, 1)
	pids := streamPIDs(t)
	h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "5000")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	withHook(t, func(n int) {
		if n == 2 {
			cancel()
		}
	})
	_, err := WaitFree(ctx, WaitFreeRequest{Config: h.cfg, Timeout: Duration(20 * time.Second), Interval: Duration(50 * time.Millisecond)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	checkReaped(t, pids())
	waitPollHook = nil
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(300 * time.Millisecond), Interval: Duration(50 * time.Millisecond)})
	if r.Outcome != WaitTimedOut {
		t.Fatalf("outcome %s reason %q", r.Outcome, r.Reason)
	}
	if got := pids(); len(got) != 2 {
		t.Fatalf("stream pids %v, want one per wait", got)
	}
	checkReaped(t, pids())
}

// Lines of the stream as the real tool prints them (a one-shot
// --query-gpu's columns), and bad ones named.
func TestParseStreamLine(t *testing.T) {
	for line, want := range map[string][2]int64{smiRow(0, "0"): {0, 0}, smiRow(7, "10850"): {7, 10850}, smiRow(1, "[N/A]"): {1, -1}} {
		g, err := parseStreamLine(line)
		if err != nil || int64(g.Index) != want[0] || g.MemUsedMiB != want[1] || g.MemTotalMiB != 143771 || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Errorf("%q: %+v %v", line, g, err)
		}
	}
	for _, bad := range []string{"No devices were found", "0, 5000", "x, GPU-1, H200, 00000000:18:00.0, 5, 10", smiRow(0, "-3")} {
		if _, err := parseStreamLine(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// smiRow is one GPU's line as `nvidia-smi --query-gpu=` + queryGPUFields
// prints it (nounits).
func smiRow(idx int, used string) string {
	return fmt.Sprintf("%d, GPU-%08d-0000-4000-8000-000000000000, NVIDIA H200, 00000000:%02X:00.0, %s, 143771", idx, idx, 0x18+idx*0x10, used)
}

// streamSignals records every signal sent to a stream's group in the test.
func streamSignals(t *testing.T) func() []syscall.Signal {
	var mu sync.Mutex
	var got []syscall.Signal
	memStreamSignalHook = func(_ int, sig syscall.Signal) {
		mu.Lock()
		got = append(got, sig)
		mu.Unlock()
	}
	t.Cleanup(func() { memStreamSignalHook = nil })
	return func() []syscall.Signal {
		mu.Lock()
		defer mu.Unlock()
		return append([]syscall.Signal(nil), got...)
	}
}

// script writes an executable shell script into the test's folder.
func script(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+text), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// A stream that exits by itself is reaped without a signal: close then
// sends none (its pgid may be another group's by then). One still running
// is killed by close, once: the hook does see signals.
func TestMemStreamCloseSignalsOnlyUnreaped(t *testing.T) {
	sent := streamSignals(t)
	s, err := startMemStream(script(t, "nvidia-smi", "echo '"+smiRow(0, "12")+"'\nexit 3\n"), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-s.done
	s.close()
	s.close()
	if got := sent(); len(got) != 0 {
		t.Fatalf("signals %v sent to a stream that had exited", got)
	}
	if err := s.reason(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("reason %v, want its exit status", err)
	}
	if !reaped(s.pid) {
		t.Errorf("pid %d not reaped", s.pid)
	}
	if used, ok := s.readingsSince(context.Background(), time.Time{}, []int{0}, time.Millisecond); !ok || used[0] != 12 {
		t.Errorf("reading before the exit: %v %v", used, ok)
	}

	s, err = startMemStream(script(t, "nvidia-smi", "echo '"+smiRow(0, "12")+"'\nexec sleep 600\n"), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s.close()
	if got := sent(); len(got) != 1 || got[0] != syscall.SIGKILL {
		t.Fatalf("signals %v, want one SIGKILL", got)
	}
	if err := s.reason(); err == nil || err.Error() != "stopped" {
		t.Errorf("reason %v, want stopped", err)
	}
	if !reaped(s.pid) {
		t.Errorf("pid %d not reaped", s.pid)
	}
}

// A poll takes only a reading that came after it started: the line there
// before is not used, the next one is.
func TestMemStreamReadingsSince(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "next")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// One reading, then the next only once the test writes to the fifo.
	s, err := startMemStream(script(t, "nvidia-smi", "echo '"+smiRow(0, "5000")+"'\necho '"+smiRow(1, "7")+"'\nread x < '"+fifo+"'\necho \""+smiRow(0, "$x")+"\"\necho '"+smiRow(1, "8")+"'\nexec sleep 600\n"), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ctx := context.Background()
	if _, ok := s.readingsSince(ctx, time.Time{}, []int{0, 1}, 20*time.Second); !ok {
		t.Fatal("first readings never came")
	}
	poll := time.Now()
	if used, ok := s.readingsSince(ctx, poll, []int{0, 1}, 50*time.Millisecond); ok {
		t.Fatalf("readings from before the poll used: %v", used)
	}
	if _, ok := s.readingsSince(ctx, time.Time{}, []int{0, 2}, 10*time.Millisecond); ok {
		t.Fatal("GPU 2 has no reading, yet one was returned")
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("40\n")
	f.Close()
	used, ok := s.readingsSince(ctx, poll, []int{0, 1}, 20*time.Second)
	if !ok || used[0] != 40 || used[1] != 8 {
		t.Fatalf("readings after the poll: %v %v", used, ok)
	}
}

// With the stream, polls take memory from it (the first one its GPUs
// too): no --query-gpu in the whole wait, one stream, yet every poll's sample shows
// the worker's memory, and the kill is still seen through to freed.
// Without it, every poll runs --query-gpu.
func TestWaitFreeStreamMemoryReplacesQuery(t *testing.T) {
	h := newHost(t, 1)
	pids := streamPIDs(t)
	cfg, calls := countingSMI(t, h)
	cfg.SMITimeout = Duration(time.Minute) // a loaded machine is slow, not wrong
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "5000")
	withHook(t, func(n int) {
		if n == 8 {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	r := waitFree(t, WaitFreeRequest{Config: cfg, Timeout: Duration(30 * time.Second), Interval: Duration(20 * time.Millisecond)})
	if r.Outcome != WaitFreed || r.Polls < 9 {
		t.Fatalf("outcome %s polls %d reason %q", r.Outcome, r.Polls, r.Reason)
	}
	// A poll whose reading is late (a loaded machine) queries instead:
	// allowed, but not most of them.
	if gpu, _ := calls(); len(pids()) != 1 || gpu > r.Polls/2 {
		t.Fatalf("%d streams, %d --query-gpu runs over %d polls: want one stream and few queries", len(pids()), gpu, r.Polls)
	}
	for i, smp := range r.Timeline[:8] {
		if smp.UsedMiB[0] != 5000 {
			t.Errorf("poll %d read %d MiB, want the worker's 5000", i+1, smp.UsedMiB[0])
		}
	}

	old := memStreamPeriod
	memStreamPeriod = 0
	t.Cleanup(func() { memStreamPeriod = old })
	h2 := newHost(t, 1)
	cfg2, calls2 := countingSMI(t, h2)
	h2.start("", "--dev", h2.d("nvidia0"), "--mem-mib", "5000")
	waitPollHook = nil
	r = waitFree(t, WaitFreeRequest{Config: cfg2, Timeout: Duration(300 * time.Millisecond), Interval: Duration(20 * time.Millisecond)})
	if gpu, _ := calls2(); gpu != r.Polls || len(pids()) != 1 {
		t.Fatalf("without the stream: %d --query-gpu runs over %d polls, %d streams", gpu, r.Polls, len(pids()))
	}
}

// A tool that prints valid rows without pause is no -lms loop: the stream
// ends, naming it, instead of feeding polls.
func TestMemStreamFloodEnds(t *testing.T) {
	s, err := startMemStream(script(t, "nvidia-smi", "while :; do echo '"+smiRow(0, "0")+"'; done\n"), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if gpus, ok := s.gpusSince(context.Background(), time.Time{}, 20*time.Second); ok {
		t.Errorf("a flood's round was taken for the GPUs: %+v", gpus)
	}
	<-s.done
	if err := s.reason(); err == nil || !strings.Contains(err.Error(), "faster than -lms 10 allows") {
		t.Fatalf("reason %v, want the flood named", err)
	}
}

// The GPUs of a whole round come once the next round begins, in the order
// printed, with every column; a round still being printed is not whole.
func TestMemStreamGPUsSince(t *testing.T) {
	s, err := startMemStream(script(t, "nvidia-smi", "echo '"+smiRow(0, "5000")+"'\necho '"+smiRow(1, "7")+"'\nsleep 0.05\necho '"+smiRow(0, "40")+"'\nexec sleep 600\n"), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	gpus, ok := s.gpusSince(context.Background(), time.Time{}, 20*time.Second)
	if !ok || len(gpus) != 2 || gpus[0].Index != 0 || gpus[1].Index != 1 || gpus[0].MemUsedMiB != 5000 || gpus[1].UUID == "" || gpus[1].MemTotalMiB != 143771 {
		t.Fatalf("gpus %+v %v, want the first round's two", gpus, ok)
	}
	// The second round (GPU 0 only so far) is not whole: nothing newer.
	if gpus, ok := s.gpusSince(context.Background(), time.Now(), 50*time.Millisecond); ok {
		t.Errorf("an unfinished round was returned: %+v", gpus)
	}
}
