package main

import (
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/remote"
	"github.com/gpush/gpush/remote/helperbin"
)

// fleetFlags are the flags of the commands that open every selected host
// (run, repl): the inventory, how hosts are reached, and what a script sees.
func fleetFlags(forksUsage, timeoutUsage string) []cli.Flag {
	return append(inventoryFlags(),
		&cli.IntFlag{Name: "forks", Aliases: []string{"f"}, Value: 50, Usage: forksUsage},
		&cli.BoolFlag{Name: "check", Aliases: []string{"C"}, Usage: "change nothing: destructive calls say what they would do"},
		&cli.StringSliceFlag{Name: "extra-vars", Aliases: []string{"e"}, Usage: "vars for the script: k=v (v may hold commas: a,b), @file.yaml or {\"k\": ...} (repeatable; later wins); checked against the script's declared vars (gpush doc SCRIPT)"},
		durationFlag("timeout", nil, 0, timeoutUsage),
		&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "show debug lines and connection logs (on stderr)"},
		&cli.StringFlag{Name: "known-hosts", Usage: "known_hosts file (default ~/.ssh/known_hosts)", EnvVars: []string{"GPUSH_KNOWN_HOSTS"}},
		&cli.StringFlag{Name: "host-key-policy", Value: remote.HostKeyStrict, Usage: "strict (unknown hosts refused) or accept-new (learn unknown, refuse changed)"},
		&cli.BoolFlag{Name: "accept-new-host-keys", Usage: "same as --host-key-policy accept-new"},
	)
}

// fleet is what fleetFlags resolve to.
type fleet struct {
	inv     *inventory.Inventory
	hosts   []inventory.Host
	forks   int
	timeout time.Duration
	check   bool
	extra   map[string]any // every -e merged, as given
	// extraArgs are the -e arguments one by one, for checking against a
	// script's declared vars.
	extraArgs []extraArg
	logger    *slog.Logger
	remote    remote.Options
}

// parseFleet checks the fleet flags (usage errors name the flag), then loads
// the inventory and applies --limit.
func parseFleet(c *cli.Context) (*fleet, error) {
	f := &fleet{forks: c.Int("forks"), timeout: durationOf(c, "timeout"), check: c.Bool("check")}
	if f.forks < 1 {
		return nil, usagef("--forks %d: must be at least 1", f.forks)
	}
	if f.timeout < 0 {
		return nil, usagef("--timeout %v: must not be negative", f.timeout)
	}
	policy := c.String("host-key-policy")
	if c.Bool("accept-new-host-keys") {
		policy = remote.HostKeyAcceptNew
	}
	if policy != remote.HostKeyStrict && policy != remote.HostKeyAcceptNew {
		return nil, usagef("--host-key-policy %q: want %s or %s", policy, remote.HostKeyStrict, remote.HostKeyAcceptNew)
	}
	max, err := maxInputSize(c)
	if err != nil {
		return nil, err
	}
	if f.extraArgs, err = parseExtraArgs(c.StringSlice("extra-vars"), max); err != nil {
		return nil, err
	}
	f.extra = map[string]any{}
	for _, p := range f.extraArgs {
		merge(f.extra, p.vars)
	}
	if f.inv, f.hosts, err = selectHosts(c); err != nil {
		return nil, err
	}
	f.logger = slog.New(slog.DiscardHandler)
	if c.Bool("verbose") {
		f.logger = slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	f.remote = remote.Options{
		KnownHostsFile: c.String("known-hosts"),
		HostKeyPolicy:  policy,
		HelperSource:   helperbin.Source,
		HelperDigest:   helperbin.Digest,
		CompleteHop:    lua.SSHConfigHops("", f.logger),
		Logger:         f.logger,
	}
	return f, nil
}
