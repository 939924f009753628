package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/report"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a Lua script on every selected host at once",
		ArgsUsage: "SCRIPT | -c CODE",
		Description: "SCRIPT is a path, or a name looked up in ./scripts, $GPUSH_PATH, the config dir's\n" +
			"gpush/scripts and the embedded library (gpush scripts lists them).\n\n" +
			"Exit status (ansible-playbook's): 0 every host ok or skipped; 2 a host failed; 4 a host\n" +
			"unreachable (wins over 2); 99 interrupted (Ctrl-C); 1 a usage or internal error;\n" +
			"130 quit at a second interrupt, the unfinished hosts named.\n\n" +
			"Ctrl-C stops every host; one stuck in a long builtin is given up after 2s\n" +
			"(\"did not stop\"), as is one past --timeout. Each host's Lua data is bounded by\n" +
			"--lua-memory (or the host var gpush_lua_memory): past it the host fails \"memory limit\".\n\n" + scriptSourceHelp,
		Flags: append(fleetFlags("hosts run at once", "per-host time limit (0: none)"),
			&cli.BoolFlag{Name: "json", Usage: "one JSON object per host (JSON lines) on stdout"},
			&cli.BoolFlag{Name: "gather", Aliases: []string{"b", "B", "by-output", "dshbak"}, Usage: "as clush -b: at the end, print each distinct whole host output once, under a header naming the hosts that printed exactly it"},
			&cli.BoolFlag{Name: "fold-numbers", Usage: "lines that differ only in figures (counts, MiB, durations, %; never pids, GPU indices or other ids) are one, each figure showing its hosts' values ([0,2-3] exact, [0.8..1.2] lowest to highest); with -b whole outputs, alone each line at its place in every host's order"},
			&cli.BoolFlag{Name: "wide", Usage: "fleet tables uncut (by default they fit the terminal, or 120 columns when stdout is not one)"},
			&cli.StringFlag{Name: "lua-memory", Value: "256MiB", Usage: "bound on each host's Lua data (the host var " + lua.MemoryVar + " overrides it)", EnvVars: []string{"GPUSH_LUA_MEMORY"}},
			&cli.StringFlag{Name: "code", Aliases: []string{"c"}, Usage: "Lua code to run instead of a SCRIPT: -c 'return gpu.mem()'"},
			&cli.BoolFlag{Name: scriptHelpFlag, Hidden: true},
		),
		Action: runRun,
	}
}

func runRun(c *cli.Context) error {
	script, err := chooseScript(c)
	if err != nil || c.Bool(scriptHelpFlag) {
		return err
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
	helper.Tracef("gpush: script read")
	f, err := parseFleet(c)
	if err != nil {
		return err
	}
	helper.Tracef("gpush: inventory read")
	// Checked before any host is dialled: an unknown or empty var must not
	// reach a script that would read its absence as "every GPU".
	if f.extra, err = checkExtraVars(script.Name, decls, f.extraArgs); err != nil {
		return err
	}
	if err := lua.CheckRequired(script.Name, decls, f.extra, lua.HostVars(f.hosts)); err != nil {
		return usagef("run: %w", err)
	}
	memLimit, err := lua.ParseSize(c.String("lua-memory"))
	if err != nil {
		return usagef("--lua-memory: %w", err)
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
		ProgressAfter: report.ProgressDelay,
		Gather:        c.Bool("gather"),
		FoldNumbers:   c.Bool("fold-numbers"),
		TableWidth:    tableWidth(c.Bool("wide"), outF),
		Hosts:         progressHosts(hosts),
		Width:         report.TermWidth(errF),
		Verbose:       c.Bool("verbose"),
		Total:         len(hosts),
		Fold:          inventory.FoldNodeSet,
	})

	// The first interrupt stops every host (each ends "interrupted", or
	// "did not stop" after the grace); the second quits at once.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	tickCtx, stopTick := context.WithCancel(context.Background())
	defer stopTick()
	tick := time.NewTicker(report.ProgressTick)
	defer tick.Stop()
	go func() {
		for {
			select {
			case <-tickCtx.Done():
				return
			case <-tick.C:
				p.Tick()
			}
		}
	}()

	addrs := make(map[string]string, len(hosts))
	for _, h := range hosts {
		addrs[h.Name] = h.Address
	}
	var mu sync.Mutex
	ended := make(map[string]lua.HostResult, len(hosts))
	sofar := make(map[string]func(status, msg string) lua.HostResult, len(hosts))
	var quit atomic.Bool // after the second interrupt nothing more is printed
	ran := make(chan []lua.HostResult, 1)
	go func() {
		ran <- lua.Run(ctx, script, hosts, lua.Options{
			Forks:       f.forks,
			Timeout:     f.timeout,
			Check:       f.check,
			ExtraVars:   f.extra,
			MemoryLimit: memLimit,
			Dial:        lua.Dialer(f.remote),
			OnEvent: func(e lua.Event) {
				if quit.Load() {
					return
				}
				switch e.Kind {
				case modules.EventLog, modules.EventKill, modules.EventExit, modules.EventFreed, modules.EventUnit:
					// What was done streams as it happens, not only at the
					// script's end: a host cut off keeps these lines too.
					p.Event(report.Event{Host: e.Host, Time: e.Time, Kind: e.Kind, Level: e.Level, Message: e.Message})
				case modules.EventStep:
					p.Step(e.Host, e.Message, e.Time)
				}
			},
			// The whole result, as soon as a host ends: --json streams it.
			OnResult: func(r lua.HostResult) {
				mu.Lock()
				ended[r.Host] = r
				mu.Unlock()
				if !quit.Load() {
					p.Done(toReport(r, addrs[r.Host]))
				}
			},
			// What a host did so far, for a quit before it ends.
			OnHost: func(host string, fn func(status, msg string) lua.HostResult) {
				mu.Lock()
				sofar[host] = fn
				mu.Unlock()
			},
			Logger: f.logger,
		})
	}()
	var results []lua.HostResult
	for results == nil {
		select {
		case results = <-ran:
			// A second interrupt already delivered when the stop ended
			// still quits: select chooses at random among ready cases.
			if ctx.Err() != nil && c.Context.Err() == nil {
				select {
				case sig := <-sigs:
					sigs <- sig
					results = nil
				default:
				}
			}
		case <-sigs:
			if ctx.Err() == nil {
				cancel()
				p.Interrupted()
				fmt.Fprintln(stderr, "gpush: interrupted: stopping every host (interrupt again to quit now)")
				continue
			}
			quit.Store(true)
			p.Quit()
			mu.Lock()
			results = make([]lua.HostResult, len(hosts))
			var left []string
			for i, h := range hosts {
				r, ok := ended[h.Name]
				if !ok {
					const why = "unfinished: quit at the second interrupt"
					r = lua.HostResult{Host: h.Name, Status: lua.StatusFailed, Error: why}
					if fn := sofar[h.Name]; fn != nil {
						r = fn(lua.StatusFailed, why)
					}
					left = append(left, h.Name)
				}
				results[i] = r
			}
			mu.Unlock()
			rs := make([]report.Result, len(results))
			for i, r := range results {
				rs[i] = toReport(r, addrs[r.Host])
			}
			code := p.Finish(rs)
			if len(left) == 0 {
				fmt.Fprintln(stderr, "gpush: quit at the second interrupt; every host had ended")
			} else {
				fmt.Fprintf(stderr, "gpush: quit at the second interrupt; unfinished: %s\n", inventory.FoldNodeSet(left))
			}
			return exitError{code}
		}
	}
	rs := make([]report.Result, len(results))
	for i, r := range results {
		rs[i] = toReport(r, addrs[r.Host])
	}
	code := p.Finish(rs)
	if ctx.Err() != nil && c.Context.Err() == nil {
		fmt.Fprintln(stderr, "gpush: interrupted")
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// toReport turns a host's result into what the report shows: the recap's
// figures are each GPU's first and newest readings (unknown ones counted
// apart, never summed), and what was (or under --check would be) stopped
// and killed, each process and unit once.
func toReport(r lua.HostResult, addr string) report.Result {
	out := report.Result{Host: r.Host, Address: addr, Status: r.Status, Value: r.Value, Rows: r.Rows, Columns: r.Columns,
		Error: r.Error, Elapsed: r.Elapsed, FromJournal: r.FromJournal}
	if !r.Journal.Empty() {
		out.Journal = r.Journal
	}
	s := r.Stats
	st := &out.Stats
	if len(s.GPUs) > 0 {
		st.HaveMem = true
		st.GPUs = len(s.GPUs)
		st.GPUsFreed = len(s.Freed)
		st.GPUsRestarting = len(s.Restarting)
		for _, g := range s.GPUs {
			if g.BeforeMiB < 0 {
				st.MemBeforeUnknown++
			} else {
				st.MemBeforeMiB += g.BeforeMiB
			}
			if g.AfterMiB < 0 {
				st.MemAfterUnknown++
			} else {
				st.MemAfterMiB += g.AfterMiB
			}
		}
		st.Stale = s.Stale
	}
	st.Exited, st.Killed, st.Survived = s.Kills.Exited, s.Kills.Killed, s.Kills.Survived
	st.AliveAfterTerm = s.Kills.AliveAfterTerm
	st.WouldKill, st.WouldKillMiB, st.WouldKillMiBUnknown = s.Kills.Would, s.WouldKillMiB, s.WouldKillMiBUnknown
	st.UnitsStopped, st.UnitsStarted = s.Units.Stopped, s.Units.Started
	st.UnitsUnchanged, st.UnitsFailed = s.Units.Unchanged, s.Units.Failed
	st.WouldStop, st.WouldStopMiB, st.WouldStopMiBUnknown = s.Units.WouldStop, s.Units.WouldStopMiB, s.Units.WouldStopMiBUnknown
	st.RestartersStopped, st.WouldStopRestarters = s.Managers.Stopped, s.Managers.WouldStop
	st.Changed = st.Exited+st.Killed+st.Survived+st.AliveAfterTerm+st.UnitsStopped+st.UnitsStarted+st.RestartersStopped+
		st.WouldKill+st.WouldStop+st.WouldStopRestarters > 0
	return out
}

// progressHosts are the names the progress line waits on.
func progressHosts(hs []inventory.Host) []string {
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	return names
}

// tableWidth is how wide fleet tables may be: the terminal's width when
// stdout is one, else 120 columns; --wide: no limit (-1).
func tableWidth(wide bool, out *os.File) int {
	if wide {
		return -1
	}
	if w := report.TermWidth(out)(); w > 0 && report.IsTerminal(out) {
		return w
	}
	return report.DefaultTableWidth
}
