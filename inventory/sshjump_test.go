package inventory

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// jumpSpecs are ProxyJump values, the URI form (ssh://[user@]host[:port])
// and the plain one, with what OpenSSH 9.2's parse_jump refuses.
var jumpSpecs = []string{
	"ssh://user@host:2223", "ssh://h2", "u3@h3:22", "ssh://[::1]:2200",
	"ssh://user@host:2223/x", "ssh://user@host:2223,h2", "h1,ssh://u@h2:3",
	"ssh://u;fp=x@h", "ssh://@h", "ssh://h:0", "ssh://h:", "user@host:2223",
	"ssh://a@b@c", "SSH://u@h", "[::1]:22", "ssh://a+b@h",
	"ssh://a%4@h", "ssh://h_x.y:22", "ssh://-h", "ssh://h..x", "ssh://u@h:65536",
	"ssh://h.", "ssh://u@", "ssh://", "ssh://h/", "x,ssh://bad/p", "10.0.0.1:22",
	"h/2200", "u@h/22", "h:22/", "h!x", "none",
}

// TestProxyJumpAsSSHG: each value is accepted or refused as `ssh -G`
// accepts or refuses the line, and the last hop reads as ssh prints it.
func TestProxyJumpAsSSHG(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh here (make deps installs openssh-client)")
	}
	dir := t.TempDir()
	for i, spec := range jumpSpecs {
		file := filepath.Join(dir, "config"+strings.Repeat("x", i))
		writeFile(t, file, "Host other\n  ProxyJump "+spec+"\n")
		want := runSSHG(t, file, "a")
		_, _, err := loadSSHConfig([]string{file}, nil, dir)
		switch {
		case want.err != "" && err == nil:
			t.Errorf("%s: accepted, ssh -G refuses it: %s", spec, want.err)
		case want.err == "" && err != nil:
			t.Errorf("%s: refused (%v), ssh -G accepts it", spec, err)
		}
		if want.err != "" || err != nil {
			continue
		}
		// Applied to the host now: ssh -G's proxyjump line.
		writeFile(t, file, "Host a\n  ProxyJump "+spec+"\n")
		want = runSSHG(t, file, "a")
		sc, _, err := loadSSHConfig([]string{file}, nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		got := gpushG(sc, "a")
		if g, w := strings.Join(got.fields["proxyjump"], " "), strings.Join(want.fields["proxyjump"], " "); g != w {
			t.Errorf("%s: proxyjump %q, ssh -G %q", spec, g, w)
		}
	}
}

func TestParseJumpHopURI(t *testing.T) {
	h, err := ParseJumpHop("ssh://user@host:2223")
	if err != nil || h != (JumpHop{User: "user", Host: "host", Port: 2223}) {
		t.Fatalf("got %+v, %v", h, err)
	}
	if _, err := ParseJumpHop("ssh://user@host:2223/path"); err == nil || !strings.Contains(err.Error(), "ssh://user@host:2223/path") {
		t.Fatalf("a path: %v", err)
	}
}
