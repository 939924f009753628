package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
	// The modules register themselves; `gpush doc` reads their docs.
	_ "github.com/gpush/gpush/modules/gpu"
	_ "github.com/gpush/gpush/modules/log"
	_ "github.com/gpush/gpush/modules/ssh"
	_ "github.com/gpush/gpush/modules/systemd"
	"github.com/gpush/gpush/scripts"
	"github.com/gpush/gpush/termsafe"
)

func docCommand() *cli.Command {
	return &cli.Command{
		Name:      "doc",
		Usage:     "print a Lua module's reference (gpush doc gpu) or a script's header and vars (gpush doc free_gpus); without a name, list the modules",
		ArgsUsage: "[MODULE|SCRIPT]",
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
			fmt.Fprintf(w, "  %-10s %s\n", m.Name, firstLine(m.Doc))
		}
		return nil
	}
	name := c.Args().First()
	m, ok := modules.Lookup(name)
	if !ok {
		// Not a module: a script, found where gpush run would find it.
		s, err := lua.ResolveScript(name, lua.ResolveOptions{Embedded: scripts.FS})
		if err != nil {
			var names []string
			for _, m := range modules.All() {
				names = append(names, m.Name)
			}
			return usagef("doc: no module or script %q (modules: %s; gpush scripts lists the scripts)", name, strings.Join(names, ", "))
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
		def := "-"
		if d.HasDefault {
			def = d.DefaultText
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", d.Name, d.Type, def, d.Help)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("doc %s: %w", s.Name, err)
	}
	return nil
}

// firstLine is the first non-heading, non-empty line of a README.
func firstLine(doc string) string {
	for _, l := range strings.Split(doc, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}
