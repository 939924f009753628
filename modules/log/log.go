// Package log is the `log` Lua module: log lines from a script, streamed by
// the CLI with the host's name in front. See README.md.
package log

import (
	_ "embed"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

//go:embed README.md
var doc string

// Module is the log module as registered.
var Module = modules.Module{Name: "log", Loader: Loader, Doc: doc}

func init() { modules.Register(Module) }

// Loader pushes the log table for host h: a view of the functions every
// state shares (modules.SharedTable).
func Loader(L *glua.LState, h modules.Host) int {
	modules.Bind(L, h)
	L.Push(shared().View(L))
	return 1
}

var shared = modules.SharedFuncs(func() map[string]glua.LGFunction {
	fns := map[string]glua.LGFunction{}
	for _, lvl := range []string{modules.LevelDebug, modules.LevelInfo, modules.LevelWarn, modules.LevelError} {
		fns[lvl] = func(L *glua.LState) int {
			Emit(modules.HostOf(L), lvl, luaconv.Format(L, 1))
			return 0
		}
	}
	return fns
}())

// Emit sends one log line of host h.
func Emit(h modules.Host, level, msg string) {
	h.Emit(modules.Event{Host: h.Name(), Time: time.Now(), Kind: modules.EventLog, Level: level, Message: msg})
}
