package helper

import (
	"context"
	"slices"
	"sync"
	"time"
)

// streamLinger is how long the memory stream a wait started keeps running
// once no call uses it: a free's calls come a round trip or two apart
// (holders, kill, wait, verify), and each reuse saves an nvidia-smi
// process start (47 ms on the H200), while an idle -lms 10 stream costs a
// reading every 10 ms; bounded so that a session left open costs nothing.
var streamLinger = 1500 * time.Millisecond

// session is what the calls of one serve loop share: the memory stream
// the last wait started, lingering after it so that the next snapshot
// reads its GPU table from the stream and the next wait waits on it.
// Outside a serve loop (a one-shot verb) there is none: each wait starts
// and stops its own stream.
type session struct {
	mu sync.Mutex
	// stream is the shared stream, nil when none runs.
	stream *memStream
	// waiting: a wait reads the shared stream's updates (one consumer), so
	// a second wait at the same time starts a stream of its own.
	waiting bool
	// users counts the calls reading the shared stream; with none it is
	// paused (SIGSTOP) while it lingers.
	users int
	// gen counts uses: the linger timer armed at a use stops the stream
	// only when no use came after it.
	gen    int
	closed bool
	// stopping counts streams a linger timer is stopping, so that close
	// returns only once they are reaped.
	stopping sync.WaitGroup
	// listing is what the session's latest snapshot learnt from
	// --query-compute-apps, for the next wait's first poll and the next
	// snapshot (see reuseListing).
	listing sessionListing
	// units are each unit's latest `systemctl show` in the session, by
	// systemctl and unit (see freshUnits, noRestart).
	units map[string]unitSeen
}

// unitSeen is a unit's properties as one `systemctl show` printed them,
// and when. acted: an action of the session on the unit came after it,
// so only Restart=, the unit file's setting, still holds.
type unitSeen struct {
	props map[string]string
	at    time.Time
	acted bool
}

// restartReuse bounds the age of a Restart= reading a kill may go by
// instead of reading its unit again after the signals.
const restartReuse = time.Second

// unitReuse bounds the age of a unit reading that a look before a unit
// action, or a snapshot's manager read, may go by instead of running
// systemctl show again: a free looks at its units in its snapshot, just
// before it stops them, and again right after. Only what no unit action
// of this session came after is kept (forgetUnits).
var unitReuse = 500 * time.Millisecond

// noteUnits keeps what a `systemctl show` printed for each of names.
func (ss *session) noteUnits(systemctl string, names []string, props []map[string]string) {
	if ss == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.units == nil {
		ss.units = map[string]unitSeen{}
	}
	now := time.Now()
	for i, n := range names {
		ss.units[systemctl+"\x00"+n] = unitSeen{props: props[i], at: now}
	}
}

// forgetUnits marks the readings of names acted on: an action on them is
// about to change what they would say (all but Restart=).
func (ss *session) forgetUnits(systemctl string, names []string) {
	if ss == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, n := range names {
		if u, ok := ss.units[systemctl+"\x00"+n]; ok {
			u.acted = true
			ss.units[systemctl+"\x00"+n] = u
		}
	}
}

// freshUnits returns the session's readings of every one of names, each
// younger than unitReuse (every reading asks for showProps); false when
// one is missing (the caller runs systemctl show for all of them).
func (ss *session) freshUnits(systemctl string, names []string) ([]map[string]string, bool) {
	if ss == nil {
		return nil, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]map[string]string, len(names))
	for i, n := range names {
		u, ok := ss.units[systemctl+"\x00"+n]
		if !ok || u.acted || time.Since(u.at) >= unitReuse {
			return nil, false
		}
		out[i] = u.props
	}
	return out, true
}

// noRestart reports whether the session read unit's Restart= as "no"
// (or unset) less than restartReuse ago, and that value. Restart= is the
// unit file's setting: it changes only with a daemon-reload, and a unit
// that does not restart cannot bring a killed worker back.
func (ss *session) noRestart(systemctl, unit string) (string, bool) {
	if ss == nil {
		return "", false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	u, ok := ss.units[systemctl+"\x00"+unit]
	if !ok {
		return "", false
	}
	if r := u.props["Restart"]; time.Since(u.at) < restartReuse && (r == "" || r == "no") {
		return r, true
	}
	return "", false
}

// sessionListing is one snapshot's listing and the GPU readings it was
// judged against.
type sessionListing struct {
	key    string
	at     time.Time
	judged ownership
	// gpus are the snapshot's GPUs (memory as read with the listing),
	// owners the identities the listing made owners of each GPU and
	// ownersMiB what it charged to them there (-1: an amount it did not
	// tell); elsewhereMiB and unplaced are gpuState's.
	gpus         []GPU
	owners       map[int][]Identity
	ownersMiB    map[int]int64
	elsewhereMiB map[int]int64
	unplaced     bool
}

// Session is a session for calls served in-process (a local connection's
// calls run helper.Serve in gpush itself): bound to their contexts, they
// share what a serve loop's calls share. Close it when the last call
// returned.
type Session struct{ ss *session }

// NewSession returns a session for in-process calls.
func NewSession() *Session { return &Session{ss: newSession()} }

// Bind makes the calls under ctx share s.
func (s *Session) Bind(ctx context.Context) context.Context { return withSession(ctx, s.ss) }

// Close stops the stream the session's calls left lingering and waits
// until it is reaped; later calls run as outside a session.
func (s *Session) Close() {
	Tracef("session: closing")
	s.ss.close()
	Tracef("session: closed")
}

type sessionKey struct{}

func newSession() *session { return &session{} }

// withSession makes every call under ctx share ss.
func withSession(ctx context.Context, ss *session) context.Context {
	return context.WithValue(ctx, sessionKey{}, ss)
}

// sessionOf is the serve loop's session of ctx, nil outside one.
func sessionOf(ctx context.Context) *session {
	ss, _ := ctx.Value(sessionKey{}).(*session)
	return ss
}

// waitStream returns a running memory stream of path for a wait to read,
// and the release the wait calls when it ends: in a session the shared
// stream (reused when it still reads, else a new one), lingering after
// the release; outside one, or while another wait reads the shared one, a
// stream of the wait's own, stopped at the release.
func waitStream(ctx context.Context, path string, period time.Duration) (*memStream, func(), error) {
	ss := sessionOf(ctx)
	if ss == nil {
		s, err := startMemStream(path, period)
		if err != nil {
			return nil, nil, err
		}
		return s, s.close, nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed || ss.waiting {
		s, err := startMemStream(path, period)
		if err != nil {
			return nil, nil, err
		}
		return s, s.close, nil
	}
	if s := ss.stream; s != nil && s.path == path && s.period == time.Duration(max(period.Milliseconds(), 1))*time.Millisecond && s.live() {
		ss.waiting = true
		ss.use(s)
		// A reading signalled to the last wait must not count as this
		// wait's: the loop would look at once (harmless, but a poll).
		s.drainUpdates()
		return s, func() { ss.release(s) }, nil
	}
	if old := ss.stream; old != nil {
		ss.stream = nil
		ss.stopInBackground(old)
	}
	s, err := startMemStream(path, period)
	if err != nil {
		return nil, nil, err
	}
	ss.stream, ss.waiting, ss.users = s, true, 1
	ss.gen++
	return s, func() { ss.release(s) }, nil
}

// release ends a wait's use of the shared stream s: it lingers for
// streamLinger, unless it ended already or the session is closing.
func (ss *session) release(s *memStream) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stream != s {
		// No longer the shared one (not while a wait holds it, but the
		// stop must not depend on that).
		ss.stopInBackground(s)
		return
	}
	ss.waiting = false
	ss.done(s)
}

// use (under mu) counts a call reading the shared stream s, resuming it
// when it was paused.
func (ss *session) use(s *memStream) {
	ss.gen++
	ss.users++
	if ss.users == 1 {
		s.resume()
	}
}

// done (under mu) ends a call's reading of the shared stream s: with no
// call left it is paused and lingers, or stopped when it ended or the
// session is closing.
func (ss *session) done(s *memStream) {
	if ss.stream != s {
		return
	}
	ss.users--
	if ss.users > 0 {
		return
	}
	if ss.closed || !s.live() {
		ss.stream = nil
		ss.stopInBackground(s)
		return
	}
	s.pause()
	ss.armLinger(s)
}

// armLinger (under mu) counts a use of s and stops it streamLinger from
// now unless another use comes first.
func (ss *session) armLinger(s *memStream) {
	ss.gen++
	gen := ss.gen
	time.AfterFunc(streamLinger, func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.stream != s || ss.users > 0 || ss.gen != gen {
			return
		}
		ss.stream = nil
		ss.stopInBackground(s)
	})
}

// stopInBackground (under mu) stops s without holding mu while it is
// reaped; close waits for it.
func (ss *session) stopInBackground(s *memStream) {
	ss.stopping.Add(1)
	go func() {
		defer ss.stopping.Done()
		s.close()
	}()
}

// snapshotStream is the shared stream of path, resumed for the snapshot,
// and the release the snapshot calls once it has read it; nil when there
// is none and none could start. With none running (and no wait reading
// one) the snapshot starts it: its first round costs what a --query-gpu
// run would, and the session's later snapshots and waits (a free's unit
// stops, its look, its wait, its verification) then read the same process
// instead of starting one each. started says so: a new stream's first
// round comes after a process start, not within a period or two.
func (ss *session) snapshotStream(path string) (s *memStream, release func(), started bool) {
	if ss == nil {
		return nil, nil, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, nil, false
	}
	s = ss.stream
	if s == nil || s.path != path || !s.live() {
		if ss.waiting || awaitPeriod() <= 0 {
			return nil, nil, false
		}
		if old := ss.stream; old != nil {
			ss.stream = nil
			ss.stopInBackground(old)
		}
		var err error
		if s, err = startMemStream(path, awaitPeriod()); err != nil {
			// The one-shot says what is wrong with nvidia-smi.
			return nil, nil, false
		}
		ss.stream, ss.users, started = s, 1, true
		ss.gen++
	} else {
		// A prestarted stream that has not printed yet is starting too.
		started = s.unread()
		ss.use(s)
	}
	return s, func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		ss.done(s)
	}, started
}

// Prestart starts the session's memory stream now, for the first snapshot
// to read (see snapshotStream): nvidia-smi's start (NVML's, 26 ms on the
// H200) then runs beside what the caller does before its first call (a
// run's Lua set-up) instead of inside that snapshot. Nothing when a
// stream runs, the session is closed or cfg finds no nvidia-smi; unused,
// it is stopped after streamLinger, as a stream no call uses.
func (s *Session) Prestart(cfg Config) {
	smi, err := newSMIRunner(cfg)
	if err != nil || awaitPeriod() <= 0 {
		return
	}
	ss := s.ss
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed || ss.waiting || ss.stream != nil {
		return
	}
	st, err := startMemStream(smi.path, awaitPeriod())
	if err != nil {
		return // the first snapshot's one-shot says what is wrong
	}
	// Not paused: it is starting. No user: it lingers as an unused one.
	ss.stream = st
	ss.armLinger(st)
}

// close stops the shared stream (the serve loop's end, after every call
// returned) and waits until every stream it stopped is reaped.
func (ss *session) close() {
	ss.mu.Lock()
	ss.closed = true
	if s := ss.stream; s != nil {
		ss.stream = nil
		ss.stopInBackground(s)
	}
	ss.mu.Unlock()
	ss.stopping.Wait()
}

// listingKey names the host view a listing was read in (a test's fake
// /proc and devices are another view than the real ones).
func listingKey(cfg Config, smiPath string) string {
	return cfg.ProcDir + "\x00" + cfg.DevDir + "\x00" + smiPath
}

// recordListing keeps what a snapshot's listing, started at at, said of
// each holder, the GPUs it was read with and what it charged where.
func (ss *session) recordListing(key string, at time.Time, gs gpuState) {
	if ss == nil {
		return
	}
	l := sessionListing{key: key, at: at, judged: ownership{}, gpus: slices.Clone(gs.gpus),
		owners: map[int][]Identity{}, ownersMiB: map[int]int64{}, elsewhereMiB: gs.elsewhereMiB, unplaced: gs.unplaced}
	l.judged.record(gs.holders)
	for _, h := range gs.holders {
		if !h.Owner {
			continue
		}
		gpus := slices.Clone(h.GPUs)
		for g := range h.MemByGPU {
			if !slices.Contains(gpus, g) {
				gpus = append(gpus, g)
			}
		}
		for _, g := range gpus {
			l.owners[g] = append(l.owners[g], h.Identity)
			// An owner the listing does not charge on g (one that maps the
			// device unlisted, as a forked child does) holds 0 there.
			switch mib := h.MemByGPU[g]; {
			case mib < 0 || l.ownersMiB[g] < 0:
				l.ownersMiB[g] = -1
			default:
				l.ownersMiB[g] += mib
			}
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.listing = l
}

// snapshotListing is the session's latest snapshot listing of key; false
// when there is none. Its maps are the session's: read them only.
func (ss *session) snapshotListing(key string) (sessionListing, bool) {
	if ss == nil {
		return sessionListing{}, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.listing.judged == nil || ss.listing.key != key {
		return sessionListing{}, false
	}
	return ss.listing, true
}

// goneMiB is what the listing charged on GPU g to its owners there that
// are not in here (-1 when an amount is unknown).
func (l sessionListing) goneMiB(g int, here map[Identity]bool) int64 {
	var sum int64
	for _, id := range l.owners[g] {
		if here[id] {
			continue
		}
		mib := l.judged[id].MemByGPU[g]
		if mib < 0 {
			return -1
		}
		sum += mib
	}
	return sum
}

// lastListing is the judgments of the session's latest snapshot listing
// of key and when it was read; false when there is none.
func (ss *session) lastListing(key string) (ownership, time.Time, bool) {
	if ss == nil {
		return nil, time.Time{}, false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.listing.judged == nil || ss.listing.key != key {
		return nil, time.Time{}, false
	}
	o := make(ownership, len(ss.listing.judged))
	for id, h := range ss.listing.judged {
		o[id] = h
	}
	return o, ss.listing.at, true
}
