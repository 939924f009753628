package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/lua/repl"
)

// The REPL itself (loop, dot commands, display) is lua/repl; this is its
// flags and wiring.
func replCommand() *cli.Command {
	return &cli.Command{
		Name:        "repl",
		Usage:       "evaluate Lua interactively on every selected host at once",
		Description: repl.Help,
		Flags:       fleetFlags("hosts evaluated at once", "time limit of each input on each host (0: none; Ctrl-C always interrupts)"),
		Action:      runRepl,
	}
}

func runRepl(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usagef("repl: unexpected argument %q (inputs are read from stdin)", c.Args().First())
	}
	f, err := parseFleet(c)
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("repl: current directory (for require): %w", err)
	}
	code, err := repl.Run(c.Context, repl.Config{
		Inventory: f.inv,
		Hosts:     f.hosts,
		Dir:       cwd,
		Lua: lua.Options{
			Forks:     f.forks,
			Check:     f.check,
			ExtraVars: f.extra,
			Dial:      lua.Dialer(f.remote),
			Logger:    f.logger,
		},
		Timeout: f.timeout,
		Verbose: c.Bool("verbose"),
		In:      c.App.Reader,
		Out:     c.App.Writer,
		Err:     c.App.ErrWriter,
	})
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}
