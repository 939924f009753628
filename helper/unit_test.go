package helper

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/nssystemd"
)

// fakeSystemctlBin is lab/cmd/fake-systemctl, built on first use.
var fakeSystemctlBin string

// systemdHost is a test host whose systemctl is the lab's stand-in: units
// run in real cgroups (the config is written here by hand, as for the fake
// nvidia-smi: the helper must not depend on the lab's code).
type systemdHost struct {
	*host
	systemctl string
	base      string // cgroup base of this host's units
	units     map[string]map[string]any
}

// cgroupHierarchies are the mounted cgroup trees that can hold a unit here.
func cgroupHierarchies() []string {
	var out []string
	for _, sub := range []string{"", "unified", "systemd"} {
		d := filepath.Join(cgroupRoot, sub)
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			out = append(out, d)
		}
	}
	return out
}

func newSystemdHost(t *testing.T, nGPU int) *systemdHost {
	t.Helper()
	base := fmt.Sprintf("/gpush-test/helper-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	hs := cgroupHierarchies()
	if len(hs) == 0 {
		t.Skipf("skipping, needs cgroupfs under %s (root with a read-write cgroupfs, as in CI)", cgroupRoot)
	}
	for _, hier := range hs {
		probe := filepath.Join(hier, base)
		if err := os.MkdirAll(probe, 0o755); err != nil {
			t.Skipf("skipping, needs writable cgroups (root with a read-write cgroupfs, as in CI): %v", err)
		}
	}
	t.Cleanup(func() { removeCgroupTree(t, hs, base) })
	if fakeSystemctlBin == "" {
		out := filepath.Join(filepath.Dir(holderBin), "fake-systemctl")
		cmd := exec.Command("go", "build", "-o", out, "../lab/cmd/fake-systemctl")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build fake-systemctl: %v\n%s", err, b)
		}
		fakeSystemctlBin = out
	}
	h := &systemdHost{host: newHost(t, nGPU), base: base, units: map[string]map[string]any{}}
	h.systemctl = filepath.Join(h.dir, "systemd", "systemctl")
	if err := os.MkdirAll(filepath.Dir(h.systemctl), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fakeSystemctlBin, h.systemctl); err != nil {
		t.Fatal(err)
	}
	h.cfg.Systemctl = h.systemctl
	return h
}

// removeCgroupTree kills what is left in base and removes its cgroups.
func removeCgroupTree(t *testing.T, hs []string, base string) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var live []int
		for _, hier := range hs {
			for _, p := range cgroupProcs(filepath.Join(hier, base)) {
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil && parseStatState(b) != "Z" {
					live = append(live, p)
				}
			}
		}
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left in cgroup %s: %v", base, live)
			break
		}
		for _, p := range live {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	for _, hier := range hs {
		var dirs []string
		filepath.WalkDir(filepath.Join(hier, base), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil {
				t.Errorf("remove cgroup %s: %v", dirs[i], err)
			}
		}
		unix.Rmdir(filepath.Join(hier, filepath.Dir(base))) // shared parent; busy while another test runs
	}
}

func parseStatState(b []byte) string {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// addUnit writes the unit into the fake's config.
func (h *systemdHost) addUnit(name, killMode string, argv ...string) {
	h.units[name] = map[string]any{"exec": argv, "kill_mode": killMode, "stop_timeout": "2s"}
	b, err := json.Marshal(map[string]any{"units": h.units, "cgroup_base": h.base})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(h.systemctl), "fake-systemctl.json"), b, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// ready waits for n "ready PID" lines in the unit's output.
func (h *systemdHost) ready(unit string, n int) []int {
	h.t.Helper()
	logPath := filepath.Join(filepath.Dir(h.systemctl), "state", unit+".log")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		pids := labgpu.ReadyPIDs(string(b))
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: %d of %d ready lines after 30s:\n%s", unit, len(pids), n, b)
		}
	}
}

func (h *systemdHost) unit(action, unit string) *UnitResponse {
	h.t.Helper()
	r, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: action, Unit: unit, Timeout: Duration(20 * time.Second)})
	if err != nil {
		h.t.Fatalf("unit %s %s: %v", action, unit, err)
	}
	return r
}

func holderPIDs(hs []Holder) []int {
	var out []int
	for _, h := range hs {
		out = append(out, h.PID)
	}
	slices.Sort(out)
	return out
}

// A service with KillMode=process: the stop ends its main process, its
// worker keeps the GPU and stays in the unit's cgroup; the unit verb lists
// it as remaining and as a GPU holder of the unit, and the snapshot names
// the unit. Once the worker is killed, status is clean.
func TestUnitStopLeavesLeftovers(t *testing.T) {
	h := newSystemdHost(t, 2)
	const name = "sglang-qwen.service"
	h.addUnit(name, "process", holderBin, "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "2048", "--child-mem-mib", "8192")
	if r := h.unit(UnitStart, "sglang-qwen"); !r.OK || !r.Systemd || r.ActiveState != "active" || r.MainPID <= 0 || r.ControlGroup != h.base+"/system.slice/"+name {
		t.Fatalf("start: %+v", r)
	}
	pids := h.ready(name, 2)
	main, worker := pids[0], pids[1]

	st := h.unit(UnitStatus, name)
	if !st.OK || st.MainPID != main || fmt.Sprint(holderPIDs(st.GPUHolders)) != fmt.Sprint([]int{main, worker}) || len(st.Remaining) != 2 {
		t.Errorf("status: %+v", st)
	}
	snap, err := TakeSnapshot(context.Background(), h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if x := findHolder(snap, p); x == nil || x.Unit != name || !inCgroup(x.Cgroup, st.ControlGroup) {
			t.Errorf("holder %d: %+v, want unit %s", p, x, name)
		}
	}

	r := h.unit(UnitStop, name)
	if r.OK || r.ActiveState != "inactive" || r.MainPID != 0 || r.ControlGroup == "" {
		t.Errorf("stop: %+v", r)
	}
	if len(r.Remaining) != 1 || r.Remaining[0].PID != worker || r.Remaining[0].State == "Z" {
		t.Errorf("remaining: %+v, want worker %d", r.Remaining, worker)
	}
	if len(r.GPUHolders) != 1 || r.GPUHolders[0].PID != worker || r.GPUHolders[0].Unit != name || r.GPUHolders[0].MemMiB != 8192 || fmt.Sprint(r.GPUHolders[0].GPUs) != "[0]" {
		t.Errorf("gpu holders: %+v", r.GPUHolders)
	}
	if !strings.Contains(r.Reason, "1 processes left in the cgroup, 1 GPU holders of the unit") {
		t.Errorf("reason %q", r.Reason)
	}

	k, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{r.GPUHolders[0].Identity}, Grace: Duration(2 * time.Second)})
	if err != nil || len(k.Results) != 1 || k.Results[0].Outcome != OutcomeExited {
		t.Fatalf("kill the leftover: %+v %v", k, err)
	}
	if after := h.unit(UnitStatus, name); !after.OK || after.ActiveState != "inactive" || len(after.Remaining) != 0 || len(after.GPUHolders) != 0 || after.ControlGroup != "" {
		t.Errorf("status after the kill: %+v", after)
	}
	// A stopped unit stops again cleanly.
	if again := h.unit(UnitStop, name); !again.OK {
		t.Errorf("second stop: %+v", again)
	}
}

// KillMode=control-group: the stop alone frees the GPU.
func TestUnitStopControlGroup(t *testing.T) {
	h := newSystemdHost(t, 1)
	const name = "vllm-embed.service"
	h.addUnit(name, "control-group", holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "1024", "--child-mem-mib", "4096")
	if r := h.unit(UnitRestart, name); !r.OK {
		t.Fatalf("restart of a stopped unit: %+v", r)
	}
	pids := h.ready(name, 2)
	r := h.unit(UnitStop, name)
	if !r.OK || r.ActiveState != "inactive" || len(r.Remaining) != 0 || len(r.GPUHolders) != 0 || r.Reason != "" {
		t.Errorf("stop: %+v", r)
	}
	snap, err := TakeSnapshot(context.Background(), h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if x := findHolder(snap, p); x != nil {
			t.Errorf("pid %d still holds a GPU after the stop: %+v", p, x)
		}
	}
	// An unknown unit is not "stopped": it is not there.
	if u := h.unit(UnitStop, "nope"); u.OK || u.Reason != "unit nope.service not found" || u.LoadState != "not-found" {
		t.Errorf("stop of an unknown unit: %+v", u)
	}
}

// gpush_systemctl overrides the systemd check; a bad path is a reason, not
// a run of something else.
func TestUnitSystemctlOverride(t *testing.T) {
	old := systemdRunDir
	systemdRunDir = filepath.Join(t.TempDir(), "no-systemd")
	t.Cleanup(func() { systemdRunDir = old })
	dir := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "absent"), "no such file"},
		{dir, "not an executable file"},
	} {
		r, err := Unit(context.Background(), UnitRequest{Config: Config{Systemctl: tc.path}, Action: UnitStatus, Unit: "x"})
		if err != nil || r.Systemd || !strings.Contains(r.Reason, "gpush_systemctl") || !strings.Contains(r.Reason, tc.want) {
			t.Errorf("%s: %+v %v", tc.path, r, err)
		}
	}
	// A script standing in for systemctl: used although /run/systemd/system is absent.
	sc := filepath.Join(dir, "systemctl")
	os.WriteFile(sc, []byte("#!/bin/sh\necho MainPID=0\necho ControlGroup=\necho LoadState=loaded\necho ActiveState=inactive\necho SubState=dead\n"), 0o755)
	r, err := Unit(context.Background(), UnitRequest{Config: Config{Systemctl: sc, ProcDir: "/proc"}, Action: UnitStatus, Unit: "x"})
	if err != nil || !r.Systemd || !r.OK || r.ActiveState != "inactive" || r.SubState != "dead" {
		t.Errorf("override: %+v %v", r, err)
	}
}

// Hybrid hosts have a unit in the unified and the name=systemd trees;
// members of either count, once.
func TestUnitCgroupProcsHybrid(t *testing.T) {
	root := t.TempDir()
	cg := "/system.slice/a.service"
	for sub, procs := range map[string]string{"unified": "1\n2\n", "systemd": "2\n3\n"} {
		d := filepath.Join(root, sub, cg)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(procs), 0o644)
	}
	got := unitCgroupProcs(root, cg)
	slices.Sort(got)
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("hybrid: %v", got)
	}
	// Pure v2: the unit right under the root.
	v2 := t.TempDir()
	os.MkdirAll(filepath.Join(v2, cg), 0o755)
	os.WriteFile(filepath.Join(v2, cg, "cgroup.procs"), []byte("7\n"), 0o644)
	if got := unitCgroupProcs(v2, cg); fmt.Sprint(got) != "[7]" {
		t.Errorf("v2: %v", got)
	}
	if unitCgroupProcs(v2, "/system.slice/absent.service") != nil {
		t.Error("absent: want nil")
	}
	// An existing but empty cgroup is an empty list, not nil (no /proc scan).
	os.MkdirAll(filepath.Join(v2, "e"), 0o755)
	os.WriteFile(filepath.Join(v2, "e", "cgroup.procs"), nil, 0o644)
	if got := unitCgroupProcs(v2, "/e"); got == nil || len(got) != 0 {
		t.Errorf("empty: %#v", got)
	}
}

// realHost is a test host driven by the machine's real systemd, booted as
// PID 1 of a private PID+mount namespace (lab/nssystemd). Units write their
// output to a log in the test's folder; pids they print are namespace pids.
type realHost struct {
	*host
	sd *nssystemd.Systemd
}

// newRealHost boots systemd for t. In CI (CI=true) a failure to boot fails
// the test; elsewhere only a missing root skips it.
func newRealHost(t *testing.T, nGPU int) *realHost {
	t.Helper()
	if why := nssystemd.Available(); why != "" {
		if os.Getenv("CI") == "true" || os.Geteuid() == 0 {
			t.Fatalf("real systemd: %s", why)
		}
		t.Skip("skipping: " + why)
	}
	h := &realHost{host: newHost(t, nGPU)}
	sd, err := nssystemd.Boot(context.Background(), nssystemd.Options{Dir: t.TempDir(), Share: []string{h.dir, filepath.Dir(holderBin)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sd.Stop(); err != nil {
			t.Error(err)
		}
	})
	h.sd = sd
	h.cfg.Systemctl = sd.Systemctl
	return h
}

// addUnit writes a service running argv; extra are more [Service] lines.
func (h *realHost) addUnit(name string, argv []string, extra ...string) {
	h.t.Helper()
	body := "[Unit]\nDescription=gpush test " + name + "\n[Service]\nExecStart=" + strings.Join(argv, " ") + "\n" +
		"StandardOutput=append:" + h.logPath(name) + "\nStandardError=inherit\n" + strings.Join(extra, "\n") + "\n"
	if err := h.sd.WriteUnit(context.Background(), name, body); err != nil {
		h.t.Fatal(err)
	}
}

func (h *realHost) logPath(unit string) string { return filepath.Join(h.dir, unit+".log") }

// ready waits for n "ready PID" lines and returns their host pids.
func (h *realHost) ready(unit string, n int) []int {
	h.t.Helper()
	return h.readyAfter(unit, 0, n)
}

// readyAfter waits for n "ready PID" lines after the first skip (those of
// processes that may be gone) and returns their host pids.
func (h *realHost) readyAfter(unit string, skip, n int) []int {
	h.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(h.logPath(unit))
		ns := labgpu.ReadyPIDs(string(b))
		if len(ns) >= skip+n {
			var out []int
			for _, p := range ns[skip : skip+n] {
				hp := h.sd.HostPID(p)
				if hp == 0 {
					h.t.Fatalf("%s: namespace pid %d has no host pid in %s", unit, p, h.sd.CgroupBase)
				}
				out = append(out, hp)
			}
			return out
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: %d of %d ready lines after 30s:\n%s\nsystemd console:\n%s", unit, len(ns), skip+n, b, readFile(h.sd.Log))
		}
	}
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

func (h *realHost) unit(action, unit string) *UnitResponse {
	h.t.Helper()
	r, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: action, Unit: unit, Timeout: Duration(20 * time.Second)})
	if err != nil {
		h.t.Fatalf("unit %s %s: %v", action, unit, err)
	}
	return r
}

// Real systemd, KillMode=process: the stop TERMs the main process only; the
// worker it forked keeps GPU 0 and stays in the unit's cgroup, and the unit
// verb says so (Remaining, GPUHolders, host pids). Killing the worker by
// identity leaves the unit clean.
func TestRealSystemdKillModeProcess(t *testing.T) {
	h := newRealHost(t, 2)
	const name = "sglang-qwen.service"
	h.addUnit(name, []string{holderBin, "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "2048", "--child-mem-mib", "8192"}, "KillMode=process")
	st := h.unit(UnitStart, "sglang-qwen")
	if !st.OK || st.LoadState != "loaded" || st.Restart != "no" || st.ActiveState != "active" || st.ControlGroup != h.sd.CgroupBase+"/system.slice/"+name {
		t.Fatalf("start: %+v", st)
	}
	pids := h.ready(name, 2)
	main, worker := pids[0], pids[1]
	if got := h.sd.HostPID(st.MainPID); got != main {
		t.Errorf("MainPID %d is host pid %d, want the main holder %d", st.MainPID, got, main)
	}
	snap, err := TakeSnapshot(context.Background(), h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if x := findHolder(snap, p); x == nil || x.Unit != name || !inCgroup(x.Cgroup, st.ControlGroup) {
			t.Errorf("holder %d: %+v, want one of unit %s", p, x, name)
		}
	}

	r := h.unit(UnitStop, name)
	if r.OK || r.ActiveState != "inactive" || r.LoadState != "loaded" || r.MainPID != 0 {
		t.Errorf("stop: %+v", r)
	}
	if len(r.Remaining) != 1 || r.Remaining[0].PID != worker {
		t.Errorf("remaining: %+v, want the worker %d", r.Remaining, worker)
	}
	if len(r.GPUHolders) != 1 || r.GPUHolders[0].PID != worker || r.GPUHolders[0].Unit != name || r.GPUHolders[0].MemMiB != 8192 || fmt.Sprint(r.GPUHolders[0].GPUs) != "[0]" {
		t.Errorf("gpu holders: %+v", r.GPUHolders)
	}
	if !strings.Contains(r.Reason, "1 processes left in the cgroup, 1 GPU holders of the unit") {
		t.Errorf("reason %q", r.Reason)
	}
	if labAlive(main) {
		t.Errorf("main process %d alive after the stop", main)
	}

	k, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{r.GPUHolders[0].Identity}, Grace: Duration(2 * time.Second)})
	if err != nil || len(k.Results) != 1 || k.Results[0].Outcome != OutcomeExited {
		t.Fatalf("kill the leftover: %+v %v", k, err)
	}
	if after := h.unit(UnitStatus, name); !after.OK || after.ActiveState != "inactive" || len(after.Remaining) != 0 || len(after.GPUHolders) != 0 {
		t.Errorf("status after the kill: %+v", after)
	}
	if again := h.unit(UnitStop, name); !again.OK {
		t.Errorf("second stop: %+v", again)
	}
}

// labAlive: pid exists and is not a zombie.
func labAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && parseStatState(b) != "Z"
}

// Real systemd, KillMode=control-group (the default): the stop alone ends
// main process and worker, and the GPU has no holder left.
func TestRealSystemdControlGroup(t *testing.T) {
	h := newRealHost(t, 1)
	const name = "vllm-embed.service"
	h.addUnit(name, []string{holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "1024", "--child-mem-mib", "4096"})
	if r := h.unit(UnitRestart, name); !r.OK || r.ActiveState != "active" {
		t.Fatalf("restart of a stopped unit: %+v", r)
	}
	pids := h.ready(name, 2)
	r := h.unit(UnitStop, name)
	if !r.OK || r.ActiveState != "inactive" || len(r.Remaining) != 0 || len(r.GPUHolders) != 0 || r.Reason != "" {
		t.Errorf("stop: %+v", r)
	}
	snap, err := TakeSnapshot(context.Background(), h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if x := findHolder(snap, p); x != nil || labAlive(p) {
			t.Errorf("pid %d alive or holding a GPU after the stop: %+v", p, x)
		}
	}
}

// Real systemd, Restart=always: the unit verb reports Restart= so that the
// caller knows the unit brings its workers back. systemd does bring back a
// worker that dies, and does not restart a unit that was stopped.
func TestRealSystemdRestartAlways(t *testing.T) {
	h := newRealHost(t, 1)
	const name = "trainer.service"
	h.addUnit(name, []string{holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "4096"}, "Restart=always", "RestartSec=100ms")
	st := h.unit(UnitStart, name)
	if !st.OK || st.Restart != "always" {
		t.Fatalf("start: %+v", st)
	}
	first := h.ready(name, 1)[0]
	// The worker dies (not through systemd): systemd starts a new one.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := h.readyAfter(name, 1, 1)[0]
	if second == first {
		t.Fatalf("no new worker after the kill")
	}
	// Killed through the helper while its unit is active: its parent is
	// systemd (no supervisor by pid), but the unit restarts it, and the
	// kill names the unit as what will bring it back.
	snap := snapshot(t, h.cfg)
	w := findHolder(snap, second)
	if w == nil {
		t.Fatalf("worker %d not a holder", second)
	}
	// With the worker of a unit that does not restart, killed in the same
	// request (one systemctl show for both units): only the first is named.
	const other = "oneshot-worker.service"
	h.addUnit(other, []string{holderBin, "--dev", h.d("nvidia0"), "--mem-mib", "1024"}, "Restart=no")
	if st := h.unit(UnitStart, other); !st.OK {
		t.Fatalf("start %s: %+v", other, st)
	}
	third := h.ready(other, 1)[0]
	snap = snapshot(t, h.cfg)
	w3 := findHolder(snap, third)
	if w3 == nil {
		t.Fatalf("worker %d not a holder", third)
	}
	kr, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{w.Identity, w3.Identity}, Grace: Duration(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var sup *Manager
	for i := range kr.Managers {
		switch kr.Managers[i].Unit {
		case name:
			sup = &kr.Managers[i]
		case other:
			t.Errorf("%s (Restart=no) named as a supervisor: %+v", other, kr.Managers[i])
		}
	}
	if sup == nil || sup.Restart != "always" || !slices.Contains(sup.Children, second) || !strings.HasSuffix(sup.Why, "restarts its workers: systemctl stop "+name) || sup.Restarts != RestartsYes || !sup.DelayKnown {
		t.Errorf("kill of an active Restart=always unit's worker: supervisors %+v", kr.Managers)
	}
	h.readyAfter(name, 2, 1)
	r := h.unit(UnitStop, name)
	if !r.OK || r.Restart != "always" || r.ActiveState != "inactive" || len(r.GPUHolders) != 0 {
		t.Errorf("stop: %+v", r)
	}
	// A stopped unit stays stopped: status after a start job would have run.
	if _, err := h.sd.Run(context.Background(), "is-active", "--quiet", name); err == nil {
		t.Errorf("%s active again after the stop", name)
	}
	if st := h.unit(UnitStatus, name); !st.OK || st.ActiveState != "inactive" || st.Restart != "always" {
		t.Errorf("status: %+v", st)
	}
}

// A unit that does not exist (a typo) is ok=false "not found" for every
// action, is never started or stopped, and is not "stopped". A masked unit
// says that it is masked and cannot be started.
func TestRealSystemdUnknownAndMasked(t *testing.T) {
	h := newRealHost(t, 1)
	for _, act := range []string{UnitStop, UnitStart, UnitRestart, UnitStatus} {
		r := h.unit(act, "vllm-embd.service")
		if r.OK || !r.Systemd || r.LoadState != "not-found" || r.Reason != "unit vllm-embd.service not found" {
			t.Errorf("%s of a unit that does not exist: %+v", act, r)
		}
	}
	if err := os.Symlink("/dev/null", filepath.Join(fmt.Sprintf("/proc/%d/root", h.sd.PID), "run/systemd/system/masked-svc.service")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sd.Run(context.Background(), "daemon-reload"); err != nil {
		t.Fatal(err)
	}
	for _, act := range []string{UnitStart, UnitRestart} {
		if r := h.unit(act, "masked-svc"); r.OK || r.LoadState != "masked" || r.Reason != "unit masked-svc.service is masked: it cannot be started" {
			t.Errorf("%s of a masked unit: %+v", act, r)
		}
	}
	if r := h.unit(UnitStop, "masked-svc"); !r.OK || r.LoadState != "masked" || r.ActiveState != "inactive" || r.Reason != "unit masked-svc.service is masked" {
		t.Errorf("stop of a masked unit: %+v", r)
	}
}

// Hostile unit names are refused by the helper before any systemctl runs;
// a name with systemd's escapes goes through as one argument.
func TestRealSystemdHostileNames(t *testing.T) {
	h := newRealHost(t, 1)
	calls := filepath.Join(h.dir, "systemctl-calls")
	rec := filepath.Join(h.dir, "recording-systemctl")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " + calls + "\nexec " + h.sd.Systemctl + " \"$@\"\n"
	if err := os.WriteFile(rec, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h.cfg.Systemctl = rec
	marker := filepath.Join(h.dir, "pwned")
	for _, name := range []string{"--now", "-H", "-Hroot@elsewhere", "a b.service", "x;reboot", "$(touch " + marker + ")", "`id`", "../../etc/passwd",
		"foo\n.service", "unit@.service", "@x.service", ".service", "", strings.Repeat("a", 300), "sshd.service\x00", "ü.service"} {
		for _, act := range []string{UnitStop, UnitStatus} {
			if r, err := Unit(context.Background(), UnitRequest{Config: h.cfg, Action: act, Unit: name}); err == nil {
				t.Errorf("%s %q: accepted: %+v", act, name, r)
			}
		}
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("systemctl ran for a refused name:\n%s", b)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a name was run through a shell")
	}
	// An escaped name is valid: systemctl sees it as one argument.
	h.addUnit(`gpu\x2dworker.service`, []string{holderBin, "--dev", h.d("nvidia0")})
	if r := h.unit(UnitStart, `gpu\x2dworker`); !r.OK || r.ActiveState != "active" {
		t.Errorf("start of an escaped name: %+v", r)
	}
	if b := readFile(calls); !strings.Contains(b, `start -- gpu\x2dworker.service`) {
		t.Errorf("systemctl calls:\n%s", b)
	}
}

// LoadState decides before any action: not-found and bad-setting units
// are not acted on (nothing but show runs), except a not-found unit that
// still runs (its file was removed while it ran), which is real.
func TestUnitLoadStates(t *testing.T) {
	old := systemdRunDir
	systemdRunDir = filepath.Join(t.TempDir(), "no-systemd")
	t.Cleanup(func() { systemdRunDir = old })
	for _, tc := range []struct {
		load, active, want string
		acted, ok          bool
	}{
		{"not-found", "inactive", "unit x.service not found", false, false},
		{"bad-setting", "inactive", "unit x.service could not be loaded (LoadState=bad-setting)", false, false},
		{"not-found", "active", "after stop: state active, 0 processes left in the cgroup, 0 GPU holders of the unit", true, false},
		{"loaded", "inactive", "", true, true},
	} {
		dir := t.TempDir()
		calls := filepath.Join(dir, "calls")
		sc := filepath.Join(dir, "systemctl")
		script := fmt.Sprintf("#!/bin/sh\necho \"$1\" >> %s\n[ \"$1\" = show ] && printf 'LoadState=%s\\nActiveState=%s\\nSubState=x\\nMainPID=0\\nControlGroup=\\nRestart=no\\n'\nexit 0\n", calls, tc.load, tc.active)
		if err := os.WriteFile(sc, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := Unit(context.Background(), UnitRequest{Config: Config{Systemctl: sc, ProcDir: "/proc", DevDir: t.TempDir(), NvidiaSMI: filepath.Join(dir, "absent")}, Action: UnitStop, Unit: "x"})
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.load, tc.active, err)
		}
		acted := strings.Contains(readFile(calls), "stop")
		if r.OK != tc.ok || r.Reason != tc.want || acted != tc.acted || r.LoadState != tc.load || r.Restart != "no" {
			t.Errorf("%s/%s: acted %v, %+v", tc.load, tc.active, acted, r)
		}
	}
}

// loggedSystemctl wraps h's systemctl so that every run's verb is logged;
// it returns the config using it and a count of the show runs so far.
func loggedSystemctl(t *testing.T, h *systemdHost) (Config, func() int) {
	t.Helper()
	log := filepath.Join(h.dir, "systemctl-runs.log")
	wrap := filepath.Join(h.dir, "logging", "systemctl")
	if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"$1\" >> '" + log + "'\nexec '" + h.systemctl + "' \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := h.cfg
	cfg.Systemctl = wrap
	return cfg, func() int {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "show\n")
	}
}

// A free looks at its units in its snapshot, just before it stops them,
// and right after: in one session the look before the stop goes by the
// snapshot's reading and the next snapshot by the stop's own look after,
// so a free runs systemctl show twice, not four times; what each says is
// still the unit's state when read (active before, inactive after). Past
// unitReuse, or for a status, every look runs systemctl.
func TestFreeLooksAtItsUnitsOnce(t *testing.T) {
	h := newSystemdHost(t, 1)
	const name = "vllm-embed.service"
	h.addUnit(name, "process", holderBin, "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "2048", "--child-mem-mib", "4096")
	cfg, shows := loggedSystemctl(t, h)
	ss := newSession()
	t.Cleanup(ss.close)
	ctx := withSession(context.Background(), ss)
	unitOf := func(s *Snapshot, pid int) *Manager {
		t.Helper()
		x := findHolder(s, pid)
		if x == nil {
			t.Fatalf("holder %d not in the snapshot", pid)
		}
		for i := range x.Managers {
			if x.Managers[i].Kind == ManagerUnit {
				return &x.Managers[i]
			}
		}
		t.Fatalf("holder %d: no unit manager in %+v", pid, x.Managers)
		return nil
	}
	if r := h.unit(UnitStart, name); !r.OK {
		t.Fatalf("start: %+v", r)
	}
	worker := h.ready(name, 2)[1]
	before := shows()
	s1, err := TakeSnapshot(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := unitOf(s1, worker); m.ActiveState != "active" {
		t.Errorf("snapshot before the stop: unit %+v, want active", m)
	}
	r, err := Unit(ctx, UnitRequest{Config: cfg, Action: UnitStop, Unit: name, Timeout: Duration(20 * time.Second)})
	if err != nil || r.PriorActiveState != "active" || r.ActiveState != "inactive" || len(r.GPUHolders) != 1 {
		t.Fatalf("stop: %+v %v", r, err)
	}
	s2, err := TakeSnapshot(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := unitOf(s2, worker); m.ActiveState != "inactive" {
		t.Errorf("snapshot after the stop: unit %+v, want inactive", m)
	}
	if n := shows() - before; n != 2 {
		t.Errorf("snapshot, stop, snapshot: %d systemctl show, want 2 (the snapshot's, the stop's look after)", n)
	}

	// A status reads now; past unitReuse, a look reads again.
	before = shows()
	if st, err := Unit(ctx, UnitRequest{Config: cfg, Action: UnitStatus, Unit: name}); err != nil || st.ActiveState != "inactive" {
		t.Fatalf("status: %+v %v", st, err)
	}
	if n := shows() - before; n != 1 {
		t.Errorf("status: %d systemctl show, want 1", n)
	}
	old := unitReuse
	unitReuse = 0
	t.Cleanup(func() { unitReuse = old })
	before = shows()
	if _, err := TakeSnapshot(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if r, err := Unit(ctx, UnitRequest{Config: cfg, Action: UnitStop, Unit: name}); err != nil || r.PriorActiveState != "inactive" {
		t.Fatalf("second stop: %+v %v", r, err)
	}
	if n := shows() - before; n != 3 {
		t.Errorf("unitReuse 0: snapshot and stop ran systemctl show %d times, want 3", n)
	}
}

// A kill reads its victims' unit after the signals only (Restart= and the
// state are the unit's, not the worker's): one systemctl show; none when
// the session's unit stop just read it as not restarting.
func TestKillReadsItsUnitOnce(t *testing.T) {
	h := newSystemdHost(t, 1)
	const name = "sglang-qwen.service"
	h.addUnit(name, "process", holderBin, "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "2048", "--child-mem-mib", "8192")
	cfg, shows := loggedSystemctl(t, h)
	kill := func(ctx context.Context, id Identity) {
		t.Helper()
		k, err := Kill(ctx, KillRequest{Config: cfg, Targets: []Identity{id}, Grace: Duration(2 * time.Second)})
		if err != nil || len(k.Results) != 1 || k.Results[0].Outcome != OutcomeExited {
			t.Fatalf("kill %d: %+v %v", id.PID, k, err)
		}
		for _, m := range k.Managers {
			if m.Kind == ManagerUnit {
				t.Errorf("kill %d: unit %s (no Restart=) named as what brings it back", id.PID, m.Unit)
			}
		}
	}
	ss := newSession()
	t.Cleanup(ss.close)
	ctx := withSession(context.Background(), ss)
	if r := h.unit(UnitStart, name); !r.OK {
		t.Fatalf("start: %+v", r)
	}
	worker := h.ready(name, 2)[1]
	r, err := Unit(ctx, UnitRequest{Config: cfg, Action: UnitStop, Unit: name, Timeout: Duration(20 * time.Second)})
	if err != nil || len(r.GPUHolders) != 1 || r.GPUHolders[0].PID != worker {
		t.Fatalf("stop: %+v %v, want worker %d left", r, err, worker)
	}
	before := shows()
	kill(ctx, r.GPUHolders[0].Identity)
	if n := shows() - before; n != 0 {
		t.Errorf("a kill right after the session's stop read Restart=: %d systemctl show, want 0", n)
	}

	// Outside a session: the worker of the running unit, read once.
	if r := h.unit(UnitStart, name); !r.OK {
		t.Fatalf("start again: %+v", r)
	}
	worker = h.ready(name, 4)[3]
	w := findHolder(snapshot(t, h.cfg), worker)
	if w == nil || w.Unit != name {
		t.Fatalf("worker %d: %+v", worker, w)
	}
	before = shows()
	kill(context.Background(), w.Identity)
	if n := shows() - before; n != 1 {
		t.Errorf("a kill outside a session: %d systemctl show, want 1 (after the signals)", n)
	}
}
