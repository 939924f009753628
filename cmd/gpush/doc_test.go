package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// luaValue runs code on localhost (no SSH) and returns its value as JSON.
func luaValue(t *testing.T, code string) json.RawMessage {
	t.Helper()
	rc, stdout, stderr := gpush(t, "run", "-i", "localhost", "--json", "-c", code)
	var res struct {
		Value json.RawMessage `json:"value"`
	}
	line, _, _ := strings.Cut(stdout, "\n")
	if rc != 0 || json.Unmarshal([]byte(line), &res) != nil {
		t.Fatalf("gpush run -c %q: exit %d\nstdout %s\nstderr %s", code, rc, stdout, stderr)
	}
	return res.Value
}

// Every global a real host state has is in gpush doc globals, and every
// global it describes exists.
func TestDocGlobalsMatchesState(t *testing.T) {
	var globals []string
	v := luaValue(t, "local k = {} for n in pairs(_G) do k[#k+1] = n end table.sort(k) return k")
	if err := json.Unmarshal(v, &globals); err != nil || len(globals) < 10 {
		t.Fatalf("globals %s: %v", v, err)
	}
	code, doc, stderr := gpush(t, "doc", "globals")
	if code != 0 {
		t.Fatalf("doc globals: exit %d %s", code, stderr)
	}
	for _, g := range globals {
		if !regexp.MustCompile(`(^|[\s(])` + regexp.QuoteMeta(g) + `\b`).MatchString(doc) {
			t.Errorf("global %s is not in gpush doc globals", g)
		}
	}
	// The first column of the globals table: the names gpush adds.
	_, table, _ := strings.Cut(doc, "globals:\n")
	table, _, _ = strings.Cut(table, "\n\n")
	for _, l := range strings.Split(table, "\n") {
		for _, f := range strings.Fields(strings.SplitN(strings.TrimSpace(l), "  ", 2)[0]) {
			name, _, _ := strings.Cut(f, "(")
			name, _, _ = strings.Cut(name, ".")
			if !strings.HasPrefix(l, "  ") || strings.HasPrefix(l, "   ") || name == "" {
				continue
			}
			// skip and report come with wt-i10results' branch.
			if !slices.Contains(globals, name) && name != "skip" && name != "report" {
				t.Errorf("gpush doc globals describes %s, which a script does not have", name)
			}
		}
	}
	if !strings.Contains(doc, "Lua 5.1 (gopher-lua") {
		t.Errorf("doc globals does not name the Lua version:\n%s", doc)
	}
}

// gpush doc util names every function require("util") returns.
func TestDocUtilCoversLibrary(t *testing.T) {
	var fns []string
	v := luaValue(t, `local k = {} for n, f in pairs(require("util")) do if type(f) == "function" then k[#k+1] = n end end table.sort(k) return k`)
	if err := json.Unmarshal(v, &fns); err != nil || len(fns) < 5 {
		t.Fatalf("util functions %s: %v", v, err)
	}
	code, doc, _ := gpush(t, "doc", "util")
	for _, f := range fns {
		if code != 0 || !strings.Contains(doc, "util."+f+"(") {
			t.Errorf("gpush doc util (exit %d) lacks util.%s(:\n%s", code, f, doc)
		}
	}
	code, list, _ := gpush(t, "doc")
	for _, topic := range []string{"\n  globals ", "\n  json ", "\n  util ", "\n  gpu "} {
		if code != 0 || !strings.Contains(list, topic) {
			t.Errorf("gpush doc lacks %q:\n%s", topic, list)
		}
	}
	code, _, stderr := gpush(t, "doc", "utl")
	if code != 1 || !strings.Contains(stderr, "globals, json, util") {
		t.Errorf("gpush doc utl: exit %d %s", code, stderr)
	}
}

// What gpush doc json says, run.
func TestDocJSONClaims(t *testing.T) {
	code, doc, _ := gpush(t, "doc", "json")
	if code != 0 {
		t.Fatalf("doc json: exit %d", code)
	}
	for _, c := range []struct{ claim, lua, want string }{
		{"({} is [])", `return json.encode({})`, `"[]"`},
		{`({[3] = true} is`, `return json.encode({[3] = true})`, `"{\"3\":true}"`},
		{"keys sorted", `return json.encode({b = 1, a = 2})`, `"{\"a\":2,\"b\":1}"`},
		{"(9007199254740992)", `return json.encode(2^53)`, `"9007199254740992"`},
		{"has a hole at 2", `local t = json.decode("[1,null,3]") return {t[1], t[2] == nil, t[3]}`, `[1,true,3]`},
		{"NaN or an", `return {pcall(json.encode, 0/0)}`, `[false,`},
		{"A function, a coroutine, a cycle", `local t = {} t.t = t return {(pcall(json.encode, t)), (pcall(json.encode, print))}`, `[false,false]`},
		{"Bad JSON raises", `return (pcall(json.decode, "{x"))`, `false`},
	} {
		if !strings.Contains(strings.Join(strings.Fields(doc), " "), c.claim) {
			t.Errorf("gpush doc json no longer says %q", c.claim)
		}
		if got := string(luaValue(t, c.lua)); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %s gives %s, doc says %s", c.claim, c.lua, got, c.want)
		}
	}
}

// Every GPUSH_* variable the code reads is in docs/operators.md, and so are
// the other variables it names there.
func TestDocsNameEveryEnvVar(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operators.md"))
	if err != nil {
		t.Fatal(err)
	}
	envName := regexp.MustCompile(`GPUSH_[A-Z0-9_]+`)
	found := map[string]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, n := range envName.FindAllString(string(b), -1) {
			found[n] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 4 {
		t.Fatalf("found only %v: is the walk in the repository?", found)
	}
	for n, p := range found {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("%s (read in %s) is not documented in docs/operators.md", n, p)
		}
	}
	for _, n := range []string{"NO_COLOR", "SSH_AUTH_SOCK"} {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("%s is not documented", n)
		}
	}
}

// What gpush doc globals says of the language, run.
func TestDocLuaLanguageClaims(t *testing.T) {
	if got := string(luaValue(t, "for i = 1, 3 do if i == 2 then goto out end end ::out:: return _VERSION")); got != `"Lua 5.1"` {
		t.Errorf("goto / _VERSION: %s", got)
	}
	if got := string(luaValue(t, "return {2^53 + 1 == 2^53, 2^52 + 1 == 2^52}")); got != `[true,false]` {
		t.Errorf("numbers: %s", got)
	}
	if code, _, stderr := gpush(t, "run", "-i", "localhost", "-c", "return 7 // 2"); code != 1 || !strings.Contains(stderr, "-c:1:") {
		t.Errorf("//: exit %d %s", code, stderr)
	}
	if got := string(luaValue(t, "return {io == nil, debug == nil, utf8 == nil, os.getenv == nil, os.execute == nil}")); got != `[true,true,true,true,true]` {
		t.Errorf("left-out libraries: %s", got)
	}
}
