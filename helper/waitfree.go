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
	start := time.Now()
	interval, timeout := req.Interval.D(), req.Timeout.D()
	if interval <= 0 {
		interval = DefaultWaitInterval
	}
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	if req.ThresholdMiB != nil && *req.ThresholdMiB < 0 {
		return nil, fmt.Errorf("threshold_mib %d: must be >= 0", *req.ThresholdMiB)
	}
	if req.Settle < 0 {
		return nil, fmt.Errorf("settle %s: must be >= 0", req.Settle.D())
	}
	s, err := newScanner(req.Config)
	if err != nil {
		return nil, err
	}
	smi, findErr := newSMIRunner(req.Config)
	resp := &WaitFreeResponse{Version: Version, Timeline: []Sample{}, ThresholdMiB: map[int]int64{}}
	given := givenHolders(req.Holders)

	var (
		initial  = map[Identity]bool{} // every holder of the first poll
		atFree   map[Identity]bool     // every holder when the GPUs first read free
		freeAt   time.Time
		want     map[int]bool
		notes    []string
		appsNote bool
		judged   = ownership{}
		// sinceApps counts polls since compute apps were last read.
		sinceApps int
		fastPolls int
		last      gpuState
		status    []GPUStatus
	)
	if findErr == nil {
		// A listing the session's last snapshot read counts as one of this
		// wait's own polls would have: its judgments stand until appsRefresh
		// polls' time after it was read, as a poll's do, and a holder it
		// did not judge is listed anew. Older, it is not used.
		if prior, at, ok := sessionOf(ctx).lastListing(listingKey(s.cfg, smi.path)); ok {
			if n := int(time.Since(at)/interval) + 1; n < appsRefresh {
				judged, sinceApps = prior, n
			}
		}
	}
	deadline := start.Add(timeout)
	timer := time.NewTimer(0)
	defer timer.Stop()
	// The memory stream (see memstream.go) only tells when to look: each
	// verdict is a full poll's.
	var (
		stream *memStream
		// streamPolls counts polls the stream asked for since the last
		// timed one, so that a stream and a poll that disagree cannot spin.
		streamPolls  int
		pollMemUnder bool // the last poll read every chosen GPU at or under its threshold
		pollStart    time.Time
	)
	// The stream starts with the wait (or is the session's, still running
	// from an earlier call), so that its first poll already reads the GPUs
	// from it (a --query-gpu run saved on every wait).
	if findErr == nil && memStreamPeriod > 0 {
		var release func()
		if stream, release, err = waitStream(ctx, smi.path, memStreamPeriod); err != nil {
			notes = append(notes, err.Error()+": polled every "+interval.String())
		} else {
			// A stream ended mid-wait is closed already: the release
			// drops it from the session.
			defer release()
		}
	}
	var reported time.Time // when a reading was last reported (Progress)
	endStream := func(why string) {
		stream.close()
		stream = nil
		notes = append(notes, "memory stream "+why+": polled every "+interval.String())
	}
	for {
		if stream != nil {
			// An ended stream first: a due timer must not hide it.
			select {
			case <-stream.done:
				endStream("ended (" + stream.reason().Error() + ")")
			default:
			}
		}
		var updates, ended <-chan struct{}
		if stream != nil {
			updates, ended = stream.updates, stream.done
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted after %d polls: %w", resp.Polls, ctx.Err())
		case <-ended:
			endStream("ended (" + stream.reason().Error() + ")")
			continue
		case <-updates:
			if pollMemUnder || streamPolls >= drainPolls || !stream.under(want, resp.ThresholdMiB) {
				continue
			}
			streamPolls++
		case <-timer.C:
			streamPolls = 0
			if stream != nil && stream.stalled() {
				endStream(fmt.Sprintf("stalled (no reading for %s, pid %d killed)", memStreamStall, stream.pid))
			}
		}
		pollStart = time.Now()
		if stream != nil && len(smi.lastGPUs) == 0 {
			// The first poll: the GPUs of a whole round the stream printed
			// after the poll began, as fresh as a --query-gpu run now. The
			// stream starts as slowly as one (NVML's start), so it gets
			// up to the stall time; a late one falls back to the query.
			if gpus, ok := stream.gpusSince(ctx, pollStart, memStreamStall); ok {
				smi.lastGPUs = gpus
			}
		}
		// With the stream, the poll starts no --query-gpu: the /proc scan
		// runs first and the memory comes from the stream after it.
		fromStream := stream != nil && len(smi.lastGPUs) > 0 // a stream has an smi
		if fromStream {
			smi.reuse = true
		}
		gs, smiErr, err := s.read(ctx, smi, findErr)
		if fromStream {
			smi.reuse = false
		}
		if fromStream && err == nil && smiErr == nil {
			gs, smiErr, err = s.streamMemory(ctx, gs, smi, findErr, stream, pollStart)
			if err == nil && smiErr == nil && memoryWithoutHolder(gs) {
				gs, smiErr, err = s.rescanKeepingMemory(ctx, gs, smi, findErr)
			}
		}
		if err == nil {
			err = smiErr
		}
		if err != nil {
			return nil, fmt.Errorf("wait-free poll %d: %w", resp.Polls+1, err)
		}
		resp.Polls++
		if req.IgnoreShared {
			gs.holders = slices.DeleteFunc(gs.holders, func(h Holder) bool { return h.SharedOnly && !given.has(h) })
		}
		if want == nil {
			if want, notes, err = chooseGPUs(req, gs); err != nil {
				return nil, err
			}
			if given != nil && len(req.GPUs) == 0 {
				// The GPUs the given holders hold; every GPU when none of
				// them is left to say (killed before the first poll): memory
				// may still be charged to them anywhere, and each GPU's
				// state is still reported.
				if g := given.gpus(gs.holders); len(g) > 0 {
					want = g
				}
			}
		} else if len(req.GPUs) == 0 && given == nil {
			// "All" includes a GPU first seen now (a held /dev/nvidiaN).
			for _, g := range gs.gpus {
				want[g.Index] = true
			}
		}
		for _, g := range gs.gpus {
			if want[g.Index] {
				resp.ThresholdMiB[g.Index] = threshold(req)
			}
		}
		chosen := chosenGPUs(gs.gpus, want)
		unjudged := judged.apply(gs.holders, want) && s.unjudgedContext(gs.holders, want, judged)
		for i := range gs.holders {
			// What the devices alone say (nvidia-uvm in a daemon that never
			// opens it), for holders no listing judges this poll.
			markSuspicious(&gs.holders[i])
		}
		status = assessChosen(gs, nil, want, resp.ThresholdMiB)
		sinceApps++
		switch {
		case !gs.smiOK:
			s.noListing(&gs)
			status = assessChosen(gs, nil, want, resp.ThresholdMiB)
		case !unjudged && !(sinceApps >= appsRefresh && judged.any(gs.holders)) && given == nil && stream != nil &&
			time.Since(start) < drainDefer && time.Until(deadline) > interval && drainOfGone(status, gs.holders, judged):
			// Memory its killed or stopped owners left, still draining: the
			// stream tells when it is released (see drainDefer).
		case unjudged || needApps(status) || sinceApps >= appsRefresh && judged.any(gs.holders) ||
			given != nil && len(given.left(gs.holders)) == 0:
			// For given holders, the listing tells whether memory is still
			// charged to one that is gone (a ghost).
			if err := s.readApps(ctx, &gs); err != nil {
				if !appsNote {
					notes = append(notes, "compute apps unavailable, owners judged by mapped devices and nvidia-uvm only: "+err.Error())
					appsNote = true
				}
				s.noListing(&gs)
			} else {
				judged.record(gs.holders)
				sinceApps = 0
			}
			status = assessChosen(gs, gs.ghosts, want, resp.ThresholdMiB)
		}
		last = gs
		pollMemUnder = memUnder(chosen, resp.ThresholdMiB)
		sample := Sample{T: Duration(pollStart.Sub(start)), UsedMiB: map[int]int64{}, Holders: len(blockingPIDs(status))}
		for _, g := range chosen {
			sample.UsedMiB[g.Index] = g.MemUsedMiB
		}
		resp.Timeline = append(resp.Timeline, sample)
		if n := len(resp.Timeline); n == 1 || !maps.Equal(sample.UsedMiB, resp.Timeline[n-2].UsedMiB) || time.Since(reported) >= time.Second {
			reported = time.Now()
			reportProgress(ctx, Progress{Reading: &sample})
		}
		if waitPollHook != nil {
			waitPollHook(resp.Polls)
		}
		byPID := map[int]Holder{}
		for _, h := range gs.holders {
			byPID[h.PID] = h
			// A holder started after the kill (NewSince) is new whenever it
			// is first seen: a worker its manager restarted already.
			if resp.Polls == 1 && (req.NewSince == 0 || h.StartTime < req.NewSince) {
				initial[h.Identity] = true
			}
		}
		allFree := len(chosen) > 0 || gs.smiOK
		for _, st := range status {
			allFree = allFree && st.State == GPUFree
		}
		if given != nil {
			left, ghosts := given.left(gs.holders), given.ghosts(gs.ghosts, gs.apps)
			given.mark(status, left, ghosts)
			// Without a listing (no nvidia-smi, or compute apps failing) memory
			// charged to a gone pid cannot be seen: the notes say so.
			released := len(left) == 0 && (ghosts != nil && len(ghosts) == 0 || !gs.apps && (!gs.smiOK || appsNote))
			switch {
			case !freeAt.IsZero():
				if back := s.respawned(gs.holders, atFree, req.Watch, time.Since(freeAt)); back != "" {
					resp.Outcome, resp.Reason = WaitNewHolder, back
					resp.Settled = Duration(time.Since(freeAt))
				} else if time.Since(freeAt) >= req.Settle.D() {
					resp.Outcome, resp.OK = WaitReleased, true
					resp.Settled = Duration(time.Since(freeAt))
				}
			case released && (req.Settle <= 0 || len(req.Watch) == 0):
				resp.Outcome, resp.OK = WaitReleased, true
			case released:
				freeAt, atFree = pollStart, map[Identity]bool{}
				for _, h := range gs.holders {
					atFree[h.Identity] = true
				}
			case !time.Now().Before(deadline):
				resp.Outcome, resp.Reason = WaitTimedOut, given.reason(left, ghosts)
			}
			last = gs
			if resp.Outcome != "" {
				break
			}
			if !time.Now().Before(deadline) && !freeAt.IsZero() {
				resp.Outcome = WaitTimedOut
				resp.Settled = Duration(time.Since(freeAt))
				resp.Reason = fmt.Sprintf("the given holders were gone but the deadline came %s into the %s settle", resp.Settled.D().Round(time.Millisecond), req.Settle.D())
				break
			}
			next := pollStart.Add(interval)
			if next.After(deadline) {
				next = deadline
			}
			timer.Reset(time.Until(next))
			continue
		}
		switch {
		case !freeAt.IsZero():
			// Settling: anything that is not free now came back.
			if back := s.cameBack(status, byPID, atFree, req.Watch, time.Since(freeAt)); len(back) > 0 {
				var parts []string
				for i, st := range status {
					if why, ok := back[st.Index]; ok {
						status[i].State, status[i].Reason = GPUNewHolder, why
						parts = append(parts, fmt.Sprintf("GPU %d: %s", st.Index, why))
					}
				}
				resp.Outcome, resp.Reason = WaitNewHolder, strings.Join(parts, "; ")
				resp.Settled = Duration(time.Since(freeAt))
			} else if time.Since(freeAt) >= req.Settle.D() {
				resp.Outcome, resp.OK = WaitFreed, true
				resp.Settled = Duration(time.Since(freeAt))
			}
		case allFree:
			if len(chosen) == 0 {
				resp.Reason = "nvidia-smi finds no GPU and no /dev/nvidiaN is held: nothing to free"
			}
			if req.Settle <= 0 || len(chosen) == 0 {
				resp.Outcome, resp.OK = WaitFreed, true
				break
			}
			freeAt, atFree = pollStart, map[Identity]bool{}
			for _, h := range gs.holders {
				atFree[h.Identity] = true
			}
		default:
			if fresh := freshBlockers(status, byPID, initial); len(fresh) > 0 {
				resp.Outcome = WaitNewHolder
				resp.Reason = "new holder appeared: " + describeHolders(fresh)
				for _, h := range fresh {
					if m := s.watchedAncestor(h, req.Watch); m != nil && !strings.Contains(resp.Reason, ManagerWhy(*m)) {
						resp.Reason += "; " + ManagerWhy(*m)
					}
				}
				markNew(status, byPID, initial)
			} else if stuck(status, len(chosen), gs.smiOK) || !time.Now().Before(deadline) {
				resp.Outcome = finalOutcome(status, len(chosen), gs.smiOK)
				resp.Reason = gpuReasons(status)
				if len(chosen) == 0 {
					resp.Reason = "no GPU is known on this host: no nvidia-smi, no /proc/driver/nvidia, no held /dev/nvidiaN"
				}
			}
		}
		if resp.Outcome != "" {
			break
		}
		if !time.Now().Before(deadline) && !freeAt.IsZero() {
			// The deadline cut the settle short: not verified.
			resp.Outcome = WaitTimedOut
			resp.Settled = Duration(time.Since(freeAt))
			resp.Reason = fmt.Sprintf("the GPUs read free but the deadline came %s into the %s settle", resp.Settled.D().Round(time.Millisecond), req.Settle.D())
			break
		}
		next := pollStart.Add(interval)
		// Memory over the threshold with no owner left is usually the
		// driver releasing a dead worker's memory (72 ms on the H200):
		// look again soon, a few times, instead of a whole interval later.
		// The stream, when there, watches the drain for free.
		if draining(status) && fastPolls < drainPolls && stream == nil {
			fastPolls++
			next = pollStart.Add(min(interval, drainInterval))
		} else if !draining(status) {
			fastPolls = 0
		}
		if next.After(deadline) {
			next = deadline
		}
		timer.Reset(time.Until(next))
	}
	resp.GPUs = chosenGPUs(last.gpus, want)
	resp.Status = status
	resp.Holders = remaining(last.holders, status)
	if given != nil {
		resp.Holders = given.left(last.holders)
	}
	switch {
	case len(resp.Holders) > 0 && appsNote:
		notes = append(notes, "holders' memory unknown")
	case len(resp.Holders) > 0 && last.smiOK && !last.apps && !judged.covers(resp.Holders):
		// Memory per holder only when someone will read it.
		if err := s.readApps(ctx, &last); err != nil {
			notes = append(notes, "holders' memory unknown: "+err.Error())
		} else {
			resp.Holders = remaining(last.holders, status)
		}
	}
	if len(notes) > 0 {
		if resp.Reason != "" {
			resp.Reason += "; "
		}
		resp.Reason += strings.Join(notes, "; ")
	}
	resp.Elapsed = Duration(time.Since(start))
	return resp, nil
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
func (s *scanner) unjudgedContext(holders []Holder, want map[int]bool, judged ownership) bool {
	for _, h := range holders {
		if _, ok := judged[h.Identity]; ok {
			continue
		}
		if !h.SharedOnly && !slices.ContainsFunc(h.GPUs, func(g int) bool { return want[g] }) {
			continue
		}
		if len(s.mappedDevices(h.PID)) > 0 {
			return true
		}
	}
	return false
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
func (s *scanner) cameBack(status []GPUStatus, byPID map[int]Holder, atFree map[Identity]bool, watch []Manager, since time.Duration) map[int]string {
	out := map[int]string{}
	after := since.Round(100 * time.Millisecond).String()
	for _, st := range status {
		var news []string
		for _, pid := range append(append(append([]int{}, st.Owners...), st.Suspicious...), st.Others...) {
			h, ok := byPID[pid]
			if !ok || atFree[h.Identity] {
				continue
			}
			sup := s.watchedAncestor(h, watch)
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
