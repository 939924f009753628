package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpush/gpush/lab"
)

// planHost is what one --json host line says of a free_gpus.lua run: its
// gpu.free rows (returned, or given to fail()), its stats and its log.
type planHost struct {
	Host   string           `json:"host"`
	Status string           `json:"status"`
	Value  json.RawMessage  `json:"value"`
	Rows   []map[string]any `json:"rows"`
	Stats  struct {
		Exited              int `json:"exited"`
		Killed              int `json:"killed"`
		Survived            int `json:"survived"`
		UnitsStopped        int `json:"units_stopped"`
		RestartersStopped   int `json:"restarters_stopped"`
		WouldKill           int `json:"would_kill"`
		WouldStop           int `json:"would_stop"`
		WouldStopRestarters int `json:"would_stop_restarters"`
		MemBeforeMiB        int `json:"mem_before_mib"`
		MemBeforeUnknown    int `json:"mem_before_unknown"`
	} `json:"stats"`
	Log []struct {
		Message string `json:"message"`
	} `json:"log"`
}

func parsePlanHost(t *testing.T, out, host string) planHost {
	t.Helper()
	line := hostLine(out, host)
	var h planHost
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		t.Fatalf("%s: JSON line %q: %v", host, line, err)
	}
	if len(h.Rows) == 0 && len(h.Value) > 0 {
		var rows []map[string]any
		if json.Unmarshal(h.Value, &rows) == nil {
			h.Rows = rows
		}
	}
	return h
}

// gpuRows are the host's gpu.free rows by GPU (rows with a step).
func (h planHost) gpuRows() map[int]map[string]any {
	out := map[int]map[string]any{}
	for _, r := range h.Rows {
		g, ok := r["gpu"].(float64)
		if _, stepped := r["step"]; ok && stepped {
			out[int(g)] = r
		}
	}
	return out
}

// messages lists the log lines that start with prefix, without it, sorted.
func (h planHost) messages(prefix string) []string {
	var out []string
	for _, e := range h.Log {
		if m, ok := strings.CutPrefix(e.Message, prefix); ok {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// pidSet is a "pid,pid" cell sorted.
func pidSet(v any) string {
	pids := strings.Split(str(v), ",")
	slices.Sort(pids)
	return strings.Join(pids, ",")
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// TestCheckIsTheRunsPlan: on each lab scenario, free_gpus.lua --check says
// exactly what the run then does: the same units stopped, the same
// restarters stopped, the same pids killed on each GPU, the same outcome
// per GPU (a GPU the stops free is "by-stop" in both, never "would kill"
// in check), the same counts; check kills a process once however often
// it is named.
func TestCheckIsTheRunsPlan(t *testing.T) {
	scenarios := []string{lab.ScenarioLeftovers, lab.ScenarioRespawn, lab.ScenarioIdle, lab.ScenarioRestarters}
	// Host 4 (index 3) of the restarters scenario gets the loop restarter.
	l := startLab(t, lab.Options{Hosts: len(scenarios), HostScenario: func(i int) string { return scenarios[i] }, RestartScale: 0.2})
	services := l.NoServices == ""
	for i, sc := range scenarios {
		host := l.Hosts[i].Name
		t.Run(sc, func(t *testing.T) {
			args := []string{"run", "free_gpus.lua", "--json", "-l", host, "-e", "grace=1s", "-e", "settle=1s"}
			switch sc {
			case lab.ScenarioLeftovers:
				if services {
					args = append(args, "-e", "services=vllm-embed.service,sglang-qwen.service")
				}
			case lab.ScenarioRespawn, lab.ScenarioRestarters:
				args = append(args, "-e", "stop_restarters=true")
				if services && sc == lab.ScenarioRespawn {
					args = append(args, "-e", "services=vllm-embed.service")
				}
			}
			cr := gpush(t, l, append(args, "--check")...)
			if cr.code != 0 {
				t.Errorf("--check: exit %d, want 0", cr.code)
			}
			check := parsePlanHost(t, cr.stdout, host)
			rr := gpush(t, l, args...)
			if rr.code != 0 {
				t.Errorf("run: exit %d, want 0", rr.code)
			}
			run := parsePlanHost(t, rr.stdout, host)

			// Units and restarters: would stop = stopped, by name.
			if w, s := check.messages("would stop "), run.messages("stopped "); len(w) != len(s) {
				t.Errorf("check would stop %q, the run stopped %q", w, s)
			} else {
				for j := range w {
					if name, _, _ := strings.Cut(w[j], ":"); !strings.HasPrefix(s[j], name) {
						t.Errorf("check would stop %q, the run stopped %q", w[j], s[j])
					}
				}
			}
			if check.Stats.WouldStop != run.Stats.UnitsStopped || check.Stats.WouldStopRestarters != run.Stats.RestartersStopped {
				t.Errorf("check would stop %d units and %d restarters, the run stopped %d and %d", check.Stats.WouldStop,
					check.Stats.WouldStopRestarters, run.Stats.UnitsStopped, run.Stats.RestartersStopped)
			}
			// The processes: would kill = signalled, each once.
			if done := run.Stats.Exited + run.Stats.Killed + run.Stats.Survived; check.Stats.WouldKill != done {
				t.Errorf("check would kill %d processes, the run signalled %d", check.Stats.WouldKill, done)
			}
			// The first reading feeds the recap in both: the same memory before.
			if check.Stats.MemBeforeMiB != run.Stats.MemBeforeMiB || run.Stats.MemBeforeUnknown != 0 {
				t.Errorf("before: check %d MiB, run %d MiB (%d unknown)", check.Stats.MemBeforeMiB, run.Stats.MemBeforeMiB, run.Stats.MemBeforeUnknown)
			}
			// Per GPU: the outcome and the pids.
			crow, rrow := check.gpuRows(), run.gpuRows()
			if len(crow) == 0 || len(crow) != len(rrow) {
				t.Fatalf("check has %d GPU rows, the run %d", len(crow), len(rrow))
			}
			for g, c := range crow {
				r := rrow[g]
				cs, rs := str(c["step"]), str(r["step"])
				want := map[string][]string{"already-free": {"already-free"}, "by-stop": {"by-stop"},
					"would-kill": {"stage 1", "stage 2"}, "not-freed": {"not-freed"}}[cs]
				if !slices.Contains(want, rs) {
					t.Errorf("GPU %d: check %q (%s), the run %q (%s)", g, cs, str(c["reason"]), rs, str(r["reason"]))
				}
				if pidSet(c["killed"]) != pidSet(r["killed"]) {
					t.Errorf("GPU %d: check would kill %q, the run killed %q", g, str(c["killed"]), str(r["killed"]))
				}
				if str(c["before_mib"]) != str(r["before_mib"]) {
					t.Errorf("GPU %d: before %s in check, %s in the run", g, str(c["before_mib"]), str(r["before_mib"]))
				}
				if rs == "by-stop" && str(r["freed"]) != "true" {
					t.Errorf("GPU %d: by-stop but not freed: %v", g, r)
				}
			}
			// Check logs no failure the run does not have.
			for _, e := range check.Log {
				if strings.Contains(e.Message, "not freed") && len(run.messages(e.Message)) == 0 {
					t.Errorf("check logs %q; the run freed it", e.Message)
				}
			}
			if sc == lab.ScenarioIdle && (check.Stats.WouldKill+run.Stats.Exited+run.Stats.Killed > 0) {
				t.Errorf("idle: nothing to kill, check %d run %d", check.Stats.WouldKill, run.Stats.Exited+run.Stats.Killed)
			}
		})
	}
}

// TestCheckCountsDistinctProcesses: a check script naming the same two
// holders three times would kill 2 processes, with their memory once.
func TestCheckCountsDistinctProcesses(t *testing.T) {
	l := startLab(t, lab.Options{Hosts: 1, Scenario: lab.ScenarioRespawn})
	code := `local hs = gpu.holders{gpus = {1, 2}, shared = false}
for _ = 1, 3 do gpu.kill(hs) end
local mib = 0
for _, h in ipairs(hs) do mib = mib + h.mem_mib end
return {n = #hs, mib = mib}`
	r := gpush(t, l, "run", "--check", "--json", "-c", code)
	h := parsePlanHost(t, r.stdout, "lab01")
	var v struct{ N, Mib int }
	if err := json.Unmarshal(h.Value, &v); err != nil || v.N == 0 {
		t.Fatalf("value %s: %v", h.Value, err)
	}
	if h.Stats.WouldKill != v.N {
		t.Errorf("would kill %d, want %d (the same holders, 3 times)", h.Stats.WouldKill, v.N)
	}
	if !strings.Contains(r.stdout, fmt.Sprintf(`"would_kill_mib":%d`, v.Mib)) {
		t.Errorf("would_kill_mib is not %d: %s", v.Mib, r.stdout)
	}
}
