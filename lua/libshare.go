package lua

import (
	"fmt"
	"sync"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

// The built-in library (lib/NAME.lua) runs once for the process: its
// module table is a shared table (modules.SharedTable) that every state's
// require returns a view of. Run in each state, lib/util.lua cost a
// concurrent host ~10 KiB (BenchmarkFakeMemory): its table of functions,
// their closures and its lookup tables.
//
// A library function runs on the calling state's stack (errors name the
// caller's line, callbacks run there), with the globals of the state the
// library ran in: the standard libraries and json, all shared and
// stateless. So a script's own replacement of a global (tostring, say) is
// not what util sees, and util.pluck calls util's map, not one a script
// set in its view. Those functions must not change once shared: lib/
// modules assign no upvalue after loading, getfenv of one answers the
// caller's globals (as for a builtin), and setfenv refuses them.
type libModule struct {
	once sync.Once
	t    *modules.SharedTable
	err  error
}

var (
	libModules sync.Map // name -> *libModule
	// libEnvs are the globals the library modules ran in: the
	// environment of each of their functions.
	libEnvs sync.Map // *glua.LTable -> struct{}
)

// sharedLib is lib module name (its source src, chunk name chunk), run
// once for the process.
func sharedLib(name, chunk string, src []byte) (*modules.SharedTable, error) {
	v, _ := libModules.LoadOrStore(name, &libModule{})
	m := v.(*libModule)
	m.once.Do(func() { m.t, m.err = runLib(name, chunk, src) })
	return m.t, m.err
}

// runLib runs a library module in a state of its own: the standard
// libraries and json as scripts have them, and a require that finds lib/
// only, each module run there afresh (a cycle then ends as require's own).
func runLib(name, chunk string, src []byte) (*modules.SharedTable, error) {
	S := glua.NewState(glua.Options{SkipOpenLibs: true})
	openStdLibs(S)
	S.SetGlobal("json", sharedJSON().View(S))
	loaders := S.GetField(S.Get(glua.RegistryIndex), "_LOADERS").(*glua.LTable)
	loaders.RawSetInt(2, S.NewFunction(requireLoader("", nil, false)))
	S.GetGlobal("package").(*glua.LTable).RawSetString("path", glua.LString(""))
	libEnvs.Store(S.G.Global, struct{}{})
	fn, err := loadShared(S, src, chunk)
	if err != nil {
		return nil, err
	}
	S.Push(fn)
	S.Push(glua.LString(name))
	if err := S.PCall(1, 1, nil); err != nil {
		return nil, fmt.Errorf("require %s: %w", name, err)
	}
	t, ok := S.Get(-1).(*glua.LTable)
	if !ok {
		return nil, fmt.Errorf("require %s: %s returned a %s, not a table", name, chunk, S.Get(-1).Type())
	}
	return modules.ShareTable(t), nil
}

// pushSharedLib pushes a loader that returns L's view of the shared module.
func pushSharedLib(L *glua.LState, name, chunk string, src []byte) int {
	t, err := sharedLib(name, chunk, src)
	if err != nil {
		L.RaiseError("%v", err)
	}
	L.Push(L.NewFunction(func(L *glua.LState) int {
		L.Push(t.View(L))
		return 1
	}))
	return 1
}

func isLibEnv(v glua.LValue) bool {
	t, ok := v.(*glua.LTable)
	if !ok {
		return false
	}
	_, shared := libEnvs.Load(t)
	return shared
}

// guardLibEnvs wraps the template's getfenv and setfenv: getfenv answers
// the caller's globals for a library function (or a level running one),
// and setfenv refuses to change one, which would change it for every
// host, from goroutines reading it.
func guardLibEnvs(T *glua.LState) {
	getfenv := T.GetGlobal("getfenv").(*glua.LFunction)
	T.SetGlobal("getfenv", T.NewFunction(func(L *glua.LState) int {
		n := callOrig(L, getfenv)
		if n == 1 && isLibEnv(L.Get(-1)) {
			L.Pop(1)
			L.Push(L.G.Global)
		}
		return n
	}))
	setfenv := T.GetGlobal("setfenv").(*glua.LFunction)
	T.SetGlobal("setfenv", T.NewFunction(func(L *glua.LState) int {
		var target glua.LValue = glua.LNumber(1)
		if L.GetTop() > 0 {
			target = L.Get(1)
		}
		switch v := target.(type) {
		case *glua.LFunction:
			if !v.IsG && isLibEnv(v.Env) {
				L.RaiseError("cannot change the environment of given object")
			}
		case glua.LNumber:
			// The level counts frames as setfenv does, not as GetStack
			// (tail calls): any library function on the stack refuses.
			if v >= 1 {
				for lv := 1; ; lv++ {
					dbg, ok := L.GetStack(lv)
					if !ok {
						break
					}
					if fn, err := L.GetInfo("f", dbg, glua.LNil); err == nil {
						if f, ok := fn.(*glua.LFunction); ok && !f.IsG && isLibEnv(f.Env) {
							L.RaiseError("cannot change an environment while a function of gpush's library runs: " +
								"it is shared by every host")
						}
					}
				}
			}
		}
		return callOrig(L, setfenv)
	}))
}

// jsonFuncs are the json global's functions.
var jsonFuncs = map[string]glua.LGFunction{
	"encode": func(L *glua.LState) int {
		b, err := luaconv.EncodeJSON(L.CheckAny(1))
		if err != nil {
			L.ArgError(1, "json.encode: "+err.Error())
		}
		L.Push(glua.LString(b))
		return 1
	},
	"decode": func(L *glua.LState) int {
		v, err := luaconv.DecodeJSON(L, []byte(L.CheckString(1)))
		if err != nil {
			L.ArgError(1, "json.decode: "+err.Error())
		}
		L.Push(v)
		return 1
	},
}

// sharedJSON is the json table every state reads (through a view).
var sharedJSON = modules.SharedFuncs(jsonFuncs)
