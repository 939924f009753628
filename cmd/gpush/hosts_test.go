package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostsBadHostOnlyWhenSelected(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "mixed.ini")
	src := "[gpus]\ngpu01 ansible_host=10.0.0.1\ngpu02 ansible_connection=ansible.builtin.ssh\n[net]\nsw1 ansible_connection=network_cli\n"
	if err := os.WriteFile(inv, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := gpush(t, "hosts", "-i", inv, "--limit", "gpus")
	if code != 0 || !strings.Contains(out, "2 hosts: gpu[01-02]") {
		t.Errorf("--limit gpus: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = gpush(t, "hosts", "-i", inv)
	if code == 0 || !strings.Contains(stderr, inv+":5: host sw1: ansible_connection") || !strings.Contains(stderr, "gpush speaks ssh and local") {
		t.Errorf("all, sw1 selected: exit %d\n%s%s", code, out, stderr)
	}
}

func TestHostsIPv6ZoneWithPort(t *testing.T) {
	code, out, stderr := gpush(t, "hosts", "-i", "[fe80::2%eth1]:2222,fe80::1%eth0,")
	if code != 0 || !strings.Contains(out, "[fe80::2%eth1]:2222") || !strings.Contains(out, "fe80::1%eth0 ") {
		t.Errorf("exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = gpush(t, "hosts", "-i", "[fe80::2%eth1]:2222,", "--json")
	if code != 0 || !strings.Contains(out, `"dial": "[fe80::2%eth1]:2222"`) {
		t.Errorf("--json: exit %d\n%s%s", code, out, stderr)
	}
}
