package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
)

// buildHolders builds both holders into dir: the C one (a test failure in
// CI when it cannot be built; skipped locally without a compiler) and the
// Go one.
func buildHolders(t *testing.T, dir string) map[string]string {
	t.Helper()
	bins := map[string]string{}
	c := filepath.Join(dir, "c", "gpu-holder")
	os.MkdirAll(filepath.Dir(c), 0o755)
	if err := BuildHolderC(context.Background(), c); err != nil {
		if !errors.Is(err, ErrNoCC) || os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Logf("no C holder: %v", err)
	} else {
		bins[KindC] = c
	}
	g := filepath.Join(dir, "go", "gpu-holder")
	os.MkdirAll(filepath.Dir(g), 0o755)
	if err := GoBuild(context.Background(), g, "github.com/gpush/gpush/lab/cmd/gpu-holder"); err != nil {
		t.Fatal(err)
	}
	bins[KindGo] = g
	return bins
}

// Build makes the C gpu-holder and lab-init when cc is there, the Go ones
// when asked, under the same names, and refuses a kind it does not know.
func TestBuildPicksKind(t *testing.T) {
	dir := t.TempDir()
	others := Binaries{FakeSMI: "x", FakeSystemctl: "x", Restarter: "x"}
	b := others
	b, err := Build(context.Background(), filepath.Join(dir, "auto"), b)
	if errors.Is(err, ErrNoCC) || (err == nil && strings.Contains(b.Note, ErrNoCC.Error())) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI has no C compiler: %v %s", err, b.Note)
		}
		t.Skipf("skipping: %s", b.Note)
	}
	if err != nil || b.Kind != KindC || b.Holder != filepath.Join(dir, "auto", "gpu-holder") || b.Init != filepath.Join(dir, "auto", "lab-init") ||
		b.Note != "gpu-holder C (cc -static); lab-init C (cc -static)" {
		t.Errorf("auto: %+v, %v; want the C builds", b, err)
	}
	b = others
	b.Kind = KindGo
	b, err = Build(context.Background(), filepath.Join(dir, "go"), b)
	if err != nil || b.Kind != KindGo || b.Holder != filepath.Join(dir, "go", "gpu-holder") || !strings.Contains(b.Note, "lab-init Go") {
		t.Errorf("go: %+v, %v", b, err)
	}
	// A Go binary carries its build info; a C one does not.
	for path, isGo := range map[string]bool{filepath.Join(dir, "go", "lab-init"): true, filepath.Join(dir, "auto", "lab-init"): false} {
		out, err := exec.Command("go", "version", path).CombinedOutput()
		if (err == nil && !strings.Contains(string(out), "not a Go executable")) != isGo {
			t.Errorf("go version %s: %v %s (want a Go binary: %v)", path, err, out, isGo)
		}
	}
	if _, err := Build(context.Background(), filepath.Join(dir, "bad"), Binaries{Kind: "rust"}); err == nil || !strings.Contains(err.Error(), `"rust"`) {
		t.Errorf("kind rust: %v", err)
	}
}

// The helper must see a leftovers host the same whichever holder runs it:
// the same holders (owners, monitors, protected, a zombie leader), the
// same memory, the same ghost kept by a keeper and the same GPU states.
func TestLeftoversSameWithEachHolder(t *testing.T) {
	if _, err := sshd.FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	bins := buildHolders(t, t.TempDir())
	if len(bins) < 2 {
		t.Skip("skipping: only the Go holder is there")
	}
	views := map[string]string{}
	for _, kind := range []string{KindGo, KindC} {
		views[kind] = helperView(t, bins[kind])
	}
	if views[KindGo] != views[KindC] {
		t.Errorf("the helper sees the hosts differently\nGo holder:\n%s\nC holder:\n%s", views[KindGo], views[KindC])
	}
	t.Logf("helper's view:\n%s", views[KindC])
}

// helperView starts a one-host leftovers lab on holder, adds a keeper
// whose parent is killed (a ghost) and a zombie leader, and describes what
// helper.TakeSnapshot sees, by lab role instead of pid.
func helperView(t *testing.T, holder string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Hosts: 1, Dir: t.TempDir(), ReleaseDelay: "1ms", Bin: Binaries{Holder: holder}})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatal(err)
	}
	defer l.Stop()
	h := l.Hosts[0]
	dev := func(n string) string { return filepath.Join(h.DevDir, n) }
	py, err := l.holderAs("python3")
	if err != nil {
		t.Fatal(err)
	}
	role := map[int]string{}
	for _, p := range l.Procs() {
		role[p.PID] = p.Role
	}
	// A keeper: the parent's memory stays charged to it after it dies.
	kp, kcmd, err := startHolder(ctx, py, []string{"--dev", dev("nvidia2"), "--dev", dev("nvidiactl"), "--mem-mib", "777", "--keeper"}, nil, func(c *exec.Cmd) error { return c.Start() })
	if err != nil {
		t.Fatal(err)
	}
	role[kp[1]] = "keeper"
	defer syscall.Kill(kp[1], syscall.SIGKILL)
	kcmd.Process.Kill()
	kcmd.Wait()
	zp, zcmd, err := startHolder(ctx, py, []string{"--dev", dev("nvidia1"), "--dev", dev("nvidia-uvm"), "--mem-mib", "555", "--zombie-leader"}, nil, func(c *exec.Cmd) error { return c.Start() })
	if err != nil {
		t.Fatal(err)
	}
	role[zp[0]] = "zombie-leader"
	defer func() { zcmd.Process.Kill(); zcmd.Wait() }()
	for st, _ := procState(zp[0]); st != "Z"; st, _ = procState(zp[0]) {
		time.Sleep(5 * time.Millisecond) // bounded by ctx's deadline
	}

	snap, err := helper.TakeSnapshot(ctx, helper.Config{DevDir: h.DevDir, NvidiaSMI: h.SMI, Protected: []string{"nvidia-persistenced"}})
	if err != nil {
		t.Fatal(err)
	}
	name := func(pid int) string {
		if r, ok := role[pid]; ok {
			return r
		}
		return fmt.Sprintf("unknown pid %d", pid)
	}
	names := func(pids []int) string {
		var out []string
		for _, p := range pids {
			out = append(out, name(p))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	var lines []string
	for _, x := range snap.Holders {
		lines = append(lines, fmt.Sprintf("holder %s comm=%s state=%s devices=%s owner=%v (%s) mem=%d zombie_leader=%v suspicious=%q",
			name(x.PID), x.Comm, x.State, strings.Join(x.Devices, ","), x.Owner, x.OwnerWhy, x.MemMiB, x.ZombieLeader, x.Suspicious))
	}
	for _, g := range snap.Ghosts {
		lines = append(lines, fmt.Sprintf("ghost gpu=%d mem=%d name=%s held_by=%s", g.GPU, g.MemMiB, filepath.Base(g.Name), names(g.HeldBy)))
	}
	for _, s := range snap.Status {
		lines = append(lines, fmt.Sprintf("gpu %d %s used=%d owners=%s others=%s protected=%s", s.Index, s.State, s.UsedMiB, names(s.Owners), names(s.Others), names(s.Protected)))
	}
	sort.Strings(lines)
	view := strings.Join(lines, "\n")

	// What the lab promises, whichever holder: without these the two
	// views could agree on a broken host.
	for _, want := range []string{
		"holder monitor comm=nvitop", "owner=false",
		"holder zombie-leader comm=python3 state=Z", "zombie_leader=true",
		"holder keeper comm=python3", "ghost gpu=2 mem=777", "held_by=keeper",
		"holder orphan comm=python3", "holder term-ignorer comm=python3",
		"holder persistenced comm=nvidia-persiste", // comm is 15 bytes
		"holder keeper comm=python3 state=S devices=nvidia2,nvidiactl owner=true (maps",
		"gpu 2 held used=4873 owners=keeper,term-ignorer others=monitor",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("%s: the helper's view lacks %q:\n%s", holder, want, view)
		}
	}
	for _, x := range snap.Holders {
		// A keeper maps the devices (a CUDA context), so it is an owner.
		if r := name(x.PID); (r == RoleMonitor || r == RolePersistenced) == x.Owner {
			t.Errorf("%s: %s pid %d owner=%v (%s)", holder, r, x.PID, x.Owner, x.OwnerWhy)
		}
	}
	if slices.ContainsFunc(lines, func(s string) bool { return strings.Contains(s, "unknown pid") }) {
		t.Errorf("%s: holders the lab did not start:\n%s", holder, view)
	}
	return view
}

// lab-init, either build, refuses to run outside a new PID namespace,
// saying why (the namespace case is TestIsolatedHostsSeeTheirOwnProcesses).
func TestInitRefusesOutsideItsNamespace(t *testing.T) {
	dir := t.TempDir()
	bins := map[string]string{KindGo: filepath.Join(dir, "go", "lab-init")}
	os.MkdirAll(filepath.Dir(bins[KindGo]), 0o755)
	if err := GoBuild(context.Background(), bins[KindGo], "github.com/gpush/gpush/lab/cmd/lab-init"); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(dir, "c", "lab-init")
	os.MkdirAll(filepath.Dir(c), 0o755)
	if err := BuildInitC(context.Background(), c); err == nil {
		bins[KindC] = c
	} else if !errors.Is(err, ErrNoCC) || os.Getenv("CI") == "true" {
		t.Fatal(err)
	}
	for kind, bin := range bins {
		out, err := exec.Command(bin).CombinedOutput()
		var x *exec.ExitError
		if !errors.As(err, &x) || x.ExitCode() != 2 || !strings.Contains(string(out), "not pid 1 of a new PID namespace") {
			t.Errorf("%s lab-init outside a namespace: %v\n%s", kind, err, out)
		}
	}
}
