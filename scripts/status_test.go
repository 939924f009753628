package scripts

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/report"
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
		0: {"held", fmt.Sprintf("%d alice python3* 10.0 GiB (vllm.service), %d root nvitop", w.PID, mon.PID), "held by pid"},
		1: {"free", fmt.Sprintf("%d root nvitop", mon.PID), ""},
		2: {"protected", fmt.Sprintf("%d root nvidia-persistenced", pd.PID), "700 MiB used (threshold 64 MiB): held by protected"},
		3: {"unknown", "", "memory unknown: nvidia-smi does not list this GPU"},
	}
	for i, w := range want {
		row := rows[i]
		if row["state"] != w[0] || report.CellText(row["holders"]) != w[1] || !strings.Contains(fmt.Sprint(row["reason"]), w[2]) || (w[2] == "" && row["reason"] != "") {
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
	if r.err == nil || !strings.Contains(r.err.Error(), "users: empty list; leave it out to mean every user") {
		t.Errorf("users={} must be an error, got %v (%v)", r.err, r.value)
	}
}

// A worker on GPUs 0 and 2 shows its own memory on each GPU's row, in
// gpu_status.lua and gpu_holders.lua, never its total on both; a pod's
// worker shows where it runs, not a unit.
func TestPerGPUMemory(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 3)
	w := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1024, 2: 3072}})
	pod := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{User: "bob", Container: "3f4e5d6c7b8a", Runtime: "containerd",
		Pod: "trainer-7f9c", Namespace: "ml", AgeSeconds: 30}, MemByGPU: map[int]int64{1: 2048}})
	r := runScript(t, m, "gpu_status.lua", false, nil)
	rows := r.rows(t)
	for idx, want := range map[int]string{0: fmt.Sprintf("%d alice python3* 1.0 GiB", w.PID), 2: fmt.Sprintf("%d alice python3* 3.0 GiB", w.PID),
		1: fmt.Sprintf("%d bob python3* 2.0 GiB (pod ml/trainer-7f9c)", pod.PID)} {
		if got := report.CellText(rows[idx]["holders"]); got != want {
			t.Errorf("gpu_status GPU %d holders %q, want %q", idx, got, want)
		}
	}
	r = runScript(t, m, "gpu_holders.lua", false, nil)
	got := map[string]any{}
	for _, x := range r.value.([]any) {
		row := x.(map[string]any)
		got[fmt.Sprintf("%v/%v", row["pid"], row["gpu"])] = row["mem_mib"]
		if row["pid"] == float64(pod.PID) && (row["where"] != "pod ml/trainer-7f9c" || row["age"] != "30s") {
			t.Errorf("pod row %v", row)
		}
	}
	want := map[string]any{fmt.Sprintf("%d/0", w.PID): 1024.0, fmt.Sprintf("%d/2", w.PID): 3072.0, fmt.Sprintf("%d/1", pod.PID): 2048.0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gpu_holders rows (pid/gpu: MiB) %v, want %v", got, want)
	}
	for vars, pids := range map[string][]int{"containers=true": {pod.PID}, "containers=false": {w.PID}, "exclude_users": {pod.PID}, "min_age": {w.PID}} {
		v := map[string]any{}
		switch vars {
		case "containers=true":
			v["containers"] = true
		case "containers=false":
			v["containers"] = false
		case "exclude_users":
			v["exclude_users"] = []string{"alice"}
		case "min_age":
			v["min_age"] = "1m"
		}
		r = runScript(t, m, "gpu_holders.lua", false, v)
		seen := map[float64]bool{}
		for _, x := range r.value.([]any) {
			seen[x.(map[string]any)["pid"].(float64)] = true
		}
		if len(seen) != len(pids) || !seen[float64(pids[0])] {
			t.Errorf("%s: pids %v, want %v (%v)", vars, seen, pids, r.err)
		}
	}
}
