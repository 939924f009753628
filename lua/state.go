package lua

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
	// Registers the modules gpush ships, which every state loads.
	_ "github.com/gpush/gpush/modules/all"
	"github.com/gpush/gpush/modules/luaconv"
)

// Lib is the Lua library scripts can require (lib/NAME.lua as require("NAME")).
//
//go:embed lib/*.lua
var Lib embed.FS

// Event is one thing that happened on one host (a log line, start, done).
type Event = modules.Event

// newLState builds the Lua state of one host: safe standard libraries, the
// globals of docs/lua-api.md, every registered module, and a require that
// finds only modules, lib/ and the script's folder (dir on disk, or fsys for
// an embedded script; both may be empty).
func newLState(ctx context.Context, h *hostState, dir string, fsys fs.FS) (*glua.LState, error) {
	// The value stack and call stack start small and grow on demand to
	// gopher-lua's default sizes, so the limits (and "stack overflow") are
	// where they were; a fixed stack cost ~100 KiB per concurrent host
	// (BenchmarkFakeMemory), most of it never used by a script; 128 value
	// slots hold gpu_status.lua's deepest call (256 cost 2 KiB more a host).
	L := glua.NewState(glua.Options{
		SkipOpenLibs:        true,
		RegistrySize:        128,
		RegistryMaxSize:     glua.RegistrySize,
		RegistryGrowStep:    128,
		CallStackSize:       glua.CallStackSize,
		MinimizeStackMemory: true,
	})
	openStdLibs(L)
	L.SetContext(ctx)
	modules.Bind(L, h)

	setGlobals(L, h)
	loaded := L.GetField(L.Get(glua.RegistryIndex), "_LOADED").(*glua.LTable)
	for _, m := range modules.All() {
		if n := m.Loader(L, h); n != 1 {
			L.Close()
			return nil, fmt.Errorf("module %s: loader returned %d values, want 1", m.Name, n)
		}
		tbl := L.Get(-1)
		L.Pop(1)
		L.SetGlobal(m.Name, tbl)
		loaded.RawSetString(m.Name, tbl)
	}
	// Replace the file-system searcher with ours; keep package.preload.
	loaders := L.GetField(L.Get(glua.RegistryIndex), "_LOADERS").(*glua.LTable)
	loaders.RawSetInt(2, L.NewFunction(requireLoader(dir, fsys, true)))
	pkg := L.GetGlobal("package").(*glua.LTable)
	pkg.RawSetString("path", glua.LString(""))
	return L, nil
}

// wrapStdLibs puts gpush's own versions of some builtins into the template
// (every state shares them): the protected calls that re-raise what ends a
// host, the builtins the memory limit guards, and getfenv and setfenv,
// which keep the shared library's environment to it.
func wrapStdLibs(T *glua.LState) {
	rethrowStdLibs(T)
	guardStdLibs(T)
	guardLibEnvs(T)
	viewPairs(T)
}

// stdLibs is the order the standard libraries open in (package first:
// the others register in its package.loaded).
var stdLibs = []struct {
	name string
	fn   glua.LGFunction
}{
	{glua.LoadLibName, glua.OpenPackage}, {glua.BaseLibName, glua.OpenBase},
	{glua.TabLibName, glua.OpenTable}, {glua.StringLibName, glua.OpenString},
	{glua.MathLibName, glua.OpenMath}, {glua.OsLibName, glua.OpenOs},
	{glua.CoroutineLibName, glua.OpenCoroutine},
}

// openStdLibsFresh opens the standard libraries into L as scripts see
// them: os without what runs programs, touches files or leaves the
// process, no dofile or loadfile (files come in through require only).
func openStdLibsFresh(L *glua.LState) {
	for _, lib := range stdLibs {
		L.Push(L.NewFunction(lib.fn))
		L.Push(glua.LString(lib.name))
		L.Call(1, 0)
	}
	osTable := L.GetGlobal("os").(*glua.LTable)
	for _, f := range []string{"execute", "exit", "remove", "rename", "tmpname", "setenv", "getenv", "setlocale"} {
		osTable.RawSetString(f, glua.LNil)
	}
	for _, f := range []string{"dofile", "loadfile"} {
		L.SetGlobal(f, glua.LNil)
	}
}

// stdTemplate holds the standard libraries opened once for the process.
// Every state gets copies of its tables (same keys, same order, sized to
// fit rather than gopher-lua's 32+32 slots) holding the same builtin
// function values: opening them afresh cost ~30 KiB per concurrent host
// (BenchmarkFakeMemory), over half of it the tables' spare room and ~120
// function objects. Sharing those is invisible to a script: a builtin has
// no state of its own (it works on the calling state, and its upvalues
// are other builtins), setfenv refuses a Go function, and getfenv of one
// answers the caller's globals.
//
// The library tables of sharedLibs are not copied either: each state gets
// an empty table of its own that reads the template's through a protected
// metatable (every state reads them at once, which Go maps allow, and none
// can write them). A script may still set a field: it lands in its own
// table, in front of the shared one; pairs and next list both (viewPairs).
// Their ~60 functions cost ~12 KiB per concurrent host as copies
// (BenchmarkFakeMemory).
var stdTemplate = sync.OnceValue(func() *stdShare {
	T := glua.NewState(glua.Options{SkipOpenLibs: true})
	openStdLibsFresh(T)
	wrapStdLibs(T)
	sh := &stdShare{T: T, libs: map[*glua.LTable]*modules.SharedTable{},
		loaded: T.GetField(T.Get(glua.RegistryIndex), "_LOADED").(*glua.LTable)}
	T.G.Registry.ForEach(func(_, _ glua.LValue) { sh.registry++ })
	T.G.Global.ForEach(func(_, _ glua.LValue) { sh.globals++ })
	for _, name := range sharedLibs {
		lib := T.GetGlobal(name).(*glua.LTable)
		sh.libs[lib] = modules.ShareTable(lib)
	}
	return sh
})

// sharedLibs are the libraries every state reads from one table.
var sharedLibs = []string{glua.StringLibName, glua.TabLibName, glua.MathLibName, glua.OsLibName, glua.CoroutineLibName}

// stdShare is the template state and its shared libraries.
type stdShare struct {
	T    *glua.LState
	libs map[*glua.LTable]*modules.SharedTable
	// How many fields the template's registry and globals have; its
	// package.loaded.
	registry, globals int
	loaded            *glua.LTable
}

// addedGlobals is how many globals setGlobals adds to the template's.
const addedGlobals = 9

// rawOrShared is t's own field k, or that of the shared table behind it
// (a library's or a module's view).
func rawOrShared(t *glua.LTable, k string) glua.LValue {
	if v := t.RawGetString(k); v != glua.LNil {
		return v
	}
	if lib := modules.Behind(t); lib != nil {
		return lib.RawGetString(k)
	}
	return glua.LNil
}

// openStdLibs gives L the standard libraries as copies of stdTemplate's,
// and views of its shared ones.
func openStdLibs(L *glua.LState) {
	sh := stdTemplate()
	T := sh.T
	// The registry holds _LOADED and _LOADERS: gopher-lua's has room for 32.
	L.G.Registry = L.CreateTable(0, sh.registry)
	// The globals get room for what newLState adds (setGlobals' and the
	// modules'), package.loaded for the modules and two required ones:
	// gopher-lua's _G reserves 64 names (a map of 128 slots for ~50), and
	// a table that outgrows its size doubles.
	mods := len(modules.All())
	L.G.Global = L.CreateTable(0, sh.globals+addedGlobals+mods)
	L.Env = L.G.Global
	c := tableCopier{L: L, done: map[*glua.LTable]*glua.LTable{
		T.G.Global: L.G.Global, T.G.Registry: L.G.Registry}, own: map[*glua.LFunction]bool{},
		room: map[*glua.LTable]int{sh.loaded: mods + 2}}
	for lib, shared := range sh.libs {
		// string is its own __index, as the strings' metatable: a lookup
		// of __index reads the table itself, not through its metatable.
		if lib.RawGetString("__index") == lib {
			view := shared.ViewSized(L, 1)
			view.RawSetString("__index", view)
			c.done[lib] = view
			continue
		}
		c.done[lib] = shared.View(L)
	}
	// The searchers are the exception: the preload one reads
	// package.preload through its own environment (EnvironIndex), which
	// must be this state's globals.
	loaders := T.GetField(T.Get(glua.RegistryIndex), "_LOADERS").(*glua.LTable)
	loaders.ForEach(func(_, v glua.LValue) {
		if f, ok := v.(*glua.LFunction); ok {
			c.own[f] = true
		}
	})
	c.fill(L.G.Registry, T.G.Registry)
	c.fill(L.G.Global, T.G.Global)
	mt, ok := T.GetMetatable(glua.LString("")).(*glua.LTable)
	if !ok {
		panic("lua: the template state has no string metatable")
	}
	L.SetMetatable(glua.LString(""), c.table(mt))
}

// tableCopier copies a template's tables into L, each once (a table seen
// again, like string.__index or package.loaded's entries, is the same copy).
type tableCopier struct {
	L    *glua.LState
	done map[*glua.LTable]*glua.LTable
	own  map[*glua.LFunction]bool // builtins L gets a function value of its own for
	fns  map[*glua.LFunction]*glua.LFunction
	room map[*glua.LTable]int // fields a copy gets room for beyond the template's
}

func (c *tableCopier) table(src *glua.LTable) *glua.LTable {
	if t, ok := c.done[src]; ok {
		return t
	}
	arr, hash := 0, 0
	for k, _ := src.Next(glua.LNil); k != glua.LNil; k, _ = src.Next(k) {
		if n, ok := k.(glua.LNumber); ok && int(n) == arr+1 {
			arr++
		} else {
			hash++
		}
	}
	t := c.L.CreateTable(arr, hash+c.room[src])
	c.done[src] = t
	c.fill(t, src)
	if mt, ok := src.Metatable.(*glua.LTable); ok {
		t.Metatable = c.table(mt)
	}
	return t
}

// fill sets src's entries in dst, in src's order (what pairs shows).
func (c *tableCopier) fill(dst, src *glua.LTable) {
	for k, v := src.Next(glua.LNil); k != glua.LNil; k, v = src.Next(k) {
		dst.RawSet(c.value(k), c.value(v))
	}
}

func (c *tableCopier) value(v glua.LValue) glua.LValue {
	switch x := v.(type) {
	case *glua.LTable:
		return c.table(x)
	case *glua.LFunction:
		if !x.IsG || len(x.Upvalues) > 0 && c.own[x] {
			panic("lua: the standard library template holds a Lua function, or a searcher with upvalues")
		}
		if !c.own[x] {
			return x
		}
		if f, ok := c.fns[x]; ok {
			return f
		}
		f := c.L.NewFunction(x.GFunction)
		if c.fns == nil {
			c.fns = map[*glua.LFunction]*glua.LFunction{}
		}
		c.fns[x] = f
		return f
	case glua.LString, glua.LNumber, glua.LBool:
		return x
	}
	panic(fmt.Sprintf("lua: a %s in the standard library template", v.Type()))
}

var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// requireLoader finds NAME (a.b -> a/b.lua) in the script's folder, then in
// lib/. Names cannot climb out (no "..", no "/"), and os.Root keeps
// symlinks inside the script's folder. With share, a module of lib/ is the
// process's one (sharedLib).
func requireLoader(dir string, fsys fs.FS, share bool) glua.LGFunction {
	return func(L *glua.LState) int {
		name := L.CheckString(1)
		if !moduleName.MatchString(name) {
			L.Push(glua.LString(fmt.Sprintf("\n\t%q is not a module name (letters, digits, _ and dots)", name)))
			return 1
		}
		rel := strings.ReplaceAll(name, ".", "/") + ".lua"
		var tried []string
		if dir != "" {
			full := filepath.Join(dir, filepath.FromSlash(rel))
			tried = append(tried, full)
			if src, err := readInRoot(dir, rel); err == nil {
				return pushChunk(L, src, full)
			} else if !os.IsNotExist(err) {
				L.RaiseError("require %s: %v", name, err)
			}
		}
		if fsys != nil {
			tried = append(tried, rel+" (embedded script library)")
			if src, err := fs.ReadFile(fsys, rel); err == nil {
				return pushChunk(L, src, rel)
			}
		}
		tried = append(tried, "lib/"+rel+" (built in)")
		if src, err := fs.ReadFile(Lib, "lib/"+rel); err == nil {
			if share {
				return pushSharedLib(L, name, "lib/"+rel, src)
			}
			return pushChunk(L, src, "lib/"+rel)
		}
		L.Push(glua.LString("\n\tno file " + strings.Join(tried, "\n\tno file ")))
		return 1
	}
}

func readInRoot(dir, rel string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.ReadFile(rel)
}

func pushChunk(L *glua.LState, src []byte, chunk string) int {
	fn, err := loadShared(L, src, chunk)
	if err != nil {
		L.RaiseError("%v", err)
	}
	L.Push(fn)
	return 1
}

func setGlobals(L *glua.LState, h *hostState) {
	inv := L.CreateTable(0, 4)
	inv.RawSetString("name", glua.LString(h.inv.Name))
	inv.RawSetString("address", glua.LString(h.inv.Address))
	inv.RawSetString("groups", luaconv.ToLua(L, append([]string{}, h.inv.Groups...)))
	inv.RawSetString("vars", varsTable(L, h.inv.Vars))
	L.SetGlobal("host", inv)
	L.SetGlobal("vars", scriptVars(L, h))
	L.SetGlobal("vars_from", varsFrom(L, h))
	L.SetGlobal("check", glua.LBool(h.check))

	L.SetGlobal("fail", L.NewFunction(ender(h, StatusFailed)))
	L.SetGlobal("skip", L.NewFunction(ender(h, StatusSkipped)))
	L.SetGlobal("report", reportTable(L, h))
	L.SetGlobal("sleep", L.NewFunction(func(L *glua.LState) int {
		d := luaconv.CheckDuration(L, 1)
		ctx := modules.Ctx(L)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			L.RaiseError("sleep interrupted: %v", ctx.Err())
		case <-t.C:
		}
		return 0
	}))
	L.SetGlobal("print", L.NewFunction(printFunc(h, modules.EventLog)))
	L.SetGlobal("json", sharedJSON().View(L))
}

// rethrowStdLibs makes the template's protected calls (pcall, xpcall,
// coroutine.resume) re-raise, after the call returns, what must end the
// host: fail() and skip() end it even inside pcall, and so do Ctrl-C and
// --timeout. The functions are shared: they take the host from the
// calling state (modules.BoundHost).
func rethrowStdLibs(T *glua.LState) {
	rethrowing := func(orig glua.LValue) *glua.LFunction {
		return T.NewFunction(func(L *glua.LState) int {
			n := L.GetTop()
			args := make([]glua.LValue, n)
			for i := range args {
				args[i] = L.Get(i + 1)
			}
			L.SetTop(0)
			L.Push(orig)
			for _, a := range args {
				L.Push(a)
			}
			L.Call(n, glua.MultRet)
			if h, ok := modules.BoundHost(L); ok {
				if hs, ok := h.(*hostState); ok {
					if failed, msg := hs.failure(false); failed {
						L.Error(glua.LString(msg), 0)
					}
				}
			}
			if err := modules.Ctx(L).Err(); err != nil {
				L.RaiseError("%v", err)
			}
			return L.GetTop()
		})
	}
	T.SetGlobal("pcall", rethrowing(T.GetGlobal("pcall")))
	T.SetGlobal("xpcall", rethrowing(T.GetGlobal("xpcall")))
	co := T.GetGlobal("coroutine").(*glua.LTable)
	co.RawSetString("resume", rethrowing(co.RawGetString("resume")))
}

// printFunc is print(): its arguments tab-separated, as one event of kind
// (a log line in a run; EventPrint in a REPL, which shows it untagged).
func printFunc(h *hostState, kind string) glua.LGFunction {
	return func(L *glua.LState) int {
		parts := make([]string, 0, L.GetTop())
		for i := 1; i <= L.GetTop(); i++ {
			parts = append(parts, luaconv.Show(L.Get(i)))
		}
		h.Emit(Event{Kind: kind, Level: modules.LevelInfo, Message: strings.Join(parts, "\t")})
		return 0
	}
}

// varsTable converts vars for Lua; values that do not convert are skipped
// rather than failing the host (inventories may hold odd YAML).
// scriptVars is the vars global. For a script that declares vars it holds
// the declared vars and gpush's own (gpush_*), and reading any other name
// raises: a typo (vars.service for services) must not read as "not given",
// which a filter would take for "everyone". An undeclared inventory var is
// in host.vars. A script that declares nothing (a REPL, a -c one-liner)
// gets every var, and nil for a name that is not there.
func scriptVars(L *glua.LState, h *hostState) *glua.LTable {
	if len(h.decls) == 0 {
		return varsTable(L, h.vars)
	}
	t := L.CreateTable(0, len(h.decls))
	for k, v := range h.vars {
		if _, ok := h.decls.Lookup(k); ok || strings.HasPrefix(k, ReservedVarPrefix) {
			t.RawSetString(k, luaconv.ToLua(L, v))
		}
	}
	L.SetMetatable(t, strictVars(L, h, "vars"))
	return t
}

// varsFrom is the vars_from global: for each declared var given, where it
// came from (FromExtra "-e", FromInventory "inventory", FromDefault
// "default"); nil for one given nowhere. Strict as vars is.
func varsFrom(L *glua.LState, h *hostState) *glua.LTable {
	t := L.CreateTable(0, len(h.from))
	for k, v := range h.from {
		t.RawSetString(k, glua.LString(v))
	}
	if len(h.decls) > 0 {
		L.SetMetatable(t, strictVars(L, h, "vars_from"))
	}
	return t
}

// strictVars is the metatable of a declaring script's vars: a declared or
// gpush_* name absent is nil, any other name an error naming the script.
func strictVars(L *glua.LState, h *hostState, global string) *glua.LTable {
	mt := L.CreateTable(0, 1)
	mt.RawSetString("__index", L.NewFunction(func(L *glua.LState) int {
		k, ok := L.Get(2).(glua.LString)
		if ok {
			if _, declared := h.decls.Lookup(string(k)); declared || strings.HasPrefix(string(k), ReservedVarPrefix) {
				L.Push(glua.LNil)
				return 1
			}
		}
		name := L.Get(2).String()
		msg := fmt.Sprintf("%s.%s: %s declares no var %s", global, name, h.script, name)
		if c := h.decls.Closest(name); c != "" {
			msg += "; did you mean " + c + "?"
		} else {
			msg += " (its vars: " + strings.Join(h.decls.Names(), ", ") + ")"
		}
		if _, inv := h.inv.Vars[name]; inv {
			msg += "; the inventory's own is host.vars." + name
		}
		L.RaiseError("%s", msg)
		return 0
	}))
	return mt
}

func varsTable(L *glua.LState, vars map[string]any) *glua.LTable {
	t := L.CreateTable(0, len(vars))
	for k, v := range vars {
		t.RawSetString(k, luaconv.ToLua(L, v))
	}
	return t
}
