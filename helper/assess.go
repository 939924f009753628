package helper

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// Assess judges each GPU from one reading of GPUs, holders and ghosts.
// threshold gives a GPU's free threshold by index (missing: BaselineMiB).
// It is pure: the helper's wait-free and snapshot use it, and so do the
// controller's fakes, so every caller judges "free" by the same rules:
//
//   - a protected name that behaves like a worker makes the GPU suspicious;
//   - an owner (memory or a compute context on this GPU) makes it held;
//   - a reading that cannot be had makes it unknown, never free;
//   - memory over the threshold with no owner is memory-held (a ghost, or
//     holders owning nothing, may keep it) or protected (only protected
//     processes hold it);
//   - otherwise it is free, even with monitors holding its device file.
func Assess(gpus []GPU, holders []Holder, ghosts []Ghost, threshold map[int]int64) []GPUStatus {
	known := map[int]bool{}
	for _, g := range gpus {
		known[g.Index] = true
	}
	out := make([]GPUStatus, 0, len(gpus))
	for _, g := range gpus {
		th, ok := threshold[g.Index]
		if !ok {
			th = BaselineMiB
		}
		st := GPUStatus{Index: g.Index, UsedMiB: g.MemUsedMiB, ThresholdMiB: th}
		byPID := map[int]Holder{}
		for _, h := range holders {
			if !holdsGPU(h, g.Index, known) {
				continue
			}
			byPID[h.PID] = h
			switch {
			case h.Suspicious != "":
				st.Suspicious = append(st.Suspicious, h.PID)
			case h.Protected:
				st.Protected = append(st.Protected, h.PID)
			case ownsOn(h, g.Index):
				st.Owners = append(st.Owners, h.PID)
			default:
				st.Others = append(st.Others, h.PID)
			}
		}
		for _, gh := range ghosts {
			if gh.GPU == g.Index {
				st.Ghosts = append(st.Ghosts, gh)
			}
		}
		label := func(pids []int) string { return labelPIDs(pids, byPID, g.Index) }
		unknown := g.Source != "" && g.Source != SourceSMI || g.MemUsedMiB < 0
		switch {
		case len(st.Suspicious) > 0:
			st.State = GPUSuspicious
			parts := make([]string, 0, len(st.Suspicious))
			for _, pid := range st.Suspicious {
				parts = append(parts, label([]int{pid})+": "+byPID[pid].Suspicious)
			}
			st.Reason = "suspicious holder " + strings.Join(parts, "; ") + " (not killed without force)"
			if len(st.Owners) > 0 {
				// Each share named: the owners beside it are freed apart.
				st.Reason += "; beside it, owned by " + label(st.Owners)
			}
		case len(st.Owners) > 0:
			st.State = GPUHeld
			st.Reason = "held by " + label(st.Owners)
			if unknown {
				st.Reason += "; " + unknownWhy(g)
			}
			if len(st.Ghosts) > 0 {
				st.Reason += "; " + ghostWhy(st.Ghosts, label)
			}
		case unknown:
			st.State = GPUUnknown
			st.Reason = unknownWhy(g)
			if len(st.Others)+len(st.Protected) > 0 {
				st.Reason += "; open by " + label(append(append([]int{}, st.Others...), st.Protected...))
			}
		case g.MemUsedMiB > th:
			used := fmt.Sprintf("%d MiB used (threshold %d MiB)", g.MemUsedMiB, th)
			switch {
			case len(st.Ghosts) > 0:
				st.State = GPUMemoryHeld
				st.Reason = used + ": " + ghostWhy(st.Ghosts, label)
			case len(st.Others) > 0:
				st.State = GPUMemoryHeld
				st.Reason = used + " with no owner left; still open by " + label(st.Others)
			case len(st.Protected) > 0:
				st.State = GPUProtected
				st.Reason = used + ": held by protected " + label(st.Protected) + " (not killed)"
			default:
				st.State = GPUMemoryHeld
				st.Reason = used + " with no holder left"
			}
		default:
			st.State = GPUFree
		}
		out = append(out, st)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

// ownsOn: h owns memory or a context on GPU idx. CUDA opens the device file
// of every GPU it can see, so a worker listed on GPU 0 holds nvidia1 too
// without owning anything there; only when the listing does not say which
// GPUs (no per-GPU memory) is an owner taken to own each GPU it holds.
func ownsOn(h Holder, idx int) bool {
	if !h.Owner {
		return false
	}
	if len(h.MemByGPU) == 0 {
		return true
	}
	_, ok := h.MemByGPU[idx]
	return ok
}

// ghostWhy names each dead pid still charged and what keeps it.
func ghostWhy(ghosts []Ghost, label func([]int) string) string {
	parts := make([]string, 0, len(ghosts))
	for _, gh := range ghosts {
		p := fmt.Sprintf("pid %d (%s) is gone but %s is still charged to it", gh.PID, path.Base(gh.Name), mibText(gh.MemMiB, gh.MemUnread))
		if len(gh.HeldBy) > 0 {
			p += "; its device files are still open in " + label(gh.HeldBy) + " (a forked child keeps them)"
		} else {
			p += "; no process holds its GPU's device files"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func mibText(v int64, unread string) string {
	if v < 0 && unread != "" {
		return "an unknown amount of memory (nvidia-smi: " + unread + ")"
	}
	if v < 0 {
		return "an unknown amount of memory"
	}
	return fmt.Sprintf("%d MiB", v)
}

// holdsGPU: h holds GPU idx (its device file, or memory nvidia-smi charges
// there), or owns a context without naming any GPU the reading has (then it
// cannot be ruled out for any GPU).
func holdsGPU(h Holder, idx int, known map[int]bool) bool {
	if slices.Contains(h.GPUs, idx) {
		return true
	}
	if _, ok := h.MemByGPU[idx]; ok {
		return true
	}
	for _, g := range h.GPUs {
		if known[g] {
			return false
		}
	}
	for g := range h.MemByGPU {
		if known[g] {
			return false
		}
	}
	return h.Owner && (!h.Protected || h.Suspicious != "")
}

func unknownWhy(g GPU) string {
	switch g.Source {
	case SourceDriver:
		return "memory unknown: nvidia-smi does not list this GPU (known from /proc/driver/nvidia)"
	case SourceDevice:
		return fmt.Sprintf("memory unknown: only a held /dev/nvidia%d names this GPU", g.Minor)
	}
	switch g.MemUnread {
	case SMINotSupported:
		return "memory unknown: nvidia-smi reports memory " + SMINotSupported +
			" for this GPU (its model, driver or mode, such as MIG or vGPU, gives no reading; waiting will not bring one)"
	case "":
		return "memory unknown: nvidia-smi gave no reading"
	case SMINotAvailable:
		// An H200 reads its memory as numbers and prints [N/A] for what
		// it has no value for (fan.speed): memory [N/A] is a GPU the
		// driver cannot read now.
		return "memory unknown: nvidia-smi reports memory " + SMINotAvailable +
			" (no value now: a GPU whose memory reads otherwise may be in a bad state; see nvidia-smi -q and Xid errors in the kernel log)"
	}
	return "memory unknown: nvidia-smi reports memory " + g.MemUnread
}

// Label names a process for a report: "pid 633 (python3 /opt/jobs/train.py
// --lr 0.1)", its command line whole (a table cuts what does not fit;
// --json keeps it exact).
func Label(pid int, comm string, cmdline []string) string {
	name := comm
	if len(cmdline) > 0 {
		args := append([]string{path.Base(cmdline[0])}, cmdline[1:]...)
		name = strings.Join(args, " ")
	}
	return fmt.Sprintf("pid %d (%s)", pid, name)
}

// labelPIDs names every holder, with its memory on GPU idx when known.
func labelPIDs(pids []int, by map[int]Holder, idx int) string {
	parts := make([]string, 0, len(pids))
	for _, pid := range pids {
		h, ok := by[pid]
		if !ok {
			parts = append(parts, fmt.Sprintf("pid %d", pid))
			continue
		}
		p := Label(h.PID, h.Comm, h.Cmdline)
		if m, ok := h.MemByGPU[idx]; ok && m > 0 {
			p += fmt.Sprintf(" %d MiB", m)
		} else if h.MemByGPU == nil && h.MemMiB > 0 {
			p += fmt.Sprintf(" %d MiB", h.MemMiB)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}
