package helper

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// withHook runs fn after each wait-free poll for the duration of the test.
func withHook(t *testing.T, fn func(n int)) {
	waitPollHook = fn
	t.Cleanup(func() { waitPollHook = nil })
}

func waitFree(t *testing.T, req WaitFreeRequest) *WaitFreeResponse {
	t.Helper()
	r, err := WaitFree(context.Background(), req)
	if err != nil {
		t.Fatalf("wait-free: %v", err)
	}
	if r.Version != Version || r.Polls != len(r.Timeline) || r.Polls == 0 {
		t.Errorf("version %q polls %d timeline %d", r.Version, r.Polls, len(r.Timeline))
	}
	return r
}

func TestWaitFreeFreed(t *testing.T) {
	h := newHost(t, 2)
	h.fake.ReleaseDelay = "70ms"
	h.save()
	p := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "10850")
	other := h.start("", "--dev", h.d("nvidia1"), "--mem-mib", "500") // on a GPU not waited for
	withHook(t, func(n int) {
		if n == 1 {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{0}, Timeout: Duration(10 * time.Second)})
	if r.Outcome != WaitFreed || !r.OK || r.Polls < 2 {
		t.Fatalf("outcome %s ok %v polls %d reason %q", r.Outcome, r.OK, r.Polls, r.Reason)
	}
	first, last := r.Timeline[0], r.Timeline[len(r.Timeline)-1]
	if first.UsedMiB[0] != 10850 || first.Holders != 1 || last.UsedMiB[0] > BaselineMiB || last.Holders != 0 {
		t.Errorf("timeline %+v", r.Timeline)
	}
	if _, watched := first.UsedMiB[1]; watched || r.ThresholdMiB[0] != BaselineMiB || len(r.GPUs) != 1 || len(r.Holders) != 0 {
		t.Errorf("gpus %+v thresholds %v holders %+v", r.GPUs, r.ThresholdMiB, r.Holders)
	}
	if !alive(other.pid) {
		t.Error("bystander died")
	}
}

func TestWaitFreeMemoryHeld(t *testing.T) {
	h := newHost(t, 1)
	h.fake.GPUs[0].BaselineMiB = 5000
	h.save()
	// Long enough for a second poll on a loaded machine: the first one
	// waits for the stream's first whole round.
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(2 * time.Second), Interval: Duration(50 * time.Millisecond)})
	if r.Outcome != WaitMemoryHeld || r.OK || !strings.Contains(r.Reason, "GPU 0: 5000 MiB used (threshold 64 MiB) with no holder left") || r.Polls < 2 {
		t.Errorf("outcome %s reason %q polls %d", r.Outcome, r.Reason, r.Polls)
	}
	// An explicit threshold above the baseline counts it as free.
	th := int64(6000)
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, ThresholdMiB: &th, Timeout: Duration(300 * time.Millisecond)})
	if r.Outcome != WaitFreed || r.ThresholdMiB[0] != 6000 {
		t.Errorf("threshold 6000: outcome %s thresholds %v", r.Outcome, r.ThresholdMiB)
	}
	// A small idle baseline (older drivers, persistence mode) is free by default.
	h.fake.GPUs[0].BaselineMiB = 3
	h.save()
	if r = waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(300 * time.Millisecond)}); r.Outcome != WaitFreed || r.Polls != 1 {
		t.Errorf("baseline 3 MiB: outcome %s polls %d", r.Outcome, r.Polls)
	}
	// ... but not when the request asks for exactly 0.
	zero := int64(0)
	if r = waitFree(t, WaitFreeRequest{Config: h.cfg, ThresholdMiB: &zero, Timeout: Duration(200 * time.Millisecond)}); r.Outcome != WaitMemoryHeld {
		t.Errorf("threshold 0 with 3 MiB used: outcome %s", r.Outcome)
	}
}

func TestWaitFreeNewHolder(t *testing.T) {
	h := newHost(t, 1)
	a := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	var b *holder
	withHook(t, func(n int) {
		if n == 1 {
			b = h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "200")
		}
	})
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(10 * time.Second)})
	if r.Outcome != WaitNewHolder || r.OK || !strings.Contains(r.Reason, "pid "+strconv.Itoa(b.pid)) {
		t.Fatalf("outcome %s reason %q", r.Outcome, r.Reason)
	}
	if strings.Contains(r.Reason, "pid "+strconv.Itoa(a.pid)+" ") {
		t.Errorf("the initial holder is reported as new: %q", r.Reason)
	}
	mem := map[int]int64{}
	for _, x := range r.Holders {
		mem[x.PID] = x.MemMiB
	}
	if mem[a.pid] != 100 || mem[b.pid] != 200 {
		t.Errorf("holders' memory %v", mem)
	}
}

func TestWaitFreeTimedOut(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(300 * time.Millisecond)})
	// It polled until the deadline (one slow poll under load may be all).
	if r.Outcome != WaitTimedOut || r.OK || len(r.Holders) != 1 || r.Holders[0].PID != p.pid || r.Holders[0].MemMiB != 100 || r.Elapsed.D() < 300*time.Millisecond {
		t.Errorf("outcome %s holders %+v polls %d elapsed %s", r.Outcome, r.Holders, r.Polls, r.Elapsed.D())
	}
	if !strings.Contains(r.Reason, "pid "+strconv.Itoa(p.pid)) {
		t.Errorf("reason %q", r.Reason)
	}
}

func TestWaitFreeWhoBlocks(t *testing.T) {
	h := newHost(t, 2)
	h.start(h.as("nvidia-persistenced"), "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia0"), "--dev", h.d("nvidia1"))
	worker := h.start("", "--dev", h.d("nvidia1"), "--mem-mib", "100")
	short := Duration(200 * time.Millisecond)
	// Protected holders never block; a holder of another GPU does not either.
	if r := waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{0}, Timeout: short}); r.Outcome != WaitFreed {
		t.Errorf("gpu 0: %s %q", r.Outcome, r.Reason)
	}
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{1}, Timeout: short})
	if r.Outcome != WaitTimedOut || len(r.Status) != 1 || r.Status[0].State != GPUHeld || len(r.Status[0].Owners) != 1 || r.Status[0].Owners[0] != worker.pid {
		t.Errorf("gpu 1: %s %q %+v", r.Outcome, r.Reason, r.Status)
	}
	// Monitors never block while memory is at the threshold: one holding
	// nvidiactl and nvidia0, and an NVML client, which on the H200 (driver
	// 580) also has nvidia-uvm open but no context (nvidia-smi lists no
	// such process).
	h.start("", "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia0"))
	nvml := h.start("", "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia0"), "--dev", h.d("nvidia-uvm"))
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{0}, Timeout: short})
	if r.Outcome != WaitFreed || len(r.Holders) != 0 || !slices.Contains(r.Status[0].Others, nvml.pid) {
		t.Errorf("monitors: %s %q holders %+v status %+v", r.Outcome, r.Reason, r.Holders, r.Status)
	}
	// A holder of no GPU device never blocks either way.
	h.start("", "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia-uvm"))
	for _, ignore := range []bool{false, true} {
		if r := waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{0}, Timeout: short, IgnoreShared: ignore}); r.Outcome != WaitFreed {
			t.Errorf("shared-only holder, ignore_shared %v: %s %q", ignore, r.Outcome, r.Reason)
		}
	}
	if _, err := WaitFree(context.Background(), WaitFreeRequest{Config: h.cfg, GPUs: []int{7}, Timeout: short}); err == nil || !strings.Contains(err.Error(), "gpu 7") {
		t.Errorf("unknown GPU: err %v", err)
	}
	neg := int64(-1)
	if _, err := WaitFree(context.Background(), WaitFreeRequest{Config: h.cfg, ThresholdMiB: &neg}); err == nil {
		t.Error("negative threshold: want an error")
	}
}

// Unknown memory is never free, and waiting cannot change it: the wait
// ends at once instead of at the deadline.
func TestWaitFreeUnknownIsNotFree(t *testing.T) {
	h := newHost(t, 1)
	cfg := h.cfg
	cfg.NvidiaSMI = filepath.Join(h.dir, "none")
	long := Duration(time.Minute)
	r := waitFree(t, WaitFreeRequest{Config: cfg, Timeout: long})
	if r.Outcome != WaitUnknown || r.OK || !strings.Contains(r.Reason, "no GPU is known") || r.Polls != 1 {
		t.Errorf("no nvidia-smi, nothing held: outcome %s reason %q polls %d", r.Outcome, r.Reason, r.Polls)
	}
	mon := h.start("", "--dev", h.d("nvidia0"))
	r = waitFree(t, WaitFreeRequest{Config: cfg, Timeout: long})
	if r.Outcome != WaitUnknown || r.OK || len(r.Status) != 1 || r.Status[0].State != GPUUnknown || !strings.Contains(r.Reason, "GPU 0: memory unknown: only a held /dev/nvidia0") || !strings.Contains(r.Reason, "pid "+strconv.Itoa(mon.pid)) {
		t.Errorf("no nvidia-smi, nvidia0 held: outcome %s reason %q status %+v", r.Outcome, r.Reason, r.Status)
	}
	h.fake.Fault = "na"
	h.save()
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: long})
	if r.Outcome != WaitUnknown || r.OK || !strings.Contains(r.Reason, "GPU 0: memory unknown: nvidia-smi reports memory [N/A] (no value now") || r.Polls != 1 {
		t.Errorf("[N/A]: outcome %s reason %q polls %d", r.Outcome, r.Reason, r.Polls)
	}
	// [Not Supported] is said as such, not as [N/A].
	h.fake.Fault = "not_supported"
	h.save()
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: long})
	if r.Outcome != WaitUnknown || !strings.Contains(r.Reason, "GPU 0: memory unknown: nvidia-smi reports memory [Not Supported] for this GPU") ||
		strings.Contains(r.Reason, "[N/A]") {
		t.Errorf("[Not Supported]: outcome %s reason %q", r.Outcome, r.Reason)
	}
	h.fake.Fault = "na"
	h.save()
	// [N/A] with an owner (listed, memory [N/A]): held (it may still
	// exit), so the wait goes on.
	h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(300 * time.Millisecond), Interval: Duration(50 * time.Millisecond)})
	if r.Outcome != WaitTimedOut || r.OK || r.Polls < 2 || r.Status[0].State != GPUHeld {
		t.Errorf("[N/A] with an owner: outcome %s reason %q polls %d", r.Outcome, r.Reason, r.Polls)
	}
}

// BenchmarkWaitFreeDetection measures how long after a holder dies
// wait-free reports the GPU free, with the default interval and the
// fake's 70 ms release delay measured on the H200 (target: about 150 ms).
func BenchmarkWaitFreeDetection(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		h := newHost(b, 1)
		h.fake.ReleaseDelay = "70ms"
		h.save()
		p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "10850")
		var killed time.Time
		waitPollHook = func(n int) {
			if n == 1 {
				killed = time.Now()
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		b.StartTimer()
		r, err := WaitFree(context.Background(), WaitFreeRequest{Config: h.cfg, Timeout: Duration(5 * time.Second)})
		b.StopTimer()
		waitPollHook = nil
		if err != nil || r.Outcome != WaitFreed {
			b.Fatalf("%v %+v", err, r)
		}
		total += time.Since(killed)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-freed")
}

// A failing --query-compute-apps at the end costs the holders' memory, and
// the reason says so instead of reporting 0 MiB as if known.
func TestWaitFreeAppsFailureIsNoted(t *testing.T) {
	h := newHost(t, 1)
	h.fake.Fault, h.fake.FaultOn = "fail", []string{"compute-apps"}
	h.save()
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "700")
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(200 * time.Millisecond)})
	// Without compute apps the holder is judged by what it maps: it maps
	// the device (a context), so it owns the GPU and holds it.
	if r.Outcome != WaitTimedOut || len(r.Holders) != 1 || r.Holders[0].PID != p.pid || !strings.Contains(r.Reason, "holders' memory unknown") || strings.Count(r.Reason, "holders' memory unknown") != 1 {
		t.Errorf("outcome %s holders %+v reason %q", r.Outcome, r.Holders, r.Reason)
	}
}

// countingSMI wraps the host's nvidia-smi in a script that logs each
// query form it is run with, and returns the config using it and the log.
func countingSMI(t *testing.T, h *host) (Config, func() (gpu, apps int)) {
	t.Helper()
	log := filepath.Join(h.dir, "smi-calls.log")
	wrap := filepath.Join(h.dir, "counting", "nvidia-smi")
	if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"${1%%=*}\" >> '" + log + "'\nexec '" + h.smi + "' \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := h.cfg
	cfg.NvidiaSMI = wrap
	return cfg, func() (int, int) {
		b, _ := os.ReadFile(log)
		os.Remove(log)
		text := string(b)
		return strings.Count(text, "--query-gpu\n"), strings.Count(text, "--query-compute-apps\n")
	}
}

// While a worker the listing has judged holds the GPU, a poll runs
// nvidia-smi once; compute apps are read again only every appsRefresh
// polls. A monitor, once judged, costs nothing more either. Without the
// memory stream (with it, polls run no --query-gpu at all: see
// TestWaitFreeStreamMemoryReplacesQuery).
func TestWaitFreeSMIRunsPerPoll(t *testing.T) {
	old := memStreamPeriod
	memStreamPeriod = 0
	t.Cleanup(func() { memStreamPeriod = old })
	h := newHost(t, 1)
	cfg, calls := countingSMI(t, h)
	h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidia-uvm"), "--mem-mib", "5000")
	h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	r := waitFree(t, WaitFreeRequest{Config: cfg, Timeout: Duration(time.Second), Interval: Duration(20 * time.Millisecond)})
	gpu, apps := calls()
	if r.Outcome != WaitTimedOut || gpu != r.Polls {
		t.Fatalf("outcome %s polls %d, query-gpu runs %d", r.Outcome, r.Polls, gpu)
	}
	if max := 1 + r.Polls/appsRefresh; apps > max || apps < 1 {
		t.Errorf("%d polls ran compute apps %d times, want 1..%d", r.Polls, apps, max)
	}
	t.Logf("%d polls: %d query-gpu, %d compute-apps runs", r.Polls, gpu, apps)
}

// Waiting for given holders: bob's worker goes while alice's stays on the
// same GPU; the wait ends released (not free: alice holds it), on the GPU
// bob's worker held, naming nothing of alice's. A given worker that lives
// on is named per GPU with its memory when the deadline passes.
func TestWaitFreeGivenHolders(t *testing.T) {
	h := newHost(t, 2)
	h.fake.ReleaseDelay = "50ms"
	h.save()
	h.cfg.SMITimeout = Duration(time.Minute) // a loaded machine is slow, not wrong
	bob := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "2000")
	alice := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "3000")
	withHook(t, func(n int) {
		if n == 2 {
			syscall.Kill(bob.pid, syscall.SIGKILL)
		}
	})
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, Holders: []Identity{identity(t, bob.pid)}, Timeout: Duration(10 * time.Second),
		Interval: Duration(50 * time.Millisecond)})
	if r.Outcome != WaitReleased || !r.OK || r.Polls < 3 || len(r.Holders) != 0 {
		t.Fatalf("outcome %s ok %v polls %d holders %+v reason %q", r.Outcome, r.OK, r.Polls, r.Holders, r.Reason)
	}
	if len(r.Status) != 1 || r.Status[0].Index != 1 || r.Status[0].State != GPUHeld || len(r.Status[0].Waiting) != 0 ||
		!slices.Equal(r.Status[0].Owners, []int{alice.pid}) {
		t.Errorf("status %+v: want GPU 1 only, held by alice, nothing waited for", r.Status)
	}
	if first := r.Timeline[0]; first.UsedMiB[1] != 5000 {
		t.Errorf("first sample %+v", first)
	}
	withHook(t, func(int) {})

	// alice's worker is given and lives on: timed out, named with its memory on GPU 1.
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, Holders: []Identity{identity(t, alice.pid)}, Timeout: Duration(300 * time.Millisecond),
		Interval: Duration(50 * time.Millisecond)})
	want := "GPU 1: still held by " + Label(alice.pid, "gpu-holder", alice.cmd.Args) + " 3000 MiB"
	if r.OK || r.Outcome != WaitTimedOut || r.Reason != want || len(r.Holders) != 1 || !slices.Equal(r.Status[0].Waiting, []int{alice.pid}) {
		t.Errorf("outcome %s reason %q (want %q) holders %d status %+v", r.Outcome, r.Reason, want, len(r.Holders), r.Status)
	}

	// A given identity whose pid now names another process (start time
	// differs) is gone already: released at the first poll. Which GPUs it
	// held nobody can say now, so every GPU's state is reported.
	old := identity(t, alice.pid)
	old.StartTime--
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, Holders: []Identity{old}, Timeout: Duration(5 * time.Second)})
	if !r.OK || r.Outcome != WaitReleased || r.Polls != 1 || len(r.GPUs) != 2 || len(r.Status) != 2 {
		t.Errorf("reused pid: outcome %s polls %d gpus %+v reason %q", r.Outcome, r.Polls, r.GPUs, r.Reason)
	}
}

// A given worker killed while its forked child keeps the device files (and
// so its memory, charged to the dead pid) open is not released: the memory
// is still charged to it.
func TestWaitFreeGivenHolderGhost(t *testing.T) {
	h := newHost(t, 1)
	h.cfg.SMITimeout = Duration(time.Minute)
	p := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "4000", "--keeper")
	id := identity(t, p.pid)
	syscall.Kill(p.pid, syscall.SIGKILL)
	r := waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{0}, Holders: []Identity{id}, Timeout: Duration(400 * time.Millisecond),
		Interval: Duration(50 * time.Millisecond)})
	want := "GPU 0: still held by pid " + strconv.Itoa(p.pid)
	if r.OK || r.Outcome != WaitTimedOut || !strings.HasPrefix(r.Reason, want) || !strings.Contains(r.Reason, "is gone but 4000 MiB is still charged to it") ||
		!slices.Equal(r.Status[0].Waiting, []int{p.pid}) {
		t.Errorf("outcome %s reason %q status %+v", r.Outcome, r.Reason, r.Status)
	}
	// The keeper goes too: released.
	syscall.Kill(p.child, syscall.SIGKILL)
	r = waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{0}, Holders: []Identity{id}, Timeout: Duration(5 * time.Second)})
	if !r.OK || r.Outcome != WaitReleased {
		t.Errorf("after the keeper: outcome %s reason %q", r.Outcome, r.Reason)
	}
}

// A wait whose GPU is free at once, watched by a monitor (its device open,
// nothing mapped): the first poll reads the GPUs from the stream started
// with the wait and needs no listing, since the monitor maps no device, so
// the whole wait runs one nvidia-smi process. Without the stream the same
// wait runs --query-gpu, and still no --query-compute-apps.
func TestWaitFreeFirstPollFromStream(t *testing.T) {
	h := newHost(t, 1)
	old := memStreamStall
	memStreamStall = 20 * time.Second // a loaded machine starts the stream late, not never
	t.Cleanup(func() { memStreamStall = old })
	pids := streamPIDs(t)
	cfg, calls := countingSMI(t, h)
	mon := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	r := waitFree(t, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)})
	if r.Outcome != WaitFreed || r.Polls != 1 || len(r.GPUs) != 1 || r.GPUs[0].UUID == "" || r.GPUs[0].MemTotalMiB <= 0 {
		t.Fatalf("outcome %s polls %d gpus %+v reason %q", r.Outcome, r.Polls, r.GPUs, r.Reason)
	}
	if gpu, apps := calls(); gpu != 0 || apps != 0 || len(pids()) != 1 {
		t.Errorf("%d --query-gpu, %d --query-compute-apps, %d streams: want the stream alone", gpu, apps, len(pids()))
	}
	checkReaped(t, pids())

	memStreamPeriod, old = 0, memStreamPeriod
	t.Cleanup(func() { memStreamPeriod = old })
	r = waitFree(t, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)})
	if gpu, apps := calls(); r.Outcome != WaitFreed || gpu != 1 || apps != 0 {
		t.Errorf("without the stream: outcome %s, %d --query-gpu, %d --query-compute-apps", r.Outcome, gpu, apps)
	}
	if !alive(mon.pid) {
		t.Error("the monitor died")
	}
}

// Skipping the listing never frees a GPU an owner holds: with a threshold
// above the worker's memory, the GPU reads under it, but the worker maps
// its device (a context), so the listing is read and names it the owner.
func TestWaitFreeMappedHolderNeedsListing(t *testing.T) {
	h := newHost(t, 1)
	cfg, calls := countingSMI(t, h)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "5000")
	th := int64(20000)
	r := waitFree(t, WaitFreeRequest{Config: cfg, ThresholdMiB: &th, Timeout: Duration(300 * time.Millisecond), Interval: Duration(50 * time.Millisecond)})
	if r.OK || r.Outcome != WaitTimedOut || len(r.Status) != 1 || r.Status[0].State != GPUHeld || !slices.Equal(r.Status[0].Owners, []int{p.pid}) {
		t.Fatalf("outcome %s status %+v reason %q: the worker must hold the GPU", r.Outcome, r.Status, r.Reason)
	}
	if _, apps := calls(); apps < 1 {
		t.Errorf("no --query-compute-apps run: the worker was not judged")
	}
}
