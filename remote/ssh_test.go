package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
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

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestRunQuotesEveryArgument(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	marker := filepath.Join(e.tdir, "pwned")
	hostile := []string{"a b", "it's", "$(touch " + marker + ")", "`touch " + marker + "`", ";", "*", "", "x\ny", "$HOME", `\`, "A=b", "~", "{a,b}", "-n"}
	res, err := c.Run(context.Background(), append([]string{"printf", "[%s]\n"}, hostile...), RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, h := range hostile {
		fmt.Fprintf(&want, "[%s]\n", h)
	}
	if string(res.Stdout) != want.String() {
		t.Fatalf("remote saw\n%s\nwant\n%s", res.Stdout, want.String())
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("an argument was interpreted by the remote shell")
	}

	res, err = c.Run(context.Background(), []string{"sh", "-c", "cat; echo oops >&2; exit 3"}, RunOptions{Stdin: strings.NewReader("in put")})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "in put" || string(res.Stderr) != "oops\n" {
		t.Fatalf("got exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Sudo as root: sudo -n works.
	res, err = c.Run(context.Background(), []string{"id", "-u"}, RunOptions{Sudo: true})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Fatalf("sudo id -u: %v %+v", err, res)
	}
}

func TestConcurrentCallsShareOneConnection(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Run(context.Background(), []string{"echo", strconv.Itoa(i)}, RunOptions{})
			if err == nil && strings.TrimSpace(string(res.Stdout)) != strconv.Itoa(i) {
				err = fmt.Errorf("call %d got %q", i, res.Stdout)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := strings.Count(e.srv.Logs(), "Accepted publickey"); n != 1 {
		t.Fatalf("%d logins for 20 calls, want 1", n)
	}
}

func TestRunTimeoutStopsTheRemoteCommand(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	pidFile := filepath.Join(e.tdir, "pid")
	_, err := c.Run(context.Background(), []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 60"},
		RunOptions{Timeout: 500 * time.Millisecond})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a timeout error, got %v", err)
	}
	mustContain(t, err.Error(), "h1", "timed out")
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatalf("the command never started: %v", rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(20 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("remote sleep (pid %d) still runs after the timeout closed its session", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The connection is still usable.
	if res, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("connection unusable after a timeout: %v", err)
	}
}

func TestAgentAuth(t *testing.T) {
	requireRoot(t)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(key)
	e := newEnv(t, sshd.Options{AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: key}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); agent.ServeAgent(keyring, c) }()
		}
	}()
	e.host.IdentityFiles = nil
	e.opts.AgentSocket = sock
	c := e.dial(t)
	res, err := c.Run(context.Background(), []string{"true"}, RunOptions{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run over agent-authenticated connection: %v", err)
	}
	mustContain(t, e.srv.Logs(), "Accepted publickey for root", ssh.FingerprintSHA256(signer.PublicKey()))

	// Without the agent and without keys, the error says what was tried.
	e.opts.AgentSocket = "none"
	_, err = Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	if de.Stage != StageAuth {
		t.Fatalf("stage %q, want %q: %v", de.Stage, StageAuth, err)
	}
	mustContain(t, err.Error(), "no usable key", "root")
}

func TestEncryptedKeySkippedAndWrongKeyRefused(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKeyWithPassphrase(key, "", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	enc := filepath.Join(e.tdir, "id_encrypted")
	if err := os.WriteFile(enc, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	other := sshd.StartT(t, sshd.Options{}) // only for a key this server does not accept
	e.host.IdentityFiles = []string{enc, other.ClientKeyPath}
	_, err = Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	if de.Stage != StageAuth {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	mustContain(t, err.Error(), "refused all 1 keys", "root")
	mustContain(t, e.logs.String(), "id_encrypted", "encrypted")

	// The accepted key after the skipped one still logs in.
	e.host.IdentityFiles = []string{enc, e.srv.ClientKeyPath}
	e.dial(t)
}

func TestKnownHostsStrictRefusesUnknownHost(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	os.WriteFile(e.kh, nil, 0o600)
	_, err := Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	if de.Stage != StageHostKey {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	var hke *HostKeyError
	if !errors.As(err, &hke) || hke.Changed {
		t.Fatalf("want an unknown-host HostKeyError, got %v", err)
	}
	mustContain(t, err.Error(), "is not in "+e.kh, "accept-new", fmt.Sprintf("[127.0.0.1]:%d", e.srv.Port))
	if b, _ := os.ReadFile(e.kh); len(b) != 0 {
		t.Fatalf("strict mode wrote known_hosts: %q", b)
	}
	// A missing known_hosts file is the same refusal, not a crash.
	e.opts.KnownHostsFile = filepath.Join(e.tdir, "absent", "known_hosts")
	_, err = Dial(context.Background(), e.host, e.opts)
	if !errors.As(err, &hke) {
		t.Fatalf("missing known_hosts: %v", err)
	}
}

func TestKnownHostsHashedEntry(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	hashed := knownhosts.HashHostname(knownhosts.Normalize(e.srv.Addr))
	line := hashed + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(e.srv.HostKey)))
	if err := os.WriteFile(e.kh, []byte("# comment\n"+line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.dial(t)
}

func TestKnownHostsAcceptNewLearnsOnceUnderConcurrency(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	// A file without a final newline: the new line must not glue onto it.
	if err := os.WriteFile(e.kh, []byte("# my hosts"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.opts.HostKeyPolicy = HostKeyAcceptNew
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(context.Background(), e.host, e.opts)
			if err == nil {
				c.Close()
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
	b, _ := os.ReadFile(e.kh)
	want := "# my hosts\n" + e.srv.KnownHostsLine() + "\n"
	if string(b) != want {
		t.Fatalf("known_hosts is\n%q\nwant\n%q", b, want)
	}
	e.opts.HostKeyPolicy = HostKeyStrict
	e.dial(t)
}

// Dials share one parse of known_hosts (each connection keeps it for its
// key exchanges: a parse per dial held the file once per host), and an
// edit of the file is read at the next dial.
func TestKnownHostsParsedOncePerVersion(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	parses := func() int {
		parsedKnownHosts.mu.Lock()
		defer parsedKnownHosts.mu.Unlock()
		return parsedKnownHosts.parses
	}
	before := parses()
	var conns []*sshConn
	for i := 0; i < 5; i++ {
		conns = append(conns, e.dial(t))
	}
	if got := parses() - before; got != 1 {
		t.Fatalf("5 dials parsed known_hosts %d times, want 1", got)
	}
	// Another key for the address, written by someone else: the next dial
	// must read it (a changed key now), not the parse it has.
	other, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(e.srv.Addr)}, other.PublicKey())
	if err := os.WriteFile(e.kh, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Dial(context.Background(), e.host, e.opts)
	var hke *HostKeyError
	if !errors.As(err, &hke) || !hke.Changed {
		t.Fatalf("after the edit: want a changed-key error, got %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
}

func TestChangedHostKeyIsLoudAndChangesNothing(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	_, oldKey, _ := ed25519.GenerateKey(rand.Reader)
	oldSigner, _ := ssh.NewSignerFromKey(oldKey)
	content := "other.example ssh-ed25519 " + strings.Fields(string(ssh.MarshalAuthorizedKey(oldSigner.PublicKey())))[1] + "\n" +
		knownhosts.Line([]string{e.srv.Addr}, oldSigner.PublicKey()) + "\n"
	if err := os.WriteFile(e.kh, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{HostKeyStrict, HostKeyAcceptNew} {
		e.opts.HostKeyPolicy = policy
		_, err := Dial(context.Background(), e.host, e.opts)
		de := dialErr(t, err)
		var hke *HostKeyError
		if de.Stage != StageHostKey || !errors.As(err, &hke) || !hke.Changed {
			t.Fatalf("%s: want a changed-key error, got %v", policy, err)
		}
		mustContain(t, err.Error(), "HOST KEY CHANGED", "h1", e.kh+" line 2",
			ssh.FingerprintSHA256(oldSigner.PublicKey()), ssh.FingerprintSHA256(e.srv.HostKey), "ssh-keygen -R")
		if b, _ := os.ReadFile(e.kh); string(b) != content {
			t.Fatalf("%s: known_hosts changed:\n%s", policy, b)
		}
	}
}

func TestProxyJumpTwoHops(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	// DEBUG1 logs the forwarding requests the jumps serve.
	j1 := sshd.StartT(t, sshd.Options{LogLevel: "DEBUG1"})
	j2 := sshd.StartT(t, sshd.Options{LogLevel: "DEBUG1"})
	kh := e.srv.KnownHostsLine() + "\n" + j1.KnownHostsLine() + "\n"
	if err := os.WriteFile(e.kh, []byte(kh), 0o600); err != nil {
		t.Fatal(err)
	}
	// Each hop authenticates with its own key, given by the completion
	// (the caller's ssh_config).
	e.opts.CompleteHop = func(hop Host) (Host, error) {
		if hop.Name == "jump2" {
			return Host{Name: hop.Name, Address: "127.0.0.1", Port: j2.Port, User: "root",
				IdentityFiles: []string{j2.ClientKeyPath}}, nil
		}
		return Host{Name: hop.Name, Address: hop.Name, Port: hop.Port, User: hop.User}, nil
	}
	e.host.IdentityFiles = []string{e.srv.ClientKeyPath, j1.ClientKeyPath}
	e.host.ProxyJump = fmt.Sprintf("root@127.0.0.1:%d,jump2", j1.Port)

	// jump2's key is not known yet: refused, naming the jump host.
	_, err := Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	if de.Stage != StageHostKey || de.Host != e.host.Name || de.Hop != "jump2" {
		t.Fatalf("stage %q host %q hop %q: %v", de.Stage, de.Host, de.Hop, err)
	}
	mustContain(t, err.Error(), "jump host jump2", fmt.Sprintf("[127.0.0.1]:%d", j2.Port))

	os.WriteFile(e.kh, []byte(kh+j2.KnownHostsLine()+"\n"), 0o600)
	c := e.dial(t)
	res, err := c.Run(context.Background(), []string{"echo", "through"}, RunOptions{})
	if err != nil || string(res.Stdout) != "through\n" {
		t.Fatalf("run through two jumps: %v %+v", err, res)
	}
	// jump1 forwarded to jump2, jump2 to the target.
	mustContain(t, j1.Logs(), fmt.Sprintf("target 127.0.0.1 port %d", j2.Port))
	mustContain(t, j2.Logs(), fmt.Sprintf("target 127.0.0.1 port %d", e.srv.Port))
	if len(c.hops) != 2 {
		t.Fatalf("%d hop clients, want 2", len(c.hops))
	}
	c.Close()
	// Closing the connection closes the hops too.
	for i, h := range c.hops {
		if _, _, err := h.SendRequest("keepalive@openssh.com", true, nil); err == nil {
			t.Fatalf("hop %d still open after Close", i)
		}
	}
}

func TestPutGetOverSFTP(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	p := filepath.Join(e.tdir, "put.txt")
	data := bytes.Repeat([]byte("0123456789"), 300_000) // several chunks
	if err := c.Put(context.Background(), p, bytes.NewReader(data), 0o640); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("stat: %v mode %v", err, fi.Mode())
	}
	got, err := c.Get(context.Background(), p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %v (%d bytes, want %d)", err, len(got), len(data))
	}
	// Overwrite is atomic and leaves no temp file.
	if err := c.Put(context.Background(), p, strings.NewReader("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(e.tdir)
	for _, en := range ents {
		if strings.Contains(en.Name(), tmpMarker) {
			t.Fatalf("temp file %s left behind", en.Name())
		}
	}
	if _, err := c.Get(context.Background(), filepath.Join(e.tdir, "missing")); err == nil ||
		!strings.Contains(err.Error(), "missing") {
		t.Fatalf("get of a missing file: %v", err)
	}
}

func TestHelperDeployedOnceThenReused(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	var snap helper.Snapshot
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: t.TempDir(), NvidiaSMI: "/nonexistent/nvidia-smi"}}
	if err := c.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Version == "" || snap.BootID == "" || snap.SMI {
		t.Fatalf("unexpected snapshot %+v", snap)
	}
	if n := c.uploads.Load(); n != 1 {
		t.Fatalf("%d uploads on first use, want 1", n)
	}
	p, _ := c.DeployHelper(context.Background())
	if filepath.Dir(p) != e.dir || !strings.HasPrefix(filepath.Base(p), "gpush-helper-") {
		t.Fatalf("helper at %s, want under %s", p, e.dir)
	}
	fi1, err := os.Stat(p)
	if err != nil || fi1.Mode().Perm() != 0o755 {
		t.Fatalf("helper file: %v %v", err, fi1.Mode())
	}
	if di, _ := os.Stat(e.dir); di.Mode().Perm() != 0o700 {
		t.Fatalf("helper folder mode %v, want 0700", di.Mode().Perm())
	}
	// A second call on the same connection reuses the cached path.
	if err := c.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
		t.Fatal(err)
	}
	if n := c.uploads.Load(); n != 1 {
		t.Fatalf("%d uploads after a second call, want 1", n)
	}
	c.Close()

	// A second run (a new connection) finds it and uploads nothing.
	c2 := e.dial(t)
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
		t.Fatal(err)
	}
	if n := c2.uploads.Load(); n != 0 {
		t.Fatalf("second run uploaded %d times", n)
	}
	fi2, _ := os.Stat(p)
	if !os.SameFile(fi1, fi2) {
		t.Fatal("helper file was replaced on the second run")
	}
	// A helper-side failure names the host, the verb and the helper's message.
	err = c2.Helper(context.Background(), "no-such-verb", nil, nil)
	var he *HelperError
	if !errors.As(err, &he) || he.Verb != "no-such-verb" || !strings.Contains(he.Message, "unknown verb") {
		t.Fatalf("want a HelperError with the helper's message, got %v", err)
	}
	mustContain(t, err.Error(), "h1", "no-such-verb")

	// Someone cleans the folder: the running serve session still answers;
	// the next session (the helper died) deploys the helper again.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil || c2.uploads.Load() != 0 {
		t.Fatalf("running session after the removal: %v, %d uploads", err, c2.uploads.Load())
	}
	killServe(t, c2)
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
		t.Fatalf("call after the removal did not deploy again: %v", err)
	}
	if n := c2.uploads.Load(); n != 1 {
		t.Fatalf("%d uploads after the removal, want 1", n)
	}
}

func TestHelperTornCopyReplaced(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	p, err := c.DeployHelper(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Someone truncated it (a non-atomic copy by hand, a full disk).
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c2 := e.dial(t)
	var snap helper.Snapshot
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, helper.SnapshotRequest{}, &snap); err != nil {
		t.Fatal(err)
	}
	if c2.uploads.Load() != 1 {
		t.Fatal("torn helper was not replaced")
	}
}

func TestUploadInterruptedLeavesNoPartialHelper(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	testHookChunkWritten = func(int64) { cancel() }
	defer func() { testHookChunkWritten = nil }()
	_, err := c.DeployHelper(ctx)
	testHookChunkWritten = nil
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want a canceled upload, got %v", err)
	}
	ents, _ := os.ReadDir(e.dir)
	for _, en := range ents {
		t.Errorf("left behind after an interrupted upload: %s", en.Name())
	}

	// A temp file from an upload killed for good (gpush killed, link down)
	// is removed by the next upload once it is old.
	stale := filepath.Join(e.dir, ".gpush-helper-0123"+tmpMarker+"dead")
	os.WriteFile(stale, []byte("partial"), 0o600)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	fresh := filepath.Join(e.dir, ".gpush-helper-4567"+tmpMarker+"live")
	os.WriteFile(fresh, []byte("in progress elsewhere"), 0o600)
	if _, err := c.DeployHelper(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("stale temp file not cleaned")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatal("a recent temp file (maybe a concurrent upload) was removed")
	}
}

func TestUnsafeRemoteDirRefused(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	real := filepath.Join(e.tdir, "real")
	os.Mkdir(real, 0o700)
	link := filepath.Join(e.tdir, "link")
	os.Symlink(real, link)
	open := filepath.Join(e.tdir, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o770)
	foreign := filepath.Join(e.tdir, "foreign")
	os.Mkdir(foreign, 0o700)
	os.Chown(foreign, 65534, 65534)
	file := filepath.Join(e.tdir, "file")
	os.WriteFile(file, nil, 0o600)
	for dir, want := range map[string]string{
		link:    "is a symlink",
		open:    "group- or world-writable (mode 0770)",
		foreign: "owned by uid 65534",
		file:    "not a directory",
	} {
		e.host.Vars[VarRemoteDir] = dir
		c := e.dial(t)
		err := c.Helper(context.Background(), helper.VerbSnapshot, nil, nil)
		if err == nil {
			t.Fatalf("%s: helper deployed into an unsafe folder", dir)
		}
		mustContain(t, err.Error(), "h1", dir, want, VarRemoteDir)
		c.Close()
	}
	if ents, _ := os.ReadDir(real); len(ents) != 0 {
		t.Fatal("something was written through the symlink")
	}
}

func TestNoexecRemoteDirDetected(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	mnt := filepath.Join(e.tdir, "noexec")
	os.Mkdir(mnt, 0o700)
	if out, err := execOut("mount", "-t", "tmpfs", "-o", "noexec,mode=0700,size=64m", "tmpfs", mnt); err != nil {
		t.Skipf("cannot mount a noexec tmpfs here (%v: %s)", err, out)
	}
	defer execOut("umount", "-l", mnt)
	for _, become := range []bool{false, true} {
		e.host.Become = become
		e.host.Vars[VarRemoteDir] = filepath.Join(mnt, "gpush")
		c := e.dial(t)
		err := c.Helper(context.Background(), helper.VerbSnapshot, nil, nil)
		if err == nil {
			t.Fatalf("become=%v: helper ran from a noexec mount", become)
		}
		mustContain(t, err.Error(), "h1", "noexec", VarRemoteDir)
		c.Close()
	}
}

func TestBecome(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	e.host.Become = true
	c := e.dial(t)
	var snap helper.Snapshot
	if err := c.Helper(context.Background(), helper.VerbSnapshot, helper.SnapshotRequest{}, &snap); err != nil {
		t.Fatalf("helper through sudo -n as root: %v", err)
	}
	c.Close()

	// A user whose sudo wants a password gets told what to fix.
	if _, err := execOut("sh", "-c", "command -v useradd && command -v sudo"); err != nil {
		t.Skip("useradd or sudo missing: skipping the password-sudo case")
	}
	user := "gpushpw" + strconv.Itoa(os.Getpid()%100000)
	if out, err := execOut("useradd", "-m", "-s", "/bin/sh", user); err != nil {
		t.Skipf("useradd: %v %s", err, out)
	}
	defer execOut("userdel", "-r", user)
	// A locked password ("!") makes sshd without PAM refuse the login.
	if out, err := execOut("usermod", "-p", "*", user); err != nil {
		t.Fatalf("usermod: %v %s", err, out)
	}
	e.host.User = user
	e.host.Vars = map[string]any{} // default ~/.cache/gpush of that user
	c = e.dial(t)
	err := c.Helper(context.Background(), helper.VerbSnapshot, helper.SnapshotRequest{}, &snap)
	if !errors.Is(err, ErrSudoPassword) {
		t.Fatalf("want ErrSudoPassword, got %v", err)
	}
	mustContain(t, err.Error(), "h1", "passwordless sudo", "ansible_become=false")
	res, err := c.Run(context.Background(), []string{"id", "-u"}, RunOptions{Sudo: true})
	if !errors.Is(err, ErrSudoPassword) || res == nil || res.ExitCode != 1 {
		t.Fatalf("run through sudo: want ErrSudoPassword with the result, got %v %+v", err, res)
	}
	mustContain(t, err.Error(), "h1", "sudo id", "passwordless sudo")
	// A command's own exit 1 without sudo is just a result.
	if res, err := c.Run(context.Background(), []string{"false"}, RunOptions{}); err != nil || res.ExitCode != 1 {
		t.Fatalf("false: %v %+v", err, res)
	}
	p, _ := c.DeployHelper(context.Background())
	if !strings.HasPrefix(p, "/home/"+user+"/.cache/gpush/") {
		t.Fatalf("helper deployed to %s, want the user's ~/.cache/gpush", p)
	}
	// Without become the same user runs the helper fine.
	e.host.Become = false
	c2 := e.dial(t)
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, helper.SnapshotRequest{}, &snap); err != nil {
		t.Fatal(err)
	}
}

func execOut(argv ...string) (string, error) {
	b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(b), err
}
