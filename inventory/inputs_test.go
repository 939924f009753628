package inventory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// laughs is the "billion laughs" document (the XML attack of that name,
// as it is usually written for YAML, e.g. in the yaml.v3 and PyYAML issue
// trackers): nine levels of nine aliases, 10^9 strings once expanded,
// under a kilobyte written. indent places it under a key.
func laughs(indent string) string {
	var b strings.Builder
	b.WriteString(indent + "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < 9; i++ {
		prev, cur := string(rune('a'+i-1)), string(rune('a'+i))
		b.WriteString(indent + cur + ": &" + cur + " [")
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// bombCases are the places a YAML bomb can be read from by Resolve.
func bombCases(t *testing.T) map[string]func() error {
	dir := t.TempDir()
	inv := filepath.Join(dir, "inv", "hosts.yaml")
	writeFile(t, inv, "all:\n  hosts:\n    h1:\n  vars:\n"+laughs("    "))
	gv := filepath.Join(dir, "gv", "hosts.yaml")
	writeFile(t, gv, "all:\n  hosts:\n    h1:\n")
	writeFile(t, filepath.Join(dir, "gv", "group_vars", "all.yaml"), laughs(""))
	hv := filepath.Join(dir, "hv", "hosts.ini")
	writeFile(t, hv, "h1\n")
	writeFile(t, filepath.Join(dir, "hv", "host_vars", "h1.yml"), laughs(""))
	ef := filepath.Join(dir, "extra.yaml")
	writeFile(t, ef, laughs(""))
	opts := Options{SSHConfigFiles: []string{}, HomeDir: dir}
	resolve := func(spec string) func() error {
		return func() error { _, err := Resolve(spec, opts); return err }
	}
	return map[string]func() error{
		"inventory all.vars": resolve(inv),
		"group_vars/all":     resolve(gv),
		"host_vars/h1":       resolve(hv),
		"-e @file": func() error {
			data, err := os.ReadFile(ef)
			if err != nil {
				return err
			}
			var m map[string]any
			return DecodeYAML(ef, data, &m)
		},
	}
}

// TestYAMLBombRefused: every YAML path refuses a bomb with the one error,
// naming the file, and costs a few MB, not the gigabytes expanding it
// takes (measured as bytes allocated, not as time).
func TestYAMLBombRefused(t *testing.T) {
	for name, load := range bombCases(t) {
		t.Run(name, func(t *testing.T) {
			err := load()
			if !errors.Is(err, ErrYAMLExpansion) {
				t.Fatalf("got %v, want ErrYAMLExpansion", err)
			}
			if !strings.Contains(err.Error(), ".y") {
				t.Errorf("error %q does not name the file", err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_ = load()
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
				t.Errorf("refusing the bomb allocated %d bytes, want under 8 MiB", got)
			}
		})
	}
}

// TestYAMLAnchorsWithinBudget: ordinary anchor reuse still loads.
func TestYAMLAnchorsWithinBudget(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hosts.yaml")
	writeFile(t, p, "all:\n  hosts:\n    h1: &h {ansible_user: ops, gpus: [0, 1]}\n    h2: *h\n    h3:\n      <<: *h\n      ansible_port: 2222\n")
	inv, err := Resolve(p, Options{SSHConfigFiles: []string{}, HomeDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := inv.Host("h3"); h.User != "ops" || h.Port != 2222 {
		t.Errorf("h3 = %+v", h)
	}
}

// TestYAMLSelfAlias: an alias inside its own anchor is refused, not walked
// forever.
func TestYAMLSelfAlias(t *testing.T) {
	var v any
	err := DecodeYAML("self.yaml", []byte("a: &a [1, *a]\n"), &v)
	if err == nil {
		t.Fatal("accepted")
	}
}

func BenchmarkYAMLBomb(b *testing.B) {
	data := []byte(laughs(""))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var m map[string]any
		if err := DecodeYAML("bomb.yaml", data, &m); !errors.Is(err, ErrYAMLExpansion) {
			b.Fatal(err)
		}
	}
}

// vaultFile is a file as ansible-vault encrypt writes it (format 1.1, as
// documented in Ansible's "Vault payload format"): the header, then the
// hex of salt, HMAC and ciphertext in lines of 80. The hex here is made
// up: only the shape matters, gpush never decrypts.
func vaultFile() string {
	hex := strings.Repeat("3635393366313932373436363835613164353261343761636562663738316334", 10)
	var b strings.Builder
	b.WriteString("$ANSIBLE_VAULT;1.1;AES256\n")
	for len(hex) > 80 {
		b.WriteString(hex[:80] + "\n")
		hex = hex[80:]
	}
	b.WriteString(hex + "\n")
	return b.String()
}

// TestVaultEncryptedFilesRefused: a wholly encrypted inventory, vars file
// or -e @file is refused as vault-encrypted, never read as INI hosts
// named by its ciphertext.
func TestVaultEncryptedFilesRefused(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SSHConfigFiles: []string{}, HomeDir: dir}
	cases := map[string]string{}
	for _, name := range []string{"hosts", "hosts.ini", "hosts.yaml"} {
		p := filepath.Join(dir, "inv-"+name, name)
		writeFile(t, p, vaultFile())
		cases[name] = p
	}
	gv := filepath.Join(dir, "gv", "hosts.ini")
	writeFile(t, gv, "[g]\nh1\n")
	writeFile(t, filepath.Join(dir, "gv", "group_vars", "g.yml"), vaultFile())
	cases["group_vars/g.yml"] = gv
	hv := filepath.Join(dir, "hv", "hosts.ini")
	writeFile(t, hv, "h1\n")
	writeFile(t, filepath.Join(dir, "hv", "host_vars", "h1"), vaultFile())
	cases["host_vars/h1"] = hv
	for name, spec := range cases {
		_, err := Resolve(spec, opts)
		if !errors.Is(err, ErrVaultEncrypted) {
			t.Errorf("%s: got %v, want ErrVaultEncrypted", name, err)
		}
	}
	var m map[string]any
	if err := DecodeYAML("extra.yml", []byte(vaultFile()), &m); !errors.Is(err, ErrVaultEncrypted) || !strings.Contains(err.Error(), "extra.yml") {
		t.Errorf("-e @file: got %v", err)
	}
}

// TestInputSizeCap: every file read is refused over the cap, before it is
// parsed, with an error naming the file, its size and the cap; a larger
// cap reads it.
func TestInputSizeCap(t *testing.T) {
	dir := t.TempDir()
	const max = 4 << 10
	big := "# " + strings.Repeat("x", max) + "\n"
	files := map[string]string{}
	inv := filepath.Join(dir, "inv", "hosts.ini")
	writeFile(t, inv, big+"h1\n")
	files["inventory"] = inv
	yml := filepath.Join(dir, "yml", "hosts.yaml")
	writeFile(t, yml, big+"all:\n  hosts:\n    h1:\n")
	files["yaml inventory"] = yml
	gv := filepath.Join(dir, "gv", "hosts.ini")
	writeFile(t, gv, "h1\n")
	writeFile(t, filepath.Join(dir, "gv", "group_vars", "all.yml"), big+"a: 1\n")
	files["group_vars/all.yml"] = filepath.Join(dir, "gv", "group_vars", "all.yml")
	small := filepath.Join(dir, "small", "hosts.ini")
	writeFile(t, small, "h1\n")
	cfg := filepath.Join(dir, "ssh_config")
	writeFile(t, cfg, "Include "+filepath.Join(dir, "inc.conf")+"\n")
	writeFile(t, filepath.Join(dir, "inc.conf"), big+"Host h1\n  User u\n")
	for name, file := range files {
		spec := file
		if name == "group_vars/all.yml" {
			spec = gv
		}
		_, err := Resolve(spec, Options{SSHConfigFiles: []string{}, HomeDir: dir, MaxInputSize: max})
		if !errors.Is(err, ErrInputTooLarge) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "4096 bytes") {
			t.Errorf("%s: got %v", name, err)
		}
		if _, err := Resolve(spec, Options{SSHConfigFiles: []string{}, HomeDir: dir, MaxInputSize: 2 * max}); err != nil {
			t.Errorf("%s, cap raised: %v", name, err)
		}
	}
	_, err := Resolve(small, Options{SSHConfigFiles: []string{cfg}, HomeDir: dir, MaxInputSize: max})
	if !errors.Is(err, ErrInputTooLarge) || !strings.Contains(err.Error(), "inc.conf") {
		t.Errorf("Include'd ssh_config: got %v", err)
	}
	t.Setenv(MaxInputSizeEnv, "4K")
	if _, err := Resolve(inv, Options{SSHConfigFiles: []string{}, HomeDir: dir}); !errors.Is(err, ErrInputTooLarge) {
		t.Errorf("$%s=4K: got %v", MaxInputSizeEnv, err)
	}
	t.Setenv(MaxInputSizeEnv, "lots")
	if _, err := Resolve(inv, Options{SSHConfigFiles: []string{}, HomeDir: dir}); err == nil || !strings.Contains(err.Error(), MaxInputSizeEnv) {
		t.Errorf("$%s=lots: got %v", MaxInputSizeEnv, err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1": 1, "64M": 64 << 20, "64MiB": 64 << 20, "2g": 2 << 30, "10KB": 10 << 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1T", "M"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q): want an error", in)
		}
	}
}

// TestScriptLoadOneDeadline: the timeout bounds the whole load, not each
// --host run: five hosts whose --host takes 0.4s each stop at a 1s
// timeout, where five runs each under 1s would have taken 2s.
func TestScriptLoadOneDeadline(t *testing.T) {
	dir := t.TempDir()
	inv := writeScript(t, dir, "inv.sh", `#!/bin/sh
if [ "$1" = --list ]; then echo '{"g": {"hosts": ["h1","h2","h3","h4","h5"]}}'; exit 0; fi
sleep 0.4
echo '{}'
`)
	start := time.Now()
	_, err := LoadScript(context.Background(), inv, ScriptOptions{Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "every --host run together") {
		t.Fatalf("got %v", err)
	}
	if el := time.Since(start); el > 1900*time.Millisecond {
		t.Errorf("took %v: the timeout was applied per run", el)
	}
}

// TestTOMLInventory: a TOML inventory as Ansible's toml plugin reads it
// (its own example 1, ansible-core 2.14 lib/ansible/plugins/inventory/toml.py);
// a malformed one names the file and line; the input cap applies.
func TestTOMLInventory(t *testing.T) {
	inv := mustResolve(t, "testdata/ansible-compare/ours/toml/example1.toml", Options{SSHConfigFiles: []string{}})
	if h, _ := inv.Host("host2"); h.Port != 222 {
		t.Errorf("host2 = %+v", h)
	}
	if names, _ := inv.SelectNames("web"); strings.Join(names, " ") != "host1 host2 tomcat1 tomcat2 tomcat3 jenkins1" {
		t.Errorf("web = %v", names)
	}
	if h, _ := inv.Host("jenkins1"); h.Vars["has_java"] != true || h.Vars["http_port"] != 8080 {
		t.Errorf("jenkins1 vars = %v", h.Vars)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	writeFile(t, bad, "[web.hosts]\nhost1 = {\n")
	if _, err := Resolve(bad, Options{SSHConfigFiles: []string{}, HomeDir: dir}); err == nil || !strings.Contains(err.Error(), bad+":") {
		t.Errorf("malformed: %v", err)
	}
	big := filepath.Join(dir, "big.toml")
	writeFile(t, big, "# "+strings.Repeat("x", 5000)+"\n[web.hosts]\nhost1 = {}\n")
	if _, err := Resolve(big, Options{SSHConfigFiles: []string{}, HomeDir: dir, MaxInputSize: 4096}); !errors.Is(err, ErrInputTooLarge) {
		t.Errorf("over the cap: %v", err)
	}
}
