package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/podmanlab"
	"github.com/gpush/gpush/lab/sshd"

	"github.com/gpush/gpush/lab/procstat"
)

// labCLI builds gpush-lab for t and returns a runner of it: its combined
// output and whether it exited 0.
func labCLI(t *testing.T) func(args ...string) (string, bool) {
	t.Helper()
	if _, err := sshd.FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	bin := filepath.Join(t.TempDir(), "gpush-lab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build gpush-lab: %v\n%s", err, out)
	}
	return func(args ...string) (string, bool) {
		start := time.Now()
		out, err := exec.Command(bin, args...).CombinedOutput()
		t.Logf("gpush-lab %s: %v in %s", args[0], err, time.Since(start).Round(time.Millisecond))
		return string(out), err == nil
	}
}

// One lab per folder: a second `up` on a folder whose lab runs refuses,
// naming the folder and how to take that lab down, and leaves it running;
// a lab whose server died (KILLed: no Stop) leaves processes that make
// `up` refuse the same way until `down` ends them; then `up` starts afresh.
func TestUpTwiceOnOneDir(t *testing.T) {
	run := labCLI(t)
	dir := filepath.Join(t.TempDir(), "lab")
	up := []string{"up", "-n", "1", "--scenario", "idle", "--dir", dir}
	defer run("down", "--dir", dir)
	if out, ok := run(up...); !ok {
		t.Fatalf("first up: %s", out)
	}
	first := labState(t, dir)
	out, ok := run(up...)
	if ok || !strings.Contains(out, dir) || !strings.Contains(out, "gpush-lab down --dir "+dir) {
		t.Errorf("second up on a running lab: ok %v, output:\n%s", ok, out)
	}
	if !lab.Alive(lab.Proc{PID: first.PID, StartTime: first.StartTime}) {
		t.Fatal("the second up took the first lab down")
	}
	if st := labState(t, dir); st.PID != first.PID {
		t.Errorf("lab.json now names server %d, want the running %d", st.PID, first.PID)
	}

	// The server dies without its Stop: its holders live on.
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for lab.Alive(lab.Proc{PID: first.PID, StartTime: first.StartTime}) {
		time.Sleep(10 * time.Millisecond)
	}
	var left []lab.Proc
	for _, p := range first.Procs {
		if lab.Alive(p) {
			left = append(left, p)
		}
	}
	if len(left) == 0 {
		t.Fatal("no process of the killed lab left to test with")
	}
	sshdPID := readPID(t, filepath.Join(dir, "sshd", "sshd.pid"))
	out, ok = run(up...)
	if ok || !strings.Contains(out, "earlier lab") || !strings.Contains(out, "gpush-lab down --dir "+dir) {
		t.Errorf("up over a dead lab's live processes: ok %v, output:\n%s", ok, out)
	}
	if out, ok := run("down", "--dir", dir); !ok {
		t.Fatalf("down of a dead lab: %s", out)
	}
	for _, p := range left {
		if lab.Alive(p) {
			t.Errorf("%s pid %d alive after down", p.Role, p.PID)
		}
	}
	if st, err := procstat.Read(sshdPID); err == nil && st.State != 'Z' {
		t.Errorf("the dead lab's sshd (pid %d) runs after down", sshdPID)
	}
	if out, ok := run(up...); !ok {
		t.Fatalf("up after down: %s", out)
	}
	second := labState(t, dir)
	for _, p := range second.Procs {
		if !lab.Alive(p) && p.Role != lab.RoleOrphanParent {
			t.Errorf("restarted lab's %s pid %d is not alive", p.Role, p.PID)
		}
	}
	if out, ok := run("down", "--dir", dir); !ok {
		t.Fatalf("down: %s", out)
	}
}

func labState(t *testing.T, dir string) state {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "lab.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// `up --help` exits 0 and tells every scenario of lab.ScenarioTable: its
// name, the GPUs it holds and its description, and the options that add
// to any scenario.
func TestUpHelpTellsScenarios(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gpush-lab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build gpush-lab: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "up", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("up --help: %v\n%s", err, out)
	}
	flat := strings.Join(strings.Fields(string(out)), " ")
	for _, sc := range lab.ScenarioTable {
		if !strings.Contains(flat, sc.Name+" (") || !strings.Contains(flat, strings.Join(strings.Fields(sc.About), " ")) {
			t.Errorf("up --help does not tell scenario %s: %q", sc.Name, sc.About)
		}
	}
	for _, want := range []string{"GPUs 0-3 held, --gpus 4+", "--podman's worker on GPU 4", "-gpus", "-prefix", "-other-user", "-podman"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("up --help lacks %q:\n%s", want, out)
		}
	}
}

// `up` with every incident option: hosts gpu01.. with 5 GPUs, the
// container worker on GPU 4 as uid 65534; when the server is KILLed,
// `down` removes the container by name (its runtime would restart a
// killed worker) and ends the rest.
func TestUpPodmanOtherUserPrefixDown(t *testing.T) {
	run := labCLI(t)
	if _, _, err := podmanlab.Find(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "lab")
	// t.TempDir's own folder is 0700: uid 65534 must reach the holders.
	if err := os.Chmod(filepath.Dir(tmp), 0o755); err != nil {
		t.Fatal(err)
	}
	defer run("down", "--dir", dir)
	if out, ok := run("up", "-n", "1", "--dir", dir, "--prefix", "gpu", "--gpus", "5", "--podman", "--other-user", "65534"); !ok {
		t.Fatalf("up: %s", out)
	}
	st := labState(t, dir)
	var worker *lab.Proc
	for i, p := range st.Procs {
		if p.Host != "gpu01" {
			t.Errorf("process %+v of a host not named gpu01", p)
		}
		if p.Role == lab.RoleContainer {
			worker = &st.Procs[i]
		}
	}
	if worker == nil || worker.GPU != 4 || worker.UID != 65534 || worker.Container != "gpu01-trainer" || !lab.Alive(*worker) {
		t.Fatalf("container worker %+v, want gpu01-trainer on GPU 4 as 65534", worker)
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for lab.Alive(lab.Proc{PID: st.PID, StartTime: st.StartTime}) {
		time.Sleep(10 * time.Millisecond)
	}
	if out, ok := run("down", "--dir", dir); !ok {
		t.Fatalf("down of a dead lab: %s", out)
	}
	pm, err := podmanlab.Setup(filepath.Join(dir, "podman"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, there, err := pm.State("gpu01-trainer"); there || err != nil {
		t.Errorf("container gpu01-trainer still there after down (%v)", err)
	}
	for _, p := range st.Procs {
		if lab.Alive(p) {
			t.Errorf("%s pid %d alive after down", p.Role, p.PID)
		}
	}
	// The cgroups podman made for it in the controllers' hierarchies too.
	if left, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/gpush-lab/lab-%d", st.PID)); len(left) > 0 {
		t.Errorf("the dead lab's cgroups left after down: %v", left)
	}
}
