package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cpuNow is this process's user+sys CPU time and that of its waited-for
// children (nvidia-smi runs), from getrusage.
func cpuNow(b *testing.B) (self, children time.Duration) {
	b.Helper()
	var s, c syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &s); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c); err != nil {
		b.Fatal(err)
	}
	return rusageCPU(&s), rusageCPU(&c)
}

func rusageCPU(r *syscall.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// cpuPer runs f reps times and returns the CPU time per run: this
// process's, and its children's (nvidia-smi) beside.
func cpuPer(b *testing.B, reps int, f func()) (self, children time.Duration) {
	s0, c0 := cpuNow(b)
	for i := 0; i < reps; i++ {
		f()
	}
	s1, c1 := cpuNow(b)
	return (s1 - s0) / time.Duration(reps), (c1 - c0) / time.Duration(reps)
}

// BenchmarkScanCache measures the helper's CPU per call on a host with
// GPUSH_BENCH_PROCS processes (e.g. 5000): real sleep processes plus a few
// holders of fake devices. It reports, in one run, the CPU time (getrusage,
// user+sys) of a /proc scan and of a whole snapshot, cold and warm, and of
// a one-shot `gpush-helper snapshot` process against a snapshot answered by
// a process that scanned once already (what a long-lived helper is).
//
//	GPUSH_BENCH_PROCS=5000 go test -run '^$' -bench BenchmarkScanCache -benchtime 1x ./helper/
func BenchmarkScanCache(b *testing.B) {
	want, _ := strconv.Atoi(os.Getenv("GPUSH_BENCH_PROCS"))
	if want <= 0 {
		b.Skip("set GPUSH_BENCH_PROCS (e.g. 5000) to start that many processes")
	}
	h := newHost(b, 2)
	for _, dev := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		h.start("", "--dev", h.d(dev), "--dev", h.d("nvidia-uvm"))
	}
	helperBin := filepath.Join(b.TempDir(), "gpush-helper")
	if out, err := exec.Command("go", "build", "-o", helperBin, "../cmd/gpush-helper").CombinedOutput(); err != nil {
		b.Fatalf("build gpush-helper: %v\n%s", err, out)
	}
	s, err := newScanner(h.cfg)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := s.proc.pids()
	if err != nil {
		b.Fatal(err)
	}
	if n := want - len(pids); n > 0 {
		startSleepers(b, n)
	}
	// Let the sleepers reach their sleep.
	time.Sleep(2 * time.Second)
	pids, _ = s.proc.pids()
	b.ResetTimer()

	const reps = 5
	uncached, _ := cpuPer(b, reps, func() {
		if _, _, err := s.scanFDsUncached(); err != nil {
			b.Fatal(err)
		}
	})
	cold, _ := cpuPer(b, reps, func() {
		dropScanCacheT(s)
		if _, _, err := s.scanFDs(); err != nil {
			b.Fatal(err)
		}
	})
	c := cacheFor(s)
	r0 := c.tableReads
	warm, _ := cpuPer(b, reps, func() {
		if _, _, err := s.scanFDs(); err != nil {
			b.Fatal(err)
		}
	})
	warmReads := float64(c.tableReads-r0) / reps

	// Snapshots without nvidia-smi: the helper's own CPU. The lab's fake
	// nvidia-smi scans /proc itself, so with it the numbers are the fake's.
	noSMI := h.cfg
	noSMI.NvidiaSMI = filepath.Join(h.dir, "absent")
	snap := func(cfg Config) func() {
		return func() {
			sn, err := TakeSnapshot(context.Background(), cfg)
			if err != nil || len(sn.Holders) < 3 {
				b.Fatalf("snapshot: %v, %d holders", err, len(sn.Holders))
			}
		}
	}
	snapCold, _ := cpuPer(b, reps, func() { dropScanCacheT(s); snap(noSMI)() })
	snapWarm, _ := cpuPer(b, reps, snap(noSMI))
	oneShot := oneShotCPU(b, helperBin, noSMI, reps)
	smiWarm, smiWarmChildren := cpuPer(b, reps, snap(h.cfg))
	smiOneShot := oneShotCPU(b, helperBin, h.cfg, reps)

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	ratio := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	b.ReportMetric(float64(len(pids)), "procs")
	b.ReportMetric(ms(uncached), "uncached-scan-cpu-ms")
	b.ReportMetric(ms(cold), "cold-scan-cpu-ms")
	b.ReportMetric(ms(warm), "warm-scan-cpu-ms")
	b.ReportMetric(ratio(warm, cold), "warm/cold-scan")
	b.ReportMetric(ms(oneShot), "oneshot-snapshot-cpu-ms")
	b.ReportMetric(ms(snapWarm), "warm-snapshot-cpu-ms")
	b.ReportMetric(ratio(snapWarm, oneShot), "warm/oneshot-snapshot")
	b.Logf("%d processes, CPU (user+sys, getrusage) per call, mean of %d:", len(pids), reps)
	b.Logf("  scan      uncached (before the cache) %8.2f ms", ms(uncached))
	b.Logf("  scan      cold (cache empty)          %8.2f ms", ms(cold))
	b.Logf("  scan      warm                        %8.2f ms  warm/cold %.3f  warm/uncached %.3f  fd tables read %.0f of %d", ms(warm), ratio(warm, cold), ratio(warm, uncached), warmReads, len(pids))
	b.Logf("  snapshot  in process, cold           %8.2f ms  (no nvidia-smi)", ms(snapCold))
	b.Logf("  snapshot  in process, warm           %8.2f ms  (no nvidia-smi)", ms(snapWarm))
	b.Logf("  snapshot  one-shot gpush-helper      %8.2f ms  (no nvidia-smi)  warm/one-shot %.3f", ms(oneShot), ratio(snapWarm, oneShot))
	b.Logf("  with the lab's fake nvidia-smi: warm %.2f ms + its nvidia-smi runs %.2f ms; one-shot with them %.2f ms", ms(smiWarm), ms(smiWarmChildren), ms(smiOneShot))
}

// oneShotCPU runs `gpush-helper snapshot` reps times and returns the CPU
// time of one run: wait4's rusage, the helper's own and that of the
// children it waited for (nvidia-smi).
func oneShotCPU(b *testing.B, bin string, cfg Config, reps int) time.Duration {
	b.Helper()
	req, err := json.Marshal(SnapshotRequest{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := 0; i < reps; i++ {
		cmd := exec.Command(bin, "snapshot")
		cmd.Stdin = bytes.NewReader(req)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("gpush-helper snapshot: %v\n%.2000s", err, out.String())
		}
		total += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	return total / time.Duration(reps)
}
