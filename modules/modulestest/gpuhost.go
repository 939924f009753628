// Package modulestest holds the fakes for testing modules from Go: a
// remote.Conn that serves helper verbs from an in-memory GPU host model and
// records every call, a modules.Host around it, and a harness that runs Lua
// test files as Go subtests.
package modulestest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpush/gpush/helper"
)

// FakeGPU is one GPU of the model. Its used memory is BaselineMiB plus
// LeakedMiB plus what its holders hold on it.
type FakeGPU struct {
	Index       int
	UUID        string
	Name        string
	BusID       string
	TotalMiB    int64
	BaselineMiB int64
	// LeakedMiB stays used with no holder (the memory-held case).
	LeakedMiB int64
	// Unknown makes the driver report [N/A] (-1) for its memory.
	Unknown bool
}

// FakeHolder is one process holding GPUs.
type FakeHolder struct {
	helper.Holder
	// MemByGPU is the memory it holds per GPU index.
	MemByGPU map[int]int64
	// IgnoreTerm: TERM leaves it running; KILL still works.
	IgnoreTerm bool
	// Stuck: in D state, it survives KILL too.
	Stuck bool
	// ExitAfterPolls > 0: it exits on its own after that many wait-free polls.
	ExitAfterPolls int
	// AppearAfterPolls > 0: it is not there until that many more wait-free
	// polls have happened (a new holder appearing during the wait).
	AppearAfterPolls int
}

// FakeUnit is a systemd unit of the model; stopping it ends its holders
// (holders whose Unit is its name) unless StayAfterStop.
type FakeUnit struct {
	Name          string
	Active        bool
	MainPID       int
	StayAfterStop bool
}

// GPUHost is an in-memory GPU host. All methods are safe for concurrent use.
type GPUHost struct {
	mu       sync.Mutex
	Hostname string
	BootID   string
	// NoSMI: nvidia-smi is missing; snapshots carry no GPUs and a warning.
	NoSMI bool
	// NoSystemd: the unit verb answers systemd=false.
	NoSystemd bool
	gpus      []*FakeGPU
	holders   []*FakeHolder
	units     map[string]*FakeUnit
	nextPID   int
	polls     int
	start     time.Time
}

// NewGPUHost returns a host with n idle H200-like GPUs (143771 MiB, 0 MiB used).
func NewGPUHost(hostname string, n int) *GPUHost {
	g := &GPUHost{Hostname: hostname, BootID: "boot-" + hostname, units: map[string]*FakeUnit{},
		nextPID: 1000, start: time.Now()}
	for i := 0; i < n; i++ {
		g.gpus = append(g.gpus, &FakeGPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", hostname, i),
			Name: "NVIDIA H200", BusID: fmt.Sprintf("00000000:%02X:00.0", 6+i), TotalMiB: 143771})
	}
	return g
}

// GPU returns GPU idx for editing (nil if none).
func (g *GPUHost) GPU(idx int) *FakeGPU {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, x := range g.gpus {
		if x.Index == idx {
			return x
		}
	}
	return nil
}

// AddHolder adds a holder. Zero fields get defaults: a fresh pid, start
// time pid*100, the host's boot id, comm "python3", user "alice", devices
// from MemByGPU plus nvidiactl and nvidia-uvm. It returns the holder.
func (g *GPUHost) AddHolder(h FakeHolder) *FakeHolder {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h.PID == 0 {
		g.nextPID++
		h.PID = g.nextPID
	}
	if h.StartTime == 0 {
		h.StartTime = uint64(h.PID) * 100
	}
	if h.BootID == "" {
		h.BootID = g.BootID
	}
	if h.Comm == "" {
		h.Comm = "python3"
	}
	if h.Cmdline == nil {
		h.Cmdline = []string{"/usr/bin/" + h.Comm, "train.py"}
	}
	if h.User == "" {
		h.User, h.UID = "alice", 1000
	}
	if h.PPID == 0 {
		h.PPID = 1
	}
	if h.PGID == 0 {
		h.PGID = h.PID
	}
	if h.SID == 0 {
		h.SID = h.PGID
	}
	if h.State == "" {
		h.State = "S"
		if h.Stuck {
			h.State = "D"
		}
	}
	if h.GPUs == nil {
		for idx := range h.MemByGPU {
			h.GPUs = append(h.GPUs, idx)
		}
		sort.Ints(h.GPUs)
	}
	if h.Devices == nil {
		for _, idx := range h.GPUs {
			h.Devices = append(h.Devices, fmt.Sprintf("nvidia%d", idx))
		}
		h.Devices = append(h.Devices, "nvidiactl", "nvidia-uvm")
	}
	h.SharedOnly = len(h.GPUs) == 0
	if h.AppearAfterPolls > 0 {
		h.AppearAfterPolls += g.polls // counted from now, polls are host-wide
	}
	if h.Protected && h.ProtectedWhy == "" {
		h.ProtectedWhy = h.Comm
	}
	p := &h
	g.holders = append(g.holders, p)
	return p
}

// AddUnit adds a systemd unit.
func (g *GPUHost) AddUnit(u FakeUnit) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := u
	g.units[u.Name] = &c
}

// Unit returns a copy of unit name and whether it exists.
func (g *GPUHost) Unit(name string) (FakeUnit, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	u, ok := g.units[name]
	if !ok {
		return FakeUnit{}, false
	}
	return *u, true
}

// Alive reports whether pid is a live (visible) holder.
func (g *GPUHost) Alive(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.find(pid) != nil
}

// UsedMiB returns GPU idx's used memory now.
func (g *GPUHost) UsedMiB(idx int) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, x := range g.gpus {
		if x.Index == idx {
			return g.used(x)
		}
	}
	return -1
}

func (g *GPUHost) visible(h *FakeHolder) bool { return h.AppearAfterPolls <= g.polls }

func (g *GPUHost) find(pid int) *FakeHolder {
	for _, h := range g.holders {
		if h.PID == pid && g.visible(h) {
			return h
		}
	}
	return nil
}

func (g *GPUHost) used(x *FakeGPU) int64 {
	if x.Unknown {
		return -1
	}
	u := x.BaselineMiB + x.LeakedMiB
	for _, h := range g.holders {
		if g.visible(h) {
			u += h.MemByGPU[x.Index]
		}
	}
	return u
}

func (g *GPUHost) gpuList() []helper.GPU {
	out := make([]helper.GPU, 0, len(g.gpus))
	for _, x := range g.gpus {
		total := x.TotalMiB
		if x.Unknown {
			total = -1
		}
		out = append(out, helper.GPU{Index: x.Index, UUID: x.UUID, Name: x.Name, BusID: x.BusID,
			Minor: x.Index, MemUsedMiB: g.used(x), MemTotalMiB: total})
	}
	return out
}

func (g *GPUHost) holderList() []helper.Holder {
	var out []helper.Holder
	for _, h := range g.holders {
		if !g.visible(h) {
			continue
		}
		c := h.Holder
		c.MemMiB = 0
		for _, m := range h.MemByGPU {
			c.MemMiB += m
		}
		c.AgeSeconds = float64(c.StartTime) / 100
		out = append(out, c)
	}
	return out
}

func (g *GPUHost) snapshot() helper.Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := helper.Snapshot{Version: helper.Version, Hostname: g.Hostname, BootID: g.BootID,
		Time: time.Now(), SMI: !g.NoSMI, Holders: g.holderList()}
	if g.NoSMI {
		s.Warnings = append(s.Warnings, "nvidia-smi: executable file not found in $PATH")
	} else {
		s.GPUs = g.gpuList()
	}
	return s
}

func (g *GPUHost) remove(pid int) {
	for i, h := range g.holders {
		if h.PID == pid {
			g.holders = append(g.holders[:i], g.holders[i+1:]...)
			return
		}
	}
}

// kill follows the helper's contract on the model: identity re-checked,
// protected skipped unless forced, TERM then KILL, stuck survives.
func (g *GPUHost) kill(req helper.KillRequest) helper.KillResponse {
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := helper.KillResponse{Version: helper.Version}
	done := map[int]bool{}
	var consider func(id helper.Identity, via string, exact bool)
	consider = func(id helper.Identity, via string, exact bool) {
		if done[id.PID] {
			return
		}
		done[id.PID] = true
		h := g.find(id.PID)
		if h == nil || (exact && (h.StartTime != id.StartTime || (id.BootID != "" && id.BootID != h.BootID))) {
			// Gone, or the pid was reused by another process: nothing to signal.
			resp.Results = append(resp.Results, helper.KillResult{Identity: id, Outcome: helper.OutcomeExited,
				Reason: "not running", Via: via})
			return
		}
		r := helper.KillResult{Identity: h.Identity, Comm: h.Comm, Via: via}
		switch {
		case h.PID <= 1:
			r.Outcome, r.Reason = helper.OutcomeSkipped, "pid 1"
		case h.Protected && !req.Force:
			r.Outcome, r.Reason = helper.OutcomeSkipped, "protected: "+h.ProtectedWhy
		case req.DryRun:
			r.Outcome = helper.OutcomeWould
		default:
			first := strings.ToUpper(strings.TrimPrefix(strings.ToUpper(req.Signal), "SIG"))
			if first == "" {
				first = "TERM"
			}
			r.Signals = append(r.Signals, first)
			switch {
			case first == "KILL" && !h.Stuck:
				r.Outcome = helper.OutcomeKilled
				g.remove(h.PID)
			case first != "KILL" && !h.IgnoreTerm && !h.Stuck:
				r.Outcome = helper.OutcomeExited
				g.remove(h.PID)
			default:
				if first != "KILL" {
					r.Signals = append(r.Signals, "KILL")
				}
				if h.Stuck {
					r.Outcome, r.State, r.Reason = helper.OutcomeSurvived, "D", "still alive after KILL (state D)"
				} else {
					r.Outcome = helper.OutcomeKilled
					g.remove(h.PID)
				}
			}
		}
		resp.Results = append(resp.Results, r)
		if req.Group {
			for _, o := range g.holderList() {
				if o.PGID == h.PGID && o.PID != h.PID {
					consider(o.Identity, fmt.Sprintf("group of %d", h.PID), false)
				}
			}
		}
		if req.Tree {
			for _, o := range g.holderList() {
				if o.PPID == h.PID {
					consider(o.Identity, fmt.Sprintf("child of %d", h.PID), false)
				}
			}
		}
	}
	for _, t := range req.Targets {
		consider(t, "target", true)
	}
	return resp
}

// waitFree polls the model. Time is virtual (Interval per poll, no real
// sleeping) so tests are fast; ctx is still honoured between polls.
func (g *GPUHost) waitFree(ctx context.Context, req helper.WaitFreeRequest) (helper.WaitFreeResponse, error) {
	interval, timeout := req.Interval.D(), req.Timeout.D()
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := helper.WaitFreeResponse{Version: helper.Version, ThresholdMiB: map[int]int64{}}
	watched := map[int]bool{}
	for _, x := range g.gpus {
		if len(req.GPUs) == 0 || contains(req.GPUs, x.Index) {
			watched[x.Index] = true
			t := x.BaselineMiB
			if req.ThresholdMiB != nil {
				t = *req.ThresholdMiB
			}
			resp.ThresholdMiB[x.Index] = t
		}
	}
	initial := map[int]bool{}
	for _, h := range g.holderList() {
		initial[h.PID] = true
	}
	blocking := func() []helper.Holder {
		var out []helper.Holder
		for _, h := range g.holderList() {
			if req.IgnoreShared && h.SharedOnly {
				continue
			}
			hit := h.SharedOnly && len(req.GPUs) == 0
			for _, idx := range h.GPUs {
				hit = hit || watched[idx]
			}
			if hit {
				out = append(out, h)
			}
		}
		return out
	}
	for t := time.Duration(0); ; t += interval {
		if err := ctx.Err(); err != nil {
			return resp, fmt.Errorf("wait-free interrupted: %w", err)
		}
		resp.Polls++
		g.polls++
		for _, h := range g.holders {
			if h.ExitAfterPolls > 0 && g.visible(h) {
				h.ExitAfterPolls--
				if h.ExitAfterPolls == 0 {
					g.remove(h.PID)
					break
				}
			}
		}
		sample := helper.Sample{T: helper.Duration(t), UsedMiB: map[int]int64{}}
		memFree := true
		for _, x := range g.gpus {
			if watched[x.Index] {
				u := g.used(x)
				sample.UsedMiB[x.Index] = u
				if u > resp.ThresholdMiB[x.Index] {
					memFree = false
				}
			}
		}
		left := blocking()
		sample.Holders = len(left)
		resp.Timeline = append(resp.Timeline, sample)
		resp.Elapsed = helper.Duration(t)
		for _, h := range left {
			if !initial[h.PID] {
				resp.Outcome, resp.Reason = helper.WaitNewHolder, fmt.Sprintf("new holder pid %d (%s) appeared", h.PID, h.Comm)
				break
			}
		}
		switch {
		case resp.Outcome != "":
		case memFree && len(left) == 0:
			resp.OK, resp.Outcome = true, helper.WaitFreed
		case t+interval > timeout && len(left) == 0:
			resp.Outcome, resp.Reason = helper.WaitMemoryHeld, "no holder left but memory is still used"
		case t+interval > timeout:
			resp.Outcome, resp.Reason = helper.WaitTimedOut, fmt.Sprintf("%d holders still there after %s", len(left), timeout)
		default:
			continue
		}
		for _, x := range g.gpuList() {
			if watched[x.Index] {
				resp.GPUs = append(resp.GPUs, x)
			}
		}
		resp.Holders = left
		return resp, nil
	}
}

func (g *GPUHost) unit(req helper.UnitRequest) helper.UnitResponse {
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := helper.UnitResponse{Version: helper.Version, Unit: req.Unit, Action: req.Action, Systemd: !g.NoSystemd}
	if g.NoSystemd {
		resp.Reason = "systemd is not running on this host (no /run/systemd/system)"
		return resp
	}
	u, ok := g.units[req.Unit]
	if !ok {
		resp.Reason = fmt.Sprintf("Unit %s could not be found.", req.Unit)
		resp.ActiveState, resp.SubState = "inactive", "dead"
		resp.OK = req.Action == helper.UnitStatus || req.Action == helper.UnitStop
		return resp
	}
	switch req.Action {
	case helper.UnitStop:
		u.Active = false
		if !u.StayAfterStop {
			for _, h := range append([]*FakeHolder(nil), g.holders...) {
				if h.Unit == u.Name {
					g.remove(h.PID)
				}
			}
		}
	case helper.UnitStart, helper.UnitRestart:
		u.Active = true
	}
	resp.OK = true
	resp.ActiveState, resp.SubState = "inactive", "dead"
	if u.Active {
		resp.ActiveState, resp.SubState, resp.MainPID = "active", "running", u.MainPID
	}
	resp.ControlGroup = "/system.slice/" + u.Name
	for _, h := range g.holderList() {
		if h.Unit == u.Name {
			resp.GPUHolders = append(resp.GPUHolders, h)
			if req.Action == helper.UnitStop {
				resp.Remaining = append(resp.Remaining, helper.Proc{Identity: h.Identity, Comm: h.Comm,
					Cmdline: h.Cmdline, State: h.State})
			}
		}
	}
	if req.Action == helper.UnitStop && len(resp.Remaining) > 0 {
		resp.OK = false
		resp.Reason = fmt.Sprintf("%d processes still alive in the unit's cgroup", len(resp.Remaining))
	}
	return resp
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
