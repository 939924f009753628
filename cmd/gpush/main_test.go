package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func gpush(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"gpush"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestExtraVars(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "vars.yaml")
	if err := os.WriteFile(f, []byte("services: [a.service, b.service]\ngrace: 2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parseExtraVars([]string{"grace=1s x=1", "@" + f, `{"force": true}`, "eq=a=b"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"grace": "2s", "x": "1", "services": []any{"a.service", "b.service"}, "force": true, "eq": "a=b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	for _, bad := range []string{"novalue", "=v", "@" + filepath.Join(dir, "missing.yaml"), "{not: [closed"} {
		if _, err := parseExtraVars([]string{bad}); err == nil || !strings.Contains(err.Error(), "-e") {
			t.Errorf("-e %q: error %v should name -e", bad, err)
		}
	}
}

func TestInterspersedFlags(t *testing.T) {
	app := newApp(nil, nil)
	got := interspersed(app, []string{"gpush", "run", "free.lua", "-i", "inv", "--check", "-e", "a=1", "--forks=3", "--", "-odd"})
	want := []string{"gpush", "run", "-i", "inv", "--check", "-e", "a=1", "--forks=3", "--", "free.lua", "-odd"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := interspersed(app, []string{"gpush", "nosuch", "x", "-i"}); !reflect.DeepEqual(got, []string{"gpush", "nosuch", "x", "-i"}) {
		t.Errorf("unknown command reordered: %q", got)
	}
}

func TestUsageErrorsExit1AndNameTheArgument(t *testing.T) {
	inv := writeInventory(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "SCRIPT"},
		{[]string{"run", "free_gpus.lua"}, "--inventory"},
		{[]string{"run", "free_gpus.lua", "-i", inv, "--forks", "0"}, "--forks"},
		{[]string{"run", "free_gpus.lua", "-i", inv, "--host-key-policy", "yolo"}, "--host-key-policy"},
		{[]string{"run", "no_such_script.lua", "-i", inv}, "no_such_script.lua"},
		{[]string{"run", "free_gpus.lua", "-i", inv, "--limit", "nomatch*"}, "--limit"},
		{[]string{"run", "free_gpus.lua", "-i", filepath.Join(t.TempDir(), "nope.yaml")}, "--inventory"},
		{[]string{"run", "free_gpus.lua", "-i", inv, "-e", "oops"}, "-e"},
		{[]string{"run", "free_gpus.lua", "-i", inv, "--bogus"}, "bogus"},
		{[]string{"hosts", "-i", inv, "--graph", "--json"}, "--graph"},
		{[]string{"doc", "nosuchmodule"}, "nosuchmodule"},
		{[]string{"frobnicate"}, "frobnicate"},
	} {
		code, _, stderr := gpush(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("gpush %q: exit %d, stderr %q; want 1 naming %q", c.args, code, stderr, c.want)
		}
	}
}

func writeInventory(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "inv.yaml")
	inv := `all:
  children:
    gpu:
      hosts:
        gpu[01:03]:
      vars: {ansible_user: ops}
    login:
      hosts:
        login01: {ansible_host: 10.0.0.9, ansible_port: 2222}
`
	if err := os.WriteFile(p, []byte(inv), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHosts(t *testing.T) {
	inv := writeInventory(t)
	code, out, stderr := gpush(t, "hosts", "-i", inv, "--limit", "gpu")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "gpu01") || !strings.Contains(out, "ops") || strings.Contains(out, "login01") ||
		!strings.Contains(out, "3 hosts: gpu[01-03]") {
		t.Errorf("hosts:\n%s", out)
	}
	code, out, _ = gpush(t, "hosts", "-i", inv, "--json")
	if code != 0 || !strings.Contains(out, `"login01"`) || !strings.Contains(out, "2222") {
		t.Errorf("hosts --json: exit %d\n%s", code, out)
	}
	code, out, _ = gpush(t, "hosts", "--limit", "login*", "-i", inv, "--graph")
	if code != 0 || !strings.Contains(out, "login01") || strings.Contains(out, "gpu02") {
		t.Errorf("hosts --graph: exit %d\n%s", code, out)
	}
}

func TestScriptsDocVersion(t *testing.T) {
	// Run from a folder with its own scripts/ to see lookup order and shadowing.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "free_gpus.lua"), []byte("-- my own free\nreturn 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("GPUSH_PATH", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, out, _ := gpush(t, "scripts")
	if code != 0 {
		t.Fatalf("scripts: exit %d", code)
	}
	for _, want := range []string{"./scripts:\n  free_gpus.lua          my own free", "embedded:", "gpu_status.lua", "[shadowed by ./scripts]", "(module for require)"} {
		if !strings.Contains(out, want) {
			t.Errorf("scripts output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = gpush(t, "doc", "gpu")
	if code != 0 || !strings.Contains(out, "wait_free") {
		t.Errorf("doc gpu: exit %d\n%s", code, out)
	}
	code, out, _ = gpush(t, "doc")
	if code != 0 || !strings.Contains(out, "systemd") {
		t.Errorf("doc: exit %d\n%s", code, out)
	}
	code, out, _ = gpush(t, "version")
	if code != 0 || !strings.Contains(out, "helper ") || !strings.Contains(out, "gpush-helper-linux-amd64") {
		t.Errorf("version: exit %d\n%s", code, out)
	}
}
