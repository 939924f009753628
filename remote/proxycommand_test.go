package remote

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
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

// TestProxyHelperProcess is not a test: run as this test binary with
// "-- proxy-helper HOST PORT INFOFILE [WORDS...]" it is a tiny nc (TCP to
// HOST:PORT over stdin/stdout) that writes its pid and WORDS to INFOFILE;
// with "-- proxy-sleeper INFOFILE" it writes its pid and sleeps; with
// "-- proxy-dier HOST PORT INFOFILE STOPFILE" it relays like proxy-helper
// until STOPFILE exists, then complains on stderr and exits 3 (a session
// manager whose token expired mid-session).
func TestProxyHelperProcess(t *testing.T) {
	args := flag.Args()
	if len(args) < 2 {
		return
	}
	switch args[0] {
	case "proxy-sleeper":
		writeInfo(args[1], nil)
		time.Sleep(time.Hour)
		os.Exit(0)
	case "proxy-helper":
	case "proxy-dier":
		stop := args[4]
		go func() {
			for {
				if _, err := os.Stat(stop); err == nil {
					fmt.Fprintln(os.Stderr, "proxy-dier: session token expired")
					os.Exit(3)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		args = args[:4]
	default:
		return
	}
	host, port, info := args[1], args[2], args[3]
	writeInfo(info, args[4:])
	conn, err := net.Dial("tcp", net.JoinHostPort(host, port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "proxy-helper: %v\n", err)
		os.Exit(255)
	}
	fmt.Fprintf(os.Stderr, "proxy-helper: connected to %s\n", conn.RemoteAddr())
	// Like nc without -N: EOF on stdin does not end it; only a signal or
	// the server closing does.
	go io.Copy(conn, os.Stdin)
	io.Copy(os.Stdout, conn)
	os.Exit(0)
}

func writeInfo(path string, words []string) {
	line := strconv.Itoa(os.Getpid()) + " " + strings.Join(words, " ") + "\n"
	if err := os.WriteFile(path+".tmp", []byte(line), 0o600); err == nil {
		os.Rename(path+".tmp", path)
	}
}

// helperCommand is a ProxyCommand running TestProxyHelperProcess.
func helperCommand(t *testing.T, mode string, args ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("'%s' -test.run='^TestProxyHelperProcess$' -- %s %s", exe, mode, strings.Join(args, " "))
}

// readInfo waits for a helper's info file: its pid and words.
func readInfo(t *testing.T, path string) (int, []string) {
	t.Helper()
	for range 500 {
		if b, err := os.ReadFile(path); err == nil {
			f := strings.Fields(string(b))
			pid, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("%s: %q", path, b)
			}
			return pid, f[1:]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
	return 0, nil
}

// requireGone fails unless pid is no process, or only a zombie that is
// not ours to reap (a group member reparented to init).
func requireGone(t *testing.T, pid int, zombieOK bool) {
	t.Helper()
	for range 500 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the parenthesised command name.
		if i := strings.LastIndexByte(string(b), ')'); zombieOK && i > 0 && strings.HasPrefix(string(b[i+1:]), " Z") {
			return
		}
		if !zombieOK {
			t.Fatalf("process %d still exists: %s", pid, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still running", pid)
}

func TestExpandProxyCommand(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nc %h %p", "nc 10.0.0.7 2222"},
		{"ssh -W %h:%p -l %r bastion", "ssh -W 10.0.0.7:2222 -l ops bastion"},
		{"aws ssm start-session --target %n --document %k", "aws ssm start-session --target gpu01 --document gpu01"},
		{"printf 100%% %%h", "printf 100% %h"},
		{"no tokens", "no tokens"},
	}
	for _, tt := range tests {
		got, err := expandProxyCommand(tt.in, "gpu01", "10.0.0.7", 2222, "ops", "gpu01")
		if err != nil || got != tt.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if got, err := expandProxyCommand("nc %h %p", "v6", "fe80::1%eth0", 22, "u", "v6"); err != nil || got != "nc fe80::1%eth0 22" {
		t.Errorf("IPv6 with zone: %q %v", got, err)
	}
	bad := []struct{ in, host, user, want string }{
		{"nc %x %p", "10.0.0.7", "ops", "ProxyCommand for gpu01: unknown token %x"},
		{"nc %h %", "10.0.0.7", "ops", "ProxyCommand for gpu01 ends with a lone %"},
		{"nc %h %p", "a;reboot", "ops", `%h would be "a;reboot"`},
		{"nc %h %p", "$(id)", "ops", "refused"},
		{"ssh -l %r b", "10.0.0.7", "x y", `%r would be "x y"`},
		{"ssh %h", "-oProxyCommand=x", "ops", "refused"},
	}
	for _, b := range bad {
		_, err := expandProxyCommand(b.in, "gpu01", b.host, 22, b.user, "gpu01")
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("expand(%q, host %q, user %q) = %v; want an error with %q", b.in, b.host, b.user, err, b.want)
		}
	}
}

func TestProxyCommandCarriesSSH(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	info := filepath.Join(e.tdir, "info")
	e.host.ProxyCommand = helperCommand(t, "proxy-helper", "%h", "%p", info, "%r", "%n", "100%%")
	c := e.dial(t)
	pid, words := readInfo(t, info)
	if got := strings.Join(words, " "); got != "root h1 100%" {
		t.Errorf("tokens %%r %%n %%%% gave %q", got)
	}
	res, err := c.Run(context.Background(), []string{"echo", "proxied"}, RunOptions{})
	if err != nil || string(res.Stdout) != "proxied\n" {
		t.Fatalf("run over ProxyCommand: %v %+v", err, res)
	}
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("proxy %d: process group %d (%v), want its own", pid, pgid, err)
	}
	// It ignores EOF on stdin: only Close's signal ends it, and Close
	// reaps it (no zombie left).
	c.Close()
	requireGone(t, pid, false)
}

// A ProxyCommand that dies mid-session: the lost connection is explained
// by its exit status and stderr, not only "EOF".
func TestProxyCommandDiesMidSession(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	info, stop := filepath.Join(e.tdir, "info"), filepath.Join(e.tdir, "stop")
	e.host.ProxyCommand = helperCommand(t, "proxy-dier", "%h", "%p", info, stop)
	c := e.dial(t)
	if res, err := c.Run(context.Background(), []string{"echo", "up"}, RunOptions{}); err != nil || string(res.Stdout) != "up\n" {
		t.Fatalf("run before the proxy dies: %v %+v", err, res)
	}
	pid, _ := readInfo(t, info)
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-c.dead
	_, err := c.Run(context.Background(), []string{"echo", "again"}, RunOptions{})
	if !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("run after the proxy died: %v, want ErrConnectionLost", err)
	}
	mustContain(t, err.Error(), "ProxyCommand for h1 exited 3", "session token expired")
	requireGone(t, pid, false)
}

func TestProxyCommandSSHW(t *testing.T) {
	requireRoot(t)
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		t.Skip("no ssh client")
	}
	e := newEnv(t, sshd.Options{})
	bastion := sshd.StartT(t, sshd.Options{LogLevel: "DEBUG1"})
	bkh := filepath.Join(e.tdir, "bastion_known_hosts")
	if err := bastion.WriteKnownHosts(bkh); err != nil {
		t.Fatal(err)
	}
	e.host.ProxyCommand = fmt.Sprintf("%s -F none -i %s -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes "+
		"-o UserKnownHostsFile=%s -o GlobalKnownHostsFile=/dev/null -p %d -W %%h:%%p root@127.0.0.1",
		sshBin, bastion.ClientKeyPath, bkh, bastion.Port)
	c := e.dial(t)
	res, err := c.Run(context.Background(), []string{"echo", "via", "bastion"}, RunOptions{})
	if err != nil || string(res.Stdout) != "via bastion\n" {
		t.Fatalf("run through ssh -W: %v %+v", err, res)
	}
	mustContain(t, bastion.Logs(), fmt.Sprintf("target 127.0.0.1 port %d", e.srv.Port))
	c.Close()

	// The bastion refuses the key: ssh's own complaint is the error.
	os.WriteFile(bkh, nil, 0o600)
	_, err = Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	var pe *ProxyCommandError
	if de.Stage != StageProxyCommand || !errors.As(err, &pe) || pe.ExitCode != 255 {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	mustContain(t, err.Error(), "ProxyCommand for h1 exited 255", "Host key verification failed")
}

func TestProxyCommandFailureQuotesStderr(t *testing.T) {
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	tdir := t.TempDir()
	log, _ := testLogger(t)
	opts := Options{KnownHostsFile: filepath.Join(tdir, "kh"), ConnectTimeout: 10 * time.Second, AgentSocket: "none",
		DefaultKeys: []string{}, Logger: log}
	info := filepath.Join(tdir, "info")
	h := Host{Name: "gpu01", Address: "127.0.0.1", Port: port, User: "root", Connection: "ssh"}
	h.ProxyCommand = helperCommand(t, "proxy-helper", "%h", "%p", info)
	_, err = Dial(context.Background(), h, opts)
	de := dialErr(t, err)
	var pe *ProxyCommandError
	if de.Stage != StageProxyCommand || !errors.As(err, &pe) || pe.ExitCode != 255 || de.Host != "gpu01" {
		t.Fatalf("stage %q host %q: %v", de.Stage, de.Host, err)
	}
	mustContain(t, err.Error(), "ProxyCommand for gpu01 exited 255", "connection refused", fmt.Sprintf("127.0.0.1:%d", port))
	pid, _ := readInfo(t, info)
	requireGone(t, pid, false)

	// An unknown token is a configuration error naming the host; nothing runs.
	h.ProxyCommand = "nc %h %Z"
	_, err = Dial(context.Background(), h, opts)
	if de := dialErr(t, err); de.Stage != StageConfig {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	mustContain(t, err.Error(), "gpu01", "unknown token %Z")

	// ProxyJump and ProxyCommand both set: refused rather than guessed.
	h.ProxyCommand, h.ProxyJump = "nc %h %p", "bastion"
	_, err = Dial(context.Background(), h, opts)
	if de := dialErr(t, err); de.Stage != StageConfig {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
}

func TestProxyCommandHostKeyAndDeadline(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	// The target's key is checked under its own name, whatever carries
	// the connection: an empty known_hosts refuses it.
	os.WriteFile(e.kh, nil, 0o600)
	info := filepath.Join(e.tdir, "info")
	e.host.ProxyCommand = helperCommand(t, "proxy-helper", "%h", "%p", info)
	_, err := Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	var hke *HostKeyError
	if de.Stage != StageHostKey || !errors.As(err, &hke) || hke.Addr != fmt.Sprintf("[127.0.0.1]:%d", e.srv.Port) {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	// Still running when the handshake failed: gpush ended it, and its
	// stderr is quoted.
	mustContain(t, err.Error(), "ProxyCommand stderr", "proxy-helper: connected to")
	pid, _ := readInfo(t, info)
	requireGone(t, pid, false)

	// A command that never answers is bounded by ConnectTimeout, and it
	// and the rest of its process group are ended.
	side := filepath.Join(e.tdir, "side")
	e.host.ProxyCommand = fmt.Sprintf("sh -c \"%s & exec %s\"",
		helperCommand(t, "proxy-sleeper", side), helperCommand(t, "proxy-sleeper", info))
	os.Remove(info)
	e.opts.ConnectTimeout = time.Second
	_, err = Dial(context.Background(), e.host, e.opts)
	if de := dialErr(t, err); de.Stage != StageBanner {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	pid, _ = readInfo(t, info)
	requireGone(t, pid, false)
	sidePid, _ := readInfo(t, side)
	requireGone(t, sidePid, true)
}

func TestProxyCommandCanceled(t *testing.T) {
	tdir := t.TempDir()
	log, _ := testLogger(t)
	opts := Options{KnownHostsFile: filepath.Join(tdir, "kh"), ConnectTimeout: time.Hour, AgentSocket: "none",
		DefaultKeys: []string{}, Logger: log}
	info := filepath.Join(tdir, "info")
	h := Host{Name: "gpu02", Address: "127.0.0.1", Port: 22, User: "root", Connection: "ssh",
		ProxyCommand: helperCommand(t, "proxy-sleeper", info)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, h, opts)
		done <- err
	}()
	// Canceled once the command runs: the dial ends and so does the command.
	pid, _ := readInfo(t, info)
	cancel()
	err := <-done
	var de *DialError
	if !errors.As(err, &de) || de.Stage != StageCanceled {
		t.Fatalf("want a canceled dial, got %v", err)
	}
	requireGone(t, pid, false)
}
