package modules

import (
	"sort"
	"sync"

	"github.com/gpush/gpush/helper"
)

// GPUStat is one GPU's memory as the run saw it: first reading and last reading.
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

// KillStats counts kill outcomes over the whole run of one host.
type KillStats struct {
	Exited   int `json:"exited"`
	Killed   int `json:"killed"`
	Survived int `json:"survived"`
	Skipped  int `json:"skipped"`
	Would    int `json:"would"`
}

// UnitStats counts systemd actions over the whole run of one host; under
// --check, what would have been stopped and the GPU memory those units'
// processes hold.
type UnitStats struct {
	Stopped      int   `json:"stopped"`
	Started      int   `json:"started"`
	WouldStop    int   `json:"would_stop"`
	WouldStopMiB int64 `json:"would_stop_mib"`
}

// StatsSnapshot is a copy of a host's stats, safe to keep and print.
type StatsSnapshot struct {
	GPUs  []GPUStat `json:"gpus,omitempty"`
	Kills KillStats `json:"kills"`
	// WouldKillMiB is the GPU memory of the processes a --check run would
	// have signalled, as their last reading said.
	WouldKillMiB int64     `json:"would_kill_mib"`
	Units        UnitStats `json:"units"`
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
	mu    sync.Mutex
	gpus  map[int]*GPUStat
	kills KillStats
	units UnitStats
	// stale: GPUs whose last reading predates a change (a kill, a stop).
	stale        map[int]bool
	wouldKillMiB int64
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
		if g.MemUsedMiB < 0 {
			continue // the driver did not say; a reading of nothing
		}
		st, ok := s.gpus[g.Index]
		if !ok {
			st = &GPUStat{Index: g.Index, BeforeMiB: g.MemUsedMiB}
			s.gpus[g.Index] = st
		}
		st.UUID, st.TotalMiB, st.AfterMiB = g.UUID, g.MemTotalMiB, g.MemUsedMiB
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

// AddUnit counts one systemd action: act as the script asked it, would under
// --check (the helper then only reported the unit as it is), resp what the
// helper said.
func (s *Stats) AddUnit(act string, would bool, resp helper.UnitResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if would {
		if act == helper.UnitStop || act == helper.UnitRestart {
			if resp.ActiveState == "active" || resp.ActiveState == "activating" || resp.ActiveState == "reloading" || len(resp.GPUHolders) > 0 {
				s.units.WouldStop++
				for _, h := range resp.GPUHolders {
					s.units.WouldStopMiB += h.MemMiB
				}
			}
		}
		return
	}
	switch act {
	case helper.UnitStatus:
		return
	case helper.UnitStop:
		s.units.Stopped++
	case helper.UnitStart:
		s.units.Started++
	case helper.UnitRestart:
		s.units.Stopped++
		s.units.Started++
	}
	s.changed()
}

// AddKills counts the outcomes of one gpu.kill.
func (s *Stats) AddKills(results []helper.KillResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range results {
		if len(r.Signals) > 0 && r.Outcome != helper.OutcomeWould {
			s.killed(r)
		}
		switch r.Outcome {
		case helper.OutcomeExited:
			s.kills.Exited++
		case helper.OutcomeKilled:
			s.kills.Killed++
		case helper.OutcomeSurvived:
			s.kills.Survived++
		case helper.OutcomeSkipped:
			s.kills.Skipped++
		case helper.OutcomeWould:
			s.kills.Would++
			s.wouldKillMiB += s.holders[procKey{r.PID, r.StartTime}].mib
		}
	}
}

// Snapshot copies the stats, GPUs sorted by index.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := StatsSnapshot{Kills: s.kills, Units: s.units, WouldKillMiB: s.wouldKillMiB, Stale: len(s.stale) > 0}
	for _, st := range s.gpus {
		c := *st
		c.Restarting = s.restarting[c.Index] && c.AfterMiB <= c.ThresholdMiB
		c.Freed = c.BeforeMiB > c.ThresholdMiB && c.AfterMiB <= c.ThresholdMiB && !c.Restarting
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
