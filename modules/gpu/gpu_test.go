package gpu_test

import (
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/gpu"
	"github.com/gpush/gpush/modules/modulestest"
)

func newHost(t *testing.T) *modulestest.Host {
	h := modulestest.NewHost("gpu01", modulestest.NewGPUHost("gpu01", 2))
	h.Config = helper.Config{DevDir: "/lab/dev", Protected: []string{"myexporter"}}
	return h
}

// TestLua runs testdata/*_test.lua, each file a subtest.
func TestLua(t *testing.T) {
	modulestest.RunLuaFiles(t, "testdata/*_test.lua", newHost, gpu.Module)
}

func TestRegistered(t *testing.T) {
	m, ok := modules.Lookup("gpu")
	if !ok || m.Doc == "" || m.Loader == nil {
		t.Fatalf("gpu not registered with a doc and a loader: %+v", m)
	}
}

// TestKillSendsIdentityAndConfig checks the request on the wire from Go.
func TestKillSendsIdentityAndConfig(t *testing.T) {
	h := newHost(t)
	p := h.FakeConn.Model.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 4706}, IgnoreTerm: true})
	L := modulestest.NewState(t, h, gpu.Module)
	defer L.Close()
	if err := L.DoString(`r = gpu.kill(gpu.holders{gpus={1}}, {grace="2s", group=true})`); err != nil {
		t.Fatal(err)
	}
	calls := h.FakeConn.Calls(helper.VerbKill)
	if len(calls) != 1 {
		t.Fatalf("want 1 kill call, got %d", len(calls))
	}
	req := calls[0].Request.(helper.KillRequest)
	want := helper.Identity{PID: p.PID, StartTime: p.StartTime, BootID: "boot-gpu01"}
	if len(req.Targets) != 1 || req.Targets[0] != want {
		t.Errorf("targets = %+v, want %+v", req.Targets, want)
	}
	if req.Grace.D().Seconds() != 2 || !req.Group || req.DryRun || req.DevDir != "/lab/dev" ||
		len(req.Protected) != 1 {
		t.Errorf("request = %+v", req)
	}
	if h.FakeConn.Model.Alive(p.PID) {
		t.Errorf("pid %d ignoring TERM should have been KILLed", p.PID)
	}
	st := h.Stats().Snapshot()
	if st.Kills.Killed != 1 {
		t.Errorf("stats kills = %+v, want killed=1", st.Kills)
	}
}
