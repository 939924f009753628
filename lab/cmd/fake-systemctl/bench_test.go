package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labsystemd"
)

// baselineEnv names an older fake-systemctl binary to compare with, built
// from the commit before a change, e.g.
//
//	git worktree add /tmp/old <rev> && (cd /tmp/old && CGO_ENABLED=0 go build -o /tmp/old-systemctl ./lab/cmd/fake-systemctl)
//	FAKE_SYSTEMCTL_BASELINE=/tmp/old-systemctl go test -run - -bench RunCost ./lab/cmd/fake-systemctl/
const baselineEnv = "FAKE_SYSTEMCTL_BASELINE"

// BenchmarkRunCost reports the CPU (user+sys, from the run's own rusage) of
// the calls gpush's unit verb makes: `show -p` of the helper's properties
// on an active unit, and `stop` of an active control-group unit with a
// worker (the start between stops is not counted). With $FAKE_SYSTEMCTL_BASELINE
// the old binary runs alternately on the same host, and the ratios are new/old.
func BenchmarkRunCost(b *testing.B) {
	bins := map[string]string{"new": fakeBin}
	if old := os.Getenv(baselineEnv); old != "" {
		bins["old"] = old
	}
	h := newHost(b, map[string]labsystemd.Unit{})
	h.cfg.Units["w.service"] = labsystemd.Unit{Exec: h.holder("--child-mem-mib", "50"), StopTimeout: "10s"}
	if err := h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName)); err != nil {
		b.Fatal(err)
	}
	systemctl := filepath.Join(h.dir, "systemctl")
	use := func(bin string) {
		os.Remove(systemctl)
		if err := os.Link(bin, systemctl); err != nil {
			b.Fatal(err)
		}
	}
	cpu := func(args ...string) time.Duration {
		cmd := exec.Command(systemctl, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("systemctl %v: %v\n%s", args, err, out)
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	// A run that stops at its command line: the Go runtime's start and
	// exit, the floor under every verb.
	floor := func() time.Duration {
		cmd := exec.Command(systemctl)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no verb given") {
			b.Fatalf("systemctl without a verb: %v\n%s", err, out)
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	show := []string{"show", "-p", "LoadState", "-p", "ActiveState", "-p", "SubState", "-p", "MainPID", "-p", "ControlGroup", "-p", "Restart", "--", "w.service"}
	showCPU, stopCPU, floorCPU := map[string]time.Duration{}, map[string]time.Duration{}, map[string]time.Duration{}
	readies := 0
	for i := 0; i < b.N; i++ {
		for _, name := range []string{"new", "old"} {
			bin, ok := bins[name]
			if !ok {
				continue
			}
			use(bin)
			cpu("start", "w.service")
			readies += 2
			h.ready("w.service", readies)
			floorCPU[name] += floor()
			showCPU[name] += cpu(show...)
			stopCPU[name] += cpu("stop", "w.service")
		}
	}
	n := time.Duration(b.N)
	for name := range bins {
		b.ReportMetric(float64((floorCPU[name] / n).Microseconds()), name+"-floor-cpu-µs")
		b.ReportMetric(float64((showCPU[name] / n).Microseconds()), name+"-show-cpu-µs")
		b.ReportMetric(float64((stopCPU[name] / n).Microseconds()), name+"-stop-cpu-µs")
	}
	if _, ok := bins["old"]; ok {
		b.ReportMetric(float64(showCPU["new"])/float64(showCPU["old"]), "show-ratio")
		b.ReportMetric(float64(stopCPU["new"])/float64(stopCPU["old"]), "stop-ratio")
	}
	b.ReportMetric(0, "ns/op")
}
