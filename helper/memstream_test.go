package helper

import (
	"context"
	"errors"
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
	memStreamHook = func(pid int) {
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
	script := "#!/bin/sh\nif [ \"$1\" = -lms ]; then echo '0, 5000'; exec sleep 600; fi\nexec '" + h.smi + "' \"$@\"\n"
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

// Lines of the stream as the real tool prints them, and bad ones named.
func TestParseMemLine(t *testing.T) {
	for line, want := range map[string][2]int64{"0, 0": {0, 0}, "7, 10850": {7, 10850}, "1, [N/A]": {1, -1}} {
		i, v, err := parseMemLine(line)
		if err != nil || int64(i) != want[0] || v != want[1] {
			t.Errorf("%q: %d %d %v", line, i, v, err)
		}
	}
	for _, bad := range []string{"No devices were found", "0, 1, 2", "x, 5", "0, -3"} {
		if _, _, err := parseMemLine(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
