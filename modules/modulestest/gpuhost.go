// Package modulestest holds the fakes for testing modules from Go: a
// remote.Conn that serves helper verbs from an in-memory GPU host model and
// records every call, a modules.Host around it, and a harness that runs Lua
// test files as Go subtests.
package modulestest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpush/gpush/helper"
)

// FakeGPU is one GPU of the model. Its used memory is BaselineMiB plus
// LeakedMiB plus what its holders (and ghosts) hold on it.
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
	// Source is where the helper would know it from (helper.SourceSMI when
	// empty); a GPU not listed by nvidia-smi has unknown memory.
	Source string
}

// FakeHolder is one process holding GPUs. Whether it is an owner is
// derived as the helper derives it: it has memory on a GPU (nvidia-smi
// lists it) or maps a device (every GPU holder but monitors and protected
// daemons), or, without nvidia-smi, has nvidia-uvm open.
type FakeHolder struct {
	helper.Holder
	// MemByGPU is the memory it holds per GPU index.
	MemByGPU map[int]int64
	// Monitor: an NVML client (nvidia-smi, a pynvml probe): nvidiaN of its
	// GPUs and nvidiactl, no nvidia-uvm, no memory. Set GPUs.
	Monitor bool
	// NoUVM: it does not open nvidia-uvm (protected holders and monitors
	// never do by default); UVM: it does, even so (a spoofed protected name).
	NoUVM, UVM bool
	// IgnoreTerm: TERM leaves it running; KILL still works.
	IgnoreTerm bool
	// Stuck: in D state, it survives KILL too.
	Stuck bool
	// ExitAfterPolls > 0: it exits on its own after that many wait-free polls.
	ExitAfterPolls int
	// AppearAfterPolls > 0: it is not there until that many more wait-free
	// polls have happened (a new holder appearing during the wait).
	AppearAfterPolls int
	// Heir is the pid of a holder (a forked child) that inherited its device
	// files: when this one dies its memory stays charged to its dead pid (a
	// ghost) for as long as the heir lives.
	Heir int
	// RespawnAfterPolls > 0: when it is killed while its parent (a FakeProc)
	// lives, its parent starts a copy under a new pid that opens the GPU
	// that many wait-free polls later (torchrun's agent, a shell loop); < 0:
	// at once, before anything looks again.
	RespawnAfterPolls int
}

// FakeProc is a live process that holds no GPU: a supervisor (the parent of
// workers), which gpu.kill may find and kill.
type FakeProc struct {
	helper.Identity
	PPID    int
	Comm    string
	Cmdline []string
}

// FakeUnit is a systemd unit of the model; stopping it ends its holders
// (holders whose Unit is its name) unless StayAfterStop.
type FakeUnit struct {
	Name          string
	Active        bool
	MainPID       int
	StayAfterStop bool
	// ExitingAfterStop: its holders outlive the stop for a moment outside
	// the cgroup's listing (exiting: the leader a zombie while a thread
	// still closes the device files), as a loaded lab host showed. The stop
	// reports them as GPU holders of the unit, with nothing remaining.
	ExitingAfterStop bool
	// Restart is its Restart= ("" reads as "no").
	Restart string
}

type fakeGhost struct {
	helper.Ghost
	keeper int // the pid whose open device files keep the memory
}

// GPUHost is an in-memory GPU host. All methods are safe for concurrent use.
type GPUHost struct {
	mu       sync.Mutex
	Hostname string
	BootID   string
	// NoSMI: nvidia-smi is missing; the GPUs are known from the driver only
	// (memory unknown) and snapshots carry a warning.
	NoSMI bool
	// NoSystemd: the unit verb answers systemd=false.
	NoSystemd bool
	gpus      []*FakeGPU
	holders   []*FakeHolder
	procs     []*FakeProc
	ghosts    []fakeGhost
	units     map[string]*FakeUnit
	nextPID   int
	polls     int
	clock     time.Time // virtual: waits move it on, nothing else does
}

// NewGPUHost returns a host with n idle H200-like GPUs (143771 MiB, 0 MiB used).
func NewGPUHost(hostname string, n int) *GPUHost {
	g := &GPUHost{Hostname: hostname, BootID: "boot-" + hostname, units: map[string]*FakeUnit{}, nextPID: 1000,
		clock: time.Unix(1_700_000_000, 0)}
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

func (g *GPUHost) newPID() int {
	g.nextPID++
	return g.nextPID
}

// AddHolder adds a holder. Zero fields get defaults: a fresh pid, start
// time pid*100, the host's boot id, comm "python3", user "alice", devices
// from GPUs (default: the keys of MemByGPU) plus nvidiactl and, unless a
// monitor, protected or NoUVM, nvidia-uvm. It returns the holder.
func (g *GPUHost) AddHolder(h FakeHolder) *FakeHolder {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addHolder(h)
}

func (g *GPUHost) addHolder(h FakeHolder) *FakeHolder {
	if h.PID == 0 {
		h.PID = g.newPID()
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
		for idx, m := range h.MemByGPU {
			if m != 0 {
				h.GPUs = append(h.GPUs, idx)
			}
		}
		sort.Ints(h.GPUs)
	}
	if h.Devices == nil {
		for _, idx := range h.GPUs {
			h.Devices = append(h.Devices, fmt.Sprintf("nvidia%d", idx))
		}
		h.Devices = append(h.Devices, "nvidiactl")
		if h.UVM || !h.Monitor && !h.Protected && !h.NoUVM {
			h.Devices = append(h.Devices, "nvidia-uvm")
		}
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

// AddProc adds a process that holds no GPU (a supervisor). Zero fields get
// defaults as in AddHolder; it returns the process.
func (g *GPUHost) AddProc(p FakeProc) *FakeProc {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.PID == 0 {
		p.PID = g.newPID()
	}
	if p.StartTime == 0 {
		p.StartTime = uint64(p.PID) * 100
	}
	if p.BootID == "" {
		p.BootID = g.BootID
	}
	if p.Comm == "" {
		p.Comm = "python3"
	}
	if p.Cmdline == nil {
		p.Cmdline = []string{"/usr/bin/" + p.Comm, "launch.py"}
	}
	if p.PPID == 0 {
		p.PPID = 1
	}
	c := p
	g.procs = append(g.procs, &c)
	return &c
}

// AddGhost charges mib on GPU gpu to pid, a process that no longer exists,
// for as long as the holder keeper lives (a forked child keeping its dead
// parent's memory).
func (g *GPUHost) AddGhost(pid int, name string, gpu int, mib int64, keeper int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ghosts = append(g.ghosts, fakeGhost{Ghost: helper.Ghost{PID: pid, Name: name, GPU: gpu, MemMiB: mib}, keeper: keeper})
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

// Alive reports whether pid is a live (visible) holder or process.
func (g *GPUHost) Alive(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.find(pid) != nil || g.proc(pid) != nil
}

// HoldersOf returns the pids of the live holders of GPU idx, in order.
func (g *GPUHost) HoldersOf(idx int) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	for _, h := range g.holderList() {
		if contains(h.GPUs, idx) {
			out = append(out, h.PID)
		}
	}
	return out
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

func (g *GPUHost) proc(pid int) *FakeProc {
	for _, p := range g.procs {
		if p.PID == pid {
			return p
		}
	}
	return nil
}

func (x *FakeGPU) unknown(noSMI bool) bool {
	return x.Unknown || noSMI || x.Source != "" && x.Source != helper.SourceSMI
}

// trueUsed is what the GPU really has in use, read or not.
func (g *GPUHost) trueUsed(x *FakeGPU) int64 {
	u := x.BaselineMiB + x.LeakedMiB
	for _, h := range g.holders {
		if g.visible(h) {
			u += h.MemByGPU[x.Index]
		}
	}
	for _, gh := range g.ghosts {
		if gh.GPU == x.Index {
			u += gh.MemMiB
		}
	}
	return u
}

func (g *GPUHost) used(x *FakeGPU) int64 {
	if x.unknown(g.NoSMI) {
		return -1
	}
	return g.trueUsed(x)
}

func (g *GPUHost) gpuList() []helper.GPU {
	out := make([]helper.GPU, 0, len(g.gpus))
	for _, x := range g.gpus {
		total, src := x.TotalMiB, x.Source
		if src == "" {
			src = helper.SourceSMI
		}
		if g.NoSMI && src == helper.SourceSMI {
			src = helper.SourceDriver
		}
		if src != helper.SourceSMI {
			total = -1
		}
		out = append(out, helper.GPU{Index: x.Index, UUID: x.UUID, Name: x.Name, BusID: x.BusID,
			Minor: x.Index, MemUsedMiB: g.used(x), MemTotalMiB: total, Source: src})
	}
	return out
}

// holderList is what a snapshot reports, judged as the helper judges:
// owner, memory per GPU (unknown without nvidia-smi), suspicious names.
func (g *GPUHost) holderList() []helper.Holder {
	var out []helper.Holder
	for _, h := range g.holders {
		if !g.visible(h) {
			continue
		}
		c := h.Holder
		c.MemMiB, c.MemByGPU = 0, nil
		for idx, m := range h.MemByGPU {
			if m > 0 && !g.NoSMI {
				if c.MemByGPU == nil {
					c.MemByGPU = map[int]int64{}
				}
				c.MemByGPU[idx] = m
				c.MemMiB += m
			}
		}
		// As the helper judges: listed by nvidia-smi; or a context mapped,
		// which every holder of a GPU but monitors and protected daemons
		// has (a forked heir too); or, without nvidia-smi, nvidia-uvm open.
		maps := !h.Monitor && !h.Protected && len(c.GPUs) > 0
		c.Owner = c.MemMiB > 0 || maps || h.UVM || g.NoSMI && hasDevice(c.Devices, "nvidia-uvm")
		if c.Protected && c.Owner && c.ProtectedWhy == c.Comm {
			why := "it has nvidia-uvm open"
			if c.MemMiB > 0 {
				why = fmt.Sprintf("it owns %d MiB", c.MemMiB)
			}
			c.Suspicious = fmt.Sprintf("protected name %s, but %s", c.Comm, why)
		}
		if c.AgeSeconds == 0 {
			c.AgeSeconds = float64(c.StartTime) / 100
		}
		c.Managers = nil
		if m, ok := g.parentManager(c.PPID); ok {
			c.Managers = []helper.Manager{m}
		}
		out = append(out, c)
	}
	return out
}

func hasDevice(devs []string, name string) bool {
	for _, d := range devs {
		if d == name {
			return true
		}
	}
	return false
}

// ghostList: memory charged to dead pids, with the live holders of the GPU
// that nvidia-smi does not list as the likely keepers.
func (g *GPUHost) ghostList(holders []helper.Holder) []helper.Ghost {
	if g.NoSMI {
		return nil
	}
	var out []helper.Ghost
	for _, gh := range g.ghosts {
		c := gh.Ghost
		for _, h := range holders {
			if contains(h.GPUs, c.GPU) && h.MemByGPU[c.GPU] == 0 {
				c.HeldBy = append(c.HeldBy, h.PID)
			}
		}
		out = append(out, c)
	}
	return out
}

// assess judges the model's GPUs as the helper does (helper.Assess).
func (g *GPUHost) assess(threshold map[int]int64) ([]helper.GPU, []helper.Holder, []helper.Ghost, []helper.GPUStatus) {
	gpus, holders := g.gpuList(), g.holderList()
	ghosts := g.ghostList(holders)
	return gpus, holders, ghosts, helper.Assess(gpus, holders, ghosts, threshold)
}

func (g *GPUHost) snapshot() helper.Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := helper.Snapshot{Version: helper.Version, Hostname: g.Hostname, BootID: g.BootID,
		Time: time.Now(), SMI: !g.NoSMI}
	s.GPUs, s.Holders, s.Ghosts, s.Status = g.assess(nil)
	if g.NoSMI {
		s.Warnings = append(s.Warnings, "nvidia-smi: executable file not found in $PATH; GPUs known from /proc/driver/nvidia only, memory unknown")
	}
	return s
}

// remove ends holder pid: a ghost stays behind where an heir keeps its
// device files, a copy is scheduled where a live parent respawns it, and
// the ghosts it kept are released.
func (g *GPUHost) remove(pid int, killed bool) {
	for i, h := range g.holders {
		if h.PID != pid {
			continue
		}
		g.holders = append(g.holders[:i], g.holders[i+1:]...)
		kept := g.ghosts[:0]
		for _, gh := range g.ghosts {
			if gh.keeper != pid {
				kept = append(kept, gh)
			}
		}
		g.ghosts = kept
		if h.Heir != 0 && g.find(h.Heir) != nil {
			for idx, m := range h.MemByGPU {
				if m > 0 {
					g.ghosts = append(g.ghosts, fakeGhost{Ghost: helper.Ghost{PID: h.PID, Name: h.Comm, GPU: idx, MemMiB: m}, keeper: h.Heir})
				}
			}
		}
		if killed && h.RespawnAfterPolls != 0 && g.proc(h.PPID) != nil {
			c := *h
			c.PID, c.StartTime, c.PGID, c.SID, c.GPUs, c.Devices, c.Heir, c.AgeSeconds = 0, 0, 0, 0, nil, nil, 0, 0
			c.AppearAfterPolls = max(h.RespawnAfterPolls, 0)
			g.addHolder(c)
		}
		return
	}
}

// removeProc ends a process; a respawn it had not started yet dies with it.
func (g *GPUHost) removeProc(pid int) {
	for i, p := range g.procs {
		if p.PID == pid {
			g.procs = append(g.procs[:i], g.procs[i+1:]...)
			break
		}
	}
	kept := g.holders[:0]
	for _, h := range g.holders {
		if g.visible(h) || h.PPID != pid {
			kept = append(kept, h)
		}
	}
	g.holders = kept
}

// reapers never count as supervisors: they adopt orphans, they restart nothing.
var reapers = map[string]bool{"systemd": true, "init": true, "tini": true, "dumb-init": true, "containerd-shim": true}

// kill runs the helper's kill on the model (helper.KillOn): each signal
// acts as the holder's script says (IgnoreTerm, Stuck, a respawning
// parent), on the model's virtual clock.
func (g *GPUHost) kill(ctx context.Context, req helper.KillRequest) (*helper.KillResponse, error) {
	resp, err := helper.KillOn(ctx, req, modelSource{g})
	if err != nil {
		return nil, fmt.Errorf("kill on model %s: %w", g.Hostname, err)
	}
	return resp, nil
}

// modelSource is the model as the helper's wait and kill read a host.
type modelSource struct{ *GPUHost }

var (
	_ helper.Source     = modelSource{}
	_ helper.KillSource = modelSource{}
)

// Ticks is the start time the model's next process gets.
func (k modelSource) Ticks() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return uint64(k.nextPID+1) * 100
}

func (k modelSource) BootID() string { return k.GPUHost.BootID }

func (k modelSource) Procs() ([]helper.KillProc, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []helper.KillProc
	for _, h := range k.holders {
		if k.visible(h) {
			out = append(out, holderProc(h))
		}
	}
	for _, p := range k.procs {
		out = append(out, procProc(p))
	}
	return out, nil
}

func (k modelSource) Proc(pid int) (helper.KillProc, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.killProc(pid)
}

func (g *GPUHost) killProc(pid int) (helper.KillProc, bool) {
	if h := g.find(pid); h != nil {
		return holderProc(h), true
	}
	if p := g.proc(pid); p != nil {
		return procProc(p), true
	}
	return helper.KillProc{}, false
}

func holderProc(h *FakeHolder) helper.KillProc {
	p := helper.KillProc{Identity: h.Identity, PPID: h.PPID, PGID: h.PGID, State: h.State, Comm: h.Comm}
	if h.Protected {
		// The helper's words: the model keeps the bare name.
		p.Protected = h.ProtectedWhy
		if !strings.HasPrefix(p.Protected, "protected name ") {
			p.Protected = "protected name " + p.Protected
		}
	}
	if h.PID <= 1 {
		p.Never = "pid " + strconv.Itoa(h.PID)
	}
	return p
}

// procProc: a process is its own group's leader.
func procProc(x *FakeProc) helper.KillProc {
	p := helper.KillProc{Identity: x.Identity, PPID: x.PPID, PGID: x.PID, State: "S", Comm: x.Comm}
	if x.PID <= 1 {
		p.Never = "pid " + strconv.Itoa(x.PID)
	}
	return p
}

// Self: the helper runs in no group of the model's.
func (k modelSource) Self() helper.KillProc { return helper.KillProc{PGID: -1} }

// Signal: a holder ends unless it ignores TERM or is stuck in D (then
// nothing ends it); a process without GPUs ends.
func (k modelSource) Signal(id helper.Identity, sig string) (bool, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.killProc(id.PID)
	switch {
	case !ok:
		return false, "gone"
	case p.StartTime != id.StartTime:
		return false, "pid reused"
	}
	h := k.find(id.PID)
	switch {
	case h == nil:
		k.removeProc(id.PID)
	case h.Stuck, h.IgnoreTerm && sig != "KILL":
	default:
		k.remove(id.PID, true)
	}
	return true, ""
}

// Ignores: IgnoreTerm is a handler, not SIG_IGN: the grace is waited.
func (k modelSource) Ignores(helper.Identity, string) bool { return false }

// Chains: the model's only managers are live parents.
func (k modelSource) Chains(_ context.Context, pids []int) map[int][]helper.Manager {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[int][]helper.Manager{}
	for _, pid := range pids {
		p, ok := k.killProc(pid)
		if !ok {
			continue
		}
		if m, ok := k.parentManager(p.PPID); ok {
			out[pid] = []helper.Manager{m}
		}
	}
	return out
}

func (k modelSource) Alive(_ context.Context, ms []*helper.Manager) []bool {
	out := make([]bool, len(ms))
	for i, m := range ms {
		out[i] = k.managerAlive(*m)
	}
	return out
}

// managerAlive: a process manager is alive while the model has it, a unit
// while the model's unit is active.
func (g *GPUHost) managerAlive(m helper.Manager) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	unitActive := func(name string) bool {
		u, ok := g.units[name]
		return ok && u.Active
	}
	switch m.Kind {
	case helper.ManagerProcess, "":
		if m.PID > 0 {
			return g.proc(m.PID) != nil || g.find(m.PID) != nil
		}
		return unitActive(m.Unit)
	case helper.ManagerUnit:
		return unitActive(m.Unit)
	}
	return true
}

// parentManager is the process manager a live parent ppid is, as the
// helper's chains name it; none for pid 1, reapers and what the model
// does not have.
func (g *GPUHost) parentManager(ppid int) (helper.Manager, bool) {
	if ppid <= 1 {
		return helper.Manager{}, false
	}
	var id helper.Identity
	var comm string
	var cmd []string
	if p := g.proc(ppid); p != nil {
		id, comm, cmd = p.Identity, p.Comm, p.Cmdline
	} else if h := g.find(ppid); h != nil {
		id, comm, cmd = h.Identity, h.Comm, h.Cmdline
	} else {
		return helper.Manager{}, false
	}
	if reapers[comm] {
		return helper.Manager{}, false
	}
	m := helper.Manager{Kind: helper.ManagerProcess, Identity: id, Comm: comm, Cmdline: cmd,
		Restarts: helper.RestartsMaybe, Stop: []string{"kill", strconv.Itoa(id.PID)}}
	m.Why = helper.ManagerWhy(m)
	return m, true
}

// managers answers the managers verb from the model: a process manager is
// alive while the model has it, a unit while the model's unit is active;
// a stop kills a process manager's tree and stops a unit.
func (g *GPUHost) managers(ctx context.Context, req helper.ManagersRequest) helper.ManagersResponse {
	resp := helper.ManagersResponse{Results: []helper.ManagerResult{}}
	alive := g.managerAlive
	for _, m := range req.Managers {
		res := helper.ManagerResult{Manager: m, Alive: alive(m)}
		if req.Action == helper.ManagersStop {
			switch {
			case !res.Alive:
				res.Outcome = helper.StopAlready
			case m.Kind == helper.ManagerPod:
				res.Outcome, res.Reason = helper.StopRefused, "gpush never deletes Kubernetes objects"
			case req.DryRun:
				res.Outcome = helper.StopWould
			case m.Kind == helper.ManagerProcess:
				if _, err := g.kill(ctx, helper.KillRequest{Targets: []helper.Identity{m.Identity}, Tree: true, Force: true}); err != nil {
					res.Outcome, res.Reason = helper.StopFailed, err.Error()
					break
				}
				res.Outcome, res.Alive = helper.StopStopped, alive(m)
			case m.Kind == helper.ManagerUnit:
				g.unit(helper.UnitRequest{Action: helper.UnitStop, Unit: m.Unit})
				res.Outcome, res.Alive = helper.StopStopped, alive(m)
			default:
				res.Outcome, res.Reason = helper.StopFailed, "the model cannot stop a "+m.Kind
			}
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}

// waitFree runs the helper's wait on the model (helper.WaitFreeOn): its
// clock is virtual, so a wait takes no real time, and each poll is one
// step of the model's scripted behaviours (ExitAfterPolls,
// AppearAfterPolls).
func (g *GPUHost) waitFree(ctx context.Context, req helper.WaitFreeRequest) (*helper.WaitFreeResponse, error) {
	resp, err := helper.WaitFreeOn(ctx, req, modelSource{g})
	if err != nil {
		return nil, fmt.Errorf("wait-free on model %s: %w", g.Hostname, err)
	}
	return resp, nil
}

// Now is the model's virtual clock.
func (g modelSource) Now() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clock
}

// Sleep moves the virtual clock on to until.
func (g modelSource) Sleep(ctx context.Context, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if until.After(g.clock) {
		g.clock = until
	}
	return nil
}

// Poll is one poll of a wait: the model steps on (holders appear and
// exit as scripted), then reads its GPUs and holders, owning nothing yet.
func (g modelSource) Poll(ctx context.Context) (helper.Reading, error) {
	if err := ctx.Err(); err != nil {
		return helper.Reading{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.polls++
	for _, h := range g.holders {
		if h.ExitAfterPolls > 0 && g.visible(h) {
			h.ExitAfterPolls--
			if h.ExitAfterPolls == 0 {
				g.remove(h.PID, false)
				break
			}
		}
	}
	holders := g.holderList()
	for i := range holders {
		h := &holders[i]
		h.Owner, h.OwnerWhy, h.MemMiB, h.MemByGPU = false, "", 0, nil
	}
	return helper.Reading{SMI: !g.NoSMI, GPUs: g.gpuList(), Holders: holders}, nil
}

// ListApps judges the holders as the model's listing does, and names its
// ghosts.
func (g modelSource) ListApps(ctx context.Context, r *helper.Reading) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	judged := map[int]helper.Holder{}
	for _, h := range g.holderList() {
		judged[h.PID] = h
	}
	for i := range r.Holders {
		h := &r.Holders[i]
		j, ok := judged[h.PID]
		if !ok {
			// Gone since the poll: the listing does not name it.
			h.Owner, h.OwnerWhy, h.MemMiB, h.MemByGPU = false, "", 0, nil
			continue
		}
		h.Owner, h.OwnerWhy, h.MemMiB, h.MemByGPU = j.Owner, j.OwnerWhy, j.MemMiB, j.MemByGPU
	}
	r.Ghosts = g.ghostList(r.Holders)
	return nil
}

// NoListing judges the holders by their devices alone: a context mapped,
// or nvidia-uvm open.
func (g modelSource) NoListing(r *helper.Reading) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range r.Holders {
		h := &r.Holders[i]
		h.Owner = g.mapsDevice(h.PID) || hasDevice(h.Devices, "nvidia-uvm")
	}
}

// MapsDevice: pid is a holder with a context (every holder of a GPU but
// monitors and protected daemons, a forked heir too).
func (g modelSource) MapsDevice(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mapsDevice(pid)
}

func (g *GPUHost) mapsDevice(pid int) bool {
	h := g.find(pid)
	return h != nil && !h.Monitor && !h.Protected && len(h.GPUs) > 0
}

// WatchedAncestor is the watched manager h runs under: its unit, or a
// live process it descends from (the same one, by start time).
func (g modelSource) WatchedAncestor(h helper.Holder, watch []helper.Manager) *helper.Manager {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range watch {
		if w.PID <= 0 {
			if w.Unit != "" && h.Unit == w.Unit && (w.Kind == "" || w.Kind == helper.ManagerUnit) {
				return &w
			}
			continue
		}
		for pid, n := h.PPID, 0; pid > 1 && n < 64; n++ {
			var id helper.Identity
			var ppid int
			if p := g.proc(pid); p != nil {
				id, ppid = p.Identity, p.PPID
			} else if x := g.find(pid); x != nil {
				id, ppid = x.Identity, x.PPID
			} else {
				break
			}
			if pid == w.PID && (w.StartTime == 0 || w.StartTime == id.StartTime) {
				return &w
			}
			pid = ppid
		}
	}
	return nil
}

func (g *GPUHost) unit(req helper.UnitRequest) helper.UnitResponse {
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := helper.UnitResponse{Version: helper.Version, Unit: req.Unit, Action: req.Action, Systemd: !g.NoSystemd}
	if g.NoSystemd {
		resp.Reason = "systemd is not running on this host (no /run/systemd/system)"
		return resp
	}
	// As systemctl (and the helper) read it: "x" is x.service.
	if full, err := helper.NormalizeUnit(req.Unit); err == nil {
		req.Unit, resp.Unit = full, full
	}
	u, ok := g.units[req.Unit]
	if !ok {
		// Never "stopped": a unit that does not exist is a typo to report.
		resp.Reason = fmt.Sprintf("unit %s not found", req.Unit)
		resp.LoadState, resp.ActiveState, resp.SubState = "not-found", "inactive", "dead"
		return resp
	}
	resp.LoadState, resp.Restart, resp.KillMode = "loaded", u.Restart, "control-group"
	if u.StayAfterStop {
		resp.KillMode = "process"
	}
	if resp.Restart == "" {
		resp.Restart = "no"
	}
	resp.PriorActiveState = "inactive"
	if u.Active {
		resp.PriorActiveState = "active"
	}
	switch req.Action {
	case helper.UnitStop:
		u.Active = false
		if !u.StayAfterStop && !u.ExitingAfterStop {
			for _, h := range append([]*FakeHolder(nil), g.holders...) {
				if h.Unit == u.Name {
					g.remove(h.PID, false)
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
			// As the helper, a stop and a status list what is in the cgroup.
			if req.Action == helper.UnitStatus || req.Action == helper.UnitStop && !u.ExitingAfterStop {
				resp.Remaining = append(resp.Remaining, helper.Proc{Identity: h.Identity, Comm: h.Comm,
					Cmdline: h.Cmdline, State: h.State})
			}
		}
	}
	if req.Action == helper.UnitStop && len(resp.Remaining) > 0 {
		resp.OK = false
		resp.Reason = fmt.Sprintf("%d processes still alive in the unit's cgroup", len(resp.Remaining))
	}
	if req.Action == helper.UnitStop && resp.OK && len(resp.GPUHolders) > 0 {
		resp.OK = false
		resp.Reason = fmt.Sprintf("after stop: state %s, 0 processes left in the cgroup, %d GPU holders of the unit", resp.ActiveState, len(resp.GPUHolders))
	}
	return resp
}

// unitBatch answers a request for several units as the helper does: one
// response per unit, in the request's order, in Units.
func (g *GPUHost) unitBatch(req helper.UnitRequest) helper.UnitResponse {
	resp := helper.UnitResponse{Version: helper.Version, Action: req.Action, Systemd: !g.NoSystemd, OK: true}
	// As the helper: a list naming a unit that does not exist acts on none
	// (helper.RefuseUnknown); each unit is then only looked at.
	act := req.Action
	if act != helper.UnitStatus && !g.NoSystemd {
		g.mu.Lock()
		for _, u := range req.Units {
			full, _ := helper.NormalizeUnit(u)
			if _, ok := g.units[full]; !ok {
				act = helper.UnitStatus
			}
		}
		g.mu.Unlock()
	}
	if act != req.Action {
		for _, u := range req.Units {
			one := req
			one.Unit, one.Units, one.Action = u, nil, helper.UnitStatus
			r := g.unit(one)
			r.Action = req.Action
			resp.Units = append(resp.Units, r)
		}
		ptrs := make([]*helper.UnitResponse, len(resp.Units))
		for i := range resp.Units {
			ptrs[i] = &resp.Units[i]
		}
		resp.OK, resp.Reason = false, "unit not found: no unit of the list was acted on"
		helper.RefuseUnknown(req.Action, ptrs)
		return resp
	}
	bad := 0
	for _, u := range req.Units {
		one := req
		one.Unit, one.Units = u, nil
		r := g.unit(one)
		if !r.OK {
			resp.OK = false
			bad++
		}
		resp.Units = append(resp.Units, r)
	}
	if bad > 0 {
		resp.Reason = fmt.Sprintf("%d of %d units not ok", bad, len(req.Units))
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
