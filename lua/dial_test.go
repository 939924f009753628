package lua

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/remote"
)

// A hop name is completed through ssh_config as an inventory host is: %h
// in HostName, ~ in IdentityFile, IdentitiesOnly, ProxyCommand; what the
// spec itself says wins.
func TestSSHConfigHops(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ssh_config")
	err := os.WriteFile(cfg, []byte("Host bastion*\n  HostName %h.example.net\n  Port 2200\n  User ops\n"+
		"  IdentityFile ~/.ssh/bastion_key\n  IdentitiesOnly yes\n  ProxyCommand nc -X connect %h %p\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	complete := SSHConfigHops(cfg, nil)

	hop, err := complete(remote.Host{Name: "bastion1", Connection: "ssh"})
	if err != nil {
		t.Fatal(err)
	}
	want := remote.Host{Name: "bastion1", Address: "bastion1.example.net", Port: 2200, User: "ops",
		IdentityFiles: []string{filepath.Join(home, ".ssh", "bastion_key")}, IdentitiesOnly: true,
		ProxyCommand: "nc -X connect %h %p", Connection: "ssh"}
	if !reflect.DeepEqual(hop, want) {
		t.Fatalf("got  %+v\nwant %+v", hop, want)
	}

	hop, err = complete(remote.Host{Name: "bastion2", Port: 2022, User: "root", Connection: "ssh"})
	if err != nil {
		t.Fatal(err)
	}
	if hop.Address != "bastion2.example.net" || hop.Port != 2022 || hop.User != "root" {
		t.Fatalf("spec must win: got %+v", hop)
	}

	// Not in ssh_config: as written.
	hop, err = complete(remote.Host{Name: "10.1.2.3", Connection: "ssh"})
	if err != nil {
		t.Fatal(err)
	}
	if hop.Address != "10.1.2.3" || hop.Port != 0 || len(hop.IdentityFiles) != 0 || hop.ProxyCommand != "" {
		t.Fatalf("got %+v", hop)
	}
}

// "none" completes nothing; an unreadable file is warned about and hops
// go as written.
func TestSSHConfigHopsOff(t *testing.T) {
	if SSHConfigHops("none", nil) != nil {
		t.Fatal(`"none" must give no completion`)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "config"), 0o700); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	complete := SSHConfigHops(filepath.Join(dir, "config"), slog.New(slog.NewTextHandler(&logs, nil)))
	in := remote.Host{Name: "jump", User: "u", Connection: "ssh"}
	hop, err := complete(in)
	if err != nil || !reflect.DeepEqual(hop, in) {
		t.Fatalf("got %+v, %v", hop, err)
	}
	if !strings.Contains(logs.String(), "ignoring unreadable ssh config for ProxyJump hops") {
		t.Fatalf("no warning: %q", logs.String())
	}
}

// RemoteHost carries every setting remote reads: a remote.Host field it
// leaves unset fails here.
func TestRemoteHost(t *testing.T) {
	h := inventory.Host{Name: "gpu01", Address: "10.0.0.1", Port: 2222, User: "ops",
		IdentityFiles: []string{"/k"}, IdentitiesOnly: true, ProxyJump: "bastion", ProxyCommand: "nc %h %p",
		Connection: "ssh", ConnectTimeout: 3 * time.Second, Become: true,
		Groups: []string{"all"}, Vars: map[string]any{"gpush_remote_dir": "/opt/gpush"}}
	got := RemoteHost(h)
	want := remote.Host{Name: "gpu01", Address: "10.0.0.1", Port: 2222, User: "ops",
		IdentityFiles: []string{"/k"}, IdentitiesOnly: true, ProxyJump: "bastion", ProxyCommand: "nc %h %p",
		Connection: "ssh", ConnectTimeout: 3 * time.Second, Become: true,
		Vars: map[string]any{"gpush_remote_dir": "/opt/gpush"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	v := reflect.ValueOf(got)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("RemoteHost leaves remote.Host.%s unset", v.Type().Field(i).Name)
		}
	}
}

// ProxyJump's URI form reaches remote as user@host:port, every hop of a
// list, the others unchanged.
func TestRemoteHostJumpURI(t *testing.T) {
	for in, want := range map[string]string{
		"ssh://user@host:2223":              "user@host:2223",
		"ssh://a%40b@j1,ops@j2:22":          "a@b@j1,ops@j2:22",
		"j1,ssh://j2":                       "j1,j2",
		"ops@[::1]:2022":                    "ops@[::1]:2022",
		"ssh://user@host:2223/extra/path/x": "ssh://user@host:2223/extra/path/x",
	} {
		if got := RemoteHost(inventory.Host{Name: "h", ProxyJump: in}).ProxyJump; got != want {
			t.Errorf("ProxyJump %q: got %q, want %q", in, got, want)
		}
	}
}
