package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labbuild"
	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/labsystemd"
)

var fakeBin, holderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fake-systemctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBin = filepath.Join(dir, "fake-systemctl")
	holderBin = filepath.Join(dir, "python3")
	cmd := exec.Command("go", "build", "-o", fakeBin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build fake-systemctl: %v\n%s", err, out)
		os.Exit(1)
	}
	// The holder the lab runs: its C build where cc is there.
	kind, err := labbuild.TestHolder(context.Background(), holderBin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build gpu-holder: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "fake-systemctl tests: %s gpu-holder\n", kind)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// host is one fake systemd host: a systemctl link with its config beside it.
type host struct {
	t   testing.TB
	dir string
	cfg labsystemd.Config
	hs  []string
}

// newHost lays out a host whose units live in real cgroups; it skips when
// cgroups cannot be written here (not root, read-only cgroupfs).
func newHost(t testing.TB, units map[string]labsystemd.Unit) *host {
	t.Helper()
	base := fmt.Sprintf("/gpush-test/fake-systemctl-%d-%s", os.Getpid(), strings.NewReplacer("/", "-").Replace(t.Name()))
	if err := labsystemd.Writable(labsystemd.DefaultCgroupRoot, base); err != nil {
		t.Skipf("skipping, needs writable cgroups (root with a read-write cgroupfs, as in CI): %v", err)
	}
	h := newHostAt(t, units, labsystemd.DefaultCgroupRoot, base)
	hs, err := labsystemd.Hierarchies(labsystemd.DefaultCgroupRoot)
	if err != nil {
		t.Fatal(err)
	}
	h.hs = hs
	t.Cleanup(func() {
		if left := labsystemd.KillTree(hs, base, 5*time.Second); len(left) > 0 {
			t.Errorf("processes left in %s: %v", base, left)
		}
		for _, hier := range hs {
			if err := labsystemd.RemoveTree(hier, base); err != nil {
				t.Error(err)
			}
			labsystemd.Prune(filepath.Dir(filepath.Join(hier, base)), hier)
		}
	})
	return h
}

func newHostAt(t testing.TB, units map[string]labsystemd.Unit, root, base string) *host {
	t.Helper()
	h := &host{t: t, dir: t.TempDir(), cfg: labsystemd.Config{Units: units, CgroupBase: base, CgroupRoot: root}}
	if err := os.WriteFile(filepath.Join(h.dir, "dev0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(fakeBin, filepath.Join(h.dir, "systemctl")); err != nil {
		t.Fatal(err)
	}
	if err := h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName)); err != nil {
		t.Fatal(err)
	}
	return h
}

// run runs the host's systemctl and returns stdout, stderr and the exit status.
func (h *host) run(args ...string) (string, string, int) {
	h.t.Helper()
	cmd := exec.Command(filepath.Join(h.dir, "systemctl"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var x *exec.ExitError
	switch {
	case errors.As(err, &x):
		return out.String(), errb.String(), x.ExitCode()
	case err != nil:
		h.t.Fatalf("systemctl %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// ready waits for n "ready PID" lines in the unit's log and returns the pids.
func (h *host) ready(unit string, n int) []int {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(h.dir, "state", unit+".log"))
		pids := labgpu.ReadyPIDs(string(b))
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: %d ready lines after 30s, want %d; log:\n%s", unit, len(pids), n, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *host) holder(extra ...string) []string {
	return append([]string{holderBin, "--dev", filepath.Join(h.dir, "dev0"), "--mem-mib", "100"}, extra...)
}

func (h *host) show(unit string) map[string]string {
	h.t.Helper()
	out, errb, code := h.run("show", "-p", "LoadState", "-p", "ActiveState", "-p", "SubState", "-p", "MainPID", "-p", "ControlGroup", "-p", "Result", "--", unit)
	if code != 0 {
		h.t.Fatalf("show %s: exit %d: %s", unit, code, errb)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m
}

func cgroupLines(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	return string(b)
}

// start puts the main process and what it forks in the unit's cgroup, in
// every hierarchy, and show reports it as systemctl does.
func TestStartPutsProcessesInTheUnitCgroup(t *testing.T) {
	units := map[string]labsystemd.Unit{}
	h := newHost(t, units)
	h.cfg.Units["sglang.service"] = labsystemd.Unit{Exec: h.holder("--child-mem-mib", "50"), KillMode: "process"}
	h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName))
	if _, errb, code := h.run("start", "sglang"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errb)
	}
	pids := h.ready("sglang.service", 2)
	cg := h.cfg.CgroupBase + "/system.slice/sglang.service"
	for _, p := range pids {
		lines := cgroupLines(t, p)
		for _, hier := range h.hs {
			want := "0::" + cg
			if filepath.Base(hier) == "systemd" {
				want = ":name=systemd:" + cg
			}
			if !strings.Contains(lines, want+"\n") {
				t.Errorf("pid %d: /proc/PID/cgroup lacks %q:\n%s", p, want, lines)
			}
		}
	}
	s := h.show("sglang.service")
	if s["MainPID"] != strconv.Itoa(pids[0]) || s["ControlGroup"] != cg || s["ActiveState"] != "active" || s["SubState"] != "running" || s["LoadState"] != "loaded" {
		t.Errorf("show: %v (main %d)", s, pids[0])
	}
	if out, _, code := h.run("is-active", "sglang.service"); code != 0 || out != "active\n" {
		t.Errorf("is-active: %q exit %d", out, code)
	}
	if out, _, code := h.run("status", "sglang.service"); code != 0 || !strings.Contains(out, fmt.Sprintf("Main PID: %d (python3)", pids[0])) || !strings.Contains(out, fmt.Sprint(pids[1])) {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	// Starting an active unit changes nothing.
	if _, _, code := h.run("start", "sglang.service"); code != 0 || h.show("sglang.service")["MainPID"] != strconv.Itoa(pids[0]) {
		t.Errorf("second start: exit %d", code)
	}
}

// stop per kill mode: process leaves the workers (still in the cgroup),
// control-group and mixed end them all; a main process that ignores TERM is
// KILLed after the stop timeout and the unit is failed (Result=timeout).
func TestStopKillModes(t *testing.T) {
	for _, tc := range []struct {
		mode        string
		ignoreTerm  bool
		childLives  bool
		wantActive  string
		wantResult  string
		wantCgroup  bool
		description string
	}{
		{mode: "process", childLives: true, wantActive: "inactive", wantResult: "success", wantCgroup: true},
		{mode: "control-group", wantActive: "inactive", wantResult: "success"},
		{mode: "mixed", wantActive: "inactive", wantResult: "success"},
		{mode: "control-group", ignoreTerm: true, wantActive: "failed", wantResult: "timeout"},
		{mode: "process", ignoreTerm: true, childLives: true, wantActive: "failed", wantResult: "timeout", wantCgroup: true},
	} {
		name := tc.mode
		if tc.ignoreTerm {
			name += "-ignore-term"
		}
		t.Run(name, func(t *testing.T) {
			h := newHost(t, map[string]labsystemd.Unit{})
			extra := []string{"--child-mem-mib", "50"}
			if tc.ignoreTerm {
				extra = append(extra, "--ignore-term")
			}
			h.cfg.Units["w.service"] = labsystemd.Unit{Exec: h.holder(extra...), KillMode: tc.mode, StopTimeout: "300ms"}
			h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName))
			if _, errb, code := h.run("start", "w.service"); code != 0 {
				t.Fatalf("start: exit %d: %s", code, errb)
			}
			pids := h.ready("w.service", 2)
			if _, errb, code := h.run("stop", "--", "w.service"); code != 0 {
				t.Fatalf("stop: exit %d: %s", code, errb)
			}
			if labsystemd.Live(pids[0]) {
				t.Errorf("main %d alive after stop", pids[0])
			}
			if got := labsystemd.Live(pids[1]); got != tc.childLives {
				t.Errorf("worker %d alive=%v after stop, want %v", pids[1], got, tc.childLives)
			}
			s := h.show("w.service")
			if s["ActiveState"] != tc.wantActive || s["Result"] != tc.wantResult || s["MainPID"] != "0" || (s["ControlGroup"] != "") != tc.wantCgroup {
				t.Errorf("after stop: %v", s)
			}
			if tc.childLives {
				if !strings.Contains(cgroupLines(t, pids[1]), "/system.slice/w.service") {
					t.Errorf("leftover worker left the unit's cgroup")
				}
				b, _ := os.ReadFile(filepath.Join(h.dir, "state", "w.service.log"))
				if !strings.Contains(string(b), fmt.Sprintf("Unit process %d (python3) remains running after unit stopped.", pids[1])) {
					t.Errorf("log lacks the leftover line:\n%s", b)
				}
				// Once the leftover is gone the cgroup is let go.
				syscall.Kill(pids[1], syscall.SIGKILL)
				for deadline := time.Now().Add(10 * time.Second); labsystemd.Live(pids[1]) && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				// The kernel lets go of an exited task a moment after it
				// stops being live: poll, as the stop path itself does.
				cg := h.show("w.service")["ControlGroup"]
				for deadline := time.Now().Add(5 * time.Second); cg != "" && time.Now().Before(deadline); {
					time.Sleep(20 * time.Millisecond)
					cg = h.show("w.service")["ControlGroup"]
				}
				if cg != "" {
					t.Errorf("ControlGroup %q after the cgroup emptied", cg)
				}
			}
			for _, hier := range h.hs {
				if _, err := os.Stat(filepath.Join(hier, h.cfg.CgroupBase, "system.slice", "w.service")); !tc.childLives && err == nil {
					t.Errorf("unit cgroup still in %s", hier)
				}
			}
			// A stopped unit stops again without a fuss and can restart.
			if _, _, code := h.run("stop", "w.service"); code != 0 {
				t.Errorf("second stop: exit %d", code)
			}
			if _, errb, code := h.run("restart", "w.service"); code != 0 || h.show("w.service")["ActiveState"] != "active" {
				t.Errorf("restart: exit %d %s", code, errb)
			}
		})
	}
}

// A main process that dies on its own leaves the unit failed, not active.
func TestMainDiedIsFailed(t *testing.T) {
	h := newHost(t, map[string]labsystemd.Unit{})
	h.cfg.Units["d.service"] = labsystemd.Unit{Exec: h.holder()}
	h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName))
	if _, errb, code := h.run("start", "d.service"); code != 0 {
		t.Fatalf("start: %d %s", code, errb)
	}
	pid := h.ready("d.service", 1)[0]
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); labsystemd.Live(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if out, _, code := h.run("is-active", "d.service"); out != "failed\n" || code != 3 {
		t.Errorf("is-active: %q exit %d", out, code)
	}
}

// Unknown units, bad exec paths and bad command lines answer as systemctl
// does; none of these need cgroups.
func TestErrorsAndFormats(t *testing.T) {
	root := t.TempDir() // not a cgroupfs: units run without a cgroup
	h := newHostAt(t, map[string]labsystemd.Unit{
		"gone.service": {Exec: []string{"/nonexistent/bin/x"}},
	}, root, "/gpush-test/x")
	h.cfg.Units["ok.service"] = labsystemd.Unit{Exec: h.holder(), StopTimeout: "5s", KillMode: "mixed", Description: "a unit"}
	h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName))
	if out, _, code := h.run("show", "nope"); code != 0 || !strings.Contains(out, "LoadState=not-found\nActiveState=inactive\nSubState=dead\n") || !strings.Contains(out, "MainPID=0\nControlGroup=\n") {
		t.Errorf("show unknown: exit %d\n%s", code, out)
	}
	if _, errb, code := h.run("stop", "nope.service"); code != 5 || errb != "Failed to stop nope.service: Unit nope.service not loaded.\n" {
		t.Errorf("stop unknown: exit %d %q", code, errb)
	}
	if _, errb, code := h.run("start", "nope"); code != 5 || errb != "Failed to start nope.service: Unit nope.service not found.\n" {
		t.Errorf("start unknown: exit %d %q", code, errb)
	}
	if _, errb, code := h.run("status", "nope"); code != 4 || errb != "Unit nope.service could not be found.\n" {
		t.Errorf("status unknown: exit %d %q", code, errb)
	}
	if out, _, code := h.run("is-active", "nope"); code != 3 || out != "inactive\n" {
		t.Errorf("is-active unknown: exit %d %q", code, out)
	}
	if out, _, code := h.run("is-active", "-q", "nope"); code != 3 || out != "" {
		t.Errorf("is-active -q: exit %d %q", code, out)
	}
	// Properties come in systemctl's order, not the -p order; --value drops the names.
	if out, _, _ := h.run("show", "-p", "SubState,KillMode", "--property=TimeoutStopUSec", "ok"); out != "KillMode=mixed\nTimeoutStopUSec=5s\nSubState=dead\n" {
		t.Errorf("show -p: %q", out)
	}
	if out, _, _ := h.run("show", "--value", "-pActiveState", "-p", "Description", "ok.service"); out != "a unit\ninactive\n" {
		t.Errorf("show --value: %q", out)
	}
	if _, errb, code := h.run("start", "gone"); code != 1 || !strings.Contains(errb, "Job for gone.service failed because the control process exited with error code.") {
		t.Errorf("start of a missing binary: exit %d %q", code, errb)
	}
	if out, _, _ := h.run("is-active", "gone"); out != "failed\n" {
		t.Errorf("after a failed start: %q", out)
	}
	if _, errb, code := h.run("frobnicate", "ok"); code != 1 || errb != "Unknown command verb 'frobnicate'.\n" {
		t.Errorf("unknown verb: exit %d %q", code, errb)
	}
	if _, errb, code := h.run("--bogus", "stop", "ok"); code != 1 || !strings.Contains(errb, "unrecognized option '--bogus'") {
		t.Errorf("unknown option: exit %d %q", code, errb)
	}
	if _, errb, code := h.run("stop"); code != 1 || errb != "Too few arguments.\n" {
		t.Errorf("no unit: exit %d %q", code, errb)
	}
	// Without cgroups the unit still runs, and says why it has no cgroup.
	_, errb, code := h.run("start", "ok")
	if code != 0 || !strings.Contains(errb, "cgroups not writable, starting ok.service without a cgroup") {
		t.Errorf("start without cgroups: exit %d %q", code, errb)
	}
	s := h.show("ok.service")
	pid, _ := strconv.Atoi(s["MainPID"])
	if s["ActiveState"] != "active" || pid <= 0 || s["ControlGroup"] != "" {
		t.Errorf("without cgroups: %v", s)
	}
	if _, _, code := h.run("stop", "ok"); code != 0 || labsystemd.Live(pid) {
		t.Errorf("stop without cgroups: exit %d, main alive %v", code, labsystemd.Live(pid))
	}
}

func TestTimespan(t *testing.T) {
	for d, want := range map[time.Duration]string{90 * time.Second: "1min 30s", 5 * time.Second: "5s", 300 * time.Millisecond: "300ms", time.Hour + time.Second: "1h 1s", 0: "0"} {
		if got := timespan(d); got != want {
			t.Errorf("timespan(%v) = %q, want %q", d, got, want)
		}
	}
}

// The config is found beside the path systemctl ran as, else beside the
// executable that path resolves to, else at $FAKE_SYSTEMCTL_CONFIG; show's
// FragmentPath names the one used.
func TestConfigLookup(t *testing.T) {
	root := t.TempDir()
	h := newHostAt(t, map[string]labsystemd.Unit{"a.service": {Exec: []string{"/bin/true"}}}, root, "/gpush-test/y")
	want := filepath.Join(h.dir, labsystemd.ConfigName)
	frag := func(env []string, argv0 string) string {
		t.Helper()
		cmd := exec.Command(argv0, "show", "-p", "FragmentPath", "--value", "a.service")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", argv0, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := frag(nil, filepath.Join(h.dir, "systemctl")); got != want {
		t.Errorf("beside argv[0]: FragmentPath %q, want %q", got, want)
	}
	// A symlink from a folder without a config: the resolved executable's.
	other := t.TempDir()
	link := filepath.Join(other, "systemctl")
	if err := os.Symlink(filepath.Join(h.dir, "systemctl"), link); err != nil {
		t.Fatal(err)
	}
	if got := frag(nil, link); got != want {
		t.Errorf("through a symlink: FragmentPath %q, want %q", got, want)
	}
	// The environment wins over both.
	alt := filepath.Join(other, "alt.json")
	if err := h.cfg.Save(alt); err != nil {
		t.Fatal(err)
	}
	if got := frag([]string{labsystemd.ConfigEnv + "=" + alt}, link); got != alt {
		t.Errorf("with $%s: FragmentPath %q, want %q", labsystemd.ConfigEnv, got, alt)
	}
	// A unit unknown to the config has no FragmentPath.
	cmd := exec.Command(link, "show", "-p", "FragmentPath", "-p", "LoadState", "nope")
	if out, err := cmd.Output(); err != nil || string(out) != "LoadState=not-found\nFragmentPath=\n" {
		t.Errorf("unknown unit: %q %v", out, err)
	}
}

// Several units in one stop, as systemctl does it: every unit it knows gets
// its job even when one fails (a unit not loaded, one refusing the stop, each
// named on stderr), the exit status is the first failure's in the order
// given, and show prints one block per unit in that order.
func TestStopSeveral(t *testing.T) {
	h := newHost(t, map[string]labsystemd.Unit{})
	h.cfg.Units["slow.service"] = labsystemd.Unit{Exec: h.holder("--ignore-term"), StopTimeout: "300ms"}
	h.cfg.Units["a.service"] = labsystemd.Unit{Exec: h.holder()}
	h.cfg.Units["refuser.service"] = labsystemd.Unit{Exec: h.holder(), RefuseManualStop: true}
	h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName))
	if _, errb, code := h.run("start", "slow", "a", "refuser"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errb)
	}
	pids := map[string]int{}
	for _, u := range []string{"slow.service", "a.service", "refuser.service"} {
		pids[u] = h.ready(u, 1)[0]
	}
	_, errb, code := h.run("stop", "--", "slow.service", "nope.service", "refuser.service", "a.service")
	if code != exitNotLoaded {
		t.Errorf("stop: exit %d, want %d (the first failure's, nope.service)", code, exitNotLoaded)
	}
	for _, want := range []string{"Failed to stop nope.service: Unit nope.service not loaded.\n",
		"Failed to stop refuser.service: Operation refused, unit refuser.service may be requested by dependency only"} {
		if !strings.Contains(errb, want) {
			t.Errorf("stderr %q, want %q", errb, want)
		}
	}
	if _, _, code := h.run("stop", "refuser.service"); code != exitRefused {
		t.Errorf("stop of the refusing unit alone: exit %d, want %d", code, exitRefused)
	}
	out, _, code := h.run("show", "-p", "ActiveState", "-p", "Result", "--", "slow.service", "nope.service", "refuser.service", "a.service")
	want := "Result=timeout\nActiveState=failed\n\nResult=success\nActiveState=inactive\n\nResult=success\nActiveState=active\n\nResult=success\nActiveState=inactive\n"
	if code != 0 || out != want {
		t.Errorf("show: exit %d\n%s\nwant\n%s", code, out, want)
	}
	if labsystemd.Live(pids["slow.service"]) || labsystemd.Live(pids["a.service"]) || !labsystemd.Live(pids["refuser.service"]) {
		t.Errorf("after the stop: slow alive %v, a alive %v, refuser alive %v (want false, false, true)",
			labsystemd.Live(pids["slow.service"]), labsystemd.Live(pids["a.service"]), labsystemd.Live(pids["refuser.service"]))
	}
}

// A restart of several units runs their jobs side by side, as systemd's
// jobs do: here each unit's main process, on TERM, waits for the other's
// TERM before it exits, so one after the other the first stop would wait
// out its timeout and KILL its main. Both must see the other's TERM and
// exit on their own, and both come back.
func TestRestartSeveralRunsJobsTogether(t *testing.T) {
	h := newHost(t, map[string]labsystemd.Unit{})
	marks := t.TempDir()
	unit := func(self, peer string) labsystemd.Unit {
		script := fmt.Sprintf(`trap 'touch %[1]s/%[2]s.term; while [ ! -e %[1]s/%[3]s.term ]; do sleep 0.02; done; echo "%[2]s saw %[3]s" >> %[1]s/seen; exit 0' TERM
echo ready $$
while :; do sleep 0.02; done`, marks, self, peer)
		return labsystemd.Unit{Exec: []string{"/bin/sh", "-c", script}, KillMode: labsystemd.KillProcess, StopTimeout: "3s"}
	}
	h.cfg.Units["a.service"] = unit("a", "b")
	h.cfg.Units["b.service"] = unit("b", "a")
	h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName))
	if _, errb, code := h.run("start", "a", "b"); code != 0 {
		t.Fatalf("start: exit %d: %s", code, errb)
	}
	first := map[string]int{"a.service": h.ready("a.service", 1)[0], "b.service": h.ready("b.service", 1)[0]}
	if _, errb, code := h.run("restart", "a", "b"); code != 0 {
		t.Fatalf("restart: exit %d: %s", code, errb)
	}
	seen, _ := os.ReadFile(filepath.Join(marks, "seen"))
	for _, want := range []string{"a saw b\n", "b saw a\n"} {
		if !strings.Contains(string(seen), want) {
			t.Errorf("%q missing: the restart's stops did not run together (the first waited out its timeout); seen:\n%s", want, seen)
		}
	}
	for u, old := range first {
		if p := h.show(u); p["ActiveState"] != "active" || p["MainPID"] == strconv.Itoa(old) {
			t.Errorf("%s after the restart: %v (old main %d)", u, p, old)
		}
	}
}

// Several units in one start keep systemctl's rules with their jobs run
// together: each unit it knows starts even when another fails, each failure
// is one whole message on stderr, and the exit status is the first
// failure's in the order given (not the first to finish).
func TestStartSeveral(t *testing.T) {
	h := newHost(t, map[string]labsystemd.Unit{})
	h.cfg.Units["a.service"] = labsystemd.Unit{Exec: h.holder()}
	h.cfg.Units["b.service"] = labsystemd.Unit{Exec: h.holder()}
	h.cfg.Units["broken.service"] = labsystemd.Unit{Exec: []string{filepath.Join(h.dir, "no-such-program")}}
	h.cfg.Save(filepath.Join(h.dir, labsystemd.ConfigName))
	_, errb, code := h.run("start", "a", "nope", "broken", "b")
	if code != exitNotLoaded {
		t.Errorf("start: exit %d, want %d (nope.service's, the first failure in the order given)", code, exitNotLoaded)
	}
	for _, want := range []string{"Failed to start nope.service: Unit nope.service not found.\n",
		"Job for broken.service failed because the control process exited with error code.\nSee \"systemctl status broken.service\" and \"journalctl -xeu broken.service\" for details.\n"} {
		if !strings.Contains(errb, want) {
			t.Errorf("stderr %q, want %q", errb, want)
		}
	}
	for u, want := range map[string]string{"a.service": "active", "b.service": "active", "broken.service": "failed"} {
		if got := h.show(u)["ActiveState"]; got != want {
			t.Errorf("%s: %s, want %s", u, got, want)
		}
	}
	h.ready("a.service", 1)
	h.ready("b.service", 1)
	if _, errb, code := h.run("stop", "a", "b"); code != 0 {
		t.Errorf("stop: exit %d: %s", code, errb)
	}
}
