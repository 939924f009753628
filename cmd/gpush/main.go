// Command gpush frees and verifies GPU memory across a fleet: it runs a Lua
// script on every selected host at once over SSH.
//
// Exit status (as ansible-playbook's): 0 every host ok; 2 a host failed;
// 4 a host was unreachable (4 wins over 2: an unreached host may hide a
// failure too); 1 a usage or internal error; 130 (128+SIGINT, as a shell
// reports it) when a second interrupt quit a run at once.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/termsafe"
)

// gcPercent is the collector's target gpush runs with unless GOGC sets
// one. A run keeps every host's connection, Lua state and goroutines live
// for as long as the host runs, and a free keeps all of them live at once
// (its waits): the heap grows to live data x (1 + GOGC/100) before a
// collection, which sets the peak RSS. free_gpus.lua on 1000 lab hosts
// (bench/README.md): 306 MiB at 100, 251 at 50 before the stacks and
// goroutines per host were cut; after, 217-227 at 50 and 187 at 25, for
// 1.3 s more controller CPU (6.7 s in all, 1.3 ms a host).
const gcPercent = 25

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	stop, err := startCPUProfile(os.Getenv("GPUSH_CPUPROFILE"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpush: GPUSH_CPUPROFILE: %v\n", err)
		os.Exit(1)
	}
	helper.Tracef("gpush: main")
	code := run(os.Args, os.Stdout, os.Stderr)
	stop()
	helper.Tracef("gpush: exit %d", code)
	os.Exit(code)
}

// startCPUProfile writes a pprof CPU profile of the whole command to path
// (none when path is empty): the bench profiles the controller with it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(scriptHelp(app, interspersed(app, args)))
	if err == nil {
		return 0
	}
	var x exitError
	if !errors.As(err, &x) {
		// Errors quote hosts, files and tools: sanitized like every human
		// line (as a block: a message of several lines keeps them).
		fmt.Fprintf(termsafe.NewWriter(stderr, false), "gpush: %v\n", err)
	}
	return exitCode(err)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "gpush",
		Usage:     "free and verify GPU memory across a fleet, with Lua scripts run over SSH",
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once by run, with the exit code mapped there.
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		// -e services=a.service,b.service is one var holding a list, not
		// two -e arguments: the var's declared type decides what a comma means.
		DisableSliceFlagSeparator: true,
		Commands: []*cli.Command{
			runCommand(),
			replCommand(),
			hostsCommand(),
			scriptsCommand(),
			docCommand(),
			versionCommand(),
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(termsafe.NewWriter(c.App.ErrWriter, false), "gpush: unknown command %q (gpush help lists them)\n", name)
		},
	}
	for _, cmd := range app.Commands {
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = flagUsageError(cmd.Name, func() []cli.Flag { return cmd.Flags })
		}
	}
	app.OnUsageError = flagUsageError("", func() []cli.Flag { return app.Flags })
	app.Action = func(c *cli.Context) error {
		if c.Args().Len() > 0 {
			return usagef("unknown command %q (gpush help lists them)", c.Args().First())
		}
		return cli.ShowAppHelp(c)
	}
	return app
}

// inventoryFlags are shared by run and hosts.
func inventoryFlags() []cli.Flag {
	return []cli.Flag{
		// Repeatable, merged in order as Ansible merges several -i; never
		// split on commas (the app disables the separator): "a,b," is one host list.
		&cli.StringSliceFlag{Name: "inventory", Aliases: []string{"i"}, Usage: "inventory file or folder, inventory/NAME, \"h1,h2,\" or one host; repeat to merge", EnvVars: []string{"GPUSH_INVENTORY"}},
		&cli.StringFlag{Name: "limit", Aliases: []string{"l"}, Usage: "host pattern (groups, globs, node sets, !exclude, &intersect)"},
		durationFlag("inventory-timeout", nil, 0, "how long loading an inventory script (-i ./inv.py, --list and every --host) may take; 0: $GPUSH_INVENTORY_TIMEOUT, else 30"),
		&cli.StringFlag{Name: "max-input-size", Usage: "largest file read as inventory, vars, ssh_config or -e @file, and largest inventory script output (64M, 1G); default $GPUSH_MAX_INPUT_SIZE, else 32M"},
	}
}

// maxInputSize is --max-input-size in bytes (0: the inventory package's
// default, which reads $GPUSH_MAX_INPUT_SIZE).
func maxInputSize(c *cli.Context) (int64, error) {
	s := c.String("max-input-size")
	if s == "" {
		_, err := inventory.InputCap(0)
		return 0, err
	}
	n, err := inventory.ParseSize(s)
	if err != nil {
		return 0, usagef("--max-input-size %w", err)
	}
	return n, nil
}
