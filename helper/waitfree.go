package helper

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// BaselineMiB is the per-GPU idle allowance used when a wait-free request
// gives no threshold. Recent drivers leave the driver/firmware reserve out
// of memory.used (the H200 fixture reads 0 MiB idle), but older drivers,
// persistence mode and MIG show a few MiB to a few tens of MiB on an idle
// GPU; a CUDA context alone is several hundred MiB, so 64 MiB tells "idle"
// from "something still allocated" on every GPU gpush targets. A request
// that wants an exact bound sets ThresholdMiB (0 included).
const BaselineMiB int64 = 64

// Wait-free timing defaults.
const (
	DefaultWaitInterval = 100 * time.Millisecond
	DefaultWaitTimeout  = 30 * time.Second
)

// waitPollHook, when set by tests, runs after each poll (n counts from 1).
var waitPollHook func(n int)

// WaitFree polls until every chosen GPU reads free by Assess (at or under
// its threshold, no owner, nothing suspicious, memory known), or Timeout
// passes. Owners and suspicious holders block; holders owning nothing
// (monitors, NVML clients) never do while memory is at the threshold, and
// protected ones only name the GPU while memory stays held.
//
// A poll is one reading of the GPUs plus one /proc scan; the reading
// comes from the memory stream started with the wait (the first poll's
// GPUs too), or from a --query-gpu run when the stream is late or gone.
// Owners are what --query-compute-apps lists (nvidia-uvm is no proof: NVML
// clients open it too); the listing is read only when it can change the
// verdict: a holder of a chosen GPU it has not judged yet (by identity)
// that maps a device (see unjudgedContext), a GPU over its threshold with
// no known owner (owners, ghosts), and every appsRefresh polls while a
// holder it judged is there. A GPU held by a judged worker, or watched by
// monitors, costs no nvidia-smi run a poll while the stream reads.
//
// With Settle, the GPUs must then stay free that long: a new owner, a new
// holder descending from a Watch supervisor, or memory over the threshold
// ends the wait as new-holder, naming the supervisor. A GPU whose memory
// cannot be read never becomes free: when nothing else can change, the
// wait ends at once as unknown. A failing or hung nvidia-smi is an error.
func WaitFree(ctx context.Context, req WaitFreeRequest) (*WaitFreeResponse, error) {
	interval, _, err := waitTiming(req)
	if err != nil {
		return nil, err
	}
	src, release, err := newHostSource(ctx, req.Config, interval, streamPeriod(req))
	if err != nil {
		return nil, err
	}
	defer release()
	return waitOn(ctx, req, src)
}

// streamPeriod is the memory stream's period for req: awaitPeriod when
// the wait ends at its first free reading, memStreamPeriod when a settle
// follows it (seconds of watching).
func streamPeriod(req WaitFreeRequest) time.Duration {
	if req.Settle > 0 {
		return memStreamPeriod
	}
	return awaitPeriod()
}

// waitTiming checks a request's bounds and fills in the defaults.
func waitTiming(req WaitFreeRequest) (interval, timeout time.Duration, err error) {
	interval, timeout = req.Interval.D(), req.Timeout.D()
	if interval <= 0 {
		interval = DefaultWaitInterval
	}
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	if req.ThresholdMiB != nil && *req.ThresholdMiB < 0 {
		return 0, 0, fmt.Errorf("threshold_mib %d: must be >= 0", *req.ThresholdMiB)
	}
	if req.Settle < 0 {
		return 0, 0, fmt.Errorf("settle %s: must be >= 0", req.Settle.D())
	}
	return interval, timeout, nil
}

// freeWait is what a wait keeps between polls.
type freeWait struct {
	req             WaitFreeRequest
	src             waitSource
	interval        time.Duration
	start, deadline time.Time
	given           givenSet
	resp            *WaitFreeResponse
	notes           []string
	appsNote        bool // the notes say compute apps failed
	want            map[int]bool
	apps            appsState
	initial         map[Identity]bool // every holder of the first poll
	settle          settleState
	fastPolls       int       // drain polls in a row (see nextPoll)
	memUnder        bool      // the last poll read every chosen GPU at or under its threshold
	reported        time.Time // when a reading was last reported (Progress)
	last            gpuState
	status          []GPUStatus
}

// appsState is what the compute apps listings said: each holder's
// judgment by identity, and polls since the last listing.
type appsState struct {
	judged    ownership
	sinceApps int
}

// settleState: when the GPUs (or given holders) first read free, and who
// held a device then; zero while not settling.
type settleState struct {
	freeAt time.Time
	atFree map[Identity]bool
}

func (st *settleState) begin(at time.Time, holders []Holder) {
	st.freeAt, st.atFree = at, map[Identity]bool{}
	for _, h := range holders {
		st.atFree[h.Identity] = true
	}
}

func (st *settleState) settling() bool { return !st.freeAt.IsZero() }

// pollState is one poll: its reading, judged, and the chosen GPUs.
type pollState struct {
	start  time.Time
	gs     gpuState
	chosen []GPU
	status []GPUStatus
	byPID  map[int]Holder
}

// waitOn runs the wait on src.
func waitOn(ctx context.Context, req WaitFreeRequest, src waitSource) (*WaitFreeResponse, error) {
	interval, timeout, err := waitTiming(req)
	if err != nil {
		return nil, err
	}
	w := &freeWait{req: req, src: src, interval: interval, start: src.now(), given: givenHolders(req.Holders),
		resp:    &WaitFreeResponse{Version: Version, Timeline: []Sample{}, ThresholdMiB: map[int]int64{}},
		initial: map[Identity]bool{}, apps: appsState{judged: ownership{}}}
	w.deadline = w.start.Add(timeout)
	// A listing the session's last snapshot read counts as one of this
	// wait's own polls would have: its judgments stand until appsRefresh
	// polls' time after it was read, as a poll's do, and a holder it did
	// not judge is listed anew. Older, it is not used.
	if prior, at, ok := src.priorListing(ctx); ok {
		if n := int(w.start.Sub(at)/interval) + 1; n < appsRefresh {
			w.apps = appsState{judged: prior, sinceApps: n}
		}
	}
	next := w.start
	for {
		notes, err := src.sleep(ctx, next, w.want, w.resp.ThresholdMiB, w.memUnder)
		w.notes = append(w.notes, notes...)
		if err != nil {
			return nil, fmt.Errorf("interrupted after %d polls: %w", w.resp.Polls, err)
		}
		p, err := w.read(ctx)
		if err != nil {
			return nil, err
		}
		w.classify(ctx, p)
		w.record(ctx, p)
		if Tracing() {
			w.tracePoll(p)
		}
		var done bool
		if w.given != nil {
			done = w.verdictGiven(p)
		} else {
			done = w.verdictFree(p)
		}
		if done {
			break
		}
		next = w.nextPoll(p)
	}
	resp := w.finish(ctx)
	Tracef("wait-free verdict: %s after %d polls (%s)", resp.Outcome, resp.Polls, resp.Reason)
	return resp, nil
}

// tracePoll traces one poll: its start, each chosen GPU's reading and state.
func (w *freeWait) tracePoll(p *pollState) {
	var b strings.Builder
	for _, st := range p.status {
		fmt.Fprintf(&b, " GPU %d %d MiB %s;", st.Index, st.UsedMiB, st.State)
	}
	Tracef("wait-free poll %d (began %.1f ms ago, listed %v):%s", w.resp.Polls, float64(w.src.now().Sub(p.start).Microseconds())/1000, p.gs.apps, b.String())
}

// read takes one poll of the host and resolves the chosen GPUs.
func (w *freeWait) read(ctx context.Context) (*pollState, error) {
	p := &pollState{start: w.src.now()}
	gs, err := w.src.poll(ctx, p.start)
	if err != nil {
		return nil, fmt.Errorf("wait-free poll %d: %w", w.resp.Polls+1, err)
	}
	w.resp.Polls++
	if w.req.IgnoreShared {
		gs.holders = slices.DeleteFunc(gs.holders, func(h Holder) bool { return h.SharedOnly && !w.given.has(h) })
	}
	if w.want == nil {
		if w.want, w.notes, err = chooseGPUs(w.req, gs); err != nil {
			return nil, err
		}
		if w.given != nil && len(w.req.GPUs) == 0 {
			// The GPUs the given holders hold; every GPU when none of them
			// is left to say (killed before the first poll): memory may
			// still be charged to them anywhere, and each GPU's state is
			// still reported.
			if g := w.given.gpus(gs.holders); len(g) > 0 {
				w.want = g
			}
		}
	} else if len(w.req.GPUs) == 0 && w.given == nil {
		// "All" includes a GPU first seen now (a held /dev/nvidiaN).
		for _, g := range gs.gpus {
			w.want[g.Index] = true
		}
	}
	for _, g := range gs.gpus {
		if w.want[g.Index] {
			w.resp.ThresholdMiB[g.Index] = threshold(w.req)
		}
	}
	p.gs, p.chosen = gs, chosenGPUs(gs.gpus, w.want)
	return p, nil
}

// classify judges the poll's holders: by earlier listings, and by a new
// one only when it can change the verdict (see WaitFree).
func (w *freeWait) classify(ctx context.Context, p *pollState) {
	gs, th, judged := &p.gs, w.resp.ThresholdMiB, w.apps.judged
	unjudged := judged.apply(gs.holders, w.want) && w.unjudgedContext(gs.holders)
	for i := range gs.holders {
		// What the devices alone say (nvidia-uvm in a daemon that never
		// opens it), for holders no listing judges this poll.
		markSuspicious(&gs.holders[i])
	}
	p.status = assessChosen(*gs, nil, w.want, th)
	w.apps.sinceApps++
	refresh := w.apps.sinceApps >= appsRefresh && judged.any(gs.holders)
	switch {
	case !gs.smiOK:
		w.src.noListing(gs)
		p.status = assessChosen(*gs, nil, w.want, th)
	case !unjudged && !refresh && w.given == nil && w.src.streaming() && w.src.now().Sub(w.start) < drainDefer &&
		w.deadline.Sub(w.src.now()) > w.interval && drainOfGone(p.status, gs.holders, judged):
		// Memory its killed or stopped owners left, still draining: the
		// stream tells when it is released (see drainDefer).
	case (unjudged || needApps(p.status) || refresh || w.given != nil && len(w.given.left(gs.holders)) == 0) && w.src.emptyListing(gs):
		// Nothing is allocated (every GPU reads 0 MiB, no holder maps a
		// device): a listing could name no owner and no ghost, so the
		// poll is judged as by an empty one, as a snapshot is. A free's
		// wait for the release after its kill ends so, without a
		// --query-compute-apps between the release and the verdict.
		judged.record(gs.holders)
		w.apps.sinceApps = 0
		p.status = assessChosen(*gs, gs.ghosts, w.want, th)
	case unjudged || needApps(p.status) || refresh || w.given != nil && len(w.given.left(gs.holders)) == 0:
		// For given holders, the listing tells whether memory is still
		// charged to one that is gone (a ghost).
		if err := w.src.listApps(ctx, gs); err != nil {
			if !w.appsNote {
				w.notes = append(w.notes, "compute apps unavailable, owners judged by mapped devices and nvidia-uvm only: "+err.Error())
				w.appsNote = true
			}
			w.src.noListing(gs)
		} else {
			judged.record(gs.holders)
			w.apps.sinceApps = 0
		}
		p.status = assessChosen(*gs, gs.ghosts, w.want, th)
	}
	p.byPID = map[int]Holder{}
	for _, h := range gs.holders {
		p.byPID[h.PID] = h
	}
}

// unjudgedContext: a holder of a chosen GPU (or of shared devices only)
// that no listing has judged maps an NVIDIA device, so it may own a
// context that only --query-compute-apps can tell about.
//
// Why a poll may skip the listing otherwise and stay true: a process the
// listing names has a compute context, and a context maps the driver's
// device files (context.go: on the H200 a torch worker maps nvidiactl 27
// times and nvidia0 3 times; NVML clients such as nvidia-smi -lms, pynvml
// and dcgm map none). So a holder that maps none would be listed as no
// owner: the listing could not make a GPU less free. It can only add ghosts
// (memory charged to dead pids), and those matter only over the threshold,
// where needApps reads it anyway. The maps are read after the scan found
// the holder, so a context made before then is seen.
func (w *freeWait) unjudgedContext(holders []Holder) bool {
	for _, h := range holders {
		if _, ok := w.apps.judged[h.Identity]; ok {
			continue
		}
		if !h.SharedOnly && !slices.ContainsFunc(h.GPUs, func(g int) bool { return w.want[g] }) {
			continue
		}
		if w.src.mapsDevice(h.PID) {
			return true
		}
	}
	return false
}

// record keeps the poll in the timeline and reports its reading.
func (w *freeWait) record(ctx context.Context, p *pollState) {
	w.last = p.gs
	w.status = p.status
	w.memUnder = memUnder(p.chosen, w.resp.ThresholdMiB)
	resp := w.resp
	sample := Sample{T: Duration(p.start.Sub(w.start)), UsedMiB: map[int]int64{}, Holders: len(blockingPIDs(p.status))}
	for _, g := range p.chosen {
		sample.UsedMiB[g.Index] = g.MemUsedMiB
	}
	resp.Timeline = append(resp.Timeline, sample)
	if n := len(resp.Timeline); n == 1 || !maps.Equal(sample.UsedMiB, resp.Timeline[n-2].UsedMiB) || w.src.now().Sub(w.reported) >= time.Second {
		w.reported = w.src.now()
		reportProgress(ctx, Progress{Reading: &sample})
	}
	if waitPollHook != nil {
		waitPollHook(resp.Polls)
	}
	for _, h := range p.gs.holders {
		// A holder started after the kill (NewSince) is new whenever it
		// is first seen: a worker its manager restarted already.
		if resp.Polls == 1 && (w.req.NewSince == 0 || h.StartTime < w.req.NewSince) {
			w.initial[h.Identity] = true
		}
	}
}

// pastDeadline: the deadline has come.
func (w *freeWait) pastDeadline() bool { return !w.src.now().Before(w.deadline) }

// sinceFree is how long the GPUs have read free.
func (w *freeWait) sinceFree() time.Duration { return w.src.now().Sub(w.settle.freeAt) }

// verdictGiven judges a poll of a wait for given holders; true when the
// wait is over.
func (w *freeWait) verdictGiven(p *pollState) bool {
	resp, gs := w.resp, p.gs
	left, ghosts := w.given.left(gs.holders), w.given.ghosts(gs.ghosts, gs.apps)
	w.given.mark(p.status, left, ghosts)
	// Without a listing (no nvidia-smi, or compute apps failing) memory
	// charged to a gone pid cannot be seen: the notes say so.
	released := len(left) == 0 && (ghosts != nil && len(ghosts) == 0 || !gs.apps && (!gs.smiOK || w.appsNote))
	switch {
	case w.settle.settling():
		if back := w.respawned(gs.holders); back != "" {
			resp.Outcome, resp.Reason = WaitNewHolder, back
			resp.Settled = Duration(w.sinceFree())
		} else if w.sinceFree() >= w.req.Settle.D() {
			resp.Outcome, resp.OK = WaitReleased, true
			resp.Settled = Duration(w.sinceFree())
		}
	case released && (w.req.Settle <= 0 || len(w.req.Watch) == 0):
		resp.Outcome, resp.OK = WaitReleased, true
	case released:
		w.settle.begin(p.start, gs.holders)
	case w.pastDeadline():
		resp.Outcome, resp.Reason = WaitTimedOut, w.given.reason(left, ghosts)
	}
	if resp.Outcome != "" {
		return true
	}
	if w.pastDeadline() && w.settle.settling() {
		resp.Outcome = WaitTimedOut
		resp.Settled = Duration(w.sinceFree())
		resp.Reason = fmt.Sprintf("the given holders were gone but the deadline came %s into the %s settle", resp.Settled.D().Round(time.Millisecond), w.req.Settle.D())
		return true
	}
	return false
}

// respawned: after the given holders were gone, a holder that was not
// there then and descends from a watched supervisor took their place.
func (w *freeWait) respawned(holders []Holder) string {
	var parts []string
	for _, h := range holders {
		if w.settle.atFree[h.Identity] {
			continue
		}
		if sup := w.src.watchedAncestor(h, w.req.Watch); sup != nil {
			parts = append(parts, fmt.Sprintf("new holder %s %s after the given holders were gone; %s",
				Label(h.PID, h.Comm, h.Cmdline), w.sinceFree().Round(100*time.Millisecond), ManagerWhy(*sup)))
		}
	}
	return strings.Join(parts, "; ")
}

// verdictFree judges a poll of a wait for free GPUs; true when the wait
// is over.
func (w *freeWait) verdictFree(p *pollState) bool {
	resp, status := w.resp, p.status
	allFree := len(p.chosen) > 0 || p.gs.smiOK
	for _, st := range status {
		allFree = allFree && st.State == GPUFree
	}
	switch {
	case w.settle.settling():
		// Settling: anything that is not free now came back.
		if back := w.cameBack(status, p.byPID); len(back) > 0 {
			var parts []string
			for i, st := range status {
				if why, ok := back[st.Index]; ok {
					status[i].State, status[i].Reason = GPUNewHolder, why
					parts = append(parts, fmt.Sprintf("GPU %d: %s", st.Index, why))
				}
			}
			resp.Outcome, resp.Reason = WaitNewHolder, strings.Join(parts, "; ")
			resp.Settled = Duration(w.sinceFree())
		} else if w.sinceFree() >= w.req.Settle.D() {
			resp.Outcome, resp.OK = WaitFreed, true
			resp.Settled = Duration(w.sinceFree())
		}
	case allFree:
		if len(p.chosen) == 0 {
			resp.Reason = "nvidia-smi finds no GPU and no /dev/nvidiaN is held: nothing to free"
		}
		if w.req.Settle <= 0 || len(p.chosen) == 0 {
			resp.Outcome, resp.OK = WaitFreed, true
			break
		}
		w.settle.begin(p.start, p.gs.holders)
	default:
		if fresh := freshBlockers(status, p.byPID, w.initial); len(fresh) > 0 {
			resp.Outcome = WaitNewHolder
			resp.Reason = "new holder appeared: " + describeHolders(fresh)
			for _, h := range fresh {
				if m := w.src.watchedAncestor(h, w.req.Watch); m != nil && !strings.Contains(resp.Reason, ManagerWhy(*m)) {
					resp.Reason += "; " + ManagerWhy(*m)
				}
			}
			markNew(status, p.byPID, w.initial)
		} else if stuck(status, len(p.chosen), p.gs.smiOK) || w.pastDeadline() {
			resp.Outcome = finalOutcome(status, len(p.chosen), p.gs.smiOK)
			resp.Reason = gpuReasons(status)
			if len(p.chosen) == 0 {
				resp.Reason = "no GPU is known on this host: no nvidia-smi, no /proc/driver/nvidia, no held /dev/nvidiaN"
			}
		}
	}
	if resp.Outcome != "" {
		return true
	}
	if w.pastDeadline() && w.settle.settling() {
		// The deadline cut the settle short: not verified.
		resp.Outcome = WaitTimedOut
		resp.Settled = Duration(w.sinceFree())
		resp.Reason = fmt.Sprintf("the GPUs read free but the deadline came %s into the %s settle", resp.Settled.D().Round(time.Millisecond), w.req.Settle.D())
		return true
	}
	return false
}

// nextPoll is when the next poll is due.
func (w *freeWait) nextPoll(p *pollState) time.Time {
	next := p.start.Add(w.interval)
	// Memory over the threshold with no owner left is usually the driver
	// releasing a dead worker's memory (72 ms on the H200): look again
	// soon, a few times, instead of a whole interval later. The stream,
	// when there, watches the drain for free.
	if draining(p.status) && w.fastPolls < drainPolls && !w.src.streaming() {
		w.fastPolls++
		next = p.start.Add(min(w.interval, drainInterval))
	} else if !draining(p.status) {
		w.fastPolls = 0
	}
	if next.After(w.deadline) {
		next = w.deadline
	}
	return next
}

// finish fills in the response from the last poll.
func (w *freeWait) finish(ctx context.Context) *WaitFreeResponse {
	resp, last, status := w.resp, w.last, w.status
	resp.GPUs = chosenGPUs(last.gpus, w.want)
	resp.Status = status
	resp.Holders = remaining(last.holders, status)
	if w.given != nil {
		resp.Holders = w.given.left(last.holders)
	}
	switch {
	case len(resp.Holders) > 0 && w.appsNote:
		w.notes = append(w.notes, "holders' memory unknown")
	case len(resp.Holders) > 0 && last.smiOK && !last.apps && !w.apps.judged.covers(resp.Holders):
		// Memory per holder only when someone will read it.
		if err := w.src.listApps(ctx, &last); err != nil {
			w.notes = append(w.notes, "holders' memory unknown: "+err.Error())
		} else {
			resp.Holders = remaining(last.holders, status)
		}
	}
	if len(w.notes) > 0 {
		if resp.Reason != "" {
			resp.Reason += "; "
		}
		resp.Reason += strings.Join(w.notes, "; ")
	}
	resp.Elapsed = Duration(w.src.now().Sub(w.start))
	return resp
}

// streamMemory fills in the memory of a poll's GPUs (read with reuse) from
// the stream, from lines that came after the poll started; when none come
// in time it runs --query-gpu as a poll without the stream does, and reads
// the host again if that lists other GPUs.
//
// Why that keeps the verdict true: a reading from after the poll started
// is as new as the --query-gpu the poll would have run, and it is awaited
// after the /proc scan, so it usually comes after the scan too. A holder
// the scan finds gone had either exited before the reading (its memory
// released, or still draining and so read) or had its memory in it; only a
// process that allocates and is gone within the poll escapes, as it would
// between a query and a scan. A reading from before the poll (the one that
// brought it) could predate the allocation of a holder the scan then
// misses: it is never used.
func (s *scanner) streamMemory(ctx context.Context, gs gpuState, smi *smiRunner, findErr error, stream *memStream, pollStart time.Time) (gpuState, error, error) {
	idx := make([]int, len(smi.lastGPUs))
	for i, g := range smi.lastGPUs {
		idx[i] = g.Index
	}
	used, ok := stream.readingsSince(ctx, pollStart, idx, 0)
	if !ok {
		if err := ctx.Err(); err != nil {
			return gs, nil, err
		}
		listed := smi.lastGPUs
		gpus, err := smi.queryGPUs(ctx)
		if err != nil {
			return gs, err, nil
		}
		if !sameGPUs(gpus, listed) {
			return s.read(ctx, smi, findErr)
		}
		used = map[int]int64{}
		for _, g := range gpus {
			used[g.Index] = g.MemUsedMiB
		}
	}
	for i := range gs.gpus {
		if g := &gs.gpus[i]; g.Source == SourceSMI {
			if v, ok := used[g.Index]; ok {
				g.MemUsedMiB = v
				// An unread figure keeps the placeholder of the last
				// one-shot (a stream line of [Not Supported] prints the
				// same); a read one clears it.
				if v >= 0 && g.MemTotalMiB >= 0 {
					g.MemUnread = ""
				}
			}
		}
	}
	return gs, nil, nil
}

// memoryWithoutHolder: a GPU read over the baseline that no holder of the
// scan holds. With the stream the reading comes after the scan: a process
// that opened the GPU in between (a supervisor's new worker) shows as
// memory without its holder.
func memoryWithoutHolder(gs gpuState) bool {
	for _, g := range gs.gpus {
		if g.MemUsedMiB <= BaselineMiB {
			continue
		}
		held := slices.ContainsFunc(gs.holders, func(h Holder) bool { return slices.Contains(h.GPUs, g.Index) })
		if !held {
			return true
		}
	}
	return false
}

// rescanKeepingMemory scans /proc once more after the stream's reading and
// keeps the reading: a scan after the reading finds every holder that was
// there for it and has not exited since (whose memory is then released or
// still in the reading), so no verdict gets freer than the reading allows.
func (s *scanner) rescanKeepingMemory(ctx context.Context, gs gpuState, smi *smiRunner, findErr error) (gpuState, error, error) {
	smi.reuse = true
	again, smiErr, err := s.read(ctx, smi, findErr)
	smi.reuse = false
	if err != nil || smiErr != nil || !sameGPUs(again.gpus, gs.gpus) {
		return gs, nil, nil // keep the first scan: it was consistent with the reading's GPUs
	}
	for i := range again.gpus {
		again.gpus[i].MemUsedMiB = gs.gpus[i].MemUsedMiB
		again.gpus[i].MemUnread = gs.gpus[i].MemUnread
	}
	return again, nil, nil
}

// sameGPUs: the same indices and uuids, in the same order.
func sameGPUs(a, b []GPU) bool {
	return slices.EqualFunc(a, b, func(x, y GPU) bool { return x.Index == y.Index && x.UUID == y.UUID })
}

// assessChosen judges every GPU (a holder's GPUs are only known against
// all of them) and keeps the chosen ones.
func assessChosen(gs gpuState, ghosts []Ghost, want map[int]bool, th map[int]int64) []GPUStatus {
	all := Assess(gs.gpus, gs.holders, ghosts, th)
	out := all[:0]
	for _, st := range all {
		if want[st.Index] {
			out = append(out, st)
		}
	}
	return out
}

// memUnder: every chosen GPU's memory is known and at or under its threshold.
func memUnder(chosen []GPU, th map[int]int64) bool {
	for _, g := range chosen {
		if g.MemUsedMiB < 0 || g.MemUsedMiB > th[g.Index] {
			return false
		}
	}
	return len(chosen) > 0
}

// chosenGPUs are the GPUs of want, in index order.
func chosenGPUs(gpus []GPU, want map[int]bool) []GPU {
	out := []GPU{}
	for _, g := range gpus {
		if want[g.Index] {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out
}

// While memory drains with no owner left, up to drainPolls polls come
// drainInterval apart (then Interval again: a ghost does not drain).
const (
	drainInterval = 20 * time.Millisecond
	drainPolls    = 10
)

// drainDefer is how long after a wait starts memory that gone owners left
// is left to drain without a --query-compute-apps each poll: the listing
// would only name the gone pids (ghosts) until the driver releases it, 72
// ms after SIGKILL for 10 GiB on the H200, up to 300 ms for 100 GiB.
// Memory still held after it is listed each poll again (a ghost a forked child
// keeps), and so is any before a verdict: the deferral ends an interval
// before the deadline.
const drainDefer = time.Second

// drainOfGone: some chosen GPU reads over its threshold with no owner
// (memory-held), and on every such GPU an owner a listing judged is gone
// (its memory drains), with nothing protected or suspicious: the only
// listing a poll would run is for memory the stream watches drain.
func drainOfGone(status []GPUStatus, holders []Holder, judged ownership) bool {
	here := map[Identity]bool{}
	for _, h := range holders {
		here[h.Identity] = true
	}
	held := false
	for _, st := range status {
		switch st.State {
		case GPUProtected, GPUSuspicious:
			return false
		case GPUMemoryHeld:
		default:
			continue
		}
		held = true
		goneOwner := false
		for id, j := range judged {
			if j.Owner && !here[id] && (slices.Contains(j.GPUs, st.Index) || j.MemByGPU[st.Index] > 0) {
				goneOwner = true
				break
			}
		}
		if !goneOwner {
			return false
		}
	}
	return held
}

// draining: a chosen GPU reads over its threshold with no owner and nothing
// suspicious.
func draining(status []GPUStatus) bool {
	for _, st := range status {
		if st.State == GPUMemoryHeld {
			return true
		}
	}
	return false
}

// appsRefresh: compute apps are read again at least every this many polls
// while a holder the listing judged holds a device, so that one that gained
// or dropped a context is seen.
const appsRefresh = 10

// ownership remembers what compute apps said of each holder (by identity),
// so that a poll reads them only for holders not judged yet.
type ownership map[Identity]Holder

// apply copies remembered owner and memory onto the holders and reports
// whether a holder of a chosen GPU (or of no GPU device) is not judged yet.
func (o ownership) apply(holders []Holder, want map[int]bool) (unjudged bool) {
	for i := range holders {
		h := &holders[i]
		j, ok := o[h.Identity]
		if !ok {
			unjudged = unjudged || h.SharedOnly || slices.ContainsFunc(h.GPUs, func(g int) bool { return want[g] })
			continue
		}
		h.Owner, h.OwnerWhy, h.MemMiB, h.MemByGPU = j.Owner, j.OwnerWhy, j.MemMiB, j.MemByGPU
		markSuspicious(h)
	}
	return unjudged
}

// any: some holder was judged by a listing: only a listing sees it gain
// or drop a context (the others' maps are read every poll).
func (o ownership) any(holders []Holder) bool {
	return slices.ContainsFunc(holders, func(h Holder) bool {
		_, ok := o[h.Identity]
		return ok
	})
}

// covers: every holder is judged already (its memory is known).
func (o ownership) covers(holders []Holder) bool {
	for _, h := range holders {
		if _, ok := o[h.Identity]; !ok {
			return false
		}
	}
	return true
}

func (o ownership) record(holders []Holder) {
	for _, h := range holders {
		// GPUs only for drainOfGone: apply takes the scan's.
		o[h.Identity] = Holder{Owner: h.Owner, OwnerWhy: h.OwnerWhy, MemMiB: h.MemMiB, MemByGPU: h.MemByGPU, GPUs: h.GPUs}
	}
}

// needApps: a GPU reads over its threshold with no known owner, where the
// listing names owners or ghosts (see WaitFree).
func needApps(status []GPUStatus) bool {
	for _, st := range status {
		if st.State == GPUMemoryHeld || st.State == GPUProtected {
			return true
		}
	}
	return false
}

// blockingPIDs are the owners and suspicious holders of the statuses.
func blockingPIDs(status []GPUStatus) []int {
	var out []int
	for _, st := range status {
		for _, pid := range append(append([]int{}, st.Owners...), st.Suspicious...) {
			if !slices.Contains(out, pid) {
				out = append(out, pid)
			}
		}
	}
	sort.Ints(out)
	return out
}

// freshBlockers are blocking holders that were not there at the first poll.
func freshBlockers(status []GPUStatus, byPID map[int]Holder, initial map[Identity]bool) []Holder {
	var out []Holder
	for _, pid := range blockingPIDs(status) {
		if h, ok := byPID[pid]; ok && !initial[h.Identity] {
			out = append(out, h)
		}
	}
	return out
}

// cameBack judges a settle poll: per GPU index, why it is no longer free.
// A GPU opened only by a holder that owns nothing and that no watched
// supervisor started (a monitor) stays free.
func (w *freeWait) cameBack(status []GPUStatus, byPID map[int]Holder) map[int]string {
	out := map[int]string{}
	after := w.sinceFree().Round(100 * time.Millisecond).String()
	for _, st := range status {
		var news []string
		for _, pid := range append(append(append([]int{}, st.Owners...), st.Suspicious...), st.Others...) {
			h, ok := byPID[pid]
			if !ok || w.settle.atFree[h.Identity] {
				continue
			}
			sup := w.src.watchedAncestor(h, w.req.Watch)
			if sup == nil && !h.Owner && h.Suspicious == "" {
				continue // a monitor polling the GPU
			}
			msg := "new holder " + Label(h.PID, h.Comm, h.Cmdline) + " " + after + " after it read free"
			if sup != nil {
				msg += "; " + ManagerWhy(*sup)
			}
			news = append(news, msg)
		}
		switch {
		case len(news) > 0:
			out[st.Index] = strings.Join(news, "; ")
		case st.State != GPUFree:
			out[st.Index] = st.Reason + " " + after + " after it read free"
		}
	}
	return out
}

// watchedAncestor returns the Watch manager that started h, if any: a
// live process it descends from, or the unit, container, pod or Slurm job
// it runs in.
func (s *scanner) watchedAncestor(h Holder, watch []Manager) *Manager {
	if len(watch) == 0 {
		return nil
	}
	var anc map[int]bool
	for _, w := range watch {
		switch w.Kind {
		case ManagerUnit:
			if h.Unit == w.Unit {
				return &w
			}
			continue
		case ManagerContainer:
			if w.ContainerID != "" && h.ContainerID == w.ContainerID || w.ContainerID == "" && w.ContainerName != "" && h.ContainerName == w.ContainerName {
				return &w
			}
			continue
		case ManagerPod:
			if h.PodUID == w.PodUID {
				return &w
			}
			continue
		case ManagerSlurm:
			// The slurm cgroup, or the job's environment where proctrack
			// keeps no cgroup (linuxproc).
			if w.JobID != "" && (slurmJobOf(h.Cgroup) == w.JobID || s.envVar(h.PID, "SLURM_JOB_ID") == w.JobID) {
				return &w
			}
			continue
		case "":
			if w.PID <= 0 {
				// A unit recorded by a stop, before kinds were named.
				if w.Unit != "" && h.Unit == w.Unit {
					return &w
				}
				continue
			}
		}
		if w.PID <= 0 {
			continue
		}
		if anc == nil {
			anc = s.proc.ancestors(h.PPID)
		}
		if !anc[w.PID] {
			continue
		}
		st, err := s.proc.stat(w.PID)
		if err != nil || w.StartTime != 0 && st.StartTime != w.StartTime {
			continue
		}
		if w.Comm == "" && len(w.Cmdline) == 0 {
			w.Comm, w.Cmdline = st.Comm, s.proc.cmdline(w.PID)
		}
		return &w
	}
	return nil
}

// ManagerWhy is a manager's report line: its own, or one made from it.
func ManagerWhy(m Manager) string {
	if m.Why != "" {
		return m.Why
	}
	if m.Kind == "" && m.PID == 0 {
		m.Kind = ManagerUnit
	}
	return managerLine(m)
}

// markNew turns the state of GPUs a new holder took into new-holder.
func markNew(status []GPUStatus, byPID map[int]Holder, seen map[Identity]bool) {
	for i, st := range status {
		for _, pid := range append(append(append([]int{}, st.Owners...), st.Suspicious...), st.Others...) {
			if h, ok := byPID[pid]; ok && !seen[h.Identity] && (h.Owner || h.Suspicious != "" || st.State != GPUFree) {
				status[i].State = GPUNewHolder
				status[i].Reason = "new holder " + Label(h.PID, h.Comm, h.Cmdline) + "; " + st.Reason
				break
			}
		}
	}
}

// stuck: waiting cannot change the verdict. Every GPU that is not free
// has unknown memory and no owner (or the host has no GPU it can name).
func stuck(status []GPUStatus, nChosen int, smiOK bool) bool {
	if nChosen == 0 {
		return !smiOK
	}
	for _, st := range status {
		if st.State != GPUFree && st.State != GPUUnknown {
			return false
		}
	}
	return true
}

// finalOutcome names the worst state among the chosen GPUs.
func finalOutcome(status []GPUStatus, nChosen int, smiOK bool) string {
	if nChosen == 0 && !smiOK {
		return WaitUnknown
	}
	rank := []struct{ state, outcome string }{
		{GPUHeld, WaitTimedOut}, {GPUSuspicious, WaitSuspicious}, {GPUMemoryHeld, WaitMemoryHeld},
		{GPUProtected, WaitProtected}, {GPUUnknown, WaitUnknown},
	}
	for _, r := range rank {
		for _, st := range status {
			if st.State == r.state {
				return r.outcome
			}
		}
	}
	return WaitTimedOut
}

// gpuReasons joins the reasons of the GPUs that are not free.
func gpuReasons(status []GPUStatus) string {
	var parts []string
	for _, st := range status {
		if st.State != GPUFree {
			parts = append(parts, fmt.Sprintf("GPU %d: %s", st.Index, st.Reason))
		}
	}
	return strings.Join(parts, "; ")
}

// remaining are the holders a caller may act on: owners and suspicious
// holders of the chosen GPUs, and the others of a GPU whose memory stays
// held with no owner (the second stage of a free). Monitors of a GPU that
// reads free are not listed: nothing needs killing there.
func remaining(holders []Holder, status []GPUStatus) []Holder {
	keep := map[int]bool{}
	for _, pid := range blockingPIDs(status) {
		keep[pid] = true
	}
	for _, st := range status {
		if st.State == GPUMemoryHeld || st.State == GPUNewHolder {
			for _, pid := range st.Others {
				keep[pid] = true
			}
		}
	}
	out := []Holder{}
	for _, h := range holders {
		if keep[h.PID] {
			out = append(out, h)
		}
	}
	return out
}

func threshold(req WaitFreeRequest) int64 {
	if req.ThresholdMiB != nil {
		return *req.ThresholdMiB
	}
	return BaselineMiB
}

// chooseGPUs resolves the request's GPU list against what the host has.
func chooseGPUs(req WaitFreeRequest, gs gpuState) (map[int]bool, []string, error) {
	want := map[int]bool{}
	have := map[int]bool{}
	for _, g := range gs.gpus {
		have[g.Index] = true
	}
	var notes []string
	if len(req.GPUs) == 0 {
		for i := range have {
			want[i] = true
		}
	}
	for _, i := range req.GPUs {
		if len(gs.gpus) > 0 && !have[i] {
			return nil, nil, fmt.Errorf("gpu %d: no such GPU on this host (it has %v)", i, sortedKeys(have))
		}
		want[i] = true
	}
	if !gs.smiOK {
		notes = append(notes, "no nvidia-smi: GPU memory unknown")
	}
	return want, notes, nil
}

// describeHolders names every holder (a reason is never cut: a table cuts
// what does not fit, --json keeps it whole).
func describeHolders(hs []Holder) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("pid %d (%s) gpus %v", h.PID, h.Comm, h.GPUs))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
