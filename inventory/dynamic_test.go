package inventory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeScript writes an executable inventory script into dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// scriptOpts is Options reading no ssh_config, so tests see only the script.
func scriptOpts(t *testing.T) Options {
	dir := t.TempDir()
	return Options{WorkDir: dir, ConfigDir: dir, SSHConfigFiles: []string{}, HomeDir: dir}
}

// A --list with _meta.hostvars, the form most scripts print; --host must
// then not be asked.
const listWithMeta = `{
  "all": {"vars": {"ansible_user": "ops", "tier": "all"}},
  "gpus": {
    "hosts": ["gpu02", "gpu01"],
    "vars": {"tier": "gpus", "gpu_count": 8, "ratio": 0.5, "big": 18446744073709551615},
    "children": ["h200"]
  },
  "h200": {"hosts": ["gpu03"], "vars": {"tier": "h200"}},
  "login": ["login01"],
  "_meta": {"hostvars": {
    "gpu01": {"ansible_host": "10.0.0.1", "ansible_port": 2201},
    "gpu03": {"ansible_host": "10.0.0.3", "tier": "host"},
    "login01": {"ansible_host": "10.0.9.1", "ansible_connection": "ssh"}
  }}
}`

func TestScriptListWithMeta(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\necho \"$@\" >> "+calls+"\n"+
		"[ \"$1\" = --list ] || exit 3\ncat <<'EOF'\n"+listWithMeta+"\nEOF\n")
	got := mustResolve(t, inv, scriptOpts(t))
	if got.Kind != KindScript || got.Source != inv {
		t.Errorf("kind %s source %s", got.Kind, got.Source)
	}
	if b, _ := os.ReadFile(calls); string(b) != "--list\n" {
		t.Errorf("script calls %q, want only --list", b)
	}
	if names := got.HostNames(); !reflect.DeepEqual(names, []string{"gpu02", "gpu01", "gpu03", "login01"}) {
		t.Errorf("host order %v (want the order printed)", names)
	}
	h, _ := got.Host("gpu01")
	if h.Address != "10.0.0.1" || h.Port != 2201 || h.User != "ops" ||
		!reflect.DeepEqual(h.Groups, []string{"all", "gpus"}) {
		t.Errorf("gpu01 %+v", h)
	}
	if h.Vars["gpu_count"] != 8 || h.Vars["ratio"] != 0.5 || h.Vars["big"] != uint64(18446744073709551615) || h.Vars["tier"] != "gpus" {
		t.Errorf("gpu01 vars %#v (numbers as the YAML loader gives them)", h.Vars)
	}
	// A child group's vars beat its parent's, host vars beat both.
	if h, _ := got.Host("gpu02"); h.Address != "gpu02" || h.Vars["tier"] != "gpus" {
		t.Errorf("gpu02 %+v", h)
	}
	if h, _ := got.Host("gpu03"); h.Vars["tier"] != "host" || !reflect.DeepEqual(h.Groups, []string{"all", "gpus", "h200"}) {
		t.Errorf("gpu03 %+v", h)
	}
	if h, _ := got.Host("login01"); h.Address != "10.0.9.1" || !reflect.DeepEqual(h.Groups, []string{"all", "login"}) || h.Vars["tier"] != "all" {
		t.Errorf("login01 %+v", h)
	}
	if hosts, _ := got.GroupHosts("gpus"); !reflect.DeepEqual(hosts, []string{"gpu02", "gpu01", "gpu03"}) {
		t.Errorf("gpus = %v", hosts)
	}
	sel, err := got.Select("h200")
	if err != nil || len(sel) != 1 || sel[0].Name != "gpu03" {
		t.Errorf("Select(h200) = %v, %v", sel, err)
	}
	if len(got.Warnings) != 0 {
		t.Errorf("warnings %q", got.Warnings)
	}
}

// Without _meta.hostvars (or with _meta but no hostvars), each host's vars
// come from --host NAME; an empty --host output means no vars.
func TestScriptHostFallback(t *testing.T) {
	for name, meta := range map[string]string{"no _meta": "", "_meta without hostvars": `, "_meta": {}`, "hostvars null": `, "_meta": {"hostvars": null}`} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			calls := filepath.Join(dir, "calls")
			inv := writeScript(t, dir, "inv.py", `#!/bin/sh
echo "$@" >> `+calls+`
case "$1 $2" in
"--list ") echo '{"gpus": {"hosts": ["gpu01", "gpu02", "gpu03"]}`+meta+`}' ;;
"--host gpu01") echo '{"ansible_host": "10.0.0.1", "slot": 1}' ;;
"--host gpu02") printf '  \n' ;;
"--host gpu03") printf '{\n  "ansible_host": "10.0.0.3",\n  "labels": {"rack": "r1", "ids": [1, 2.5]}\n}\n' ;;
*) echo "unexpected $*" >&2; exit 2 ;;
esac
`)
			got := mustResolve(t, inv, scriptOpts(t))
			if b, _ := os.ReadFile(calls); string(b) != "--list\n--host gpu01\n--host gpu02\n--host gpu03\n" {
				t.Errorf("calls:\n%s", b)
			}
			want := map[string]string{"gpu01": "10.0.0.1", "gpu02": "gpu02", "gpu03": "10.0.0.3"}
			for n, addr := range want {
				if h, _ := got.Host(n); h.Address != addr {
					t.Errorf("%s: address %q, want %q", n, h.Address, addr)
				}
			}
			h, _ := got.Host("gpu03")
			wantLabels := map[string]any{"rack": "r1", "ids": []any{1, 2.5}}
			if !reflect.DeepEqual(h.Vars["labels"], wantLabels) {
				t.Errorf("gpu03 labels %#v", h.Vars["labels"])
			}
			if h, _ := got.Host("gpu01"); h.Vars["slot"] != 1 {
				t.Errorf("gpu01 vars %#v", h.Vars)
			}
		})
	}
}

// A --host failure names the host and quotes the script's stderr.
func TestScriptHostFailure(t *testing.T) {
	dir := t.TempDir()
	inv := writeScript(t, dir, "inv", `#!/bin/sh
if [ "$1" = --list ]; then echo '{"gpus": ["gpu01", "gpu02"]}'; exit 0; fi
[ "$2" = gpu01 ] && { echo '{}'; exit 0; }
echo "no such node: $2" >&2
exit 5
`)
	_, err := Resolve(inv, scriptOpts(t))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{inv + " --host gpu02", "exited with status 5", `"no such node: gpu02"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestScriptErrors(t *testing.T) {
	cases := []struct {
		name, out string
		want      []string
	}{
		{"syntax", "{\n  \"gpus\": {\n    \"hosts\": [\"gpu01\",]\n  }\n}", []string{"invalid JSON", "line 3, column 23", `near "`}},
		{"truncated", `{"gpus": {"hosts": ["gpu01"`, []string{"ends inside a value"}},
		{"not an object", `["gpu01"]`, []string{"want a JSON object of groups, got a list"}},
		{"trailing", `{"gpus": ["a"]} {"more": ["b"]}`, []string{"invalid character '{' after top-level value", "column 17"}},
		{"hosts a string", "{\"a\": [\"x\"],\n \"gpus\": {\"hosts\": \"gpu01\"}}", []string{"line 2", "group gpus: hosts: want a list of host names, got the string \"gpu01\""}},
		{"host a number", `{"gpus": {"hosts": ["a", 7]}}`, []string{"group gpus: hosts[1]: want a host name, got the number 7"}},
		{"vars a list", `{"gpus": {"hosts": ["a"], "vars": [1]}}`, []string{"group gpus: vars: want an object, got a list"}},
		{"children a map", `{"gpus": {"children": {"h200": {}}}}`, []string{"group gpus: children: want a list of group names"}},
		{"group null", `{"gpus": null}`, []string{"group gpus: hosts: want a list of host names, got null"}},
		{"meta a list", `{"_meta": []}`, []string{"_meta: want an object, got a list"}},
		{"hostvars a list", `{"_meta": {"hostvars": []}}`, []string{"_meta.hostvars: want an object of hosts"}},
		{"hostvar not an object", `{"g": ["a"], "_meta": {"hostvars": {"a": "x"}}}`, []string{`_meta.hostvars["a"]: want an object of vars, got the string "x"`}},
		{"empty", "\n", []string{"printed nothing"}},
		{"cycle", `{"a": {"children": ["b"]}, "b": {"children": ["a"]}}`, []string{"child group cycle"}},
		{"bad port", `{"g": ["a"], "_meta": {"hostvars": {"a": {"ansible_port": "ssh"}}}}`, []string{"host a: ansible_port", "_meta.hostvars"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "out.json")
			writeFile(t, data, c.out)
			inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\ncat "+data+"\n")
			err := resolveSelect(inv, scriptOpts(t))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append(c.want, inv) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestScriptExitStatusQuotesStderr(t *testing.T) {
	dir := t.TempDir()
	inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\necho 'partial {' \necho 'sinfo: error: Invalid partition name specified' >&2\nexit 1\n")
	_, err := Resolve(inv, scriptOpts(t))
	if err == nil || !strings.Contains(err.Error(), inv+" --list: exited with status 1") ||
		!strings.Contains(err.Error(), `stderr: "sinfo: error: Invalid partition name specified"`) {
		t.Errorf("error %v", err)
	}
}

// pidGone reports whether pid has exited (a zombie left for init counts).
func pidGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// waitFile returns a file's content once the script has written it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for range 2000 {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s was never written", path)
	return ""
}

// A script that hangs is stopped at the timeout, with the children it
// started (its whole process group).
func TestScriptTimeoutStopsItsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\necho 'looking up nodes' >&2\nsleep 1000 &\necho $! > "+pidFile+"\nwait\n")
	opts := scriptOpts(t)
	opts.Script.Timeout = 300 * time.Millisecond
	_, err := Resolve(inv, opts)
	if err == nil || !strings.Contains(err.Error(), "still running after 300ms; stopped it") ||
		!strings.Contains(err.Error(), `"looking up nodes"`) || !strings.Contains(err.Error(), TimeoutEnv) {
		t.Fatalf("error %v", err)
	}
	pid, err := strconv.Atoi(waitFile(t, pidFile))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL to the group was sent before Resolve returned; the kernel
	// may need a moment to finish the child off.
	for i := 0; !pidGone(pid); i++ {
		if i == 2000 {
			t.Fatalf("child %d of the timed-out script still runs", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestScriptTimeoutFromEnv(t *testing.T) {
	dir := t.TempDir()
	inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\nexec sleep 1000\n")
	t.Setenv(TimeoutEnv, "0.2")
	_, err := Resolve(inv, scriptOpts(t))
	if err == nil || !strings.Contains(err.Error(), "still running after 200ms") {
		t.Errorf("error %v", err)
	}
	t.Setenv(TimeoutEnv, "soon")
	if _, err := Resolve(inv, scriptOpts(t)); err == nil || !strings.Contains(err.Error(), TimeoutEnv+`="soon"`) {
		t.Errorf("bad env: error %v", err)
	}
}

// A script printing without end is stopped at the cap, not read until
// memory runs out.
func TestScriptEndlessOutput(t *testing.T) {
	dir := t.TempDir()
	inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\nprintf '{\"gpus\": ['\nwhile :; do printf '\"gpu\", '; done\n")
	opts := scriptOpts(t)
	opts.Script.MaxOutput = 1 << 20
	_, err := Resolve(inv, opts)
	if err == nil || !strings.Contains(err.Error(), "printed more than 1048576 bytes") {
		t.Errorf("error %v", err)
	}
}

// Only an executable file that starts with #! (or is ELF) is run; other
// files load as YAML/INI whatever their mode, as Ansible ends up reading them.
func TestIsScript(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, body string
		mode       os.FileMode
		want       bool
	}{
		{"shebang-exec", "#!/bin/sh\n", 0o755, true},
		{"shebang-owner-exec", "#!/bin/sh\n", 0o700, true},
		{"shebang-no-exec", "#!/bin/sh\n", 0o644, false},
		{"ini-exec", "[gpus]\ngpu01\n", 0o755, false},
		{"elf-exec", "\x7fELF\x02\x01", 0o755, true},
		{"empty-exec", "", 0o755, false},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte(c.body), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		got, err := IsScript(p)
		if err != nil || got != c.want {
			t.Errorf("%s: IsScript = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	// The executable INI file loads as INI.
	inv := mustResolve(t, filepath.Join(dir, "ini-exec"), scriptOpts(t))
	if inv.Kind != KindFile || !reflect.DeepEqual(inv.HostNames(), []string{"gpu01"}) {
		t.Errorf("ini-exec: kind %s hosts %v", inv.Kind, inv.HostNames())
	}
	if _, err := IsScript(filepath.Join(dir, "missing")); err == nil {
		t.Error("IsScript(missing): no error")
	}
}

// group_vars/ and host_vars/ beside the script apply, above the script's
// own group vars (Ansible's vars plugin reads them for any inventory source).
func TestScriptVarDirs(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "group_vars", "gpus.yml"), "tier: from_group_vars\nansible_user: admin\n")
	writeFile(t, filepath.Join(dir, "host_vars", "gpu01.yml"), "ansible_host: 10.9.9.9\n")
	inv := writeScript(t, dir, "inv.sh", `#!/bin/sh
echo '{"gpus": {"hosts": ["gpu01", "gpu02"], "vars": {"tier": "from_script"}}, "_meta": {"hostvars": {}}}'
`)
	got := mustResolve(t, inv, scriptOpts(t))
	h1, _ := got.Host("gpu01")
	h2, _ := got.Host("gpu02")
	if h1.Address != "10.9.9.9" || h1.User != "admin" || h2.Vars["tier"] != "from_group_vars" {
		t.Errorf("gpu01 %+v\ngpu02 %+v", h1, h2)
	}
}

// Ansible's legacy shorthand (a group object without hosts/vars/children is a host
// of that name) and the warnings for what Ansible drops without a word.
func TestScriptShorthandAndWarnings(t *testing.T) {
	dir := t.TempDir()
	inv := writeScript(t, dir, "inv.sh", `#!/bin/sh
cat <<'EOF'
{
  "bastion": {"ansible_host": "192.0.2.7"},
  "gpus": {"hostz": ["gpu09"], "hosts": ["gpu01"]},
  "gpus": {"hosts": ["gpu02"]},
  "_meta": {"hostvars": {"gpu01": {}, "gpu07": {}, "gpu08": {}}}
}
EOF
`)
	got := mustResolve(t, inv, scriptOpts(t))
	if names := got.HostNames(); !reflect.DeepEqual(names, []string{"bastion", "gpu02"}) {
		t.Errorf("hosts %v", names)
	}
	if h, _ := got.Host("bastion"); h.Address != "192.0.2.7" {
		t.Errorf("bastion %+v", h)
	}
	warn := strings.Join(got.Warnings, "\n")
	for _, w := range []string{`group "gpus" printed twice`, "in no group, ignored: gpu[01,07-08]", inv + " --list:4"} {
		if !strings.Contains(warn, w) {
			t.Errorf("warnings lack %q:\n%s", w, warn)
		}
	}
}

// A signal to gpush while the script runs is passed on to the script's
// group (it runs in its own group, out of reach of the terminal's ^C).
func TestScriptSignalIsRelayed(t *testing.T) {
	dir := t.TempDir()
	ready, trapped := filepath.Join(dir, "ready"), filepath.Join(dir, "trapped")
	inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\ntrap 'echo INT > "+trapped+"; exit 9' INT\necho go > "+ready+
		"\nwhile :; do sleep 0.05; done\n")
	errc := make(chan error, 1)
	go func() {
		_, err := LoadScript(context.Background(), inv, ScriptOptions{Timeout: time.Minute})
		errc <- err
	}()
	waitFile(t, ready) // the script runs, so gpush is already relaying
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if err == nil || !strings.Contains(err.Error(), "stopped by interrupt sent to gpush") {
		t.Errorf("error %v", err)
	}
	if waitFile(t, trapped) != "INT" {
		t.Error("the script did not get SIGINT")
	}
}

func TestScriptContextCanceled(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	inv := writeScript(t, dir, "inv.sh", "#!/bin/sh\necho go > "+ready+"\nexec sleep 1000\n")
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := LoadScript(ctx, inv, ScriptOptions{Timeout: time.Minute})
		errc <- err
	}()
	waitFile(t, ready)
	cause := errors.New("operator gave up")
	cancel(cause)
	if err := <-errc; !errors.Is(err, cause) {
		t.Errorf("error %v, want it to wrap %v", err, cause)
	}
}

// BenchmarkLoadScript100k: a script printing 100k hosts with _meta.hostvars
// (about 9 MB of JSON), the size of a large fleet's dynamic inventory.
func BenchmarkLoadScript100k(b *testing.B) {
	dir := b.TempDir()
	var sb strings.Builder
	sb.WriteString(`{"gpus": {"hosts": [`)
	for i := range 100000 {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(`"gpu` + strconv.Itoa(i) + `"`)
	}
	sb.WriteString(`], "vars": {"ansible_user": "ops"}}, "_meta": {"hostvars": {`)
	for i := range 100000 {
		if i > 0 {
			sb.WriteString(",\n")
		}
		sb.WriteString(`"gpu` + strconv.Itoa(i) + `": {"ansible_host": "10.0.` + strconv.Itoa(i/256%256) + `.` + strconv.Itoa(i%256) + `", "rack": ` + strconv.Itoa(i/40) + `}`)
	}
	sb.WriteString("}}}\n")
	data := filepath.Join(dir, "out.json")
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	inv := filepath.Join(dir, "inv.sh")
	if err := os.WriteFile(inv, []byte("#!/bin/sh\ncat "+data+"\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(sb.Len()))
	for b.Loop() {
		got, err := LoadScript(context.Background(), inv, ScriptOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(got.HostNames()) != 100000 {
			b.Fatalf("%d hosts", len(got.HostNames()))
		}
	}
}

// FuzzScriptList: any --list output gives an inventory or an error naming
// the script, never a panic.
func FuzzScriptList(f *testing.F) {
	f.Add([]byte(listWithMeta))
	f.Add([]byte(`{"g": ["a"], "g": {"hosts": ["b"]}, "x": {"k": 1}, "_meta": {"hostvars": {"a": {"n": 1e999}}}}`))
	f.Add([]byte(`{"a": {"children": ["a"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv := newInventory("fuzz.sh", KindScript)
		hostvars, err := parseScriptList(inv, "fuzz.sh --list", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.sh") {
				t.Fatalf("error %q does not name the script", err)
			}
			return
		}
		for name, v := range hostvars {
			if vars, ok := v.(map[string]any); ok && inv.hosts[name] != nil {
				_ = inv.addHost("", name, vars, Pos{}, nil)
			}
		}
		_ = inv.finalize()
	})
}
