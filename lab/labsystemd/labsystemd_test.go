package labsystemd

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// SignalMember hits a process only while it is in the named cgroup.
func TestSignalMemberChecksMembership(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to run: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	pid := cmd.Process.Pid

	if SignalMember(pid, "/gpush-lab-test/not-its-cgroup", unix.SIGKILL) {
		t.Fatal("signalled a process outside the cgroup")
	}
	if !Live(pid) {
		t.Fatal("process outside the cgroup died")
	}
	if SignalMember(os.Getpid(), "/", unix.SIGKILL) || SignalMember(1, "/", unix.SIGKILL) {
		t.Fatal("signalled the caller or pid 1")
	}

	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no /proc/self/cgroup: %v", err)
	}
	// The child inherited this process's cgroup: the last line's path.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	own := strings.SplitN(lines[len(lines)-1], ":", 3)[2]
	if !InCgroup(pid, own) {
		t.Fatalf("child not in its parent's cgroup %q", own)
	}
	if !SignalMember(pid, own, unix.SIGKILL) {
		t.Fatalf("member of %q not signalled", own)
	}
	if err := <-done; err == nil {
		t.Error("sleep exited cleanly, want killed")
	}
	done <- nil // for the cleanup
}

// Procs gathers cgroup.procs of a cgroup and every cgroup below it, sorted
// and without repeats; a missing cgroup has none. (A plain tree with the
// cgroupfs layout: cgroup.procs in every folder.)
func TestProcsWalksSubCgroups(t *testing.T) {
	top := filepath.Join(t.TempDir(), "u.service")
	// First: the map's order is random, and the file below needs its folder.
	if err := os.MkdirAll(top, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, pids := range map[string]string{
		"":          "30\n7\n",
		"a":         "12\n",
		"a/b":       "7\n99\n",
		"c":         "",
		"not-a-dir": "",
	} {
		dir := filepath.Join(top, path)
		if path == "not-a-dir" {
			if err := os.WriteFile(dir, []byte("5\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pids), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := Procs(top), []int{7, 12, 30, 99}; !slices.Equal(got, want) {
		t.Errorf("Procs = %v, want %v", got, want)
	}
	if got := Procs(filepath.Join(top, "c")); got != nil {
		t.Errorf("empty cgroup: %v", got)
	}
	if got := Procs(filepath.Join(top, "gone")); got != nil {
		t.Errorf("missing cgroup: %v", got)
	}
}

// KillForker, the cancel of nssystemd's calls and the lab's nsenter, ends a process that waits for a
// child it forked (as nsenter does) with that child, and the child is
// reaped: no process, not even a zombie, is left of it.
func TestKillForkerReapsTheChild(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "/bin/sleep 600 & echo $!; wait")
	cmd.Cancel = func() error { return KillForker(cmd.Process) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	child, _ := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || child <= 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no child pid from sh: %q %v", line, err)
	}
	cancel()
	t.Logf("wait: %v", cmd.Wait())
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child)); err == nil {
		t.Errorf("the forked child %d is left after the cancel: %s", child, st)
	}
}
