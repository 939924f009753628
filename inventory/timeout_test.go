package inventory

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ConnectTimeout comes from ansible_ssh_timeout (Ansible hands it to ssh as
// -o ConnectTimeout, so it wins) or else ssh_config's ConnectTimeout, read
// as OpenSSH's convtime reads times.
func TestConnectTimeout(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ssh_config")
	writeFile(t, cfg, `
Host slow*
    ConnectTimeout 1m30s
Host none*
    ConnectTimeout none
Host *
    ConnectTimeout 45
`)
	inv := filepath.Join(dir, "hosts.ini")
	writeFile(t, inv, `[gpus]
slow01
slow02 ansible_ssh_timeout=7
plain01
none01
bad01 ansible_ssh_timeout=soon
zero01 ansible_ssh_timeout=0
`)
	opts := Options{WorkDir: dir, ConfigDir: filepath.Join(dir, "config"), SSHConfigFiles: []string{cfg}, HomeDir: dir}
	got := mustResolve(t, inv, opts)
	want := map[string]time.Duration{"slow01": 90 * time.Second, "slow02": 7 * time.Second, "plain01": 45 * time.Second, "none01": 0}
	for _, h := range got.Hosts() {
		w, ok := want[h.Name]
		if !ok {
			continue
		}
		if err := got.HostErr(h.Name); err != nil {
			t.Errorf("%s: %v", h.Name, err)
		}
		if h.ConnectTimeout != w {
			t.Errorf("%s: ConnectTimeout %v, want %v", h.Name, h.ConnectTimeout, w)
		}
	}
	for _, name := range []string{"bad01", "zero01"} {
		err := got.HostErr(name)
		if err == nil || !strings.Contains(err.Error(), "ansible_ssh_timeout") || !strings.Contains(err.Error(), "hosts.ini") {
			t.Errorf("%s: want an error naming the file and ansible_ssh_timeout, got %v", name, err)
		}
	}
}

func TestParseSSHTime(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"10": 10 * time.Second, "10s": 10 * time.Second, "2m": 2 * time.Minute, "1h30m": 90 * time.Minute,
		"1M": time.Minute, "none": 0, "1w": 7 * 24 * time.Hour,
	} {
		got, err := parseSSHTime(in)
		if err != nil || got != want {
			t.Errorf("parseSSHTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"s", "1x", "-5", "1.5", "99999999999"} {
		if _, err := parseSSHTime(in); err == nil {
			t.Errorf("parseSSHTime(%q): want an error", in)
		}
	}
}
