package gpu

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

// Steps of a gpu.free row: which stage freed the GPU, or why not.
const (
	StepAlreadyFree = "already-free"
	// StepByStop: free at gpu.free's first look, but over its threshold
	// at the run's first reading: freed by a stop before any kill (a
	// service's, a restarter's). Not "released", which is a wait's word
	// for given holders that hold nothing any more.
	StepByStop    = "by-stop"
	StepStage1    = "stage 1"
	StepStage2    = "stage 2"
	StepNotFreed  = "not-freed"
	StepWouldKill = "would-kill"
)

// Defaults of gpu.free.
const (
	DefaultFreeGrace   = 5 * time.Second
	DefaultFreeTimeout = 15 * time.Second
)

type freeOpts struct {
	gpus                   []int
	grace, timeout, settle time.Duration
	threshold              *int64
	force, group           bool
	// stopRestarters: stop what would start the workers again (their
	// units, containers, jobs, supervisor processes) before the kills;
	// accept: a restarter left alive does not keep a GPU from "freed".
	stopRestarters, accept bool
	// users narrows what may be signalled (globs); empty: anyone's.
	users []string
}

// freeRow is one chosen GPU's course through the staged free.
type freeRow struct {
	gpu           int
	state, step   string
	reason        string
	freed         bool
	before, after int64
	killed        []int
	first         map[int]bool // its holders at the first look
	// settled: its last verification kept it watched for the settle time
	// (or none was needed then).
	settled bool
	// restarters: what may start its workers again, alive at the end
	// (managers); note: what the row adds to "freed" (an accepted
	// restarter, a settle that could not know the restart delay).
	restarters []helper.Manager
	note       string
	// stoppedBy: what the plan leaves freeing this GPU to (the stop of a
	// unit or of a restarter that ends all its owners), or "".
	stoppedBy string
}

// freeRun is one gpu.free call.
type freeRun struct {
	m      *mod
	L      *glua.LState
	o      freeOpts
	check  bool
	rows   map[int]*freeRow
	order  []int
	killed []helper.KillResult
	stages []string // stage of each killed entry
	// outcome of every pid signalled so far, for the reasons.
	outcome map[int]helper.KillResult
	// stops: what stop_restarters stopped (or would), by manager key.
	stops   []helper.ManagerResult
	stopped map[string]bool
	// since: the host's clock when this stage's kill began (new holders
	// are those started later).
	since uint64
	// final: every manager recorded for the host, read again at the end.
	final []helper.ManagerResult
}

const freeFn = "gpu.free"

func checkFreeOpts(L *glua.LState) freeOpts {
	o := luaconv.CheckOpts(L, 1, freeFn)
	f := freeOpts{gpus: o.Ints("gpus"), grace: o.Duration("grace", DefaultFreeGrace),
		timeout: o.Duration("timeout", DefaultFreeTimeout), settle: o.Duration("settle", 0),
		threshold: o.IntPtr("threshold_mib"), force: o.Bool("force", false), group: o.Bool("group", false),
		stopRestarters: o.Bool("stop_restarters", false), accept: o.Bool("accept_restarters", false), users: o.Strings("users")}
	if o.Has("gpus") && len(f.gpus) == 0 {
		L.ArgError(1, freeFn+": option gpus: empty list (leave it out to mean every GPU)")
	}
	if o.Has("users") && len(f.users) == 0 {
		L.ArgError(1, freeFn+": option users: empty list (leave it out to mean every user)")
	}
	for _, p := range f.users {
		if _, err := path.Match(p, ""); err != nil {
			L.ArgError(1, fmt.Sprintf("%s: option users: bad glob %q: %v", freeFn, p, err))
		}
	}
	o.Done()
	if f.threshold != nil && *f.threshold < 0 {
		L.ArgError(1, fmt.Sprintf("%s: option threshold_mib: %d is negative", freeFn, *f.threshold))
	}
	if f.settle < 0 {
		L.ArgError(1, fmt.Sprintf("%s: option settle: %s is negative", freeFn, f.settle))
	}
	return f
}

// free is gpu.free: the staged free of the chosen GPUs as one primitive.
//
//  1. read the GPUs' state; free ones are already-free;
//  2. stage 1: TERM (grace, KILL) only the owners of the GPUs that are not
//     free (memory or a compute context), then wait;
//  3. stage 2: only for GPUs whose memory stays held with no owner left,
//     kill the remaining unprotected holders of those GPUs (monitors, a
//     forked child keeping its dead parent's memory), then wait;
//  4. while something that may restart a worker remains, the GPUs freed
//     must stay free for the settle time.
//
// Protected and suspicious holders are killed only with force. Under check
// nothing is signalled: rows say what would be.
func (m *mod) free(L *glua.LState) int {
	r := &freeRun{m: m, L: L, o: checkFreeOpts(L), check: m.h.Check(), rows: map[int]*freeRow{},
		outcome: map[int]helper.KillResult{}, stopped: map[string]bool{}}
	r.run()
	L.Push(r.table())
	return 1
}

func (r *freeRun) thresholds(gpus []helper.GPU) map[int]int64 {
	if r.o.threshold == nil {
		return nil
	}
	th := map[int]int64{}
	for _, g := range gpus {
		th[g.Index] = *r.o.threshold
	}
	return th
}

// look takes a fresh snapshot and judges it with gpu.free's threshold.
func (r *freeRun) look() (map[int]helper.GPUStatus, map[int]helper.Holder, []int) {
	return r.judge(r.m.fetch(r.L, freeFn))
}

// judge is a snapshot's GPUs judged with gpu.free's threshold, its holders
// by pid and every GPU index.
func (r *freeRun) judge(s helper.Snapshot) (map[int]helper.GPUStatus, map[int]helper.Holder, []int) {
	byIdx := map[int]helper.GPUStatus{}
	var all []int
	for _, st := range snapshotStatus(s, r.thresholds(s.GPUs)) {
		byIdx[st.Index] = st
		all = append(all, st.Index)
	}
	byPID := map[int]helper.Holder{}
	for _, h := range s.Holders {
		byPID[h.PID] = h
	}
	return byIdx, byPID, all
}

func (r *freeRun) run() {
	// The run's first reading of each GPU, before this call's look adds one.
	firstReading := map[int]int64{}
	for _, g := range r.m.h.Stats().Snapshot().GPUs {
		firstReading[g.Index] = g.BeforeMiB
	}
	first := r.m.fetch(r.L, freeFn)
	status, holders, all := r.judge(first)
	chosen := r.o.gpus
	if len(chosen) == 0 {
		chosen = all
	}
	var pending []int
	for _, idx := range chosen {
		if _, dup := r.rows[idx]; dup {
			continue
		}
		row := &freeRow{gpu: idx}
		r.rows[idx] = row
		r.order = append(r.order, idx)
		st, ok := status[idx]
		if !ok {
			row.state, row.step = helper.GPUUnknown, StepNotFreed
			row.reason = fmt.Sprintf("no GPU %d on this host (it has %s)", idx, intsText(all, ", "))
			continue
		}
		row.state, row.before, row.after, row.reason = st.State, st.UsedMiB, st.UsedMiB, st.Reason
		if first, ok := firstReading[idx]; ok {
			// The recap's "before" and the row's are one reading: the run's first.
			row.before = first
		}
		row.first = map[int]bool{}
		for _, pid := range append(append(append([]int{}, st.Owners...), st.Others...), st.Suspicious...) {
			row.first[pid] = true
		}
		if st.State == helper.GPUFree {
			n, ok := r.m.settled[idx]
			row.step, row.freed, row.settled = StepAlreadyFree, true, ok && n == len(r.m.h.Managers().List())
			if first, ok := firstReading[idx]; ok && first > st.ThresholdMiB {
				row.step = StepByStop
			}
			continue
		}
		if why := r.hopeless(st); why != "" {
			row.step, row.reason = StepNotFreed, why
			continue
		}
		pending = append(pending, idx)
	}
	if r.o.stopRestarters {
		r.stopRestarters(pending, status, holders)
	}
	// The plan: what the stops end (or, under check, would end) is left to
	// them; the stages are planned on what remains, in the run and in its
	// dry run alike.
	status, holders, pending = r.plan(first, status, holders, pending)
	if r.check {
		r.dryRun(pending, status, holders)
		return
	}

	// Stage 1: owners only.
	targets := map[int][]int{}
	var foreign map[int]string
	for _, idx := range pending {
		targets[idx] = r.stage1(status[idx], holders)
		if why := r.outside(status[idx].Owners, holders); why != "" {
			if foreign == nil {
				foreign = map[int]string{}
			}
			foreign[idx] = why
		}
	}
	r.kill(StepStage1, targets, holders)
	// A GPU an owner outside the users filter holds cannot be freed: its
	// filtered owners were signalled, but nothing waits for it. A GPU where
	// a protected or suspicious share stays beside the owners cannot read
	// free: what is waited for there is the release of the owners killed.
	waitFor := pending[:0:0]
	var beside []int
	for _, idx := range pending {
		st := status[idx]
		switch why, ok := foreign[idx]; {
		case ok:
			r.notFreed(r.rows[idx], why)
		case !r.o.force && len(st.Suspicious)+len(st.Protected) > 0:
			beside = append(beside, idx)
		default:
			waitFor = append(waitFor, idx)
		}
	}
	r.waitBeside(beside, holders)
	stay := r.wait(StepStage1, waitFor)
	for _, idx := range waitFor {
		if row := r.rows[idx]; row.freed && row.stoppedBy != "" && len(row.killed) == 0 {
			row.step = StepByStop
		}
	}

	// Stage 2: the rest of the holders, only where memory stays held.
	if len(stay) > 0 {
		status, holders, _ = r.look()
		targets = map[int][]int{}
		var again []int
		for _, idx := range stay {
			st := status[idx]
			row := r.rows[idx]
			row.state, row.after = st.State, st.UsedMiB
			if st.State == helper.GPUFree {
				row.step, row.freed, row.settled = StepStage1, true, false
				r.m.h.Stats().Journal().Freed(r.m.h, idx, StepStage1, row.before, row.after)
				continue
			}
			t := r.stage2(st, holders)
			if len(t) == 0 {
				r.notFreed(row, st.Reason)
				continue
			}
			targets[idx] = t
			again = append(again, idx)
		}
		r.kill(StepStage2, targets, holders)
		for _, idx := range r.wait(StepStage2, again) {
			// Still held after stage 2: the wait set its reason.
			r.rows[idx].step = StepNotFreed
		}
	}
	r.settleFreed()
	r.verifyManagers()
}

// hopeless says why waiting or killing cannot free a GPU, or "".
func (r *freeRun) hopeless(st helper.GPUStatus) string {
	switch {
	case st.State == helper.GPUProtected && !r.o.force:
		return st.Reason
	case st.State == helper.GPUSuspicious && !r.o.force && len(st.Owners) == 0:
		// Beside a suspicious holder, plain owners are still freed: the
		// row then fails for the suspicious share alone.
		return st.Reason
	case st.State == helper.GPUUnknown && len(st.Owners) == 0:
		// Killing monitors would not make the reading known.
		return st.Reason
	}
	return ""
}

// stage1 targets: the owners (and, forced, the suspicious ones) that the
// users filter allows.
func (r *freeRun) stage1(st helper.GPUStatus, holders map[int]helper.Holder) []int {
	var t []int
	for _, pid := range st.Owners {
		if r.allowed(holders[pid]) {
			t = append(t, pid)
		}
	}
	if r.o.force {
		for _, pid := range st.Suspicious {
			if r.allowed(holders[pid]) {
				t = append(t, pid)
			}
		}
	}
	return t
}

// allowed: the users filter lets h be signalled.
func (r *freeRun) allowed(h helper.Holder) bool {
	return len(r.o.users) == 0 || globAny(r.o.users, h.User)
}

// outside names the pids the users filter keeps from being signalled.
func (r *freeRun) outside(pids []int, holders map[int]helper.Holder) string {
	var parts []string
	for _, pid := range pids {
		if h, ok := holders[pid]; ok && !r.allowed(h) {
			parts = append(parts, fmt.Sprintf("%s of user %s", helper.Label(h.PID, h.Comm, h.Cmdline), h.User))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "held by " + strings.Join(parts, ", ") + ", outside users=" + strings.Join(r.o.users, ",") + " (not killed)"
}

// stage2 targets of a GPU whose memory stays held: every unprotected
// holder left (and, forced, the protected and suspicious ones), the
// keepers of ghosts' memory included.
func (r *freeRun) stage2(st helper.GPUStatus, holders map[int]helper.Holder) []int {
	if st.State != helper.GPUMemoryHeld && !(r.o.force && (st.State == helper.GPUProtected || st.State == helper.GPUSuspicious)) {
		return nil
	}
	seen := map[int]bool{}
	var t []int
	add := func(pids ...int) {
		for _, p := range pids {
			if h, ok := holders[p]; ok && !seen[p] && (r.o.force || !h.Protected) && r.allowed(h) {
				seen[p] = true
				t = append(t, p)
			}
		}
	}
	add(st.Owners...)
	add(st.Others...)
	for _, g := range st.Ghosts {
		add(g.HeldBy...)
	}
	if r.o.force {
		add(st.Protected...)
		add(st.Suspicious...)
	}
	return t
}

// kill signals each GPU's targets by identity in one request and, when
// asked, the supervisors found (their tree from the top).
func (r *freeRun) kill(stage string, targets map[int][]int, holders map[int]helper.Holder) {
	var ids []helper.Identity
	seen := map[int]bool{}
	for _, idx := range sortedKeys(targets) {
		for _, pid := range targets[idx] {
			if h, ok := holders[pid]; ok && !seen[pid] {
				seen[pid] = true
				ids = append(ids, h.Identity)
			}
		}
	}
	if len(ids) > 0 && !r.check {
		modules.Step(r.m.h, "%s %s: signalling %d (TERM, KILL after %s)", freeFn, stage, len(ids), r.o.grace)
	}
	resp := r.m.callKill(r.L, freeFn, helper.KillRequest{Config: r.m.h.HelperConfig(), Targets: ids,
		Grace: helper.Duration(r.o.grace), Group: r.o.group, Force: r.o.force, DryRun: r.check})
	r.record(stage, resp.Results)
	if resp.Since > 0 {
		r.since = resp.Since
	}
	for idx, pids := range targets {
		for _, pid := range pids {
			if k, ok := r.outcome[pid]; ok && signalled(k) {
				r.rows[idx].killed = appendNew(r.rows[idx].killed, pid)
			}
		}
	}
	if r.o.stopRestarters && !r.check {
		// What the kill found restarting its victims, that the chains
		// read before it did not name (a parent that forked since).
		r.stopManagers(resp.Managers)
	}
}

// signalledCount is how many processes this call has signalled so far.
func (r *freeRun) signalledCount() int {
	n := 0
	for _, k := range r.outcome {
		if len(k.Signals) > 0 && k.Outcome != helper.OutcomeWould {
			n++
		}
	}
	return n
}

func (r *freeRun) record(stage string, results []helper.KillResult) {
	for _, k := range results {
		r.killed = append(r.killed, k)
		r.stages = append(r.stages, stage)
		r.outcome[k.PID] = k
	}
}

func signalled(k helper.KillResult) bool {
	switch k.Outcome {
	case helper.OutcomeExited, helper.OutcomeKilled, helper.OutcomeSurvived, helper.OutcomeWould:
		return len(k.Signals) > 0 || k.Outcome == helper.OutcomeWould
	}
	return false
}

// wait waits for gpus; the free ones are freed at stage, the others get
// their reason. It returns those whose memory stays held with no owner
// left (the candidates of stage 2).
func (r *freeRun) wait(stage string, gpus []int) []int {
	if len(gpus) == 0 {
		return nil
	}
	req := helper.WaitFreeRequest{Config: r.m.h.HelperConfig(), GPUs: gpus, ThresholdMiB: r.o.threshold,
		Timeout: helper.Duration(r.o.timeout), NewSince: r.since}
	modules.Step(r.m.h, "%s %s: killed %d, waiting GPU %s", freeFn, stage, r.signalledCount(), intsText(gpus, ","))
	resp, settle := r.m.callWait(r.L, freeFn, req, r.o.settle)
	byIdx := map[int]helper.GPUStatus{}
	for _, st := range resp.Status {
		byIdx[st.Index] = st
	}
	var stay []int
	for _, idx := range gpus {
		row := r.rows[idx]
		st, ok := byIdx[idx]
		if !ok {
			r.notFreed(row, "the helper's wait-free did not report this GPU: "+waitReason(resp))
			continue
		}
		row.state, row.after = st.State, st.UsedMiB
		switch {
		case st.State == helper.GPUFree:
			row.step, row.freed = stage, true
			row.settled = resp.OK || settle == 0
			r.m.h.Stats().Journal().Freed(r.m.h, idx, stage, row.before, row.after)
		case st.State == helper.GPUMemoryHeld, r.o.force && (st.State == helper.GPUProtected || st.State == helper.GPUSuspicious):
			row.reason = st.Reason
			stay = append(stay, idx)
		default:
			why := st.Reason
			for _, pid := range st.Owners {
				if !row.first[pid] && (st.State == helper.GPUHeld || st.State == helper.GPUNewHolder) {
					// Not there at the first look: something restarted it.
					why = "taken again after the kill: " + why
					break
				}
			}
			r.notFreed(row, why)
		}
	}
	return stay
}

// waitBeside waits for the release of what stage 1 killed on gpus, where a
// protected or suspicious holder stays: each is then freed if it reads
// free, else not freed for what is left, named with its share.
func (r *freeRun) waitBeside(gpus []int, holders map[int]helper.Holder) {
	var ids []helper.Identity
	for _, idx := range gpus {
		for _, pid := range r.rows[idx].killed {
			if h, ok := holders[pid]; ok && !slices.Contains(ids, h.Identity) {
				ids = append(ids, h.Identity)
			}
		}
	}
	released := true
	var status map[int]helper.GPUStatus
	if len(ids) > 0 {
		req := helper.WaitFreeRequest{Config: r.m.h.HelperConfig(), GPUs: gpus, ThresholdMiB: r.o.threshold,
			Timeout: helper.Duration(r.o.timeout), Holders: ids, NewSince: r.since}
		modules.Step(r.m.h, "%s stage 1: killed %d, waiting for their release on GPU %s", freeFn, r.signalledCount(), intsText(gpus, ","))
		resp, _ := r.m.callWait(r.L, freeFn, req, r.o.settle)
		if !resp.OK {
			released = false
			for _, idx := range gpus {
				r.notFreed(r.rows[idx], waitReason(resp))
			}
		}
		status = statusByGPU(resp, gpus)
	}
	if !released || len(gpus) == 0 {
		return
	}
	if status == nil {
		// The wait's last poll judged every GPU of the free's threshold as a
		// look now would (the same reading and scan, fresher than one more
		// round trip); without it, a look.
		status, _, _ = r.look()
	}
	for _, idx := range gpus {
		row, st := r.rows[idx], status[idx]
		row.state, row.after = st.State, st.UsedMiB
		if st.State == helper.GPUFree {
			row.step, row.freed = StepStage1, true
			r.m.h.Stats().Journal().Freed(r.m.h, idx, StepStage1, row.before, row.after)
			continue
		}
		r.notFreed(row, st.Reason)
	}
}

// statusByGPU is a wait's judgment of each of gpus by index, or nil when it
// lacks one of them (a look is needed then).
func statusByGPU(resp helper.WaitFreeResponse, gpus []int) map[int]helper.GPUStatus {
	byIdx := map[int]helper.GPUStatus{}
	for _, st := range resp.Status {
		byIdx[st.Index] = st
	}
	for _, idx := range gpus {
		if _, ok := byIdx[idx]; !ok {
			return nil
		}
	}
	return byIdx
}

// notFreed ends a row, naming holders that survived KILL and, when an
// owner came back after the kill, the supervisors of what was killed.
func (r *freeRun) notFreed(row *freeRow, why string) {
	if row.freed {
		r.m.h.Stats().Journal().NotFreed(row.gpu)
	}
	row.step, row.freed = StepNotFreed, false
	for _, pid := range row.killed {
		if k := r.outcome[pid]; k.Outcome == helper.OutcomeSurvived {
			why += fmt.Sprintf("; %s survived KILL (%s)", helper.Label(pid, k.Comm, nil), k.Reason)
		}
	}
	if len(row.killed) > 0 {
		var named []helper.Manager
		for _, s := range r.m.h.Managers().List() {
			for _, c := range s.Children {
				if slices.Contains(row.killed, c) && s.Why != "" && !strings.Contains(why, s.Why) {
					why += "; " + s.Why
					if s.Restarts != helper.RestartsNo {
						named = append(named, s)
					}
					break
				}
			}
		}
		// A worker taken again, back in the settle, or still there: what
		// restarts it is named, and so is what stops it.
		why = r.withRestarterFix(why, named, false)
	}
	row.reason = why
}

// settleFreed: while something may restart a worker, a GPU counts as
// freed only after it stayed free for the settle time; every freed GPU
// not yet watched that long is watched once more, together.
func (r *freeRun) settleFreed() {
	if len(r.m.h.Managers().List()) == 0 {
		return
	}
	var need []int
	for _, idx := range r.order {
		if row := r.rows[idx]; row.freed && !row.settled {
			need = append(need, idx)
		}
	}
	if len(need) == 0 {
		return
	}
	req := helper.WaitFreeRequest{Config: r.m.h.HelperConfig(), GPUs: need, ThresholdMiB: r.o.threshold,
		Timeout: helper.Duration(r.o.timeout)}
	modules.Step(r.m.h, "%s: killed %d, watching GPU %s for the settle", freeFn, r.signalledCount(), intsText(need, ","))
	resp, _ := r.m.callWait(r.L, freeFn, req, r.o.settle)
	byIdx := map[int]helper.GPUStatus{}
	for _, st := range resp.Status {
		byIdx[st.Index] = st
	}
	for _, idx := range need {
		row := r.rows[idx]
		st, ok := byIdx[idx]
		if ok {
			row.state, row.after = st.State, st.UsedMiB
		}
		switch {
		case ok && st.State == helper.GPUFree && resp.OK:
			row.settled = true
		case ok && st.State != helper.GPUFree:
			r.notFreed(row, st.Reason)
		default:
			r.notFreed(row, "did not stay watched for the settle time: "+waitReason(resp))
		}
	}
}

// dryRun: under check one dry-run kill of what stage 1 would signal (and
// stage 2 where no owner is left but memory is held); nothing waits.
func (r *freeRun) dryRun(pending []int, status map[int]helper.GPUStatus, holders map[int]helper.Holder) {
	targets := map[int][]int{}
	for _, idx := range pending {
		if row := r.rows[idx]; row.stoppedBy != "" && status[idx].State == helper.GPUFree {
			// Nothing left to kill: the stops would free it.
			row.step, row.reason = StepByStop, "would be freed by "+row.stoppedBy
			continue
		}
		t := r.stage1(status[idx], holders)
		if why := r.outside(status[idx].Owners, holders); why != "" && len(t) == 0 {
			r.notFreed(r.rows[idx], why)
			continue
		}
		if len(t) == 0 {
			t = r.stage2(status[idx], holders)
		}
		if len(t) == 0 {
			r.notFreed(r.rows[idx], status[idx].Reason)
			continue
		}
		targets[idx] = t
	}
	r.kill(StepWouldKill, targets, holders)
	for idx := range targets {
		row := r.rows[idx]
		if len(row.killed) == 0 {
			r.notFreed(row, row.reason+" (nothing that may be signalled holds it)")
			continue
		}
		row.step = StepWouldKill
	}
}

func (r *freeRun) table() *glua.LTable {
	L := r.L
	t := L.CreateTable(0, 8)
	rows := L.CreateTable(len(r.order), 0)
	var why []string
	ok := true
	for _, idx := range r.order {
		row := r.rows[idx]
		rt := L.CreateTable(0, 9)
		rt.RawSetString("gpu", glua.LNumber(row.gpu))
		rt.RawSetString("state", glua.LString(row.state))
		rt.RawSetString("freed", glua.LBool(row.freed))
		rt.RawSetString("step", glua.LString(row.step))
		rt.RawSetString("before_mib", glua.LNumber(row.before))
		rt.RawSetString("after_mib", glua.LNumber(row.after))
		rt.RawSetString("killed", glua.LString(intsText(row.killed, ",")))
		// Of killed: those gone after the first signal, and those that needed KILL.
		var exited, sigkilled []int
		for _, pid := range row.killed {
			switch r.outcome[pid].Outcome {
			case helper.OutcomeExited:
				exited = append(exited, pid)
			case helper.OutcomeKilled:
				sigkilled = append(sigkilled, pid)
			}
		}
		luaconv.SetStr(rt, "exited", intsText(exited, ","))
		luaconv.SetStr(rt, "sigkilled", intsText(sigkilled, ","))
		luaconv.SetStr(rt, "stopped_by", row.stoppedBy)
		reason := row.reason
		if row.freed {
			reason = "" // what held it is in killed; a freed GPU needs no excuse
		}
		rt.RawSetString("reason", glua.LString(reason))
		// The managers whole (the table shows their labels, --json every field).
		rt.RawSetString("restarters", managerList(L, row.restarters))
		luaconv.SetStr(rt, "note", row.note)
		rows.Append(rt)
		if row.step == StepNotFreed {
			ok = false
			why = append(why, fmt.Sprintf("GPU %d: %s", row.gpu, row.reason))
		}
	}
	sups := r.m.h.Managers().List()
	reason := strings.Join(why, "; ")
	if !ok {
		// Name what restarts workers and is still there (or, unread, was
		// not stopped here).
		for _, s := range r.liveManagers(sups) {
			if w := helper.ManagerWhy(s); !strings.Contains(reason, w) {
				reason += "; " + w
			}
		}
	}
	t.RawSetString("ok", glua.LBool(ok))
	status := modules.StatusOf(ok)
	if r.check {
		// The plan, whole, even where it fails: the script says what it would do.
		t.RawSetString("would", rows)
		if ok {
			status = modules.StatusWould
		}
	}
	t.RawSetString("status", glua.LString(status))
	luaconv.SetStr(t, "reason", reason)
	t.RawSetString("rows", rows)
	t.RawSetString("managers", managerList(L, r.liveManagers(sups)))
	stops := L.CreateTable(len(r.stops), 0)
	for _, res := range r.stops {
		st := ManagerTable(L, res.Manager)
		st.RawSetString("outcome", glua.LString(res.Outcome))
		luaconv.SetStr(st, "reason", res.Reason)
		st.RawSetString("alive", glua.LBool(res.Alive))
		stops.Append(st)
	}
	t.RawSetString("stopped", stops)
	killed := L.CreateTable(len(r.killed), 0)
	for i, k := range r.killed {
		kt := killResultTable(L, k)
		kt.RawSetString("stage", glua.LString(r.stages[i]))
		killed.Append(kt)
	}
	t.RawSetString("kills", killed)
	return t
}

// liveManagers: the managers read alive at the end (every one of sups when
// none was read: under check, or with nothing killed), less those this
// call stopped.
func (r *freeRun) liveManagers(sups []helper.Manager) []helper.Manager {
	if r.final != nil {
		var out []helper.Manager
		for _, res := range r.final {
			if res.Alive && res.Manager.Restarts != helper.RestartsNo {
				out = append(out, res.Manager)
			}
		}
		return out
	}
	var out []helper.Manager
	for _, s := range sups {
		if !r.stopped[s.Key()] {
			out = append(out, s)
		}
	}
	return out
}

func intsText(xs []int, sep string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, sep)
}

func appendNew(xs []int, x int) []int {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

func sortedKeys(m map[int][]int) []int { return slices.Sorted(maps.Keys(m)) }
