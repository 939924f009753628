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
	// or under it.
	Freed bool `json:"freed"`
}

// KillStats counts kill outcomes over the whole run of one host.
type KillStats struct {
	Exited   int `json:"exited"`
	Killed   int `json:"killed"`
	Survived int `json:"survived"`
	Skipped  int `json:"skipped"`
	Would    int `json:"would"`
}

// StatsSnapshot is a copy of a host's stats, safe to keep and print.
type StatsSnapshot struct {
	GPUs  []GPUStat `json:"gpus,omitempty"`
	Kills KillStats `json:"kills"`
	// Freed lists the indices of the GPUs that went from used to free.
	Freed []int `json:"freed,omitempty"`
}

// Stats collects what the recap needs for one host. The zero value is ready.
type Stats struct {
	mu    sync.Mutex
	gpus  map[int]*GPUStat
	kills KillStats
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
	}
	for idx, t := range thresholds {
		if st, ok := s.gpus[idx]; ok {
			st.ThresholdMiB = t
		}
	}
}

// AddKills counts the outcomes of one gpu.kill.
func (s *Stats) AddKills(results []helper.KillResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range results {
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
		}
	}
}

// Snapshot copies the stats, GPUs sorted by index.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := StatsSnapshot{Kills: s.kills}
	for _, st := range s.gpus {
		c := *st
		c.Freed = c.BeforeMiB > c.ThresholdMiB && c.AfterMiB <= c.ThresholdMiB
		out.GPUs = append(out.GPUs, c)
	}
	sort.Slice(out.GPUs, func(i, j int) bool { return out.GPUs[i].Index < out.GPUs[j].Index })
	for _, g := range out.GPUs {
		if g.Freed {
			out.Freed = append(out.Freed, g.Index)
		}
	}
	return out
}
