package helper

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// givenSet is a wait-free's given holders (WaitFreeRequest.Holders); nil
// when none is given and the wait is for the GPUs to be free.
type givenSet []Identity

func givenHolders(ids []Identity) givenSet {
	if len(ids) == 0 {
		return nil
	}
	return givenSet(ids)
}

// has: h is one of the given processes. A given start time of 0 (a bare
// pid) matches any; a given boot id must be this boot's.
func (g givenSet) has(h Holder) bool {
	for _, id := range g {
		if id.PID == h.PID && (id.StartTime == 0 || id.StartTime == h.StartTime) && (id.BootID == "" || id.BootID == h.BootID) {
			return true
		}
	}
	return false
}

// left are the given processes that still hold an NVIDIA device.
func (g givenSet) left(holders []Holder) []Holder {
	out := []Holder{}
	for _, h := range holders {
		if g.has(h) {
			out = append(out, h)
		}
	}
	return out
}

// gpus are the GPUs the given processes hold (the wait's default choice).
func (g givenSet) gpus(holders []Holder) map[int]bool {
	want := map[int]bool{}
	for _, h := range g.left(holders) {
		for _, i := range h.GPUs {
			want[i] = true
		}
	}
	return want
}

// ghosts are memory nvidia-smi still charges to given pids that are gone;
// nil when the listing was not read this poll (unknown, not "none").
func (g givenSet) ghosts(all []Ghost, listed bool) []Ghost {
	if !listed {
		return nil
	}
	out := []Ghost{}
	for _, gh := range all {
		for _, id := range g {
			if gh.PID == id.PID {
				out = append(out, gh)
				break
			}
		}
	}
	return out
}

// mark sets each GPU's Waiting: the given processes still holding it.
func (g givenSet) mark(status []GPUStatus, left []Holder, ghosts []Ghost) {
	for i := range status {
		var pids []int
		for _, h := range left {
			if slices.Contains(h.GPUs, status[i].Index) {
				pids = append(pids, h.PID)
			}
		}
		for _, gh := range ghosts {
			if gh.GPU == status[i].Index && !slices.Contains(pids, gh.PID) {
				pids = append(pids, gh.PID)
			}
		}
		sort.Ints(pids)
		status[i].Waiting = pids
	}
}

// reason says what the given processes still hold, per GPU, for a wait
// that timed out.
func (g givenSet) reason(left []Holder, ghosts []Ghost) string {
	byGPU := map[int][]string{}
	var shared []string
	for _, h := range left {
		what := Label(h.PID, h.Comm, h.Cmdline)
		if len(h.GPUs) == 0 {
			shared = append(shared, what+" still has "+strings.Join(h.Devices, ", ")+" open")
			continue
		}
		for _, i := range h.GPUs {
			w := what
			if m, ok := h.MemByGPU[i]; ok && m > 0 {
				w += fmt.Sprintf(" %d MiB", m)
			}
			byGPU[i] = append(byGPU[i], w)
		}
	}
	for _, gh := range ghosts {
		byGPU[gh.GPU] = append(byGPU[gh.GPU], fmt.Sprintf("pid %d (%s) is gone but %s is still charged to it", gh.PID, gh.Name, mibText(gh.MemMiB, gh.MemUnread)))
	}
	idx := make([]int, 0, len(byGPU))
	for i := range byGPU {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var parts []string
	for _, i := range idx {
		parts = append(parts, fmt.Sprintf("GPU %d: still held by %s", i, strings.Join(byGPU[i], ", ")))
	}
	parts = append(parts, shared...)
	if len(parts) == 0 {
		return "the given holders' memory could not be checked (no compute apps listing)"
	}
	return strings.Join(parts, "; ")
}
