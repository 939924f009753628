package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/remote"
	"github.com/gpush/gpush/report"
	"github.com/gpush/gpush/scripts"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a Lua script on every selected host at once",
		ArgsUsage: "SCRIPT",
		Description: "SCRIPT is a path, or a name looked up in ./scripts, $GPUSH_PATH, the config dir's\n" +
			"gpush/scripts and the embedded library (gpush scripts lists them).\n\n" +
			"Exit status: 0 every host ok; 2 a host failed; 4 a host unreachable (wins over 2);\n" +
			"1 a usage or internal error.",
		Flags: append(fleetFlags("hosts run at once", "per-host time limit (0: none)"),
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per host (JSON lines) on stdout"},
			&cli.BoolFlag{Name: "gather", Aliases: []string{"b"}, Usage: "print each distinct host line once at the end, with the hosts that printed it"},
		),
		Action: runRun,
	}
}

func runRun(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usagef("run: want exactly one SCRIPT argument, got %d (gpush scripts lists them)", c.Args().Len())
	}
	name := c.Args().First()
	script, err := lua.ResolveScript(name, lua.ResolveOptions{Embedded: scripts.FS})
	if err != nil {
		return usagef("run: %w", err)
	}
	// A syntax error is the same on every host: report it once, before the
	// inventory is read or any host dialled.
	if _, err := script.Compile(); err != nil {
		return usagef("run: %w", err)
	}
	decls, err := script.Vars()
	if err != nil {
		return usagef("run: %w", err)
	}
	f, err := parseFleet(c)
	if err != nil {
		return err
	}
	// Checked before any host is dialled: an unknown or empty var must not
	// reach a script that would read its absence as "every GPU".
	if f.extra, err = checkExtraVars(script.Name, decls, f.extraArgs); err != nil {
		return err
	}
	hosts := f.hosts
	stdout, stderr := c.App.Writer, c.App.ErrWriter
	outF, _ := stdout.(*os.File)
	errF, _ := stderr.(*os.File)
	p := report.New(report.Options{
		Out: stdout, Err: stderr,
		JSON:          c.Bool("json"),
		Color:         !c.Bool("json") && outF != nil && report.UseColor(outF),
		Progress:      errF != nil && report.IsTerminal(errF),
		ProgressAfter: 2 * time.Second,
		Gather:        c.Bool("gather"),
		Verbose:       c.Bool("verbose"),
		Total:         len(hosts),
		Fold:          inventory.FoldNodeSet,
	})

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				p.Tick()
			}
		}
	}()

	results := lua.Run(ctx, script, hosts, lua.Options{
		Forks:     f.forks,
		Timeout:   f.timeout,
		Check:     f.check,
		ExtraVars: f.extra,
		Dial: func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
			return remote.Dial(ctx, h, f.remote)
		},
		OnEvent: func(e lua.Event) {
			switch e.Kind {
			case modules.EventLog:
				p.Event(report.Event{Host: e.Host, Time: e.Time, Kind: e.Kind, Level: e.Level, Message: e.Message})
			case modules.EventDone:
				status, _, _ := strings.Cut(e.Message, ":")
				p.Done(report.Result{Host: e.Host, Status: status})
			}
		},
		Logger: f.logger,
	})
	rs := make([]report.Result, len(results))
	for i, r := range results {
		rs[i] = toReport(r)
	}
	p.Finish(rs)
	if ctx.Err() != nil && c.Context.Err() == nil {
		fmt.Fprintln(stderr, "gpush: interrupted")
	}
	if code := report.ExitCode(rs); code != 0 {
		return exitError{code}
	}
	return nil
}

func toReport(r lua.HostResult) report.Result {
	out := report.Result{Host: r.Host, Status: r.Status, Value: r.Value, Error: r.Error, Elapsed: r.Elapsed}
	s := r.Stats
	if len(s.GPUs) > 0 {
		out.Stats.HaveMem = true
		out.Stats.GPUs = len(s.GPUs)
		out.Stats.GPUsFreed = len(s.Freed)
		for _, g := range s.GPUs {
			out.Stats.MemBeforeMiB += g.BeforeMiB
			out.Stats.MemAfterMiB += g.AfterMiB
		}
	}
	return out
}
