package remote

import (
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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// startAgent runs a real OpenSSH ssh-agent on a private socket, stopped by
// its own pid when the test ends, and returns the socket and a client.
func startAgent(t *testing.T) (string, agent.ExtendedAgent) {
	t.Helper()
	bin, err := exec.LookPath("ssh-agent")
	if err != nil {
		t.Skip("skipping: ssh-agent not installed (apt-get install openssh-client)")
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(bin, "-D", "-a", sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ssh-agent: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ssh-agent socket %s: %v", sock, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { c.Close() })
	return sock, agent.NewClient(c)
}

func addAgentKey(t *testing.T, a agent.ExtendedAgent, key ed25519.PrivateKey, comment string) ssh.PublicKey {
	t.Helper()
	if err := a.Add(agent.AddedKey{PrivateKey: key, Comment: comment}); err != nil {
		t.Fatalf("ssh-agent add %s: %v", comment, err)
	}
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// crowdedAgent is a crowded agent: an sshd allowing 6 attempts and an
// agent holding 7 keys the server does not know, then the right one (the
// server's client key) last.
func crowdedAgent(t *testing.T) (*env, ed25519.PrivateKey, ssh.PublicKey) {
	t.Helper()
	requireRoot(t)
	right := newKey(t)
	e := newEnv(t, sshd.Options{ClientKey: right, ExtraConfig: []string{"MaxAuthTries 6"}})
	sock, a := startAgent(t)
	for i := 1; i <= 7; i++ {
		addAgentKey(t, a, newKey(t), fmt.Sprintf("other-%d", i))
	}
	rightPub := addAgentKey(t, a, right, "right-key")
	keys, err := a.List()
	if err != nil || len(keys) != 8 || keys[7].Comment != "right-key" {
		t.Fatalf("agent lists %v (%v), want 8 keys, right-key last", keys, err)
	}
	e.opts.AgentSocket = sock
	return e, right, rightPub
}

func TestConfiguredKeyOfferedBeforeAgentKeys(t *testing.T) {
	e, _, rightPub := crowdedAgent(t)
	// The inventory names the right key's file: it goes first, the seven
	// others never reach the server.
	c := e.dial(t)
	if res, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v", err)
	}
	logs := e.srv.Logs()
	mustContain(t, logs, "Accepted publickey for root", ssh.FingerprintSHA256(rightPub))
	if strings.Contains(logs, "Too many authentication failures") || strings.Contains(logs, "Failed publickey") {
		t.Fatalf("the server saw refused keys before the configured one:\n%s", logs)
	}
}

func TestAgentCopyOfConfiguredKeyAndIdentitiesOnly(t *testing.T) {
	e, right, rightPub := crowdedAgent(t)
	// Only the public half on disk, as when the private key lives in the
	// agent alone; or the key encrypted, no passphrase to ask for: the
	// agent's copy signs, and it is offered first.
	pubOnly := filepath.Join(e.tdir, "right_ed25519")
	if err := os.WriteFile(pubOnly+".pub", ssh.MarshalAuthorizedKey(rightPub), 0o644); err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(right, "", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	encrypted := filepath.Join(e.tdir, "right_encrypted")
	if err := os.WriteFile(encrypted, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	e.host.IdentitiesOnly = true
	for _, f := range []string{pubOnly, encrypted} {
		e.host.IdentityFiles = []string{f}
		c := e.dial(t)
		if res, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: run: %v", f, err)
		}
		c.Close()
	}
	logs := e.srv.Logs()
	if n := strings.Count(logs, "Accepted publickey for root from 127.0.0.1 port"); n != 2 {
		t.Errorf("%d logins, want 2:\n%s", n, logs)
	}
	mustContain(t, logs, ssh.FingerprintSHA256(rightPub))
	if strings.Contains(logs, "Failed publickey") {
		t.Errorf("IdentitiesOnly offered other keys first:\n%s", logs)
	}

	// IdentitiesOnly with a wrong configured key: the agent's eight are not
	// offered, so only that one is refused.
	wrong := filepath.Join(e.tdir, "wrong")
	writeKey(t, wrong, newKey(t))
	e.host.IdentityFiles = []string{wrong}
	_, err = Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	if de.Stage != StageAuth {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	mustContain(t, err.Error(), "refused all 1 keys", wrong)
	if strings.Contains(err.Error(), "ssh-agent") {
		t.Errorf("IdentitiesOnly offered agent keys: %v", err)
	}
}

func TestMaxAuthTriesMessageSaysWhatWasOffered(t *testing.T) {
	e, _, _ := crowdedAgent(t)
	// No configured key: the agent's keys go in its order, and the server
	// closes after six refusals, before the right one.
	e.host.IdentityFiles = nil
	_, err := Dial(context.Background(), e.host, e.opts)
	de := dialErr(t, err)
	if de.Stage != StageAuth {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	msg := err.Error()
	mustContain(t, msg, "refused 6 keys", "other-1", "other-6", "closed the connection",
		`"Too many authentication failures"`, "allows MaxAuthTries 6", "the ssh-agent offered 6 of its 8 keys",
		"other 2 were never tried", "other-7", "right-key", "ansible_ssh_private_key_file", "IdentitiesOnly yes", "ssh-add -d")
	if strings.Contains(msg, "refused all") || strings.Contains(msg, "refused 8") {
		t.Errorf("the message claims more refusals than the server made: %s", msg)
	}
	t.Logf("message: %s", msg)
	// What the server logged agrees: six refusals, then the limit (sshd may
	// write that line just after the connection closed).
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(e.srv.Logs(), "maximum authentication attempts exceeded"); {
		if time.Now().After(deadline) {
			t.Fatalf("sshd did not log its MaxAuthTries limit:\n%s", e.srv.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(e.srv.Logs(), "Failed publickey"); n != 6 {
		t.Errorf("sshd logged %d refused keys, want 6", n)
	}
}

// The messages of the branches the real sshd tests do not reach.
func TestAuthErrorBranches(t *testing.T) {
	keys := make([]authKey, 3)
	for i := range keys {
		s, err := ssh.NewSignerFromKey(newKey(t))
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = authKey{signer: s, from: fmt.Sprintf("/keys/k%d", i)}
	}
	tg := target{name: "h", user: "ops"}
	plan := func(offered ...bool) *authPlan {
		return &authPlan{keys: keys, offered: offered, closeAgent: func() {}}
	}
	eof := fmt.Errorf("ssh: handshake failed: %w", io.EOF)
	refused := errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain")
	for _, tc := range []struct {
		name    string
		err     error
		p       *authPlan
		want    []string
		notWant string
	}{
		{"closed before any key", eof, plan(false, false, false),
			[]string{"closed the connection before any of the 3 keys for user ops was offered", "/keys/k0", "/keys/k2"}, "refused"},
		{"all refused", refused, plan(true, true, true),
			[]string{"refused all 3 keys offered for user ops", "/keys/k1", "no supported methods remain"}, "closed"},
		{"some could not be offered", refused, plan(true, false, true),
			[]string{"refused all 2 keys", "1 could not be offered (/keys/k1"}, "MaxAuthTries"},
		{"closed after two", eof, plan(true, true, false),
			[]string{"refused 2 keys", "and closed the connection: most likely it allows MaxAuthTries 2", "the other 1 were never tried (/keys/k2",
				"ansible_ssh_private_key_file"}, "refused all"},
	} {
		msg := authError(tc.err, tg, tc.p).Error()
		mustContain(t, msg, tc.want...)
		if strings.Contains(msg, tc.notWant) {
			t.Errorf("%s: %q contains %q", tc.name, msg, tc.notWant)
		}
	}
	// sshd's goodbye at MaxAuthTries: the limit is what was offered.
	tooMany := errors.New(`ssh: handshake failed: ssh: disconnect, reason 2: "Too many authentication failures"`)
	agentPlan := &authPlan{keys: []authKey{{keys[0].signer, "/keys/k0", false}, {keys[1].signer, "ssh-agent key \"a\"", true},
		{keys[2].signer, "ssh-agent key \"b\"", true}}, offered: []bool{true, true, false}, closeAgent: func() {}}
	msg := authError(tooMany, tg, agentPlan).Error()
	mustContain(t, msg, "refused 2 keys", "allows MaxAuthTries 2", "the ssh-agent offered 1 of its 2 keys",
		"other 1 were never tried", `"b"`, "IdentitiesOnly yes")
	agentPlan.identitiesOnly = true
	mustContain(t, authError(tooMany, tg, agentPlan).Error(), "IdentitiesOnly is already set")
	all := &authPlan{keys: keys, offered: []bool{true, true, true}, closeAgent: func() {}}
	msg = authError(tooMany, tg, all).Error()
	mustContain(t, msg, "allows MaxAuthTries 3", "none is in the user's authorized_keys")
	if strings.Contains(msg, "never tried") {
		t.Errorf("all keys were tried: %s", msg)
	}
	if got := serverDisconnect(errors.New(`ssh: handshake failed: ssh: disconnect, reason 2: "Too many authentication failures"`)); got != "Too many authentication failures" {
		t.Errorf("serverDisconnect: %q", got)
	}
}
