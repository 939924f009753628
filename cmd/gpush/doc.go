package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/scripts"
	"github.com/gpush/gpush/termsafe"
)

func docCommand() *cli.Command {
	return &cli.Command{
		Name:      "doc",
		Usage:     "print a Lua module's reference (gpush doc gpu), the globals (gpush doc globals), json or a library module (gpush doc util), or a script's header and vars (gpush doc free_gpus); without a name, list them",
		ArgsUsage: "[MODULE|globals|json|util|SCRIPT]",
		Action:    docRun,
	}
}

func docRun(c *cli.Context) error {
	w := termsafe.NewWriter(c.App.Writer, false) // script headers are files' text
	if c.Args().Len() > 1 {
		return usagef("doc: one MODULE or SCRIPT at most, got %q", strings.Join(c.Args().Slice(), " "))
	}
	if c.Args().Len() == 0 {
		fmt.Fprintln(w, "modules (gpush doc MODULE for one; gpush doc SCRIPT for a script of gpush scripts):")
		for _, m := range modules.All() {
			fmt.Fprintf(w, "  %-10s %s\n", m.Name, m.Summary())
		}
		fmt.Fprintf(w, "  %-10s %s\n", "globals", "what every script sees besides the modules: host, vars, check, fail, sleep, print, ...; the Lua version")
		fmt.Fprintf(w, "  %-10s %s\n", "json", "json.encode, json.decode")
		for _, l := range libNames() {
			fmt.Fprintf(w, "  %-10s %s\n", l, libSummary(l))
		}
		return nil
	}
	name := c.Args().First()
	switch {
	case name == "globals":
		return globalsDoc(w)
	case name == "json":
		fmt.Fprint(w, jsonDoc)
		return nil
	case slices.Contains(libNames(), name):
		return libDoc(w, name)
	}
	m, ok := modules.Lookup(name)
	if !ok {
		// Not a module: a script, found where gpush run would find it.
		s, err := lua.ResolveScript(name, lua.ResolveOptions{Embedded: scripts.FS})
		if err != nil {
			names := append(append(modules.Names(), "globals", "json"), libNames()...)
			return usagef("doc: no module or script %q (topics: %s; gpush scripts lists the scripts)", name, strings.Join(names, ", "))
		}
		return scriptDoc(w, s)
	}
	if m.Doc == "" {
		return fmt.Errorf("doc: module %s has no documentation", name)
	}
	fmt.Fprint(w, strings.TrimRight(m.Doc, "\n")+"\n")
	return nil
}

// scriptDoc prints a script's header (its @var lines left out) and a table
// of its declared vars.
func scriptDoc(w io.Writer, s *lua.Script) error {
	h, err := scripts.ParseHeader(bytes.NewReader(s.Source))
	if err != nil {
		return fmt.Errorf("doc %s: %w", s.Name, err)
	}
	fmt.Fprintf(w, "%s (%s)\n\n", s.Name, s.Path)
	// The @var lines become the table below; so does a "vars:" heading
	// over them, and the blank lines they leave collapse into one.
	var text []string
	for _, l := range strings.Split(h.Text, "\n") {
		t := strings.TrimSpace(l)
		n := len(text)
		switch {
		case strings.HasPrefix(t, "@var"):
			if n > 0 && strings.TrimSpace(text[n-1]) == "vars:" {
				text = text[:n-1]
			}
		case t == "" && n > 0 && strings.TrimSpace(text[n-1]) == "":
		default:
			text = append(text, l)
		}
	}
	if t := strings.TrimSpace(strings.Join(text, "\n")); t != "" {
		fmt.Fprintln(w, t)
		fmt.Fprintln(w)
	}
	decls, err := s.Vars()
	if err != nil {
		return fmt.Errorf("doc: %w", err)
	}
	if len(decls) == 0 {
		fmt.Fprintf(w, "vars: none, so gpush run %s takes no -e (declare one with %s)\n", s.Name, lua.DeclareHint)
		return nil
	}
	fmt.Fprintf(w, "vars (gpush run %s -e NAME=VALUE):\n", s.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tTYPE\tDEFAULT\tHELP")
	for _, d := range decls {
		typ, def, help := string(d.Type), "-", d.Help
		switch {
		case d.HasDefault:
			def = d.DefaultText
		case d.Required():
			def = "(required)"
		default:
			typ += "?"
		}
		if d.EmptyOK {
			help += " (empty: " + d.EmptyText + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", d.Name, typ, def, help)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("doc %s: %w", s.Name, err)
	}
	return nil
}

// libNames are the modules of the built-in library (lua/lib/NAME.lua,
// require("NAME")).
func libNames() []string {
	entries, err := fs.ReadDir(lua.Lib, "lib")
	if err != nil {
		return nil // an embedded folder: only a broken build lacks it
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".lua"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	return names
}

// libHeader is a library module's leading comment block, without the
// comment dashes, and its source.
func libHeader(name string) (header []string, src []byte, err error) {
	src, err = fs.ReadFile(lua.Lib, path.Join("lib", name+".lua"))
	if err != nil {
		return nil, nil, fmt.Errorf("doc %s: %w", name, err)
	}
	for _, l := range strings.Split(string(src), "\n") {
		t, ok := strings.CutPrefix(l, "--")
		if !ok {
			break
		}
		header = append(header, strings.TrimPrefix(t, " "))
	}
	return header, src, nil
}

func libSummary(name string) string {
	h, _, err := libHeader(name)
	if err != nil || len(h) == 0 {
		return "require(\"" + name + "\")"
	}
	// "util: small table helpers ..." names itself; the rest is the summary.
	first, _, _ := strings.Cut(strings.TrimSpace(h[0]), "  ")
	if rest, ok := strings.CutPrefix(first, name+":"); ok {
		first = strings.TrimSpace(rest)
	}
	return first + " (require(\"" + name + "\"))"
}

var libFunc = regexp.MustCompile(`^function M\.([A-Za-z_][A-Za-z0-9_]*)\(`)

// libDoc prints a library module's header, then each function the header
// does not describe, with the comment written above it: the file is the
// reference, so `gpush doc util` cannot fall behind it.
func libDoc(w io.Writer, name string) error {
	h, src, err := libHeader(name)
	if err != nil {
		return err
	}
	header := strings.TrimSpace(strings.Join(h, "\n"))
	fmt.Fprintf(w, "%s (lua/lib/%s.lua, built in: local %s = require(%q))\n\n", name, name, name, name)
	if header != "" {
		fmt.Fprintln(w, header)
	}
	lines := strings.Split(string(src), "\n")
	var missing []string
	for i, l := range lines {
		m := libFunc.FindStringSubmatch(l)
		if m == nil || strings.Contains(header, name+"."+m[1]+"(") {
			continue
		}
		// The comment block right above the function.
		var comment []string
		for j := i - 1; j >= 0; j-- {
			t, ok := strings.CutPrefix(strings.TrimSpace(lines[j]), "--")
			if !ok {
				break
			}
			comment = append([]string{strings.TrimSpace(t)}, comment...)
		}
		text := strings.Join(comment, " ")
		sig := name + "." + strings.TrimSuffix(strings.TrimPrefix(l, "function M."), " ")
		// "-- map(list, fn): a new list" already holds the signature.
		if call, rest, ok := strings.Cut(text, ": "); ok && strings.HasPrefix(call, m[1]+"(") {
			sig, text = name+"."+call, rest
		}
		if text == "" {
			text = "(undocumented: see lua/lib/" + name + ".lua)"
		}
		missing = append(missing, fmt.Sprintf("  %s\n      %s", sig, text))
	}
	if len(missing) > 0 {
		fmt.Fprintln(w, "\nfunctions:")
		fmt.Fprintln(w, strings.Join(missing, "\n"))
	}
	return nil
}

// luaVersion names the Lua that runs scripts, with gopher-lua's module
// version where the build records it.
func luaVersion() string {
	v := "gopher-lua"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/yuin/gopher-lua" {
				v += " " + d.Version
			}
		}
	}
	return glua.LuaVersion + " (" + v + ", github.com/yuin/gopher-lua)"
}

func globalsDoc(w io.Writer) error {
	fmt.Fprintf(w, "Scripts are %s.\n", luaVersion())
	// The modules' line names what is registered, in the first column
	// (as wide as the others), so it cannot fall behind the registry.
	names := modules.Names()
	line := fmt.Sprintf("  %-20s  the modules (also require(%q), ...): gpush doc MODULE", strings.Join(names, " "), names[0])
	fmt.Fprint(w, strings.Replace(globalsText, modulesLine, line, 1))
	return nil
}

// modulesLine is where globalsText names the modules.
const modulesLine = "  MODULES"

// globalsText is the reference of the globals lua/state.go sets; the test
// compares its names with a real host state's _G.
const globalsText = `Lua 5.1's language and libraries, plus goto; numbers are 64-bit floats
(integers exact up to 2^53); no bit operators, no // (Lua 5.3's). Each host runs its own copy of the script in its own state, on this machine (the
controller): the modules reach the host over its connection.

globals:
  host                  {name, address, groups = {...}, vars = {...}}: the inventory's
                        host; host.vars as the inventory has them, unconverted
  vars                  host vars merged with -e (-e wins); declared vars (-- @var)
                        converted to their type; a var given nowhere is its default, or
                        nil if declared TYPE?. A script that declares vars sees only
                        those (and gpush_*): reading another is an error; one that
                        declares none sees every var, nil for the others
  vars_from             where each declared var came from: "-e", "inventory" or
                        "default"; nil for one given nowhere
  check                 true under --check: destructive calls say what they would do
                        and do nothing
  fail(fmt, ...)        end this host's script as failed, with that message
                        (string.format style); pcall cannot catch it
  skip(fmt, ...)        end this host's script as skipped: left alone on purpose (a
                        drain refused on a busy host), not a failure
  report                report.row(t), report.rows(list), report.columns{...}: fleet-table
                        rows that survive whatever ends the host, and its columns
  sleep(d)              wait d (seconds, or "500ms", "1m30s"); Ctrl-C and --timeout end it
  print(...)            a log line of this host (values tab-separated, tables as
                        compact JSON), as log.info
  json                  json.encode(v), json.decode(s): gpush doc json
  MODULES
  require(name)         the modules, then NAME.lua beside the script (for -c: in the
                        working directory), then the built-in library (gpush doc util)
  pcall xpcall          Lua's, except that fail(), skip(), Ctrl-C and --timeout pass
  coroutine.resume      through: they end the host, not the call

Lua's own: assert error ipairs pairs next select type tonumber tostring unpack
  rawequal rawget rawset getmetatable setmetatable getfenv setfenv load loadstring
  module newproxy collectgarbage _G _VERSION _GOPHER_LUA_VERSION _printregs; the
  string, table, math and coroutine libraries; package (require); os.time,
  os.clock, os.date, os.difftime.
Not there (scripts run on the controller): io, debug, dofile, loadfile,
  os.execute, os.exit, os.remove, os.rename, os.tmpname, os.getenv.

Each host's Lua data is bounded (--lua-memory, the host var gpush_lua_memory).
A runtime error names the script and line; a nil it can name is named:
  free.lua:12: gpu.holder is nil; did you mean gpu.holders? (attempt to call it)
`

const jsonDoc = `json (a global; no require)

  json.encode(v)   v as JSON text. Tables whose keys are exactly 1..n, and the empty
                   table, are arrays ({} is []); any other table is an object with its
                   keys sorted, number keys written as strings ({[3] = true} is
                   {"3":true}). Numbers without a fraction are written without one
                   (9007199254740992). A function, a coroutine, a cycle, NaN or an
                   infinity raises an error.
  json.decode(s)   the value of JSON text s: objects and arrays become tables, null
                   becomes nil (so [1,null,3] has a hole at 2). Bad JSON raises an
                   error naming what is wrong.

Results are JSON too: gpush run --json writes each host's returned value with the
same rules.
`
