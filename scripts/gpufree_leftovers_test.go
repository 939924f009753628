package scripts

import (
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/modulestest"
)

// A unit whose stop leaves a worker on its GPU (KillMode=process): that GPU
// is freed by the kill step, the other unit's GPU by the stop, and the
// worker, attributed to its unit, is killed.
func TestGPUFreeServiceLeftovers(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 3)
	m.AddUnit(modulestest.FakeUnit{Name: "vllm.service", Active: true})
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true, StayAfterStop: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "vllm.service"}, MemByGPU: map[int]int64{0: 10240}})
	worker := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{1: 8192}})

	rows, failures := freeOn(t, m, false, `{services = "vllm.service,sglang.service", grace = "10ms", release_timeout = "200ms", verify_timeout = "200ms"}`)
	for i, w := range map[int]string{0: "service-stop", 1: "kill", 2: "already-free"} {
		if got := step(rows, i); got != w {
			t.Errorf("GPU %d: step %s, want %s (row %v)", i, got, w, rows[i])
		}
	}
	if m.Alive(worker.PID) {
		t.Error("the stopped unit's leftover worker must be killed")
	}
	if len(failures) != 0 {
		t.Errorf("failures %v", failures)
	}
}
