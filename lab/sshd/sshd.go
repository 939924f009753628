// Package sshd starts a real OpenSSH sshd on loopback for tests and demos.
//
// A Server listens on 127.0.0.1 on a free port, with its own host key, its
// own authorized_keys (holding a client key it generates unless given one)
// and its own config, so it never touches the system's sshd. It is meant to
// run as root (CI and the lab do); sshd needs root to switch to the user
// that logs in.
package sshd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ErrNotInstalled is returned (wrapped) by Start when no sshd binary is found.
var ErrNotInstalled = errors.New("OpenSSH sshd not found (install it: apt-get install openssh-server)")

// Options tunes a Server. The zero value is a usable default.
type Options struct {
	// Dir holds the config, keys and logs. Empty: a fresh temporary folder,
	// removed by Stop. It is made traversable (0755) so that sshd can read
	// authorized_keys as a non-root user.
	Dir string
	// HostKey is the server's host key; nil generates an ed25519 key.
	HostKey ed25519.PrivateKey
	// ClientKey is the key written to authorized_keys and to ClientKeyPath;
	// nil generates an ed25519 key.
	ClientKey ed25519.PrivateKey
	// AuthorizedKeys are extra keys allowed to log in (an agent's key, say).
	AuthorizedKeys []ssh.PublicKey
	// LogLevel is sshd's LogLevel (default VERBOSE).
	LogLevel string
	// ExtraConfig lines are appended to sshd_config verbatim (test setups
	// only: "MaxStartups 100", "AllowUsers root", ...). A keyword they set
	// before any Match line replaces the default line of that keyword:
	// sshd takes the first value it reads, so both would leave the default.
	ExtraConfig []string
	// Binary is the sshd to run; empty finds sshd on PATH, then /usr/sbin/sshd.
	Binary string
	// Log receives sshd's stderr (its log, -e) in addition to Dir/sshd.log.
	Log io.Writer
	// StartTimeout bounds waiting for sshd to accept (default 10s).
	StartTimeout time.Duration
}

// Server is a running sshd.
type Server struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Host is "127.0.0.1"; Port is the port it listens on.
	Host string
	Port int
	// HostKey is the server's public host key; HostSigner its private half.
	HostKey    ssh.PublicKey
	HostSigner ssh.Signer
	// ClientKeyPath is an OpenSSH private key file (0600, no passphrase)
	// accepted by the server; ClientSigner is the same key.
	ClientKeyPath string
	ClientSigner  ssh.Signer
	// Dir holds sshd_config, keys, authorized_keys and sshd.log.
	Dir        string
	ConfigPath string
	LogPath    string

	cmd     *exec.Cmd
	ownsDir bool
	done    chan struct{}
	waitErr error
	logBuf  *syncBuffer
	once    sync.Once
}

// FindSFTPServer returns OpenSSH's sftp-server program, for configs whose
// ForceCommand would otherwise receive "internal-sftp" as the command.
func FindSFTPServer() (string, error) {
	for _, p := range []string{"/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/lib/ssh/sftp-server", "/usr/libexec/sftp-server"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errors.New("no sftp-server program of OpenSSH found (Debian: openssh-sftp-server)")
}

// FindBinary returns the sshd to run: sshd on PATH, then /usr/sbin/sshd.
func FindBinary() (string, error) {
	if p, err := exec.LookPath("sshd"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// StartT starts a server for a test: it skips the test when sshd is not
// installed, fails it on any other error, and stops the server at cleanup.
func StartT(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binary == "" {
		if _, err := FindBinary(); err != nil {
			t.Skipf("skipping: %v", err)
		}
	}
	s, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Logf("stop sshd %s: %v", s.Addr, err)
		}
	})
	return s
}

// Start writes the config and keys and runs `sshd -D -e -f cfg`, returning
// once the server answers with an SSH banner. ctx bounds the start only;
// the server runs until Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = FindBinary(); err != nil {
			return nil, err
		}
	}
	// sshd refuses to start without its privilege-separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, fmt.Errorf("create sshd privilege separation dir /run/sshd: %w", err)
	}
	s := &Server{Host: "127.0.0.1", done: make(chan struct{}), logBuf: &syncBuffer{}}
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "gpush-sshd-")
		if err != nil {
			return nil, fmt.Errorf("create sshd folder: %w", err)
		}
		s.Dir, s.ownsDir = d, true
	} else {
		s.Dir = opts.Dir
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("create sshd folder %s: %w", s.Dir, err)
		}
	}
	ok := false
	defer func() {
		if !ok && s.ownsDir {
			os.RemoveAll(s.Dir)
		}
	}()
	if err := os.Chmod(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod sshd folder %s: %w", s.Dir, err)
	}
	if err := s.writeKeys(opts); err != nil {
		return nil, err
	}
	// The port is picked by binding :0 and releasing it; another process
	// may grab it in between, so a failed start is retried on a new port.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if err := s.writeConfig(opts, port); err != nil {
			return nil, err
		}
		err = s.run(ctx, bin, opts)
		if err == nil {
			ok = true
			return s, nil
		}
		lastErr = err
		// Only a lost race for the port is worth a retry; a bad config
		// would fail the same way five times.
		if ctx.Err() != nil || !s.exitedEarly() || !strings.Contains(s.logBuf.String(), "Address already in use") {
			break
		}
		s.done = make(chan struct{})
	}
	return nil, lastErr
}

func (s *Server) exitedEarly() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Server) writeKeys(opts Options) error {
	hostKey := opts.HostKey
	if hostKey == nil {
		var err error
		if _, hostKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return fmt.Errorf("generate host key: %w", err)
		}
	}
	clientKey := opts.ClientKey
	if clientKey == nil {
		var err error
		if _, clientKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return fmt.Errorf("generate client key: %w", err)
		}
	}
	var err error
	if s.HostSigner, err = ssh.NewSignerFromKey(hostKey); err != nil {
		return fmt.Errorf("host key: %w", err)
	}
	s.HostKey = s.HostSigner.PublicKey()
	if s.ClientSigner, err = ssh.NewSignerFromKey(clientKey); err != nil {
		return fmt.Errorf("client key: %w", err)
	}
	if err := writePrivateKey(filepath.Join(s.Dir, "ssh_host_ed25519_key"), hostKey); err != nil {
		return err
	}
	s.ClientKeyPath = filepath.Join(s.Dir, "client_ed25519")
	if err := writePrivateKey(s.ClientKeyPath, clientKey); err != nil {
		return err
	}
	var ak bytes.Buffer
	ak.Write(ssh.MarshalAuthorizedKey(s.ClientSigner.PublicKey()))
	for _, k := range opts.AuthorizedKeys {
		ak.Write(ssh.MarshalAuthorizedKey(k))
	}
	// World-readable: sshd reads it as the user logging in.
	p := filepath.Join(s.Dir, "authorized_keys")
	if err := os.WriteFile(p, ak.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return os.Chmod(p, 0o644)
}

func writePrivateKey(path string, key ed25519.PrivateKey) error {
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		return fmt.Errorf("marshal key for %s: %w", path, err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		return fmt.Errorf("public key for %s: %w", path, err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(pub), 0o644); err != nil {
		return fmt.Errorf("write %s.pub: %w", path, err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) writeConfig(opts Options, port int) error {
	s.Port = port
	s.Addr = net.JoinHostPort(s.Host, strconv.Itoa(port))
	s.ConfigPath = filepath.Join(s.Dir, "sshd_config")
	s.LogPath = filepath.Join(s.Dir, "sshd.log")
	level := opts.LogLevel
	if level == "" {
		level = "VERBOSE"
	}
	lines := []string{
		"ListenAddress " + s.Addr,
		"HostKey " + filepath.Join(s.Dir, "ssh_host_ed25519_key"),
		"AuthorizedKeysFile " + filepath.Join(s.Dir, "authorized_keys"),
		"PidFile " + filepath.Join(s.Dir, "sshd.pid"),
		"UsePAM no",
		"StrictModes no",
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"AllowTcpForwarding yes",
		"AllowAgentForwarding no",
		"X11Forwarding no",
		"PrintMotd no",
		"UseDNS no",
		"MaxStartups 200",
		"MaxSessions 100",
		"Subsystem sftp internal-sftp",
		"LogLevel " + level,
	}
	lines = append(withoutKeywords(lines, globalKeywords(opts.ExtraConfig)), opts.ExtraConfig...)
	cfg := strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(s.ConfigPath, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", s.ConfigPath, err)
	}
	return nil
}

// globalKeywords are the keywords (lower case) lines set before their
// first Match block.
func globalKeywords(lines []string) map[string]bool {
	set := map[string]bool{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		kw := strings.ToLower(f[0])
		if kw == "match" {
			break
		}
		set[kw] = true
	}
	return set
}

// withoutKeywords drops the lines that set one of drop's keywords.
func withoutKeywords(lines []string, drop map[string]bool) []string {
	var out []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && drop[strings.ToLower(f[0])] {
			continue
		}
		out = append(out, l)
	}
	return out
}

func (s *Server) run(ctx context.Context, bin string, opts Options) error {
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open sshd log %s: %w", s.LogPath, err)
	}
	s.logBuf.Reset()
	var out io.Writer = io.MultiWriter(logf, s.logBuf)
	if opts.Log != nil {
		out = io.MultiWriter(logf, s.logBuf, opts.Log)
	}
	// sshd insists on an absolute path to re-exec itself.
	cmd := exec.Command(bin, "-D", "-e", "-f", s.ConfigPath)
	cmd.Stdout = out
	cmd.Stderr = out
	// Own process group: a signal to the test's group does not reach it,
	// and Stop can take the whole group down.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd = cmd
	done := s.done
	go func() {
		s.waitErr = cmd.Wait()
		logf.Close()
		close(done)
	}()
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if bannerReady(wctx, s.Addr) {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("sshd %s -f %s exited before accepting on %s (%v): %s",
				bin, s.ConfigPath, s.Addr, s.waitErr, strings.TrimSpace(s.logBuf.String()))
		case <-wctx.Done():
			// Gone before returning: the caller removes its folder next.
			s.terminate()
			return fmt.Errorf("sshd on %s did not accept within %s: %w; log: %s",
				s.Addr, timeout, wctx.Err(), strings.TrimSpace(s.logBuf.String()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// bannerReady reports whether addr accepts and sends an SSH banner.
func bannerReady(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-")
}

// KnownHostsLine returns a known_hosts line for the server's host key under
// the given names (default: "[127.0.0.1]:port"). A name without a port gets
// the server's port.
func (s *Server) KnownHostsLine(names ...string) string {
	if len(names) == 0 {
		names = []string{s.Host}
	}
	addrs := make([]string, 0, len(names))
	for _, n := range names {
		if _, _, err := net.SplitHostPort(n); err != nil {
			n = net.JoinHostPort(n, strconv.Itoa(s.Port))
		}
		addrs = append(addrs, n)
	}
	// knownhosts.Line writes each address as ssh does (bare for port 22).
	return knownhosts.Line(addrs, s.HostKey)
}

// WriteKnownHosts writes a known_hosts file holding KnownHostsLine(names...).
func (s *Server) WriteKnownHosts(path string, names ...string) error {
	if err := os.WriteFile(path, []byte(s.KnownHostsLine(names...)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write known_hosts %s: %w", path, err)
	}
	return nil
}

// Logs returns what sshd has logged so far.
func (s *Server) Logs() string { return s.logBuf.String() }

// PID is sshd's process id (the listener).
func (s *Server) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// terminate sends TERM to sshd's whole process group (negative pid, so
// per-connection sshd children die with the listener), KILL if it is still
// there 5s later, and waits for it to exit.
func (s *Server) terminate() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.done
	}
}

// Stop ends sshd and every session it serves, and removes Dir when Start
// created it.
func (s *Server) Stop() error {
	var err error
	s.once.Do(func() {
		s.terminate()
		// Session children were spawned in sshd's group, but a session may
		// have started its own; those are the test's to clean.
		if s.ownsDir {
			if rerr := os.RemoveAll(s.Dir); rerr != nil {
				err = fmt.Errorf("remove sshd folder %s: %w", s.Dir, rerr)
			}
		}
	})
	return err
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}
