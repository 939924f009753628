package scripts

import (
	"io/fs"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/gpu"
	logmod "github.com/gpush/gpush/modules/log"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/modules/systemd"
)

// runScript runs a library script over a model host with the runtime's
// globals it uses: vars, check, require("gpufree"), fail (raises) and
// sleep (returns at once: the model has no clock to wait for).
func runScript(t *testing.T, model *modulestest.GPUHost, name string, vars map[string]string) (glua.LValue, error, *modulestest.Host) {
	t.Helper()
	h := modulestest.NewHost("gpu01", model)
	L := modulestest.NewState(t, h, gpu.Module, systemd.Module, logmod.Module)
	t.Cleanup(L.Close)
	L.SetGlobal("check", glua.LFalse)
	v := L.NewTable()
	for k, x := range vars {
		v.RawSetString(k, glua.LString(x))
	}
	L.SetGlobal("vars", v)
	L.SetGlobal("fail", L.NewFunction(func(L *glua.LState) int {
		args := []glua.LValue{}
		for i := 1; i <= L.GetTop(); i++ {
			args = append(args, L.Get(i))
		}
		L.Push(L.GetField(L.GetGlobal("string"), "format"))
		for _, a := range args {
			L.Push(a)
		}
		L.Call(len(args), 1)
		L.RaiseError("%s", L.Get(-1).String())
		return 0
	}))
	L.SetGlobal("sleep", L.NewFunction(func(*glua.LState) int { return 0 }))
	lib, err := fs.ReadFile(FS, "gpufree.lua")
	if err != nil {
		t.Fatal(err)
	}
	L.PreloadModule("gpufree", func(L *glua.LState) int {
		if err := L.DoString(string(lib)); err != nil {
			L.RaiseError("gpufree.lua: %v", err)
		}
		return 1
	})
	src, err := fs.ReadFile(FS, name)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := L.LoadString(string(src))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	L.Push(fn)
	err = L.PCall(0, 1, nil)
	return L.Get(-1), err, h
}

func TestRestartServiceRefusesHalfFreedGPUs(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{0: 1000}})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 1000}, Stuck: true})
	_, err, _ := runScript(t, m, "restart_service.lua", map[string]string{"service": "sglang.service", "grace": "10ms", "verify_timeout": "100ms"})
	if err == nil || !strings.Contains(err.Error(), "not restarting sglang.service") || !strings.Contains(err.Error(), "GPU 1: stuck in state D") {
		t.Fatalf("error %v", err)
	}
	if u, _ := m.Unit("sglang.service"); u.Active {
		t.Error("the unit was started although a GPU is not free")
	}
}

func TestRestartServiceStartsThenNeedsAHolder(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 1)
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{0: 1000}})
	// The model's units start no workers: the script must say so, not hang.
	_, err, _ := runScript(t, m, "restart_service.lua", map[string]string{"service": "sglang.service", "start_timeout": "3s"})
	if err == nil || !strings.Contains(err.Error(), "sglang.service started but holds no GPU after 3s") {
		t.Fatalf("error %v", err)
	}
	if u, _ := m.Unit("sglang.service"); !u.Active {
		t.Error("the unit was not started")
	}
	if _, err, _ := runScript(t, m, "restart_service.lua", nil); err == nil || !strings.Contains(err.Error(), "vars.service is required") {
		t.Errorf("without a service: %v", err)
	}
}
