package main

import (
	"context"
	"fmt"
	"log/slog"
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
	"github.com/gpush/gpush/remote/helperbin"
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
		Flags: append(inventoryFlags(),
			&cli.IntFlag{Name: "forks", Aliases: []string{"f"}, Value: 50, Usage: "hosts run at once"},
			&cli.BoolFlag{Name: "check", Aliases: []string{"C"}, Usage: "change nothing: destructive calls say what they would do"},
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per host (JSON lines) on stdout"},
			&cli.BoolFlag{Name: "gather", Aliases: []string{"b"}, Usage: "print each distinct host line once at the end, with the hosts that printed it"},
			&cli.StringSliceFlag{Name: "extra-vars", Aliases: []string{"e"}, Usage: "vars for the script: k=v, @file.yaml or {\"k\": ...} (repeatable; later wins)"},
			&cli.DurationFlag{Name: "timeout", Usage: "per-host time limit (0: none)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "show debug lines and connection logs (on stderr)"},
			&cli.StringFlag{Name: "known-hosts", Usage: "known_hosts file (default ~/.ssh/known_hosts)", EnvVars: []string{"GPUSH_KNOWN_HOSTS"}},
			&cli.StringFlag{Name: "host-key-policy", Value: remote.HostKeyStrict, Usage: "strict (unknown hosts refused) or accept-new (learn unknown, refuse changed)"},
			&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "same as --host-key-policy accept-new"},
		),
		Action: runRun,
	}
}

func runRun(c *cli.Context) error {
	if c.Args().Len() != 1 {
		return usagef("run: want exactly one SCRIPT argument, got %d (gpush scripts lists them)", c.Args().Len())
	}
	name := c.Args().First()
	forks := c.Int("forks")
	if forks < 1 {
		return usagef("--forks %d: must be at least 1", forks)
	}
	if c.Duration("timeout") < 0 {
		return usagef("--timeout %v: must not be negative", c.Duration("timeout"))
	}
	policy := c.String("host-key-policy")
	if c.Bool("accept-new-host-keys") {
		policy = remote.HostKeyAcceptNew
	}
	if policy != remote.HostKeyStrict && policy != remote.HostKeyAcceptNew {
		return usagef("--host-key-policy %q: want %s or %s", policy, remote.HostKeyStrict, remote.HostKeyAcceptNew)
	}
	extra, err := parseExtraVars(c.StringSlice("extra-vars"))
	if err != nil {
		return err
	}
	script, err := lua.ResolveScript(name, lua.ResolveOptions{Embedded: scripts.FS})
	if err != nil {
		return usagef("run: %w", err)
	}
	_, hosts, err := selectHosts(c)
	if err != nil {
		return err
	}

	logger := slog.New(slog.DiscardHandler)
	if c.Bool("verbose") {
		logger = slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ropts := remote.Options{
		KnownHostsFile: c.String("known-hosts"),
		HostKeyPolicy:  policy,
		HelperSource:   helperbin.Source,
		Logger:         logger,
	}
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
		Forks:     forks,
		Timeout:   c.Duration("timeout"),
		Check:     c.Bool("check"),
		ExtraVars: extra,
		Dial: func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
			return remote.Dial(ctx, h, ropts)
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
		Logger: logger,
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
