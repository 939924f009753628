package inventory

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mustYAML parses src as the YAML inventory file name, failing the test on
// an inventory-wide error.
func mustYAML(t *testing.T, name, src string) *Inventory {
	t.Helper()
	inv, err := ParseYAML(name, []byte(src))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return inv
}

func TestBadHostDoesNotFailTheInventory(t *testing.T) {
	inv := mustYAML(t, "fleet.yaml", `all:
  children:
    gpus:
      hosts:
        gpu01:
        gpu02: {ansible_port: http}
        gpu03:
    net:
      hosts:
        sw1: {ansible_connection: ansible.netcommon.network_cli}
        sw2: {ansible_connection: network_cli}
`)
	if got, err := inv.SelectNames("gpus"); err != nil || strings.Join(got, ",") != "gpu01,gpu02,gpu03" {
		t.Errorf("SelectNames(gpus) = %v, %v", got, err)
	}
	hosts, err := inv.Select("gpus:!gpu02")
	if err != nil || len(hosts) != 2 {
		t.Fatalf("Select avoiding the bad host: %v, %v", hosts, err)
	}
	if inv.HostErr("gpu01") != nil || inv.HostErr("nosuch") != nil {
		t.Errorf("HostErr of a good or unknown host: %v, %v", inv.HostErr("gpu01"), inv.HostErr("nosuch"))
	}
	_, err = inv.Select("gpus")
	if err == nil || !strings.Contains(err.Error(), `fleet.yaml:6: host gpu02: ansible_port: "http" is not a port number`) ||
		!strings.Contains(err.Error(), "--limit 'gpus,!gpu02'") {
		t.Errorf("Select(gpus) = %v, want gpu02's port error with file:line", err)
	}
	_, err = inv.Select("all")
	for _, want := range []string{"3 selected hosts cannot be reached", "host gpu02: ansible_port",
		`fleet.yaml:10: host sw1: ansible_connection: connection plugin "ansible.netcommon.network_cli" is not supported: gpush speaks ssh and local`,
		`fleet.yaml:11: host sw2: ansible_connection: connection plugin "network_cli"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Select(all) = %v, want it to contain %q", err, want)
		}
	}
	// Listings still show the bad hosts.
	if n := len(inv.Hosts()); n != 5 {
		t.Errorf("Hosts() has %d hosts, want 5", n)
	}
}

func TestManyBadHostsAreCounted(t *testing.T) {
	var b strings.Builder
	b.WriteString("[gpus]\n")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&b, "gpu%02d ansible_port=%d\n", i, 70000+i)
	}
	inv, err := ParseINI("many.ini", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = inv.Select("gpus")
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "12 selected hosts") || !strings.Contains(msg, "many.ini:2: host gpu01") ||
		!strings.Contains(msg, "host gpu05") || strings.Contains(msg, "host gpu06") || !strings.HasSuffix(msg, "and 7 more") {
		t.Errorf("error %q: want 5 hosts named, then a count of 7", msg)
	}
}

func TestConnectionPlugins(t *testing.T) {
	for name, want := range map[string]string{
		"": "ssh", "ssh": "ssh", "smart": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh",
		"ansible.builtin.ssh": "ssh", "ansible.legacy.ssh": "ssh", "ansible.builtin.paramiko_ssh": "ssh",
		"local": "local", "ansible.builtin.local": "local", "ansible.legacy.local": "local",
		"containers.podman.podman": "podman", "podman": "podman", "community.docker.docker": "docker", "docker": "docker",
		"kubernetes.core.kubectl": "kubectl", "kubectl": "kubectl", "gpush_command": "gpush_command",
	} {
		if got, err := connectionPlugin(name); err != nil || got != want {
			t.Errorf("connectionPlugin(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"network_cli", "ansible.netcommon.network_cli", "community.docker.docker_api", "containers.podman.buildah",
		"ansible.builtin.smart", "ansible.builtin.winrm", "ansible.builtin.", "SSH"} {
		if got, err := connectionPlugin(name); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("connectionPlugin(%q) = %q, %v; want an error naming it", name, got, err)
		}
	}
}

// TestSSHFormsWin: the ssh plugin reads ansible_ssh_host over ansible_host
// and so on (verified with ansible -vvv against Ansible 2.14).
func TestSSHFormsWin(t *testing.T) {
	inv := mustYAML(t, "both.yaml", `all:
  hosts:
    h1:
      ansible_host: 10.0.0.2
      ansible_ssh_host: 10.0.0.3
      ansible_port: 1
      ansible_ssh_port: 2
      ansible_user: ua
      ansible_ssh_user: ub
      ansible_private_key_file: /k/a
      ansible_ssh_private_key_file: /k/b
    h2: {ansible_host: 10.0.0.4, ansible_port: 5, ansible_user: uc, ansible_private_key_file: /k/c}
`)
	h1, _ := inv.Host("h1")
	if h1.Address != "10.0.0.3" || h1.Port != 2 || h1.User != "ub" || strings.Join(h1.IdentityFiles, ",") != "/k/b" {
		t.Errorf("h1 = %+v", h1)
	}
	h2, _ := inv.Host("h2")
	if h2.Address != "10.0.0.4" || h2.Port != 5 || h2.User != "uc" || strings.Join(h2.IdentityFiles, ",") != "/k/c" {
		t.Errorf("h2 = %+v", h2)
	}
}

func TestTemplatesInConnectionVars(t *testing.T) {
	inv := mustYAML(t, "tpl.yaml", `all:
  vars:
    domain: ib.example.com
    ibname: "{{ inventory_hostname_short }}-ib.{{domain}}"
    sshport: 2222
  hosts:
    gpu01.dc1:
      ansible_host: "{{ ibname }}"
      ansible_port: "{{ sshport }}"
      ansible_user: "{{ who }}"
      who: ops
      note: "{{ anything | upper }}"
    gpu02: {ansible_host: "{{ inventory_hostname }}.ib"}
    f1: {ansible_host: "{{ myhost | default('x') }}"}
    f2: {ansible_host: "{{ nosuch }}"}
    f3: {ansible_host: "{{ a }}", a: "{{ b }}", b: "{{ a }}"}
    f4: {ansible_host: "{% if true %}x{% endif %}"}
    f5: {ansible_host: "{{ lookup('env', 'H') }}"}
    f6: {ansible_host: "{{ group_names }}"}
    f7: {ansible_host: "x{{ l }}", l: [1, 2]}
    f8: {ansible_become: "{{ b }}", b: "yes"}
    f9: {ansible_user: "{{ inventory_hostname }}"}
    f10: {ansible_host: "a- {{- who -}} .b", who: x}
`)
	h, _ := inv.Host("gpu01.dc1")
	if h.Address != "gpu01-ib.ib.example.com" || h.Port != 2222 || h.User != "ops" {
		t.Errorf("gpu01.dc1 = %+v", h)
	}
	if h.Vars["note"] != "{{ anything | upper }}" || h.Vars["ansible_host"] != "{{ ibname }}" {
		t.Errorf("vars keep their text as Ansible's inventory does: %v", h.Vars)
	}
	if h, _ := inv.Host("gpu02"); h.Address != "gpu02.ib" {
		t.Errorf("gpu02 address %q", h.Address)
	}
	if h, _ := inv.Host("f8"); !h.Become || inv.HostErr("f8") != nil {
		t.Errorf("f8: become from a template: %+v %v", h, inv.HostErr("f8"))
	}
	if h, _ := inv.Host("f9"); h.User != "f9" {
		t.Errorf("f9 user %q", h.User)
	}
	for host, want := range map[string]string{
		"f1":  `tpl.yaml:14: host f1: ansible_host: template "{{ myhost | default('x') }}": gpush resolves only plain variable references`,
		"f2":  "host f2: ansible_host: template variable nosuch is not defined for host f2",
		"f3":  "host f3: ansible_host: template reference cycle: ansible_host -> a -> b -> a",
		"f4":  `template "{% if true %}x{% endif %}"`,
		"f5":  "lookup('env', 'H')",
		"f6":  "group_names is a list",
		"f7":  "template variable l is a list",
		"f10": `template "a- {{- who -}} .b"`,
	} {
		err := inv.HostErr(host)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("HostErr(%s) = %v, want %q", host, err, want)
		}
		if h, _ := inv.Host(host); strings.Contains(h.Address, "{") {
			t.Errorf("%s: template text kept as the address %q", host, h.Address)
		}
	}
}

func TestVaultInConnectionVar(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "v.yaml")
	writeFile(t, p, `all:
  hosts:
    v1:
      ansible_host: !vault |
        $ANSIBLE_VAULT;1.1;AES256
        3132
      secret: !vault |
        $ANSIBLE_VAULT;1.1;AES256
        3334
    v2: {ansible_user: "{{ u }}", u: {__ansible_vault: "$ANSIBLE_VAULT;1.1;AES256\n3132\n"}}
    v3: {ansible_host: 10.1.1.1, secret: {__ansible_vault: x}}
`)
	inv, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{
		"v1": p + ":4: host v1: ansible_host: encrypted with ansible-vault; gpush does not decrypt vaults",
		"v2": "host v2: ansible_user: encrypted with ansible-vault",
	} {
		if err := inv.HostErr(host); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("HostErr(%s) = %v, want %q", host, err, want)
		}
	}
	if err := inv.HostErr("v3"); err != nil {
		t.Errorf("a vault in a var gpush does not read is no error: %v", err)
	}
	if h, _ := inv.Host("v1"); strings.Contains(h.Address, "ANSIBLE_VAULT") {
		t.Errorf("ciphertext used as the address: %q", h.Address)
	}
}

func TestListConnectionsAndNonFinite(t *testing.T) {
	inv := mustYAML(t, "j.yaml", `all:
  hosts:
    v6: {ansible_host: "fe80::1%eth0", ansible_ssh_user: ops, big: .inf, small: -.inf, odd: .nan, l: [.inf, 1]}
    plain: {ansible_port: 2200, ansible_ssh_private_key_file: /k/id, ansible_become: yes}
    me: {ansible_connection: ansible.builtin.local}
    bad: {ansible_connection: network_cli}
`)
	data, err := inv.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{`"big": Infinity,`, `"small": -Infinity`, `"odd": NaN,`, "    Infinity,\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("List lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "gpush-nonfinite") {
		t.Errorf("a placeholder was left in:\n%s", s)
	}
	// The rest parses once Python's tokens are numbers again.
	var got struct {
		Meta struct {
			Gpush struct {
				Connections map[string]Connection `json:"connections"`
			} `json:"gpush"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(pythonTokensAsZero(data), &got); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	c := got.Meta.Gpush.Connections
	if v := c["v6"]; v.Address != "fe80::1%eth0" || v.Port != 22 || v.User != "ops" || v.Dial != "[fe80::1%eth0]:22" || v.Connection != "ssh" {
		t.Errorf("v6: %+v", v)
	}
	if p := c["plain"]; p.Dial != "plain:2200" || !p.Become || strings.Join(p.IdentityFiles, ",") != "/k/id" || p.User == "" {
		t.Errorf("plain: %+v", p)
	}
	if m := c["me"]; m.Connection != "local" || m.Dial != "" || m.Port != 0 {
		t.Errorf("me: %+v", m)
	}
	if b := c["bad"]; !strings.Contains(b.Error, "network_cli") {
		t.Errorf("bad: %+v", b)
	}
}

// pythonTokensAsZero turns the Infinity, -Infinity and NaN values that List
// writes (one to a line, as a value or a list item) into 0, for json.Valid
// and json.Unmarshal.
func pythonTokensAsZero(data []byte) []byte {
	return pyTokenRE.ReplaceAll(data, []byte("${1}0${3}"))
}

var pyTokenRE = regexp.MustCompile(`(?m)(: |^\s*)(-?Infinity|NaN)(,?)$`)
