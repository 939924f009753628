package gpu

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
)

// restartersOf are the managers of what stage 1 would signal on the
// pending GPUs (stage 2's holders where no owner is left) that restart or
// may: outermost first (a unit before the process it runs, so that what is
// stopped is not started again by what is above it), each once.
func (r *freeRun) restartersOf(pending []int, status map[int]helper.GPUStatus, holders map[int]helper.Holder) []helper.Manager {
	var out []helper.Manager
	at := map[string]int{}
	for _, idx := range pending {
		t := r.stage1(status[idx], holders)
		if len(t) == 0 {
			t = r.stage2(status[idx], holders)
		}
		for _, pid := range t {
			chain := holders[pid].Managers
			for i := len(chain) - 1; i >= 0; i-- {
				m := chain[i]
				if m.Restarts == helper.RestartsNo {
					continue
				}
				if j, ok := at[m.Key()]; ok {
					out[j].Children = appendNew(out[j].Children, pid)
					continue
				}
				m.Children = []int{pid}
				at[m.Key()] = len(out)
				out = append(out, m)
			}
		}
	}
	return out
}

// stopRestarters stops (under check: says it would) what would start the
// pending GPUs' workers again, before any of them is killed.
func (r *freeRun) stopRestarters(pending []int, status map[int]helper.GPUStatus, holders map[int]helper.Holder) {
	r.stopManagers(r.restartersOf(pending, status, holders))
}

// stopManagers stops the managers of ms not stopped yet, in ms's order;
// each is recorded, so that the waits after it settle and the end reads
// it again.
func (r *freeRun) stopManagers(ms []helper.Manager) {
	var todo []helper.Manager
	for _, m := range ms {
		if m.Restarts == helper.RestartsNo || r.stopped[m.Key()] {
			continue
		}
		r.stopped[m.Key()] = true
		todo = append(todo, m)
	}
	if len(todo) == 0 {
		return
	}
	var resp helper.ManagersResponse
	modules.CallHelper(r.L, r.m.h, freeFn, helper.VerbManagers, helper.ManagersRequest{Config: r.m.h.HelperConfig(),
		Action: helper.ManagersStop, Managers: todo, Grace: helper.Duration(r.o.grace), DryRun: r.check}, &resp)
	r.stops = append(r.stops, resp.Results...)
	r.m.h.Stats().AddManagerStops(resp.Results)
	for _, res := range resp.Results {
		r.m.h.Managers().Add(res.Manager)
		if res.Outcome == helper.StopStopped && !res.Alive {
			r.m.h.Managers().MarkStopped(res.Manager)
		}
		level, msg := modules.LevelInfo, ""
		switch res.Outcome {
		case helper.StopStopped:
			msg = "stopped " + helper.ManagerLabel(res.Manager)
		case helper.StopWould:
			msg = "would stop " + helper.ManagerLabel(res.Manager) + ": " + strings.Join(res.Manager.Stop, " ")
		case helper.StopAlready:
			msg = helper.ManagerLabel(res.Manager) + " was gone already"
		default:
			level, msg = modules.LevelWarn, fmt.Sprintf("did not stop %s (%s): %s", helper.ManagerLabel(res.Manager), res.Outcome, res.Reason)
		}
		r.m.h.Emit(modules.Event{Host: r.m.h.Name(), Time: time.Now(), Kind: modules.EventLog, Level: level, Message: msg})
	}
}

// verifyManagers reads every manager recorded for the host once more, at
// the end: a GPU whose workers something alive would start again is not
// freed (unless the script accepted restarters: then the row says so), and
// every row names what may restart its workers.
func (r *freeRun) verifyManagers() {
	all := r.m.h.Managers().List()
	if len(all) == 0 || r.check {
		return
	}
	var resp helper.ManagersResponse
	modules.CallHelper(r.L, r.m.h, freeFn, helper.VerbManagers, helper.ManagersRequest{Config: r.m.h.HelperConfig(),
		Action: helper.ManagersStatus, Managers: all}, &resp)
	r.final = resp.Results
	_, settleNote := SettleFor(all)
	for _, idx := range r.order {
		row := r.rows[idx]
		r.m.h.Stats().SetRestarting(idx, false)
		var labels, whys []string
		row.restarters = nil
		var alive []helper.Manager
		for _, res := range resp.Results {
			m := res.Manager
			if !res.Alive || m.Restarts == helper.RestartsNo || !r.manages(m, row) {
				continue
			}
			row.restarters = append(row.restarters, m)
			labels = append(labels, helper.ManagerLabel(m))
			whys = append(whys, helper.ManagerWhy(m))
			alive = append(alive, m)
		}
		switch {
		case !row.freed:
			for _, w := range whys {
				if !strings.Contains(row.reason, w) {
					row.reason += "; " + w
				}
			}
			row.reason = r.withRestarterFix(row.reason, alive, false)
		case len(labels) > 0 && r.o.accept:
			row.note = "free now; " + strings.Join(labels, ", ") + " may restart it (accepted)"
		case len(labels) > 0:
			r.m.h.Stats().SetRestarting(idx, true)
			row.freed, row.step = false, StepNotFreed
			row.reason = r.withRestarterFix("free now, but "+strings.Join(whys, "; "), alive, true)
		case settleNote != "" && r.o.settle == 0 && len(row.killed) > 0:
			row.note = settleNote
		}
	}
}

// withRestarterFix ends reason, which names the restarters ms (what brought
// a worker back, or may), with what stops them: the stop_restarters option
// when the run did not set it (and, for a GPU free now, accept_restarters);
// when it did, what its stop of each did (a pod is never deleted, a stop
// may fail). A reason that says so already is left as it is.
func (r *freeRun) withRestarterFix(reason string, ms []helper.Manager, freeNow bool) string {
	if len(ms) == 0 || strings.Contains(reason, "stop_restarters") {
		return reason
	}
	it := "it"
	if len(ms) > 1 {
		it = "them"
	}
	var fix []string
	if !r.o.stopRestarters {
		fix = append(fix, "stop_restarters=true stops "+it+" before the kill")
	} else {
		for _, m := range ms {
			res, tried := r.stopOf(m)
			switch {
			case !tried:
				fix = append(fix, "stop_restarters=true did not reach "+helper.ManagerLabel(m)+" (found only after the stops)")
			case res.Outcome == helper.StopStopped || res.Outcome == helper.StopAlready || res.Outcome == helper.StopWould:
				// Stopped (or would be): nothing more to do about it.
			default:
				why := res.Outcome
				if res.Reason != "" {
					why += ": " + res.Reason
				}
				fix = append(fix, "stop_restarters=true did not stop "+helper.ManagerLabel(m)+" ("+why+")")
			}
		}
	}
	if freeNow && !r.o.accept {
		fix = append(fix, "accept_restarters=true accepts "+it)
	}
	if len(fix) == 0 {
		return reason
	}
	return reason + " (" + strings.Join(fix, "; ") + ")"
}

// stopOf is what stop_restarters did to m, if it tried.
func (r *freeRun) stopOf(m helper.Manager) (helper.ManagerResult, bool) {
	for _, res := range r.stops {
		if res.Manager.Key() == m.Key() {
			return res, true
		}
	}
	return helper.ManagerResult{}, false
}

// manages: m may start a worker of row again: one of the row's killed (or
// first seen) holders is its child, or m names no children (a unit a stop
// left with Restart=).
func (r *freeRun) manages(m helper.Manager, row *freeRow) bool {
	if len(m.Children) == 0 {
		return true
	}
	for _, c := range m.Children {
		if slices.Contains(row.killed, c) || row.first[c] {
			return true
		}
	}
	return false
}

// WorkerOpenTime is how long a restarted CUDA worker takes from its start
// to holding the GPU again: a torch worker opened /dev/nvidia0 4.2-5.7 s
// and held 1 GiB 4.5-6.1 s after its start on an H200
// (hw/h200/results/restarters.log); a settle covers a manager's restart
// delay plus this.
const WorkerOpenTime = 8 * time.Second

// MaxSettle bounds a settle derived from restart delays: a manager that
// waits longer (a Kubernetes back-off of minutes) is named, not waited out.
const MaxSettle = 60 * time.Second

// SettleFor is how long GPUs must stay free while ms may restart their
// workers: the longest known restart delay plus WorkerOpenTime, or
// DefaultSettle where a delay is unknown, at most MaxSettle; the note
// says what could not be known, or "".
func SettleFor(ms []helper.Manager) (time.Duration, string) {
	var longest time.Duration
	var unknown, tooLong []string
	for _, m := range ms {
		if m.Restarts == helper.RestartsNo {
			continue
		}
		if !m.DelayKnown {
			unknown = append(unknown, helper.ManagerLabel(m))
			continue
		}
		longest = max(longest, m.Delay.D())
		if m.Delay.D()+WorkerOpenTime > MaxSettle {
			tooLong = append(tooLong, fmt.Sprintf("%s restarts after %s", helper.ManagerLabel(m), m.Delay.D()))
		}
	}
	settle := longest + WorkerOpenTime
	var notes []string
	if len(unknown) > 0 {
		settle = max(settle, DefaultSettle)
		notes = append(notes, fmt.Sprintf("settled %s: the restart delay of %s is unknown", settle, strings.Join(unknown, ", ")))
	}
	if settle > MaxSettle {
		settle = MaxSettle
		notes = append(notes, fmt.Sprintf("settled %s: %s, longer than a settle watches", MaxSettle, strings.Join(tooLong, ", ")))
	}
	return settle, strings.Join(notes, "; ")
}
