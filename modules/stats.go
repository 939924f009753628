package modules

import (
	"slices"
	"sort"
	"sync"

	"github.com/gpush/gpush/helper"
)

// GPUStat is one GPU's memory as the run saw it: first reading and last
// reading. A reading the driver did not give is -1 (unknown), never 0: a
// sum skips it and says how many were unknown.
type GPUStat struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid,omitempty"`
	BeforeMiB int64  `json:"before_mib"`
	AfterMiB  int64  `json:"after_mib"`
	TotalMiB  int64  `json:"total_mib"`
	// ThresholdMiB is the free threshold the helper used for this GPU in
	// gpu.wait_free; 0 until a wait_free reported one (idle H200s read 0 MiB).
	ThresholdMiB int64 `json:"threshold_mib"`
	// Freed: the first reading was above the threshold and the last is at
	// or under it, and nothing alive would take it back (Restarting).
	Freed bool `json:"freed"`
	// Restarting: free at the last reading, but a manager that would start
	// its workers again is alive (gpu.free's verdict): not freed.
	Restarting bool `json:"restarting,omitempty"`
}

// KillStats counts kill outcomes over the whole run of one host, each
// process (pid and start time) once, by its last outcome: a process a
// script signals twice, or a dry run names three times, is one. Only
// signals really delivered count: a target gone before any signal is
// neither exited nor killed.
type KillStats struct {
	// Exited: gone after the first signal (TERM), before any KILL.
	Exited int `json:"exited"`
	// Killed: needed KILL, now gone.
	Killed   int `json:"killed"`
	Survived int `json:"survived"`
	// AliveAfterTerm: signalled TERM, alive when the kill was cut off
	// (Ctrl-C, a deadline) before its KILL went out: not "survived KILL".
	AliveAfterTerm int `json:"alive_after_term,omitempty"`
	Skipped        int `json:"skipped"`
	// Gone: a target that was gone before any signal reached it.
	Gone  int `json:"gone,omitempty"`
	Would int `json:"would"`
}

// UnitStats counts systemd actions over the whole run of one host, each
// unit by its last action: Stopped are the units a stop changed (active,
// now stopped), Unchanged those already stopped (inactive), Failed the
// stops that did not end as asked (no such unit, no systemd, the unit still
// running). Under --check, the units that would be stopped and the GPU
// memory of what their stops would end (WouldStopMiBUnknown: holders of unknown
// memory, not in the sum).
type UnitStats struct {
	Stopped             int   `json:"stopped"`
	Started             int   `json:"started"`
	Unchanged           int   `json:"unchanged,omitempty"`
	Failed              int   `json:"failed,omitempty"`
	WouldStop           int   `json:"would_stop"`
	WouldStopMiB        int64 `json:"would_stop_mib"`
	WouldStopMiBUnknown int   `json:"would_stop_mib_unknown,omitempty"`
}

// ManagerStats counts what restarts workers that gpu.free's
// stop_restarters stopped (or, under --check, would stop), each once.
type ManagerStats struct {
	Stopped   int `json:"stopped,omitempty"`
	WouldStop int `json:"would_stop,omitempty"`
	Failed    int `json:"failed,omitempty"`
}

// StatsSnapshot is a copy of a host's stats, safe to keep and print.
type StatsSnapshot struct {
	GPUs  []GPUStat `json:"gpus,omitempty"`
	Kills KillStats `json:"kills"`
	// WouldKillMiB is the GPU memory of the processes a --check run would
	// have signalled, as their last reading said, each process once;
	// WouldKillMiBUnknown counts those of unknown memory, not in the sum.
	WouldKillMiB        int64        `json:"would_kill_mib"`
	WouldKillMiBUnknown int          `json:"would_kill_mib_unknown,omitempty"`
	Units               UnitStats    `json:"units"`
	Managers            ManagerStats `json:"managers,omitzero"`
	// Freed lists the indices of the GPUs that went from used to free;
	// Restarting those free now that a live manager would take back.
	Freed      []int `json:"freed,omitempty"`
	Restarting []int `json:"restarting,omitempty"`
	// Stale: a kill or a unit action came after the last reading of some
	// GPU, so its AfterMiB may no longer be true (see NeedsReading).
	Stale bool `json:"stale,omitempty"`
}

// Stats collects what the recap needs for one host. The zero value is ready.
type Stats struct {
	mu   sync.Mutex
	gpus map[int]*GPUStat
	// kills: each process's last kill outcome; units: each unit's last
	// action's effect; managers: each manager's stop outcome (by key).
	kills    map[procKey]string
	units    map[string]string
	started  int
	managers map[string]string
	// stale: GPUs whose last reading predates a change (a kill, a stop).
	stale map[int]bool
	// wouldEnd: under --check, the processes of the units a systemd.stop
	// would have stopped (their cgroups' processes and GPU holders): what
	// the stop would end, so that a dry-run free plans only what is left.
	wouldEnd map[procKey]string
	// wouldStopMiB: the GPU memory of each would-stop unit's holders.
	wouldStopMiB map[string][]int64
	// holders: each holder's GPU memory and GPUs at its last reading: what
	// a dry-run kill would free, and which readings a kill makes stale.
	holders map[procKey]holderSeen
	// restarting: GPUs free now whose workers a live manager would start
	// again (see SetRestarting).
	restarting map[int]bool
	// journal: what was done, for a host whose script never returned.
	journal Journal
}

// SetRestarting records gpu.free's verdict on GPU idx: free now, but a
// live manager would start its workers again (on), or not (off).
func (s *Stats) SetRestarting(idx int, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.restarting == nil {
		s.restarting = map[int]bool{}
	}
	if on {
		s.restarting[idx] = true
	} else {
		delete(s.restarting, idx)
	}
}

// holderSeen is what the last reading said of one holder.
type holderSeen struct {
	mib  int64
	gpus []int
}

// procKey names a process across the helper's answers (pid and start time;
// the boot id is the same within one run).
type procKey struct {
	pid   int
	start uint64
}

// ObserveGPUs records a memory reading; thresholds (may be nil) are the
// per-GPU free thresholds a wait_free used.
func (s *Stats) ObserveGPUs(gpus []helper.GPU, thresholds map[int]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gpus == nil {
		s.gpus = map[int]*GPUStat{}
	}
	for _, g := range gpus {
		used := max(g.MemUsedMiB, -1) // -1: the driver did not say
		st, ok := s.gpus[g.Index]
		if !ok {
			st = &GPUStat{Index: g.Index, BeforeMiB: used}
			s.gpus[g.Index] = st
		}
		st.UUID, st.TotalMiB, st.AfterMiB = g.UUID, g.MemTotalMiB, used
		// Read after the change, even when the driver did not say: not stale.
		delete(s.stale, g.Index)
	}
	for idx, t := range thresholds {
		if st, ok := s.gpus[idx]; ok {
			st.ThresholdMiB = t
		}
	}
}

// ObserveHolders records each holder's GPU memory and GPUs, so that the
// memory of the processes a dry-run kill would signal can be told, and a
// kill makes stale only the readings of the GPUs it can change.
func (s *Stats) ObserveHolders(holders []helper.Holder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders == nil {
		s.holders = map[procKey]holderSeen{}
	}
	for _, h := range holders {
		s.holders[procKey{h.PID, h.StartTime}] = holderSeen{mib: h.MemMiB, gpus: h.GPUs}
	}
}

// changed marks every GPU read so far as stale: what was just done may have
// changed its memory. Callers hold s.mu.
func (s *Stats) changed() {
	if s.stale == nil {
		s.stale = map[int]bool{}
	}
	for idx := range s.gpus {
		s.stale[idx] = true
	}
}

// killed marks stale what a signal to k may have changed: the GPUs it
// held at its last reading (GPU memory is charged only through a held
// /dev/nvidiaN), every GPU for a process no reading named a GPU of (a
// group member or child signalled with its target, one that held only
// nvidiactl). Callers hold s.mu.
func (s *Stats) killed(k helper.KillResult) {
	seen, ok := s.holders[procKey{k.PID, k.StartTime}]
	if !ok || len(seen.gpus) == 0 {
		s.changed()
		return
	}
	if s.stale == nil {
		s.stale = map[int]bool{}
	}
	for _, idx := range seen.gpus {
		if _, read := s.gpus[idx]; read {
			s.stale[idx] = true
		}
	}
}

// NeedsReading reports whether some GPU's last reading came before a kill or
// a unit action: the recap would show a figure that is no longer true, so
// the runner takes one more reading at the end of the host's script.
func (s *Stats) NeedsReading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stale) > 0
}

// observeResponse records what a helper answer tells the recap beyond the
// GPU readings the modules record themselves.
func (s *Stats) observeResponse(resp any) {
	switch r := resp.(type) {
	case *helper.Snapshot:
		s.ObserveHolders(r.Holders)
	case *helper.WaitFreeResponse:
		s.ObserveHolders(r.Holders)
	}
}

// Effects of a unit action, as the recap counts them.
const (
	unitChanged   = "changed"
	unitUnchanged = "unchanged"
	unitFailed    = "failed"
	unitWould     = "would"
)

// activeState: systemd's states of a unit that a stop changes.
func activeState(s string) bool {
	return s == "active" || s == "activating" || s == "reloading" || s == "deactivating"
}

// AddUnit counts one systemd action: act as the script asked it, would under
// --check (the helper then only reported the unit as it is), resp what the
// helper said. Each unit counts once, by its last action (a change stays
// one): a stop changed it
// (it was active, PriorActiveState, and is stopped now), found it stopped
// already, or failed (no such unit, no systemd, still running); a failure is
// never counted as stopped. Under --check, a unit that is active (or has GPU
// holders) would be stopped, and what its KillMode= ends of its processes
// is what that stop would end (WouldEnd); the memory of those is WouldStopMiB.
func (s *Stats) AddUnit(act string, would bool, resp helper.UnitResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.units == nil {
		s.units = map[string]string{}
	}
	if would {
		if act != helper.UnitStop && act != helper.UnitRestart || resp.LoadState == "not-found" || !resp.Systemd {
			return
		}
		if activeState(resp.ActiveState) || len(resp.GPUHolders) > 0 {
			s.units[resp.Unit] = unitWould
			if s.wouldEnd == nil {
				s.wouldEnd = map[procKey]string{}
				s.wouldStopMiB = map[string][]int64{}
			}
			// What the stop ends, by the unit's KillMode=: every process
			// of its cgroup, its main process alone, or nothing.
			ends := func(pid int) bool {
				switch resp.KillMode {
				case "process":
					return pid == resp.MainPID
				case "none":
					return false
				}
				return true
			}
			var mibs []int64
			for _, p := range resp.Remaining {
				if ends(p.PID) {
					s.wouldEnd[procKey{p.PID, p.StartTime}] = resp.Unit
				}
			}
			for _, h := range resp.GPUHolders {
				if ends(h.PID) {
					s.wouldEnd[procKey{h.PID, h.StartTime}] = resp.Unit
					mibs = append(mibs, h.MemMiB)
				}
			}
			if act == helper.UnitStop {
				s.wouldStopMiB[resp.Unit] = mibs
			}
		}
		return
	}
	switch act {
	case helper.UnitStatus:
		return
	case helper.UnitStart:
		if resp.OK && !activeState(resp.PriorActiveState) {
			s.started++
		}
	case helper.UnitRestart:
		if !resp.OK || resp.LoadState == "not-found" || !resp.Systemd {
			s.units[resp.Unit] = unitFailed
			return
		}
		s.units[resp.Unit] = unitChanged
		s.started++
	case helper.UnitStop:
		stopped := resp.ActiveState == "inactive" || resp.ActiveState == "failed"
		switch {
		case resp.LoadState == "not-found" || !resp.Systemd || !stopped:
			// No such unit, no systemd, or still running: not stopped.
			s.units[resp.Unit] = unitFailed
			return
		case activeState(resp.PriorActiveState):
			// Stopped by this call; processes its KillMode= left in its
			// cgroup are the leftovers a free ends, not an undone stop.
			s.units[resp.Unit] = unitChanged
		default:
			if s.units[resp.Unit] != unitChanged {
				// A unit an earlier stop of this run changed stays changed.
				s.units[resp.Unit] = unitUnchanged
			}
			return
		}
	}
	s.changed()
}

// WouldEnd names the unit whose stop, under --check, would end the process
// pid (started at start), or "": a dry run's plan leaves it to that stop.
func (s *Stats) WouldEnd(pid int, start uint64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wouldEnd[procKey{pid, start}]
}

// AddManagerStops counts the outcomes of a stop_restarters stop, each
// manager once (by key), its last outcome kept.
func (s *Stats) AddManagerStops(results []helper.ManagerResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.managers == nil {
		s.managers = map[string]string{}
	}
	stopped := false
	for _, r := range results {
		s.managers[r.Manager.Key()] = r.Outcome
		stopped = stopped || r.Outcome == helper.StopStopped
	}
	if stopped {
		s.changed()
	}
}

// AddKills counts the outcomes of one gpu.kill, each process once: a later
// outcome of the same process replaces its earlier one, except that a
// later look finding it gone (no signal) keeps what the signals did.
func (s *Stats) AddKills(results []helper.KillResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kills == nil {
		s.kills = map[procKey]string{}
	}
	for _, r := range results {
		delivered := len(r.Signals) > 0 && r.Outcome != helper.OutcomeWould
		if delivered {
			s.killed(r)
		}
		k := procKey{r.PID, r.StartTime}
		outcome := r.Outcome
		switch {
		case (outcome == helper.OutcomeExited || outcome == helper.OutcomeKilled) && len(r.Signals) == 0:
			outcome = outcomeGone // no signal reached it: it ended by itself
		case outcome == helper.OutcomeSurvived && len(r.Signals) == 0:
			// The signal could not be sent (EPERM): never signalled, not "survived KILL".
			outcome = helper.OutcomeSkipped
		case outcome == helper.OutcomeSurvived && !slices.Contains(r.Signals, "KILL"):
			outcome = outcomeAliveAfterTerm
		}
		if prev, ok := s.kills[k]; ok && !delivered && prev != outcomeGone && prev != helper.OutcomeSkipped && prev != helper.OutcomeWould {
			continue // signalled before; this call found it gone or refused it
		}
		s.kills[k] = outcome
	}
}

// outcomeGone: a kill target that was gone before any signal (the helper
// says exited, with no signal sent); outcomeAliveAfterTerm: alive after
// its first signal, the kill cut off before KILL.
const (
	outcomeGone           = "gone"
	outcomeAliveAfterTerm = "alive-after-term"
)

// Snapshot copies the stats, GPUs sorted by index.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := StatsSnapshot{Stale: len(s.stale) > 0}
	for k, o := range s.kills {
		switch o {
		case helper.OutcomeExited:
			out.Kills.Exited++
		case helper.OutcomeKilled:
			out.Kills.Killed++
		case helper.OutcomeSurvived:
			out.Kills.Survived++
		case outcomeAliveAfterTerm:
			out.Kills.AliveAfterTerm++
		case helper.OutcomeSkipped:
			out.Kills.Skipped++
		case outcomeGone:
			out.Kills.Gone++
		case helper.OutcomeWould:
			out.Kills.Would++
			switch seen, ok := s.holders[k]; {
			case !ok || seen.mib == 0:
				// Holds no memory nvidia-smi lists (a monitor, a group member).
			case seen.mib < 0:
				out.WouldKillMiBUnknown++
			default:
				out.WouldKillMiB += seen.mib
			}
		}
	}
	out.Units.Started = s.started
	for u, e := range s.units {
		switch e {
		case unitChanged:
			out.Units.Stopped++
		case unitUnchanged:
			out.Units.Unchanged++
		case unitFailed:
			out.Units.Failed++
		case unitWould:
			out.Units.WouldStop++
			for _, mib := range s.wouldStopMiB[u] {
				if mib < 0 {
					out.Units.WouldStopMiBUnknown++
				} else {
					out.Units.WouldStopMiB += mib
				}
			}
		}
	}
	for _, o := range s.managers {
		switch o {
		case helper.StopStopped:
			out.Managers.Stopped++
		case helper.StopWould:
			out.Managers.WouldStop++
		case helper.StopAlready:
		default:
			out.Managers.Failed++
		}
	}
	for _, st := range s.gpus {
		c := *st
		free := c.AfterMiB >= 0 && c.AfterMiB <= c.ThresholdMiB
		c.Restarting = s.restarting[c.Index] && free
		c.Freed = c.BeforeMiB > c.ThresholdMiB && free && !c.Restarting
		out.GPUs = append(out.GPUs, c)
	}
	sort.Slice(out.GPUs, func(i, j int) bool { return out.GPUs[i].Index < out.GPUs[j].Index })
	for _, g := range out.GPUs {
		if g.Freed {
			out.Freed = append(out.Freed, g.Index)
		}
		if g.Restarting {
			out.Restarting = append(out.Restarting, g.Index)
		}
	}
	return out
}
