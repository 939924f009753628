package remote

import (
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

	"github.com/gpush/gpush/lab/sshd"
)

// privateCancelDir points the wrapper's control folders into a folder of
// this test, so that what it leaves behind can be seen.
func privateCancelDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "ctl")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	old := cancelDirPrefix
	cancelDirPrefix = d + "/.gpush-run-"
	t.Cleanup(func() { cancelDirPrefix = old })
	return d
}

// waitGone polls until pid no longer exists; a generous bound only keeps a
// broken stop from hanging the test.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs after the cancel", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitEmpty(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		if len(ents) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left in %s: %v", dir, ents)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runUntilReady starts argv on c and cancels it once the command wrote
// ready: the cancel hits a command that is known to be set up.
func runUntilReady(t *testing.T, c *sshConn, argv []string, ready string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx, argv, RunOptions{})
		errc <- err
	}()
	readPid(t, ready)
	cancel()
	return <-errc
}

func readPid(t *testing.T, p string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(p)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never wrote %s", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An innocent process whose pid the command prints (a "gpush-pid:N"
// first line, which a pid-from-output cancel would trust) survives the cancel; the command
// itself is stopped, and the signal request went on the session.
func TestCancelNeverSignalsAPidFromOutput(t *testing.T) {
	requireRoot(t)
	ctl := privateCancelDir(t)
	e := newEnv(t, sshd.Options{LogLevel: "DEBUG1"})
	c := e.dial(t)
	innocent := exec.Command("sleep", "300")
	if err := innocent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { innocent.Wait(); close(exited) }()
	t.Cleanup(func() { innocent.Process.Kill(); <-exited })
	ip := innocent.Process.Pid

	pidFile := filepath.Join(e.tdir, "pid")
	script := fmt.Sprintf("printf 'gpush-pid:%d\\n%d\\n'; echo $$ > %s; exec sleep 60", ip, ip, pidFile)
	err := runUntilReady(t, c, []string{"sh", "-c", script}, pidFile)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want a canceled run, got %v", err)
	}
	mustContain(t, err.Error(), "h1", "sh")
	waitGone(t, readPid(t, pidFile), "the timed-out remote command")
	select {
	case <-exited:
		t.Fatalf("the innocent process (pid %d) named in the output was signalled: %v", ip, innocent.ProcessState)
	default:
	}
	// sshd got the signal request on the session (and refuses it for a
	// root login: the wrapper's FIFO stopped the command).
	mustContain(t, e.srv.Logs(), "req signal")
	waitEmpty(t, ctl)
	if res, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("connection unusable after the cancel: %v", err)
	}
}

// For a non-root login sshd honours the signal request: it signals the
// process group of the session it forked, whatever the command printed.
func TestCancelSignalGoesThroughTheSession(t *testing.T) {
	requireRoot(t)
	if _, err := execOut("sh", "-c", "command -v useradd"); err != nil {
		t.Skip("useradd missing")
	}
	user := "gpushsig" + strconv.Itoa(os.Getpid()%100000)
	if out, err := execOut("useradd", "-m", "-s", "/bin/sh", user); err != nil {
		t.Skipf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { execOut("userdel", "-r", user) })
	if out, err := execOut("usermod", "-p", "*", user); err != nil {
		t.Fatalf("usermod: %v %s", err, out)
	}
	e := newEnv(t, sshd.Options{LogLevel: "DEBUG1"})
	e.host.User = user
	e.host.Vars = map[string]any{}
	c := e.dial(t)
	home := "/home/" + user
	pgFile, pidFile, tf := filepath.Join(home, "pgid"), filepath.Join(home, "pid"), filepath.Join(home, "term")
	// The command records its pid, its process group and that TERM reached it.
	script := fmt.Sprintf(`trap 'echo TERM > %s; exit 0' TERM; echo $$ > %s; awk '{print $5}' /proc/$$/stat > %s; while :; do sleep 0.05; done`,
		tf, pidFile, pgFile)
	err := runUntilReady(t, c, []string{"sh", "-c", script}, pgFile)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want a canceled run, got %v", err)
	}
	pgid := readPid(t, pgFile)
	waitGone(t, readPid(t, pidFile), "the command")
	if b, _ := os.ReadFile(tf); strings.TrimSpace(string(b)) != "TERM" {
		t.Fatalf("the command did not get TERM (got %q)", b)
	}
	mustContain(t, e.srv.Logs(), fmt.Sprintf("killpg(%d, %d)", pgid, syscall.SIGTERM))
}

func TestCancelKillsACommandIgnoringTerm(t *testing.T) {
	requireRoot(t)
	ctl := privateCancelDir(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	pidFile := filepath.Join(e.tdir, "pid")
	script := "trap '' TERM; echo $$ > " + pidFile + "; while :; do sleep 1; done"
	err := runUntilReady(t, c, []string{"sh", "-c", script}, pidFile)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want a canceled run, got %v", err)
	}
	waitGone(t, readPid(t, pidFile), "a command ignoring TERM")
	waitEmpty(t, ctl)
}

func TestWrapperCleansUpAndPassesStatus(t *testing.T) {
	requireRoot(t)
	ctl := privateCancelDir(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	for _, tc := range []struct {
		argv []string
		code int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "kill -KILL $$"}, 137},
		{[]string{"/nonexistent/cmd"}, 127},
	} {
		res, err := c.Run(context.Background(), tc.argv, RunOptions{})
		if err != nil || res.ExitCode != tc.code {
			t.Errorf("%v: %v %+v, want exit %d", tc.argv, err, res, tc.code)
		}
		if strings.Contains(string(res.Stderr), "Killed") || strings.Contains(string(res.Stderr), "gpush-run") {
			t.Errorf("%v: the wrapper shows in stderr: %q", tc.argv, res.Stderr)
		}
		// Removed before the wrapper exits, so before the call returns.
		if ents, _ := os.ReadDir(ctl); len(ents) != 0 {
			t.Fatalf("%v: control folder left: %v", tc.argv, ents)
		}
	}
}

// A name in the way of the control folder (taken, or planted by another
// user who read the token from ps) is never opened through; the command
// still runs.
func TestCancelControlFolderTaken(t *testing.T) {
	requireRoot(t)
	ctl := privateCancelDir(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	victimDir := t.TempDir()
	target := filepath.Join(victimDir, "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink(target, filepath.Join(victimDir, "c"))
	for name, plant := range map[string]func(d string){
		"symlink to a folder": func(d string) { os.Symlink(victimDir, d) },
		"foreign folder": func(d string) {
			os.Mkdir(d, 0o755)
			os.Symlink(target, filepath.Join(d, "c"))
			os.Chown(d, 65534, 65534)
		},
		"file": func(d string) { os.Symlink(target, d) },
	} {
		token := newCancelToken()
		d := cancelDirPrefix + token
		plant(d)
		// The wrapper of that token, run as a command of its own.
		res, err := c.Run(context.Background(), []string{"sh", "-c", wrapCommand("echo ok", token)}, RunOptions{})
		if err != nil || string(res.Stdout) != "ok\n" {
			t.Fatalf("%s: command with its control folder taken: %v %+v", name, err, res)
		}
		c.cancelRemote(token)
		fi, err := os.Stat(target)
		if b, _ := os.ReadFile(target); string(b) != "keep" || err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s: opened through a planted name: %q %v", name, b, err)
		}
		if _, err := os.Lstat(d); err != nil {
			t.Fatalf("%s: the planted name was removed: %v", name, err)
		}
		os.RemoveAll(d)
	}
	if ents, _ := os.ReadDir(ctl); len(ents) != 0 {
		t.Fatalf("left in the control folder: %v", ents)
	}
}

// The wrapper under each POSIX shell a login may have: arguments, stdin,
// stdout, stderr and the exit status pass through unchanged.
func TestWrapperUnderEachShell(t *testing.T) {
	ctl := privateCancelDir(t)
	hostile := []string{"printf", "[%s]\n", "a b", "it's", "$(id)", "`id`", ";", "*", "", "x\ny", "$HOME", `\`, "(", ")", "{", "}"}
	var want strings.Builder
	for _, h := range hostile[2:] {
		fmt.Fprintf(&want, "[%s]\n", h)
	}
	for _, sh := range []string{"/bin/sh", "/bin/bash", "/bin/dash"} {
		if _, err := os.Stat(sh); err != nil {
			continue
		}
		script := wrapCommand(ShellJoin(hostile)+"; cat; echo err >&2; exit 5", newCancelToken())
		cmd := exec.Command(sh, "-c", script)
		cmd.Stdin = strings.NewReader("from stdin")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 5 {
			t.Errorf("%s: exit %v, want 5", sh, err)
		}
		if stdout.String() != want.String()+"from stdin" || stderr.String() != "err\n" {
			t.Errorf("%s: stdout %q stderr %q", sh, stdout.String(), stderr.String())
		}
		if ents, _ := os.ReadDir(ctl); len(ents) != 0 {
			t.Errorf("%s: left %v", sh, ents)
		}
	}
}

// A wrapper killed from outside (SIGKILL, the OOM killer) cannot clean
// up: its watcher sees the FIFO's writer gone, stops the command's group
// and removes the folder, so nothing is left waiting on the host.
func TestWrapperKilledFromOutsideLeavesNothing(t *testing.T) {
	requireRoot(t)
	ctl := privateCancelDir(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	pidFile, pgFile := filepath.Join(e.tdir, "pid"), filepath.Join(e.tdir, "pgid")
	script := fmt.Sprintf(`echo $$ > %s; awk '{print $5}' /proc/$$/stat > %s; exec sleep 60`, pidFile, pgFile)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), []string{"sh", "-c", script}, RunOptions{})
		errc <- err
	}()
	pgid := readPid(t, pgFile)
	// The group leader is the wrapper, started by the sshd of this test.
	if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, readPid(t, pidFile), "the command of a killed wrapper")
	<-errc
	waitEmpty(t, ctl)
}
