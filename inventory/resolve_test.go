package inventory

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testSSHConfig = `
Host gpu01
    HostName 10.1.0.1
    Port 2201
    User sshuser
    IdentityFile ~/.ssh/gpu_ed25519
    IdentitiesOnly yes

Host *.lab
    HostName %h.example.net
    ProxyJump jumpy

Host node-*
    IdentityFile %d/.ssh/id_%r
    ProxyJump none

Host *
    IdentityFile ~/.ssh/id_default
    User fallback
`

func sshOpts(t *testing.T) (Options, string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	cfg := filepath.Join(home, ".ssh", "config")
	writeFile(t, cfg, testSSHConfig)
	return Options{
		WorkDir:        filepath.Join(dir, "work"),
		ConfigDir:      filepath.Join(dir, "config"),
		SSHConfigFiles: []string{cfg, filepath.Join(dir, "missing_system_config")},
		HomeDir:        home,
	}, home
}

func TestResolveSingleHostThroughSSHConfig(t *testing.T) {
	opts, home := sshOpts(t)
	inv := mustResolve(t, "gpu01", opts)
	if inv.Kind != KindSingleHost {
		t.Errorf("kind %s", inv.Kind)
	}
	hosts := inv.Hosts()
	want := Host{
		Name: "gpu01", Address: "10.1.0.1", Port: 2201, User: "sshuser",
		IdentityFiles:  []string{filepath.Join(home, ".ssh/gpu_ed25519"), filepath.Join(home, ".ssh/id_default")},
		IdentitiesOnly: true,
		Connection:     "ssh", Groups: []string{"all", "ungrouped"}, Vars: map[string]any{},
	}
	if len(hosts) != 1 || !reflect.DeepEqual(hosts[0], want) {
		t.Errorf("got  %+v\nwant %+v", hosts, want)
	}
	// user@host:port as for ssh: the given user and port win over ssh_config.
	at := mustResolve(t, "admin@gpu01:2299", opts).Hosts()[0]
	if at.Name != "gpu01" || at.Address != "10.1.0.1" || at.User != "admin" || at.Port != 2299 {
		t.Errorf("admin@gpu01:2299: %+v", at)
	}
	lab := mustResolve(t, "a.lab", opts).Hosts()[0]
	if lab.Address != "a.lab.example.net" || lab.ProxyJump != "jumpy" || lab.User != "fallback" || lab.IdentitiesOnly {
		t.Errorf("a.lab: %+v", lab)
	}
}

func TestResolveLocalhost(t *testing.T) {
	opts, _ := sshOpts(t)
	h := mustResolve(t, "localhost", opts).Hosts()[0]
	if !h.IsLocal() || h.Address != "localhost" || h.User != "" || len(h.IdentityFiles) != 0 {
		t.Errorf("localhost: %+v", h)
	}
}

func TestFileHostsCompletedFromSSHConfig(t *testing.T) {
	opts, home := sshOpts(t)
	inv := mustResolve(t, "testdata/fleet.yaml", opts)
	// gpu01 has ansible_host 10.0.1.1: ssh would be run with that name, which
	// no Host block but * matches; the inventory's user wins over ssh_config's.
	g1, _ := inv.Host("gpu01")
	if g1.Address != "10.0.1.1" || g1.Port != 0 || g1.User != "ops" ||
		!reflect.DeepEqual(g1.IdentityFiles, []string{filepath.Join(home, ".ssh/id_default")}) {
		t.Errorf("gpu01: %+v", g1)
	}
	// node-b: the inventory's port and ProxyJump win; IdentityFile tokens expand.
	nb, _ := inv.Host("node-b")
	wantIDs := []string{filepath.Join(home, ".ssh/id_ops"), filepath.Join(home, ".ssh/id_default")}
	if nb.Port != 2222 || nb.ProxyJump != "ops@bastion:22" || !reflect.DeepEqual(nb.IdentityFiles, wantIDs) {
		t.Errorf("node-b: %+v", nb)
	}
	lh, _ := inv.Host("localhost")
	if !lh.IsLocal() || len(lh.IdentityFiles) != 0 {
		t.Errorf("localhost: %+v", lh)
	}
}

func TestInventoryKeyFileAndJumpFromArgs(t *testing.T) {
	opts, home := sshOpts(t)
	src := "[g]\ngpu01 ansible_ssh_private_key_file=~/keys/k ansible_ssh_common_args='-J j1,j2'\n"
	p := filepath.Join(opts.WorkDir, "x.ini")
	writeFile(t, p, src)
	h := mustResolve(t, p, opts).Hosts()[0]
	want := []string{filepath.Join(home, "keys/k"), filepath.Join(home, ".ssh/gpu_ed25519"), filepath.Join(home, ".ssh/id_default")}
	if h.Address != "10.1.0.1" || h.Port != 2201 || h.User != "sshuser" || h.ProxyJump != "j1,j2" || !reflect.DeepEqual(h.IdentityFiles, want) {
		t.Errorf("gpu01: %+v", h)
	}
}

func TestResolveOrder(t *testing.T) {
	opts, _ := sshOpts(t)
	writeFile(t, filepath.Join(opts.ConfigDir, "inventory", "fleet.ini"), "[g]\nfrom-config\n")
	writeFile(t, filepath.Join(opts.ConfigDir, "inventory", "only.yml"), "all:\n  hosts:\n    only-config:\n")
	writeFile(t, filepath.Join(opts.WorkDir, "inventory", "fleet.yaml"), "all:\n  hosts:\n    from-workdir:\n")
	cases := []struct {
		spec  string
		kind  Kind
		hosts []string
	}{
		{"fleet", KindFile, []string{"from-workdir"}},
		{"only", KindFile, []string{"only-config"}},
		{filepath.Join(opts.ConfigDir, "inventory", "fleet.ini"), KindFile, []string{"from-config"}},
		{"a,b:2200,c", KindHostList, []string{"a", "b", "c"}},
		{"solo,", KindHostList, []string{"solo"}},
		{"gpu[01-03,07],", KindHostList, []string{"gpu01", "gpu02", "gpu03", "gpu07"}},
		{"w[1:3],login", KindHostList, []string{"w1", "w2", "w3", "login"}},
		{"node[1-9]!node6,", KindHostList, []string{"node1", "node2", "node3", "node4", "node5", "node7", "node8", "node9"}},
		{"node[1-4]&node[3-9],", KindHostList, []string{"node3", "node4"}},
		{"node[1-3]^node[2-4],login", KindHostList, []string{"node1", "node4", "login"}},
		{"w[1:4]!w2,", KindHostList, []string{"w1", "w3", "w4"}},
		{"10.0.0.9", KindSingleHost, []string{"10.0.0.9"}},
	}
	for _, c := range cases {
		inv, err := Resolve(c.spec, opts)
		if err != nil {
			t.Errorf("Resolve(%q): %v", c.spec, err)
			continue
		}
		if inv.Kind != c.kind || !reflect.DeepEqual(inv.HostNames(), c.hosts) {
			t.Errorf("Resolve(%q) = %s %v, want %s %v", c.spec, inv.Kind, inv.HostNames(), c.kind, c.hosts)
		}
	}
	b, _ := mustResolve(t, "a,b:2200,c", opts).Host("b")
	if b.Port != 2200 {
		t.Errorf("b: %+v", b)
	}
	// Ports ride on the names an operand adds; '!' removes at any port.
	ops := mustResolve(t, "n[1-3]:2222!n2:9,n4", opts)
	if got := ops.HostNames(); !reflect.DeepEqual(got, []string{"n1", "n3", "n4"}) {
		t.Errorf("n[1-3]:2222!n2:9,n4 = %v", got)
	}
	for name, port := range map[string]int{"n1": 2222, "n3": 2222, "n4": 0} {
		if h, _ := ops.Host(name); h.Port != port {
			t.Errorf("%s: port %d, want %d", name, h.Port, port)
		}
	}
	lh, _ := mustResolve(t, "localhost,gpu01", opts).Host("localhost")
	if !lh.IsLocal() {
		t.Errorf("localhost in a list: %+v", lh)
	}
	for _, bad := range []string{"", "no/such/file.yaml", "bad name", ",", "h[1:x],", "gpu[1:2]", "n[1-3]!,", "n1!n1,", "n1,^n2,", "@host", "h:0", "u@"} {
		if _, err := Resolve(bad, opts); err == nil {
			t.Errorf("Resolve(%q): no error", bad)
		}
	}
	// A missing file is called that, not "not a host name".
	for _, spec := range []string{"no/such/file.yaml", "fleet.yml"} {
		_, err := Resolve(spec, opts)
		if err == nil || !strings.HasSuffix(err.Error(), spec+": no such file") {
			t.Errorf("Resolve(%q) = %v, want it to say no such file", spec, err)
		}
	}
}

func TestResolveBadSSHConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	writeFile(t, cfg, "Host x\n  Port notaport\n")
	err := resolveSelect("x", Options{SSHConfigFiles: []string{cfg}, HomeDir: dir})
	if err == nil || !strings.Contains(err.Error(), cfg) {
		t.Errorf("want an error naming %s, got %v", cfg, err)
	}
	// A block gpush cannot decide (Match exec) fails only the hosts whose
	// settings it would decide, even in the system-wide file.
	sys := filepath.Join(dir, "system_config")
	writeFile(t, sys, "Match host other exec \"true\"\n  User x\nMatch exec \"true\"\n  ForwardAgent yes\n")
	if err := resolveSelect("x,", Options{SSHConfigFiles: []string{sys}, HomeDir: dir}); err != nil {
		t.Errorf("x is not decided by the Match exec block: %v", err)
	}
	if err := resolveSelect("other,", Options{SSHConfigFiles: []string{sys}, HomeDir: dir}); err == nil || !strings.Contains(err.Error(), sys) || !strings.Contains(err.Error(), "Match exec") {
		t.Errorf("want an error naming %s and Match exec, got %v", sys, err)
	}
	// The system-wide file, unreadable, is skipped with a warning.
	sysDir := filepath.Join(dir, "system-dir")
	if err := os.Mkdir(sysDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sc, warnings, err := loadSSHConfig([]string{sysDir}, map[string]bool{sysDir: true}, dir)
	if err != nil || len(sc.files) != 0 || len(warnings) != 1 || !strings.Contains(warnings[0], sysDir) {
		t.Errorf("lenient: %v %v %v", sc, warnings, err)
	}
	unreadable := filepath.Join(dir, "dir-not-file")
	if err := os.Mkdir(unreadable, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve("x", Options{SSHConfigFiles: []string{unreadable}, HomeDir: dir}); err == nil {
		t.Error("a directory as ssh config: no error")
	}
}

func TestSelect(t *testing.T) {
	inv := mustResolve(t, "testdata/fleet.yaml", noSSH)
	cases := []struct {
		pattern string
		want    []string
	}{
		// Ansible's order (ansible -i testdata/fleet.yaml all --list-hosts,
		// ansible-core 2.14): a group's own hosts before its children's.
		{"all", []string{"bastion", "gpu01", "gpu02", "w0", "w5", "w10", "w15", "w20", "localhost", "gpu03", "gpu04", "node-a", "node-b", "node-c"}},
		{"*", []string{"bastion", "gpu01", "gpu02", "w0", "w5", "w10", "w15", "w20", "localhost", "gpu03", "gpu04", "node-a", "node-b", "node-c"}},
		{"h200", []string{"gpu01", "gpu02", "gpu03", "gpu04"}},
		{"gpus", []string{"gpu01", "gpu02", "gpu03", "gpu04", "node-a", "node-b", "node-c"}},
		{"gpu0*", []string{"gpu01", "gpu02", "gpu03", "gpu04"}},
		{"h1*", []string{"node-a", "node-b", "node-c"}},
		{"h200:h100", []string{"gpu01", "gpu02", "gpu03", "gpu04", "node-a", "node-b", "node-c"}},
		{"gpus:!h100", []string{"gpu01", "gpu02", "gpu03", "gpu04"}},
		{"gpus:&serving", []string{"gpu01", "gpu02"}},
		{"h200,!serving", []string{"gpu03", "gpu04"}},
		{"!serving", []string{"bastion", "w0", "w5", "w10", "w15", "w20", "localhost", "gpu03", "gpu04", "node-a", "node-b", "node-c"}},
		{"&serving", []string{"gpu01", "gpu02"}},
		{"w10,bastion", []string{"w10", "bastion"}},
		{"gpu[01-03,07]:!gpu07", nil}, // gpu07 unknown: error below
		{"gpu[01-02,04]", []string{"gpu01", "gpu02", "gpu04"}},
		{"gpu[02:03]", []string{"gpu02", "gpu03"}},
		{"~gpu0[13]", []string{"gpu01", "gpu03"}},
		{"~h[12]00", []string{"gpu01", "gpu02", "gpu03", "gpu04", "node-a", "node-b", "node-c"}},
		{"h200[0]", []string{"gpu01"}},
		{"h200[-1]", []string{"gpu04"}},
		{"h200[1:2]", []string{"gpu02", "gpu03"}},
		{"h200[2:]", []string{"gpu03", "gpu04"}},
		{"workers:!w[5-15/5]", []string{"w0", "w20"}},
		{" h100 , ", []string{"node-a", "node-b", "node-c"}},
		// ClusterShell's operators, left to right, operands being hosts or groups.
		{"gpu[01-04]!gpu03", []string{"gpu01", "gpu02", "gpu04"}},
		{"gpu[01-04]&serving", []string{"gpu01", "gpu02"}},
		{"gpu[01-03]^gpu[02-04]", []string{"gpu01", "gpu04"}},
		{"gpu[01-02],gpu[02-04]!gpu02", []string{"gpu01", "gpu03", "gpu04"}},
		{"h200!gpu01,bastion", []string{"gpu02", "gpu03", "gpu04", "bastion"}},
		{"gpus!h100:!gpu04", []string{"gpu01", "gpu02", "gpu03"}},
		{"h200!serving,!gpu04", []string{"gpu03"}},
		{"workers:gpu0[1-4]&h200!gpu02", []string{"w0", "w5", "w10", "w15", "w20", "gpu01", "gpu03", "gpu04"}},
		{"!gpu[01-04]!gpu02:&gpus", []string{"gpu02", "node-a", "node-b", "node-c"}},
		{"gpu[01-04]!gpu[02:03]", []string{"gpu01", "gpu04"}},
		{"gpu[01-03,07]!gpu07", nil}, // an unknown operand is an error whatever its operator
	}
	for _, c := range cases {
		got, err := inv.SelectNames(c.pattern)
		if c.want == nil {
			if err == nil || !strings.Contains(err.Error(), "gpu07") {
				t.Errorf("SelectNames(%q) = %v, %v; want an error naming gpu07", c.pattern, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("SelectNames(%q) = %v, %v; want %v", c.pattern, got, err, c.want)
		}
	}
	for pattern, wantErr := range map[string]string{
		"nosuch":             "no such host or group: nosuch",
		"h200:!nosuch":       "no such host or group: nosuch",
		"zz*":                `"zz*" matches no host or group`,
		"gpu[01-09]":         "no such host or group: gpu[05-09]",
		"gpu[01-04]!":        "no operand after '!'",
		"h200:^gpu01":        "no operand before '^'",
		"gpu01&&gpu02":       "no operand after '&'",
		"~(":                 "regex",
		"h200[9]":            "subscript out of range",
		"":                   "empty",
		"gpu[1-":             "'[' without ']'",
		"gpu[01-03,07]:gpus": "gpu07",
	} {
		if _, err := inv.SelectNames(pattern); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("SelectNames(%q): error %v, want one containing %q", pattern, err, wantErr)
		}
	}
}

func TestSelectImplicitLocalhost(t *testing.T) {
	inv, err := ParseINI("l.ini", []byte("[g]\nh1\n[all:vars]\nx=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := inv.Select("localhost:h1")
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 2 || hosts[0].Name != "h1" || !hosts[1].IsLocal() || hosts[1].Vars["x"] != 1 {
		t.Errorf("hosts: %+v", hosts)
	}
	all, _ := inv.SelectNames("all")
	if !reflect.DeepEqual(all, []string{"h1"}) {
		t.Errorf("all includes the implicit localhost: %v", all)
	}
}

func TestGroupAndHostVarsDirs(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "hosts.ini"), "[h200]\ngpu[01:02] tier=inline\n[h200:vars]\nsmi=/inline\nkeep=1\n")
	writeFile(t, filepath.Join(dir, "group_vars", "all.yml"), "user_note: from all\n")
	writeFile(t, filepath.Join(dir, "group_vars", "h200", "10-smi.yaml"), "smi: /from/dir\n")
	writeFile(t, filepath.Join(dir, "group_vars", "h200", "20-more.yml"), "services: [a.service]\nsmi: /from/dir/later\n")
	writeFile(t, filepath.Join(dir, "group_vars", "nosuchgroup.yml"), "ignored: true\n")
	writeFile(t, filepath.Join(dir, "host_vars", "gpu02.yaml"), "tier: from-host-vars\nansible_host: 10.9.9.2\n")
	inv := mustResolve(t, filepath.Join(dir, "hosts.ini"), noSSH)
	g1, _ := inv.Host("gpu01")
	g2, _ := inv.Host("gpu02")
	got := []any{g1.Vars["smi"], g1.Vars["keep"], g1.Vars["services"], g1.Vars["user_note"], g1.Vars["tier"], g2.Vars["tier"], g2.Address}
	want := []any{"/from/dir/later", 1, []any{"a.service"}, "from all", "inline", "from-host-vars", "10.9.9.2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	writeFile(t, filepath.Join(dir, "host_vars", "gpu01.yml"), "a: 1\nb: [\n")
	if _, err := Resolve(filepath.Join(dir, "hosts.ini"), noSSH); err == nil || !strings.Contains(err.Error(), "gpu01.yml") {
		t.Errorf("bad host_vars file: %v", err)
	}
	writeFile(t, filepath.Join(dir, "host_vars", "gpu01.yml"), "- not a mapping\n")
	if _, err := Resolve(filepath.Join(dir, "hosts.ini"), noSSH); err == nil || !strings.Contains(err.Error(), "gpu01.yml:1") {
		t.Errorf("list as host_vars file: %v", err)
	}
}

// resolveSelect is Resolve then Select("all"): an ssh_config completion
// failure is the host's error, given when it is selected.
func resolveSelect(spec string, opts Options) error {
	inv, err := Resolve(spec, opts)
	if err != nil {
		return err
	}
	_, err = inv.Select("all")
	return err
}
