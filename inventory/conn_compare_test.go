package inventory

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// needAnsible finds one of Ansible's tools: missing, it fails in CI (make
// deps installs Debian's ansible-core) and skips elsewhere.
func needAnsible(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not on PATH (Debian's ansible-core; make deps installs it)", tool)
		}
		t.Skipf("%s not on PATH (Debian's ansible-core; make deps installs it)", tool)
	}
	return p
}

// ansibleListHosts runs `ansible -i inv PATTERN --list-hosts` in a private
// HOME and returns the names it lists.
func ansibleListHosts(t *testing.T, bin, inv, pattern string) []string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(bin, "-i", inv, pattern, "--list-hosts")
	cmd.Env = append(os.Environ(), "HOME="+home, "ANSIBLE_LOCAL_TEMP="+filepath.Join(home, "tmp"),
		"ANSIBLE_NOCOLOR=1", "ANSIBLE_CONFIG="+filepath.Join(home, "none.cfg"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ansible %q: %v\n%s", pattern, err, out)
	}
	var names []string
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "hosts ("):
			in = true
		case in && l != "":
			names = append(names, l)
		}
	}
	if !in {
		t.Fatalf("ansible %q: no host list in %q", pattern, out)
	}
	return names
}

// TestSelectAgreesWithAnsible compares subscripts, host-or-group names and
// prefixes with what ansible --list-hosts selects. Where Ansible selects
// nothing gpush fails, on purpose.
func TestSelectAgreesWithAnsible(t *testing.T) {
	bin := needAnsible(t, "ansible")
	p := filepath.Join(t.TempDir(), "order.ini")
	// Children listed before the group's own hosts, hosts out of name order,
	// one chain three levels deep, a host named like a group.
	writeFile(t, p, `z9
[gpus:children]
a100
h100
[gpus]
g2
g1
[a100]
a2
a1
[h100:children]
h100new
[h100]
h1
[h100new]
n2
n1
[web]
w1
[other]
web
x.y
`)
	inv, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{
		"gpus", "gpus[0]", "gpus[-1]", "gpus[-3]", "gpus[1:3]", "gpus[2:]", "gpus[5:]", "gpus[2:0]", "gpus[0:0]",
		"g*[1]", "g*[6]", "all[0]", "all[-1]", "h100[1:]", "a100[1]", "web", "web:w1", "all:!web", "all:&web",
		"other:!web", "*.y", "x.*[0]", "gpus:!gpus[0]", "gpus[1:2]:&a100",
		"gpus[9]", "gpus[3:1]", "gpus[20:30]", "gpus[:2]", "gpus[-1:]", "zz*[0]",
	} {
		want := ansibleListHosts(t, bin, p, pattern)
		got, err := inv.SelectNames(pattern)
		if len(want) == 0 {
			if err == nil {
				t.Errorf("%q: Ansible selects nothing, gpush %v without an error", pattern, got)
			}
			continue
		}
		sort.Strings(want)
		sort.Strings(got)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: gpush %v, %v; ansible %v", pattern, got, err, want)
		}
	}
}

// TestZonedIPv6ListAgreesWithAnsible: a host list of addresses with zones
// gives the hosts and ports ansible-inventory gives, and a pattern naming
// one selects it.
func TestZonedIPv6ListAgreesWithAnsible(t *testing.T) {
	bin := needAnsible(t, "ansible-inventory")
	spec := "fe80::1%eth0,[fe80::2%eth1]:2222,10.0.0.1"
	home := t.TempDir()
	cmd := exec.Command(bin, "-i", spec, "--list")
	cmd.Env = append(os.Environ(), "HOME="+home, "ANSIBLE_LOCAL_TEMP="+filepath.Join(home, "tmp"), "ANSIBLE_CONFIG="+filepath.Join(home, "none.cfg"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ansible-inventory: %v", err)
	}
	var ref struct {
		Meta struct {
			Hostvars map[string]map[string]any `json:"hostvars"`
		} `json:"_meta"`
		Ungrouped struct {
			Hosts []string `json:"hosts"`
		} `json:"ungrouped"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	inv, err := Resolve(spec, Options{SSHConfigFiles: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.HostNames(); !reflect.DeepEqual(got, ref.Ungrouped.Hosts) {
		t.Errorf("hosts %v, ansible-inventory %v", got, ref.Ungrouped.Hosts)
	}
	for _, name := range ref.Ungrouped.Hosts {
		h, _ := inv.Host(name)
		want := 0
		if p, ok := ref.Meta.Hostvars[name]["ansible_port"].(float64); ok {
			want = int(p)
		}
		if h.Port != want || h.Address != name {
			t.Errorf("%s: address %q port %d, want port %d", name, h.Address, h.Port, want)
		}
	}
	// With ':' an IPv6 address is ambiguous (Ansible too): commas separate.
	for pattern, want := range map[string]string{"fe80::2%eth1": "fe80::2%eth1", "fe80::2%eth1,10.0.0.1": "fe80::2%eth1,10.0.0.1",
		"all,!fe80::1%eth0": "fe80::2%eth1,10.0.0.1"} {
		if got, err := inv.SelectNames(pattern); err != nil || strings.Join(got, ",") != want {
			t.Errorf("SelectNames(%q) = %v, %v; want %s", pattern, got, err, want)
		}
	}
}
