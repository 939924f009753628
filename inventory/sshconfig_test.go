package inventory

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestSSHConfigTokensAgainstOpenSSH has ssh expand the IdentityFile tokens
// itself, in a Match exec of the final pass (where its values are the
// final ones), and compares with gpush's expansion.
func TestSSHConfigTokensAgainstOpenSSH(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI: ssh (openssh-client) must be installed: %v", err)
		}
		t.Skipf("no ssh: %v", err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "tokens")
	const tokens = "%C|%d|%h|%i|%L|%l|%n|%p|%r|%u|%%"
	cfg := filepath.Join(dir, "config")
	writeFile(t, cfg, `
Host tok
    HostName Tok.Example.COM
    User ruser
    Port 2022
Host tok2
    HostName %h.example.net
Match final exec "printf '%%s' '`+tokens+`' > `+out+`"
`)
	sc, _, err := loadSSHConfig([]string{cfg}, nil, u.HomeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"tok", "tok2", "Other.Host"} {
		os.Remove(out)
		if b, err := exec.Command("ssh", "-G", "-F", cfg, host).CombinedOutput(); err != nil {
			t.Fatalf("ssh -G %s: %v\n%s", host, err, b)
		}
		want, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("%s: ssh ran no Match exec: %v", host, err)
		}
		o, err := sc.evaluate(host, sshOptions{})
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		got, ok, err := sc.expandIdentity(tokens, o)
		if err != nil || !ok || got != string(want) {
			t.Errorf("%s: gpush expands %q to %q (%v, %v), ssh to %q", host, tokens, got, ok, err, want)
		}
	}
}

func TestSSHConfigComplete(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	cfg := filepath.Join(home, ".ssh", "config")
	writeFile(t, cfg, `
Include conf.d/*.conf
Host gpu*
    HostName %h.cluster.example
    ProxyCommand ssh -W %h:%p bastion
Match user admin
    IdentityFile ~/.ssh/admin_%r
Host jumped
    ProxyJump %r@jump-%h:2222
Host *
    IdentityFile none
    IdentityFile ${GPUSH_TEST_SURELY_UNSET}/k
    IdentityFile ~/.ssh/id_%n
`)
	writeFile(t, filepath.Join(home, ".ssh", "conf.d", "a.conf"), "Host gpu01\n    Port 2201\n")
	// The system file's relative Include is read from its own folder.
	sys := filepath.Join(dir, "etc", "ssh_config")
	writeFile(t, sys, "Include sys.d/*.conf\n")
	writeFile(t, filepath.Join(dir, "etc", "sys.d", "b.conf"), "Host gpu02\n    User sysuser\n")
	os.Unsetenv("GPUSH_TEST_SURELY_UNSET")
	sc, warnings, err := loadSSHConfig([]string{cfg, sys}, map[string]bool{sys: true}, home)
	if err != nil || len(warnings) != 0 {
		t.Fatal(err, warnings)
	}
	key := func(n string) string { return filepath.Join(home, ".ssh", n) }
	cases := []struct{ in, want Host }{
		{Host{Name: "gpu01"}, Host{Name: "gpu01", Address: "gpu01.cluster.example", Port: 2201,
			IdentityFiles: []string{key("id_gpu01")}, ProxyCommand: "ssh -W %h:%p bastion"}},
		{Host{Name: "gpu02"}, Host{Name: "gpu02", Address: "gpu02.cluster.example", User: "sysuser",
			IdentityFiles: []string{key("id_gpu02")}, ProxyCommand: "ssh -W %h:%p bastion"}},
		// Match user sees the inventory's user, as ssh sees -l.
		{Host{Name: "gpu03", User: "admin"}, Host{Name: "gpu03", Address: "gpu03.cluster.example", User: "admin",
			IdentityFiles: []string{key("admin_admin"), key("id_gpu03")}, ProxyCommand: "ssh -W %h:%p bastion"}},
		// The inventory's ProxyJump came first: no ProxyCommand.
		{Host{Name: "gpu04", ProxyJump: "inv-jump"}, Host{Name: "gpu04", Address: "gpu04.cluster.example",
			IdentityFiles: []string{key("id_gpu04")}, ProxyJump: "inv-jump"}},
		// ProxyJump tokens are the destination's.
		{Host{Name: "jumped", Port: 2022}, Host{Name: "jumped", Address: "jumped", Port: 2022,
			IdentityFiles: []string{key("id_jumped")}, ProxyJump: sc.local + "@jump-jumped:2222"}},
		// ansible_host is the name looked up.
		{Host{Name: "gpu05", Address: "10.0.0.5", IdentityFiles: []string{"~/inv_key"}}, Host{Name: "gpu05", Address: "10.0.0.5",
			IdentityFiles: []string{filepath.Join(home, "inv_key"), key("id_10.0.0.5")}}},
		{Host{Name: "local", Connection: "local"}, Host{Name: "local", Address: "local", Connection: "local"}},
	}
	for _, c := range cases {
		h := c.in
		if err := sc.complete(&h); err != nil {
			t.Errorf("%s: %v", c.in.Name, err)
			continue
		}
		if !reflect.DeepEqual(h, c.want) {
			t.Errorf("%s:\n got  %+v\n want %+v", c.in.Name, h, c.want)
		}
	}
}

func TestSSHConfigUndecidedBlocks(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	writeFile(t, cfg, `
Host set
    User early
Match exec "test -e /nonexistent"
    User exec-user
    ForwardAgent yes
Match tagged prod
    Port 2300
Host *
    User late
`)
	sc, _, err := loadSSHConfig([]string{cfg}, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	// User is already obtained, but Port is not: the tagged block decides it.
	_, err = sc.evaluate("set", sshOptions{})
	if err == nil || !strings.Contains(err.Error(), cfg+" line 8") || !strings.Contains(err.Error(), "tagged") {
		t.Errorf("set: %v", err)
	}
	// With the port given, only the exec block is left, and it would set User.
	_, err = sc.evaluate("other", sshOptions{port: 22})
	if err == nil || !strings.Contains(err.Error(), cfg+" line 5") || !strings.Contains(err.Error(), "Match exec") {
		t.Errorf("other: %v", err)
	}
	t.Logf("the error: %v", err)
	// Both already given: nothing either block holds would matter.
	o, err := sc.evaluate("set", sshOptions{port: 22})
	if err != nil || o.user != "early" {
		t.Errorf("set with a port: %+v %v", o, err)
	}
}

func TestSSHConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"Host x\n    IdentityFile ~/.ssh/%z\n": "unknown token %z",
		"Host x\n    HostName %n.example\n":    "unknown token %n",
		"Host x\n    Port 0x10\n":              "not a port number",
		"Host x\n    IdentitiesOnly maybe\n":   "want yes or no",
		"Host x\n    User \"unterminated\n":    "unterminated quote",
		"Match all host x\n    User u\n":       "cannot be combined",
		"Match host\n    User u\n":             "without an argument",
	}
	for text, want := range cases {
		cfg := filepath.Join(dir, "config")
		writeFile(t, cfg, text)
		sc, _, err := loadSSHConfig([]string{cfg}, nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		err = sc.complete(&Host{Name: "x"})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), cfg) {
			t.Errorf("%q: error %v, want one naming the file and saying %q", text, err, want)
		}
		// Another host is not concerned by a Host x block.
		if !strings.HasPrefix(text, "Match") {
			if err := sc.complete(&Host{Name: "y"}); err != nil {
				t.Errorf("%q: host y: %v", text, err)
			}
		}
	}
	// An Include that includes itself ends with an error, not a loop.
	self := filepath.Join(dir, "self")
	writeFile(t, self, "Include "+self+"\n")
	if _, _, err := loadSSHConfig([]string{self}, nil, dir); err == nil || !strings.Contains(err.Error(), "nested Include") {
		t.Errorf("recursive Include: %v", err)
	}
}

func TestSplitSSHArgs(t *testing.T) {
	cases := map[string][]string{
		`a b	c`:                 {"a", "b", "c"},
		`"a b" 'c d'`:           {"a b", "c d"},
		`a\ b \"q\" 'it\'s'`:    {"a b", `"q"`, "it's"},
		`x"y z"w`:               {"xy zw"},
		`a # comment "unclosed`: {"a"},
		`a#b`:                   {"a#b"},
		`C:\path`:               {`C:\path`},
		``:                      nil,
	}
	for in, want := range cases {
		got, err := splitSSHArgs(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("splitSSHArgs(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := splitSSHArgs(`"open`); err == nil {
		t.Error(`"open: no error`)
	}
}

func TestMatchPatterns(t *testing.T) {
	cases := []struct {
		s, list string
		lower   bool
		want    int
	}{
		{"a.example.com", "*.example.com,!*.test.example.com", true, 1},
		{"a.test.example.com", "*.example.com,!*.test.example.com", true, -1},
		{"a.example.org", "*.example.com", true, 0},
		{"db1", "DB?", true, 1},
		{"root", "Root", false, 0},
		{"gpu10", "gpu1*,!gpu1", false, 1},
		{"", "*", false, 1},
		{"ab", "a**b*", false, 1},
	}
	for _, c := range cases {
		if got := matchPatternList(c.s, c.list, c.lower); got != c.want {
			t.Errorf("matchPatternList(%q, %q) = %d, want %d", c.s, c.list, got, c.want)
		}
	}
}

// FuzzSSHConfig: any file text and any host name evaluate without a panic,
// the same way twice, and a successful evaluation dials a name.
func FuzzSSHConfig(f *testing.F) {
	f.Add("Host a\n  HostName %h.x\nMatch host *.x,!b* user r*\n  Port 22\n", "a")
	f.Add("Match final all\n  ProxyJump j\nMatch exec \"x\" !canonical\n  User u\n", "h")
	f.Add("Host = \"q q\" !z*\n  IdentityFile ~/%C%d${HOME}\nMatch localnetwork 1\n", "q q")
	f.Fuzz(func(t *testing.T, text, host string) {
		file := &sshFile{path: "fuzz"}
		for i, line := range strings.Split(text, "\n") {
			l, ok := parseSSHLine(line)
			if !ok || l.key == "include" {
				continue // no reading of files named by the input
			}
			l.file, l.num = "fuzz", i+1
			file.lines = append(file.lines, l)
		}
		sc := &sshConfig{files: []*sshFile{file}, home: "/home/u", local: "u", uid: "1000"}
		o1, err1 := sc.evaluate(host, sshOptions{})
		o2, err2 := sc.evaluate(host, sshOptions{})
		if (err1 == nil) != (err2 == nil) || (err1 == nil && !reflect.DeepEqual(o1, o2)) {
			t.Fatalf("two evaluations differ: %+v %v / %+v %v", o1, err1, o2, err2)
		}
		if err1 == nil {
			if host != "" && o1.host == "" {
				t.Fatalf("no name to dial for %q: %+v", host, o1)
			}
			for _, id := range o1.identityFiles {
				sc.expandIdentity(id.value, o1)
			}
		}
	})
}
