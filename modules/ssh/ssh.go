// Package ssh is the `ssh` Lua module: run commands on the host and move
// files over the host's connection. See README.md. A Conn's errors name the
// host and the command or path, so calls raise them as "ssh.fn: err".
package ssh

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"strings"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
	"github.com/gpush/gpush/remote"
)

//go:embed README.md
var doc string

// Module is the ssh module as registered.
var Module = modules.Register(modules.Module{Name: "ssh", Doc: doc, Funcs: map[string]glua.LGFunction{
	"run": func(L *glua.LState) int { return modOf(L).run(L) },
	"put": func(L *glua.LState) int { return modOf(L).put(L) },
	"get": func(L *glua.LState) int { return modOf(L).get(L) },
}})

type mod struct{ h modules.Host }

func modOf(L *glua.LState) *mod { return &mod{h: modules.HostOf(L)} }

// checkArgv reads a command: an argv table, or a string the script author
// wrote, run as {"sh", "-c", cmd}.
func checkArgv(L *glua.LState, n int) []string {
	switch v := L.Get(n).(type) {
	case glua.LString:
		if strings.TrimSpace(string(v)) == "" {
			L.ArgError(n, "ssh.run: empty command")
		}
		return []string{"sh", "-c", string(v)}
	case *glua.LTable:
		argv, err := luaconv.StringList(v)
		if err != nil {
			L.ArgError(n, "ssh.run: argv: "+err.Error())
		}
		if len(argv) == 0 || argv[0] == "" {
			L.ArgError(n, "ssh.run: empty argv")
		}
		return argv
	default:
		L.ArgError(n, fmt.Sprintf("ssh.run: want an argv table or a command string, got %s", v.Type()))
	}
	return nil
}

func (m *mod) run(L *glua.LState) int {
	const fn = "ssh.run"
	argv := checkArgv(L, 1)
	o := luaconv.CheckOpts(L, 2, fn)
	opts := remote.RunOptions{Timeout: o.Duration("timeout", 0), Sudo: o.Bool("sudo", false)}
	if o.Has("stdin") {
		opts.Stdin = strings.NewReader(o.String("stdin", ""))
	}
	if o.Has("max_output") {
		// Bytes per stream; over it the command is stopped and the call
		// raises (default remote.DefaultMaxOutput).
		if opts.MaxOutput = o.Int("max_output", 0); opts.MaxOutput <= 0 {
			L.ArgError(2, fmt.Sprintf("%s: option max_output: %d is not a positive number of bytes", fn, opts.MaxOutput))
		}
	}
	o.Done()
	t := L.CreateTable(0, 6)
	if m.h.Check() {
		// The plan: the one command it would run, as a row.
		w := L.CreateTable(1, 0)
		row := L.CreateTable(0, 1)
		row.RawSetString("argv", luaconv.ToLua(L, argv))
		w.Append(row)
		t.RawSetString("ok", glua.LTrue)
		t.RawSetString("status", glua.LString(modules.StatusWould))
		t.RawSetString("would", w)
		L.Push(t)
		return 1
	}
	c := modules.Conn(L, m.h, fn)
	res, err := c.Run(modules.Ctx(L), argv, opts)
	if err != nil {
		modules.Raise(L, m.h, fn, err)
	}
	t.RawSetString("ok", glua.LBool(res.ExitCode == 0))
	t.RawSetString("status", glua.LString(modules.StatusOf(res.ExitCode == 0)))
	if res.ExitCode != 0 {
		t.RawSetString("reason", glua.LString(fmt.Sprintf("exit status %d", res.ExitCode)))
	}
	t.RawSetString("code", glua.LNumber(res.ExitCode))
	t.RawSetString("stdout", glua.LString(res.Stdout))
	t.RawSetString("stderr", glua.LString(res.Stderr))
	L.Push(t)
	return 1
}

func checkPath(L *glua.LState, n int, fn string) string {
	p := L.CheckString(n)
	if p == "" || strings.ContainsRune(p, 0) {
		L.ArgError(n, fmt.Sprintf("%s: invalid remote path %q", fn, p))
	}
	return p
}

func (m *mod) put(L *glua.LState) int {
	const fn = "ssh.put"
	p := checkPath(L, 1, fn)
	content := L.CheckString(2)
	o := luaconv.CheckOpts(L, 3, fn)
	mode := o.Int("mode", 0o644)
	o.Done()
	if mode < 0 || mode > math.MaxUint16 || mode&^0o7777 != 0 {
		L.ArgError(3, fmt.Sprintf("%s: option mode: %d is not a file mode (use 420 for 0644)", fn, mode))
	}
	t := L.CreateTable(0, 3)
	t.RawSetString("ok", glua.LTrue)
	if m.h.Check() {
		w := L.CreateTable(1, 0)
		row := L.CreateTable(0, 3)
		row.RawSetString("path", glua.LString(p))
		row.RawSetString("bytes", glua.LNumber(len(content)))
		row.RawSetString("mode", glua.LNumber(mode))
		w.Append(row)
		t.RawSetString("status", glua.LString(modules.StatusWould))
		t.RawSetString("would", w)
		L.Push(t)
		return 1
	}
	c := modules.Conn(L, m.h, fn)
	if err := c.Put(modules.Ctx(L), p, strings.NewReader(content), os.FileMode(mode)); err != nil {
		modules.Raise(L, m.h, fn, err)
	}
	t.RawSetString("status", glua.LString(modules.StatusDone))
	L.Push(t)
	return 1
}

func (m *mod) get(L *glua.LState) int {
	const fn = "ssh.get"
	p := checkPath(L, 1, fn)
	c := modules.Conn(L, m.h, fn)
	b, err := c.Get(modules.Ctx(L), p)
	if err != nil {
		modules.Raise(L, m.h, fn, err)
	}
	L.Push(glua.LString(b))
	return 1
}
