package scripts

import (
	"fmt"
	"io/fs"
	"testing"

	glua "github.com/yuin/gopher-lua"

	gpushlua "github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules/gpu"
	logmod "github.com/gpush/gpush/modules/log"
	"github.com/gpush/gpush/modules/luaconv"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/modules/systemd"
)

// run is one script run over a model host.
type run struct {
	value any
	err   error
	host  *modulestest.Host
}

// rows returns the script's result rows by their "gpu" column.
func (r run) rows(t *testing.T) map[int]map[string]any {
	t.Helper()
	list, ok := r.value.([]any)
	if !ok {
		t.Fatalf("result %v (error %v) is not a list of rows", r.value, r.err)
	}
	out := map[int]map[string]any{}
	for _, x := range list {
		m := x.(map[string]any)
		out[int(m["gpu"].(float64))] = m
	}
	return out
}

// logs returns the log lines the script emitted, as "LEVEL message".
func (r run) logs() []string {
	var out []string
	for _, e := range r.host.Events() {
		out = append(out, fmt.Sprintf("%s %s", e.Level, e.Message))
	}
	return out
}

// runScript runs a library script over a model host with the runtime's
// globals it uses: vars and vars_from (declared, checked, converted and
// strict as gpush run gives them; vars as -e gives them), check, fail
// (raises) and sleep (returns at once: the model has no clock to wait for).
// A var the runtime refuses (missing, undeclared) is the run's error.
func runScript(t *testing.T, model *modulestest.GPUHost, name string, check bool, vars map[string]any) run {
	t.Helper()
	return runScriptVars(t, model, name, check, nil, vars)
}

// runScriptVars is runScript with host vars (the inventory's) and extra
// vars (-e) apart, for scripts that tell them apart (vars_from).
func runScriptVars(t *testing.T, model *modulestest.GPUHost, name string, check bool, hostVars, extra map[string]any) run {
	t.Helper()
	h := modulestest.NewHost("gpu01", model)
	h.SetCheck(check)
	L := modulestest.NewState(t, h, gpu.Module, systemd.Module, logmod.Module)
	t.Cleanup(L.Close)
	L.SetGlobal("check", glua.LBool(check))
	src, err := fs.ReadFile(FS, name)
	if err != nil {
		t.Fatal(err)
	}
	decls, err := gpushlua.ParseVarDecls(name, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := gpushlua.SetScriptVars(L, name, decls, hostVars, extra); err != nil {
		return run{host: h, err: err}
	}
	L.SetGlobal("fail", L.NewFunction(func(L *glua.LState) int {
		L.RaiseError("%s", luaconv.Format(L, 1))
		return 0
	}))
	L.SetGlobal("sleep", L.NewFunction(func(*glua.LState) int { return 0 }))
	// require("util") finds the runtime's own lib/util.lua, as gpush run does.
	L.PreloadModule("util", func(L *glua.LState) int {
		src, err := fs.ReadFile(gpushlua.Lib, "lib/util.lua")
		if err != nil {
			L.RaiseError("util: %v", err)
		}
		fn, err := L.LoadString(string(src))
		if err != nil {
			L.RaiseError("util: %v", err)
		}
		L.Push(fn)
		L.Call(0, 1)
		return 1
	})
	fn, err := L.LoadString(string(src))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	L.Push(fn)
	r := run{host: h, err: L.PCall(0, 1, nil)}
	if r.err == nil {
		if r.value, err = luaconv.FromLua(L.Get(-1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range r.logs() {
		t.Log(l)
	}
	return r
}
