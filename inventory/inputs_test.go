package inventory

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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
