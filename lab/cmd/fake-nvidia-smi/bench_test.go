package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
)

// cpuTime is the CPU (user+system) this process, or its waited-for
// children, used so far.
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newBenchH200 is an H200 host of two GPUs with the lab's release delay.
func newBenchH200(b *testing.B) *h200 {
	h := newH200(b)
	if err := os.WriteFile(h.dv("nvidia1"), nil, 0o666); err != nil {
		b.Fatal(err)
	}
	g := h.cfg.GPUs[0]
	g.Index, g.UUID, g.BusID = 1, "GPU-1", "00000000:00:07.0"
	h.cfg.GPUs = append(h.cfg.GPUs, g)
	h.cfg.ReleaseDelay = "70ms"
	h.save()
	return h
}

// nsHolders starts n claimants (real gpu-holders, half on each GPU) in a
// PID namespace of their own under a shell, as on an isolated lab host,
// and returns that namespace's /proc; the namespace is killed at the end
// (its init, the shell, by its pid).
func nsHolders(b *testing.B, h *h200, n int) string {
	if os.Geteuid() != 0 {
		b.Skip("a PID namespace needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatal("unshare (util-linux) is missing")
		}
		b.Skip("unshare (util-linux) is missing")
	}
	var script strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&script, "%s --dev %s --dev %s --mem-mib %d >/dev/null &\n", holderBin, h.dv("nvidia"+strconv.Itoa(i%2)), h.dv("nvidiactl"), i+1)
	}
	script.WriteString("wait\n")
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	initPID := func() int {
		p := cmd.Process.Pid
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(c)))
		return pid
	}
	b.Cleanup(func() {
		if pid := initPID(); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL) // the namespace's init: all in it die
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	for {
		if pid := initPID(); pid > 0 {
			procDir := fmt.Sprintf("/proc/%d/root/proc", pid)
			if ps, _ := labgpu.ScanClaims(procDir, h.dev); len(ps) == n {
				return procDir
			}
		}
		time.Sleep(10 * time.Millisecond) // until all are up (bounded by -timeout)
	}
}

// BenchmarkCost is the CPU of one stream period (in process: the scan,
// the state file, not the print) and of one one-shot run (the whole
// process: start, config, scan, state, answer), by full scans (a whole
// ScanClaims and a state rewrite each time) against the incremental way, in the
// same run, with 20 and 200 claimants besides every other process of the
// machine. view=host reads the holders' namespace's /proc (an isolated lab
// host: the claimants and a shell), view=machine the machine's (every
// process of every engineer besides). The ratios are new/old.
func BenchmarkCost(b *testing.B) {
	for _, n := range []int{20, 200} {
		for _, view := range []string{"host", "machine"} {
			b.Run(fmt.Sprintf("claimants=%d/view=%s", n, view), func(b *testing.B) {
				h := newBenchH200(b)
				procDir := nsHolders(b, h, n)
				if view == "host" {
					b.Setenv(procDirEnv, procDir)
				} else {
					procDir = "/proc"
				}
				procs, _ := os.ReadDir(procDir)
				b.ReportMetric(float64(len(procs)), "proc-entries")
				cfg, err := labgpu.LoadConfig(h.cfgAt)
				if err != nil {
					b.Fatal(err)
				}
				tick := func(full bool) time.Duration {
					ob, err := newObserver(h.cfgAt, cfg, full, false)
					if err != nil {
						b.Fatal(err)
					}
					defer ob.close()
					if st, err := ob.observe(); err != nil || st.used[0] == 0 {
						b.Fatalf("first reading: %+v %v", st, err)
					}
					start := cpuTime(syscall.RUSAGE_SELF)
					for i := 0; i < b.N; i++ {
						if _, err := ob.observe(); err != nil {
							b.Fatal(err)
						}
					}
					return (cpuTime(syscall.RUSAGE_SELF) - start) / time.Duration(b.N)
				}
				oneShot := func(full bool) time.Duration {
					env := append(os.Environ(), labgpu.ConfigEnv+"=")
					if full {
						env = append(env, fullScanEnv+"=1")
					}
					runs := max(b.N/20, 3) // a process costs ~100 ticks
					start := cpuTime(syscall.RUSAGE_CHILDREN)
					for i := 0; i < runs; i++ {
						cmd := exec.Command(h.smi, queryGPU, noUnits)
						cmd.Env = env
						if out, err := cmd.Output(); err != nil || len(out) == 0 {
							b.Fatalf("one-shot: %q %v", out, err)
						}
					}
					return (cpuTime(syscall.RUSAGE_CHILDREN) - start) / time.Duration(runs)
				}
				oldTick, newTick := tick(true), tick(false)
				oldRun, newRun := oneShot(true), oneShot(false)
				b.ReportMetric(float64(oldTick.Microseconds()), "old-tick-cpu-µs")
				b.ReportMetric(float64(newTick.Microseconds()), "new-tick-cpu-µs")
				b.ReportMetric(float64(newTick)/float64(oldTick), "tick-ratio")
				b.ReportMetric(float64(oldRun.Microseconds()), "old-run-cpu-µs")
				b.ReportMetric(float64(newRun.Microseconds()), "new-run-cpu-µs")
				b.ReportMetric(float64(newRun)/float64(oldRun), "run-ratio")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
