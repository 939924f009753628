package remote

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
)

// descendants returns the pids of root's descendants (root excluded), read
// from /proc.
func descendants(t *testing.T, root int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	kids := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// Fields after the command name, which may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		kids[ppid] = append(kids[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

// TestKeepaliveNoticesAStoppedSSHD stops a real sshd (the listener the test
// started and every process under it: the connection's monitor and session
// processes, which sshd puts in their own sessions) with SIGSTOP. The TCP
// connection stays open, so only the keepalive can tell.
func TestKeepaliveNoticesAStoppedSSHD(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	e.opts.KeepaliveInterval = 200 * time.Millisecond
	e.opts.KeepaliveCountMax = 3
	c := e.dial(t)
	// Answered keepalives keep an idle connection up.
	time.Sleep(time.Second)
	if _, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil {
		t.Fatalf("healthy idle connection closed by the keepalive: %v", err)
	}
	// A call that blocks until the connection ends: cat of a pipe never closed.
	pr, pw := io.Pipe()
	defer pw.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), []string{"cat"}, RunOptions{Stdin: pr})
		errc <- err
	}()
	// Stop once the command runs, so that the session processes exist.
	for deadline := time.Now().Add(20 * time.Second); !hasDescendant(t, e.srv.PID(), "cat"); {
		if time.Now().After(deadline) {
			t.Fatal("the remote cat never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopped := append([]int{e.srv.PID()}, descendants(t, e.srv.PID())...)
	t.Cleanup(func() { // before sshd's own cleanup stops it
		for _, p := range stopped {
			syscall.Kill(p, syscall.SIGCONT)
		}
	})
	for _, p := range stopped {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("SIGSTOP %d: %v", p, err)
		}
	}
	t.Logf("stopped sshd and its children: %v", stopped)
	stoppedAt := time.Now()
	select {
	case err := <-errc:
		t.Logf("after %s: %v", time.Since(stoppedAt).Round(time.Millisecond), err)
		if !errors.Is(err, ErrConnectionLost) || !IsUnreachable(err) {
			t.Fatalf("want ErrConnectionLost, got %v", err)
		}
		mustContain(t, err.Error(), "h1", "cat", "stalled", "keepalive",
			"KeepaliveInterval 200ms x KeepaliveCountMax 3", "3 deadlines of 200ms")
	case <-time.After(60 * time.Second): // generous: detection is due after 0.8s
		t.Fatal("a call on a stopped sshd never returned")
	}
}

func hasDescendant(t *testing.T, root int, comm string) bool {
	for _, p := range descendants(t, root) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "comm"))
		if err == nil && strings.TrimSpace(string(b)) == comm {
			return true
		}
	}
	return false
}
