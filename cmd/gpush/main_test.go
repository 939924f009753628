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
	got, err := parseExtraVars([]string{"grace=1s x=1", "@" + f, `{"force": true}`, "eq=a=b", "gpus=[0, 1]  units=a,b",
		"services=x.service,y.service", "msg=two  words"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"grace": "2s", "x": "1", "services": "x.service,y.service", "force": true, "eq": "a=b",
		"gpus": "[0, 1]", "units": "a,b", "msg": "two  words"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
	for _, bad := range []string{"novalue", "=v", "x-y=1", "  ", "", "@" + filepath.Join(dir, "missing.yaml"), "{not: [closed"} {
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
	// A library for require: listed as a module, without a vars line.
	if err := os.WriteFile(filepath.Join(dir, "scripts", "helpers.lua"), []byte("-- module: my helpers\nreturn {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("GPUSH_PATH", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, out, _ := gpush(t, "scripts")
	if code != 0 {
		t.Fatalf("scripts: exit %d", code)
	}
	for _, want := range []string{"./scripts:\n  free_gpus.lua          my own free", "embedded:", "gpu_status.lua", "[shadowed by ./scripts]", "  helpers.lua            (module for require) my helpers\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("scripts output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "  free_gpus.lua          my own free\n                         vars: none (takes no -e)\n") {
		t.Errorf("scripts output does not say ./scripts/free_gpus.lua has no vars:\n%s", out)
	}
	declaredScript(t, filepath.Join(dir, "scripts"))
	if err := os.WriteFile(filepath.Join(dir, "scripts", "broken.lua"), []byte("-- broken\n-- @var x int\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = gpush(t, "scripts")
	for _, want := range []string{"  free.lua               Free some GPUs (a test script).\n                         vars: services, gpus, force, grace, user\n",
		"vars: bad declaration: broken.lua:2: @var x int: want NAME TYPE HELP"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("scripts: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	for _, name := range []string{"free", "free.lua"} {
		code, out, _ = gpush(t, "doc", name)
		want := "free.lua (" + filepath.Join(dir, "scripts", "free.lua") + ")\n\nFree some GPUs (a test script).\n\nexample: gpush run free.lua -e gpus=0\n\n" +
			"vars (gpush run free.lua -e NAME=VALUE):\n" +
			"  NAME      TYPE      DEFAULT  HELP\n" +
			"  services  list?     -        units to stop first\n" +
			"  gpus      intlist?  -        GPU indices to free; every GPU when left out\n" +
			"  force     bool      no       also signal protected processes\n" +
			"  grace     duration  5s       TERM -> KILL grace period\n" +
			"  user      string?   -        only this user's holders\n"
		if code != 0 || out != want {
			t.Errorf("doc %s: exit %d\n%s\nwant\n%s", name, code, out, want)
		}
	}
	code, out, _ = gpush(t, "doc", "free_gpus")
	if code != 0 || !strings.Contains(out, "my own free") || !strings.Contains(out, "vars: none, so gpush run free_gpus.lua takes no -e") {
		t.Errorf("doc free_gpus: exit %d\n%s", code, out)
	}
	code, _, stderr := gpush(t, "doc", "broken")
	if code != 1 || !strings.Contains(stderr, "broken.lua:2:") {
		t.Errorf("doc broken: exit %d, stderr %q", code, stderr)
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

// declaredScript writes a script that declares vars and returns them, so a
// run shows what Lua got.
func declaredScript(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "free.lua")
	src := `-- Free some GPUs (a test script).
--
-- vars:
-- @var services list?    units to stop first
-- @var gpus     intlist? GPU indices to free; every GPU when left out
-- @var force    bool    also signal protected processes (default: no)
-- @var grace    duration TERM -> KILL grace period (default: 5s)
-- @var user     string?  only this user's holders
--
-- example: gpush run free.lua -e gpus=0
return {services = vars.services, gpus = vars.gpus, force = vars.force, grace = vars.grace,
        user = vars.user, dev = vars.gpush_dev_dir, gpu_type = vars.gpus and type(vars.gpus[1])}
`
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunChecksExtraVarsBeforeDialling(t *testing.T) {
	dir := t.TempDir()
	free := declaredScript(t, dir)
	none := filepath.Join(dir, "none.lua")
	bad := filepath.Join(dir, "bad.lua")
	req := filepath.Join(dir, "req.lua")
	unknownFile := filepath.Join(dir, "unknown.yaml")
	for p, src := range map[string]string{
		req:         "-- needs a unit\n-- @var unit string the unit to stop\nreturn vars.unit\n",
		none:        "-- declares nothing\nreturn 1\n",
		bad:         "-- a bad declaration\n-- @var gpus ints the GPUs\nreturn 1\n",
		unknownFile: "gpus: [0]\ngpu: 2\n",
	} {
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The inventory's hosts do not resolve: a dial would end in exit 4, so
	// exit 1 shows the run stopped before dialling.
	inv := writeInventory(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{free, "-e", "gpu=2"}, `-e "gpu=2": free.lua: no var gpu; did you mean gpus?`},
		{[]string{free, "-e", "gpus=0", "-e", "servics=a.service"}, `-e "servics=a.service": free.lua: no var servics; did you mean services?`},
		{[]string{free, "-e", "timeout=9"}, "free.lua: no var timeout (its vars: services, gpus, force, grace, user)"},
		{[]string{free, "-e", "gpus="}, `-e "gpus=": gpus: empty list; leave it out to mean every GPU`},
		{[]string{free, "-e", "user="}, "user: empty value"},
		{[]string{free, "-e", "gpus=0,x"}, `gpus: item 2: want an integer, got "x"`},
		{[]string{free, "-e", "force=maybe"}, `-e "force=maybe": force: want true/false`},
		{[]string{free, "-e", "grace=soon"}, "grace: want a duration"},
		{[]string{free, "-e", `{"gpus": []}`}, `-e "{\"gpus\": []}": gpus: empty list`},
		{[]string{free, "-e", "@" + unknownFile}, "-e @" + unknownFile + ": free.lua: no var gpu; did you mean gpus?"},
		{[]string{none, "-e", "gpus=1"}, "none.lua declares no vars, so it takes no -e gpus; to give it one, declare it with -- @var NAME TYPE HELP"},
		{[]string{bad}, "bad.lua:2: @var gpus: unknown type \"ints\""},
		{[]string{req}, "run: req.lua: var unit is required and not given (string: the unit to stop); give it with -e unit=VALUE"},
	} {
		code, _, stderr := gpush(t, append([]string{"run", "-i", inv}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("gpush run %q: exit %d, stderr %q; want 1 and %q", c.args, code, stderr, c.want)
		}
	}
}

// TestRunConvertsExtraVars runs the script on localhost (no SSH): the -e
// forms, their merge order and the conversions reach Lua.
func TestRunConvertsExtraVars(t *testing.T) {
	dir := t.TempDir()
	free := declaredScript(t, dir)
	yml := filepath.Join(dir, "vars.yaml")
	if err := os.WriteFile(yml, []byte("services: [c.service]\ngrace: 1m30s\nforce: on\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	jsn := filepath.Join(dir, "vars.json")
	if err := os.WriteFile(jsn, []byte(`{"gpus": [3], "user": "alice"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{nil, `{"force":false,"grace":"5s"}`},
		{[]string{"services=a.service,b.service"}, `{"force":false,"grace":"5s","services":["a.service","b.service"]}`},
		{[]string{`{"services": ["a", "b"]}`, "gpus=[0, 1]", "force=no"}, `{"force":false,"gpu_type":"number","gpus":[0,1],"grace":"5s","services":["a","b"]}`},
		{[]string{"force=yes grace=90 gpus=2"}, `{"force":true,"gpu_type":"number","gpus":[2],"grace":"1m30s"}`},
		{[]string{"@" + yml, "@" + jsn}, `{"force":true,"gpu_type":"number","gpus":[3],"grace":"1m30s","services":["c.service"],"user":"alice"}`},
		// Left to right: the later -e wins, whole values (lists are not concatenated).
		{[]string{"@" + yml, "services=d.service", "grace=2s", "force=off"}, `{"force":false,"grace":"2s","services":["d.service"]}`},
		// gpush's own host vars are not the script's to declare.
		{[]string{"gpush_dev_dir=/tmp/nodev"}, `{"dev":"/tmp/nodev","force":false,"grace":"5s"}`},
	} {
		args := []string{"run", free, "-i", "localhost", "--json"}
		for _, e := range c.extra {
			args = append(args, "-e", e)
		}
		code, stdout, stderr := gpush(t, args...)
		if code != 0 || !strings.Contains(stdout, `"value":`+c.want+`,`) {
			t.Errorf("-e %q: exit %d\nstdout %s\nstderr %s\nwant value %s", c.extra, code, stdout, stderr, c.want)
		}
	}
}

// TestRunConvertsHostVars: declared vars set in the inventory are converted
// like -e; a bad one fails its host only, naming host and var.
func TestRunConvertsHostVars(t *testing.T) {
	dir := t.TempDir()
	free := declaredScript(t, dir)
	inv := filepath.Join(dir, "inv.yaml")
	src := `all:
  vars: {ansible_connection: local}
  hosts:
    good: {services: "a.service, b.service", gpus: [1, 2], force: "yes", grace: 30}
    bad: {gpus: "0,one"}
`
	if err := os.WriteFile(inv, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpush(t, "run", free, "-i", inv, "--json")
	want := `{"type":"host","host":"good","status":"ok","value":{"force":true,"gpu_type":"number","gpus":[1,2],"grace":"30s","services":["a.service","b.service"]},`
	if code != 2 || !strings.Contains(stdout, want) ||
		!strings.Contains(stdout, `{"type":"host","host":"bad","status":"failed","value":null,"error":"host bad: var gpus: item 2: want an integer, got \"one\""`) {
		t.Errorf("exit %d (want 2)\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// -e wins over the bad host var, converted the same way.
	code, stdout, _ = gpush(t, "run", free, "-i", inv, "--json", "--limit", "bad", "-e", "gpus=3")
	if code != 0 || !strings.Contains(stdout, `"gpus":[3]`) {
		t.Errorf("-e over a bad host var: exit %d\n%s", code, stdout)
	}
}

// Inventory warnings (a typo'd key drops its hosts in Ansible too) are
// printed, naming file and line, and the run still goes on.
func TestInventoryWarningsPrinted(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(inv, []byte("all:\n  children:\n    gpus:\n      hostz:\n        gpu01:\n  hosts:\n    localhost:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpush(t, "hosts", "-i", inv)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "gpush: warning: ") || !strings.Contains(stderr, "typo.yaml:4") || !strings.Contains(stderr, `"hostz"`) {
		t.Errorf("stderr %q lacks the warning for hostz at typo.yaml:4", stderr)
	}
}
