package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// listedHosts runs `gpush hosts --json` and returns the host names and vars.
func listedHosts(t *testing.T, env []string, args ...string) (map[string]map[string]any, string) {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	code, out, stderr := gpush(t, append([]string{"hosts", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("gpush hosts --json %q: exit %d: %s", args, code, stderr)
	}
	var doc struct {
		Meta struct {
			Hostvars map[string]map[string]any `json:"hostvars"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("gpush hosts --json %q: %v\n%s", args, err, out)
	}
	return doc.Meta.Hostvars, stderr
}

func names(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestInventoryFlagRepeatableAndNotSplit(t *testing.T) {
	// A host list keeps its commas: one -i value, two hosts (not two
	// inventories "a" and "b").
	hv, _ := listedHosts(t, nil, "-i", "a,b,")
	if got := names(hv); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("-i 'a,b,': hosts %v", got)
	}
	// So does GPUSH_INVENTORY.
	hv, _ = listedHosts(t, []string{"GPUSH_INVENTORY=c,d,"})
	if got := names(hv); !reflect.DeepEqual(got, []string{"c", "d"}) {
		t.Errorf("GPUSH_INVENTORY=c,d,: hosts %v", got)
	}

	dir := t.TempDir()
	x, y := filepath.Join(dir, "x.yaml"), filepath.Join(dir, "y.yaml")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(x, "all:\n  hosts:\n    gx: {who: x, ansible_port: 22}\n    both: {who: x}\n")
	write(y, "all:\n  hosts:\n    gy: {who: y}\n    both: {who: y}\n")
	hv, _ = listedHosts(t, nil, "-i", x, "-i", y)
	if got := names(hv); !reflect.DeepEqual(got, []string{"both", "gx", "gy"}) {
		t.Errorf("-i x -i y: hosts %v", got)
	}
	if hv["both"]["who"] != "y" || hv["gx"]["who"] != "x" {
		t.Errorf("-i x -i y: the later source must win: %v", hv)
	}
	// Reversed, the other one wins.
	hv, _ = listedHosts(t, nil, "-i", y, "-i", x)
	if hv["both"]["who"] != "x" {
		t.Errorf("-i y -i x: both.who = %v, want x", hv["both"]["who"])
	}
	// A file and a host list together.
	hv, _ = listedHosts(t, nil, "-i", x, "-i", "extra1,extra2,")
	if got := names(hv); !reflect.DeepEqual(got, []string{"both", "extra1", "extra2", "gx"}) {
		t.Errorf("-i x -i 'extra1,extra2,': hosts %v", got)
	}
}

func TestInventoryNotFoundSaysWhereItLooked(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	code, _, stderr := gpush(t, "hosts", "-i", "nosuch-i9-inventory")
	if code != 1 || !strings.Contains(stderr, "no inventory found") ||
		!strings.Contains(stderr, filepath.Join(dir, "inventory", "nosuch-i9-inventory")+".{yaml,yml,ini}") {
		t.Errorf("exit %d, stderr %q: want 1, 'no inventory found' and the paths tried", code, stderr)
	}
}
