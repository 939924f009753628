package lua

import (
	"context"
	"strings"
	"testing"

	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/modulestest"
)

// Ctrl-C inside gpu.free, after its kill and before its wait answered: the
// script never returns its rows, but the host's rows come from its journal
// (the signals sent with pid and time, each GPU's last reading) and are
// marked interrupted.
func TestInterruptInsideFreeKeepsJournal(t *testing.T) {
	f, hosts := newFleet("gpu01")
	c := f.conns["gpu01"]
	c.Model.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 4706}, IgnoreTerm: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var kinds []string
	res := Run(ctx, script(`
		local r = gpu.free{grace = "1s"}
		report.row{never = true}
		return r.rows`), hosts, Options{Dial: f.dial, OnEvent: func(e Event) {
		kinds = append(kinds, e.Kind)
		if e.Kind == modules.EventExit {
			cancel() // the kill's answer is in: interrupt before the wait's
		}
	}})
	r := res[0]
	if r.Status != StatusFailed || r.Error != "interrupted" || !r.FromJournal {
		t.Fatalf("want failed, interrupted, rows from the journal: %+v", r)
	}
	if !strings.Contains(strings.Join(kinds, ","), "kill,exit") {
		t.Errorf("events %v: want the kill and exit streamed", kinds)
	}
	j := r.Journal
	if len(j.Signals) != 2 || j.Signals[0].PID != 1001 || j.Signals[0].Signal != "TERM" || j.Signals[1].Signal != "KILL" ||
		j.Signals[0].Time.IsZero() || j.Signals[0].Outcome != "killed" {
		t.Errorf("journal signals %+v: want pid 1001's TERM and KILL, with times", j.Signals)
	}
	if len(j.GPUs) != 2 || j.GPUs[1].FirstMiB != 4706 {
		t.Errorf("journal GPUs %+v", j.GPUs)
	}
	var gpu1 map[string]any
	for _, row := range r.Rows {
		if m := row.(map[string]any); m["gpu"] == float64(1) {
			gpu1 = m
		}
	}
	if gpu1 == nil || gpu1["step"] != "interrupted" || gpu1["killed"] != "1001" || gpu1["before_mib"] != float64(4706) ||
		!strings.Contains(gpu1["signals"].(string), "1001 TERM ") || !strings.Contains(gpu1["signals"].(string), "(killed)") {
		t.Errorf("GPU 1's row %v: want step interrupted, killed 1001, its TERM and KILL", gpu1)
	}
}

// A host that ended ok keeps its own rows (or none): the journal does not
// add any.
func TestJournalRowsOnlyForCutOffHosts(t *testing.T) {
	f, hosts := newFleet("gpu01")
	f.conns["gpu01"].Model.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 100}})
	r := Run(t.Context(), script(`gpu.free{grace = "1s"}; return "done"`), hosts, Options{Dial: f.dial})[0]
	if r.Status != StatusOK || len(r.Rows) != 0 || r.FromJournal || len(r.Journal.Signals) != 1 {
		t.Errorf("%+v", r)
	}
}
