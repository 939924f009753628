package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/sshd"
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
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(sshdPID) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
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
