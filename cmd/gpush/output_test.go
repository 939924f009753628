package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -b gathers as clush -b: whole outputs identical byte for byte, under a
// header naming their hosts; --fold-numbers also folds figures (MiB,
// seconds, counts) but never a pid or a GPU index; a fleet table fits 120
// columns unless --wide.
func TestRunOutputFlags(t *testing.T) {
	dir := t.TempDir()
	inv, script := filepath.Join(dir, "inv.yaml"), filepath.Join(dir, "out.lua")
	for p, src := range map[string]string{
		inv: "all:\n  vars: {ansible_connection: local}\n  hosts:\n    n1: {g: 0, pid: 5}\n    n2: {g: 0, pid: 5}\n    n3: {g: 1, pid: 12}\n    n4: {g: 0, pid: 5}\n",
		script: `local n = tonumber(host.name:match("%d+"))
log.info("GPU %d would kill %d", vars.g, vars.pid)
log.info("freed %d MiB in %d ms", 100 * n, n)
return {{gpu = vars.g, reason = "held by pid " .. vars.pid .. " (python3 /opt/jobs/team/a/very/long/path/to/the/job/train.py --lr 0.1 --epochs 100 --data /data/sets/imagenet/train)"}}
`,
	} {
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, out, errs := gpush(t, "run", script, "-i", inv, "-b")
	if want := "---------------\nn1\n---------------\nINFO GPU 0 would kill 5\nINFO freed 100 MiB in 1 ms\n"; !strings.HasPrefix(out, want) {
		t.Errorf("-b:\n%s\nwant first:\n%s\n%s", out, want, errs)
	}
	_, out, _ = gpush(t, "run", script, "-i", inv, "-b", "--fold-numbers")
	for _, want := range []string{
		"---------------\nn[1-2,4] (3)\n---------------\nINFO GPU 0 would kill 5\nINFO freed [100,200,400] MiB in [1-2,4] ms\n",
		"---------------\nn3\n---------------\nINFO GPU 1 would kill 12\nINFO freed 300 MiB in 3 ms\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("-b --fold-numbers lacks:\n%s\nin:\n%s", want, out)
		}
	}
	_, out, _ = gpush(t, "run", script, "-i", inv, "--fold-numbers")
	for _, want := range []string{"n[1-2,4] (3) | INFO GPU 0 would kill 5\n", "n3 | INFO GPU 1 would kill 12\n",
		"n[1-4] (4) | INFO freed [100..400] MiB in [1-4] ms\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("--fold-numbers lacks %q:\n%s", want, out)
		}
	}
	// The table: 120 columns, the script's name kept; --wide: whole.
	_, out, _ = gpush(t, "run", script, "-i", inv)
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 120 {
			t.Errorf("a line of %d columns: %q", len([]rune(l)), l)
		}
	}
	if !strings.Contains(out, "(python3 …/train.py --lr 0.1") || !strings.Contains(out, "cut to 120 columns: REASON") {
		t.Errorf("table not cut to 120 columns keeping the script:\n%s", out)
	}
	_, out, _ = gpush(t, "run", script, "-i", inv, "--wide")
	if !strings.Contains(out, "/opt/jobs/team/a/very/long/path/to/the/job/train.py --lr 0.1 --epochs 100 --data /data/sets/imagenet/train)") {
		t.Errorf("--wide cut:\n%s", out)
	}
}
