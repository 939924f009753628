package modules

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpush/gpush/helper"
)

// Event kinds beyond log lines: what a host's run did, streamed the moment
// the helper's answer says so. EventStep is the step a host is at (for the
// progress line), not a line of output.
const (
	// EventKill: signals sent to one process (pid, signals).
	EventKill = "kill"
	// EventExit: a signalled process is gone (exited, or killed by KILL),
	// or survived KILL (level warn).
	EventExit = "exit"
	// EventUnit: a systemd unit stopped, started or restarted.
	EventUnit = "unit"
	// EventFreed: a GPU reads free after gpu.free's kills.
	EventFreed = "freed"
	// EventStep: what the host is doing now ("gpu.free stage 1: killed 2,
	// waiting GPU 0,3").
	EventStep = "step"
)

// Journal is the record of what a host's run did, kept as each helper
// answer comes (CallHelper feeds it): every signal sent, every unit
// stopped or started, each GPU's readings, each GPU gpu.free found free.
// It survives whatever ends the host: a script cancelled inside gpu.free
// never returns its rows, but the journal has what was done so far, and
// the runner builds the host's rows from it.
type Journal struct {
	mu      sync.Mutex
	signals []SignalRecord
	units   []UnitRecord
	gpus    map[int]*GPUReading
	freed   map[int]FreedRecord
	holders map[procKey][]int // each holder's GPUs at its last reading
}

// SignalRecord is one signal sent to one process.
type SignalRecord struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	Comm      string `json:"comm,omitempty"`
	Signal    string `json:"signal"`
	// Time is when the helper sent it (the host's clock), or when its
	// answer came when the helper did not say.
	Time time.Time `json:"time"`
	// Outcome is the process's as the kill's answer says (exited, killed,
	// survived), "signalled" while no answer came (the kill was cut off
	// and its answer lost: the signal streamed as it was sent); Via why it was a target (target, group of PID, ...).
	Outcome string `json:"outcome"`
	Via     string `json:"via,omitempty"`
	// GPUs it held at its last reading.
	GPUs []int `json:"gpus,omitempty"`
}

// UnitRecord is one systemd action done.
type UnitRecord struct {
	Unit        string    `json:"unit"`
	Action      string    `json:"action"`
	OK          bool      `json:"ok"`
	ActiveState string    `json:"active_state,omitempty"`
	Time        time.Time `json:"time"`
}

// GPUReading is one GPU's first and last memory reading in the run.
type GPUReading struct {
	Index     int       `json:"gpu"`
	FirstMiB  int64     `json:"first_mib"`
	MiB       int64     `json:"mib"`
	TotalMiB  int64     `json:"total_mib,omitempty"`
	Time      time.Time `json:"time"`
	Readings  int       `json:"readings"`
	FirstTime time.Time `json:"-"`
}

// FreedRecord: gpu.free found the GPU free at this step.
type FreedRecord struct {
	GPU  int       `json:"gpu"`
	Step string    `json:"step"`
	Time time.Time `json:"time"`
}

// JournalSnapshot is a copy of a journal, GPUs sorted by index.
type JournalSnapshot struct {
	Signals []SignalRecord `json:"signals,omitempty"`
	Units   []UnitRecord   `json:"units,omitempty"`
	GPUs    []GPUReading   `json:"gpus,omitempty"`
	Freed   []FreedRecord  `json:"freed,omitempty"`
}

// Empty: nothing was done or read.
func (j JournalSnapshot) Empty() bool {
	return len(j.Signals)+len(j.Units)+len(j.GPUs)+len(j.Freed) == 0
}

// Journal is the host's journal.
func (s *Stats) Journal() *Journal { return &s.journal }

// Snapshot copies the journal.
func (j *Journal) Snapshot() JournalSnapshot {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := JournalSnapshot{Signals: append([]SignalRecord(nil), j.signals...), Units: append([]UnitRecord(nil), j.units...)}
	for _, g := range j.gpus {
		out.GPUs = append(out.GPUs, *g)
	}
	sort.Slice(out.GPUs, func(a, b int) bool { return out.GPUs[a].Index < out.GPUs[b].Index })
	for _, f := range j.freed {
		out.Freed = append(out.Freed, f)
	}
	sort.Slice(out.Freed, func(a, b int) bool { return out.Freed[a].GPU < out.Freed[b].GPU })
	return out
}

// readGPUs records a reading of gpus at t.
func (j *Journal) readGPUs(gpus []helper.GPU, t time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.gpus == nil {
		j.gpus = map[int]*GPUReading{}
	}
	for _, g := range gpus {
		if g.MemUsedMiB < 0 {
			continue
		}
		r, ok := j.gpus[g.Index]
		if !ok {
			r = &GPUReading{Index: g.Index, FirstMiB: g.MemUsedMiB, FirstTime: t}
			j.gpus[g.Index] = r
		}
		r.MiB, r.TotalMiB, r.Time = g.MemUsedMiB, g.MemTotalMiB, t
		r.Readings++
	}
}

// readMiB records a wait's reading of used MiB per GPU, streamed while it
// polls.
func (j *Journal) readMiB(used map[int]int64, t time.Time) {
	gpus := make([]helper.GPU, 0, len(used))
	j.mu.Lock()
	for idx, mib := range used {
		g := helper.GPU{Index: idx, MemUsedMiB: mib}
		if r, ok := j.gpus[idx]; ok {
			g.MemTotalMiB = r.TotalMiB
		}
		gpus = append(gpus, g)
	}
	j.mu.Unlock()
	j.readGPUs(gpus, t)
}

func (j *Journal) readHolders(hs []helper.Holder) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.holders == nil {
		j.holders = map[procKey][]int{}
	}
	for _, h := range hs {
		j.holders[procKey{h.PID, h.StartTime}] = h.GPUs
	}
}

// Freed records that gpu.free found GPU idx free at step, and says so.
func (j *Journal) Freed(h Host, idx int, step string, before, after int64) {
	now := time.Now()
	j.mu.Lock()
	if j.freed == nil {
		j.freed = map[int]FreedRecord{}
	}
	j.freed[idx] = FreedRecord{GPU: idx, Step: step, Time: now}
	j.mu.Unlock()
	h.Emit(Event{Time: now, Kind: EventFreed, Level: LevelInfo,
		Message: fmt.Sprintf("GPU %d free (%s): %d -> %d MiB", idx, step, before, after)})
}

// NotFreed forgets that GPU idx was found free (a settle it did not pass).
func (j *Journal) NotFreed(idx int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.freed, idx)
}

// progress records what the helper reported while a request ran: a
// signal sent is in the journal, and streamed, the moment it went out.
func (j *Journal) progress(h Host, b json.RawMessage) {
	var p helper.Progress
	if err := json.Unmarshal(b, &p); err != nil {
		return
	}
	if p.Reading != nil {
		j.readMiB(p.Reading.UsedMiB, time.Now())
	}
	if p.Signal == nil {
		return
	}
	sig := p.Signal
	j.mu.Lock()
	gpus := j.holders[procKey{sig.PID, sig.StartTime}]
	if j.has(sig.PID, sig.StartTime, sig.Signal, sig.Time) {
		j.mu.Unlock()
		return
	}
	j.signals = append(j.signals, SignalRecord{PID: sig.PID, StartTime: sig.StartTime, Comm: sig.Comm, Signal: sig.Signal,
		Time: sig.Time, Outcome: "signalled", Via: sig.Via, GPUs: gpus})
	j.mu.Unlock()
	h.Emit(Event{Time: sig.Time, Kind: EventKill, Level: LevelInfo,
		Message: fmt.Sprintf("signalled %s%s: %s at %s", helper.Label(sig.PID, sig.Comm, nil), onGPUs(gpus), sig.Signal, sig.Time.Format("15:04:05.000"))})
}

// has: that signal is recorded already (streamed); callers hold j.mu.
func (j *Journal) has(pid int, start uint64, sig string, t time.Time) bool {
	for _, r := range j.signals {
		if r.PID == pid && r.StartTime == start && r.Signal == sig && r.Time.Equal(t) {
			return true
		}
	}
	return false
}

func onGPUs(gpus []int) string {
	if len(gpus) == 0 {
		return ""
	}
	return " on GPU " + joinInts(gpus)
}

// kills records the signals of a kill's answer and streams a kill event
// for each process signalled whose signals did not stream already, and an
// exit event for each process gone (or left alive).
func (j *Journal) kills(h Host, results []helper.KillResult) {
	now := time.Now()
	var events []Event
	j.mu.Lock()
	for _, k := range results {
		if len(k.Signals) == 0 || k.Outcome == helper.OutcomeWould {
			continue
		}
		gpus := j.holders[procKey{k.PID, k.StartTime}]
		var sent []string
		last := now
		for i, sig := range k.Signals {
			t := now
			if i < len(k.SignalTimes) && !k.SignalTimes[i].IsZero() {
				t = k.SignalTimes[i]
			}
			last = t
			if j.has(k.PID, k.StartTime, sig, t) {
				continue
			}
			j.signals = append(j.signals, SignalRecord{PID: k.PID, StartTime: k.StartTime, Comm: k.Comm, Signal: sig,
				Time: t, Outcome: k.Outcome, Via: k.Via, GPUs: gpus})
			sent = append(sent, sig+" at "+t.Format("15:04:05.000"))
		}
		// The answer's outcome for every signal of the process.
		for i := range j.signals {
			if r := &j.signals[i]; r.PID == k.PID && r.StartTime == k.StartTime {
				r.Outcome = k.Outcome
			}
		}
		who := helper.Label(k.PID, k.Comm, nil)
		if len(sent) > 0 {
			events = append(events, Event{Time: last, Kind: EventKill, Level: LevelInfo,
				Message: fmt.Sprintf("signalled %s%s: %s", who, onGPUs(gpus), strings.Join(sent, ", "))})
		}
		switch k.Outcome {
		case helper.OutcomeExited:
			events = append(events, Event{Time: now, Kind: EventExit, Level: LevelInfo, Message: fmt.Sprintf("%s exited after %s", who, k.Signals[len(k.Signals)-1])})
		case helper.OutcomeKilled:
			events = append(events, Event{Time: now, Kind: EventExit, Level: LevelInfo, Message: fmt.Sprintf("%s killed by %s", who, k.Signals[len(k.Signals)-1])})
		case helper.OutcomeSurvived:
			events = append(events, Event{Time: now, Kind: EventExit, Level: LevelWarn, Message: fmt.Sprintf("%s still alive after %s: %s", who, strings.Join(k.Signals, ", "), k.Reason)})
		}
	}
	j.mu.Unlock()
	for _, e := range events {
		h.Emit(e)
	}
}

// unit records one systemd action done (not a status, not under check).
func (j *Journal) unit(h Host, r helper.UnitResponse) {
	switch r.Action {
	case helper.UnitStop, helper.UnitStart, helper.UnitRestart:
	default:
		return
	}
	if r.Unit == "" {
		return
	}
	now := time.Now()
	j.mu.Lock()
	j.units = append(j.units, UnitRecord{Unit: r.Unit, Action: r.Action, OK: r.OK, ActiveState: r.ActiveState, Time: now})
	j.mu.Unlock()
	// Debug: scripts log their stops themselves (free_gpus.lua does).
	msg := fmt.Sprintf("%s %s: %s", r.Action, r.Unit, r.ActiveState)
	if !r.OK {
		msg += " (not ok: " + r.Reason + ")"
	}
	lvl := LevelDebug
	h.Emit(Event{Time: now, Kind: EventUnit, Level: lvl, Message: msg})
}

// Record notes a helper answer the caller got without CallHelper (the
// runner's last reading).
func (j *Journal) Record(h Host, resp any) { j.record(h, resp) }

// managers records the restarters a stop (gpu.free's stop_restarters)
// stopped or failed to stop: a unit, a container, a job, a supervisor's
// tree, named by its key ("unit:sglang.service").
func (j *Journal) managers(h Host, results []helper.ManagerResult) {
	now := time.Now()
	for _, res := range results {
		if res.Outcome != helper.StopStopped && res.Outcome != helper.StopFailed {
			continue
		}
		ok := res.Outcome == helper.StopStopped
		j.mu.Lock()
		j.units = append(j.units, UnitRecord{Unit: res.Manager.Key(), Action: helper.UnitStop, OK: ok, ActiveState: res.State, Time: now})
		j.mu.Unlock()
		// Debug: gpu.free logs each stop itself, by the manager's label.
		msg, lvl := fmt.Sprintf("stopped %s: %s", res.Manager.Key(), res.State), LevelDebug
		if !ok {
			msg = fmt.Sprintf("stop %s failed: %s", res.Manager.Key(), res.Reason)
		}
		h.Emit(Event{Time: now, Kind: EventUnit, Level: lvl, Message: msg})
	}
}

// record is what CallHelper notes of every answer: the journal's part.
func (j *Journal) record(h Host, resp any) {
	now := time.Now()
	switch r := resp.(type) {
	case *helper.Snapshot:
		j.readGPUs(r.GPUs, now)
		j.readHolders(r.Holders)
	case *helper.WaitFreeResponse:
		j.readGPUs(r.GPUs, now)
		j.readHolders(r.Holders)
	case *helper.KillResponse:
		j.kills(h, r.Results)
	case *helper.ManagersResponse:
		j.managers(h, r.Results)
	case *helper.UnitResponse:
		if len(r.Units) > 0 {
			for _, u := range r.Units {
				if u.Action == "" {
					u.Action = r.Action
				}
				j.unit(h, u)
			}
			return
		}
		j.unit(h, *r)
	}
}

// observeAnswered does for an answer read after its call was cut off
// (remote.Answered: the helper's answer to a cancel) what the module that
// made the call would have done with it: count the kills and the managers
// they found, record the GPU readings.
func observeAnswered(h Host, resp any) {
	switch r := resp.(type) {
	case *helper.KillResponse:
		h.Stats().AddKills(r.Results)
		h.Managers().Add(r.Managers...)
	case *helper.WaitFreeResponse:
		h.Stats().ObserveGPUs(r.GPUs, r.ThresholdMiB)
	case *helper.Snapshot:
		h.Stats().ObserveGPUs(r.GPUs, nil)
	}
}

// Step reports what host h is doing now, for the progress line.
func Step(h Host, format string, args ...any) {
	h.Emit(Event{Kind: EventStep, Level: LevelDebug, Message: fmt.Sprintf(format, args...)})
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

// FeedProgress hands one progress report of a helper request (a
// remote.WithProgress line) to h's journal, as CallHelper does.
func FeedProgress(h Host, b json.RawMessage) { h.Stats().Journal().progress(h, b) }
