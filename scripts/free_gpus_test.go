package scripts

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/modulestest"
)

func wantStep(t *testing.T, rows map[int]map[string]any, want map[int]string) {
	t.Helper()
	for i, w := range want {
		if rows[i] == nil || rows[i]["step"] != w {
			t.Errorf("GPU %d: row %v, want step %s", i, rows[i], w)
		}
	}
}

func hasLine(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// The main job: a service stopped (its GPU released), an orphan, a
// TERM-ignorer and a forked child keeping its dead parent's memory (it maps
// the device files: an owner nvidia-smi does not list) killed in stage 1, a
// leak with only a monitor left freed in stage 2, and the monitor of the
// GPUs stage 1 freed and the protected daemon left alone.
func TestFreeGPUsStages(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 5)
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true})
	svc := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{0: 40000}})
	orphan := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 6144}})
	ignorer := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{2: 4096}, IgnoreTerm: true})
	child := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{4}}, NoUVM: true})
	parent := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{4: 8802}, Heir: child.PID})
	probe := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{0, 1, 2, 3}, Comm: "python3"}, Monitor: true})
	daemon := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{0, 1, 2, 3, 4}, Comm: "nvidia-persistenced", Protected: true}})

	r := runScript(t, m, "free_gpus.lua", false, map[string]any{"services": []string{"sglang.service"},
		"grace": "10ms", "timeout": "1s", "release_timeout": "1s"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	rows := r.rows(t)
	wantStep(t, rows, map[int]string{0: "by-stop", 1: "stage 1", 2: "stage 1", 3: "already-free", 4: "stage 1"})
	for _, p := range []*modulestest.FakeHolder{svc, orphan, ignorer, parent, child} {
		if m.Alive(p.PID) {
			t.Errorf("pid %d (%v) must be gone", p.PID, p.Cmdline)
		}
	}
	if !m.Alive(probe.PID) || !m.Alive(daemon.PID) {
		t.Error("the NVML probe and the protected daemon own no memory: they must survive")
	}
	if want := fmt.Sprintf("%d,%d", min(parent.PID, child.PID), max(parent.PID, child.PID)); rows[4]["killed"] != want {
		t.Errorf("GPU 4 killed %v, want %s (the parent and the child that maps its context, in stage 1)", rows[4]["killed"], want)
	}
	if rows[4]["before_mib"] != 8802.0 || rows[4]["after_mib"] != 0.0 {
		t.Errorf("GPU 4 memory %v -> %v", rows[4]["before_mib"], rows[4]["after_mib"])
	}
	logs := r.logs()
	for _, want := range []string{"info stopped sglang.service", "info GPU 4 freed (stage 1): 8802 -> 0 MiB, killed ",
		"info GPU 1 freed (stage 1): 6144 -> 0 MiB, killed "} {
		if !hasLine(logs, want) {
			t.Errorf("no log line %q in %q", want, logs)
		}
	}
	// The stopped unit's GPU was waited for; the release wait named only it.
	waits := r.host.FakeConn.Calls(helper.VerbWaitFree)
	if len(waits) == 0 || len(waits[0].Request.(helper.WaitFreeRequest).GPUs) != 1 || waits[0].Request.(helper.WaitFreeRequest).GPUs[0] != 0 {
		t.Errorf("first wait-free %+v, want one for GPU 0", waits)
	}
}

// A unit that does not exist (a typo) fails the host before anything is killed.
func TestFreeGPUsUnitNotFound(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 1)
	w := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}})
	r := runScript(t, m, "free_gpus.lua", false, map[string]any{"services": []string{"vllm-embd.service"}})
	if r.err == nil || !strings.Contains(r.err.Error(), "stop: unit vllm-embd.service not found; no unit was stopped") {
		t.Fatalf("error %v", r.err)
	}
	if !m.Alive(w.PID) || len(r.host.FakeConn.Calls(helper.VerbKill)) != 0 {
		t.Error("a failed stop must not go on to kill")
	}
}

// A unit that leaves a worker in its cgroup (KillMode=process) is not a
// failure; its GPU is not waited for (waiting cannot help) but freed by stage 1.
func TestFreeGPUsServiceLeftovers(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 3)
	m.AddUnit(modulestest.FakeUnit{Name: "vllm.service", Active: true})
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true, StayAfterStop: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "vllm.service"}, MemByGPU: map[int]int64{0: 10240}})
	worker := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{1: 8192}})

	r := runScript(t, m, "free_gpus.lua", false, map[string]any{"services": []string{"vllm.service", "sglang.service"},
		"grace": "10ms", "timeout": "1s"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantStep(t, r.rows(t), map[int]string{0: "by-stop", 1: "stage 1", 2: "already-free"})
	if m.Alive(worker.PID) {
		t.Error("the stopped unit's leftover worker must be killed")
	}
	if !hasLine(r.logs(), "warn stopped sglang.service; it left 1 process(es) in its cgroup") {
		t.Errorf("logs %q", r.logs())
	}
	for _, c := range r.host.FakeConn.Calls(helper.VerbWaitFree)[:1] {
		if gs := c.Request.(helper.WaitFreeRequest).GPUs; len(gs) != 1 || gs[0] != 0 {
			t.Errorf("release wait for GPUs %v, want only 0 (GPU 1 is held by a leftover)", gs)
		}
	}
	// Both services' holders come from one snapshot, taken before any stop,
	// and one unit call stops both.
	var verbs []string
	var units []string
	for _, c := range r.host.FakeConn.Calls("") {
		if c.Verb == helper.VerbSnapshot || c.Verb == helper.VerbUnit {
			verbs = append(verbs, c.Verb)
		}
		if c.Verb == helper.VerbUnit {
			units = append(units, strings.Join(c.Request.(helper.UnitRequest).Units, " "))
		}
	}
	if len(verbs) < 2 || verbs[0] != helper.VerbSnapshot || verbs[1] != helper.VerbUnit || fmt.Sprint(units) != "[vllm.service sglang.service]" {
		t.Errorf("helper calls %v, units %q, want one snapshot, then one stop of both", verbs, units)
	}
}

// A unit that does not exist among others (a typo in the list): none is
// stopped, under --check none would be, and the host fails naming each
// missing one, before any kill.
func TestFreeGPUsOneUnitNotFound(t *testing.T) {
	for _, check := range []bool{false, true} {
		m := modulestest.NewGPUHost("gpu01", 1)
		m.AddUnit(modulestest.FakeUnit{Name: "vllm.service", Active: true})
		svc := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "vllm.service"}, MemByGPU: map[int]int64{0: 1000}})
		r := runScript(t, m, "free_gpus.lua", check, map[string]any{"services": []string{"vllm-embd.service", "vllm.service", "sglang-typo.service"}})
		if r.err == nil || !strings.Contains(r.err.Error(), "stop: units vllm-embd.service, sglang-typo.service not found; no unit was stopped") {
			t.Fatalf("check %v: error %v", check, r.err)
		}
		if u, _ := m.Unit("vllm.service"); !u.Active || !m.Alive(svc.PID) || hasLine(r.logs(), "stopped vllm.service") {
			t.Errorf("check %v: the unit that exists must not be stopped: logs %q", check, r.logs())
		}
		if len(r.host.FakeConn.Calls(helper.VerbKill)) != 0 {
			t.Error("a failed stop must not go on to kill")
		}
		if st := r.host.Stats().Snapshot().Units; st.Stopped != 0 || st.WouldStop != 0 {
			t.Errorf("check %v: unit stats %+v: nothing was (or would be) stopped", check, st)
		}
	}
}

// A unit's worker still exiting when the stop returns (out of the cgroup's
// listing, still holding its GPU: a loaded host showed it) is a leftover to
// free, not a failed stop.
func TestFreeGPUsHolderOutlivesStop(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	m.AddUnit(modulestest.FakeUnit{Name: "vllm.service", Active: true, ExitingAfterStop: true})
	w := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "vllm.service"}, MemByGPU: map[int]int64{0: 10240}})
	r := runScript(t, m, "free_gpus.lua", false, map[string]any{"services": []string{"vllm.service"},
		"grace": "10ms", "timeout": "1s"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantStep(t, r.rows(t), map[int]string{0: "stage 1", 1: "already-free"})
	if m.Alive(w.PID) {
		t.Error("the unit's worker must be gone")
	}
}

// Under --check nothing is stopped or killed; the rows say what would be.
func TestFreeGPUsCheck(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	m.AddUnit(modulestest.FakeUnit{Name: "sglang.service", Active: true})
	a := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "sglang.service"}, MemByGPU: map[int]int64{0: 1000}})
	b := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 1000}, IgnoreTerm: true})
	r := runScript(t, m, "free_gpus.lua", true, map[string]any{"services": []string{"sglang.service"}})
	if r.err != nil {
		t.Fatal(r.err)
	}
	rows := r.rows(t)
	// GPU 0's only holder is the unit's: the stop would end it (the plan
	// the run carries out), so nothing would be killed there.
	wantStep(t, rows, map[int]string{0: "by-stop", 1: "would-kill"})
	if !m.Alive(a.PID) || !m.Alive(b.PID) {
		t.Error("--check killed a holder")
	}
	if u, _ := m.Unit("sglang.service"); !u.Active {
		t.Error("--check stopped the unit")
	}
	if !hasLine(r.logs(), "would stop sglang.service") || !hasLine(r.logs(), "GPU 1 would kill ") {
		t.Errorf("logs %q", r.logs())
	}
}

// Why a GPU is not freed, one reason per GPU, and the host fails with them.
func TestFreeGPUsNotFreedReasons(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 4)
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}, Stuck: true})
	m.GPU(1).LeakedMiB = 2048
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{2: 1000}, ExitAfterPolls: 3})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{2: 1000}, AppearAfterPolls: 2})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{3}, Comm: "nvidia-persistenced", Protected: true}})
	m.GPU(3).LeakedMiB = 500

	r := runScript(t, m, "free_gpus.lua", false, map[string]any{"grace": "10ms", "timeout": "300ms"})
	if r.err == nil {
		t.Fatal("the host must fail")
	}
	for _, want := range []string{"GPU 0: held by pid", "survived KILL", "GPU 1: 2048 MiB used (threshold 64 MiB) with no holder left",
		"GPU 2: taken again after the kill: new holder pid", "GPU 3: 500 MiB used (threshold 64 MiB): held by protected pid", "(not killed)"} {
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, r.err)
		}
	}
	if !hasLine(r.logs(), "error GPU 3 not freed: ") {
		t.Errorf("logs %q", r.logs())
	}
}

// A supervisor that restarts its worker: the host fails naming it; asked to,
// gpush kills it from the top and the GPU stays free through the settle.
func TestFreeGPUsRespawningSupervisor(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 1)
	sup := m.AddProc(modulestest.FakeProc{Comm: "python3", Cmdline: []string{"/usr/bin/python3", "train.py"}})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{PPID: sup.PID}, MemByGPU: map[int]int64{0: 10240}, RespawnAfterPolls: 30})
	vars := map[string]any{"grace": "10ms", "timeout": "1s", "settle": "5s"}
	r := runScript(t, m, "free_gpus.lua", false, vars)
	if r.err == nil || !strings.Contains(r.err.Error(), "may restart its workers: kill ") ||
		!strings.Contains(r.err.Error(), "GPU 0: taken again after the kill: new holder") ||
		!strings.Contains(r.err.Error(), "(stop_restarters=true stops it before the kill)") {
		t.Fatalf("error %v", r.err)
	}
	vars["stop_restarters"] = true
	r = runScript(t, m, "free_gpus.lua", false, vars)
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Stopping the supervisor's tree ended its worker: by-stop, not killed.
	wantStep(t, r.rows(t), map[int]string{0: "by-stop"})
	if m.Alive(sup.PID) || len(m.HoldersOf(0)) != 0 {
		t.Errorf("supervisor alive %v, holders of GPU 0 %v", m.Alive(sup.PID), m.HoldersOf(0))
	}
}

// Only the chosen GPUs are touched.
func TestFreeGPUsOnlyChosenGPUs(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	keep := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}})
	gone := m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 1000}})
	r := runScript(t, m, "free_gpus.lua", false, map[string]any{"gpus": []int{1}, "grace": "10ms"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	rows := r.rows(t)
	if len(rows) != 1 {
		t.Errorf("rows %v, want GPU 1 only", rows)
	}
	wantStep(t, rows, map[int]string{1: "stage 1"})
	if !m.Alive(keep.PID) || m.Alive(gone.PID) {
		t.Error("only GPU 1's holder may be killed")
	}
}

// gpus given with the inventory's services: one look before any stop, and
// only the unit on a chosen GPU is stopped; the others (on another GPU, or
// on none) are left running. Named with -e, every unit is stopped.
func TestFreeGPUsStopsOnlyUnitsOnChosenGPUs(t *testing.T) {
	setup := func() (*modulestest.GPUHost, map[string]*modulestest.FakeHolder) {
		m := modulestest.NewGPUHost("gpu01", 3)
		w := map[string]*modulestest.FakeHolder{}
		for unit, g := range map[string]int{"a.service": 0, "b.service": 2} {
			m.AddUnit(modulestest.FakeUnit{Name: unit, Active: true})
			w[unit] = m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: unit}, MemByGPU: map[int]int64{g: 8192}})
		}
		m.AddUnit(modulestest.FakeUnit{Name: "idle.service", Active: true})
		return m, w
	}
	inv := map[string]any{"services": []any{"a.service", "b", "idle.service"}}
	m, w := setup()
	r := runScriptVars(t, m, "free_gpus.lua", false, inv, map[string]any{"gpus": "2", "grace": "10ms", "timeout": "1s", "release_timeout": "1s"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantStep(t, r.rows(t), map[int]string{2: "by-stop"})
	for unit, active := range map[string]bool{"a.service": true, "b.service": false, "idle.service": true} {
		if u, _ := m.Unit(unit); u.Active != active {
			t.Errorf("%s active %v, want %v", unit, u.Active, active)
		}
	}
	if !m.Alive(w["a.service"].PID) || m.Alive(w["b.service"].PID) {
		t.Error("only GPU 2's unit worker may go")
	}
	if !hasLine(r.logs(), "info not stopping a.service, idle.service: holds none of GPU 2") {
		t.Errorf("logs %q", r.logs())
	}
	var verbs []string
	for _, c := range r.host.FakeConn.Calls("") {
		if c.Verb == helper.VerbSnapshot || c.Verb == helper.VerbUnit {
			verbs = append(verbs, c.Verb)
			if c.Verb == helper.VerbUnit && fmt.Sprint(c.Request.(helper.UnitRequest).Units) != "[b]" {
				t.Errorf("unit request %+v, want a stop of b only", c.Request)
			}
		}
	}
	if len(verbs) < 2 || verbs[0] != helper.VerbSnapshot || verbs[1] != helper.VerbUnit {
		t.Errorf("helper calls %v: one look, then one stop", verbs)
	}

	// The same units named with -e: what was named is stopped.
	m, _ = setup()
	r = runScriptVars(t, m, "free_gpus.lua", false, nil, map[string]any{"gpus": "2", "services": "a.service,b,idle.service",
		"grace": "10ms", "timeout": "1s", "release_timeout": "1s"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, unit := range []string{"a.service", "b.service", "idle.service"} {
		if u, _ := m.Unit(unit); u.Active {
			t.Errorf("-e services=: %s must be stopped", unit)
		}
	}

	// Without gpus every service of the inventory is stopped, as asked.
	m, _ = setup()
	r = runScriptVars(t, m, "free_gpus.lua", false, inv, map[string]any{"grace": "10ms", "timeout": "1s", "release_timeout": "1s"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	if u, _ := m.Unit("a.service"); u.Active {
		t.Error("without gpus, every service is stopped")
	}
}

// -e services=[] (or an empty value, or the inventory's empty list) stops
// no unit, even where the inventory lists some.
func TestFreeGPUsNoServices(t *testing.T) {
	for _, v := range []any{"[]", "", []any{}} {
		m := modulestest.NewGPUHost("gpu01", 1)
		m.AddUnit(modulestest.FakeUnit{Name: "a.service", Active: true})
		m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "a.service"}, MemByGPU: map[int]int64{0: 100}})
		r := runScriptVars(t, m, "free_gpus.lua", true, map[string]any{"services": []any{"a.service"}}, map[string]any{"services": v})
		if r.err != nil {
			t.Fatalf("services=%q: %v", v, r.err)
		}
		if n := len(r.host.FakeConn.Calls(helper.VerbUnit)); n != 0 {
			t.Errorf("services=%q: %d unit calls, want none", v, n)
		}
	}
}

// A unit on a chosen GPU and another: it is stopped; a worker it leaves
// only on the other GPU is not freed (not asked), and the log says so.
func TestFreeGPUsLeftoverOnAnotherGPU(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	m.AddUnit(modulestest.FakeUnit{Name: "a.service", Active: true, StayAfterStop: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "a.service"}, MemByGPU: map[int]int64{0: 100}})
	w := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "a.service"}, MemByGPU: map[int]int64{1: 8192}})
	r := runScriptVars(t, m, "free_gpus.lua", false, map[string]any{"services": []any{"a.service"}}, map[string]any{"gpus": "0", "grace": "10ms", "timeout": "1s"})
	if r.err != nil {
		t.Fatal(r.err)
	}
	if u, _ := m.Unit("a.service"); u.Active {
		t.Error("a.service holds GPU 0: it must be stopped")
	}
	if !hasLine(r.logs(), fmt.Sprintf("warn a.service left pid %d holding GPU 1, which is not among the GPUs to free: left alone", w.PID)) {
		t.Errorf("logs %q", r.logs())
	}
	if !m.Alive(w.PID) || len(m.HoldersOf(0)) != 0 {
		t.Error("GPU 0 is freed, GPU 1's leftover left alone")
	}
}

// users given with the inventory's services: only the units where a GPU
// process of those users runs are stopped; another user's unit is left.
func TestFreeGPUsStopsOnlyUnitsOfTheUsers(t *testing.T) {
	m := modulestest.NewGPUHost("gpu01", 2)
	m.AddUnit(modulestest.FakeUnit{Name: "mine.service", Active: true})
	m.AddUnit(modulestest.FakeUnit{Name: "root.service", Active: true})
	mine := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "mine.service", User: "bob"}, MemByGPU: map[int]int64{0: 4096}})
	root := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "root.service", User: "root"}, MemByGPU: map[int]int64{1: 4096}})
	r := runScriptVars(t, m, "free_gpus.lua", false, map[string]any{"services": []any{"mine.service", "root.service"}},
		map[string]any{"users": "bob", "grace": "10ms", "timeout": "1s", "release_timeout": "1s"})
	if u, _ := m.Unit("root.service"); !u.Active || !m.Alive(root.PID) {
		t.Error("root.service (no GPU process of bob) must be left running")
	}
	if u, _ := m.Unit("mine.service"); u.Active || m.Alive(mine.PID) {
		t.Error("mine.service (bob's worker) must be stopped")
	}
	if !hasLine(r.logs(), "info not stopping root.service: no GPU process of users=bob runs in it") {
		t.Errorf("logs %q", r.logs())
	}
}
