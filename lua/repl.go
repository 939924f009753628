package lua

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/modules"
)

// This file is the REPL engine behind `gpush repl`: a Fleet of Sessions
// (one per reachable host) that evaluates each input on every selected host
// at once, plus the pieces a line editor needs (incomplete-chunk detection)
// and the gathering of equal outputs.

// Connect dials the session's host now instead of on first use, so that a
// REPL can leave out the hosts it cannot reach before the first prompt.
func (s *Session) Connect(ctx context.Context) error {
	if _, err := s.hs.Conn(ctx); err != nil {
		return fmt.Errorf("%s: %w", s.hs.inv.Name, err)
	}
	return nil
}

// Host is the name of the session's host.
func (s *Session) Host() string { return s.hs.inv.Name }

// Incomplete reports whether code is an unfinished chunk that more lines
// could complete: it does not parse as an expression and its statement
// parse fails at the end of input (an open block, string, comment or
// bracket), which is how the stock Lua REPL decides to keep reading.
func Incomplete(code string) bool {
	if _, err := parse.Parse(strings.NewReader("return "+code), "="); err == nil {
		return false
	}
	_, err := parse.Parse(strings.NewReader(code), "=")
	var pe *parse.Error
	return errors.As(err, &pe) && pe.Pos.Line == parse.EOF
}

// Fleet is the sessions of a REPL, one per reachable host, in inventory
// order. Its methods are safe for one caller at a time.
type Fleet struct {
	forks    int
	dir      string
	opts     Options
	rank     map[string]int // inventory order, for hosts opened later
	names    []string
	sessions map[string]*Session
	dropped  []HostResult // abandoned by EvalEach, for DropLost
}

// OpenFleet opens a Session on every host (dir as for NewSession) and
// connects them, at most o.Forks at once. Hosts that cannot be prepared or
// reached are closed and returned as results with status "unreachable"
// (or "failed" for a bad host var), in host order; the fleet holds the rest.
// Cancelling ctx abandons the hosts not yet connected as unreachable.
func OpenFleet(ctx context.Context, hosts []inventory.Host, dir string, o Options) (*Fleet, []HostResult) {
	forks := o.Forks
	if forks <= 0 {
		forks = DefaultForks
	}
	f := &Fleet{forks: forks, dir: dir, opts: o, rank: map[string]int{}, sessions: map[string]*Session{}}
	for i, h := range hosts {
		f.rank[h.Name] = i
	}
	return f, f.open(ctx, hosts)
}

// open connects sessions on hosts and adds them to the fleet, returning
// those that could not be opened.
func (f *Fleet) open(ctx context.Context, hosts []inventory.Host) []HostResult {
	sessions := make([]*Session, len(hosts))
	errs := make([]HostResult, len(hosts))
	fanOut(ctx, len(hosts), f.forks, func(i int, _ func()) {
		h := hosts[i]
		s, err := NewSession(h, f.dir, f.opts)
		if err != nil {
			errs[i] = HostResult{Host: h.Name, Status: StatusFailed, Error: err.Error()}
			return
		}
		if _, err := s.hs.Conn(ctx); err != nil {
			s.Close()
			errs[i] = HostResult{Host: h.Name, Status: StatusUnreachable, Error: err.Error()}
			return
		}
		sessions[i] = s
	}, func(i int) {
		errs[i] = HostResult{Host: hosts[i].Name, Status: StatusUnreachable, Error: "interrupted"}
	})
	var bad []HostResult
	for i, s := range sessions {
		if s == nil {
			bad = append(bad, errs[i])
			continue
		}
		f.names = append(f.names, hosts[i].Name)
		f.sessions[hosts[i].Name] = s
	}
	sort.SliceStable(f.names, func(i, j int) bool { return f.order(f.names[i]) < f.order(f.names[j]) })
	return bad
}

func (f *Fleet) order(name string) int {
	if r, ok := f.rank[name]; ok {
		return r
	}
	return len(f.rank)
}

// Reconnect opens sessions on hosts that are not in the fleet (left out at
// the start, or lost since): fresh Lua states, with the fleet's check mode.
// It returns those that still cannot be opened.
func (f *Fleet) Reconnect(ctx context.Context, hosts []inventory.Host) []HostResult {
	var todo []inventory.Host
	for _, h := range hosts {
		if f.sessions[h.Name] == nil {
			todo = append(todo, h)
		}
	}
	return f.open(ctx, todo)
}

// SetCheck switches check mode on every session, and for sessions that
// Reconnect opens later.
func (f *Fleet) SetCheck(on bool) {
	f.opts.Check = on
	for _, n := range f.names {
		f.sessions[n].SetCheck(on)
	}
}

// Check reports the fleet's check mode.
func (f *Fleet) Check() bool { return f.opts.Check }

// Forks is how many hosts evaluate at once.
func (f *Fleet) Forks() int { return f.forks }

// DropLost closes and removes the sessions whose connection failed (a call
// found the host gone) and returns them as unreachable results, with the
// hosts EvalEach abandoned (failed), so that a REPL can list them as left
// out until Reconnect.
func (f *Fleet) DropLost() []HostResult {
	lost := f.dropped
	f.dropped = nil
	kept := f.names[:0]
	for _, n := range f.names {
		s := f.sessions[n]
		err := s.Lost()
		if err == nil {
			kept = append(kept, n)
			continue
		}
		s.Close()
		delete(f.sessions, n)
		lost = append(lost, HostResult{Host: n, Status: StatusUnreachable, Error: "connection lost: " + err.Error()})
	}
	f.names = kept
	return lost
}

// Hosts lists the hosts of the fleet, in inventory order.
func (f *Fleet) Hosts() []string { return append([]string(nil), f.names...) }

// Session returns the session of host, or nil.
func (f *Fleet) Session(host string) *Session { return f.sessions[host] }

// EvalResult is what one input gave on one host.
type EvalResult struct {
	Host string
	// Values are the chunk's results as Go data (none for a statement).
	Values []any
	// Err is the evaluation error, without the host name in front (the
	// REPL shows the host, and equal errors gather across hosts).
	Err error
}

// Text is the result as the REPL shows it: the values (FormatValues) or
// "error: ..." .
func (r EvalResult) Text() string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	return FormatValues(r.Values)
}

// Eval runs code on the named hosts of the fleet (all when hosts is nil),
// at most forks at once, and returns one result per host in the order
// given. Cancelling ctx interrupts every host's evaluation; hosts that had
// finished keep their results, the others get an *Interrupted error.
func (f *Fleet) Eval(ctx context.Context, hosts []string, code string) []EvalResult {
	return f.EvalEach(ctx, hosts, code, nil)
}

// EvalEach is Eval calling each (when not nil) with every host's result as
// soon as it is known, from the hosts' goroutines (for a progress line).
//
// Once ctx ends, a host gets the fleet's StopGrace to stop; one that does
// not (stuck in a builtin that cannot be interrupted) is abandoned: its
// result says so, its session leaves the fleet (DropLost reports it) and is
// closed when the builtin returns. The others' results stand.
func (f *Fleet) EvalEach(ctx context.Context, hosts []string, code string, each func(EvalResult)) []EvalResult {
	if hosts == nil {
		hosts = f.names
	}
	var mu sync.Mutex
	out := make([]EvalResult, len(hosts))
	finished := make([]bool, len(hosts))
	abandoned := false
	for i, h := range hosts {
		out[i].Host = h
	}
	set := func(i int, vs []any, err error) {
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			return
		}
		out[i].Values, out[i].Err, finished[i] = vs, err, true
		if each != nil {
			each(out[i])
		}
	}
	all := make(chan struct{})
	go func() {
		defer close(all)
		fanOut(ctx, len(hosts), f.forks, func(i int, _ func()) {
			s := f.sessions[hosts[i]]
			if s == nil {
				set(i, nil, fmt.Errorf("host %s is not open in this REPL", hosts[i]))
				return
			}
			vs, err := s.eval(ctx, code)
			set(i, vs, err)
		}, func(i int) {
			set(i, nil, &Interrupted{ctx.Err()})
		})
	}()
	select {
	case <-all:
		return out
	case <-ctx.Done():
	}
	grace := f.opts.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-all:
		return out
	case <-t.C:
	}
	mu.Lock()
	abandoned = true
	res := append([]EvalResult(nil), out...)
	stuck := map[string]bool{}
	for i, h := range hosts {
		if !finished[i] {
			res[i].Values, res[i].Err = nil, errAbandoned
			stuck[h] = true
		}
	}
	mu.Unlock()
	kept := f.names[:0]
	for _, n := range f.names {
		if !stuck[n] {
			kept = append(kept, n)
			continue
		}
		s := f.sessions[n]
		delete(f.sessions, n)
		f.dropped = append(f.dropped, HostResult{Host: n, Status: StatusFailed, Error: errAbandoned.Error() + " (its session is closed)"})
		go func() {
			<-all
			s.Close()
		}()
	}
	f.names = kept
	return res
}

// errAbandoned is the result of a host that did not stop within the grace.
var errAbandoned = errors.New("interrupted; did not stop: abandoned")

// Close closes every session.
func (f *Fleet) Close() error {
	var errs []error
	for _, n := range f.names {
		if err := f.sessions[n].Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// Group is one distinct output and the hosts that gave it.
type Group struct {
	Hosts []string
	Text  string
	Err   bool
}

// Gather groups results with the same Text (errors apart from values), in
// the order each text was first seen. Results with nothing to show (a
// statement) are left out.
func Gather(rs []EvalResult) []Group {
	var out []Group
	idx := map[string]int{}
	for _, r := range rs {
		text := r.Text()
		if r.Err == nil && text == "" {
			continue
		}
		key := strconv.FormatBool(r.Err != nil) + "\x00" + text
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, Group{Text: text, Err: r.Err != nil})
		}
		out[i].Hosts = append(out[i].Hosts, r.Host)
	}
	return out
}

// FormatValues renders a chunk's results the way the Lua REPL prints
// them, tab-separated: nil, booleans, numbers (integers without ".0"),
// strings as they are, tables as compact JSON with sorted keys.
func FormatValues(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = formatValue(v)
	}
	return strings.Join(parts, "\t")
}

func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return formatNumber(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case map[string]any, []any:
		b, err := json.Marshal(x)
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

func formatNumber(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	case f == math.Trunc(f) && math.Abs(f) < 1e15:
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 14, 64)
}

// DotCommands are the REPL's own commands, for completion and .help.
var DotCommands = []string{".all", ".check", ".doc", ".exit", ".help", ".hosts", ".limit", ".reconnect"}

// Complete returns the completions of the identifier (dotted names allowed)
// ending prefix, from the globals of the fleet's first session and the
// fields of global tables. It is cheap enough for every Tab.
func (f *Fleet) Complete(prefix string) []string {
	if len(f.names) == 0 {
		return nil
	}
	s := f.sessions[f.names[0]]
	return s.complete(prefix)
}

func (s *Session) complete(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.L == nil {
		return nil
	}
	var names []string
	head, last := "", prefix
	tbl := s.L.G.Global
	if dot := strings.LastIndexByte(prefix, '.'); dot >= 0 {
		head, last = prefix[:dot+1], prefix[dot+1:]
		for _, part := range strings.Split(prefix[:dot], ".") {
			t, ok := tbl.RawGetString(part).(*glua.LTable)
			if !ok {
				return nil
			}
			tbl = t
		}
	}
	seen := map[string]bool{}
	add := func(k, _ glua.LValue) {
		ks, ok := k.(glua.LString)
		if ok && !seen[string(ks)] && strings.HasPrefix(string(ks), last) && !strings.HasPrefix(string(ks), "_") {
			seen[string(ks)] = true
			names = append(names, head+string(ks))
		}
	}
	tbl.ForEach(add)
	if lib := modules.Behind(tbl); lib != nil {
		lib.ForEach(add) // a shared library's view lists only what the state set
	}
	sort.Strings(names)
	return names
}
