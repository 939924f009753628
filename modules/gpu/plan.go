package gpu

import (
	"slices"
	"strings"

	"github.com/gpush/gpush/helper"
)

// plan is gpu.free's plan of the stages, one function for the run and its
// dry run: the first look with what the stops end taken out, judged again.
// What a stop ends is, under check, what it would end: the processes of the
// units a systemd.stop would have stopped (Stats.WouldEnd) and the holders
// under each restarter stop_restarters would stop (that manager in their
// chain); in the run, the holders of the first look that a stop really
// ended (gone from a look after the stops). Their memory leaves their GPUs
// with them, so a GPU whose owners all end is released by the stops, not
// killed, and stage 1 signals in the run exactly what it plans in check.
func (r *freeRun) plan(first helper.Snapshot, status map[int]helper.GPUStatus, holders map[int]helper.Holder,
	pending []int) (map[int]helper.GPUStatus, map[int]helper.Holder, []int) {
	ended := r.ended(first)
	if len(ended) == 0 {
		return status, holders, pending
	}
	st, hs, _ := r.judge(predict(first, ended))
	for _, idx := range pending {
		var by []string
		for _, pid := range append(append([]int{}, status[idx].Owners...), status[idx].Suspicious...) {
			if what, ok := ended[pid]; ok && !slices.Contains(by, what) {
				by = append(by, what)
			}
		}
		if len(by) > 0 && st[idx].State == helper.GPUFree {
			r.rows[idx].stoppedBy = strings.Join(by, ", ")
		}
	}
	return st, hs, pending
}

// ended maps each holder of s that the stops end (or would) to what ends it.
func (r *freeRun) ended(s helper.Snapshot) map[int]string {
	ended := map[int]string{}
	if r.check {
		var stops []helper.Manager
		for _, res := range r.stops {
			if res.Outcome == helper.StopWould {
				stops = append(stops, res.Manager)
			}
		}
		for _, h := range s.Holders {
			if u := r.m.h.Stats().WouldEnd(h.PID, h.StartTime); u != "" {
				ended[h.PID] = "the stop of " + u
				continue
			}
			for _, m := range stops {
				if slices.ContainsFunc(h.Managers, func(x helper.Manager) bool { return x.Key() == m.Key() }) {
					ended[h.PID] = "the stop of " + helper.ManagerLabel(m)
					break
				}
			}
		}
		return ended
	}
	var stopped []helper.Manager
	for _, res := range r.stops {
		if res.Outcome == helper.StopStopped {
			stopped = append(stopped, res.Manager)
		}
	}
	if len(stopped) == 0 {
		return nil
	}
	now := map[helper.Identity]bool{}
	for _, h := range r.m.fetch(r.L, freeFn).Holders {
		now[h.Identity] = true
	}
	for _, h := range s.Holders {
		if now[h.Identity] {
			continue
		}
		what := "the stops"
		for _, m := range stopped {
			if slices.ContainsFunc(h.Managers, func(x helper.Manager) bool { return x.Key() == m.Key() }) {
				what = "the stop of " + helper.ManagerLabel(m)
				break
			}
		}
		ended[h.PID] = what
	}
	return ended
}

// predict is s as it reads once the processes of ended are gone: their
// holders out, their memory off their GPUs, the ghosts only they kept out
// with theirs. A GPU whose ended owners' memory is unknown reads as
// released when no owner or ghost is left on it (their memory goes with
// them); a reading that was unknown stays unknown.
func predict(s helper.Snapshot, ended map[int]string) helper.Snapshot {
	out := s
	out.Status, out.Holders, out.Ghosts = nil, nil, nil
	out.GPUs = slices.Clone(s.GPUs)
	at := map[int]int{}
	for i, g := range out.GPUs {
		at[g.Index] = i
	}
	sub := func(idx int, mib int64) {
		if i, ok := at[idx]; ok && out.GPUs[i].MemUsedMiB >= 0 {
			out.GPUs[i].MemUsedMiB = max(0, out.GPUs[i].MemUsedMiB-mib)
		}
	}
	unknown := map[int]bool{}
	for _, h := range s.Holders {
		if _, gone := ended[h.PID]; !gone {
			out.Holders = append(out.Holders, h)
			continue
		}
		known := int64(0)
		for idx, mib := range h.MemByGPU {
			if mib > 0 {
				sub(idx, mib)
				known += mib
			}
		}
		if h.Owner && (h.MemMiB < 0 || h.MemMiB > known) {
			for _, idx := range h.GPUs {
				unknown[idx] = true
			}
		}
	}
	for _, g := range s.Ghosts {
		var left []int
		for _, pid := range g.HeldBy {
			if _, gone := ended[pid]; !gone {
				left = append(left, pid)
			}
		}
		if len(g.HeldBy) > 0 && len(left) == 0 {
			sub(g.GPU, max(g.MemMiB, 0))
			continue
		}
		g.HeldBy = left
		out.Ghosts = append(out.Ghosts, g)
	}
	for idx := range unknown {
		i, ok := at[idx]
		if !ok || out.GPUs[i].MemUsedMiB < 0 {
			continue
		}
		owned := slices.ContainsFunc(out.Holders, func(h helper.Holder) bool { return h.Owner && slices.Contains(h.GPUs, idx) }) ||
			slices.ContainsFunc(out.Ghosts, func(g helper.Ghost) bool { return g.GPU == idx })
		if !owned {
			out.GPUs[i].MemUsedMiB = 0
		}
	}
	return out
}
