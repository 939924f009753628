package inventory

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkResolveYAML20k loads a YAML inventory of 20,000 hosts, each with
// four plain-scalar vars, and group_vars/ beside it: the YAML 1.1 layer's
// cost per scalar shows here. Compare with the same benchmark on an older
// tree for a ratio.
func BenchmarkResolveYAML20k(b *testing.B) {
	dir := b.TempDir()
	var sb strings.Builder
	sb.WriteString("all:\n  children:\n    gpus:\n      vars: {docker_install: yes, mode: 0755}\n      hosts:\n")
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&sb, "        gpu%05d: {ansible_host: 10.%d.%d.%d, rack: %d, enabled: on, weight: 1.5}\n", i, i>>16, (i>>8)&255, i&255, i/40)
	}
	p := filepath.Join(dir, "inv.yaml")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "group_vars"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "group_vars", "gpus.yml"), []byte("x: 1\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	opts := Options{SSHConfigFiles: []string{}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		inv, err := Resolve(p, opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(inv.hostOrder) != 20000 {
			b.Fatalf("%d hosts", len(inv.hostOrder))
		}
	}
}
