package lua

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpush/gpush/modules"
)

// JournalTime is how journal rows write times: the wall clock to the
// millisecond, as the log's lines are read beside them.
const JournalTime = "15:04:05.000"

// journalRows are the fleet table's rows of a host whose script left none
// (cancelled inside gpu.free by Ctrl-C, cut off by --timeout, an error): built
// from its journal, so that what was done survives. One row per GPU read
// (first and last reading, when, what on it was signalled), one per
// process signalled that no reading put on a GPU, one per unit action.
// Each row's step says how the host ended ("interrupted", "cut-off" past
// --timeout, "unfinished"), and freed is set only for a GPU gpu.free found
// free.
func journalRows(j modules.JournalSnapshot, s modules.StatsSnapshot, step string) []any {
	var rows []any
	onGPU := map[int][]modules.SignalRecord{}
	var loose []modules.SignalRecord
	for _, sig := range j.Signals {
		if len(sig.GPUs) == 0 {
			loose = append(loose, sig)
			continue
		}
		for _, g := range sig.GPUs {
			onGPU[g] = append(onGPU[g], sig)
		}
	}
	freed := map[int]string{}
	for _, f := range j.Freed {
		freed[f.GPU] = f.Step
	}
	restarting := map[int]bool{}
	for _, idx := range s.Restarting {
		restarting[idx] = true
	}
	// Freed as the recap counts it (a unit's stop freed it), when
	// gpu.free did not say.
	for _, idx := range s.Freed {
		if _, ok := freed[idx]; !ok {
			freed[idx] = "by-stop" // gpu.StepByStop
		}
	}
	for _, g := range j.GPUs {
		sigs := onGPU[g.Index]
		row := map[string]any{
			"gpu": float64(g.Index), "before_mib": float64(g.FirstMiB), "after_mib": float64(g.MiB),
			"read_at": g.Time.Format(JournalTime), "step": step,
			"killed": pidsText(sigs), "signals": signalsText(sigs),
			"freed": freed[g.Index] != "" && !restarting[g.Index],
		}
		if st, ok := freed[g.Index]; ok {
			row["state"] = "free (" + st + ")"
		}
		rows = append(rows, row)
		delete(onGPU, g.Index)
	}
	// Signalled on a GPU no reading listed: still shown.
	for _, idx := range sortedIntKeys(onGPU) {
		rows = append(rows, map[string]any{"gpu": float64(idx), "step": step, "killed": pidsText(onGPU[idx]), "signals": signalsText(onGPU[idx])})
	}
	for _, pid := range pidsOf(loose) {
		var mine []modules.SignalRecord
		for _, sig := range loose {
			if sig.PID == pid {
				mine = append(mine, sig)
			}
		}
		rows = append(rows, map[string]any{"step": step, "killed": pidsText(mine), "signals": signalsText(mine)})
	}
	for _, u := range j.Units {
		rows = append(rows, map[string]any{"step": step, "unit": u.Unit,
			"unit_action": fmt.Sprintf("%s at %s: %s", u.Action, u.Time.Format(JournalTime), u.ActiveState)})
	}
	return rows
}

func pidsOf(sigs []modules.SignalRecord) []int {
	var pids []int
	for _, s := range sigs {
		if !slices.Contains(pids, s.PID) {
			pids = append(pids, s.PID)
		}
	}
	return pids
}

func pidsText(sigs []modules.SignalRecord) string {
	var parts []string
	for _, pid := range pidsOf(sigs) {
		parts = append(parts, fmt.Sprint(pid))
	}
	return strings.Join(parts, ",")
}

// signalsText: "4410 TERM 15:57:03.222 KILL 15:57:08.230 (killed)".
func signalsText(sigs []modules.SignalRecord) string {
	var parts []string
	for _, pid := range pidsOf(sigs) {
		var b strings.Builder
		fmt.Fprint(&b, pid)
		outcome := ""
		for _, s := range sigs {
			if s.PID == pid {
				fmt.Fprintf(&b, " %s %s", s.Signal, s.Time.Format(JournalTime))
				outcome = s.Outcome
			}
		}
		if outcome != "" {
			fmt.Fprintf(&b, " (%s)", outcome)
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, "; ")
}

func sortedIntKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// endStep names how a host that left no rows ended, for its journal rows.
func endStep(r *HostResult) string {
	switch {
	case strings.HasPrefix(r.Error, "interrupted"):
		return "interrupted"
	case strings.HasPrefix(r.Error, "timed out"), strings.Contains(r.Error, "--timeout"):
		return "cut-off"
	case strings.HasPrefix(r.Error, "unfinished"), strings.Contains(r.Error, "interrupt"):
		return "interrupted" // quit at a second Ctrl-C
	}
	return "unfinished"
}

// hasRecords: v is a list of records the fleet table shows.
func hasRecords(v any) bool {
	l, ok := v.([]any)
	if !ok || len(l) == 0 {
		return false
	}
	for _, e := range l {
		if m, ok := e.(map[string]any); !ok || len(m) == 0 {
			return false
		}
	}
	return true
}
