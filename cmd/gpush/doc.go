package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/modules"
	// The modules register themselves; `gpush doc` reads their docs.
	_ "github.com/gpush/gpush/modules/gpu"
	_ "github.com/gpush/gpush/modules/log"
	_ "github.com/gpush/gpush/modules/ssh"
	_ "github.com/gpush/gpush/modules/systemd"
)

func docCommand() *cli.Command {
	return &cli.Command{
		Name:      "doc",
		Usage:     "print a Lua module's reference (gpush doc gpu); without a name, list the modules",
		ArgsUsage: "[MODULE]",
		Action:    docRun,
	}
}

func docRun(c *cli.Context) error {
	w := c.App.Writer
	if c.Args().Len() > 1 {
		return usagef("doc: one MODULE at most, got %q", strings.Join(c.Args().Slice(), " "))
	}
	if c.Args().Len() == 0 {
		fmt.Fprintln(w, "modules (gpush doc MODULE for one):")
		for _, m := range modules.All() {
			fmt.Fprintf(w, "  %-10s %s\n", m.Name, firstLine(m.Doc))
		}
		return nil
	}
	name := c.Args().First()
	m, ok := modules.Lookup(name)
	if !ok {
		var names []string
		for _, m := range modules.All() {
			names = append(names, m.Name)
		}
		return usagef("doc: no module %q (modules: %s)", name, strings.Join(names, ", "))
	}
	if m.Doc == "" {
		return fmt.Errorf("doc: module %s has no documentation", name)
	}
	fmt.Fprint(w, strings.TrimRight(m.Doc, "\n")+"\n")
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
