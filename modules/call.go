package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/remote"
)

// Ctx is the context of the Lua state: the run's context with the host's
// timeout. Every blocking call a module makes must use it.
func Ctx(L *glua.LState) context.Context {
	if ctx := L.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// IsConnError reports whether err means the host cannot be reached any more
// (dial failed, connection lost, wherever it happened), as opposed to a
// failed command or helper: remote.IsUnreachable, which is the rule, or an
// error in the chain with a method `Unreachable() bool` returning true (a
// Conn of another package saying so). An ended context is neither.
func IsConnError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if remote.IsUnreachable(err) {
		return true
	}
	var u interface{ Unreachable() bool }
	return errors.As(err, &u) && u.Unreachable()
}

// Raise ends the current module call with a Lua error "fn: err". A
// connection error is also recorded on the host, so a script that dies of
// it ends unreachable, not failed.
func Raise(L *glua.LState, h Host, fn string, err error) {
	if IsConnError(err) {
		h.ConnFailed(err)
	}
	L.RaiseError("%s: %v", fn, err)
}

// Conn returns the host's connection or raises the dial error.
func Conn(L *glua.LState, h Host, fn string) remote.Conn {
	c, err := h.Conn(Ctx(L))
	if err != nil {
		// A dial error names the host itself ("gpu01 (10.0.0.1:22):
		// cannot connect ..."): not twice.
		var de *remote.DialError
		if !errors.As(err, &de) || de.Host != h.Name() {
			err = fmt.Errorf("connect to %s: %w", h.Name(), err)
		}
		Raise(L, h, fn, err)
	}
	return c
}

// HelperMargin is what a helper call may take beyond its request's Budget:
// the transport's round trips (starting the helper is HelperSetup's). A
// var so that tests can shorten it.
var HelperMargin = 10 * time.Second

// HelperSetup bounds starting a host's helper before a call, apart from the
// call's own time: the warm check and, on a cold host, the upload, which
// may wait for one of the controller's upload slots (a thousand cold hosts
// queue behind 32 uploads at a time: bounded by the call's own 40 s, 600
// of them would spend it in the queue). A var so that tests can shorten it.
var HelperSetup = 3 * time.Minute

// budgeted is a helper request that says how long it may take (the
// helper's request types do: helper.WaitFreeRequest.Budget, ...).
type budgeted interface{ Budget() time.Duration }

// CallHelper runs one helper verb on the host, raising a Lua error
// "fn: err" when it fails; a Conn's Helper errors already name the host and
// the verb ("gpu01: helper snapshot failed (exit 1): ..."), so they are not
// named again.
//
// A request with a Budget (the script's timeout, grace, ...) is cut off at
// that budget plus HelperMargin: the helper ends it by then itself, and a
// helper that does not (an old one, a host that stalls) is not waited for.
func CallHelper(L *glua.LState, h Host, fn, verb string, req, resp any) {
	c := Conn(L, h, fn)
	h.Logger().Debug("helper call", "verb", verb, "func", fn)
	parent := Ctx(L)
	if st, ok := c.(remote.HelperStarter); ok {
		start := time.Now()
		sctx, cancel := context.WithTimeout(parent, HelperSetup)
		err := st.StartHelper(sctx, verb)
		// Read before cancel, which would end sctx whatever happened: only
		// HelperSetup itself running out is "took over", never a start that
		// failed at once (a noexec folder, a refused one) or the run's end.
		cutOff := errors.Is(sctx.Err(), context.DeadlineExceeded) && parent.Err() == nil &&
			time.Since(start) >= HelperSetup
		cancel()
		if err != nil {
			if cutOff {
				err = setupCutOff(h.Name(), verb, err)
			}
			Raise(L, h, fn, err)
		}
	}
	ctx := parent
	b, bounded := req.(budgeted)
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, b.Budget()+HelperMargin)
		defer cancel()
	}
	// What the helper does streams into the journal as it is done (a
	// kill's TERM long before its grace ends).
	ctx = remote.WithProgress(ctx, func(b json.RawMessage) { FeedProgress(h, b) })
	if err := c.Helper(ctx, verb, req, resp); err != nil {
		if remote.Answered(err) {
			// Cut off, but the helper said what it did before it
			// stopped (the signals a kill sent): keep that.
			observeAnswered(h, resp)
			h.Stats().observeResponse(resp)
			h.Stats().Journal().record(h, resp)
		}
		if bounded && ctx.Err() != nil && parent.Err() == nil {
			// Our cut-off, not the run's or the host's deadline.
			err = fmt.Errorf("%s: helper %s gave no answer within %s (its request's %s and %s for the transport): %w",
				h.Name(), verb, b.Budget()+HelperMargin, b.Budget(), HelperMargin, err)
		}
		Raise(L, h, fn, err)
	}
	h.Stats().observeResponse(resp)
	h.Stats().Journal().record(h, resp)
}

// setupError is a helper start HelperSetup cut off: the message says so
// once, naming the host and verb once (the Conn's error names them too),
// and unwraps to the Conn's error.
type setupError struct {
	msg string
	err error
}

func (e *setupError) Error() string { return e.msg }
func (e *setupError) Unwrap() error { return e.err }

func setupCutOff(host, verb string, err error) error {
	prefix := fmt.Sprintf("%s: helper %s: ", host, verb)
	rest := strings.TrimPrefix(err.Error(), prefix)
	return &setupError{err: err, msg: fmt.Sprintf("%sstarting the helper (its warm check; on a cold host, the upload) took over %s: %s",
		prefix, HelperSetup, rest)}
}
