package inventory

import "testing"

// -o IdentitiesOnly=yes in the ssh args, as Ansible users write it to keep
// an agent's keys from crowding out the named key: honoured; the first
// IdentitiesOnly given wins, as with ssh; -i's value is a file name.
func TestIdentitiesOnlyFromSSHArgs(t *testing.T) {
	src := `all:
  vars:
    ansible_ssh_private_key_file: /keys/ops
  hosts:
    a:
      ansible_ssh_common_args: -o IdentitiesOnly=yes
    b:
      ansible_ssh_extra_args: "-o 'IdentitiesOnly yes' -o ProxyJump=j"
    c:
      ansible_ssh_common_args: -o IdentitiesOnly=no
      ansible_ssh_extra_args: -o IdentitiesOnly=yes
    d:
      ansible_ssh_common_args: -i -oIdentitiesOnly=yes
    e: {}
`
	inv, err := ParseYAML("ids.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"a": true, "b": true, "c": false, "d": false, "e": false} {
		h, ok := inv.Host(name)
		if !ok {
			t.Fatalf("no host %s", name)
		}
		if h.IdentitiesOnly != want {
			t.Errorf("%s: IdentitiesOnly %v, want %v", name, h.IdentitiesOnly, want)
		}
	}
	if h, _ := inv.Host("b"); h.ProxyJump != "j" {
		t.Errorf("b: ProxyJump %q", h.ProxyJump)
	}
	if _, err := sshOptionFromArgs("IdentitiesOnly", "-o"); err == nil {
		t.Error("a bare -o is refused")
	}
}
