package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The inputs under testdata/load are kept as files so that the comparison
// suite can reuse them; every expectation below was read off
// ansible-inventory 2.14.18 (Debian's ansible-core), and
// TestLoadAgreesWithAnsible checks them all against it again where it is
// installed.

type loadCase struct {
	name  string
	specs []string // relative to testdata/load
	// want: host -> var -> value, as ansible-inventory --list prints it
	// (after a JSON round trip; Infinity and NaN as strings).
	want map[string]map[string]any
	// absent: host -> vars that must not be set.
	absent   map[string][]string
	warnings []string // substrings, one warning each
}

var loadCases = []loadCase{
	{
		name:  "precedence",
		specs: []string{"precedence/inv.ini"},
		want: map[string]map[string]any{
			// [gpus:vars] x=1, [all:vars] x=0 and group_vars/all.yml x: 2
			// give 2: every group_vars/ file beats inventory-file vars.
			"h1": {"x": 2.0, "a": "all-file", "y": "gpus-file", "s": 2.0, "hv": "file", "deep": "all-file", "only_inline": "yes", "all_only": true},
			"h2": {"x": 2.0, "y": "gpus-file", "deep": "all-file"},
			"h3": {"x": 2.0, "a": "all-file", "all_only": true},
		},
	},
	{
		name:  "priority-ini",
		specs: []string{"priority/inv.ini"},
		want: map[string]map[string]any{
			// "10" counts (int("10")); group_vars/aaa.yml's priority is a plain var.
			"h1": {"y": "mmm", "ansible_group_priority": 100.0},
			// int(1.5) is 1: "lower" wins on its name.
			"h2": {"y": "lower"},
		},
		absent: map[string][]string{"h2": {"ansible_group_priority"}},
	},
	{
		name:  "priority-yaml",
		specs: []string{"priority/inv.yaml"},
		want:  map[string]map[string]any{"y1": {"y": "zzz", "ansible_group_priority": 100.0}},
	},
	{
		name:  "yaml11",
		specs: []string{"yaml11/inv.yml"},
		want: map[string]map[string]any{
			"h1": {
				"b1": true, "b2": false, "b3": true, "b4": "y", "b5": "yes",
				"o1": 493.0, "o2": "0o755", "x1": 31.0, "bi": 5.0, "u1": 1000.0,
				"s1": 80.0, "s2": 4830.5, "e1": "1e3", "e2": 1000.0, "e3": "1.0e3",
				"f1": "Infinity", "f2": "-Infinity", "f3": "NaN",
				"n1": nil, "n2": nil, "n3": nil,
				"d1": "2001-12-14", "d2": "2001-12-14T21:59:43.100000-05:00",
				"d3": "2001-12-14T21:59:43.100000", "d4": "2001-12-14T21:59:43+00:00",
				"z1": "08", "z2": 12.0, "z3": 0.0, "q1": "123", "q2": 493.0,
				"un": "{{ x }}", "un2": "123",
				"k":    map[string]any{"true": "a", "null": "n", "1.5": "f", "16": "h"},
				"v":    map[string]any{"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256\n6162\n"},
				"m":    map[string]any{"p": 1.0, "q": 2.0},
				"mm":   map[string]any{"p": 1.0, "q": 3.0},
				"dup":  2.0,
				"neg":  -31.0,
				"sx":   -90.0,
				"dotf": 1.0, "und": 10.5,
				"stamp1": "2001-01-01T01:02:03", "notstamp": "2001-1-1",
				"yesq": "yes", "lit": "yes\n", "tagged": true, "fl": 1.0,
				"anch": true, "ali": true,
				"list": []any{true, false, 493.0, 80.0, nil},
			},
			"h2": {
				"docker_install": true, "flag": false, "mode": 420.0, "port": 22.0, "when": 45000.0,
				"jn": 1000.0, "jy": "yes", "jb": true, "jf": 1.5,
				"jv": map[string]any{"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256\n3132"},
			},
		},
		warnings: []string{"inv.yml:39: found a duplicate mapping key (1)", "duplicate mapping key (dup)"},
	},
	{
		name:  "shapes",
		specs: []string{"shapes/inv.yml"},
		want:  map[string]map[string]any{"k1": {"novalue": nil}, "gpu01": {}, "a,b": {}, "gpu1": {}, "gpu2": {}},
		warnings: []string{
			"skipping group notgroup", `group typo: skipping unexpected key "hostz"`,
			`group typo: skipping unexpected key "extra"`, `group typo: skipping unexpected key "empty"`,
		},
	},
	{
		name:  "layout",
		specs: []string{"layout/inv.ini"},
		want: map[string]map[string]any{
			// group_vars/gpus/ is read, gpus.yml beside it is not; in the
			// folder: sorted, subfolders walked, hidden, ~, .txt, .md, .YML,
			// x.d/ and a broken symlink skipped. other.yml beats other.yaml.
			// host_vars/h1 (no extension) is found before h1.yml.
			"h1": {"from": "sub", "base": true, "sub": 1.0, "o": "yml", "hv": "noext"},
			// A symlink to a folder is a folder; a broken one is passed over.
			"h2": {"l": "linked", "tw": "json"},
			"h3": {"p": "yaml"},
		},
		absent: map[string][]string{"h1": {"beside_dir", "only_yaml"}},
	},
	{
		name:  "folder",
		specs: []string{"invdir"},
		want: map[string]map[string]any{
			"g1": {"ansible_host": "10.0.0.2", "from": "sub", "gv": "script", "v": "dir-group_vars"},
			"g2": {"from": "more", "gv": "script", "v": "dir-group_vars"},
			"g3": {"gv": "script", "hv": 1.0, "v": "dir-group_vars"},
			"s1": {"from": "script", "gv": "script", "v": "dir-group_vars"},
		},
		warnings: []string{"host g1: ansible_host = \"10.0.0.2\" overrides \"10.0.0.1\"", "03-skip.ini: skipped: Ansible ignores .ini files"},
	},
	{
		name:  "several",
		specs: []string{"multi/a/inv.yaml", "multi/b/inv.ini"},
		want: map[string]map[string]any{
			"m1": {"ansible_host": "10.0.1.9", "fa": 1.0, "gv": "a-file", "who": "b", "x": "b-all"},
			"m2": {"fa": 1.0, "gv": "b-file", "tv": "b", "x": "b-all"},
		},
		warnings: []string{"inv.ini:2: host m1: ansible_host = \"10.0.1.9\" overrides \"10.0.1.1\" set at testdata/load/multi/a/inv.yaml:7"},
	},
}

func loadSpecs(c loadCase) []string {
	specs := make([]string, len(c.specs))
	for i, s := range c.specs {
		specs[i] = filepath.Join("testdata", "load", s)
	}
	return specs
}

// jsonVars is a host's vars as JSON would carry them.
func jsonVars(t *testing.T, vars map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(jsonSafe(vars))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonSafe writes the floats JSON has no literal for as Python's json does,
// as strings.
func jsonSafe(v any) any {
	switch t := v.(type) {
	case float64:
		switch {
		case math.IsInf(t, 1):
			return "Infinity"
		case math.IsInf(t, -1):
			return "-Infinity"
		case math.IsNaN(t):
			return "NaN"
		}
	case map[string]any:
		m := map[string]any{}
		for k, x := range t {
			m[k] = jsonSafe(x)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, x := range t {
			l[i] = jsonSafe(x)
		}
		return l
	}
	return v
}

func TestLoadAsAnsible(t *testing.T) {
	for _, c := range loadCases {
		t.Run(c.name, func(t *testing.T) {
			inv, err := ResolveAll(loadSpecs(c), noSSH)
			if err != nil {
				t.Fatal(err)
			}
			names := inv.HostNames()
			sort.Strings(names)
			var wantNames []string
			for h := range c.want {
				wantNames = append(wantNames, h)
			}
			sort.Strings(wantNames)
			if !reflect.DeepEqual(names, wantNames) {
				t.Errorf("hosts %q, want %q", names, wantNames)
			}
			for host, want := range c.want {
				h, ok := inv.Host(host)
				if !ok {
					continue
				}
				got := jsonVars(t, h.Vars)
				for k, w := range want {
					if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
						t.Errorf("%s: %s = %#v (set %v), want %#v (from %s)", host, k, g, ok, w, h.Vars[k])
					}
				}
				for _, k := range c.absent[host] {
					if _, ok := got[k]; ok {
						t.Errorf("%s: %s is set (%v), want it absent", host, k, got[k])
					}
				}
			}
			for _, w := range c.warnings {
				found := false
				for _, got := range inv.Warnings {
					found = found || strings.Contains(got, w)
				}
				if !found {
					t.Errorf("no warning with %q in %q", w, inv.Warnings)
				}
			}
		})
	}
}

// ansibleInventory runs the real ansible-inventory --list on specs, with a
// private home and temp dirs. It skips without it, but fails in CI.
func ansibleInventory(t *testing.T, specs ...string) map[string]any {
	t.Helper()
	bin, err := exec.LookPath("ansible-inventory")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("ansible-inventory is not installed (make deps installs ansible-core)")
		}
		t.Skip("ansible-inventory not installed")
	}
	home := t.TempDir()
	args := []string{"--list"}
	for _, s := range specs {
		args = append(args, "-i", s)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "ANSIBLE_LOCAL_TEMP="+filepath.Join(home, "l"),
		"ANSIBLE_REMOTE_TEMP="+filepath.Join(home, "r"), "ANSIBLE_NOCOLOR=1", "ANSIBLE_CONFIG="+filepath.Join(home, "none.cfg"),
		"ANSIBLE_INVENTORY_UNPARSED_FAILED=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ansible-inventory %v: %v\n%s", args, err, stderr.String())
	}
	// Python's json writes Infinity and NaN bare; make them strings.
	out := regexp.MustCompile(`(:\s*|\[\s*|,\s*)(-?Infinity|NaN)\b`).ReplaceAll(stdout.Bytes(), []byte(`$1"$2"`))
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("ansible-inventory output: %v\n%s", err, stdout.String())
	}
	return doc
}

// unwrapUnsafe turns {"__ansible_unsafe": s} into s: gpush never templates,
// so an !unsafe value is just its string (an intended difference in
// printing only).
func unwrapUnsafe(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if s, ok := t["__ansible_unsafe"].(string); ok && len(t) == 1 {
			return s
		}
		for k, x := range t {
			t[k] = unwrapUnsafe(x)
		}
	case []any:
		for i, x := range t {
			t[i] = unwrapUnsafe(x)
		}
	}
	return v
}

// TestLoadAgreesWithAnsible compares every case's hosts, vars and group
// members with what ansible-inventory prints for the same files.
func TestLoadAgreesWithAnsible(t *testing.T) {
	for _, c := range loadCases {
		t.Run(c.name, func(t *testing.T) {
			specs := loadSpecs(c)
			doc := ansibleInventory(t, specs...)
			inv, err := ResolveAll(specs, noSSH)
			if err != nil {
				t.Fatal(err)
			}
			hostvars := doc["_meta"].(map[string]any)["hostvars"].(map[string]any)
			for _, name := range inv.HostNames() {
				h, _ := inv.Host(name)
				want, _ := unwrapUnsafe(hostvars[name]).(map[string]any)
				if want == nil {
					want = map[string]any{}
				}
				if got := jsonVars(t, h.Vars); !reflect.DeepEqual(got, want) {
					t.Errorf("host %s:\ngpush   %v\nansible %v", name, got, want)
				}
			}
			members := map[string][]string{}
			for g, v := range doc {
				if m, ok := v.(map[string]any); ok && g != "_meta" {
					for _, h := range asStrings(m["hosts"]) {
						members[h] = append(members[h], g)
					}
				}
			}
			if len(members) != len(inv.HostNames()) {
				t.Errorf("ansible lists %d hosts in groups, gpush has %d: %v", len(members), len(inv.HostNames()), inv.HostNames())
			}
			for h, groups := range members {
				got, ok := inv.Host(h)
				if !ok {
					t.Errorf("ansible has host %s, gpush does not", h)
					continue
				}
				for _, g := range groups {
					if !contains(got.Groups, g) {
						t.Errorf("host %s: ansible has it in %s, gpush in %v", h, g, got.Groups)
					}
				}
			}
		})
	}
}

func asStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Every one of these files makes ansible-inventory 2.14 fail the source
// ("Unable to parse"); gpush refuses them with an error naming the place.
func TestLoadErrorsAsAnsible(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"errors/prio-abc.ini", `prio-abc.ini:4: group g: ansible_group_priority: "abc" is not an integer`},
		{"errors/prio-list.ini", "prio-list.ini:4: group g: ansible_group_priority: [1] is not an integer"},
		{"errors/tag.yml", "tag.yml:3: tag !foo is not supported"},
		{"errors/value.yml", `value.yml:3: could not determine a constructor for the value "="`},
		{"errors/child.yml", "child.yml:3: group c: not a valid group definition"},
		{"errors/groupbool.yml", "groupbool.yml:1: group name yes must be a string (YAML 1.1 reads it as a boolean)"},
		{"errors/hostint.yml", "hostint.yml:3: host name 1 must be a string (YAML 1.1 reads it as a number)"},
		{"errors/hostslist.yml", "hostslist.yml:2: group g: hosts must be a mapping, got a list"},
		{"errors/hostval.yml", `hostval.yml:3: host h1: expected a mapping of variables, got "5"`},
		{"errors/baddate.yml", `baddate.yml:3: "2001-02-30": day is out of range for month`},
		{"errors/vl/inv.ini", "group_vars/g.yml:1: a vars file must be a mapping of variables, got a list"},
		{"errors/vf/inv.ini", "group_vars/g.yml: the file is vault-encrypted"},
	} {
		spec := filepath.Join("testdata", "load", c.spec)
		_, err := ResolveAll([]string{spec}, noSSH)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one with %q", c.spec, err, c.want)
		}
		if testing.Short() {
			continue
		}
		if _, err := exec.LookPath("ansible-inventory"); err != nil && os.Getenv("CI") != "true" {
			continue
		}
		if out := ansibleFails(t, spec); out == "" {
			t.Errorf("%s: ansible-inventory parsed it; gpush's refusal is no longer Ansible's", c.spec)
		}
	}
}

// ansibleFails returns ansible-inventory's complaint when it cannot parse
// spec, "" when it can.
func ansibleFails(t *testing.T, spec string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command("ansible-inventory", "--list", "-i", spec)
	cmd.Env = append(os.Environ(), "HOME="+home, "ANSIBLE_LOCAL_TEMP="+filepath.Join(home, "l"),
		"ANSIBLE_REMOTE_TEMP="+filepath.Join(home, "r"), "ANSIBLE_NOCOLOR=1", "ANSIBLE_CONFIG="+filepath.Join(home, "none.cfg"))
	out, err := cmd.CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("Unable to parse")) {
		return string(out) + fmt.Sprint(err)
	}
	return ""
}

func TestSingleWordInventory(t *testing.T) {
	opts, _ := sshOpts(t)
	var asked []string
	opts.LookupHost = func(_ context.Context, host string) ([]string, error) {
		asked = append(asked, host)
		if host == "resolves" {
			return []string{"192.0.2.7"}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	// Known to ssh_config (a HostName), an address, localhost, or resolving: one host.
	for _, spec := range []string{"gpu01", "admin@gpu01:2299", "10.0.0.9", "fe80::1%eth0", "localhost", "resolves", "ops@resolves"} {
		inv, err := Resolve(spec, opts)
		if err != nil || inv.Kind != KindSingleHost || len(inv.HostNames()) != 1 {
			t.Errorf("Resolve(%q) = %v, %v: want one host", spec, inv, err)
		}
	}
	if !reflect.DeepEqual(asked, []string{"resolves", "resolves"}) {
		t.Errorf("DNS was asked about %q, want only the names ssh_config does not know", asked)
	}
	// Anything else is far more likely a misspelt inventory name.
	_, err := Resolve("nosuch", opts)
	for _, want := range []string{"no inventory found", filepath.Join(opts.WorkDir, "inventory", "nosuch") + ".{yaml,yml,ini}",
		filepath.Join(opts.ConfigDir, "inventory", "nosuch") + ".{yaml,yml,ini}", "-i 'nosuch,'"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(nosuch) = %v, want it to say %q", err, want)
		}
	}
	// The real resolver: a name under .invalid never resolves (RFC 6761).
	opts.LookupHost = nil
	if _, err := Resolve("nosuch.invalid", opts); err == nil || !strings.Contains(err.Error(), "no inventory found") {
		t.Errorf("Resolve(nosuch.invalid) = %v, want no inventory found", err)
	}
}

func TestResolveAllMergeRules(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.ini"), filepath.Join(dir, "b.ini")
	writeFile(t, a, "[g]\nh1 ansible_host=10.0.0.1 k=a\n")
	writeFile(t, b, "[g]\nh1 ansible_host=10.0.0.1 k=b\n[g:vars]\nansible_group_priority=3\n")
	inv, err := ResolveAll([]string{a, b}, noSSH)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := inv.Host("h1")
	// Only a changed ansible_* var is warned about; k changes quietly.
	if h.Vars["k"] != "b" || h.Address != "10.0.0.1" || len(inv.Warnings) != 0 {
		t.Errorf("h1 %+v, warnings %q", h, inv.Warnings)
	}
	if inv.groups["g"].priority != 3 {
		t.Errorf("priority from the second source lost: %d", inv.groups["g"].priority)
	}
	// Inside one file a host var given two values stays an error.
	writeFile(t, a, "[g]\nh1 ansible_host=10.0.0.1\n[x]\nh1 ansible_host=10.0.0.2\n")
	if _, err := ResolveAll([]string{a}, noSSH); err == nil || !strings.Contains(err.Error(), "conflicts with") {
		t.Errorf("one file, two ansible_host values: %v", err)
	}
	if _, err := ResolveAll(nil, noSSH); err == nil {
		t.Error("ResolveAll(nil): no error")
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(empty, "notes.txt"), "h1\n")
	if _, err := ResolveAll([]string{empty}, noSSH); err == nil || !strings.Contains(err.Error(), "holds no inventory file") {
		t.Errorf("a folder of ignored files: %v", err)
	}
}
