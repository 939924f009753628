package modules

import (
	"context"
	"errors"
	"fmt"

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
		Raise(L, h, fn, fmt.Errorf("connect to %s: %w", h.Name(), err))
	}
	return c
}

// CallHelper runs one helper verb on the host, raising a Lua error
// "fn: err" when it fails; a Conn's Helper errors already name the host and
// the verb ("gpu01: helper snapshot failed (exit 1): ..."), so they are not
// named again.
func CallHelper(L *glua.LState, h Host, fn, verb string, req, resp any) {
	c := Conn(L, h, fn)
	h.Logger().Debug("helper call", "verb", verb, "func", fn)
	if err := c.Helper(Ctx(L), verb, req, resp); err != nil {
		Raise(L, h, fn, err)
	}
}
