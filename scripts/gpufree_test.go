package scripts

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/gpu"
	logmod "github.com/gpush/gpush/modules/log"
	"github.com/gpush/gpush/modules/luaconv"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/modules/systemd"
)

// freeOn runs gpufree.free(opts) on a model host through the real gpu,
// systemd and log modules, returning the rows (by GPU index) and failures.
func freeOn(t *testing.T, model *modulestest.GPUHost, check bool, opts string) (map[int]map[string]any, []any) {
	t.Helper()
	h := modulestest.NewHost("gpu01", model)
	h.SetCheck(check)
	L := modulestest.NewState(t, h, gpu.Module, systemd.Module, logmod.Module)
	defer L.Close()
	L.SetGlobal("check", glua.LBool(check))
	src, err := fs.ReadFile(FS, "gpufree.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := L.DoString(string(src)); err != nil {
		t.Fatalf("load gpufree.lua: %v", err)
	}
	L.SetGlobal("gpufree", L.Get(-1))
	L.Pop(1)
	if err := L.DoString("rows, failures = gpufree.free(" + opts + ")"); err != nil {
		t.Fatalf("gpufree.free: %v", err)
	}
	rowsV, err := luaconv.FromLua(L.GetGlobal("rows"))
	if err != nil {
		t.Fatal(err)
	}
	failV, err := luaconv.FromLua(L.GetGlobal("failures"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[int]map[string]any{}
	list, _ := rowsV.([]any)
	for _, r := range list {
		m := r.(map[string]any)
		rows[int(m["gpu"].(float64))] = m
	}
	failures, _ := failV.([]any)
	for _, e := range h.Events() {
		t.Logf("%s %s", e.Level, e.Message)
	}
	return rows, failures
}

func step(rows map[int]map[string]any, i int) string {
	if rows[i] == nil {
		return "<no row>"
	}
	return fmt.Sprint(rows[i]["step"])
}

func TestGPUFreeSteps(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 5)
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{0: 40000}})
	orphan := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 6144}})
	ignorer := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{2: 4096}, IgnoreTerm: true})
	// GPU 3 stays free; GPU 4 is held by a protected daemon.
	daemon := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Comm: "nv-hostengine", Protected: true}, MemByGPU: map[int]int64{4: 500}})

	rows, failures := freeOn(t, m, false, `{services = "sglang.service", grace = "10ms", release_timeout = "200ms", verify_timeout = "200ms"}`)
	want := map[int]string{0: "service-stop", 1: "kill", 2: "kill", 3: "already-free", 4: "not-freed"}
	for i, w := range want {
		if got := step(rows, i); got != w {
			t.Errorf("GPU %d: step %s, want %s (row %v)", i, got, w, rows[i])
		}
	}
	if m.Alive(orphan.PID) || m.Alive(ignorer.PID) {
		t.Error("orphan and TERM-ignorer must be gone")
	}
	if !m.Alive(daemon.PID) {
		t.Error("the protected daemon must not be killed")
	}
	if r := fmt.Sprint(rows[4]["reason"]); !strings.Contains(r, "protected") || !strings.Contains(r, "nv-hostengine") {
		t.Errorf("GPU 4 reason %q", r)
	}
	if len(failures) != 1 || !strings.HasPrefix(fmt.Sprint(failures[0]), "GPU 4: protected") {
		t.Errorf("failures %v", failures)
	}
	if rows[0]["before_mib"] != 40000.0 || rows[0]["after_mib"] != 0.0 {
		t.Errorf("GPU 0 memory %v -> %v", rows[0]["before_mib"], rows[0]["after_mib"])
	}
}

func TestGPUFreeNotFreedReasons(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 3)
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}, Stuck: true})
	m.GPU(1).LeakedMiB = 2048
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{2: 1000}})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{2: 1000}, AppearAfterPolls: 2})

	rows, failures := freeOn(t, m, false, `{grace = "10ms", verify_timeout = "300ms"}`)
	for i, w := range map[int]string{0: "stuck in state D", 1: "memory-held: 2048 MiB used with no holder", 2: "new-holder"} {
		if step(rows, i) != "not-freed" || !strings.Contains(fmt.Sprint(rows[i]["reason"]), w) {
			t.Errorf("GPU %d: %v, want not-freed because %q", i, rows[i], w)
		}
	}
	if len(failures) != 3 {
		t.Errorf("failures %v", failures)
	}
}

func TestGPUFreeCheckKillsNothing(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	a := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}})
	b := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 1000}, IgnoreTerm: true})
	rows, failures := freeOn(t, m, true, `{grace = "10ms"}`)
	if step(rows, 0) != "would-kill" || step(rows, 1) != "would-kill" || len(failures) != 0 {
		t.Errorf("rows %v failures %v", rows, failures)
	}
	if !m.Alive(a.PID) || !m.Alive(b.PID) {
		t.Error("--check killed a holder")
	}
}

func TestGPUFreeOnlyChosenGPUs(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	keep := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}})
	gone := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 1000}})
	rows, failures := freeOn(t, m, false, `{gpus = "1", grace = "10ms"}`)
	if len(rows) != 1 || step(rows, 1) != "kill" || len(failures) != 0 {
		t.Errorf("rows %v failures %v", rows, failures)
	}
	if !m.Alive(keep.PID) || m.Alive(gone.PID) {
		t.Error("only GPU 1's holder may be killed")
	}
}
