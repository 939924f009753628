package labsystemd

import (
	"os"
	"os/exec"
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
