package lua

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/scripts"
)

func TestFailAndSkipKeepRows(t *testing.T) {
	for _, c := range []struct {
		src, status, err, rows string
	}{
		// Recorded rows, then the rows given to fail: all kept, in order.
		{`report.row{gpu = 0, step = "stage 1"}; fail("GPU %d not freed", 1, {{gpu = 1, step = "not-freed"}})`,
			StatusFailed, "GPU 1 not freed", "[map[gpu:0 step:stage 1] map[gpu:1 step:not-freed]]"},
		// A message with no format argument is taken as it is, rows apart.
		{`fail("50% used", {{gpu = 0}})`, StatusFailed, "50% used", "[map[gpu:0]]"},
		// A table that is not a list of tables stays a format argument.
		{`fail("held by %s", {1, 2})`, StatusFailed, "held by [1,2]", "[]"},
		{`skip("busy: %d holders", 2, {{gpu = 0, holders = 2}})`, StatusSkipped, "busy: 2 holders", "[map[gpu:0 holders:2]]"},
		{`skip()`, StatusSkipped, "t.lua:1: skip() called", "[]"},
		// skip() cannot be swallowed by pcall either.
		{`pcall(skip, "drain refused"); return "went on"`, StatusSkipped, "drain refused", "[]"},
		// The first end stands.
		{`pcall(skip, "first"); fail("second")`, StatusSkipped, "first", "[]"},
		// Rows recorded before a Lua error survive it.
		{`report.rows{{a = 1}, {a = 1}}; local x = nil; return x.y`, StatusFailed, "t.lua:1: attempt to index a non-table object(nil) with key 'y'", "[map[a:1] map[a:1]]"},
	} {
		r, _ := one(t, c.src, Options{})
		if r.Status != c.status || r.Error != c.err || fmt.Sprint(nonNilRows(r.Rows)) != c.rows {
			t.Errorf("%s:\n got %s %q rows %v\nwant %s %q rows %s", c.src, r.Status, r.Error, nonNilRows(r.Rows), c.status, c.err, c.rows)
		}
	}
}

func nonNilRows(rows []any) []any {
	if rows == nil {
		return []any{}
	}
	return rows
}

// Rows recorded before --timeout or Ctrl-C ended the host are kept.
func TestRowsSurviveTimeoutAndInterrupt(t *testing.T) {
	// Long enough for the row to be recorded on a loaded machine first.
	r, _ := one(t, `report.row{gpu = 0, state = "busy"}; sleep(60)`, Options{Timeout: time.Second})
	if r.Status != StatusFailed || !strings.HasPrefix(r.Error, "timed out") || len(r.Rows) != 1 {
		t.Errorf("timeout: %+v", r)
	}
	f, hosts := newFleet("a")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res := Run(ctx, script(`report.row{gpu = 0}; print("in"); sleep(60)`), hosts, Options{Dial: f.dial,
		OnEvent: func(e Event) {
			if e.Message == "in" {
				cancel()
			}
		}})
	if res[0].Status != StatusFailed || res[0].Error != "interrupted" || len(res[0].Rows) != 1 {
		t.Errorf("interrupt: %+v", res[0])
	}
}

func TestReportColumnsAndBadRows(t *testing.T) {
	r, _ := one(t, `report.columns{"state", "gpu", "..."}; return {{gpu = 0, state = "free"}}`, Options{})
	if r.Status != StatusOK || strings.Join(r.Columns, ",") != "state,gpu,..." {
		t.Errorf("columns: %+v", r)
	}
	for src, want := range map[string]string{
		`report.columns{}`:                  "report.columns: empty list",
		`report.columns{"a", "a"}`:          `column 2: "a" is empty or given twice`,
		`report.columns{"a", 1}`:            "element 2: want a string",
		`report.row("x")`:                   "report.row: argument: want a table of fields, got string",
		`report.row{1, 2}`:                  "want a table of named fields",
		`report.rows{{a = 1}, "x"}`:         "report.rows: row 2: want a table of fields, got string",
		`report.row{f = print}`:             "report.row: argument:",
		`fail("x", {{a = 1}, {f = print}})`: "fail: row 2:",
	} {
		r, _ := one(t, src, Options{})
		if r.Status != StatusFailed || !strings.Contains(r.Error, want) {
			t.Errorf("%s: %s %q, want failed naming %q", src, r.Status, r.Error, want)
		}
	}
}

func TestMaxRows(t *testing.T) {
	h := &hostState{inv: inventory.Host{Name: "gpu01"}}
	if err := h.addRows(make([]any, MaxRows)...); err != nil {
		t.Fatal(err)
	}
	if err := h.addRows(map[string]any{"a": 1.0}); err == nil || !strings.Contains(err.Error(), "gpu01") {
		t.Errorf("row %d: %v, want an error naming the host", MaxRows+1, err)
	}
	// A REPL session takes each input's rows: the bound is per input there.
	h.setColumns([]string{"a"})
	if rows, cols := h.takeRows(); len(rows) != MaxRows || len(cols) != 1 {
		t.Errorf("took %d rows, columns %v", len(rows), cols)
	}
	if err := h.addRows(map[string]any{"a": 1.0}); err != nil {
		t.Errorf("after takeRows: %v", err)
	}
}

// drainHost is a host with a unit whose worker holds 20480 MiB on GPU 0 and
// a worker of no unit holding 10240 MiB on GPU 1.
func drainHost() (*fleet, []inventory.Host) {
	f, hosts := newFleet("gpu01")
	m := f.conns["gpu01"].Model
	m.AddUnit(modulestest.FakeUnit{Name: "vllm.service", Active: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: "vllm.service"}, MemByGPU: map[int]int64{0: 20480}})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 10240}})
	return f, hosts
}

func memAfter(r HostResult) (before, after int64) {
	for _, g := range r.Stats.GPUs {
		before += g.BeforeMiB
		after += g.AfterMiB
	}
	return before, after
}

// A drain: the script reads 30720 MiB, stops the unit and reads nothing
// more, while 10240 is used; the recap must not show 30720. The runner reads
// the GPUs again at the end when a stop or kill came after the last reading.
func TestRecapFiguresComeFromTheNewestReading(t *testing.T) {
	f, hosts := drainHost()
	src := `local used = 0
for _, g in ipairs(gpu.mem()) do used = used + g.used_mib end
if used > 40000 then skip("busy: %d MiB", used) end
systemd.stop("vllm.service")
return "drained"`
	res := Run(t.Context(), script(src), hosts, Options{Dial: f.dial})
	r := res[0]
	before, after := memAfter(r)
	if r.Status != StatusOK || before != 30720 || after != 10240 || r.Stats.Stale || r.Stats.Units.Stopped != 1 {
		t.Errorf("drain: %s %q before %d after %d stale %v units %+v; want ok 30720 -> 10240", r.Status, r.Error, before, after, r.Stats.Stale, r.Stats.Units)
	}
	if n := len(f.conns["gpu01"].Calls(helper.VerbSnapshot)); n != 2 {
		t.Errorf("%d snapshots, want the script's and one at the end", n)
	}
	// A failed host gets its last reading too.
	f, hosts = drainHost()
	res = Run(t.Context(), script(`gpu.mem(); gpu.kill(gpu.holders{gpus = {1}}); fail("stop here")`), hosts, Options{Dial: f.dial})
	if _, after := memAfter(res[0]); res[0].Status != StatusFailed || after != 20480 || res[0].Stats.Kills.Exited+res[0].Stats.Kills.Killed != 1 {
		t.Errorf("failed after a kill: %+v", res[0])
	}
	// A kill makes stale only the GPUs its targets held: a wait that read
	// them leaves nothing for an extra reading (GPU 0 was not touched).
	f, hosts = drainHost()
	res = Run(t.Context(), script(`gpu.mem(); gpu.kill(gpu.holders{gpus = {1}}); gpu.wait_free{gpus = {1}, timeout = "2s"}`), hosts, Options{Dial: f.dial})
	if _, after := memAfter(res[0]); res[0].Status != StatusOK || after != 20480 || res[0].Stats.Stale {
		t.Errorf("kill then wait: %+v", res[0])
	}
	if n := len(f.conns["gpu01"].Calls(helper.VerbSnapshot)); n != 2 {
		t.Errorf("kill then wait: %d snapshots, want gpu.mem's and gpu.holders' (no extra one at the end)", n)
	}
	// A read-only script costs no extra reading.
	f, hosts = drainHost()
	Run(t.Context(), script(`return gpu.mem()`), hosts, Options{Dial: f.dial})
	if n := len(f.conns["gpu01"].Calls(helper.VerbSnapshot)); n != 1 {
		t.Errorf("read-only: %d snapshots, want 1", n)
	}
}

// Under --check the stats say what would be stopped and killed, and the
// memory those processes hold: a process the unit's stop would end is the
// stop's, not counted again as a kill (the run's kill would not find it).
func TestCheckStatsSayWhatWouldBeDone(t *testing.T) {
	f, hosts := drainHost()
	src := `systemd.stop("vllm.service"); systemd.stop("idle.service"); gpu.kill(gpu.holders())`
	f.conns["gpu01"].Model.AddUnit(modulestest.FakeUnit{Name: "idle.service"})
	res := Run(t.Context(), script(src), hosts, Options{Dial: f.dial, Check: true})
	st := res[0].Stats
	if res[0].Status != StatusOK || st.Units.WouldStop != 1 || st.Units.WouldStopMiB != 20480 || st.Units.Stopped != 0 ||
		st.Kills.Would != 1 || st.Kills.Skipped != 1 || st.WouldKillMiB != 10240 || st.Stale {
		t.Errorf("check: %+v %+v", res[0], st)
	}
	if n := len(f.conns["gpu01"].Calls(helper.VerbSnapshot)); n != 1 {
		t.Errorf("check: %d snapshots, want 1 (nothing changed)", n)
	}
}

// The library's free_gpus.lua keeps its rows when a GPU is not freed: the
// freed GPU's row and the not-freed one's, with its reason.
func TestFreeGPUsKeepsRowsWhenItFails(t *testing.T) {
	src, err := fs.ReadFile(scripts.FS, "free_gpus.lua")
	if err != nil {
		t.Fatal(err)
	}
	f, hosts := newFleet("gpu01")
	m := f.conns["gpu01"].Model
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}, Stuck: true})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 1000}})
	s := &Script{Name: "free_gpus.lua", Source: src, FS: scripts.FS}
	res := Run(t.Context(), s, hosts, Options{Dial: f.dial, ExtraVars: map[string]any{"grace": "10ms", "timeout": "300ms"}})
	r := res[0]
	if r.Status != StatusFailed || !strings.Contains(r.Error, "GPU 0: held by pid") || len(r.Rows) != 2 {
		t.Fatalf("%s %q rows %v", r.Status, r.Error, r.Rows)
	}
	steps := map[float64]any{}
	for _, row := range r.Rows {
		m := row.(map[string]any)
		steps[m["gpu"].(float64)] = m["step"]
	}
	if steps[0] != "not-freed" || steps[1] != "stage 1" {
		t.Errorf("rows %v", r.Rows)
	}
}
