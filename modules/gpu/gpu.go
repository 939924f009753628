// Package gpu is the `gpu` Lua module: GPU memory, the processes holding
// GPUs, killing them by identity and waiting for GPUs to be free, all
// through the helper on the host. See README.md (printed by `gpush doc gpu`).
package gpu

import (
	_ "embed"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

//go:embed README.md
var doc string

// Module is the gpu module as registered: its functions keep their host's
// state in a mod of its own (modOf).
var Module = modules.Register(modules.Module{Name: "gpu", Doc: doc, Funcs: map[string]glua.LGFunction{
	"mem":       func(L *glua.LState) int { return modOf(L).mem(L) },
	"snapshot":  func(L *glua.LState) int { return modOf(L).snapshot(L) },
	"holders":   func(L *glua.LState) int { return modOf(L).holders(L) },
	"kill":      func(L *glua.LState) int { return modOf(L).kill(L) },
	"wait_free": func(L *glua.LState) int { return modOf(L).waitFree(L) },
	"free":      func(L *glua.LState) int { return modOf(L).free(L) },
	"wait_held": func(L *glua.LState) int { return modOf(L).waitHeld(L) },
	"by_gpu":    byGPU,
}})

func modOf(L *glua.LState) *mod {
	return modules.Value(L, "gpu", func(h modules.Host) *mod { return &mod{h: h, settled: map[int]int{}} })
}

type mod struct {
	h modules.Host
	// settled: GPUs a wait kept free for the settle time, with how many
	// supervisors were recorded then; while no new one is recorded, a GPU
	// that still reads free needs no second settle (gpu.free after a
	// script's own wait for the release).
	settled map[int]int
}

// fetch takes a fresh snapshot and records the memory readings.
func (m *mod) fetch(L *glua.LState, fn string) helper.Snapshot {
	var s helper.Snapshot
	modules.CallHelper(L, m.h, fn, helper.VerbSnapshot, helper.SnapshotRequest{Config: m.h.HelperConfig()}, &s)
	m.h.Stats().ObserveGPUs(s.GPUs, nil)
	return s
}

func (m *mod) mem(L *glua.LState) int {
	s := m.fetch(L, "gpu.mem")
	L.Push(gpuList(L, s.GPUs))
	return 1
}

func (m *mod) snapshot(L *glua.LState) int {
	s := m.fetch(L, "gpu.snapshot")
	t := L.CreateTable(0, 8)
	t.RawSetString("hostname", glua.LString(s.Hostname))
	t.RawSetString("boot_id", glua.LString(s.BootID))
	t.RawSetString("smi", glua.LBool(s.SMI))
	t.RawSetString("gpus", gpuList(L, s.GPUs))
	t.RawSetString("holders", holderList(L, s.Holders))
	t.RawSetString("ghosts", ghostList(L, s.Ghosts))
	t.RawSetString("status", statusList(L, snapshotStatus(s, nil)))
	t.RawSetString("warnings", luaconv.ToLua(L, nonNil(s.Warnings)))
	L.Push(t)
	return 1
}

func (m *mod) holders(L *glua.LState) int {
	f := checkFilter(L, 1)
	s := m.fetch(L, "gpu.holders")
	var keep []helper.Holder
	for _, h := range s.Holders {
		if f.keep(h) {
			keep = append(keep, h)
		}
	}
	if f.perGPU {
		L.Push(perGPUList(L, keep, f.include.gpus))
		return 1
	}
	L.Push(holderList(L, keep))
	return 1
}

// filter selects holders: every key given in include must match (a list
// matches any of its entries), no key given in exclude may match.
type filter struct {
	include, exclude          match
	keepShared, keepProtected bool
	owner                     *bool
	minAge                    time.Duration
	perGPU                    bool
}

// match is the list keys a filter and its exclude share.
type match struct {
	gpus, pids                         []int
	users, units, commands, containers []string
	// anyContainer: containers=true (in some container).
	anyContainer bool
}

func checkFilter(L *glua.LState, n int) filter {
	const fn = "gpu.holders"
	o := luaconv.CheckOpts(L, n, fn)
	t, _ := L.Get(n).(*glua.LTable)
	f := filter{include: checkMatch(L, n, o, t, fn), keepShared: o.Bool("shared", true), keepProtected: o.Bool("protected", true),
		minAge: o.Duration("min_age", 0), perGPU: o.Bool("per_gpu", false)}
	if o.Has("owner") {
		v := o.Bool("owner", false)
		f.owner = &v
	}
	if f.minAge < 0 {
		L.ArgError(n, fmt.Sprintf("%s: option min_age: %s is negative", fn, f.minAge))
	}
	if o.Has("exclude") {
		x, ok := t.RawGetString("exclude").(*glua.LTable)
		if !ok {
			L.ArgError(n, fn+": option exclude: want a table of filter lists ({users={...}, units={...}, ...})")
		}
		xo := luaconv.OptsOf(L, n, fn+": exclude", x)
		f.exclude = checkMatch(L, n, xo, x, fn+": exclude")
		xo.Done()
	}
	o.Done()
	return f
}

// checkMatch reads the list keys of o. A list given empty ({vars.user}
// with vars.user nil) must not widen to "every holder" (nor, in exclude,
// to "exclude nobody"): it is a mistake in the script.
func checkMatch(L *glua.LState, n int, o *luaconv.Opts, t *glua.LTable, fn string) match {
	m := match{gpus: o.Ints("gpus"), pids: o.Ints("pids"), users: o.Strings("users"), units: o.Strings("units"),
		commands: o.Strings("commands")}
	if o.Has("containers") {
		switch v := t.RawGetString("containers").(type) {
		case glua.LBool:
			if !v {
				L.ArgError(n, fn+": option containers: false is not a filter (exclude={containers=true} means outside containers)")
			}
			m.anyContainer = true
		default:
			m.containers = o.Strings("containers")
			if len(m.containers) == 0 {
				L.ArgError(n, fmt.Sprintf("%s: option containers: empty list (true means any container)", fn))
			}
		}
	}
	for _, k := range []struct {
		key string
		n   int
	}{{"gpus", len(m.gpus)}, {"pids", len(m.pids)}, {"users", len(m.users)}, {"units", len(m.units)}, {"commands", len(m.commands)}} {
		if o.Has(k.key) && k.n == 0 {
			L.ArgError(n, fmt.Sprintf("%s: option %s: empty list (leave it out to mean every holder)", fn, k.key))
		}
	}
	for _, list := range [][]string{m.users, m.units, m.commands, m.containers} {
		for _, p := range list {
			if _, err := path.Match(p, ""); err != nil {
				L.ArgError(n, fmt.Sprintf("%s: bad glob %q: %v", fn, p, err))
			}
		}
	}
	return m
}

func (f filter) keep(h helper.Holder) bool {
	if !f.keepShared && h.SharedOnly {
		return false
	}
	if !f.keepProtected && h.Protected {
		return false
	}
	if f.owner != nil && h.Owner != *f.owner {
		return false
	}
	if f.minAge > 0 && h.AgeSeconds < f.minAge.Seconds() {
		return false
	}
	return f.include.all(h) && !f.exclude.any(h)
}

// all: every key given matches h.
func (m match) all(h helper.Holder) bool {
	for _, t := range m.tests() {
		if t.given && !t.ok(h) {
			return false
		}
	}
	return true
}

// any: some key given matches h.
func (m match) any(h helper.Holder) bool {
	for _, t := range m.tests() {
		if t.given && t.ok(h) {
			return true
		}
	}
	return false
}

type keyTest struct {
	given bool
	ok    func(helper.Holder) bool
}

func (m match) tests() []keyTest {
	return []keyTest{
		{len(m.gpus) > 0, func(h helper.Holder) bool { return anyInt(m.gpus, h.GPUs) }},
		{len(m.pids) > 0, func(h helper.Holder) bool { return anyInt(m.pids, []int{h.PID}) }},
		{len(m.users) > 0, func(h helper.Holder) bool { return globAny(m.users, h.User) }},
		{len(m.units) > 0, func(h helper.Holder) bool { return h.Unit != "" && globAny(m.units, h.Unit) }},
		{len(m.commands) > 0, func(h helper.Holder) bool {
			argv0 := ""
			if len(h.Cmdline) > 0 {
				argv0 = path.Base(h.Cmdline[0])
			}
			return globAny(m.commands, h.Comm) || argv0 != "" && globAny(m.commands, argv0)
		}},
		{m.anyContainer, func(h helper.Holder) bool { return h.Container != "" }},
		{len(m.containers) > 0, func(h helper.Holder) bool { return inContainers(m.containers, h) }},
	}
}

// inContainers: h runs in a container one of the globs names, by short or
// full id, container name, pod name, NAMESPACE/POD or pod uid.
func inContainers(globs []string, h helper.Holder) bool {
	if h.Container == "" {
		return false
	}
	names := []string{h.Container, h.ContainerID, h.ContainerName, h.Pod, h.PodUID}
	if h.Pod != "" && h.Namespace != "" {
		names = append(names, h.Namespace+"/"+h.Pod)
	}
	for _, n := range names {
		if n != "" && globAny(globs, n) {
			return true
		}
	}
	return false
}

func globAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

func anyInt(want, have []int) bool {
	for _, w := range want {
		for _, h := range have {
			if w == h {
				return true
			}
		}
	}
	return false
}

// MemOn is h's memory on GPU idx in MiB: its per-GPU figure from
// nvidia-smi's compute apps; 0 where it owns nothing there; -1 where the
// amount is unknown (listed without one, or a total an older helper did
// not split over several GPUs).
func MemOn(h helper.Holder, idx int) int64 {
	if m, ok := h.MemByGPU[idx]; ok {
		return m
	}
	switch {
	case len(h.MemByGPU) > 0 || h.MemMiB == 0:
		return 0
	case len(h.GPUs) == 1 && h.GPUs[0] == idx:
		return h.MemMiB
	}
	return -1
}

// perGPUList is gpu.holders{per_gpu=true}: one entry per holder and GPU it
// holds (only the GPUs in only, when given), mem_mib its memory on that
// GPU and total_mib on all; a holder of no GPU (shared devices only) is
// one entry without gpu.
func perGPUList(L *glua.LState, hs []helper.Holder, only []int) *glua.LTable {
	list := L.CreateTable(len(hs), 0)
	for _, h := range hs {
		gpus := h.GPUs
		if len(gpus) == 0 {
			t := HolderTable(L, h)
			t.RawSetString("total_mib", glua.LNumber(h.MemMiB))
			list.Append(t)
			continue
		}
		for _, g := range gpus {
			if len(only) > 0 && !slices.Contains(only, g) {
				continue
			}
			t := HolderTable(L, h)
			t.RawSetString("gpu", glua.LNumber(g))
			t.RawSetString("mem_mib", glua.LNumber(MemOn(h, g)))
			t.RawSetString("total_mib", glua.LNumber(h.MemMiB))
			list.Append(t)
		}
	}
	return list
}

// signals the first signal may be; the helper sends KILL itself after grace.
var signals = map[string]bool{"TERM": true, "KILL": true, "INT": true, "HUP": true, "QUIT": true,
	"USR1": true, "USR2": true}

func (m *mod) kill(L *glua.LState) int {
	const fn = "gpu.kill"
	targets, pids := checkTargets(L, 1)
	o := luaconv.CheckOpts(L, 2, fn)
	req := helper.KillRequest{Config: m.h.HelperConfig(), Group: o.Bool("group", false), Tree: o.Bool("tree", false),
		Force: o.Bool("force", false), DryRun: m.h.Check()}
	if o.Has("grace") {
		req.Grace = helper.Duration(o.Duration("grace", 0))
	}
	if sig := strings.TrimPrefix(strings.ToUpper(o.String("signal", "")), "SIG"); sig != "" {
		if !signals[sig] {
			L.ArgError(2, fmt.Sprintf("%s: option signal: unknown signal %q (TERM, KILL, INT, HUP, QUIT, USR1, USR2)", fn, sig))
		}
		req.Signal = sig
	}
	o.Done()

	var local []helper.KillResult // pids that resolve to no holder
	if len(pids) > 0 {
		s := m.fetch(L, fn)
		byPID := map[int]helper.Holder{}
		for _, h := range s.Holders {
			byPID[h.PID] = h
		}
		for _, pid := range pids {
			if h, ok := byPID[pid]; ok {
				targets = append(targets, h.Identity)
			} else {
				local = append(local, helper.KillResult{Identity: helper.Identity{PID: pid}, Outcome: helper.OutcomeSkipped,
					Reason: "not a GPU holder (not in a fresh snapshot)", Via: "target"})
			}
		}
	}
	req.Targets = targets
	resp := m.callKill(L, fn, req)
	resp.Results = append(resp.Results, local...)
	m.h.Stats().AddKills(local)
	L.Push(killTable(L, resp, req.DryRun))
	return 1
}

// callKill sends req (nothing when it has no target), counts the outcomes
// and records the supervisors found, so that later waits settle.
func (m *mod) callKill(L *glua.LState, fn string, req helper.KillRequest) helper.KillResponse {
	var resp helper.KillResponse
	if len(req.Targets) == 0 {
		return resp
	}
	modules.CallHelper(L, m.h, fn, helper.VerbKill, req, &resp)
	if req.DryRun {
		// The plan: what a unit's stop of this run would end is that
		// stop's, not a kill's (the run's kill would not find it).
		for i, k := range resp.Results {
			if u := m.h.Stats().WouldEnd(k.PID, k.StartTime); u != "" && k.Outcome == helper.OutcomeWould {
				resp.Results[i].Outcome, resp.Results[i].Signals = helper.OutcomeSkipped, nil
				resp.Results[i].Reason = "the stop of " + u + " would end it"
			}
		}
	}
	m.h.Stats().AddKills(resp.Results)
	m.h.Managers().Add(resp.Managers...)
	return resp
}

// checkTargets reads gpu.kill's first argument: a holder, a list of
// holders, or a list of pids (returned apart, to be resolved).
func checkTargets(L *glua.LState, n int) ([]helper.Identity, []int) {
	t := L.CheckTable(n)
	if t.RawGetString("pid") != glua.LNil {
		return []helper.Identity{checkIdentity(L, n, t, "gpu.kill", "target")}, nil
	}
	var ids []helper.Identity
	var pids []int
	count := 0
	t.ForEach(func(_, _ glua.LValue) { count++ })
	for i := 1; i <= count; i++ {
		switch v := t.RawGetInt(i).(type) {
		case glua.LNumber:
			pid := int(v)
			if float64(pid) != float64(v) || pid <= 0 {
				L.ArgError(n, fmt.Sprintf("gpu.kill: target %d: %v is not a pid", i, v))
			}
			pids = append(pids, pid)
		case *glua.LTable:
			ids = append(ids, checkIdentity(L, n, v, "gpu.kill", fmt.Sprintf("target %d", i)))
		default:
			L.ArgError(n, fmt.Sprintf("gpu.kill: target %d: want a holder (from gpu.holders()) or a pid, got %s", i, v.Type()))
		}
	}
	return ids, pids
}

func checkIdentity(L *glua.LState, n int, t *glua.LTable, fn, what string) helper.Identity {
	pid, ok1 := t.RawGetString("pid").(glua.LNumber)
	st, ok2 := t.RawGetString("start_time").(glua.LNumber)
	if !ok1 || !ok2 || pid <= 0 {
		L.ArgError(n, fmt.Sprintf("%s: %s: a holder needs pid and start_time (use the tables gpu.holders() returns)", fn, what))
	}
	// A pid of 1.5 is no pid: never read it as pid 1.
	if float64(pid) != float64(int(pid)) {
		L.ArgError(n, fmt.Sprintf("%s: %s: pid %v is not an integer", fn, what, pid))
	}
	if st < 0 || float64(st) != float64(uint64(st)) {
		L.ArgError(n, fmt.Sprintf("%s: %s: start_time %v is not a non-negative integer", fn, what, st))
	}
	id := helper.Identity{PID: int(pid), StartTime: uint64(st)}
	if b, ok := t.RawGetString("boot_id").(glua.LString); ok {
		id.BootID = string(b)
	}
	return id
}

// killResultTable is one kill result; its table is sized for its fields
// and gpu.free's stage (L.NewTable reserves 32 array and 32 hash slots, ~2.8
// KiB, which every result of every host kept).
func killResultTable(L *glua.LState, r helper.KillResult) *glua.LTable {
	rt := L.CreateTable(0, 11)
	rt.RawSetString("pid", glua.LNumber(r.PID))
	rt.RawSetString("start_time", glua.LNumber(r.StartTime))
	rt.RawSetString("boot_id", glua.LString(r.BootID))
	rt.RawSetString("ppid", glua.LNumber(r.PPID))
	rt.RawSetString("comm", glua.LString(r.Comm))
	rt.RawSetString("outcome", glua.LString(r.Outcome))
	luaconv.SetStr(rt, "state", r.State)
	luaconv.SetStr(rt, "reason", r.Reason)
	rt.RawSetString("signals", luaconv.ToLua(L, nonNil(r.Signals)))
	luaconv.SetStr(rt, "via", r.Via)
	return rt
}

// killTable is gpu.kill's result (docs/lua-api.md, "Results"); under
// check (dryRun) would holds the rows it would signal (not the skipped).
func killTable(L *glua.LState, resp helper.KillResponse, dryRun bool) *glua.LTable {
	counts := map[string]int{}
	list := L.CreateTable(len(resp.Results), 0)
	would := L.CreateTable(0, 0)
	for _, r := range resp.Results {
		counts[r.Outcome]++
		rt := killResultTable(L, r)
		list.Append(rt)
		if r.Outcome == helper.OutcomeWould {
			would.Append(rt)
		}
	}
	t := L.CreateTable(0, 12)
	ok := counts[helper.OutcomeSurvived] == 0
	t.RawSetString("ok", glua.LBool(ok))
	switch {
	case dryRun:
		t.RawSetString("status", glua.LString(modules.StatusWould))
		t.RawSetString("would", would)
	default:
		t.RawSetString("status", glua.LString(modules.StatusOf(ok)))
	}
	if !ok {
		t.RawSetString("reason", glua.LString(survivorsReason(resp.Results)))
	}
	t.RawSetString("rows", list)
	t.RawSetString("managers", managerList(L, resp.Managers))
	t.RawSetString("exited", glua.LNumber(counts[helper.OutcomeExited]))
	t.RawSetString("killed", glua.LNumber(counts[helper.OutcomeKilled]))
	t.RawSetString("survived", glua.LNumber(counts[helper.OutcomeSurvived]))
	t.RawSetString("skipped", glua.LNumber(counts[helper.OutcomeSkipped]))
	return t
}

func (m *mod) waitFree(L *glua.LState) int {
	const fn = "gpu.wait_free"
	o := luaconv.CheckOpts(L, 1, fn)
	req := helper.WaitFreeRequest{Config: m.h.HelperConfig(), GPUs: o.Ints("gpus"), ThresholdMiB: o.IntPtr("threshold_mib"),
		IgnoreShared: !o.Bool("shared", true)}
	o.Renamed("ignore_shared", "shared=false (holders of only nvidiactl/nvidia-uvm do not block), as in gpu.holders")
	if o.Has("timeout") {
		req.Timeout = helper.Duration(o.Duration("timeout", 0))
	}
	if o.Has("interval") {
		req.Interval = helper.Duration(o.Duration("interval", 0))
	}
	settle := o.Duration("settle", 0)
	givenOpt := o.Has("holders")
	o.Done()
	if req.ThresholdMiB != nil && *req.ThresholdMiB < 0 {
		L.ArgError(1, fmt.Sprintf("%s: option threshold_mib: %d is negative", fn, *req.ThresholdMiB))
	}
	var resp helper.WaitFreeResponse
	if givenOpt {
		req.Holders = m.checkGiven(L, fn)
	}
	if givenOpt && len(req.Holders) == 0 {
		// Nothing given, nothing to wait for: never "every holder".
		resp = helper.WaitFreeResponse{OK: true, Outcome: helper.WaitReleased, Reason: "no holders given: nothing to wait for"}
	} else {
		resp, _ = m.callWait(L, fn, req, settle)
	}
	t := L.CreateTable(0, 12)
	t.RawSetString("ok", glua.LBool(resp.OK))
	t.RawSetString("status", glua.LString(waitStatus(resp)))
	t.RawSetString("outcome", glua.LString(WaitOutcome(resp.Outcome)))
	luaconv.SetStr(t, "reason", waitReason(resp))
	t.RawSetString("elapsed", glua.LNumber(resp.Elapsed.D().Seconds()))
	t.RawSetString("settled", glua.LNumber(resp.Settled.D().Seconds()))
	t.RawSetString("polls", glua.LNumber(resp.Polls))
	gpus := gpuList(L, resp.GPUs)
	// Each GPU carries the threshold the helper judged it by, so a script
	// can tell which GPUs are free without asking about each one again.
	for i, g := range resp.GPUs {
		if th, ok := resp.ThresholdMiB[g.Index]; ok {
			gpus.RawGetInt(i+1).(*glua.LTable).RawSetString("threshold_mib", glua.LNumber(th))
		}
	}
	t.RawSetString("gpus", gpus)
	t.RawSetString("holders", holderList(L, resp.Holders))
	status := statusList(L, resp.Status)
	if givenOpt {
		// Every GPU says which given holders still hold it, none included.
		for i, st := range resp.Status {
			status.RawGetInt(i+1).(*glua.LTable).RawSetString("waiting", luaconv.ToLua(L, nonNil(st.Waiting)))
		}
	}
	t.RawSetString("rows", status)
	t.RawSetString("managers", managerList(L, m.h.Managers().List()))
	L.Push(t)
	return 1
}

// checkGiven reads wait_free's holders option: holders (gpu.holders), kill
// results or a gpu.kill result (what it signalled: skipped ones were never
// signalled and are left out), or pids, resolved through a fresh snapshot
// (a pid holding nothing is released already).
func (m *mod) checkGiven(L *glua.LState, fn string) []helper.Identity {
	v := L.CheckTable(1).RawGetString("holders")
	t, ok := v.(*glua.LTable)
	if !ok {
		L.ArgError(1, fmt.Sprintf("%s: option holders: want holders (from gpu.holders), a gpu.kill result or pids, got %s", fn, v.Type()))
	}
	if res, ok := t.RawGetString("rows").(*glua.LTable); ok && t.RawGetString("pid") == glua.LNil {
		t = res
	}
	if t.RawGetString("pid") != glua.LNil {
		one := L.NewTable()
		one.Append(t)
		t = one
	}
	var ids []helper.Identity
	var pids []int
	for i := 1; i <= t.Len(); i++ {
		switch x := t.RawGetInt(i).(type) {
		case glua.LNumber:
			if pid := int(x); float64(pid) == float64(x) && pid > 0 {
				pids = append(pids, pid)
				continue
			}
			L.ArgError(1, fmt.Sprintf("%s: option holders: entry %d: %v is not a pid", fn, i, x))
		case *glua.LTable:
			if x.RawGetString("outcome") == glua.LString(helper.OutcomeSkipped) {
				continue
			}
			id := checkIdentity(L, 1, x, fn, fmt.Sprintf("option holders: entry %d", i))
			ids = append(ids, id)
		default:
			L.ArgError(1, fmt.Sprintf("%s: option holders: entry %d: want a holder or a pid, got %s", fn, i, x.Type()))
		}
	}
	if len(pids) > 0 {
		s := m.fetch(L, fn)
		for _, h := range s.Holders {
			if slices.Contains(pids, h.PID) {
				ids = append(ids, h.Identity)
			}
		}
	}
	return ids
}

// callWait sends a wait-free. While something that may restart a worker
// is recorded for this host, the GPUs must also stay free for a settle time
// (settle, or SettleFor the managers' known restart delays when not given)
// and those managers are watched, so that a worker coming back is named,
// not missed.
func (m *mod) callWait(L *glua.LState, fn string, req helper.WaitFreeRequest, settle time.Duration) (helper.WaitFreeResponse, time.Duration) {
	if settle < 0 {
		L.ArgError(1, fmt.Sprintf("%s: option settle: %s is negative", fn, settle))
	}
	if sups := m.h.Managers().List(); len(sups) > 0 {
		req.Watch = sups
		if settle == 0 {
			// Those this run stopped (and read stopped) need no waiting
			// out of their delay; the default settle still guards the
			// rest.
			settle = DefaultSettle
			if running := m.h.Managers().Running(); len(running) > 0 {
				settle, _ = SettleFor(running)
			}
		}
	}
	req.Settle = helper.Duration(settle)
	if settle > 0 {
		// The deadline is for the release; the settle comes on top of it.
		timeout := req.Timeout.D()
		if timeout <= 0 {
			timeout = helper.DefaultWaitTimeout
		}
		req.Timeout = helper.Duration(timeout + settle)
	}
	if fn != freeFn {
		what := "every GPU"
		if len(req.GPUs) > 0 {
			what = "GPU " + intsText(req.GPUs, ",")
		}
		modules.Step(m.h, "%s: waiting %s", fn, what)
	}
	var resp helper.WaitFreeResponse
	modules.CallHelper(L, m.h, fn, helper.VerbWaitFree, req, &resp)
	m.h.Stats().ObserveGPUs(resp.GPUs, resp.ThresholdMiB)
	for _, st := range resp.Status {
		if settle > 0 && resp.OK && st.State == helper.GPUFree {
			m.settled[st.Index] = len(req.Watch)
		} else {
			delete(m.settled, st.Index)
		}
	}
	return resp, settle
}

// waitReason is the helper's reason, or the non-free GPUs' reasons joined.
func waitReason(resp helper.WaitFreeResponse) string {
	if resp.Reason != "" || resp.OK {
		return resp.Reason
	}
	var parts []string
	for _, st := range resp.Status {
		if st.State != helper.GPUFree {
			parts = append(parts, fmt.Sprintf("GPU %d: %s", st.Index, st.Reason))
		}
	}
	return strings.Join(parts, "; ")
}

func gpuList(L *glua.LState, gpus []helper.GPU) *glua.LTable {
	list := L.CreateTable(len(gpus), 0)
	for _, g := range gpus {
		t := L.CreateTable(0, 8)
		t.RawSetString("index", glua.LNumber(g.Index))
		t.RawSetString("minor", glua.LNumber(g.Minor))
		t.RawSetString("source", glua.LString(sourceOf(g)))
		t.RawSetString("uuid", glua.LString(g.UUID))
		t.RawSetString("name", glua.LString(g.Name))
		t.RawSetString("bus_id", glua.LString(g.BusID))
		t.RawSetString("used_mib", glua.LNumber(g.MemUsedMiB))
		t.RawSetString("total_mib", glua.LNumber(g.MemTotalMiB))
		if g.MemUnread != "" {
			t.RawSetString("unread", glua.LString(g.MemUnread))
		}
		list.Append(t)
	}
	return list
}

// HolderTable converts a holder to the table docs/lua-api.md describes
// (cmdline joined into one string).
func HolderTable(L *glua.LState, h helper.Holder) *glua.LTable {
	// Sized for the fields it gets: 20 always, the others when not empty.
	n := 20
	for _, s := range []string{h.OwnerWhy, h.Suspicious, h.Unit, h.Container, h.ContainerID, h.ContainerName, h.Runtime,
		h.Pod, h.Namespace, h.PodUID, h.PodQoS, h.ProtectedWhy} {
		if s != "" {
			n++
		}
	}
	if Where(h) != "" {
		n++
	}
	n += 3 // managers, manager, cgroup
	t := L.CreateTable(0, n)
	t.RawSetString("pid", glua.LNumber(h.PID))
	t.RawSetString("start_time", glua.LNumber(h.StartTime))
	t.RawSetString("boot_id", glua.LString(h.BootID))
	t.RawSetString("ppid", glua.LNumber(h.PPID))
	t.RawSetString("pgid", glua.LNumber(h.PGID))
	t.RawSetString("sid", glua.LNumber(h.SID))
	t.RawSetString("uid", glua.LNumber(h.UID))
	t.RawSetString("user", glua.LString(h.User))
	t.RawSetString("comm", glua.LString(h.Comm))
	t.RawSetString("cmdline", glua.LString(strings.Join(h.Cmdline, " ")))
	t.RawSetString("state", glua.LString(h.State))
	t.RawSetString("gpus", luaconv.ToLua(L, nonNil(h.GPUs)))
	t.RawSetString("devices", luaconv.ToLua(L, nonNil(h.Devices)))
	t.RawSetString("shared_only", glua.LBool(h.SharedOnly))
	t.RawSetString("mem_mib", glua.LNumber(h.MemMiB))
	byGPU := L.CreateTable(0, len(h.MemByGPU))
	for idx, mib := range h.MemByGPU {
		byGPU.RawSetInt(idx, glua.LNumber(mib))
	}
	t.RawSetString("mem_by_gpu", byGPU)
	t.RawSetString("owner", glua.LBool(h.Owner))
	luaconv.SetStr(t, "owner_why", h.OwnerWhy)
	luaconv.SetStr(t, "suspicious", h.Suspicious)
	t.RawSetString("zombie_leader", glua.LBool(h.ZombieLeader))
	luaconv.SetStr(t, "unit", h.Unit)
	luaconv.SetStr(t, "container", h.Container)
	luaconv.SetStr(t, "container_id", h.ContainerID)
	luaconv.SetStr(t, "container_name", h.ContainerName)
	luaconv.SetStr(t, "runtime", h.Runtime)
	luaconv.SetStr(t, "pod", h.Pod)
	luaconv.SetStr(t, "namespace", h.Namespace)
	luaconv.SetStr(t, "pod_uid", h.PodUID)
	luaconv.SetStr(t, "pod_qos", h.PodQoS)
	luaconv.SetStr(t, "where", Where(h))
	t.RawSetString("age_s", glua.LNumber(h.AgeSeconds))
	t.RawSetString("protected", glua.LBool(h.Protected))
	luaconv.SetStr(t, "protected_why", h.ProtectedWhy)
	luaconv.SetStr(t, "cgroup", h.Cgroup)
	t.RawSetString("managers", managerList(L, nonNil(h.Managers)))
	if i := managerIndex(h); i >= 0 {
		t.RawSetString("manager", ManagerTable(L, h.Managers[i]))
	}
	return t
}

// ManagerOf names, for a report, what would start h again and is to be
// stopped to keep it from returning: the outermost manager of its chain
// that restarts or may ("" when none does).
func ManagerOf(h helper.Holder) string {
	if i := managerIndex(h); i >= 0 {
		return helper.ManagerLabel(h.Managers[i])
	}
	return ""
}

// managerIndex is the index in h.Managers of ManagerOf's manager, -1 when
// none restarts.
func managerIndex(h helper.Holder) int {
	for i := len(h.Managers) - 1; i >= 0; i-- {
		if h.Managers[i].Restarts != helper.RestartsNo {
			return i
		}
	}
	return -1
}

// Where names the place a holder runs in, for a report: "pod NS/POD" (or
// "pod UID" when the kubelet's folders do not name it), "RUNTIME NAME" or
// "RUNTIME SHORTID" for another container, else its systemd unit; "" when
// none is known.
func Where(h helper.Holder) string {
	switch {
	case h.Pod != "" && h.Namespace != "":
		return "pod " + h.Namespace + "/" + h.Pod
	case h.PodUID != "":
		return "pod " + h.PodUID
	case h.Container != "":
		rt := h.Runtime
		if rt == "" {
			rt = "container"
		}
		if h.ContainerName != "" {
			return rt + " " + h.ContainerName
		}
		return rt + " " + h.Container
	}
	return h.Unit
}

func holderList(L *glua.LState, hs []helper.Holder) *glua.LTable {
	list := L.CreateTable(len(hs), 0)
	for _, h := range hs {
		list.Append(HolderTable(L, h))
	}
	return list
}

// nonNil makes a nil slice an empty one, so Lua gets {} rather than nil.
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// sourceOf reads an older helper's empty Source as nvidia-smi's.
func sourceOf(g helper.GPU) string {
	if g.Source == "" {
		return helper.SourceSMI
	}
	return g.Source
}

// snapshotStatus is the helper's judgement of a snapshot, or Assess of it
// where the helper sent none or other thresholds are wanted.
func snapshotStatus(s helper.Snapshot, threshold map[int]int64) []helper.GPUStatus {
	if threshold == nil && len(s.Status) == len(s.GPUs) && len(s.Status) > 0 {
		return s.Status
	}
	return helper.Assess(s.GPUs, s.Holders, s.Ghosts, threshold)
}

func ghostTable(L *glua.LState, g helper.Ghost) *glua.LTable {
	t := L.CreateTable(0, 5)
	t.RawSetString("pid", glua.LNumber(g.PID))
	t.RawSetString("name", glua.LString(g.Name))
	t.RawSetString("gpu", glua.LNumber(g.GPU))
	t.RawSetString("mem_mib", glua.LNumber(g.MemMiB))
	t.RawSetString("held_by", luaconv.ToLua(L, nonNil(g.HeldBy)))
	return t
}

func ghostList(L *glua.LState, gs []helper.Ghost) *glua.LTable {
	list := L.CreateTable(len(gs), 0)
	for _, g := range gs {
		list.Append(ghostTable(L, g))
	}
	return list
}

// StatusTable converts one GPU's state to the table docs/lua-api.md describes.
func StatusTable(L *glua.LState, st helper.GPUStatus) *glua.LTable {
	t := L.CreateTable(0, 10)
	t.RawSetString("index", glua.LNumber(st.Index))
	t.RawSetString("state", glua.LString(st.State))
	luaconv.SetStr(t, "reason", st.Reason)
	t.RawSetString("used_mib", glua.LNumber(st.UsedMiB))
	t.RawSetString("threshold_mib", glua.LNumber(st.ThresholdMiB))
	t.RawSetString("owners", luaconv.ToLua(L, nonNil(st.Owners)))
	t.RawSetString("others", luaconv.ToLua(L, nonNil(st.Others)))
	t.RawSetString("protected", luaconv.ToLua(L, nonNil(st.Protected)))
	t.RawSetString("suspicious", luaconv.ToLua(L, nonNil(st.Suspicious)))
	t.RawSetString("ghosts", ghostList(L, st.Ghosts))
	if st.Waiting != nil {
		t.RawSetString("waiting", luaconv.ToLua(L, st.Waiting))
	}
	return t
}

func statusList(L *glua.LState, sts []helper.GPUStatus) *glua.LTable {
	list := L.CreateTable(len(sts), 0)
	for _, st := range sts {
		list.Append(StatusTable(L, st))
	}
	return list
}

// ManagerTable converts a manager to its Lua table: every field it has,
// its label, whether it restarts, its restart delay and its stop command.
func ManagerTable(L *glua.LState, m helper.Manager) *glua.LTable {
	t := L.CreateTable(0, 24)
	t.RawSetString("kind", glua.LString(m.Kind))
	t.RawSetString("label", glua.LString(helper.ManagerLabel(m)))
	t.RawSetString("restarts", glua.LString(m.Restarts))
	t.RawSetString("stop", glua.LString(strings.Join(m.Stop, " ")))
	if m.DelayKnown {
		t.RawSetString("delay_s", glua.LNumber(m.Delay.D().Seconds()))
	}
	t.RawSetString("pid", glua.LNumber(m.PID))
	t.RawSetString("start_time", glua.LNumber(m.StartTime))
	t.RawSetString("boot_id", glua.LString(m.BootID))
	luaconv.SetStr(t, "comm", m.Comm)
	luaconv.SetStr(t, "cmdline", strings.Join(m.Cmdline, " "))
	luaconv.SetStr(t, "unit", m.Unit)
	luaconv.SetStr(t, "restart", m.Restart)
	luaconv.SetStr(t, "active_state", m.ActiveState)
	luaconv.SetStr(t, "runtime", m.Runtime)
	luaconv.SetStr(t, "container_id", m.ContainerID)
	luaconv.SetStr(t, "container_name", m.ContainerName)
	luaconv.SetStr(t, "restart_policy", m.RestartPolicy)
	if m.RestartCount > 0 {
		t.RawSetString("restart_count", glua.LNumber(m.RestartCount))
	}
	luaconv.SetStr(t, "pod_uid", m.PodUID)
	luaconv.SetStr(t, "namespace", m.Namespace)
	luaconv.SetStr(t, "pod", m.Pod)
	luaconv.SetStr(t, "job_id", m.JobID)
	luaconv.SetStr(t, "job_user", m.JobUser)
	luaconv.SetStr(t, "step", m.Step)
	luaconv.SetStr(t, "job_state", m.JobState)
	if m.Requeue {
		t.RawSetString("requeue", glua.LTrue)
	}
	t.RawSetString("children", luaconv.ToLua(L, nonNil(m.Children)))
	t.RawSetString("why", glua.LString(helper.ManagerWhy(m)))
	return t
}

func managerList(L *glua.LState, sups []helper.Manager) *glua.LTable {
	list := L.CreateTable(len(sups), 0)
	for _, s := range sups {
		list.Append(ManagerTable(L, s))
	}
	return list
}

// survivorsReason names what a kill left alive: "pid 437 (python) survived
// KILL: D state".
func survivorsReason(rs []helper.KillResult) string {
	var parts []string
	for _, r := range rs {
		if r.Outcome != helper.OutcomeSurvived {
			continue
		}
		p := fmt.Sprintf("pid %d (%s) survived", r.PID, r.Comm)
		if r.Reason != "" {
			p += ": " + r.Reason
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// OutcomeExpired is a wait's outcome when its timeout passed first (the
// helper's timed-out): "expired", so that "timeout" names only the option.
const OutcomeExpired = "expired"

// WaitOutcome is the Lua word for a helper's wait outcome.
func WaitOutcome(o string) string {
	if o == helper.WaitTimedOut {
		return OutcomeExpired
	}
	return o
}

// waitStatus is a wait's status word: done when ok, expired when its
// deadline passed, else failed (memory held, a new holder).
func waitStatus(resp helper.WaitFreeResponse) string {
	switch {
	case resp.OK:
		return modules.StatusDone
	case resp.Outcome == helper.WaitTimedOut:
		return modules.StatusExpired
	}
	return modules.StatusFailed
}
