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
}

// Run runs s on every host, at most o.Forks at once, and returns one
// result per host in the order of hosts. Cancelling ctx (Ctrl-C) ends every
// host promptly as failed "interrupted".
//
// The script's var declarations (Script.Vars) bind every host: extra vars
// it does not declare, or that do not convert, fail every host before any
// is dialled; declared host vars that do not convert fail their host.
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
	fanOut(ctx, len(hosts), o.Forks, func(i int) {
		results[i] = runHost(ctx, s, decls, hosts[i], o)
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

// runHost runs the script on one host. The script runs on a goroutine of
// its own: when the host's time is up and it has not stopped after
// StopGrace (a builtin cannot be interrupted), runHost returns without it,
// the host failed "did not stop", and the goroutine cleans up whenever it
// ends.
func runHost(parent context.Context, s *Script, decls VarDecls, h inventory.Host, o Options) (res HostResult) {
	start := time.Now()
	if o.OnEvent != nil {
		o.OnEvent(Event{Host: h.Name, Time: start, Kind: modules.EventStart, Message: s.Name})
	}
	ctx := parent
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, o.Timeout)
		defer cancel()
	}
	// An abandoned host says nothing more: its lines would come after its
	// result.
	var abandoned atomic.Bool
	if inner := o.OnEvent; inner != nil {
		o.OnEvent = func(e Event) {
			if !abandoned.Load() {
				inner(e)
			}
		}
	}
	type outcome struct {
		res HostResult
		hs  *hostState
	}
	done := make(chan outcome, 1)
	var hsMu sync.Mutex
	var hsNow *hostState // for the stats of an abandoned host
	go func() {
		var hs *hostState
		r := scriptOnHost(parent, ctx, s, decls, h, o, func(x *hostState) {
			hsMu.Lock()
			hs, hsNow = x, x
			hsMu.Unlock()
		})
		done <- outcome{r, hs}
	}()
	finish := func(r HostResult, hs *hostState) HostResult {
		r.Host = h.Name
		r.Elapsed = time.Since(start)
		if hs != nil {
			r.Stats = hs.stats.Snapshot()
			r.Rows, r.Columns = hs.tableRows()
		}
		if o.OnResult != nil {
			o.OnResult(r)
		}
		emitDone(o, r)
		return r
	}
	var out outcome
	select {
	case out = <-done:
		return finish(out.res, out.hs)
	case <-ctx.Done():
	}
	grace := o.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case out = <-done:
		return finish(out.res, out.hs)
	case <-t.C:
	}
	res = HostResult{Status: StatusFailed, Error: "interrupted; did not stop: abandoned"}
	if parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.Error = fmt.Sprintf("did not stop: abandoned after --timeout %s", o.Timeout)
	}
	hsMu.Lock()
	hs := hsNow
	hsMu.Unlock()
	res = finish(res, hs)
	abandoned.Store(true)
	if hs != nil {
		// Closing the connection ends a helper call that ignores ctx; it
		// may wait for a dial, so not here.
		go func() {
			if err := hs.close(); err != nil {
				hs.logger.Debug("close", "err", err)
			}
		}()
	}
	return res
}

// scriptOnHost connects and runs the script; setHS hands over the host's
// state as soon as there is one. parent is the run's context, ctx the
// host's (with its timeout).
func scriptOnHost(parent, ctx context.Context, s *Script, decls VarDecls, h inventory.Host, o Options, setHS func(*hostState)) (res HostResult) {
	var hs *hostState
	defer func() {
		if hs != nil {
			if err := hs.close(); err != nil {
				hs.logger.Debug("close", "err", err)
			}
		}
	}()
	// ended classifies an error that may come from ctx ending.
	ended := func() bool {
		switch {
		case parent.Err() != nil:
			res.Status, res.Error = StatusFailed, "interrupted"
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			res.Status, res.Error = StatusFailed, fmt.Sprintf("timed out after %s", o.Timeout)
		default:
			return false
		}
		return true
	}
	if ended() {
		return res
	}
	var err error
	if hs, err = newHostState(h, o, decls); err != nil {
		res.Status, res.Error = StatusFailed, err.Error()
		return res
	}
	setHS(hs)
	limit, err := hostMemoryLimit(hs.vars, o.MemoryLimit)
	if err != nil {
		res.Status, res.Error = StatusFailed, fmt.Sprintf("host %s: %v", h.Name, err)
		return res
	}
	if _, err := hs.Conn(ctx); err != nil {
		if !ended() {
			res.Status, res.Error = StatusUnreachable, err.Error()
		}
		return res
	}
	L, err := newLState(ctx, hs, s.Dir, s.FS)
	if err != nil {
		res.Status, res.Error = StatusFailed, err.Error()
		return res
	}
	defer L.Close()
	guard := newMemGuard(L, limit, hs.setFailed)
	defer guard.release()
	L.SetContext(guard.wrap(ctx))
	fn, err := loadShared(L, s.Source, s.Name)
	if err != nil {
		res.Status, res.Error = StatusFailed, err.Error()
		return res
	}
	L.Push(fn)
	callErr := L.PCall(0, 1, nil)
	lastReading(ctx, hs)
	if status, msg := hs.ending(); status != "" {
		res.Status, res.Error = status, msg
		return res
	}
	if ended() {
		return res
	}
	if callErr != nil {
		msg := callErr.Error()
		var apiErr *glua.ApiError
		if errors.As(callErr, &apiErr) {
			msg = ExplainError(L, s.Name, s.Source, apiErr.Object.String())
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
		res.Status, res.Error = StatusFailed, fmt.Sprintf("%s: return value: %v", s.Name, err)
		return res
	}
	res.Status, res.Value = StatusOK, v
	return res
}

// lastReading takes one more GPU reading when a kill or a unit action came
// after the newest one (a drain that read 30720 MiB, then stopped a unit),
// so that the recap's figures are the GPUs' state at the end, not a reading
// the script made obsolete. A failed reading leaves the figures marked stale.
func lastReading(ctx context.Context, hs *hostState) {
	if !hs.stats.NeedsReading() || hs.connError() != nil || ctx.Err() != nil {
		return
	}
	c, err := hs.Conn(ctx)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, LastReadingTimeout)
	defer cancel()
	var s helper.Snapshot
	if err := c.Helper(ctx, helper.VerbSnapshot, helper.SnapshotRequest{Config: hs.cfg}, &s); err != nil {
		hs.logger.Debug("last reading", "err", err)
		return
	}
	hs.stats.ObserveGPUs(s.GPUs, nil)
	hs.stats.ObserveHolders(s.Holders)
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
