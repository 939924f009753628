package lua

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

// Session is one host with one long-lived Lua state, for a REPL: globals
// set by one Eval are there for the next. It connects on first use. Only
// one Eval runs at a time.
type Session struct {
	mu    sync.Mutex
	hs    *hostState
	L     *glua.LState
	guard *memGuard
}

// NewSession prepares a session on h; dir is the folder require searches
// besides the built-in library ("" for none). o.Forks and o.Timeout are not
// used; o.Dial, o.Check, o.ExtraVars, o.MemoryLimit, o.OnEvent and o.Logger
// are.
func NewSession(h inventory.Host, dir string, o Options) (*Session, error) {
	hs, err := newHostState(h, o, "", nil)
	if err != nil {
		return nil, err
	}
	limit, err := hostMemoryLimit(hs.vars, o.MemoryLimit)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", h.Name, err)
	}
	L, err := newLState(context.Background(), hs, dir, nil)
	if err != nil {
		return nil, err
	}
	// A REPL shows print() as plain lines, log.* with their level.
	L.SetGlobal("print", L.NewFunction(printFunc(hs, EventPrint)))
	return &Session{hs: hs, L: L, guard: newMemGuard(L, limit, hs.setFailed)}, nil
}

// EventPrint is the kind of a print() line in a Session (in a run, print
// is a log line at level info).
const EventPrint = "print"

// Interrupted is the error of an evaluation stopped by its context (Ctrl-C,
// a REPL's --timeout): it reads "interrupted" and unwraps to the context's
// error, so a caller can still tell a deadline from a cancel.
type Interrupted struct{ Cause error }

func (e *Interrupted) Error() string { return "interrupted" }
func (e *Interrupted) Unwrap() error { return e.Cause }

// SetCheck switches check mode (the `check` global and what destructive
// calls do) for the next evaluations.
func (s *Session) SetCheck(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Module calls read hs.check only inside eval, which holds s.mu.
	s.hs.check = on
	if s.L != nil {
		s.L.SetGlobal("check", glua.LBool(on))
	}
}

// Lost is the error that ended the session's connection (a call failed
// because the host went away), or nil while it is usable.
func (s *Session) Lost() error { return s.hs.connError() }

// Eval runs code; an expression is evaluated as `return <code>`. It returns
// the results as Go data (values with no data form, e.g. functions, come
// back as their tostring). ctx bounds the call: cancelling it interrupts.
// Errors start with the host's name.
func (s *Session) Eval(ctx context.Context, code string) ([]any, error) {
	vs, err := s.eval(ctx, code)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.hs.inv.Name, err)
	}
	return vs, nil
}

// eval is Eval with errors that do not name the host, for a caller (the
// REPL's Fleet) that shows the host itself.
func (s *Session) eval(ctx context.Context, code string) ([]any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.L == nil {
		return nil, errors.New("session closed")
	}
	L := s.L
	s.guard.enter()
	L.SetContext(s.guard.wrap(ctx))
	defer L.SetContext(context.Background())
	// A session outlives a tripped limit: the next line may let go of the
	// data (big = nil), and the next measurement judges again.
	defer s.guard.forgive()
	loaded := "return " + code
	fn, err := L.LoadString(loaded)
	if err != nil {
		loaded = code
		if fn, err = L.LoadString(code); err != nil {
			// The parser's message ends in a newline; one line reads better.
			return nil, errors.New(strings.TrimSpace(err.Error()))
		}
	}
	L.SetTop(0)
	L.Push(fn)
	callErr := L.PCall(0, glua.MultRet, nil)
	defer L.SetTop(0)
	if failed, msg := s.hs.failure(true); failed {
		if strings.HasPrefix(msg, "memory limit") {
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("fail: %s", msg)
	}
	if callErr != nil {
		if ctx.Err() != nil {
			return nil, &Interrupted{ctx.Err()}
		}
		var apiErr *glua.ApiError
		if errors.As(callErr, &apiErr) {
			// What was nil, and the name meant, as a script's errors say.
			msg := raisedValue(apiErr.Object, apiErr.StackTrace, "error")
			if isMessage(apiErr.Object) {
				msg = ExplainError(L, "<string>", []byte(loaded), apiErr.Object.String())
			}
			return nil, errors.New(strings.TrimSpace(msg))
		}
		return nil, callErr
	}
	out := make([]any, 0, L.GetTop())
	for i := 1; i <= L.GetTop(); i++ {
		v, err := luaconv.FromLua(L.Get(i))
		if err != nil {
			v = L.Get(i).String()
		}
		out = append(out, v)
	}
	return out, nil
}

// Globals lists the global names, for completion.
func (s *Session) Globals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	if s.L == nil {
		return nil
	}
	s.L.G.Global.ForEach(func(k, _ glua.LValue) {
		if ks, ok := k.(glua.LString); ok && !strings.HasPrefix(string(ks), "_") {
			names = append(names, string(ks))
		}
	})
	return names
}

// Stats returns what the session's calls recorded.
func (s *Session) Stats() modules.StatsSnapshot { return s.hs.stats.Snapshot() }

// Close ends the Lua state and the connection.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.L != nil {
		s.guard.release()
		s.L.Close()
		s.L = nil
	}
	return s.hs.close()
}
