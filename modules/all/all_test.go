package all_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpush/gpush/modules"
	_ "github.com/gpush/gpush/modules/all"
)

// modulesDir is the folder of the module packages, from this test's.
const modulesDir = ".."

// Every registered module is documented: its Doc is its README.md, titled
// with its name, naming each of its functions, and docs/lua-api.md has a
// section for it.
func TestModuleRegisteredIsDocumented(t *testing.T) {
	api := apiDoc(t)
	if len(modules.All()) == 0 {
		t.Fatal("no module registered")
	}
	for _, m := range modules.All() {
		readme, err := os.ReadFile(filepath.Join(modulesDir, m.Name, "README.md"))
		if err != nil {
			t.Errorf("module %s is registered without modules/%s/README.md: %v", m.Name, m.Name, err)
		} else if m.Doc != string(readme) {
			t.Errorf("module %s: its Doc is not its README.md", m.Name)
		}
		if !strings.HasPrefix(m.Doc, "# "+m.Name+": ") {
			t.Errorf("module %s: its doc does not start with a %q heading", m.Name, "# "+m.Name+": ")
		}
		if m.Summary() == "" {
			t.Errorf("module %s: its doc has no summary line for gpush doc", m.Name)
		}
		for fn := range m.Funcs {
			// gpu.mem( or log.debug|info|warn|error(
			call := regexp.MustCompile(regexp.QuoteMeta(m.Name) + `\.([A-Za-z_]+\|)*` + regexp.QuoteMeta(fn) + `\b`)
			if !call.MatchString(m.Doc) {
				t.Errorf("module %s: its README does not document %s.%s", m.Name, m.Name, fn)
			}
		}
		if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(m.Name) + `$`).Match(api) {
			t.Errorf("module %s: docs/lua-api.md has no \"## %s\" section", m.Name, m.Name)
		}
	}
}

// Every module documented or written is registered: a module folder with
// a README.md or a Register call, and a module section of docs/lua-api.md
// (a one-word lower-case heading), each name a registered module.
func TestModuleDocumentedIsRegistered(t *testing.T) {
	names := modules.Names()
	dirs, err := os.ReadDir(modulesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(modulesDir, d.Name())
		_, err := os.Stat(filepath.Join(dir, "README.md"))
		documented := err == nil
		if (documented || registers(t, dir)) && !slices.Contains(names, d.Name()) {
			t.Errorf("modules/%s has a README.md or calls modules.Register, but no module %s is registered: import it in modules/all (registered: %v)", d.Name(), d.Name(), names)
		}
	}
	api := apiDoc(t)
	for _, h := range regexp.MustCompile(`(?m)^## ([a-z_]+)$`).FindAllSubmatch(api, -1) {
		if !slices.Contains(names, string(h[1])) {
			t.Errorf("docs/lua-api.md documents a module %s, which is not registered (registered: %v)", h[1], names)
		}
	}
}

// The lists of the modules in the docs (the globals of docs/lua-api.md,
// what gpush doc shows in README.md) name exactly the registered ones.
func TestModuleListsInDocs(t *testing.T) {
	root := filepath.Join(modulesDir, "..")
	for _, l := range []struct{ file, list string }{
		{"docs/lua-api.md", `(?m)^\| (.*) \| the modules `},
		{"README.md", `a module's reference \(([^)]*)\)`},
	} {
		b, err := os.ReadFile(filepath.Join(root, l.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(l.list).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no list of the modules (%s)", l.file, l.list)
			continue
		}
		var listed []string
		for _, n := range regexp.MustCompile("`([a-z_]+)`").FindAllSubmatch(m[1], -1) {
			listed = append(listed, string(n[1]))
		}
		slices.Sort(listed)
		if !slices.Equal(listed, modules.Names()) {
			t.Errorf("%s lists the modules %v, the registered ones are %v", l.file, listed, modules.Names())
		}
	}
}

// apiDoc is docs/lua-api.md, the contract that has a section per module.
func apiDoc(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(modulesDir, "..", "docs", "lua-api.md"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// registers reports whether a Go file of dir, not a test, calls
// modules.Register.
func registers(t *testing.T, dir string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "modules.Register(") {
			return true
		}
	}
	return false
}
