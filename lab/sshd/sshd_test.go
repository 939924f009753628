package sshd

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestStartLoginAndStop(t *testing.T) {
	s := StartT(t, Options{})
	if s.Port == 0 || !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("bad address %q port %d", s.Addr, s.Port)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := s.WriteKnownHosts(kh); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatalf("known_hosts line %q does not parse: %v", s.KnownHostsLine(), err)
	}
	cfg := &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(s.ClientSigner)},
		HostKeyCallback: cb,
	}
	c, err := ssh.Dial("tcp", s.Addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v\nsshd log:\n%s", s.Addr, err, s.Logs())
	}
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.Output("id -u")
	if err != nil {
		t.Fatalf("id -u: %v", err)
	}
	if strings.TrimSpace(string(out)) != "0" {
		t.Fatalf("expected to run as root, got uid %q", out)
	}
	c.Close()

	// The key file on disk is the same key the server accepts.
	b, err := os.ReadFile(s.ClientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatalf("parse %s: %v", s.ClientKeyPath, err)
	}
	if string(signer.PublicKey().Marshal()) != string(s.ClientSigner.PublicKey().Marshal()) {
		t.Fatal("ClientKeyPath holds a different key than ClientSigner")
	}

	dir := s.Dir
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s behind (%v)", dir, err)
	}
	if c, err := net.Dial("tcp", s.Addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after Stop", s.Addr)
	}
}

func TestWrongKeyRefused(t *testing.T) {
	s := StartT(t, Options{})
	other := StartT(t, Options{}) // a second server only for its client key
	cfg := &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(other.ClientSigner)},
		HostKeyCallback: ssh.FixedHostKey(s.HostKey),
	}
	if c, err := ssh.Dial("tcp", s.Addr, cfg); err == nil {
		c.Close()
		t.Fatal("a key not in authorized_keys logged in")
	}
}

func TestKnownHostsLineNames(t *testing.T) {
	s := &Server{Host: "127.0.0.1", Port: 2222}
	signer, err := ssh.ParsePrivateKey(mustKey(t))
	if err != nil {
		t.Fatal(err)
	}
	s.HostKey = signer.PublicKey()
	line := s.KnownHostsLine("gpu01", "10.0.0.1:22")
	if !strings.HasPrefix(line, "[gpu01]:2222,10.0.0.1 ssh-ed25519 ") {
		t.Fatalf("line %q", line)
	}
}

func mustKey(t *testing.T) []byte {
	t.Helper()
	s := &Server{Dir: t.TempDir()}
	if err := s.writeKeys(Options{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.ClientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A config sshd rejects fails Start with sshd's own complaint, and leaves
// no folder behind.
func TestStartBadConfig(t *testing.T) {
	if _, err := FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	_, err := Start(context.Background(), Options{ExtraConfig: []string{"NoSuchKeyword yes"}})
	if err == nil || !strings.Contains(err.Error(), "NoSuchKeyword") {
		t.Fatalf("want an error quoting the bad option, got %v", err)
	}
	dir := strings.Fields(err.Error())[3] // "sshd BIN -f DIR/sshd_config ..."
	if _, serr := os.Stat(filepath.Dir(dir)); !os.IsNotExist(serr) {
		t.Fatalf("folder %s left behind (stat: %v)", filepath.Dir(dir), serr)
	}
}

// An ExtraConfig keyword replaces the default's line: sshd reads the first
// value, so appending alone would keep MaxStartups 200 (as the lab had it).
func TestExtraConfigOverridesDefaults(t *testing.T) {
	if _, err := FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	s := StartT(t, Options{ExtraConfig: []string{"MaxStartups 1000", "MaxSessions 1000"}})
	bin, _ := FindBinary()
	out, err := exec.Command(bin, "-T", "-f", s.ConfigPath).CombinedOutput()
	if err != nil {
		t.Fatalf("sshd -T: %v\n%s", err, out)
	}
	for _, want := range []string{"maxstartups 1000:30:1000", "maxsessions 1000"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("sshd -T lacks %q:\n%s", want, out)
		}
	}
}
