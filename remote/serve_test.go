package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/remote/helperbin"
)

// killServe kills the conn's serve helper (a process the test's sshd
// started) and waits until the conn has seen it end.
func killServe(t *testing.T, c *sshConn) {
	t.Helper()
	signalServe(t, c, syscall.SIGKILL)
}

// signalServe sends sig to the conn's serve helper and waits until the
// conn has seen it end.
func signalServe(t *testing.T, c *sshConn, sig syscall.Signal) {
	t.Helper()
	s := c.serve.current()
	if s == nil || s.pid <= 0 {
		t.Fatal("no serve session running")
	}
	if err := syscall.Kill(s.pid, sig); err != nil {
		t.Fatalf("signal serve helper %d: %v", s.pid, err)
	}
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the conn did not see its serve session end")
	}
}

// sshdSessions counts the sessions sshd started for the connection whose
// client port is port, once sshd logged the connection's end.
func sshdSessions(t *testing.T, srv *sshd.Server, port int) int {
	t.Helper()
	closing := fmt.Sprintf("Closing connection to 127.0.0.1 port %d", port)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		logs := srv.Logs()
		if !strings.Contains(logs, closing) {
			continue
		}
		n := 0
		for _, l := range strings.Split(logs, "\n") {
			if strings.HasPrefix(l, "Starting session:") && strings.Contains(l, fmt.Sprintf("port %d ", port)) {
				n++
			}
		}
		return n
	}
	t.Fatalf("sshd never logged %q", closing)
	return 0
}

func clientPort(c *sshConn) int {
	_, p, _ := strings.Cut(c.client.LocalAddr().String(), ":")
	n, _ := strconv.Atoi(p)
	return n
}

// A deployment closes the SFTP session it used, one a Put opened before it
// included; a later Put opens it again.
func TestDeployClosesSFTPPutReopens(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	ctx := context.Background()
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, step := range []func() error{
		func() error { return c.Put(ctx, filepath.Join(e.dir, "a"), strings.NewReader("a"), 0o600) },
		func() error { return c.Helper(ctx, helper.VerbSnapshot, snapReq, nil) },
		func() error { return c.Put(ctx, filepath.Join(e.dir, "b"), strings.NewReader("b"), 0o600) },
	} {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		c.sftpMu.Lock()
		open := c.sftp != nil
		c.sftpMu.Unlock()
		if open != (i != 1) {
			t.Errorf("after step %d the SFTP session is open: %v", i, open)
		}
	}
	// SFTP (the Put), the refused warm check, serve, SFTP again.
	if n, u := c.sessions.Load(), c.uploads.Load(); n != 4 || u != 1 {
		t.Errorf("%d sessions, %d uploads; want 4 and 1", n, u)
	}
	for _, f := range []string{"a", "b"} {
		if b, err := os.ReadFile(filepath.Join(e.dir, f)); err != nil || string(b) != f {
			t.Errorf("%s: %q, %v", f, b, err)
		}
	}
}

// A warm host costs one session per connection, whatever the number of
// calls, concurrent ones included; a cold one adds the deployment's.
func TestServeOneSessionPerConn(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	cold := e.dial(t)
	if err := cold.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	// Cold: the refused warm check (which answered the probe's questions
	// too), SFTP, then the serve session behind the warm check again
	// (which hashes the upload).
	if n := cold.sessions.Load(); n != 3 || cold.uploads.Load() != 1 {
		t.Fatalf("cold host: %d sessions, %d uploads; want 3 and 1", n, cold.uploads.Load())
	}
	if strings.Contains(e.logs.String(), "uname -m; id -u") {
		t.Error("the cold path ran the probe although the warm check answered it")
	}
	cold.sftpMu.Lock()
	if cold.sftp != nil {
		t.Error("the SFTP session stayed open after the deployment")
	}
	cold.sftpMu.Unlock()
	if err := cold.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil || cold.sessions.Load() != 3 {
		t.Fatalf("second call on the cold conn: %v, %d sessions", err, cold.sessions.Load())
	}
	cold.Close()
	if n := sshdSessions(t, e.srv, clientPort(cold)); n != 3 {
		t.Errorf("sshd logged %d sessions for the cold conn, want 3", n)
	}

	c := e.dial(t)
	const calls = 12
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var snap helper.Snapshot
			err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, &snap)
			if err == nil && snap.BootID == "" {
				err = fmt.Errorf("call %d: empty snapshot", i)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := c.sessions.Load(); n != 1 || c.uploads.Load() != 0 {
		t.Fatalf("warm host: %d sessions and %d uploads for %d calls, want 1 and 0", n, c.uploads.Load(), calls)
	}
	c.Close()
	if n := sshdSessions(t, e.srv, clientPort(c)); n != 1 {
		t.Errorf("sshd logged %d sessions for the warm conn, want 1", n)
	}
}

// plantScript writes at p a script of exactly size bytes that leaves
// marker when run.
func plantScript(t *testing.T, p, marker string, size int64) {
	t.Helper()
	body := "#!/bin/sh\ntouch " + marker + "\nexit 0\n#"
	if int64(len(body)) > size {
		t.Fatal("helper smaller than the planted script")
	}
	body += strings.Repeat("x", int(size)-len(body))
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// Each rule of the warm check refuses, leading to the cold path (which
// repairs or refuses with its own message); the planted file never runs.
func TestWarmCheckRefusesAndNeverRunsAPlantedFile(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	d := helperDigests(helperbin.Source)["amd64"]
	if d.sum == "" {
		t.Fatal("no amd64 helper")
	}
	name := "gpush-helper-" + d.sum[:32]
	// The planted script does leave its marker when run.
	probe, probeMarker := filepath.Join(e.tdir, "probe-plant"), filepath.Join(e.tdir, "probe-ran")
	plantScript(t, probe, probeMarker, d.size)
	if out, err := execOut(probe); err != nil {
		t.Fatalf("planted script does not run: %v %s", err, out)
	}
	if _, err := os.Stat(probeMarker); err != nil {
		t.Fatal("planted script left no marker")
	}
	mkdir := func(p string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name   string
		dir    func(root string) string // the helper folder, a planted file in it
		reason string                   // the warm check's words (the log)
		err    string                   // the cold path's error; "" when it repairs
	}{
		{"group-writable helper folder", func(r string) string { return mkdir(filepath.Join(r, "gpush"), 0o770) },
			"group- or world-writable", "group- or world-writable (mode 0770)"},
		{"symlinked folder", func(r string) string {
			real := mkdir(filepath.Join(r, "real"), 0o755)
			mkdir(filepath.Join(real, "gpush"), 0o700)
			if err := os.Symlink(real, filepath.Join(r, "link")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(r, "link", "gpush")
		}, "is a symlink", "is a symlink"},
		{"world-writable ancestor, not sticky", func(r string) string {
			mkdir(filepath.Join(r, "open"), 0o777)
			return mkdir(filepath.Join(r, "open", "gpush"), 0o700)
		}, "not a sticky root folder", "without being a sticky root folder"},
		{"planted file of the right size", func(r string) string { return mkdir(filepath.Join(r, "gpush"), 0o700) },
			"has sha256", ""},
		{"group-writable file", func(r string) string { return mkdir(filepath.Join(r, "gpush"), 0o700) },
			name + " is group- or world-writable", ""},
		{"file not executable", func(r string) string { return mkdir(filepath.Join(r, "gpush"), 0o700) },
			name + " is not executable", ""},
		{"file of another size", func(r string) string { return mkdir(filepath.Join(r, "gpush"), 0o700) },
			"has size", ""},
	}
	fileMode := map[string]os.FileMode{"group-writable file": 0o775, "file not executable": 0o644}
	for i, tc := range cases {
		root := mkdir(filepath.Join(e.tdir, "case"+strconv.Itoa(i)), 0o755)
		dir := tc.dir(root)
		marker := filepath.Join(root, "planted-ran")
		size := d.size
		if tc.name == "file of another size" {
			size--
		}
		plantScript(t, filepath.Join(dir, name), marker, size)
		if m, ok := fileMode[tc.name]; ok {
			if err := os.Chmod(filepath.Join(dir, name), m); err != nil {
				t.Fatal(err)
			}
		}
		e.host.Vars[VarRemoteDir] = dir
		logStart := len(e.logs.String())
		c := e.dial(t)
		err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: cold path did not repair: %v", tc.name, err)
		case tc.err != "" && err == nil:
			t.Errorf("%s: helper ran", tc.name)
		case tc.err != "":
			mustContain(t, err.Error(), "h1", tc.err)
		}
		c.Close()
		if logs := e.logs.String()[logStart:]; !strings.Contains(logs, "warm check refused") || !strings.Contains(logs, tc.reason) {
			t.Errorf("%s: the warm check did not refuse with %q", tc.name, tc.reason)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s: the planted file ran", tc.name)
		}
	}
}

// slowSMI is an nvidia-smi that records its pid and hangs.
func slowSMI(t *testing.T) (cfg helper.Config, pids string) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	smi := filepath.Join(dir, "nvidia-smi")
	pids = filepath.Join(dir, "pids")
	if err := os.WriteFile(smi, []byte("#!/bin/sh\necho $$ >>"+pids+"\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(dir, "dev")
	os.Mkdir(dev, 0o755)
	os.WriteFile(filepath.Join(dev, "nvidia0"), nil, 0o666)
	return helper.Config{DevDir: dev, NvidiaSMI: smi, SMITimeout: helper.Duration(5 * time.Minute)}, pids
}

func readPids(file string) []int {
	b, _ := os.ReadFile(file)
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func waitPids(t *testing.T, file string) []int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if p := readPids(file); len(p) > 0 {
			return p
		}
	}
	t.Fatal("nvidia-smi never started")
	return nil
}

// alive reports whether pid still runs (a zombie does not) after waiting
// up to 20s for it to end.
func stillRuns(pid int) bool {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			return false
		}
	}
	return true
}

func TestServeCancelStopsALongWaitFree(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	if _, err := c.DeployHelper(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg, pids := slowSMI(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- c.Helper(ctx, helper.VerbWaitFree, helper.WaitFreeRequest{Config: cfg, Timeout: helper.Duration(5 * time.Minute)}, nil)
	}()
	smi := waitPids(t, pids)[0]
	before := c.sessions.Load()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("want the ctx error, got %v", err)
	}
	if stillRuns(smi) {
		syscall.Kill(smi, syscall.SIGKILL)
		t.Fatalf("nvidia-smi %d still runs after the cancel", smi)
	}
	// The cancel took no session, and the session serves the next call.
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	if n := c.sessions.Load(); n != before {
		t.Fatalf("%d sessions after the cancel and a call, want %d", n, before)
	}
}

func TestServeHelperKilledMidCallNotRetried(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	cfg, pids := slowSMI(t)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Helper(context.Background(), helper.VerbWaitFree, helper.WaitFreeRequest{Config: cfg, Timeout: helper.Duration(5 * time.Minute)}, nil)
	}()
	smi := waitPids(t, pids)[0]
	t.Cleanup(func() { syscall.Kill(smi, syscall.SIGKILL) }) // orphaned by the kill
	before := c.sessions.Load()
	killServe(t, c)
	err := <-errc
	if err == nil {
		t.Fatal("the call survived its helper's death")
	}
	mustContain(t, err.Error(), "h1", "wait-free", "not retried", "killed by signal KILL")
	if IsUnreachable(err) {
		t.Errorf("a helper death on a live connection reads as unreachable: %v", err)
	}
	if n := len(readPids(pids)); n != 1 || c.sessions.Load() != before {
		t.Fatalf("after the failed call: %d wait-free runs, %d new sessions; want 1 and 0", n, c.sessions.Load()-before)
	}
	// The next call starts a new session (the warm check passes).
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	if n := c.sessions.Load(); n != before+1 {
		t.Fatalf("%d sessions for the call after the death, want %d", n-before, 1)
	}
}

// A helper that dies mid-call on its own (SIGQUIT: the Go runtime dumps
// its goroutines to stderr and exits 2) is explained by its exit status and
// its stderr, read once the session ended; while it ran, the session cost
// the connection one goroutine (its reader), the poller taking the
// channel's requests and stderr waiting for the end.
func TestServeHelperDeathKeepsItsStderr(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	// A first connection deploys the helper (its SFTP client keeps two
	// goroutines for the connection's life): the measured one is warm.
	first := e.dial(t)
	if err := first.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	first.Close()
	time.Sleep(200 * time.Millisecond) // its goroutines ending
	before := runtime.NumGoroutine()
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	var n int
	for i := 0; i < 100; i++ { // the dial's and the call's own goroutines finishing
		if n = runtime.NumGoroutine() - before; n <= 4 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n > 4 {
		buf := make([]byte, 1<<16)
		t.Errorf("a connection with its serve session runs %d goroutines, want 4 (x/crypto's 3, the reader):\n%s",
			n, buf[:runtime.Stack(buf, true)])
	}
	cfg, pids := slowSMI(t)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Helper(context.Background(), helper.VerbWaitFree, helper.WaitFreeRequest{Config: cfg, Timeout: helper.Duration(5 * time.Minute)}, nil)
	}()
	smi := waitPids(t, pids)[0]
	t.Cleanup(func() { syscall.Kill(smi, syscall.SIGKILL) })
	signalServe(t, c, syscall.SIGQUIT)
	err := <-errc
	if err == nil {
		t.Fatal("the call survived its helper's death")
	}
	mustContain(t, err.Error(), "wait-free", "not retried", "exit status 2", "SIGQUIT", "goroutine")
}

// A login shell that prints before the command (and even prints a hello
// with another token) does not disturb the hello.
func TestServeSkipsShellNoise(t *testing.T) {
	requireRoot(t)
	if _, err := execOut("sh", "-c", "command -v useradd && command -v userdel"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("useradd missing in CI")
		}
		t.Skip("useradd missing")
	}
	e := newEnv(t, sshd.Options{})
	for p := e.tdir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755) // the user's shell and home live below
	}
	shell := filepath.Join(e.tdir, "noisy-sh")
	noise := "#!/bin/sh\necho 'Welcome to the lab'\necho '{\"serve\":1,\"token\":\"not-yours\"}'\necho 'gpush-warm-exec: /bin/false'\nexec /bin/sh \"$@\"\n"
	// Noisy from the start: the cold deployment (the warm check of the
	// upload) reads through the noise too.
	if err := os.WriteFile(shell, []byte(noise), 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(e.tdir, "home")
	user := "gpushnz" + strconv.Itoa(os.Getpid()%100000)
	if out, err := execOut("useradd", "-m", "-d", home, "-s", shell, "-p", "*", user); err != nil {
		t.Fatalf("useradd: %v %s", err, out)
	}
	// Before the dials' cleanups, so it runs after them; -f: the helper
	// of the last session may still be exiting.
	t.Cleanup(func() { execOut("userdel", "-f", user) })
	e.host.User = user
	e.host.Vars = map[string]any{} // ~/.cache/gpush
	c := e.dial(t)
	var snap helper.Snapshot
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, &snap); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c2 := e.dial(t)
	if res, err := c2.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil || !strings.Contains(string(res.Stdout), "Welcome") {
		t.Fatalf("the login shell is not noisy: %v %+v", err, res)
	}
	c2.sessions.Store(0)
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, snapReq, &snap); err != nil || snap.BootID == "" {
		t.Fatalf("warm call through a noisy shell: %v", err)
	}
	if n := c2.sessions.Load(); n != 1 {
		t.Fatalf("%d sessions on a warm host with a noisy shell, want 1", n)
	}
}

// A helper that stopped reading (SIGSTOP) cannot hold a call past its ctx:
// the write is cut off, the session dropped, the next call gets a new one.
func TestServeStoppedHelperCallEndsWithCtx(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	s := c.serve.current()
	if err := syscall.Kill(s.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(s.pid, syscall.SIGKILL) })
	// Larger than the channel's window and the pipes: the write blocks.
	big := helper.SnapshotRequest{Config: helper.Config{Protected: []string{strings.Repeat("x", 8<<20)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Helper(ctx, helper.VerbSnapshot, big, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the ctx error, got %v", err)
	}
	if !s.isEnded() {
		t.Fatal("a session with a half-written request was kept")
	}
	syscall.Kill(s.pid, syscall.SIGKILL)
	before := c.sessions.Load()
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	if c.sessions.Load() != before+1 {
		t.Fatal("the next call did not start a new session")
	}
}

// Inventory values reach the warm check as quoted arguments: a remote dir
// full of shell syntax is a folder name, nothing runs.
func TestWarmCheckQuotesTheRemoteDir(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	marker := filepath.Join(e.tdir, "injected")
	dir := filepath.Join(e.tdir, "a'b $(touch "+marker+") `touch "+marker+"`;x", "gpush")
	e.host.Vars[VarRemoteDir] = dir
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c2 := e.dial(t)
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	if n := c2.sessions.Load(); n != 1 {
		t.Errorf("%d sessions on the warm host, want 1 (the warm check refused the folder)", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("shell syntax in gpush_remote_dir ran")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("helper folder not made under its literal name: %v", err)
	}
}

func TestParseWarmProbe(t *testing.T) {
	pr, ok := parseWarmProbe("h1", "gpush-probe: tok x86_64 1000 /home/a b", "tok")
	if !ok || pr.machine != "x86_64" || pr.uid != 1000 || pr.home != "/home/a b" {
		t.Fatalf("got %+v %v", pr, ok)
	}
	for _, line := range []string{
		"gpush-probe: other x86_64 1000 /home/a", // another token: noise
		"gpush-probe: tok x86_64 root /home/a",
		"gpush-probe: tok x86_64 1000 relative",
		"gpush-probe: tok x86_64",
	} {
		if _, ok := parseWarmProbe("h1", line, "tok"); ok {
			t.Errorf("%q accepted", line)
		}
	}
}
