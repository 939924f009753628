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

// Module is the log module as registered: one function per level.
var Module = modules.Register(modules.Module{Name: "log", Doc: doc,
	Funcs: modules.FuncsFor([]string{modules.LevelDebug, modules.LevelInfo, modules.LevelWarn, modules.LevelError}, logAt)})

// logAt is the function that logs at level lvl.
func logAt(lvl string) glua.LGFunction {
	return func(L *glua.LState) int {
		Emit(modules.HostOf(L), lvl, luaconv.Format(L, 1))
		return 0
	}
}

// Emit sends one log line of host h.
func Emit(h modules.Host, level, msg string) {
	h.Emit(modules.Event{Host: h.Name(), Time: time.Now(), Kind: modules.EventLog, Level: level, Message: msg})
}
