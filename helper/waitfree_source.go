package helper

import (
	"context"
	"fmt"
	"time"
)

// waitSource is what a wait-free reads of the world, so that the verdict
// steps (waitfree.go) judge any host the same way: the real one here
// (/proc, nvidia-smi, its memory stream) or a model of one.
type waitSource interface {
	// now is the source's clock; every time a wait keeps comes from it.
	now() time.Time
	// sleep blocks until the next poll is due: at, or sooner when a
	// memory reading says every chosen GPU is under its threshold and
	// the last poll did not (memUnder). Notes say why polling changed.
	sleep(ctx context.Context, at time.Time, want map[int]bool, th map[int]int64, memUnder bool) (notes []string, err error)
	// poll reads the GPUs (memory as of after start) and every holder,
	// judged by the devices they map (no compute apps listing yet).
	poll(ctx context.Context, start time.Time) (gpuState, error)
	// listApps reads the compute apps listing onto the poll: owners,
	// their memory and ghosts.
	listApps(ctx context.Context, gs *gpuState) error
	// noListing judges the holders without a listing.
	noListing(gs *gpuState)
	// emptyListing judges the holders as an empty listing would, and says
	// so, when no listing could name anyone (nothing is allocated: see
	// scanner.nothingAllocated); else it leaves gs alone.
	emptyListing(gs *gpuState) bool
	// mapsDevice: pid maps an NVIDIA device file (a compute context).
	mapsDevice(pid int) bool
	// watchedAncestor is the Watch manager that started h, if any.
	watchedAncestor(h Holder, watch []Manager) *Manager
	// priorListing is a listing read before the wait, and when.
	priorListing(ctx context.Context) (ownership, time.Time, bool)
	// streaming: memory readings come from a stream, not a query a poll.
	streaming() bool
}

// hostSource is the real host: /proc scans, nvidia-smi one-shots and the
// memory stream.
type hostSource struct {
	s        *scanner
	smi      *smiRunner
	findErr  error
	interval time.Duration
	period   time.Duration // the memory stream's (streamPeriod)
	stream   *memStream
	timer    *time.Timer
	// streamPolls counts polls the stream asked for since the last timed
	// one, so that a stream and a poll that disagree cannot spin.
	streamPolls int
	started     bool   // the first sleep started the stream
	drop        func() // gives the stream back to the session
}

// newHostSource reads the host through cfg; its first sleep starts the
// memory stream (see startStream). The release ends what it holds.
func newHostSource(ctx context.Context, cfg Config, interval, period time.Duration) (*hostSource, func(), error) {
	s, err := newScanner(cfg)
	if err != nil {
		return nil, nil, err
	}
	smi, findErr := newSMIRunner(cfg)
	src := &hostSource{s: s, smi: smi, findErr: findErr, interval: interval, period: period}
	return src, src.release, nil
}

// startStream starts the memory stream (or takes the session's, still
// running from an earlier call), so that the first poll already reads the
// GPUs from it (a --query-gpu run saved on every wait); a note says why
// there is none.
func (h *hostSource) startStream(ctx context.Context) string {
	h.started = true
	if h.findErr != nil || h.period <= 0 {
		return ""
	}
	stream, drop, err := waitStream(ctx, h.smi.path, h.period)
	if err != nil {
		return err.Error() + ": polled every " + h.interval.String()
	}
	// A stream ended mid-wait is closed already: the drop takes it from
	// the session.
	h.stream, h.drop = stream, drop
	return ""
}

func (h *hostSource) release() {
	if h.timer != nil {
		h.timer.Stop()
	}
	if h.drop != nil {
		h.drop()
	}
}

func (h *hostSource) now() time.Time { return time.Now() }

func (h *hostSource) streaming() bool { return h.stream != nil }

func (h *hostSource) endStream(why string) string {
	h.stream.close()
	h.stream = nil
	return "memory stream " + why + ": polled every " + h.interval.String()
}

// sleep: the memory stream only tells when to look; each verdict is a
// full poll's.
func (h *hostSource) sleep(ctx context.Context, at time.Time, want map[int]bool, th map[int]int64, memUnder bool) ([]string, error) {
	var notes []string
	if !h.started {
		if note := h.startStream(ctx); note != "" {
			notes = append(notes, note)
		}
	}
	if h.timer == nil {
		h.timer = time.NewTimer(time.Until(at))
	} else {
		h.timer.Reset(time.Until(at))
	}
	for {
		if h.stream != nil {
			// An ended stream first: a due timer must not hide it.
			select {
			case <-h.stream.done:
				notes = append(notes, h.endStream("ended ("+h.stream.reason().Error()+")"))
			default:
			}
		}
		var updates, ended <-chan struct{}
		if h.stream != nil {
			updates, ended = h.stream.updates, h.stream.done
		}
		select {
		case <-ctx.Done():
			return notes, ctx.Err()
		case <-ended:
			notes = append(notes, h.endStream("ended ("+h.stream.reason().Error()+")"))
			continue
		case <-updates:
			if memUnder || h.streamPolls >= drainPolls || !h.stream.under(want, th) {
				continue
			}
			h.streamPolls++
		case <-h.timer.C:
			h.streamPolls = 0
			if h.stream != nil && h.stream.stalled() {
				notes = append(notes, h.endStream(fmt.Sprintf("stalled (no reading for %s, pid %d killed)", memStreamStall, h.stream.pid)))
			}
		}
		return notes, nil
	}
}

func (h *hostSource) poll(ctx context.Context, start time.Time) (gpuState, error) {
	s, smi, stream := h.s, h.smi, h.stream
	if stream != nil && len(smi.lastGPUs) == 0 {
		// The first poll: the GPUs of a whole round the stream printed
		// after the poll began, as fresh as a --query-gpu run now. The
		// stream starts as slowly as one (NVML's start), so it gets up to
		// the stall time; a late one falls back to the query.
		if gpus, ok := stream.gpusSince(ctx, start, memStreamStall); ok {
			smi.lastGPUs = gpus
		}
	}
	// With the stream, the poll starts no --query-gpu: the /proc scan runs
	// first and the memory comes from the stream after it.
	fromStream := stream != nil && len(smi.lastGPUs) > 0 // a stream has an smi
	if fromStream {
		smi.reuse = true
	}
	gs, smiErr, err := s.read(ctx, smi, h.findErr)
	if fromStream {
		smi.reuse = false
	}
	if fromStream && err == nil && smiErr == nil {
		gs, smiErr, err = s.streamMemory(ctx, gs, smi, h.findErr, stream, start)
		if err == nil && smiErr == nil && memoryWithoutHolder(gs) {
			gs, smiErr, err = s.rescanKeepingMemory(ctx, gs, smi, h.findErr)
		}
	}
	if err == nil {
		err = smiErr
	}
	return gs, err
}

func (h *hostSource) listApps(ctx context.Context, gs *gpuState) error { return h.s.readApps(ctx, gs) }

func (h *hostSource) noListing(gs *gpuState) { h.s.noListing(gs) }

func (h *hostSource) emptyListing(gs *gpuState) bool {
	if !gs.smiOK || !h.s.nothingAllocated(*gs) {
		return false
	}
	for i := range gs.holders {
		hd := &gs.holders[i]
		hd.Owner, hd.OwnerWhy, hd.MemMiB, hd.MemByGPU, hd.Suspicious = false, "", 0, nil, ""
		markSuspicious(hd)
	}
	gs.ghosts, gs.apps = []Ghost{}, true
	return true
}

func (h *hostSource) mapsDevice(pid int) bool { return len(h.s.mappedDevices(pid)) > 0 }

func (h *hostSource) watchedAncestor(holder Holder, watch []Manager) *Manager {
	return h.s.watchedAncestor(holder, watch)
}

func (h *hostSource) priorListing(ctx context.Context) (ownership, time.Time, bool) {
	if h.findErr != nil {
		return nil, time.Time{}, false
	}
	return sessionOf(ctx).lastListing(listingKey(h.s.cfg, h.smi.path))
}

// Source is a host that WaitFreeOn reads instead of the real one: a model
// (modulestest) that the wait's steps judge as they judge a real host.
type Source interface {
	// Now is the host's clock (a model's may be virtual).
	Now() time.Time
	// Sleep returns when the clock reads until, or with ctx's error.
	Sleep(ctx context.Context, until time.Time) error
	// Poll reads the GPUs and every holder, judged by nothing but what
	// they are (a suspicious protected name included), owning nothing.
	Poll(ctx context.Context) (Reading, error)
	// ListApps judges r's holders by the compute apps listing (Owner,
	// OwnerWhy, MemMiB, MemByGPU) and names the ghosts.
	ListApps(ctx context.Context, r *Reading) error
	// NoListing judges r's holders by the device files they map and open.
	NoListing(r *Reading)
	// MapsDevice: pid maps an NVIDIA device file (a compute context).
	MapsDevice(pid int) bool
	// WatchedAncestor is the Watch manager that started h, if any.
	WatchedAncestor(h Holder, watch []Manager) *Manager
}

// Reading is one poll of a Source.
type Reading struct {
	// SMI: nvidia-smi runs, so memory and the compute apps can be read.
	SMI     bool
	GPUs    []GPU
	Holders []Holder
	Ghosts  []Ghost
}

// WaitFreeOn is WaitFree on src.
func WaitFreeOn(ctx context.Context, req WaitFreeRequest, src Source) (*WaitFreeResponse, error) {
	return waitOn(ctx, req, readingSource{src})
}

// readingSource is a Source as a waitSource: no stream, no session.
type readingSource struct{ src Source }

func (r readingSource) now() time.Time { return r.src.Now() }

func (r readingSource) sleep(ctx context.Context, at time.Time, _ map[int]bool, _ map[int]int64, _ bool) ([]string, error) {
	return nil, r.src.Sleep(ctx, at)
}

func (r readingSource) poll(ctx context.Context, _ time.Time) (gpuState, error) {
	rd, err := r.src.Poll(ctx)
	if err != nil {
		return gpuState{}, fmt.Errorf("model poll: %w", err)
	}
	return gpuState{smiOK: rd.SMI, gpus: rd.GPUs, holders: rd.Holders}, nil
}

func (r readingSource) listApps(ctx context.Context, gs *gpuState) error {
	if !gs.smiOK {
		return nil
	}
	rd := Reading{SMI: gs.smiOK, GPUs: gs.gpus, Holders: gs.holders}
	if err := r.src.ListApps(ctx, &rd); err != nil {
		return fmt.Errorf("model compute apps: %w", err)
	}
	gs.holders, gs.ghosts, gs.apps = rd.Holders, rd.Ghosts, true
	return nil
}

func (r readingSource) noListing(gs *gpuState) {
	rd := Reading{SMI: gs.smiOK, GPUs: gs.gpus, Holders: gs.holders}
	r.src.NoListing(&rd)
	gs.holders = rd.Holders
}

// emptyListing: a model's host is always listed (its ListApps is what the
// model says).
func (r readingSource) emptyListing(*gpuState) bool { return false }

func (r readingSource) mapsDevice(pid int) bool { return r.src.MapsDevice(pid) }

func (r readingSource) watchedAncestor(h Holder, watch []Manager) *Manager {
	return r.src.WatchedAncestor(h, watch)
}

func (r readingSource) priorListing(context.Context) (ownership, time.Time, bool) {
	return nil, time.Time{}, false
}

func (r readingSource) streaming() bool { return false }
