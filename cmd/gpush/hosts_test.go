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
	// Listed all the same, marked, with the reason; a run refuses it.
	code, out, stderr = gpush(t, "hosts", "-i", inv)
	if code != 0 || !strings.Contains(out, "3 hosts: gpu[01-02],sw1") || !strings.Contains(out, "error: "+inv+":5: host sw1: ansible_connection") ||
		!strings.Contains(stderr, "host sw1: cannot connect: ") || !strings.Contains(stderr, "gpush speaks ssh and local") {
		t.Errorf("all, sw1 selected: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = gpush(t, "hosts", "-i", inv, "--json")
	if code != 0 || !strings.Contains(out, `"sw1": {`) || !strings.Contains(out, `"error": "`+inv+`:5: host sw1: ansible_connection`) {
		t.Errorf("--json, sw1 selected: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = gpush(t, "run", "-i", inv, "-c", "return 1")
	if code == 0 || !strings.Contains(stderr, "host sw1: ansible_connection") {
		t.Errorf("run, sw1 selected: exit %d\n%s%s", code, out, stderr)
	}
}

// An empty inventory lists nothing and exits 0, as ansible-inventory
// --list does; a run on it is an error.
func TestHostsEmptyInventory(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "empty.ini")
	if err := os.WriteFile(inv, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"hosts", "-i", inv}, {"hosts", "-i", inv, "--json"}, {"hosts", "-i", inv, "--graph"}} {
		if code, out, stderr := gpush(t, args...); code != 0 || stderr != "" {
			t.Errorf("%q: exit %d\n%s%s", args, code, out, stderr)
		}
	}
	if code, out, stderr := gpush(t, "run", "-i", inv, "-c", "return 1"); code != 1 || !strings.Contains(stderr, "matches no host") {
		t.Errorf("run: exit %d\n%s%s", code, out, stderr)
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
