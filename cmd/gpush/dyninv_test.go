package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `gpush hosts -i ./inv.py` runs the inventory script (here one without
// _meta, so --host is asked per host) and lists what it printed.
func TestHostsFromInventoryScript(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir) // no operator ssh_config in the way
	script := `#!/bin/sh
case "$1" in
--list) echo '{"gpus": {"hosts": ["gpu01", "gpu02"], "vars": {"ansible_user": "ops"}}, "login": ["login01"]}' ;;
--host) [ "$2" = login01 ] && echo '{"ansible_host": "10.0.0.9", "ansible_port": 2222}' || echo '{}' ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "inv.py"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := gpush(t, "hosts", "-i", "./inv.py", "--limit", "gpus")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "gpu01") || !strings.Contains(out, "ops") || strings.Contains(out, "login01") ||
		!strings.Contains(out, "2 hosts: gpu[01-02]") {
		t.Errorf("hosts:\n%s", out)
	}
	code, out, stderr = gpush(t, "hosts", "-i", "inv.py", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var list struct {
		Meta struct {
			Hostvars map[string]map[string]any `json:"hostvars"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if hv := list.Meta.Hostvars["login01"]; hv["ansible_host"] != "10.0.0.9" || hv["ansible_port"] != 2222.0 {
		t.Errorf("login01 vars %v", hv)
	}

	// A script printing something else than JSON: exit 1, naming -i and where.
	if err := os.WriteFile(filepath.Join(dir, "bad.py"), []byte("#!/bin/sh\necho 'gpus: [gpu01]'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = gpush(t, "hosts", "-i", "./bad.py")
	if code != 1 || !strings.Contains(stderr, "--inventory ./bad.py") || !strings.Contains(stderr, "./bad.py --list: output line 1, column 1") {
		t.Errorf("bad JSON: exit %d, stderr %q", code, stderr)
	}
}

// --inventory-timeout bounds an inventory script's run: one that hangs is
// killed and the error says so, naming the flag's value.
func TestInventoryScriptTimeoutFlag(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	if err := os.WriteFile(filepath.Join(dir, "slow.sh"), []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := gpush(t, "hosts", "-i", "./slow.sh", "--inventory-timeout", "1")
	if code != 1 || !strings.Contains(stderr, "still running after 1s") || !strings.Contains(stderr, "--inventory-timeout") {
		t.Errorf("hung script with --inventory-timeout 1: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = gpush(t, "hosts", "-i", "./slow.sh", "--inventory-timeout", "-1")
	if code != 1 || !strings.Contains(stderr, "--inventory-timeout") {
		t.Errorf("negative timeout: exit %d, stderr %q", code, stderr)
	}
}
