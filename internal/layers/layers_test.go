package layers

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// pkgImports is what one package's files import: of its own files, and
// of its test files (in-package and external) apart, since test
// infrastructure (lab) may be imported by tests only.
type pkgImports struct {
	imports, testImports map[string]bool
}

// rule is one constraint of the layering.
type rule struct {
	// pkgs is the module-relative path of the packages under the rule:
	// it and every package under it.
	pkgs string
	// tests: their test files are held to forbid too.
	tests bool
	// forbid are the module-relative paths (each with its subpackages)
	// they must not reach, directly or through another package.
	forbid []string
	// ownOnly: their own files reach no package of the module outside pkgs.
	ownOnly bool
}

var rules = []rule{
	{pkgs: "remote", tests: true, forbid: []string{"inventory", "lua", "modules", "cmd"}},
	{pkgs: "helper", tests: true, forbid: []string{"inventory", "lua", "modules", "cmd", "remote"}},
	{pkgs: "helper", ownOnly: true},
	{pkgs: "modules", tests: true, forbid: []string{"lua", "cmd"}},
	{pkgs: "lua", tests: true, forbid: []string{"cmd"}},
	{pkgs: "inventory", ownOnly: true},
}

func TestLayers(t *testing.T) {
	root, module := moduleRoot(t)
	graph, err := readImports(root, module)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"remote", "helper", "modules", "lua", "inventory"} {
		if _, ok := graph[module+"/"+want]; !ok {
			t.Fatalf("package %s not found under %s: the rules would check nothing", want, root)
		}
	}
	for _, msg := range check(graph, module, rules) {
		t.Error(msg)
	}
}

// The checker names the offending import and the chain that reaches it.
func TestCheckNamesTheImport(t *testing.T) {
	const m = "example.com/m"
	set := func(ps ...string) map[string]bool {
		s := map[string]bool{}
		for _, p := range ps {
			s[m+"/"+p] = true
		}
		return s
	}
	graph := map[string]pkgImports{
		m + "/remote":      {imports: set("remote/util"), testImports: set("lab/sshd")},
		m + "/remote/util": {imports: set("inventory")},
		m + "/inventory":   {imports: set()},
		m + "/lab/sshd":    {imports: set()},
		m + "/helper":      {imports: set("helper/wire", "lab/x"), testImports: set("lab/sshd")},
		m + "/helper/wire": {imports: set()},
		m + "/lab/x":       {imports: set()},
	}
	got := check(graph, m, rules)
	want := []string{
		"example.com/m/helper imports example.com/m/lab/x, outside helper (helper -> lab/x)",
		"example.com/m/remote imports example.com/m/inventory, which remote must not reach (remote -> remote/util -> inventory)",
		"example.com/m/remote/util imports example.com/m/inventory, which remote must not reach (remote/util -> inventory)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Test files may use lab; a forbidden test import is caught.
	graph[m+"/remote"] = pkgImports{imports: set(), testImports: set("lua")}
	graph[m+"/remote/util"] = pkgImports{imports: set()}
	graph[m+"/lua"] = pkgImports{imports: set()}
	got = check(graph, m, rules)
	if len(got) != 2 || !strings.Contains(got[1], "remote imports example.com/m/lua (in its tests)") {
		t.Fatalf("got %q", got)
	}
}

// check returns a message for each package that breaks a rule, sorted.
func check(graph map[string]pkgImports, module string, rules []rule) []string {
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }
	under := func(p, dir string) bool { r := rel(p); return r == dir || strings.HasPrefix(r, dir+"/") }
	var msgs []string
	for _, r := range rules {
		for _, p := range sortedKeys(graph) {
			if !under(p, r.pkgs) {
				continue
			}
			bad := func(q string) string {
				if r.ownOnly && !under(q, r.pkgs) {
					return "outside " + r.pkgs
				}
				for _, f := range r.forbid {
					if under(q, f) {
						return "which " + r.pkgs + " must not reach"
					}
				}
				return ""
			}
			if r.ownOnly {
				// Only the build graph: test files may import lab.
				if q, chain := reach(graph, p, graph[p].imports, bad); q != "" {
					msgs = append(msgs, fmt.Sprintf("%s imports %s, %s (%s)", p, q, bad(q), chainString(chain, rel)))
				}
				continue
			}
			if q, chain := reach(graph, p, graph[p].imports, bad); q != "" {
				msgs = append(msgs, fmt.Sprintf("%s imports %s, %s (%s)", p, q, bad(q), chainString(chain, rel)))
			}
			if !r.tests {
				continue
			}
			if q, chain := reach(graph, p, graph[p].testImports, bad); q != "" {
				msgs = append(msgs, fmt.Sprintf("%s imports %s (in its tests), %s (%s)", p, q, bad(q), chainString(chain, rel)))
			}
		}
	}
	sort.Strings(msgs)
	return msgs
}

// reach walks from p's first imports through the module's packages' own
// imports, breadth first, to the first package bad names; it returns it
// and the shortest chain from p to it.
func reach(graph map[string]pkgImports, p string, first map[string]bool, bad func(string) string) (string, []string) {
	parent := map[string]string{}
	var queue []string
	for _, q := range sortedKeys(first) {
		parent[q] = p
		queue = append(queue, q)
	}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		if bad(q) != "" {
			chain := []string{q}
			for c := q; c != p; {
				c = parent[c]
				chain = append([]string{c}, chain...)
			}
			return q, chain
		}
		for _, n := range sortedKeys(graph[q].imports) {
			if _, seen := parent[n]; !seen && n != p {
				parent[n] = q
				queue = append(queue, n)
			}
		}
	}
	return "", nil
}

func chainString(chain []string, rel func(string) string) string {
	out := make([]string, len(chain))
	for i, c := range chain {
		out[i] = rel(c)
	}
	return strings.Join(out, " -> ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// moduleRoot finds go.mod above the test's directory and reads the
// module path from it.
func moduleRoot(t *testing.T) (string, string) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
					return dir, f[1]
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// readImports parses the import clauses of every Go file of the module
// (all build tags: a tagged file still counts) and keeps the imports of
// the module's own packages.
func readImports(root, module string) (map[string]pkgImports, error) {
	graph := map[string]pkgImports{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != root && err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("read imports: %w", err)
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return fmt.Errorf("read imports of %s: %w", path, err)
		}
		pkg := module
		if dir != "." {
			pkg += "/" + filepath.ToSlash(dir)
		}
		pi, ok := graph[pkg]
		if !ok {
			pi = pkgImports{imports: map[string]bool{}, testImports: map[string]bool{}}
			graph[pkg] = pi
		}
		into := pi.imports
		if strings.HasSuffix(name, "_test.go") {
			into = pi.testImports
		}
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return fmt.Errorf("read imports of %s: %w", path, err)
			}
			if p == module || strings.HasPrefix(p, module+"/") {
				into[p] = true
			}
		}
		return nil
	})
	return graph, err
}
