package helper

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// countSystemctl puts a script in front of systemctl that logs each run's
// arguments, and returns a function that reads them back.
func countSystemctl(t *testing.T, cfg *Config, dir string) func() []string {
	t.Helper()
	log := filepath.Join(dir, "systemctl-runs.log")
	script := filepath.Join(dir, "counting-systemctl")
	body := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %s\nexec %s \"$@\"\n", log, cfg.Systemctl)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Systemctl = script
	return func() []string {
		b, _ := os.ReadFile(log)
		os.Remove(log)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

// set sets one field of a unit in the fake's config.
func (h *systemdHost) set(unit, key string, v any) {
	h.t.Helper()
	h.units[unit][key] = v
	b, err := json.Marshal(map[string]any{"units": h.units, "cgroup_base": h.base})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(h.systemctl), "fake-systemctl.json"), b, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// wantRuns checks the verbs and units of the systemctl runs of one request.
func wantRuns(t *testing.T, runs []string, want ...string) {
	t.Helper()
	var got []string
	for _, r := range runs {
		f := strings.Fields(r)
		if len(f) == 0 {
			continue
		}
		_, units, _ := strings.Cut(r, "-- ")
		got = append(got, f[0]+" "+units)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("systemctl runs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// batchStop is the requests both batch tests make: first a list with a
// unit that does not exist, which stops none of it (one show, no stop);
// then without it: a unit that leaves a worker on GPU 0, one that refuses
// the stop (its holder keeps GPU 2), one that stops clean.
func batchStop(t *testing.T, cfg Config) *UnitResponse {
	t.Helper()
	r, err := Unit(context.Background(), UnitRequest{Config: cfg, Action: UnitStop,
		Units: []string{"lefty", "gone.service", "refuser.service", "clean", "gone2"}, Timeout: Duration(20 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	refusal := "no unit of the list was stopped: units gone.service, gone2.service are not found"
	if r.OK || r.Reason != refusal || len(r.Units) != 5 {
		b, _ := json.MarshalIndent(r, "", " ")
		t.Fatalf("a list with missing units: %s", b)
	}
	for i, u := range r.Units {
		want := refusal
		if i == 1 || i == 4 {
			want = "unit " + u.Unit + " not found"
		} else if u.ActiveState != "active" || len(u.Remaining) != 0 {
			t.Errorf("unit %s must not be acted on: %+v", u.Unit, u)
		}
		if u.OK || u.Reason != want || (u.Unknown() != "") != (i == 1 || i == 4) {
			t.Errorf("unit %d: %+v, want reason %q", i, u, want)
		}
	}
	r, err = Unit(context.Background(), UnitRequest{Config: cfg, Action: UnitStop,
		Units: []string{"lefty", "refuser.service", "clean"}, Timeout: Duration(20 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkBatchStop checks each unit's result of batchStop: its own truth,
// whatever the others did.
func checkBatchStop(t *testing.T, r *UnitResponse, worker int, refuser []int) {
	t.Helper()
	if r.OK || !r.Systemd || r.Unit != "" || r.Reason != "2 of 3 units not ok" || len(r.Units) != 3 {
		b, _ := json.MarshalIndent(r, "", " ")
		t.Fatalf("batch: %s", b)
	}
	lefty, ref, clean := r.Units[0], r.Units[1], r.Units[2]
	for i, n := range []string{"lefty.service", "refuser.service", "clean.service"} {
		if u := r.Units[i]; u.Unit != n || u.Action != UnitStop || !u.Systemd {
			t.Errorf("unit %d: %s %s systemd=%v, want %s stop", i, u.Unit, u.Action, u.Systemd, n)
		}
	}
	if lefty.OK || lefty.ActiveState != "inactive" || len(lefty.Remaining) != 1 || lefty.Remaining[0].PID != worker ||
		fmt.Sprint(holderPIDs(lefty.GPUHolders)) != fmt.Sprint([]int{worker}) ||
		!strings.HasPrefix(lefty.Reason, "after stop: state inactive, 1 processes left in the cgroup, 1 GPU holders of the unit") ||
		strings.Contains(lefty.Reason, "refuser") {
		t.Errorf("lefty (leaves its worker): %+v", lefty)
	}
	if ref.OK || ref.ActiveState != "active" || !strings.Contains(ref.Reason, "Failed to stop refuser.service: Operation refused") ||
		strings.Contains(ref.Reason, "lefty.service:") || fmt.Sprint(holderPIDs(ref.GPUHolders)) != fmt.Sprint(refuser) {
		t.Errorf("refuser (refuses the stop): %+v", ref)
	}
	if !clean.OK || clean.Reason != "" || clean.ActiveState != "inactive" || len(clean.Remaining) != 0 || len(clean.GPUHolders) != 0 {
		t.Errorf("clean (stops clean): %+v", clean)
	}
}

// Several units in one request with the lab's systemctl: one show before,
// one stop of the known units, one show after, and each unit's own truth.
func TestUnitStopBatch(t *testing.T) {
	h := newSystemdHost(t, 4)
	h.addUnit("lefty.service", "process", holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "1024", "--child-mem-mib", "4096")
	h.addUnit("clean.service", "control-group", holderBin, "--dev", h.d("nvidia1"), "--mem-mib", "2048")
	h.addUnit("refuser.service", "control-group", holderBin, "--dev", h.d("nvidia2"), "--mem-mib", "512")
	h.set("refuser.service", "refuse_manual_stop", true)
	runs := countSystemctl(t, &h.cfg, h.dir)
	st, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: UnitStart, Units: []string{"lefty", "clean", "refuser"}})
	if err != nil || !st.OK || len(st.Units) != 3 {
		t.Fatalf("start: %+v %v", st, err)
	}
	wantRuns(t, runs(), "show lefty.service clean.service refuser.service", "start lefty.service clean.service refuser.service",
		"show lefty.service clean.service refuser.service")
	worker := h.ready("lefty.service", 2)[1]
	h.ready("clean.service", 1)
	refuser := h.ready("refuser.service", 1)

	checkBatchStop(t, batchStop(t, h.cfg), worker, refuser)
	wantRuns(t, runs(), "show lefty.service gone.service refuser.service clean.service gone2.service",
		"show lefty.service refuser.service clean.service",
		"stop lefty.service refuser.service clean.service", "show lefty.service refuser.service clean.service")

	// Status of several: one show, nothing acted on.
	s, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: UnitStatus, Units: []string{"clean", "refuser"}})
	if err != nil || !s.OK || s.Units[0].ActiveState != "inactive" || s.Units[1].ActiveState != "active" || len(s.Units[1].GPUHolders) != 1 {
		t.Errorf("status: %+v %v", s, err)
	}
	wantRuns(t, runs(), "show clean.service refuser.service")
}

// A batched stop cut off by its timeout: the unit that stopped in time is
// ok, the one still stopping says so with the timeout, each by its state.
func TestUnitStopBatchTimeout(t *testing.T) {
	h := newSystemdHost(t, 2)
	h.addUnit("quick.service", "control-group", holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "1024")
	h.addUnit("stuck.service", "control-group", holderBin, "--dev", h.d("nvidia1"), "--mem-mib", "1024", "--ignore-term")
	h.set("stuck.service", "stop_timeout", "60s")
	if st, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: UnitStart, Units: []string{"stuck", "quick"}}); err != nil || !st.OK {
		t.Fatalf("start: %+v %v", st, err)
	}
	h.ready("quick.service", 1)
	stuck := h.ready("stuck.service", 1)
	checkBatchTimeout(t, h.cfg, stuck)
}

// checkBatchTimeout stops stuck (which ignores TERM) and quick under a
// 2-second timeout.
func checkBatchTimeout(t *testing.T, cfg Config, stuck []int) {
	t.Helper()
	r, err := Unit(context.Background(), UnitRequest{Config: cfg, Action: UnitStop, Units: []string{"stuck", "quick"}, Timeout: Duration(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || len(r.Units) != 2 || r.Reason != "1 of 2 units not ok" {
		t.Fatalf("batch: %+v", r)
	}
	s, q := r.Units[0], r.Units[1]
	if s.OK || s.ActiveState == "inactive" || s.ActiveState == "failed" || fmt.Sprint(holderPIDs(s.GPUHolders)) != fmt.Sprint(stuck) ||
		!strings.HasPrefix(s.Reason, "after stop: state "+s.ActiveState) || !strings.Contains(s.Reason, "(systemctl stop of 2 units: ") {
		t.Errorf("stuck: %+v", s)
	}
	if !q.OK || q.ActiveState != "inactive" || len(q.GPUHolders) != 0 {
		t.Errorf("quick: %+v", q)
	}
	// End the stop job now: systemd would wait out the unit's stop timeout.
	for _, p := range stuck {
		syscall.Kill(p, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := Unit(context.Background(), UnitRequest{Config: cfg, Action: UnitStatus, Unit: "stuck"})
		if err == nil && (st.ActiveState == "inactive" || st.ActiveState == "failed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stuck still stopping 20s after its process was killed: %+v %v", st, err)
		}
	}
	reapSystemctl(t)
}

// reapSystemctl reaps the systemctl that the timeout orphaned: with the
// real systemd it ran inside the namespace (forked by nsenter, which the
// timeout killed), and this test binary, a subreaper, became its parent; its
// zombie would keep the namespace, and the test's systemd, from ending.
func reapSystemctl(t *testing.T) {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] != "Z" || f[1] != fmt.Sprint(os.Getpid()) || !strings.Contains(s[:i], "(systemctl") {
			continue
		}
		var pid int
		fmt.Sscan(s, &pid)
		if _, err := syscall.Wait4(pid, nil, syscall.WNOHANG, nil); err != nil {
			t.Errorf("reap systemctl %d: %v", pid, err)
		}
	}
}

// Requests the helper refuses before running anything.
func TestUnitBatchBadRequests(t *testing.T) {
	cfg := Config{Systemctl: "/nonexistent/systemctl"}
	for _, c := range []struct {
		req  UnitRequest
		want string
	}{
		{UnitRequest{Action: UnitStop, Units: []string{"a", "-b"}}, `units[1]: unit name "-b": must not start with '-'`},
		{UnitRequest{Action: UnitStop, Units: []string{"a", "b", "a.service"}}, `units[2]: unit "a.service" repeats units[0] (a.service)`},
		{UnitRequest{Action: UnitStop, Unit: "a", Units: []string{"b"}}, `unit "a" and units ["b"] both given`},
		{UnitRequest{Action: "kill", Units: []string{"a"}}, `unit action "kill"`},
	} {
		c.req.Config = cfg
		if _, err := Unit(context.Background(), c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.req, err, c.want)
		}
	}
}

func TestLinesNaming(t *testing.T) {
	out := []byte("Failed to stop b-a.service: Unit b-a.service not loaded.\nFailed to stop a.service: Operation refused.\nSee system logs and 'systemctl status a.service' for details.\nJob for aa.service canceled.\n")
	want := "Failed to stop a.service: Operation refused.\nSee system logs and 'systemctl status a.service' for details."
	if got := linesNaming(out, "a.service"); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := linesNaming(out, "c.service"); got != "" {
		t.Errorf("c.service: got %q", got)
	}
}

// The same with the real systemd: its show prints one block per unit in
// the order given, its stop acts on every unit it can and names the one it
// refused.
func TestRealSystemdStopBatch(t *testing.T) {
	h := newRealHost(t, 4)
	h.addUnit("lefty.service", []string{holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "1024", "--child-mem-mib", "4096"}, "KillMode=process")
	h.addUnit("clean.service", []string{holderBin, "--dev", h.d("nvidia1"), "--mem-mib", "2048"})
	h.addUnit("refuser.service", []string{holderBin, "--dev", h.d("nvidia2"), "--mem-mib", "512"}, "[Unit]", "RefuseManualStop=yes")
	runs := countSystemctl(t, &h.cfg, h.dir)
	if st, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: UnitStart, Units: []string{"lefty", "clean", "refuser"}}); err != nil || !st.OK {
		t.Fatalf("start: %+v %v", st, err)
	}
	worker := h.ready("lefty.service", 2)[1]
	h.ready("clean.service", 1)
	refuser := h.ready("refuser.service", 1)
	runs()
	checkBatchStop(t, batchStop(t, h.cfg), worker, refuser)
	wantRuns(t, runs(), "show lefty.service gone.service refuser.service clean.service gone2.service",
		"show lefty.service refuser.service clean.service",
		"stop lefty.service refuser.service clean.service", "show lefty.service refuser.service clean.service")
}

// Real systemd, a batched stop cut off by its timeout while one unit waits
// out its TimeoutStopSec: that one is still stopping, the other is ok.
func TestRealSystemdStopBatchTimeout(t *testing.T) {
	h := newRealHost(t, 2)
	h.addUnit("quick.service", []string{holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "1024"})
	h.addUnit("stuck.service", []string{holderBin, "--dev", h.d("nvidia1"), "--mem-mib", "1024", "--ignore-term"}, "TimeoutStopSec=30")
	if st, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: UnitStart, Units: []string{"stuck", "quick"}}); err != nil || !st.OK {
		t.Fatalf("start: %+v %v", st, err)
	}
	h.ready("quick.service", 1)
	stuck := h.ready("stuck.service", 1)
	checkBatchTimeout(t, h.cfg, stuck)
}
