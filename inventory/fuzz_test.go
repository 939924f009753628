package inventory

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func addSeedFiles(f *testing.F, glob string) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed files %s: %v", glob, err)
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// checkLoaded holds for any inventory that loaded: every host is reachable
// through its groups, selectable by name, and renderable.
func checkLoaded(t *testing.T, inv *Inventory) {
	all, ok := inv.GroupHosts("all")
	if !ok || len(all) != len(inv.Hosts()) {
		t.Fatalf("all has %d hosts, inventory %d", len(all), len(inv.Hosts()))
	}
	for _, h := range inv.Hosts() {
		if len(h.Groups) == 0 || h.Groups[0] != "all" && !contains(h.Groups, "all") {
			t.Fatalf("host %s not in all: %v", h.Name, h.Groups)
		}
		if h.Connection != "ssh" && h.Connection != "local" {
			t.Fatalf("host %s: connection %q", h.Name, h.Connection)
		}
	}
	// Infinity and NaN are written as Python's json writes them.
	if data, err := inv.List(nil); err == nil && !json.Valid(pythonTokensAsZero(data)) {
		t.Fatalf("List gave invalid JSON: %s", data)
	}
	// The graph repeats a group under each parent, as Ansible's does, so
	// chains of diamonds grow it exponentially: draw only small ones.
	if len(inv.GroupNames()) <= 16 {
		var b strings.Builder
		if err := inv.Graph(&b); err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzParseINI(f *testing.F) {
	addSeedFiles(f, "testdata/*.ini")
	f.Add([]byte("[a:children]\nb\n[b]\nh[1:3]:22 x=[1,{'k':(2,)}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseINI("fuzz.ini", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.ini") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkLoaded(t, inv)
	})
}

func FuzzParseYAML(f *testing.F) {
	addSeedFiles(f, "testdata/*.yaml")
	addSeedFiles(f, "*.yaml")
	f.Add([]byte("all:\n  children:\n    a: &x\n      hosts: {h1: {p: 1}}\n    b: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseYAML("fuzz.yaml", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkLoaded(t, inv)
	})
}

func FuzzINIValue(f *testing.F) {
	for _, s := range []string{"5", "['a', 'b']", "{'a': (1, 2.5e3)}", `"\x41\u00e9\101"`, "True # c", "r'x'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := parseINIValue(s)
		if str, ok := v.(string); ok && str == s {
			return
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("parseINIValue(%q) = %#v: not representable: %v", s, v, err)
		}
	})
}

func FuzzExpandHostRange(f *testing.F) {
	for _, s := range []string{"gpu[01:16]", "n-[a:f]", "w[0:20:5]", "r[1:2]g[a:b]", "x[:3]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ExpandHostRange(s)
		if err != nil {
			return
		}
		if len(names) == 0 || len(names) > maxExpand {
			t.Fatalf("ExpandHostRange(%q): %d names", s, len(names))
		}
		for _, n := range names {
			if strings.ContainsAny(n, "[]") {
				t.Fatalf("ExpandHostRange(%q) left brackets: %q", s, n)
			}
		}
	})
}

// checkFoldRoundTrip: expanding a fold gives the same set of names back,
// and folding that again gives the same string.
func checkFoldRoundTrip(t *testing.T, names []string) {
	folded := FoldNodeSet(names)
	back, err := ExpandNodeSet(folded)
	if err != nil {
		t.Fatalf("ExpandNodeSet(FoldNodeSet(%q) = %q): %v", names, folded, err)
	}
	want := uniqueSorted(names)
	if got := uniqueSorted(back); !reflect.DeepEqual(got, want) {
		t.Fatalf("expand(fold(%q)) = %q (via %q)", want, got, folded)
	}
	if again := FoldNodeSet(back); again != folded {
		t.Fatalf("fold not stable: %q then %q", folded, again)
	}
}

func uniqueSorted(names []string) []string {
	m := map[string]bool{}
	for _, n := range names {
		if n != "" {
			m[n] = true
		}
	}
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func FuzzNodeSet(f *testing.F) {
	for _, s := range []string{"gpu[01-03,07]", "gpu[1-10/3],login", "rack[1-2]-gpu[08-10]", "gpu[1,01,001]", "[0-3]x",
		"node[1-9]!node6", "n[1-3],n[2-5]!n2&n[1-4]", "r[1-3]-n[1-3]^r2-n2", "n[08,99-100]", "n0[0-1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := ExpandNodeSet(s)
		if err != nil {
			return
		}
		checkFoldRoundTrip(t, names)
	})
}

// FuzzNodeSetOps: an operator between two node sets (the right one free of
// top-level operators) gives that set operation of their expansions.
func FuzzNodeSetOps(f *testing.F) {
	f.Add("node[1-9]", byte('!'), "node[3-4,6]")
	f.Add("a[1-3]b[1-2],c", byte('&'), "a[2-5]b[1-2]")
	f.Add("n[01-10/3]", byte('^'), "n[04-12]")
	f.Add("x", byte(','), "x")
	f.Fuzz(func(t *testing.T, a string, op byte, b string) {
		toks := splitOutsideBrackets(a, ',')
		if !isSetOp(op) && op != ',' || strings.ContainsAny(b, ",!&^") || strings.TrimSpace(toks[len(toks)-1]) == "" {
			return // "a,!b" lacks an operand, in nodeset too
		}
		left, errA := ExpandNodeSet(a)
		right, errB := ExpandNodeSet(b)
		if errA != nil || errB != nil || len(right) == 0 {
			return
		}
		got, err := ExpandNodeSet(a + string(op) + b)
		if err != nil {
			if strings.Contains(err.Error(), "more than") {
				return
			}
			t.Fatalf("ExpandNodeSet(%q): %v, though both sides expand", a+string(op)+b, err)
		}
		in := func(list []string) map[string]bool {
			m := map[string]bool{}
			for _, n := range list {
				m[n] = true
			}
			return m
		}
		l, r := in(left), in(right)
		want := map[string]bool{}
		for n := range l {
			if op == ',' || op == '!' && !r[n] || op == '&' && r[n] || op == '^' && !r[n] {
				want[n] = true
			}
		}
		for n := range r {
			if op == ',' || op == '^' && !l[n] {
				want[n] = true
			}
		}
		if g := in(got); len(g) != len(got) || !reflect.DeepEqual(g, want) {
			t.Fatalf("ExpandNodeSet(%q) = %q, want the set %v", a+string(op)+b, got, want)
		}
		checkFoldRoundTrip(t, got)
	})
}

var hostNameChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func FuzzFoldNodeSet(f *testing.F) {
	f.Add("gpu01\ngpu02\ngpu03\ngpu07")
	f.Add("gpu9\ngpu10\ngpu010\nrack1-gpu1\nrack2-gpu1\nlogin")
	f.Add("a1b2c3\na1b2c4\na2b2c3\n007\n7")
	f.Add("n1-ib0\nn1-ib1\nn2-ib0\nn2-ib1\nn3-ib0\nn08\nn99\nn100\nx1y3\nx2y3\nx3y4\nx1y4")
	f.Fuzz(func(t *testing.T, s string) {
		var names []string
		for _, n := range strings.Split(s, "\n") {
			if hostNameChars.MatchString(n) {
				names = append(names, n)
			}
		}
		checkFoldRoundTrip(t, names)
	})
}

func FuzzSelect(f *testing.F) {
	for _, s := range []string{"all", "gpus:!h100", "gpus:&serving", "gpu[01-03,07]", "~gpu0[13]", "h200[1:2]", "w*,bastion"} {
		f.Add(s)
	}
	inv, err := Load("testdata/fleet.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		names, err := inv.SelectNames(pattern)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range names {
			if _, ok := inv.Host(n); !ok && n != "localhost" || seen[n] {
				t.Fatalf("SelectNames(%q) = %v: unknown or repeated %s", pattern, names, n)
			}
			seen[n] = true
		}
	})
}
