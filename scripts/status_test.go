package scripts

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/modulestest"
)

// gpu_status.lua: a row per GPU with its state and, when not free, why.
func TestGPUStatusStates(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 4)
	w := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "vllm.service"}, MemByGPU: map[int]int64{0: 10240}})
	mon := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{0, 1}, Comm: "nvitop", User: "root"}, Monitor: true})
	pd := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{2}, Comm: "nvidia-persistenced", User: "root", Protected: true}})
	m.GPU(2).LeakedMiB = 700
	m.GPU(3).Source = helper.SourceDriver
	r := runScript(t, m, "gpu_status.lua", false, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	rows := r.rows(t)
	want := map[int][3]string{
		0: {"held", fmt.Sprintf("%d alice python3* (vllm.service), %d root nvitop", w.PID, mon.PID), "held by pid"},
		1: {"free", fmt.Sprintf("%d root nvitop", mon.PID), ""},
		2: {"protected", fmt.Sprintf("%d root nvidia-persistenced", pd.PID), "700 MiB used (threshold 64 MiB): held by protected"},
		3: {"unknown", "", "memory unknown: nvidia-smi does not list this GPU"},
	}
	for i, w := range want {
		row := rows[i]
		if row["state"] != w[0] || row["holders"] != w[1] || !strings.Contains(fmt.Sprint(row["reason"]), w[2]) || (w[2] == "" && row["reason"] != "") {
			t.Errorf("GPU %d: %v, want state %s holders %q reason ~%q", i, row, w[0], w[1], w[2])
		}
	}
	if rows[3]["used_mib"] != -1.0 {
		t.Errorf("GPU 3 used %v, want -1 (unknown)", rows[3]["used_mib"])
	}
}

// gpu_holders.lua: owners and monitors told apart; an empty filter is refused.
func TestGPUHolders(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	w := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}})
	mon := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{1}, Comm: "dcgm-exporter", User: "bob"}, Monitor: true})
	r := runScript(t, m, "gpu_holders.lua", false, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	kinds := map[float64]any{}
	for _, x := range r.value.([]any) {
		row := x.(map[string]any)
		kinds[row["pid"].(float64)] = row["kind"]
	}
	if kinds[float64(w.PID)] != "owner" || kinds[float64(mon.PID)] != "monitor" {
		t.Errorf("kinds %v", kinds)
	}
	r = runScript(t, m, "gpu_holders.lua", false, map[string]any{"owners": false})
	if list := r.value.([]any); len(list) != 1 || list[0].(map[string]any)["pid"] != float64(mon.PID) {
		t.Errorf("owners=false: %v", r.value)
	}
	r = runScript(t, m, "gpu_holders.lua", false, map[string]any{"users": []string{}})
	if r.err == nil || !strings.Contains(r.err.Error(), "option users: empty list") {
		t.Errorf("users={} must be an error, got %v (%v)", r.err, r.value)
	}
}
