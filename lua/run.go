// Package lua is gpush's Lua runtime: one Lua state per host, the globals
// and modules a script sees, the runner that fans a script out over hosts
// (at most Forks at once), script resolution, and a Session for a REPL.
// Scripts are written against docs/lua-api.md.
package lua

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
	"github.com/gpush/gpush/remote"
)

// DefaultForks is how many hosts run at once when Options.Forks is 0.
const DefaultForks = 50

// DefaultStopGrace is Options.StopGrace's default.
const DefaultStopGrace = 2 * time.Second

// Host statuses. Skipped: the script left the host alone on purpose
// (skip()), which is not a failure.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"
	StatusUnreachable = "unreachable"
	StatusSkipped     = "skipped"
)

// LastReadingTimeout bounds the GPU reading the runner takes at the end of a
// host's script when a kill or a unit action came after its newest one.
const LastReadingTimeout = 10 * time.Second

// InterruptReadingTimeout bounds that reading for a host cut off by Ctrl-C
// or its --timeout: within StopGrace, with the kill's answer read first.
const InterruptReadingTimeout = time.Second

// Options tunes a run.
type Options struct {
	// Forks bounds how many hosts run at once (0: DefaultForks).
	Forks int
	// Timeout bounds each host's whole script (0: none).
	Timeout time.Duration
	// StopGrace is how long a host whose time is up (Timeout, Ctrl-C) may
	// take to stop before the runner stops waiting for it: a builtin that
	// runs long (a backtracking string.find) cannot be interrupted, so its
	// host is failed "did not stop: abandoned" and left running behind
	// (0: DefaultStopGrace).
	StopGrace time.Duration
	// MemoryLimit bounds each host's Lua data in bytes (0:
	// DefaultMemoryLimit); the host var gpush_lua_memory overrides it.
	// Over it the host fails with "memory limit", the others go on.
	MemoryLimit int64
	// Check makes destructive calls report what they would do.
	Check bool
	// ExtraVars (-e) are merged over each host's vars; they win.
	ExtraVars map[string]any
	// Dial opens the connection to a host.
	Dial func(context.Context, inventory.Host) (remote.Conn, error)
	// OnEvent receives events from the host goroutines, concurrently: it
	// must be safe for that. Nil sends log lines to Logger.
	OnEvent func(Event)
	// OnResult, when set, gets each host's final result as soon as it is
	// known (before its done event), from the host goroutines: a caller
	// that stops waiting for Run (a second Ctrl-C) still has those.
	OnResult func(HostResult)
	// OnHost, when set, gets for each host, once it has started, a
	// function that returns its result so far with the given status and
	// error (its stats, journal and rows, from the journal when it has
	// none): a caller that stops waiting for Run (a second Ctrl-C) still
	// shows what the unfinished hosts did.
	OnHost func(host string, sofar func(status, msg string) HostResult)
	// Logger gets debug logging (nil: discarded).
	Logger *slog.Logger
}

// HostResult is how one host's script ended.
type HostResult struct {
	Host string `json:"host"`
	// Status is "ok", "failed", "skipped" or "unreachable".
	Status string `json:"status"`
	// Value is the script's return value as Go data: map[string]any, []any,
	// string, float64, bool or nil.
	Value any `json:"value,omitempty"`
	// Rows are what the script recorded for the fleet table (report.row,
	// report.rows, the rows given to fail() or skip()), whatever its
	// outcome: a host that failed, timed out or was interrupted keeps them.
	Rows []any `json:"rows,omitempty"`
	// Columns is the script's report.columns choice.
	Columns []string              `json:"columns,omitempty"`
	Error   string                `json:"error,omitempty"`
	Elapsed time.Duration         `json:"elapsed"`
	Stats   modules.StatsSnapshot `json:"stats"`
	// Journal is what the host's run did (signals sent, units acted on,
	// each GPU's last reading), whatever its outcome.
	Journal modules.JournalSnapshot `json:"journal"`
	// FromJournal: the script left no rows (it was interrupted, timed
	// out, or failed after acting) and Rows were built from Journal.
	FromJournal bool `json:"from_journal,omitempty"`
}

// Run runs s on every host, at most o.Forks at once, and returns one
// result per host in the order of hosts. Cancelling ctx (Ctrl-C) ends every
// host promptly as failed "interrupted".
//
// The script's var declarations (Script.Vars) bind every host: extra vars
// it does not declare, or that do not convert, and a required var that a
// host lacks fail every host before any is dialled; declared host vars that
// do not convert fail their host.
func Run(ctx context.Context, s *Script, hosts []inventory.Host, o Options) []HostResult {
	results := make([]HostResult, len(hosts))
	// A script that does not compile fails the same way everywhere: say so
	// once per host without dialling any (callers such as gpush run check
	// Compile themselves first, to report it once and exit 1).
	_, err := s.Compile()
	var decls VarDecls
	if err == nil {
		decls, err = s.Vars()
	}
	if err == nil {
		o.ExtraVars, err = CheckExtraVars(s.Name, decls, o.ExtraVars)
	}
	if err == nil {
		err = CheckRequired(s.Name, decls, o.ExtraVars, HostVars(hosts))
	}
	if err != nil {
		for i, h := range hosts {
			results[i] = HostResult{Host: h.Name, Status: StatusFailed, Error: err.Error()}
			if o.OnResult != nil {
				o.OnResult(results[i])
			}
			emitDone(o, results[i])
		}
		return results
	}
	fanOut(ctx, len(hosts), o.Forks, func(i int, done func()) {
		runHost(ctx, s, decls, &hosts[i], &o, func(r HostResult) {
			results[i] = r
			done()
		})
	}, func(i int) {
		results[i] = HostResult{Host: hosts[i].Name, Status: StatusFailed, Error: "interrupted"}
		if o.OnResult != nil {
			o.OnResult(results[i])
		}
		emitDone(o, results[i])
	})
	return results
}

func emitDone(o Options, r HostResult) {
	if o.OnEvent == nil {
		return
	}
	msg := r.Status
	if r.Error != "" {
		msg += ": " + r.Error
	}
	o.OnEvent(Event{Host: r.Host, Time: time.Now(), Kind: modules.EventDone, Level: levelOf(r.Status), Message: msg})
}

func levelOf(status string) string {
	if status == StatusOK {
		return modules.LevelInfo
	}
	return modules.LevelError
}

// runHost runs the script on one host, on the calling goroutine, and
// reports its result once. When the host's time is up and the script has
// not stopped after StopGrace (a builtin cannot be interrupted), a timer
// reports the host failed "did not stop" without it, and the script's
// goroutine cleans up whenever it ends: no goroutine waits beside every
// host's script (its stack cost every concurrent host, BenchmarkLabMemory).
func runHost(parent context.Context, s *Script, decls VarDecls, h *inventory.Host, o *Options, report func(HostResult)) {
	hr := startHost(parent, s, h, o, report)
	defer hr.cancel()
	r := scriptOnHost(parent, hr.ctx, s, decls, h, hr.o, hr.setHS)
	hr.end(r)
}

// hostRun is what runHost keeps of one host while its script runs.
type hostRun struct {
	parent context.Context
	ctx    context.Context // the host's: parent with its timeout
	cancel context.CancelFunc
	h      *inventory.Host
	// o is the run's options with this host's OnEvent, which says nothing
	// once the host is abandoned (its lines would come after its result);
	// outer has the run's own, for the result.
	o, outer  *Options
	report    func(HostResult)
	start     time.Time
	abandoned atomic.Bool
	stopWatch func() bool

	// mu decides who reports: the script's end or the abandoning timer.
	mu       sync.Mutex
	reported bool
	hs       *hostState // for the stats of an abandoned host
	timer    *time.Timer
}

func startHost(parent context.Context, s *Script, h *inventory.Host, o *Options, report func(HostResult)) *hostRun {
	hr := &hostRun{parent: parent, h: h, outer: o, report: report, start: time.Now()}
	own := *o
	hr.o = &own
	if o.OnEvent != nil {
		o.OnEvent(Event{Host: h.Name, Time: hr.start, Kind: modules.EventStart, Message: s.Name})
		inner := o.OnEvent
		own.OnEvent = func(e Event) {
			if !hr.abandoned.Load() {
				inner(e)
			}
		}
	}
	// A context of the host's own, even without a timeout: the contexts
	// of its calls hang on it, not all on the run's (1000 hosts queued on
	// one context's lock for every call's timeout).
	if o.Timeout > 0 {
		hr.ctx, hr.cancel = context.WithTimeout(parent, o.Timeout)
	} else {
		hr.ctx, hr.cancel = context.WithCancel(parent)
	}
	grace := o.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	hr.stopWatch = context.AfterFunc(hr.ctx, func() {
		hr.mu.Lock()
		defer hr.mu.Unlock()
		if !hr.reported {
			hr.timer = time.AfterFunc(grace, hr.abandon)
		}
	})
	return hr
}

func (hr *hostRun) setHS(hs *hostState) {
	hr.mu.Lock()
	hr.hs = hs
	hr.mu.Unlock()
	if hr.outer.OnHost != nil {
		hr.outer.OnHost(hr.h.Name, func(status, msg string) HostResult {
			r := HostResult{Host: hr.h.Name, Status: status, Error: msg, Elapsed: time.Since(hr.start), Stats: hs.stats.Snapshot(),
				Journal: hs.stats.Journal().Snapshot()}
			r.Rows, r.Columns = hs.tableRows()
			fromJournal(&r)
			return r
		})
	}
}

// end reports the script's result, unless the host was abandoned.
func (hr *hostRun) end(r *HostResult) {
	hr.stopWatch()
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.timer != nil {
		hr.timer.Stop()
	}
	if !hr.reported {
		hr.reported = true
		hr.finish(r)
	}
}

// finish completes r and hands it over; mu is held.
func (hr *hostRun) finish(r *HostResult) {
	r.Host = hr.h.Name
	r.Elapsed = time.Since(hr.start)
	if hr.hs != nil {
		r.Stats = hr.hs.stats.Snapshot()
		r.Rows, r.Columns = hr.hs.tableRows()
		r.Journal = hr.hs.stats.Journal().Snapshot()
		fromJournal(r)
	}
	if hr.outer.OnResult != nil {
		hr.outer.OnResult(*r)
	}
	emitDone(*hr.outer, *r)
	hr.report(*r)
}

// fromJournal gives a host that ended without rows of its own the rows of
// its journal: one cut off by Ctrl-C or its time (even inside gpu.free,
// whose rows it never returned), or one that failed after it acted.
func fromJournal(r *HostResult) {
	if len(r.Rows) > 0 || hasRecords(r.Value) || r.Journal.Empty() || r.Status == StatusOK || r.Status == StatusSkipped {
		return
	}
	step := endStep(r)
	if step == "unfinished" && len(r.Journal.Signals)+len(r.Journal.Units) == 0 {
		return
	}
	r.Rows, r.FromJournal = journalRows(r.Journal, r.Stats, step), true
}

// abandon reports a host whose script did not stop within its grace.
func (hr *hostRun) abandon() {
	hr.mu.Lock()
	if hr.reported {
		hr.mu.Unlock()
		return
	}
	hr.reported = true
	hs := hr.hs
	res := &HostResult{Status: StatusFailed, Error: "interrupted; did not stop: abandoned"}
	if hr.parent.Err() == nil && errors.Is(hr.ctx.Err(), context.DeadlineExceeded) {
		res.Error = fmt.Sprintf("did not stop: abandoned after --timeout %s", hr.o.Timeout)
	}
	hr.abandoned.Store(true)
	hr.finish(res)
	hr.mu.Unlock()
	if hs != nil {
		// Closing the connection ends a helper call that ignores ctx
		// (this is the timer's own goroutine).
		if err := hs.close(); err != nil {
			hs.logger.Debug("close", "err", err)
		}
	}
}

// scriptOnHost connects and runs the script; setHS hands over the host's
// state as soon as there is one. parent is the run's context, ctx the
// host's (with its timeout).
//
// What stays on the host's goroutine while the script runs is small: the
// state lives in a scriptRun, and the setup and the result are built in
// calls of their own, so their frames are gone while the script waits in a
// builtin. A goroutine's stack shrinks only to four times what it uses
// there, and every concurrent host keeps one (BenchmarkLabMemory).
func scriptOnHost(parent, ctx context.Context, s *Script, decls VarDecls, h *inventory.Host, o *Options, setHS func(*hostState)) *HostResult {
	run := &scriptRun{parent: parent, ctx: ctx, s: s, o: o}
	defer run.close()
	if res := run.prepare(decls, h, setHS); res != nil {
		return res
	}
	run.L.Push(run.fn)
	helper.Tracef("lua: %s starts on %s", s.Name, h.Name)
	err := run.L.PCall(0, 1, nil)
	helper.Tracef("lua: %s returned on %s", s.Name, h.Name)
	return run.conclude(err)
}

// scriptRun is one host's script run, from its connection to its result.
type scriptRun struct {
	parent, ctx context.Context
	s           *Script
	o           *Options
	hs          *hostState
	L           *glua.LState
	guard       *memGuard
	fn          *glua.LFunction
}

// close releases what prepare made, the last made first.
func (r *scriptRun) close() {
	if r.guard != nil {
		r.guard.release()
	}
	if r.L != nil {
		r.L.Close()
	}
	if r.hs != nil {
		if err := r.hs.close(); err != nil {
			r.hs.logger.Debug("close", "err", err)
		}
	}
}

// ended classifies an error that may come from ctx ending: it fills res
// and says so when the run or the host's time is over.
func (r *scriptRun) ended(res *HostResult) bool {
	switch {
	case r.parent.Err() != nil:
		res.Status, res.Error = StatusFailed, "interrupted"
	case errors.Is(r.ctx.Err(), context.DeadlineExceeded):
		res.Status, res.Error = StatusFailed, fmt.Sprintf("timed out after %s", r.o.Timeout)
	default:
		return false
	}
	return true
}

// prepare connects and builds the Lua state with the script loaded; a
// non-nil result is the host's when it cannot.
func (r *scriptRun) prepare(decls VarDecls, h *inventory.Host, setHS func(*hostState)) *HostResult {
	res := &HostResult{}
	if r.ended(res) {
		return res
	}
	hs, err := newHostState(*h, *r.o, r.s.Name, decls)
	if err != nil {
		res.Status, res.Error = StatusFailed, err.Error()
		return res
	}
	r.hs = hs
	setHS(hs)
	limit, err := hostMemoryLimit(hs.vars, r.o.MemoryLimit)
	if err != nil {
		res.Status, res.Error = StatusFailed, fmt.Sprintf("host %s: %v", h.Name, err)
		return res
	}
	helper.Tracef("lua: connecting %s", h.Name)
	conn, err := hs.Conn(r.ctx)
	if err != nil {
		if !r.ended(res) {
			res.Status, res.Error = StatusUnreachable, err.Error()
		}
		return res
	}
	helper.Tracef("lua: connected %s", h.Name)
	if p, ok := conn.(interface{ Prestart(helper.Config) }); ok {
		// The local connection's helper runs in-process: its memory
		// stream starts while the Lua state is built, so that the
		// script's first snapshot finds it reading.
		p.Prestart(hs.cfg)
	}
	L, err := newLState(r.ctx, hs, r.s.Dir, r.s.FS)
	if err != nil {
		res.Status, res.Error = StatusFailed, err.Error()
		return res
	}
	r.L = L
	r.guard = newMemGuard(L, limit, hs.setFailed)
	L.SetContext(r.guard.wrap(r.ctx))
	if r.fn, err = loadShared(L, r.s.Source, r.s.Name); err != nil {
		res.Status, res.Error = StatusFailed, err.Error()
		return res
	}
	return nil
}

// conclude is the host's result once the script returned (callErr: how).
func (r *scriptRun) conclude(callErr error) *HostResult {
	res := &HostResult{}
	hs, L := r.hs, r.L
	lastReading(r.ctx, hs)
	if status, msg := hs.ending(); status != "" {
		res.Status, res.Error = status, msg
		return res
	}
	if r.ended(res) {
		return res
	}
	if callErr != nil {
		msg := callErr.Error()
		var apiErr *glua.ApiError
		if errors.As(callErr, &apiErr) {
			if isMessage(apiErr.Object) {
				msg = ExplainError(L, r.s.Name, r.s.Source, apiErr.Object.String())
			} else {
				// error({code = 42}), error(nil): no position, and a
				// table's tostring is its address.
				msg = raisedValue(apiErr.Object, apiErr.StackTrace, "error")
			}
			hs.logger.Debug("script error", "err", msg, "trace", apiErr.StackTrace)
		}
		res.Status, res.Error = StatusFailed, msg
		if cerr := hs.connError(); cerr != nil {
			res.Status = StatusUnreachable
		}
		return res
	}
	v, err := luaconv.FromLua(L.Get(-1))
	if err != nil {
		res.Status, res.Error = StatusFailed, fmt.Sprintf("%s: return value: %v", r.s.Name, err)
		return res
	}
	res.Status, res.Value = StatusOK, v
	return res
}

// lastReading takes one more GPU reading when a kill or a unit action came
// after the newest one (a drain that read 30720 MiB, then stopped a unit),
// so that the recap's figures are the GPUs' state at the end, not a reading
// the script made obsolete. A failed reading leaves the figures marked stale.
//
// A host cut off (Ctrl-C, its --timeout) gets it too, within
// InterruptReadingTimeout: its GPUs' state once the kills stopped.
func lastReading(ctx context.Context, hs *hostState) {
	if !hs.stats.NeedsReading() || hs.connError() != nil {
		helper.Tracef("lua: no last reading needed")
		return
	}
	helper.Tracef("lua: last reading")
	timeout := LastReadingTimeout
	if ctx.Err() != nil {
		ctx, timeout = context.WithoutCancel(ctx), InterruptReadingTimeout
	}
	c, err := hs.Conn(ctx)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var s helper.Snapshot
	if err := c.Helper(ctx, helper.VerbSnapshot, helper.SnapshotRequest{Config: hs.cfg}, &s); err != nil {
		hs.logger.Debug("last reading", "err", err)
		return
	}
	hs.stats.ObserveGPUs(s.GPUs, nil)
	hs.stats.ObserveHolders(s.Holders)
	hs.stats.Journal().Record(hs, &s)
}

// Compile parses and compiles the script, as every host's state would load
// it, so that a syntax error is found before any host is dialled. The error
// names the script and line ("free.lua:3: syntax error near 'x'").
func (s *Script) Compile() (*glua.FunctionProto, error) {
	chunk, err := parse.Parse(bytes.NewReader(s.Source), s.Name)
	if err != nil {
		var pe *parse.Error
		if !errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		line := pe.Pos.Line
		if line == parse.EOF {
			// The end of the source: an unclosed block, string or bracket.
			line = bytes.Count(bytes.TrimRight(s.Source, "\n"), []byte("\n")) + 1
			return nil, fmt.Errorf("%s:%d: %s at the end of the script (an unclosed block, string or bracket?)", s.Name, line, strings.TrimSpace(pe.Message))
		}
		if pe.Pos.Column == 0 && line > 1 {
			// Columns count from 1: the lexer stopped just past a newline
			// (an unterminated string), which belongs to the line before.
			line--
		}
		return nil, fmt.Errorf("%s:%d: %s near '%s'", s.Name, line, strings.TrimSpace(pe.Message), pe.Token)
	}
	proto, err := glua.Compile(chunk, s.Name)
	if err != nil {
		var ce *glua.CompileError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%s:%d: %s", s.Name, ce.Line, ce.Message)
		}
		return nil, fmt.Errorf("%s: compile: %w", s.Name, err)
	}
	return proto, nil
}

// HostVars maps each host's name to its inventory vars, for CheckRequired.
func HostVars(hosts []inventory.Host) map[string]map[string]any {
	m := make(map[string]map[string]any, len(hosts))
	for _, h := range hosts {
		m[h.Name] = h.Vars
	}
	return m
}
