package remote

import (
	"os"
	"path/filepath"
	"testing"
)

// A hop name is resolved through ssh_config as an inventory host is: %h in
// HostName, ~ in IdentityFile, and what the spec itself says wins.
func TestParseHopThroughSSHConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ssh_config")
	err := os.WriteFile(cfg, []byte("Host bastion*\n  HostName %h.example.net\n  Port 2200\n  User ops\n  IdentityFile ~/.ssh/bastion_key\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	o := Options{SSHConfigFile: cfg}.withDefaults()

	tg, err := parseHop("bastion1", o)
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "bastion1.example.net" || tg.port != 2200 || tg.user != "ops" {
		t.Fatalf("got host %q port %d user %q", tg.host, tg.port, tg.user)
	}
	if len(tg.keys) != 1 || tg.keys[0] != filepath.Join(home, ".ssh", "bastion_key") {
		t.Fatalf("keys %q", tg.keys)
	}

	tg, err = parseHop("root@bastion2:2022", o)
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "bastion2.example.net" || tg.port != 2022 || tg.user != "root" {
		t.Fatalf("spec must win: got host %q port %d user %q", tg.host, tg.port, tg.user)
	}

	// Not in ssh_config: dialled as written, on port 22.
	tg, err = parseHop("10.1.2.3", o)
	if err != nil {
		t.Fatal(err)
	}
	if tg.host != "10.1.2.3" || tg.port != 22 || len(tg.keys) != 0 {
		t.Fatalf("got %+v", tg)
	}
}

// The URI form OpenSSH takes in ProxyJump: the user is "user", not
// "ssh://user".
func TestParseHopURI(t *testing.T) {
	o := Options{SSHConfigFile: "none"}.withDefaults()
	tg, err := parseHop("ssh://user@host:2223", o)
	if err != nil {
		t.Fatal(err)
	}
	if tg.user != "user" || tg.host != "host" || tg.port != 2223 {
		t.Fatalf("got user %q host %q port %d", tg.user, tg.host, tg.port)
	}
	if _, err := parseHop("ssh://user@host:2223/path", o); err == nil {
		t.Fatal("a path after the port was accepted")
	}
}
