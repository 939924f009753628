package inventory

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	// Keeps kevinburke/ssh_config required in go.mod: its module zip
	// carries the testdata/ files this comparison reads.
	_ "github.com/kevinburke/ssh_config"
)

// probeHosts are tried against every file, beside the literal names its
// Host lines give.
var probeHosts = []string{
	"unmatched", "a.example.com", "a.test.example.com", "x.prod.example.com",
	"x.staging.example.com", "10.1.2.3", "20.20.20.5", "bastion.1.i.2.example.net",
	"other1", "e-unset", "un-decided", "un-other",
}

// intendedDiffs are the places where gpush and ssh -G disagree on purpose:
// "FILE" for every host of a file, "FILE HOST" for one.
var intendedDiffs = map[string]string{
	"kevinburke/invalid-port": "ssh rejects a bad Port anywhere in the file; " +
		"gpush only for the hosts the Port line applies to",
	"kevinburke/match-host-negation": "\"!*.test.example.com\" after Match host is parsed by ssh as a criterion " +
		"and the file rejected; gpush fails only the hosts the block could decide",
	"gpush/exec e-unset": "gpush does not run Match exec: the block would set User, so gpush refuses this host " +
		"(and says which block), where ssh runs the command",
	"gpush/unsupported": "OpenSSH 9.2 rejects Match localnetwork (9.4+) and so the whole file, for every host; " +
		"gpush fails only the hosts whose settings the block would decide",
}

// sshG is one host's settings as ssh -G prints them, or ssh's refusal.
type sshG struct {
	err    string
	fields map[string][]string
}

// runSSHG runs `ssh -G -F file host` and keeps the fields compared.
func runSSHG(t *testing.T, file, host string) sshG {
	cmd := exec.Command("ssh", "-G", "-F", file, "--", host)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return sshG{err: msg}
	}
	g := sshG{fields: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "hostname", "user", "port", "identityfile", "proxyjump", "proxycommand", "identitiesonly":
			g.fields[k] = append(g.fields[k], v)
		}
	}
	return g
}

// gpushG is what gpush resolves, in ssh -G's terms (raw values, defaults
// filled as ssh fills them).
func gpushG(sc *sshConfig, host string) sshG {
	o, err := sc.evaluate(host, sshOptions{})
	if err != nil {
		return sshG{err: err.Error()}
	}
	// Values ssh would refuse later are refused here too.
	if o.proxyJump != "" && !strings.EqualFold(o.proxyJump, "none") {
		if _, err := sc.expandProxyJump(o.proxyJump, o); err != nil {
			return sshG{err: err.Error()}
		}
	}
	g := sshG{fields: map[string][]string{}}
	g.fields["hostname"] = []string{o.host}
	u := o.user
	if u == "" {
		u = sc.local
	}
	g.fields["user"] = []string{u}
	p := o.port
	if p == 0 {
		p = 22
	}
	g.fields["port"] = []string{strconv.Itoa(p)}
	for _, f := range o.identityFiles {
		g.fields["identityfile"] = append(g.fields["identityfile"], f.value)
	}
	if len(o.identityFiles) == 0 {
		// ssh's defaults when no IdentityFile is given (gpush's dialer
		// has its own: not compared).
		for _, k := range []string{"id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa"} {
			g.fields["identityfile"] = append(g.fields["identityfile"], "~/.ssh/"+k)
		}
	}
	if o.proxyCommand != "" && !strings.EqualFold(o.proxyCommand, "none") {
		g.fields["proxycommand"] = []string{o.proxyCommand}
	} else if o.proxyCommand == "" && o.proxyJump != "" && !strings.EqualFold(o.proxyJump, "none") {
		g.fields["proxyjump"] = []string{showProxyJump(o.proxyJump)}
	}
	io := o.identitiesOnly
	if io == "" {
		io = "no"
	}
	g.fields["identitiesonly"] = []string{io}
	return g
}

// literalHosts are the Host patterns of a file that name one host.
func literalHosts(data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		l, ok := parseSSHLine(line)
		if !ok || l.key != "host" || l.err != nil {
			continue
		}
		for _, a := range l.args {
			if !strings.ContainsAny(a, "*?!,[] ") && !contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// kevinburkeFiles are the inputs of kevinburke/ssh_config's testdata/
// (module v1.6.0, as go.mod requires) that the comparison reads. Left out:
// include, include-recursive, include-shell and system-include (they need
// files placed in the real ~/.ssh or /etc/ssh) and the fuzz corpus.
var kevinburkeFiles = []string{
	"anotherfile", "config-no-ending-newline", "config1", "config2", "config3", "config4",
	"dos-lines", "eol-comments", "eqsign", "extraspace", "identities", "invalid-port",
	"match-all", "match-directive", "match-host", "match-host-negation", "match-mixed",
	"negated", "quoted-identities",
}

// kevinburkeTestdata is the testdata/ folder of the kevinburke/ssh_config
// module as `go mod download` (make deps) leaves it in the module cache:
// public inputs come from the module zip at test time, not from copies in
// this repository.
func kevinburkeTestdata(t *testing.T) string {
	const mod = "github.com/kevinburke/ssh_config"
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	dir := strings.TrimSpace(string(out))
	if err == nil && dir != "" {
		dir = filepath.Join(dir, "testdata")
		for _, n := range kevinburkeFiles {
			if _, err = os.Stat(filepath.Join(dir, n)); err != nil {
				break
			}
		}
	} else if err == nil {
		err = fmt.Errorf("not in the module cache (run go mod download)")
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		msg := fmt.Sprintf("%s testdata (the ssh -G comparison's public inputs): %v", mod, err)
		if os.Getenv("CI") == "true" {
			t.Fatal("CI: " + msg)
		}
		t.Skip(msg)
	}
	return dir
}

func TestSSHConfigCompareOpenSSH(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI: ssh (openssh-client) must be installed for this comparison: %v", err)
		}
		t.Skipf("no ssh: %v", err)
	}
	ver, _ := exec.Command("ssh", "-V").CombinedOutput()
	t.Logf("reference: %s", strings.TrimSpace(string(ver)))
	// ssh takes ~ and relative Include paths from the passwd entry, not $HOME.
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("testdata/sshconfig")
	if err != nil {
		t.Fatal(err)
	}
	// srcs maps each compared name to the file it is read from.
	srcs := map[string]string{}
	var names []string
	kb := kevinburkeTestdata(t)
	for _, n := range kevinburkeFiles {
		name := "kevinburke/" + n
		srcs[name] = filepath.Join(kb, n)
		names = append(names, name)
	}
	ents, err := os.ReadDir(filepath.Join(abs, "gpush"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			name := "gpush/" + e.Name()
			srcs[name] = filepath.Join(abs, name)
			names = append(names, name)
		}
	}
	tmp := t.TempDir()
	// ssh refuses included files owned by another user or writable by
	// others: include copies this test owns.
	incs, err := filepath.Glob(filepath.Join(abs, "gpush", "inc", "*"))
	if err != nil || len(incs) == 0 {
		t.Fatalf("include targets: %v %v", incs, err)
	}
	for _, f := range incs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(tmp, "inc"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "inc", filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	used := map[string]bool{}
	var pairs, agree int
	var diffs []string
	byReason := map[string]int{}
	for _, name := range names {
		data, err := os.ReadFile(srcs[name])
		if err != nil {
			t.Fatal(err)
		}
		// @DIR@ lets a file Include by absolute path (the copies of inc/).
		data = bytes.ReplaceAll(data, []byte("@DIR@"), []byte(tmp))
		file := filepath.Join(tmp, strings.ReplaceAll(name, "/", "_"))
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		sc, _, err := loadSSHConfig([]string{file}, nil, u.HomeDir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		hosts := append(literalHosts(data), probeHosts...)
		for _, h := range hosts {
			pairs++
			want, got := runSSHG(t, file, h), gpushG(sc, h)
			same := (want.err != "") == (got.err != "") && reflect.DeepEqual(want.fields, got.fields)
			key := name + " " + h
			reason, ok := intendedDiffs[key]
			if same {
				agree++
				// A reason for a whole file need not hold for each of its hosts.
				if ok {
					t.Errorf("%s: agrees with ssh -G, but is listed as an intended difference (%s)", key, reason)
				}
				continue
			}
			if !ok {
				reason, ok = intendedDiffs[name]
			}
			if !ok {
				t.Errorf("%s: differs from ssh -G\n  ssh:   %s\n  gpush: %s", key, showG(want), showG(got))
				continue
			}
			if _, pair := intendedDiffs[key]; pair {
				used[key] = true
			} else {
				used[name] = true
			}
			diffs = append(diffs, key)
			byReason[reason]++
		}
	}
	for k := range intendedDiffs {
		if !used[k] {
			t.Errorf("intended difference %q: no such difference seen", k)
		}
	}
	var lines []string
	for r, n := range byReason {
		lines = append(lines, fmt.Sprintf("%3d x %s", n, r))
	}
	sort.Strings(lines)
	t.Logf("ssh_config vs ssh -G: %d files, %d host lookups, %d agree, %d differ (all intended, %d reasons):\n  %s",
		len(names), pairs, agree, len(diffs), len(byReason), strings.Join(lines, "\n  "))
}

func showG(g sshG) string {
	if g.err != "" {
		return "error: " + g.err
	}
	var keys []string
	for k := range g.fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q ", k, g.fields[k])
	}
	return b.String()
}
