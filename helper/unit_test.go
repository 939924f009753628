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
	// An unknown unit: stopped already, and said so.
	if u := h.unit(UnitStop, "nope"); !u.OK || !strings.Contains(u.Reason, "not found") {
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
