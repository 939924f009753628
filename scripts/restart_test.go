package scripts

import (
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/modulestest"
)

func TestRestartServiceRefusesHalfFreedGPUs(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{0: 1000}})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 1000}, Stuck: true})
	r := runScript(t, m, "restart_service.lua", false, map[string]any{"service": "sglang.service", "grace": "10ms", "timeout": "100ms"})
	if r.err == nil || !strings.Contains(r.err.Error(), "not restarting sglang.service: GPU 1: held by pid") ||
		!strings.Contains(r.err.Error(), "survived KILL") {
		t.Fatalf("error %v", r.err)
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
	r := runScript(t, m, "restart_service.lua", false, map[string]any{"service": "sglang.service", "start_timeout": "1m3s"})
	if r.err == nil || !strings.Contains(r.err.Error(), "sglang.service started but unit sglang.service holds no GPU after 1m3s") {
		t.Fatalf("error %v", r.err)
	}
	if u, _ := m.Unit("sglang.service"); !u.Active {
		t.Error("the unit was not started")
	}
	if r := runScript(t, m, "restart_service.lua", false, nil); r.err == nil || !strings.Contains(r.err.Error(), "restart_service.lua: var service is required and not given (string: the systemd unit)") {
		t.Errorf("without a service: %v", r.err)
	}
}

func TestRestartServiceUnitNotFound(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 1)
	r := runScript(t, m, "restart_service.lua", false, map[string]any{"service": "sglang-typo.service"})
	if r.err == nil || !strings.Contains(r.err.Error(), "unit sglang-typo.service not found") {
		t.Fatalf("error %v", r.err)
	}
	if len(m.HoldersOf(0)) != 0 || len(r.host.FakeConn.Calls(helper.VerbKill)) != 0 {
		t.Error("nothing may be killed for a unit that does not exist")
	}
}
