package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/scripts"
	"github.com/gpush/gpush/termsafe"
)

func scriptsCommand() *cli.Command {
	return &cli.Command{
		Name:   "scripts",
		Usage:  "list the scripts gpush run finds, with each one's description and vars, in lookup order",
		Action: scriptsRun,
	}
}

type scriptDir struct {
	label string
	fsys  fs.FS
}

// scriptDirs are the places lua.ResolveScript looks, in its order.
func scriptDirs() []scriptDir {
	var dirs []scriptDir
	add := func(label, dir string) {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			dirs = append(dirs, scriptDir{label, os.DirFS(dir)})
		}
	}
	if wd, err := os.Getwd(); err == nil {
		add("./scripts", filepath.Join(wd, "scripts"))
	}
	for _, d := range strings.Split(os.Getenv("GPUSH_PATH"), ":") {
		if d != "" {
			add(d+" (GPUSH_PATH)", d)
		}
	}
	if cfg, err := os.UserConfigDir(); err == nil {
		d := filepath.Join(cfg, "gpush", "scripts")
		add(d, d)
	}
	return append(dirs, scriptDir{"embedded", scripts.FS})
}

func scriptsRun(c *cli.Context) error {
	w := termsafe.NewWriter(c.App.Writer, false) // script headers are files' text
	seen := map[string]string{}
	for _, d := range scriptDirs() {
		entries, err := scripts.List(d.fsys)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				fmt.Fprintf(c.App.ErrWriter, "gpush scripts: %s: %v\n", d.label, err)
				continue
			}
			return fmt.Errorf("scripts in %s: %w", d.label, err)
		}
		if len(entries) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s:\n", d.label)
		for _, e := range entries {
			desc := e.Summary
			if e.Module {
				desc = "(module for require) " + desc
			}
			if desc == "" {
				desc = "(no description: start the script with a -- comment)"
			}
			if by, ok := seen[e.Name]; ok {
				desc += " [shadowed by " + by + "]"
			} else {
				seen[e.Name] = d.label
			}
			fmt.Fprintf(w, "  %-22s %s\n", e.Name, desc)
			if !e.Module {
				fmt.Fprintf(w, "  %-22s %s\n", "", varsLine(d.fsys, e.Name))
			}
		}
	}
	return nil
}

// varsLine names a script's declared vars, or says why it has none.
func varsLine(fsys fs.FS, name string) string {
	src, err := fs.ReadFile(fsys, name)
	if err != nil {
		return fmt.Sprintf("vars: unreadable: %v", err)
	}
	decls, err := lua.ParseVarDecls(name, src)
	switch {
	case err != nil:
		return fmt.Sprintf("vars: bad declaration: %v", err)
	case len(decls) == 0:
		return "vars: none (takes no -e)"
	}
	return "vars: " + strings.Join(decls.Names(), ", ")
}

// scriptSourceHelp ends gpush run --help: how the script is given.
const scriptSourceHelp = "gpush run SCRIPT --help shows the script's description and vars. -c CODE runs Lua given\n" +
	"on the command line instead of a SCRIPT (named \"-c\" in errors; -e needs its vars declared\n" +
	"in CODE, as a script's: -- @var NAME TYPE HELP). Durations (--timeout) are seconds (5, 0.5)\n" +
	"or Go durations (1m30s)."

// chooseScript is the script gpush run runs: -c CODE, or the one SCRIPT
// argument resolved as lua.ResolveScript does. Asked for the script's help
// (gpush run SCRIPT --help), it prints that too.
func chooseScript(c *cli.Context) (*lua.Script, error) {
	var s *lua.Script
	if c.IsSet("code") {
		if c.Args().Len() > 0 {
			return nil, usagef("run: give a SCRIPT or -c CODE, not both (got -c and %q)", strings.Join(c.Args().Slice(), " "))
		}
		code := c.String("code")
		if strings.TrimSpace(code) == "" {
			return nil, usagef("run: -c: empty code")
		}
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("run -c: working dir: %w", err)
		}
		// require finds modules beside the operator, as in the REPL.
		s = &lua.Script{Name: "-c", Path: "-c", Source: []byte(code), Dir: wd}
	} else {
		if c.Args().Len() != 1 {
			return nil, usagef("run: want exactly one SCRIPT argument or -c CODE, got %d arguments (gpush scripts lists the scripts)", c.Args().Len())
		}
		var err error
		if s, err = lua.ResolveScript(c.Args().First(), lua.ResolveOptions{Embedded: scripts.FS}); err != nil {
			return nil, usagef("run: %w", err)
		}
	}
	if c.Bool(scriptHelpFlag) {
		w := termsafe.NewWriter(c.App.Writer, false) // a header is a file's text
		if err := scriptDoc(w, s); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "\nusage: gpush run %s -i INVENTORY [--limit PATTERN] [--check] [-e NAME=VALUE ...]\n", s.Name)
		fmt.Fprintln(w, "(gpush run --help lists every flag)")
	}
	return s, nil
}
