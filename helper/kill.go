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
	// killPoll is how often exits are checked while waiting.
	killPoll = 20 * time.Millisecond
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

// victim is one process the request considers.
type victim struct {
	res   KillResult
	pidfd int
	done  bool
}

// liveness re-reads the process: gone (exited, or its pid now names
// another process) or alive with its state. A Z leader whose other threads
// still run is alive: signals reach them, and they hold its files.
func (s *scanner) liveness(id Identity) (alive bool, reused bool, state string) {
	st, err := s.proc.stat(id.PID)
	if err != nil {
		return false, false, ""
	}
	if st.StartTime != id.StartTime {
		return false, true, ""
	}
	if (st.State == "Z" || st.State == "X") && !s.proc.liveThreads(id.PID) {
		return false, false, st.State
	}
	return true, false, st.State
}

// signal sends sig to v only if v's identity still holds. With a pidfd the
// check is race-free: the fd pins the process it was opened on, and the
// start time read after opening proves that process is v. Without one the
// start time is re-read immediately before kill(2).
func (s *scanner) signal(v *victim, sig unix.Signal, name string) (sent bool, why string) {
	if havePidfd() && v.pidfd < 0 {
		fd, err := unix.PidfdOpen(v.res.PID, 0)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return false, "gone"
			}
			return false, fmt.Sprintf("pidfd_open(%d): %v", v.res.PID, err)
		}
		v.pidfd = fd
	}
	alive, reused, _ := s.liveness(v.res.Identity)
	if reused {
		return false, "pid reused"
	}
	if !alive {
		return false, "gone"
	}
	var err error
	if v.pidfd >= 0 {
		err = unix.PidfdSendSignal(v.pidfd, sig, nil, 0)
	} else {
		err = unix.Kill(v.res.PID, sig)
	}
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, "gone"
		}
		return false, fmt.Sprintf("signal %s to pid %d: %v", name, v.res.PID, err)
	}
	v.res.Signals = append(v.res.Signals, name)
	v.res.SignalTimes = append(v.res.SignalTimes, time.Now())
	return true, ""
}

// isKernelThread: PF_KTHREAD, or kthreadd and its children (no cmdline).
func (s *scanner) isKernelThread(st procStat) bool {
	if st.Flags&pfKthread != 0 || st.PID == 2 {
		return true
	}
	return st.PPID == 2 && len(s.proc.cmdline(st.PID)) == 0
}

// skipWhy says why a process must not be signalled, or "". Force lifts
// only the protected-name rule.
func (s *scanner) skipWhy(st procStat, force bool) string {
	why := s.protectedWhy(st.PID, st.Comm, s.proc.cmdline(st.PID))
	switch {
	case why != "" && (st.PID <= 1 || st.PID == s.self || s.guarded[st.PID]):
		return why
	case s.isKernelThread(st):
		return "kernel thread"
	case why != "" && !force:
		return why + " (force not set)"
	}
	return ""
}

// Kill signals processes by identity: Signal (TERM) first, KILL after
// Grace, each re-checked right before every signal. Group and Tree add the
// target's process group and descendants, each with its own identity taken
// now. pid <= 1, the helper, its ancestors and kernel threads are never
// signalled; protected names only with Force.
func Kill(ctx context.Context, req KillRequest) (*KillResponse, error) {
	start := time.Now()
	sigName, sig, err := parseSignal(req.Signal)
	if err != nil {
		return nil, err
	}
	grace := req.Grace.D()
	if grace <= 0 {
		grace = DefaultGrace
	}
	s, err := newScanner(req.Config)
	if err != nil {
		return nil, err
	}
	since := s.nowTicks()
	for i, t := range req.Targets {
		if t.PID <= 0 {
			return nil, fmt.Errorf("target %d: pid %d is not a process id", i, t.PID)
		}
		if t.StartTime == 0 {
			return nil, fmt.Errorf("target %d (pid %d): start_time missing: targets are identities from a snapshot", i, t.PID)
		}
	}
	var victims []*victim
	index := map[int]*victim{}
	add := func(id Identity, via string) *victim {
		if v, ok := index[id.PID]; ok {
			return v
		}
		v := &victim{res: KillResult{Identity: id, Via: via}, pidfd: -1}
		victims = append(victims, v)
		index[id.PID] = v
		return v
	}
	defer func() {
		for _, v := range victims {
			if v.pidfd >= 0 {
				unix.Close(v.pidfd)
			}
		}
	}()

	// Every process and the parent -> children map, read once when Group or
	// Tree need them.
	var all []procStat
	children := map[int][]procStat{}
	if req.Group || req.Tree {
		pids, err := s.proc.pids()
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			if st, err := s.proc.stat(pid); err == nil {
				all = append(all, st)
				children[st.PPID] = append(children[st.PPID], st)
			}
		}
	}
	selfStat, _ := s.proc.stat(s.self)

	stats := map[int]procStat{}
	for _, t := range req.Targets {
		id := t
		if id.BootID == "" {
			id.BootID = s.bootID
		}
		v := add(id, "target")
		if id.BootID != s.bootID {
			v.res.Outcome, v.res.Reason, v.done = OutcomeSkipped, "pid reused (boot id changed: the host rebooted)", true
			continue
		}
		st, err := s.proc.stat(id.PID)
		if err != nil {
			v.res.Outcome, v.res.Reason, v.done = OutcomeExited, "already gone", true
			continue
		}
		if st.StartTime != id.StartTime {
			v.res.Comm = st.Comm
			v.res.Outcome, v.res.Reason, v.done = OutcomeSkipped, "pid reused", true
			continue
		}
		stats[id.PID] = st
		// A target that may not be signalled lends nobody its group or
		// tree: the tree of pid 1 or of an ancestor is the whole host.
		if why := s.skipWhy(st, req.Force); why != "" {
			v.res.Comm = st.Comm
			v.res.Outcome, v.res.Reason, v.done = OutcomeSkipped, why, true
			continue
		}
		if req.Group {
			for _, o := range all {
				if o.PGID == st.PGID && o.PID != id.PID {
					m := add(Identity{PID: o.PID, StartTime: o.StartTime, BootID: s.bootID}, "group of "+strconv.Itoa(id.PID))
					stats[o.PID] = o
					if st.PGID == selfStat.PGID && !m.done {
						m.res.Comm = o.Comm
						m.res.Outcome, m.res.Reason, m.done = OutcomeSkipped, "in the helper's own process group", true
					}
				}
			}
		}
		if req.Tree {
			queue := []int{id.PID}
			for len(queue) > 0 {
				p := queue[0]
				queue = queue[1:]
				for _, c := range children[p] {
					if _, seen := index[c.PID]; seen {
						continue
					}
					add(Identity{PID: c.PID, StartTime: c.StartTime, BootID: s.bootID}, "child of "+strconv.Itoa(p))
					stats[c.PID] = c
					queue = append(queue, c.PID)
				}
			}
		}
	}

	// Safety rules, then zombies, then dry run.
	var active []*victim
	for _, v := range victims {
		if v.done {
			continue
		}
		st := stats[v.res.PID]
		v.res.Comm, v.res.PPID = st.Comm, st.PPID
		switch why := s.skipWhy(st, req.Force); {
		case why != "":
			v.res.Outcome, v.res.Reason = OutcomeSkipped, why
		case (st.State == "Z" || st.State == "X") && !s.proc.liveThreads(st.PID):
			v.res.Outcome, v.res.Reason, v.res.State = OutcomeExited, "zombie (already exited)", st.State
		case req.DryRun:
			v.res.Outcome = OutcomeWould
			v.res.Signals = []string{sigName}
		default:
			active = append(active, v)
			continue
		}
		v.done = true
	}

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
		chains = s.managerReader(ctx).chains(pids)
	}

	// First signal.
	var waiting []*victim
	for _, v := range active {
		sent, why := s.signal(v, sig, sigName)
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
			v.res.State = s.stateOf(v.res.Identity)
		}
	}
	if sig == unix.SIGKILL {
		waiting = s.waitGone(ctx, waiting, killWait, OutcomeKilled)
	} else {
		// A process that ignores the first signal (SIG_IGN) was not even
		// told: the grace period would only delay the KILL it will get.
		// A handler (or a blocked signal) may still end it: those wait.
		var ignoring []*victim
		waiting, ignoring = s.splitIgnoring(waiting, sig)
		if len(ignoring) > 0 && ctx.Err() == nil {
			for _, v := range ignoring {
				v.res.Reason = sigName + " is ignored (SIG_IGN in /proc/PID/status SigIgn): KILL without the grace period"
			}
			waiting = append(waiting, s.killSurvivors(ctx, ignoring)...)
		} else {
			waiting = append(waiting, ignoring...)
		}
		waiting = s.waitGone(ctx, waiting, grace, OutcomeExited)
		// KILL whatever ignored the first signal, unless the grace period
		// was cut short: an interrupt is no licence to skip it.
		if ctx.Err() == nil {
			waiting = s.killSurvivors(ctx, waiting)
		}
	}
	for _, v := range waiting {
		v.res.Outcome = OutcomeSurvived
		v.res.State = s.stateOf(v.res.Identity)
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
	resp := &KillResponse{Version: Version, Results: make([]KillResult, 0, len(victims)), Since: since}
	for _, v := range victims {
		if v.res.PPID == 0 {
			if st, ok := stats[v.res.PID]; ok {
				v.res.PPID = st.PPID
			}
		}
		resp.Results = append(resp.Results, v.res)
	}
	resp.Managers = s.killedManagers(ctx, chains, resp.Results)
	resp.Elapsed = Duration(time.Since(start))
	return resp, nil
}

// splitIgnoring sets apart the victims whose disposition for sig is
// SIG_IGN (read after sig was sent, the identity re-checked after the
// read): sig was discarded for them.
func (s *scanner) splitIgnoring(vs []*victim, sig unix.Signal) (rest, ignoring []*victim) {
	for _, v := range vs {
		b, err := os.ReadFile(s.proc.path(v.res.PID, "status"))
		alive, reused, _ := s.liveness(v.res.Identity)
		if err == nil && alive && !reused && sigIgnored(b, sig) {
			ignoring = append(ignoring, v)
			continue
		}
		rest = append(rest, v)
	}
	return rest, ignoring
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

// killSurvivors sends KILL to what outlived the first signal and waits for
// it to vanish; it returns the processes still alive.
func (s *scanner) killSurvivors(ctx context.Context, vs []*victim) []*victim {
	var killed []*victim
	for _, v := range vs {
		sent, why := s.signal(v, unix.SIGKILL, "KILL")
		switch {
		case sent:
			reportSignal(ctx, &v.res)
			killed = append(killed, v)
		case why == "gone" || why == "pid reused":
			// It exited between the last poll and now.
			v.res.Outcome, v.done = OutcomeExited, true
		default:
			v.res.Outcome, v.res.Reason, v.done = OutcomeSurvived, why, true
			v.res.State = s.stateOf(v.res.Identity)
		}
	}
	return s.waitGone(ctx, killed, killWait, OutcomeKilled)
}

func (s *scanner) stateOf(id Identity) string {
	_, _, state := s.liveness(id)
	return state
}

// waitGone polls every killPoll until each victim is gone or d passes;
// the gone ones get outcome, the rest are returned.
func (s *scanner) waitGone(ctx context.Context, vs []*victim, d time.Duration, outcome string) []*victim {
	deadline := time.Now().Add(d)
	t := time.NewTicker(killPoll)
	defer t.Stop()
	for {
		left := vs[:0:0]
		for _, v := range vs {
			if alive, _, _ := s.liveness(v.res.Identity); alive {
				left = append(left, v)
				continue
			}
			v.res.Outcome, v.done = outcome, true
		}
		vs = left
		if len(vs) == 0 || !time.Now().Before(deadline) {
			return vs
		}
		select {
		case <-ctx.Done():
			return vs
		case <-t.C:
		}
	}
}

// systemReapers are parents that adopt or reap processes but never restart
// a worker (by comm); a unit's Restart= is judged from the unit instead.
var systemReapers = []string{
	"systemd", "init", "containerd-shim*", "conmon", "tini", "dumb-init", "catatonit",
	"docker-init", "runc", "crun", "s6-svscan", "(sd-pam)", "kthreadd",
}
