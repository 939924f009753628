package helper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Kill timing.
const (
	DefaultGrace = 5 * time.Second
	// killPoll is how often exits are checked while waiting where no
	// pidfd tells the exit (exitWaiter): a free's wait for the release
	// starts only once the kill returns, and a torch worker's last thread
	// ends about when the driver releases its memory (H200: its leader is
	// a zombie 100-200 ms before), so each poll's delay is the free's. A
	// check is a stat read per victim.
	killPoll = 5 * time.Millisecond
	// killWait is how long a process may take to vanish after KILL before
	// it is reported as survived (D state, ...), rather than waited on forever.
	killWait = 3 * time.Second
)

var signals = map[string]unix.Signal{
	"TERM": unix.SIGTERM, "KILL": unix.SIGKILL, "INT": unix.SIGINT, "HUP": unix.SIGHUP,
	"QUIT": unix.SIGQUIT, "USR1": unix.SIGUSR1, "USR2": unix.SIGUSR2,
}

// parseSignal accepts "TERM", "SIGTERM", "term" or a number.
func parseSignal(s string) (string, unix.Signal, error) {
	if s == "" {
		return "TERM", unix.SIGTERM, nil
	}
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if sig, ok := signals[name]; ok {
		return name, sig, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		for k, v := range signals {
			if int(v) == n {
				return k, v, nil
			}
		}
	}
	return "", 0, fmt.Errorf("signal %q: want one of TERM, KILL, INT, HUP, QUIT, USR1, USR2", s)
}

// pidfdState: 0 unknown, 1 usable, 2 unavailable (old kernel / seccomp).
var (
	pidfdOnce sync.Once
	pidfdOK   bool
)

func havePidfd() bool {
	pidfdOnce.Do(func() {
		fd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err == nil {
			unix.Close(fd)
			pidfdOK = true
		}
	})
	return pidfdOK
}

// KillSource is a host that KillOn signals instead of the real one: a
// model (modulestest) that the kill's steps treat as they treat a real
// host.
type KillSource interface {
	// Now is the host's clock (a model's may be virtual).
	Now() time.Time
	// Sleep returns when the clock reads until, or with ctx's error.
	Sleep(ctx context.Context, until time.Time) error
	// Ticks is the host's clock in clock ticks since boot (a start time's
	// unit): the kill's Since.
	Ticks() uint64
	BootID() string
	// Procs is every process (for Group and Tree).
	Procs() ([]KillProc, error)
	// Proc reads pid now; false when there is none.
	Proc(pid int) (KillProc, bool)
	// Self is the helper's own process.
	Self() KillProc
	// Signal sends sig (TERM, KILL, ...) to id if its identity still
	// holds; why not: "gone", "pid reused" or the error.
	Signal(id Identity, sig string) (sent bool, why string)
	// Ignores: id's disposition for sig is SIG_IGN.
	Ignores(id Identity, sig string) bool
	// Chains are the managers of each pid, innermost first; a kind's state
	// may be left unread (Alive reads it after the signals).
	Chains(ctx context.Context, pids []int) map[int][]Manager
	// Alive says of each manager whether it is alive now.
	Alive(ctx context.Context, ms []*Manager) []bool
}

// KillProc is one process as a kill sees it.
type KillProc struct {
	Identity
	PPID, PGID  int
	State, Comm string
	// LiveThreads: a Z or X leader still has live threads (signals reach
	// them, they hold its files).
	LiveThreads bool
	// Never says why it is never signalled (pid 1, the helper, its
	// ancestors, a kernel thread); Protected names its protected name,
	// which force lifts.
	Never, Protected string
}

// victim is one process the request considers.
type victim struct {
	res  KillResult
	done bool
}

// liveness re-reads the process: gone (exited, or its pid now names
// another process) or alive with its state. A Z leader whose other threads
// still run is alive: signals reach them, and they hold its files.
func liveness(src KillSource, id Identity) (alive bool, reused bool, state string) {
	p, ok := src.Proc(id.PID)
	if !ok {
		return false, false, ""
	}
	if p.StartTime != id.StartTime {
		return false, true, ""
	}
	if (p.State == "Z" || p.State == "X") && !p.LiveThreads {
		return false, false, p.State
	}
	return true, false, p.State
}

// skipWhy says why a process must not be signalled, or "". Force lifts
// only the protected-name rule.
func skipWhy(p KillProc, force bool) string {
	switch {
	case p.Never != "":
		return p.Never
	case p.Protected != "" && !force:
		return p.Protected + " (force not set)"
	}
	return ""
}

// Kill signals processes by identity: Signal (TERM) first, KILL after
// Grace, each re-checked right before every signal. Group and Tree add the
// target's process group and descendants, each with its own identity taken
// now. pid <= 1, the helper, its ancestors and kernel threads are never
// signalled; protected names only with Force.
func Kill(ctx context.Context, req KillRequest) (*KillResponse, error) {
	if _, _, err := parseSignal(req.Signal); err != nil {
		return nil, err
	}
	s, err := newScanner(req.Config)
	if err != nil {
		return nil, err
	}
	src := &hostKill{s: s, pidfds: map[int]int{}}
	defer src.close()
	return KillOn(ctx, req, src)
}

// KillOn is Kill on src.
func KillOn(ctx context.Context, req KillRequest, src KillSource) (*KillResponse, error) {
	start := src.Now()
	sigName, _, err := parseSignal(req.Signal)
	if err != nil {
		return nil, err
	}
	grace := req.Grace.D()
	if grace <= 0 {
		grace = DefaultGrace
	}
	for i, t := range req.Targets {
		if t.PID <= 0 {
			return nil, fmt.Errorf("target %d: pid %d is not a process id", i, t.PID)
		}
		if t.StartTime == 0 {
			return nil, fmt.Errorf("target %d (pid %d): start_time missing: targets are identities from a snapshot", i, t.PID)
		}
	}
	k := &killRun{src: src, req: req, index: map[int]*victim{}, procs: map[int]KillProc{}}
	since := src.Ticks()
	if err := k.gather(); err != nil {
		return nil, err
	}
	active := k.screen(sigName)
	// An interrupted request signals nothing: a cancelled run must not
	// start a kill it can no longer see through.
	if len(active) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("nothing signalled: %w", err)
		}
	}
	// Each victim's managers, read while it lives: what may start it again.
	var chains map[int][]Manager
	if len(active) > 0 {
		pids := make([]int, len(active))
		for i, v := range active {
			pids[i] = v.res.PID
		}
		chains = src.Chains(ctx, pids)
	}
	k.signalAll(ctx, active, sigName, grace)
	resp := &KillResponse{Version: Version, Results: make([]KillResult, 0, len(k.victims)), Since: since}
	for _, v := range k.victims {
		if v.res.PPID == 0 {
			if p, ok := k.procs[v.res.PID]; ok {
				v.res.PPID = p.PPID
			}
		}
		resp.Results = append(resp.Results, v.res)
	}
	resp.Managers = killedManagers(ctx, src, chains, resp.Results)
	resp.Elapsed = Duration(src.Now().Sub(start))
	return resp, nil
}

// killRun is one kill request's victims.
type killRun struct {
	src     KillSource
	req     KillRequest
	victims []*victim
	index   map[int]*victim
	procs   map[int]KillProc // each victim as it was read when it was added
}

func (k *killRun) add(id Identity, via string) *victim {
	if v, ok := k.index[id.PID]; ok {
		return v
	}
	v := &victim{res: KillResult{Identity: id, Via: via}}
	k.victims = append(k.victims, v)
	k.index[id.PID] = v
	return v
}

// gather takes the targets and, with Group and Tree, their groups and
// descendants, each with the identity it has now.
func (k *killRun) gather() error {
	src, req, bootID := k.src, k.req, k.src.BootID()
	// Every process and the parent -> children map, read once when Group or
	// Tree need them.
	var all []KillProc
	children := map[int][]KillProc{}
	if req.Group || req.Tree {
		var err error
		if all, err = src.Procs(); err != nil {
			return fmt.Errorf("kill: list processes: %w", err)
		}
		for _, p := range all {
			children[p.PPID] = append(children[p.PPID], p)
		}
	}
	self := src.Self()
	for _, t := range req.Targets {
		id := t
		if id.BootID == "" {
			id.BootID = bootID
		}
		v := k.add(id, "target")
		if id.BootID != bootID {
			v.res.Outcome, v.res.Reason, v.done = OutcomeSkipped, "pid reused (boot id changed: the host rebooted)", true
			continue
		}
		p, ok := src.Proc(id.PID)
		if !ok {
			v.res.Outcome, v.res.Reason, v.done = OutcomeExited, "already gone", true
			continue
		}
		if p.StartTime != id.StartTime {
			v.res.Comm = p.Comm
			v.res.Outcome, v.res.Reason, v.done = OutcomeSkipped, "pid reused", true
			continue
		}
		k.procs[id.PID] = p
		// A target that may not be signalled lends nobody its group or
		// tree: the tree of pid 1 or of an ancestor is the whole host.
		if why := skipWhy(p, req.Force); why != "" {
			v.res.Comm = p.Comm
			v.res.Outcome, v.res.Reason, v.done = OutcomeSkipped, why, true
			continue
		}
		if req.Group {
			for _, o := range all {
				if o.PGID == p.PGID && o.PID != id.PID {
					m := k.add(Identity{PID: o.PID, StartTime: o.StartTime, BootID: bootID}, "group of "+strconv.Itoa(id.PID))
					k.procs[o.PID] = o
					if p.PGID == self.PGID && !m.done {
						m.res.Comm = o.Comm
						m.res.Outcome, m.res.Reason, m.done = OutcomeSkipped, "in the helper's own process group", true
					}
				}
			}
		}
		if req.Tree {
			queue := []int{id.PID}
			for len(queue) > 0 {
				pid := queue[0]
				queue = queue[1:]
				for _, c := range children[pid] {
					if _, seen := k.index[c.PID]; seen {
						continue
					}
					k.add(Identity{PID: c.PID, StartTime: c.StartTime, BootID: bootID}, "child of "+strconv.Itoa(pid))
					k.procs[c.PID] = c
					queue = append(queue, c.PID)
				}
			}
		}
	}
	return nil
}

// screen applies the safety rules, then zombies, then dry run; it
// returns the victims to signal.
func (k *killRun) screen(sigName string) []*victim {
	var active []*victim
	for _, v := range k.victims {
		if v.done {
			continue
		}
		p := k.procs[v.res.PID]
		v.res.Comm, v.res.PPID = p.Comm, p.PPID
		switch why := skipWhy(p, k.req.Force); {
		case why != "":
			v.res.Outcome, v.res.Reason = OutcomeSkipped, why
		case (p.State == "Z" || p.State == "X") && !p.LiveThreads:
			v.res.Outcome, v.res.Reason, v.res.State = OutcomeExited, "zombie (already exited)", p.State
		case k.req.DryRun:
			v.res.Outcome = OutcomeWould
			v.res.Signals = []string{sigName}
		default:
			active = append(active, v)
			continue
		}
		v.done = true
	}
	return active
}

// signal sends sig to v if its identity still holds.
func (k *killRun) signal(v *victim, name string) (sent bool, why string) {
	if sent, why = k.src.Signal(v.res.Identity, name); sent {
		v.res.Signals = append(v.res.Signals, name)
		v.res.SignalTimes = append(v.res.SignalTimes, k.src.Now())
		Tracef("kill: %s sent to pid %d", name, v.res.PID)
	}
	return sent, why
}

// signalAll sends the first signal, waits the grace and KILLs what is
// left; what is still alive then is survived.
func (k *killRun) signalAll(ctx context.Context, active []*victim, sigName string, grace time.Duration) {
	var waiting []*victim
	for _, v := range active {
		sent, why := k.signal(v, sigName)
		switch {
		case sent:
			reportSignal(ctx, &v.res)
			waiting = append(waiting, v)
		case why == "gone":
			v.res.Outcome, v.done = OutcomeExited, true
		case why == "pid reused":
			v.res.Outcome, v.res.Reason, v.done = OutcomeSkipped, why, true
		default:
			v.res.Outcome, v.res.Reason, v.done = OutcomeSurvived, why, true
			v.res.State = k.stateOf(v.res.Identity)
		}
	}
	if sigName == "KILL" {
		waiting = k.waitGone(ctx, waiting, killWait, OutcomeKilled)
	} else {
		// A process that ignores the first signal (SIG_IGN) was not even
		// told: the grace period would only delay the KILL it will get.
		// A handler (or a blocked signal) may still end it: those wait.
		var ignoring []*victim
		waiting, ignoring = k.splitIgnoring(waiting, sigName)
		if len(ignoring) > 0 && ctx.Err() == nil {
			for _, v := range ignoring {
				v.res.Reason = sigName + " is ignored (SIG_IGN in /proc/PID/status SigIgn): KILL without the grace period"
			}
			waiting = append(waiting, k.killSurvivors(ctx, ignoring)...)
		} else {
			waiting = append(waiting, ignoring...)
		}
		waiting = k.waitGone(ctx, waiting, grace, OutcomeExited)
		// KILL whatever ignored the first signal, unless the grace period
		// was cut short: an interrupt is no licence to skip it.
		if ctx.Err() == nil {
			waiting = k.killSurvivors(ctx, waiting)
		}
	}
	for _, v := range waiting {
		v.res.Outcome = OutcomeSurvived
		v.res.State = k.stateOf(v.res.Identity)
		v.res.Reason = "still alive after " + strings.Join(v.res.Signals, ", ")
		if v.res.State == "D" {
			v.res.Reason += " (state D: uninterruptible sleep, usually stuck in the driver)"
		}
		if ctx.Err() != nil {
			v.res.Reason += "; wait cut short: " + ctx.Err().Error()
			if !slices.Contains(v.res.Signals, "KILL") {
				v.res.Reason += "; KILL not sent"
			}
		}
	}
}

// splitIgnoring sets apart the victims whose disposition for sig is
// SIG_IGN: sig was discarded for them.
func (k *killRun) splitIgnoring(vs []*victim, sig string) (rest, ignoring []*victim) {
	for _, v := range vs {
		if k.src.Ignores(v.res.Identity, sig) {
			ignoring = append(ignoring, v)
			continue
		}
		rest = append(rest, v)
	}
	return rest, ignoring
}

// killSurvivors sends KILL to what outlived the first signal and waits for
// it to vanish; it returns the processes still alive.
func (k *killRun) killSurvivors(ctx context.Context, vs []*victim) []*victim {
	var killed []*victim
	for _, v := range vs {
		sent, why := k.signal(v, "KILL")
		switch {
		case sent:
			reportSignal(ctx, &v.res)
			killed = append(killed, v)
		case why == "gone" || why == "pid reused":
			// It exited between the last poll and now.
			v.res.Outcome, v.done = OutcomeExited, true
		default:
			v.res.Outcome, v.res.Reason, v.done = OutcomeSurvived, why, true
			v.res.State = k.stateOf(v.res.Identity)
		}
	}
	return k.waitGone(ctx, killed, killWait, OutcomeKilled)
}

func (k *killRun) stateOf(id Identity) string {
	_, _, state := liveness(k.src, id)
	return state
}

// waitGone polls every killPoll until each victim is gone or d passes;
// the gone ones get outcome, the rest are returned.
func (k *killRun) waitGone(ctx context.Context, vs []*victim, d time.Duration, outcome string) []*victim {
	deadline := k.src.Now().Add(d)
	for {
		left := vs[:0:0]
		for _, v := range vs {
			if alive, _, _ := liveness(k.src, v.res.Identity); alive {
				left = append(left, v)
				continue
			}
			v.res.Outcome, v.done = outcome, true
			Tracef("kill: pid %d gone (%s)", v.res.PID, outcome)
		}
		vs = left
		if len(vs) == 0 || !k.src.Now().Before(deadline) {
			return vs
		}
		if k.awaitExit(ctx, vs, deadline) != nil {
			return vs
		}
	}
}

// exitWaiter is a KillSource that is told when a process exits: a wait
// then wakes at the exit instead of every killPoll (a torch worker takes
// 100-300 ms to end: 20-60 polls, each waking the helper, saved).
type exitWaiter interface {
	// AwaitExit returns when one of ids may have ended, when the clock
	// reads until, or with ctx's error. ok is false when it cannot tell
	// for some of ids: the caller polls instead.
	AwaitExit(ctx context.Context, ids []Identity, until time.Time) (ok bool, err error)
}

// awaitExit waits for one of vs to end, or until deadline: told by the
// source where it can be, else the next killPoll.
func (k *killRun) awaitExit(ctx context.Context, vs []*victim, deadline time.Time) error {
	if w, ok := k.src.(exitWaiter); ok {
		ids := make([]Identity, len(vs))
		for i, v := range vs {
			ids[i] = v.res.Identity
		}
		if told, err := w.AwaitExit(ctx, ids, deadline); told || err != nil {
			return err
		}
	}
	next := k.src.Now().Add(killPoll)
	if next.After(deadline) {
		next = deadline
	}
	return k.src.Sleep(ctx, next)
}

// hostKill is the real host as a KillSource: /proc, pidfds and kill(2).
type hostKill struct {
	s      *scanner
	pidfds map[int]int    // by pid: the fd pins the process a check proved
	told   map[int32]bool // pidfds AwaitExit saw readable
	// rules by identity: a process's protection is read once, not on
	// each of the liveness checks a wait makes every killPoll.
	rules map[Identity][2]string
}

func (h *hostKill) close() {
	for _, fd := range h.pidfds {
		unix.Close(fd)
	}
}

func (h *hostKill) Now() time.Time { return time.Now() }

func (h *hostKill) Sleep(ctx context.Context, until time.Time) error {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// AwaitExit polls the pidfds Signal opened: one turns readable when its
// process has ended, every thread of it (a zombie leader with live
// threads does not count), the state liveness calls gone. ctx's end
// wakes the poll through an eventfd.
func (h *hostKill) AwaitExit(ctx context.Context, ids []Identity, until time.Time) (bool, error) {
	fds := make([]unix.PollFd, 0, len(ids)+1)
	for _, id := range ids {
		fd, ok := h.pidfds[id.PID]
		if !ok || h.told[int32(fd)] {
			// A pidfd told the end of a process /proc still shows alive:
			// polling it again would return at once, a spin.
			return false, nil
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return false, nil
	}
	defer unix.Close(efd)
	stop := context.AfterFunc(ctx, func() {
		_, _ = unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	})
	defer stop()
	fds = append(fds, unix.PollFd{Fd: int32(efd), Events: unix.POLLIN})
	for {
		if err := ctx.Err(); err != nil {
			return true, err
		}
		left := time.Until(until)
		if left <= 0 {
			return true, nil
		}
		// Rounded up: a poll that wakes a little early would spin.
		n, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false, nil
		case n > 0:
			for _, p := range fds[:len(fds)-1] {
				if p.Revents != 0 {
					if h.told == nil {
						h.told = map[int32]bool{}
					}
					h.told[p.Fd] = true
				}
			}
			return true, ctx.Err()
		}
	}
}

func (h *hostKill) Ticks() uint64 { return h.s.nowTicks() }

func (h *hostKill) BootID() string { return h.s.bootID }

func (h *hostKill) Procs() ([]KillProc, error) {
	pids, err := h.s.proc.pids()
	if err != nil {
		return nil, err
	}
	var out []KillProc
	for _, pid := range pids {
		if p, ok := h.Proc(pid); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func (h *hostKill) Proc(pid int) (KillProc, bool) {
	st, err := h.s.proc.stat(pid)
	if err != nil {
		return KillProc{}, false
	}
	p := KillProc{Identity: Identity{PID: st.PID, StartTime: st.StartTime, BootID: h.s.bootID},
		PPID: st.PPID, PGID: st.PGID, State: st.State, Comm: st.Comm}
	if st.State == "Z" || st.State == "X" {
		p.LiveThreads = h.s.proc.liveThreads(pid)
	}
	if r, ok := h.rules[p.Identity]; ok {
		p.Never, p.Protected = r[0], r[1]
		return p, true
	}
	why := h.s.protectedWhy(st.PID, st.Comm, h.s.proc.cmdline(st.PID))
	switch {
	case why != "" && (st.PID <= 1 || st.PID == h.s.self || h.s.guarded[st.PID]):
		p.Never = why
	case h.s.isKernelThread(st):
		p.Never = "kernel thread"
	default:
		p.Protected = why
	}
	if h.rules == nil {
		h.rules = map[Identity][2]string{}
	}
	h.rules[p.Identity] = [2]string{p.Never, p.Protected}
	return p, true
}

func (h *hostKill) Self() KillProc {
	p, _ := h.Proc(h.s.self)
	return p
}

// Signal: with a pidfd the check is race-free: the fd pins the process it
// was opened on, and the start time read after opening proves that
// process is id. Without one the start time is re-read immediately
// before kill(2).
func (h *hostKill) Signal(id Identity, name string) (bool, string) {
	sig := signals[name]
	fd, ok := h.pidfds[id.PID]
	if havePidfd() && !ok {
		var err error
		if fd, err = unix.PidfdOpen(id.PID, 0); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return false, "gone"
			}
			return false, fmt.Sprintf("pidfd_open(%d): %v", id.PID, err)
		}
		h.pidfds[id.PID], ok = fd, true
	}
	alive, reused, _ := liveness(h, id)
	if reused {
		return false, "pid reused"
	}
	if !alive {
		return false, "gone"
	}
	var err error
	if ok {
		err = unix.PidfdSendSignal(fd, sig, nil, 0)
	} else {
		err = unix.Kill(id.PID, sig)
	}
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, "gone"
		}
		return false, fmt.Sprintf("signal %s to pid %d: %v", name, id.PID, err)
	}
	return true, ""
}

// Ignores reads SigIgn after sig was sent, the identity re-checked after
// the read.
func (h *hostKill) Ignores(id Identity, name string) bool {
	b, err := os.ReadFile(h.s.proc.path(id.PID, "status"))
	alive, reused, _ := liveness(h, id)
	return err == nil && alive && !reused && sigIgnored(b, signals[name])
}

// readAfterKill are the manager kinds a kill reads only after its signals:
// a unit's state and Restart= are the unit's, not its worker's, and
// killedManagers reads every manager that may restart again after the
// signals, so a read before as well ran systemctl show twice a kill. A
// unit the session read as Restart=no just before (the free's look, a
// unit stop) is not read at all: it brings no worker back.
var readAfterKill = map[string]bool{ManagerUnit: true}

func (h *hostKill) Chains(ctx context.Context, pids []int) map[int][]Manager {
	chains := h.s.managerReader(ctx).chainsExcept(pids, readAfterKill)
	systemctl, _ := findSystemd(h.s.cfg)
	for _, chain := range chains {
		for i := range chain {
			m := &chain[i]
			if m.Kind != ManagerUnit || systemctl == "" {
				continue
			}
			if restart, ok := sessionOf(ctx).noRestart(systemctl, m.Unit); ok {
				m.Restart, m.Restarts = restart, RestartsNo
			}
		}
	}
	return chains
}

func (h *hostKill) Alive(ctx context.Context, ms []*Manager) []bool {
	states := h.s.managerReader(ctx).read(ms)
	out := make([]bool, len(states))
	for i, st := range states {
		out[i] = st.alive
	}
	return out
}

// sigIgnored reads the SigIgn mask of a /proc/PID/status.
func sigIgnored(status []byte, sig unix.Signal) bool {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && sig >= 1 && sig <= 64 && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// systemReapers are parents that adopt or reap processes but never restart
// a worker (by comm); a unit's Restart= is judged from the unit instead.
var systemReapers = []string{
	"systemd", "init", "containerd-shim*", "conmon", "tini", "dumb-init", "catatonit",
	"docker-init", "runc", "crun", "s6-svscan", "(sd-pam)", "kthreadd",
}

// isKernelThread: PF_KTHREAD, or kthreadd and its children (no cmdline).
func (s *scanner) isKernelThread(st procStat) bool {
	if st.Flags&pfKthread != 0 || st.PID == 2 {
		return true
	}
	return st.PPID == 2 && len(s.proc.cmdline(st.PID)) == 0
}
