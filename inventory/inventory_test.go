package inventory

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// noSSH keeps the operator's own ~/.ssh/config out of the tests.
var noSSH = Options{SSHConfigFiles: []string{}}

func mustResolve(t *testing.T, spec string, opts Options) *Inventory {
	t.Helper()
	inv, err := Resolve(spec, opts)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", spec, err)
	}
	return inv
}

func TestFleetYAMLAndINIResolveIdentically(t *testing.T) {
	y := mustResolve(t, "testdata/fleet.yaml", noSSH)
	i := mustResolve(t, "testdata/fleet.ini", noSSH)
	if len(y.Hosts()) != 14 {
		t.Fatalf("fleet.yaml: %d hosts, want 14: %v", len(y.Hosts()), y.HostNames())
	}
	if !reflect.DeepEqual(y.Hosts(), i.Hosts()) {
		for n, h := range y.Hosts() {
			if !reflect.DeepEqual(h, i.Hosts()[n]) {
				t.Errorf("host %d differs:\nyaml %+v\nini  %+v", n, h, i.Hosts()[n])
			}
		}
		t.Fatal("YAML and INI fleets differ")
	}
	yl, err := y.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	il, err := i.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(yl, il) {
		t.Errorf("List differs:\n%s\n---\n%s", yl, il)
	}
	var yg, ig bytes.Buffer
	if err := y.Graph(&yg); err != nil {
		t.Fatal(err)
	}
	if err := i.Graph(&ig); err != nil {
		t.Fatal(err)
	}
	if yg.String() != ig.String() {
		t.Errorf("Graph differs:\n%s\n---\n%s", yg.String(), ig.String())
	}
	if len(y.Warnings)+len(i.Warnings) != 0 {
		t.Errorf("unexpected warnings: %v %v", y.Warnings, i.Warnings)
	}
}

func TestFleetHosts(t *testing.T) {
	for _, file := range []string{"testdata/fleet.yaml", "testdata/fleet.ini"} {
		inv := mustResolve(t, file, noSSH)
		tests := []struct {
			name     string
			address  string
			port     int
			jump     string
			conn     string
			become   bool
			groups   []string
			tier     any
			services any
		}{
			// gpu01: h200 (depth 2) beats serving (depth 1), as in Ansible.
			{"gpu01", "10.0.1.1", 0, "", "ssh", true, []string{"all", "gpus", "h200", "serving"}, "h200", []any{"sglang-qwen.service"}},
			{"gpu03", "gpu03", 0, "", "ssh", true, []string{"all", "gpus", "h200"}, "special", []any{"sglang-qwen.service"}},
			{"node-b", "node-b", 2222, "ops@bastion:22", "ssh", true, []string{"all", "gpus", "h100"}, "gpu", nil},
			{"w15", "w15", 0, "", "ssh", false, []string{"all", "workers"}, "base", nil},
			{"bastion", "203.0.113.10", 0, "", "ssh", false, []string{"all", "ungrouped"}, "base", nil},
			{"localhost", "localhost", 0, "", "local", false, []string{"all", "control"}, "base", nil},
		}
		for _, tt := range tests {
			h, ok := inv.Host(tt.name)
			if !ok {
				t.Errorf("%s: no host %s", file, tt.name)
				continue
			}
			got := []any{h.Address, h.Port, h.ProxyJump, h.Connection, h.Become, h.Groups, h.Vars["tier"], h.Vars["services"], h.User}
			want := []any{tt.address, tt.port, tt.jump, tt.conn, tt.become, tt.groups, tt.tier, tt.services, "ops"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %s:\n got %#v\nwant %#v", file, tt.name, got, want)
			}
		}
		h, _ := inv.Host("gpu01")
		if h.Vars["threshold_mib"] != 600 || h.Vars["gpush_dev_dir"] != "/dev" {
			t.Errorf("%s: gpu01 vars %v", file, h.Vars)
		}
		if got := h.Vars["gpush_protected"]; !reflect.DeepEqual(got, []any{"nvidia-persistenced", "nv-hostengine"}) {
			t.Errorf("%s: gpush_protected = %#v", file, got)
		}
		n, _ := inv.Host("node-a")
		if n.Vars["idle_fraction"] != 0.5 {
			t.Errorf("%s: idle_fraction = %#v", file, n.Vars["idle_fraction"])
		}
		if want := []string{"bastion", "gpu01", "gpu02", "gpu03", "gpu04", "node-a", "node-b", "node-c", "w0", "w5", "w10", "w15", "w20", "localhost"}; !reflect.DeepEqual(inv.HostNames(), want) {
			t.Errorf("%s: order %v", file, inv.HostNames())
		}
	}
}

func TestHostsAreCopies(t *testing.T) {
	inv := mustResolve(t, "testdata/fleet.yaml", noSSH)
	h, _ := inv.Host("gpu01")
	h.Vars["services"].([]any)[0] = "changed"
	h.Groups[0] = "changed"
	again, _ := inv.Host("gpu01")
	if again.Vars["services"].([]any)[0] != "sglang-qwen.service" || again.Groups[0] != "all" {
		t.Fatalf("changing a returned Host changed the inventory: %+v", again)
	}
}

func TestGraph(t *testing.T) {
	inv := mustResolve(t, "testdata/fleet.ini", noSSH)
	var b bytes.Buffer
	if err := inv.Graph(&b); err != nil {
		t.Fatal(err)
	}
	want := `@all:
  |--@control:
  |  |--localhost
  |--@gpus:
  |  |--@h100:
  |  |  |--node-a
  |  |  |--node-b
  |  |  |--node-c
  |  |--@h200:
  |  |  |--gpu01
  |  |  |--gpu02
  |  |  |--gpu03
  |  |  |--gpu04
  |--@serving:
  |  |--gpu01
  |  |--gpu02
  |--@ungrouped:
  |  |--bastion
  |--@workers:
  |  |--w0
  |  |--w5
  |  |--w10
  |  |--w15
  |  |--w20
`
	if b.String() != want {
		t.Errorf("Graph:\n%s\nwant:\n%s", b.String(), want)
	}
	hosts, err := inv.Select("h100[0]:w5")
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := inv.GraphHosts(&b, hosts); err != nil {
		t.Fatal(err)
	}
	want = `@all:
  |--@gpus:
  |  |--@h100:
  |  |  |--node-a
  |--@workers:
  |  |--w5
`
	if b.String() != want {
		t.Errorf("GraphHosts:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestList(t *testing.T) {
	inv := mustResolve(t, "testdata/fleet.yaml", noSSH)
	hosts, err := inv.Select("serving")
	if err != nil {
		t.Fatal(err)
	}
	data, err := inv.List(hosts)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("List is not JSON: %v\n%s", err, data)
	}
	want := map[string]any{
		"all":     map[string]any{"children": []any{"gpus", "serving"}},
		"gpus":    map[string]any{"children": []any{"h200"}},
		"h200":    map[string]any{"hosts": []any{"gpu01", "gpu02"}},
		"serving": map[string]any{"hosts": []any{"gpu01", "gpu02"}},
	}
	meta := got["_meta"].(map[string]any)["hostvars"].(map[string]any)
	delete(got, "_meta")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List groups:\n got %v\nwant %v", got, want)
	}
	if len(meta) != 2 || meta["gpu01"].(map[string]any)["ansible_host"] != "10.0.1.1" {
		t.Errorf("hostvars: %v", meta)
	}
}

func TestExampleCT129(t *testing.T) {
	// --inventory ct129 from the repository root finds inventory/ct129.yaml.
	inv := mustResolve(t, "ct129", Options{WorkDir: "..", ConfigDir: t.TempDir(), SSHConfigFiles: []string{}})
	if !strings.HasSuffix(inv.Source, filepath.Join("inventory", "ct129.yaml")) {
		t.Errorf("source %s", inv.Source)
	}
	names, err := inv.SelectNames("gpus:!training")
	if err != nil {
		t.Fatal(err)
	}
	if got := FoldNodeSet(names); got != "ct129-gpu[01-06,09-12]" {
		t.Errorf("gpus:!training = %s", got)
	}
	h, _ := inv.Host("ct129-gpu03")
	if h.ProxyJump != "gpuops@ct129-login" || !h.Become || h.User != "gpuops" ||
		!reflect.DeepEqual(h.Vars["services"], []any{"sglang-qwen.service"}) {
		t.Errorf("ct129-gpu03: %+v", h)
	}
}

func TestINIValues(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{"5", 5},
		{"-3", -3},
		{"0x1f", 31},
		{"1_000", 1000},
		{"010", "010"}, // not a Python 3 literal
		{"00", 0},
		{"2.5", 2.5},
		{"1e3", 1000.0},
		{"True", true},
		{"False", false},
		{"None", nil},
		{"true", "true"}, // Ansible keeps it a string too
		{"yes", "yes"},
		{"'quoted'", "quoted"},
		{`"a\tb"`, "a\tb"},
		{`r'a\tb'`, `a\tb`},
		{`'a' "b"`, "ab"},
		{"['a', 'b']", []any{"a", "b"}},
		{"[1, [2, 3],]", []any{1, []any{2, 3}}},
		{"(1,)", []any{1}},
		{"(1)", 1},
		{"{'a': 1, 2: [True]}", map[string]any{"a": 1, "2": []any{true}}},
		{"{'x', 'y'}", []any{"x", "y"}},
		{"{}", map[string]any{}},
		{"'a' # comment", "a"},
		{"foo # not a literal", "foo # not a literal"},
		{"/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"},
		{"[a, b]", "[a, b]"},
		{"'unterminated", "'unterminated"},
		{"1.2.3.4", "1.2.3.4"},
		{"99999999999999999999", "99999999999999999999"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := parseINIValue(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseINIValue(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestShlexSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`gpu01 a=1 b="x y"`, []string{"gpu01", "a=1", "b=x y"}},
		{`h x='[1, 2]' # comment`, []string{"h", "x=[1, 2]"}},
		{`h x=a#b`, []string{"h", "x=a"}},
		{`h x=a\ b y="q\"uote"`, []string{"h", "x=a b", `y=q"uote`}},
		{`h x="it's"`, []string{"h", "x=it's"}},
	}
	for _, tt := range tests {
		got, err := shlexSplit(tt.in, true)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("shlexSplit(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`a "b`, `a 'b`, `a\`} {
		if _, err := shlexSplit(bad, true); err == nil {
			t.Errorf("shlexSplit(%q): no error", bad)
		}
	}
}

func TestVarsPrecedence(t *testing.T) {
	// all < parent < child < host; same depth: ansible_group_priority, then name.
	src := `
[all:vars]
v=all
w=all
[parent:children]
child
[parent:vars]
v=parent
w=parent
[child]
h1
h2 v=host
[child:vars]
v=child
[aaa]
h1
[aaa:vars]
p=aaa
q=aaa
[zzz]
h1
[zzz:vars]
p=zzz
q=zzz
ansible_group_priority=0
`
	inv, err := ParseINI("prec.ini", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := inv.Host("h1")
	h2, _ := inv.Host("h2")
	// p: same depth, same priority for aaa (1) vs zzz (0): aaa has the higher priority and wins.
	got := []any{h1.Vars["v"], h1.Vars["w"], h2.Vars["v"], h1.Vars["p"]}
	want := []any{"child", "parent", "host", "aaa"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestErrorsNameFileAndLine(t *testing.T) {
	tests := []struct {
		file, src, want string
	}{
		{"bad.yaml", "all:\n  hosts:\n    a: [\n", "bad.yaml: yaml: line"},
		{"bad.yaml", "all:\n  hosts:\n    - a\n", "bad.yaml:3: group all: hosts must be a mapping"},
		{"bad.yaml", "- a\n", "bad.yaml:1: the top level must be a mapping"},
		{"bad.yaml", "all:\n  children:\n    g:\n      hosts:\n        gpu[1:x]:\n", `bad.yaml:5: host range "gpu[1:x]"`},
		{"bad.yaml", "all:\n  children:\n    a:\n      hosts:\n        h1: {ansible_host: 10.0.0.1}\n    b:\n      hosts:\n        h1: {ansible_host: 10.0.0.2}\n",
			`bad.yaml:8: host h1: ansible_host = "10.0.0.2" conflicts with "10.0.0.1" set at bad.yaml:5`},
		{"bad.yaml", "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n",
			"bad.yaml:7: child group cycle: a -> b -> a"},
		{"bad.yaml", "all:\n  hosts:\n    h:\n      ansible_port: http\n", `bad.yaml:4: host h: ansible_port: "http" is not a port number`},
		{"bad.yaml", "all:\n  hosts:\n    h:\n      ansible_connection: winrm\n", `bad.yaml:4: host h: ansible_connection: connection plugin "winrm" is not supported`},
		{"bad.yaml", "all:\n  hosts:\n    h:\n      ansible_become: maybe\n", `bad.yaml:4: host h: ansible_become: "maybe" is not a boolean`},
		{"bad.yaml", "all:\n  hosts:\n    h:\n      ansible_ssh_common_args: -o ProxyCommand='nc %h %p' -J b\n", "bad.yaml:4: host h: ansible_ssh_common_args: cannot specify -J with ProxyCommand"},
		{"bad.yaml", "all:\n  hosts:\n    h:\n      ansible_ssh_common_args: -J a\n      ansible_ssh_extra_args: -J b\n", "host h: ansible_ssh_extra_args: only a single -J option"},
		{"bad.ini", "[g]\nh1\n[g:nonsense]\n", "bad.ini:3: section [g:nonsense] has an invalid type"},
		{"bad.ini", "[g]\nh1 ansible_host\n", `bad.ini:2: host h1: expected key=value, got "ansible_host"`},
		{"bad.ini", "[g]\nh1 x=\"open\n", "bad.ini:2: no closing quotation"},
		{"bad.ini", "[g]\nnode[01:2]\n", `bad.ini:2: host range "node[01:2]"`},
		{"bad.ini", "[g]\nh[3:1]\n", "begin is after end"},
		{"bad.ini", "[g]\nh[0:4:0]\n", "step"},
		{"bad.ini", "[g]\nh:99999\n", `bad.ini:2: host "h:99999": bad port`},
		{"bad.ini", "[g:vars]\nx=1\n", `bad.ini:1: section [g:vars] is for group "g", which is never declared`},
		{"bad.ini", "[g:children]\nmissing\n", `bad.ini:2: section [g:children] names group "missing", which is never declared`},
		{"bad.ini", "[a:children]\nb\n[b:children]\nc\n[c:children]\na\n", "child group cycle: a -> b -> c -> a"},
		{"bad.ini", "[a:children]\na\n", "bad.ini:2: child group cycle: a -> a"},
		{"bad.ini", "[a]\nh1 ansible_host=x\n[b]\nh1 ansible_host=y\n", `bad.ini:4: host h1: ansible_host = "y" conflicts with "x" set at bad.ini:2`},
		{"bad.ini", "[a b]\nh\n", "bad.ini:1: invalid section header"},
		{"bad.ini", "[g]\nh\n[g:vars]\nnovalue\n", "bad.ini:4: [g:vars]: expected key=value"},
	}
	for _, tt := range tests {
		var inv *Inventory
		var err error
		if strings.HasSuffix(tt.file, ".yaml") {
			inv, err = ParseYAML(tt.file, []byte(tt.src))
		} else {
			inv, err = ParseINI(tt.file, []byte(tt.src))
		}
		if err == nil {
			// Bad connection settings are the host's own error, given
			// when the host is selected.
			_, err = inv.Select("all")
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %q:\n got error %v\nwant one containing %q", tt.file, tt.src, err, tt.want)
		}
	}
}

func TestSameHostTwiceMergesWhenConsistent(t *testing.T) {
	// Listing a host in several groups, with the same host vars or none, is
	// fine; group vars merge as in Ansible.
	inv, err := ParseINI("ok.ini", []byte("[a]\nh1 ansible_host=x\n[b]\nh1\nh1 ansible_host=x\n[b:vars]\nfrom_b=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := inv.Host("h1")
	if h.Address != "x" || h.Vars["from_b"] != 1 || !reflect.DeepEqual(h.Groups, []string{"a", "all", "b"}) {
		t.Errorf("h1: %+v", h)
	}
}

func TestYAMLWarningsAndEdgeCases(t *testing.T) {
	src := `
common: &common
  ansible_user: deploy
all:
  hosts:
    "[2001:db8::1]:2222":
    h2: *common
  vars: {x: 1}
  host: typo
`
	inv, err := ParseYAML("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	// "common" is a top-level key, so a group for Ansible too, with an unexpected key.
	if len(inv.Warnings) != 2 || !strings.Contains(inv.Warnings[0], `w.yaml:3: group common: skipping unexpected key "ansible_user"`) ||
		!strings.Contains(inv.Warnings[1], `w.yaml:9: group all: skipping unexpected key "host"`) {
		t.Errorf("warnings: %q", inv.Warnings)
	}
	h, ok := inv.Host("2001:db8::1")
	if !ok || h.Port != 2222 {
		t.Errorf("IPv6 host: %+v %v (hosts %v)", h, ok, inv.HostNames())
	}
	h2, _ := inv.Host("h2")
	if h2.User != "deploy" || h2.Vars["x"] != 1 {
		t.Errorf("h2: %+v", h2)
	}
	// The "common" top-level key is a group too, as in Ansible.
	if _, ok := inv.GroupHosts("common"); !ok {
		t.Errorf("groups: %v", inv.GroupNames())
	}
	empty, err := ParseYAML("empty.yaml", nil)
	if err != nil || len(empty.Hosts()) != 0 {
		t.Errorf("empty file: %v %v", err, empty)
	}
}

func TestProxyFromArgs(t *testing.T) {
	tests := []struct{ in, jump, cmd string }{
		{"-J bastion", "bastion", ""},
		{"-Jops@bastion:2222", "ops@bastion:2222", ""},
		{"-o ProxyJump=a,b", "a,b", ""},
		{"-o 'ProxyJump jump1' -o StrictHostKeyChecking=no", "jump1", ""},
		{"-oProxyJump=j", "j", ""},
		{"-o ProxyJump=none", "none", ""},
		{"-o ServerAliveInterval=5", "", ""},
		{"", "", ""},
		// Quotes as shlex reads them; the value is the rest of the line.
		{`-o ProxyCommand='ssh -W %h:%p -q ops@bastion'`, "", "ssh -W %h:%p -q ops@bastion"},
		{`-o "ProxyCommand nc -X connect -x proxy:3128 %h %p"`, "", "nc -X connect -x proxy:3128 %h %p"},
		{`-o 'ProxyCommand = ssh -o Foo=bar -W %h:%p b'`, "", "ssh -o Foo=bar -W %h:%p b"},
		{`-oProxyCommand="aws ssm start-session --target %h"`, "", "aws ssm start-session --target %h"},
		{`-o proxycommand=none -o ProxyJump=j`, "", "none"},
		// Bundled flags, as ssh's getopt reads them.
		{`-qoProxyCommand=nc\ %h\ %p`, "", "nc %h %p"},
		{`-CJ j1 -p 22`, "j1", ""},
		// The first of ProxyJump and ProxyCommand wins.
		{`-o ProxyJump=j -o ProxyCommand=nc`, "j", ""},
		{`-J j -o ProxyCommand=nc`, "j", ""},
		{`-o ProxyCommand=nc -o ProxyCommand=other -o ProxyJump=j`, "", "nc"},
		// -i takes a value: "-oProxyCommand" here is a key file name.
		{`-i -oProxyCommand=x`, "", ""},
	}
	for _, tt := range tests {
		jump, cmd, err := proxyFromArgs(tt.in)
		if err != nil || jump != tt.jump || cmd != tt.cmd {
			t.Errorf("proxyFromArgs(%q) = %q, %q, %v; want %q, %q", tt.in, jump, cmd, err, tt.jump, tt.cmd)
		}
	}
	// Common args come first on ssh's command line.
	if jump, cmd, err := proxyFromArgs("-o ProxyCommand=first", "-o ProxyCommand=second"); err != nil || jump != "" || cmd != "first" {
		t.Errorf("common then extra: %q %q %v", jump, cmd, err)
	}
	for _, in := range []string{"-J", "-J ''", "-o ProxyCommand=", "-o", "-J a -J b", "-o ProxyJump=a -J b", "-o ProxyCommand=none -J b", "-o 'ProxyCommand unclosed"} {
		if _, _, err := proxyFromArgs(in); err == nil {
			t.Errorf("proxyFromArgs(%q): no error", in)
		}
	}
}

func TestProxyCommandFromInventory(t *testing.T) {
	src := `all:
  vars:
    ansible_ssh_common_args: "-o StrictHostKeyChecking=no"
  hosts:
    a:
      ansible_ssh_common_args: -o ProxyCommand='ssh -W %h:%p -q ops@bastion'
    b:
      ansible_ssh_extra_args: -oProxyCommand=none
    c:
      ansible_ssh_common_args: -J j1
      ansible_ssh_extra_args: -o ProxyCommand='nc %h %p'
    d:
      ansible_ssh_args: -C -o ControlMaster=auto -o "ProxyCommand=nc %h %p"
      ansible_ssh_common_args: -o ProxyJump=late
`
	inv, err := ParseYAML("proxy.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{"a": {"", "ssh -W %h:%p -q ops@bastion"}, "b": {"", "none"}, "c": {"j1", ""}, "d": {"", "nc %h %p"}}
	for name, w := range want {
		h, ok := inv.Host(name)
		if !ok {
			t.Fatalf("no host %s", name)
		}
		if h.ProxyJump != w[0] || h.ProxyCommand != w[1] {
			t.Errorf("%s: ProxyJump %q ProxyCommand %q; want %q %q", name, h.ProxyJump, h.ProxyCommand, w[0], w[1])
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDiamondGroups(t *testing.T) {
	// 30 levels of diamonds: g0 -> {a0, b0} -> g1 -> ... Every walk must be
	// linear in the number of groups, and depth is the longest path.
	var b strings.Builder
	const levels = 30
	for i := 0; i < levels; i++ {
		b.WriteString("[g" + strconv.Itoa(i) + ":children]\na" + strconv.Itoa(i) + "\nb" + strconv.Itoa(i) + "\n")
		b.WriteString("[a" + strconv.Itoa(i) + ":children]\ng" + strconv.Itoa(i+1) + "\n")
		b.WriteString("[b" + strconv.Itoa(i) + ":children]\ng" + strconv.Itoa(i+1) + "\n")
	}
	b.WriteString("[g" + strconv.Itoa(levels) + "]\nleaf\n[g" + strconv.Itoa(levels) + ":vars]\nv=deepest\n[g0:vars]\nv=top\n")
	inv, err := ParseINI("diamond.ini", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := inv.Host("leaf")
	if h.Vars["v"] != "deepest" || len(h.Groups) != 3*levels+2 {
		t.Errorf("leaf: v=%v, %d groups", h.Vars["v"], len(h.Groups))
	}
	if names, err := inv.SelectNames("g0:&b17"); err != nil || len(names) != 1 {
		t.Errorf("g0:&b17 = %v, %v", names, err)
	}
}
