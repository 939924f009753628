package helper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// memStreamPeriod is the -lms period of the memory stream a wait-free reads
// while it waits; 0 turns the stream off (tests compare with plain polling).
// On the H200 (hw/h200/probe_stream.py, hw/h200/results/probe-stream.log) `nvidia-smi -lms 10`
// printed a line every 10.1 ms and showed a release in the same
// millisecond as a 1 ms NVML poller, where one --query-gpu process took
// 21 ms.
var memStreamPeriod = 10 * time.Millisecond

// memStreamAwaitDiv divides memStreamPeriod into the period of a stream
// that a release is awaited on (awaitPeriod): 2 ms for the default.
const memStreamAwaitDiv = 5

// awaitPeriod is the stream's period for a snapshot and for a wait that
// ends at its first free reading (no settle): the driver releases 130-220
// ms after the death on the H200, and each period is latency a free pays
// twice (the line that shows the release, then one begun after the poll
// did), and a snapshot once (its round is whole at the next line). Such
// uses are short; a wait with a settle watches for seconds and keeps
// memStreamPeriod, whose rounds cost a fifth (an NVML read per GPU each;
// the lab's fake scans /proc each round). 0: no stream.
func awaitPeriod() time.Duration {
	if memStreamPeriod <= 0 {
		return 0
	}
	return max(memStreamPeriod/memStreamAwaitDiv, time.Millisecond)
}

// memStreamStall: a stream printing nothing this long is stuck (a wedged
// driver call); the wait kills it and falls back to polling.
var memStreamStall = 2 * time.Second

// memStreamHook, when set by tests, is told each stream's pid and argv
// once started.
var memStreamHook func(pid int, argv []string)

// memStreamSignalHook, when set by tests, is told every signal sent to a
// stream's process group.
var memStreamSignalHook func(pid int, sig syscall.Signal)

// memStream is one long-running `nvidia-smi --query-gpu=FIELDS -lms N`,
// with the fields of a one-shot --query-gpu: the real tool prints one line
// per GPU, in index order, every N ms until killed (no header with
// noheader), so each line is the GPU's latest reading, and a whole round
// of lines lists the GPUs as a --query-gpu would: a wait's first poll
// needs no one-shot run.
type memStream struct {
	cmd     *exec.Cmd
	path    string // the nvidia-smi it runs
	pid     int
	updates chan struct{} // one pending signal: a new reading arrived
	done    chan struct{} // closed when the output is read and the process reaped

	// pmu orders signalling the group against reaping its leader: while
	// the leader is unreaped (at worst a zombie) its pid, which is the
	// group's id, names no other process or group.
	pmu    sync.Mutex
	reaped bool
	stop   bool // close asked for the end

	mu      sync.Mutex
	used    map[int]int64     // latest memory.used by index; -1 unknown
	at      map[int]time.Time // when each index's latest line came
	last    time.Time         // when the last line came
	gap     time.Duration     // the latest time between two lines of one GPU
	changed chan struct{}     // closed and replaced on every line
	err     error             // why the stream ended (read after done)
	// round collects the lines of the round being printed (index order,
	// from roundAt); full is the latest whole round, whose first line
	// came at fullAt. A round is whole once the next one starts (an index
	// not above the previous line's).
	round           []GPU
	roundAt, fullAt time.Time
	full            []GPU
	// fullPaced: the full round took at least half a period (the next
	// began that much later), as a -lms loop's do; a flood's never does.
	fullPaced bool
	rounds    int           // whole rounds so far
	period    time.Duration // the -lms period asked for
	started   time.Time
	born      time.Time // the process start (started is the last resume)
	// paused: stopped (SIGSTOP) while no call uses it. After a resume the
	// lines of the round being printed and of the next round to start may
	// hold readings taken before the stop; fresh counts round starts since
	// the resume, and a line counts only from the second (its reading was
	// taken after the first one's lines were printed, so after the resume).
	paused  bool
	starts  int
	lastIdx int // the index of the last line, -1 after a resume
}

// freshStarts is the round start from which lines after a resume count.
const freshStarts = 2

// A stream may print at most fastRounds rounds per period, plus
// fastSlack: lines that come in bursts (a reader descheduled a while) stay
// within that, a tool printing without pause (a flood of valid rows) does
// not, and is killed before it costs the host more.
const (
	fastRounds = 4
	fastSlack  = 8
)

// startMemStream starts the stream in its own process group.
func startMemStream(path string, period time.Duration) (*memStream, error) {
	ms := max(period.Milliseconds(), 1)
	// -lms first: options may come in any order.
	argv := []string{path, "-lms", strconv.FormatInt(ms, 10), "--query-gpu=" + queryGPUFields, csvFormat}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// Our own pipe, not StdoutPipe: reading it must not depend on Wait,
	// which here only reaps.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("memory stream %s: stdout pipe: %w", path, err)
	}
	cmd.Stdout = w
	stderr := &lockedTail{max: 4096}
	cmd.Stderr = stderr
	// A grandchild keeping stderr open must not hold the reap up.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	w.Close() // the child has it; ours would hide its EOF
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("memory stream %s: %w", path, err)
	}
	s := &memStream{
		cmd: cmd, path: path, pid: cmd.Process.Pid, updates: make(chan struct{}, 1), done: make(chan struct{}),
		used: map[int]int64{}, at: map[int]time.Time{}, last: time.Now(), changed: make(chan struct{}),
		period: time.Duration(ms) * time.Millisecond, started: time.Now(), born: time.Now(), starts: freshStarts,
	}
	streamGroups.add(s.pid)
	Tracef("stream pid %d started: -lms %d", s.pid, ms)
	if memStreamHook != nil {
		memStreamHook(s.pid, argv)
	}
	readDone := make(chan error, 1)
	go func() {
		err := s.read(r)
		if err != nil {
			// A bad line: the stream is of no use any more.
			s.signal(syscall.SIGKILL)
		}
		readDone <- err
	}()
	go func() {
		waitErr := s.reap()
		var readErr error
		select {
		case readErr = <-readDone:
		case <-time.After(time.Second):
			// Something outside the group still holds stdout.
			r.Close()
			readErr = <-readDone
		}
		r.Close()
		s.pmu.Lock()
		stopped := s.stop
		s.pmu.Unlock()
		s.mu.Lock()
		switch {
		case stopped:
			s.err = errors.New("stopped")
		case readErr != nil:
			s.err = readErr
		case waitErr != nil:
			s.err = withOutput(fmt.Errorf("%s: %w", path, waitErr), stderr.bytes())
		default:
			s.err = withOutput(fmt.Errorf("%s exited", path), stderr.bytes())
		}
		s.mu.Unlock()
		close(s.done)
	}()
	return s, nil
}

// reap waits for the leader to exit without releasing its pid (WNOWAIT),
// then reaps it under pmu, so that signal never reaches a recycled group
// id (remote/proxycommand.go does the same for ProxyCommand).
func (s *memStream) reap() error {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, s.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	err := s.cmd.Wait()
	s.reaped = true
	streamGroups.remove(s.pid)
	if Tracing() {
		Tracef("stream pid %d reaped: ran %.1f ms, cpu %.1f ms", s.pid, float64(time.Since(s.born).Microseconds())/1000, cpuOf(s.cmd.ProcessState))
	}
	return err
}

// signal sends sig to the stream's process group (a wrapper's children
// too), unless its leader is reaped already.
func (s *memStream) signal(sig syscall.Signal) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.reaped {
		return
	}
	_ = syscall.Kill(-s.pid, sig)
	if memStreamSignalHook != nil {
		memStreamSignalHook(s.pid, sig)
	}
}

// read parses lines until the output ends or a line is not a reading.
func (s *memStream) read(r interface{ Read([]byte) (int, error) }) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		g, err := parseStreamLine(line)
		if err != nil {
			return fmt.Errorf("memory stream line %d: %w", n, err)
		}
		idx, now := g.Index, time.Now()
		s.mu.Lock()
		s.last = now
		if newRound := s.lastIdx < 0 || idx <= s.lastIdx; newRound && s.starts < freshStarts {
			s.starts++
		}
		s.lastIdx = idx
		if s.starts < freshStarts {
			// A line of before the pause: neither a reading nor a round.
			s.round = nil
			s.mu.Unlock()
			continue
		}
		if prev, ok := s.at[idx]; ok && prev.After(s.started) {
			s.gap = now.Sub(prev)
		}
		if Tracing() {
			if prev, ok := s.used[idx]; !ok || prev != g.MemUsedMiB {
				Tracef("stream pid %d: GPU %d %d MiB", s.pid, idx, g.MemUsedMiB)
			}
		}
		s.used[idx], s.at[idx] = g.MemUsedMiB, now
		if k := len(s.round); k > 0 && idx <= s.round[k-1].Index {
			s.full, s.fullAt, s.fullPaced = s.round, s.roundAt, now.Sub(s.roundAt) >= s.period/2
			s.round = nil
			s.rounds++
			if allowed := fastRounds*int(now.Sub(s.started)/s.period) + fastSlack; s.rounds > allowed {
				s.mu.Unlock()
				return fmt.Errorf("memory stream: %d rounds in %s, faster than -lms %d allows: not a reading loop",
					s.rounds, now.Sub(s.started).Round(time.Millisecond), s.period.Milliseconds())
			}
		}
		if len(s.round) == 0 {
			s.roundAt = now
		}
		s.round = append(s.round, g)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		select {
		case s.updates <- struct{}{}:
		default:
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("memory stream line %d: %w", n+1, err)
	}
	return nil
}

// parseStreamLine reads one GPU's line, the columns of a one-shot
// --query-gpu (nounits); a used [N/A] reads as -1.
func parseStreamLine(line string) (GPU, error) {
	if isSMIMessage(line) {
		return GPU{}, fmt.Errorf("%.200q: nvidia-smi message, not a reading", line)
	}
	gpus, err := parseQueryGPU([]byte(line))
	if err != nil {
		return GPU{}, err
	}
	if len(gpus) != 1 {
		return GPU{}, fmt.Errorf("%.200q: not one GPU's line", line)
	}
	return gpus[0], nil
}

// under: every wanted GPU has a reading at or under its threshold.
func (s *memStream) under(want map[int]bool, th map[int]int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(want) == 0 {
		return false
	}
	for i := range want {
		v, ok := s.used[i]
		t, hasT := th[i]
		if !ok || !hasT || v < 0 || v > t {
			return false
		}
	}
	return true
}

// unread: running, not paused, and no line read yet (NVML still starting).
func (s *memStream) unread() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.paused && len(s.at) == 0 && s.rounds == 0 && len(s.round) == 0
}

// stalled: no line for memStreamStall.
func (s *memStream) stalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.last) > memStreamStall
}

// live: the stream has not ended, and printed a line within
// memStreamStall unless paused.
func (s *memStream) live() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	return paused || !s.stalled()
}

// pause stops the stream's process group (SIGSTOP): a stream no call uses
// costs the host nothing while it lingers.
func (s *memStream) pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	s.signal(syscall.SIGSTOP)
}

// resume continues a paused stream (SIGCONT). Readings from before are
// dropped, and lines count again from the second round that starts (see
// paused): what a call reads was taken after this resume. The flood and
// stall clocks start anew.
func (s *memStream) resume() {
	s.mu.Lock()
	if !s.paused {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	s.paused, s.starts, s.lastIdx = false, 0, -1
	// gap stays: the pace before the pause is the best guess of the pace
	// after it (roundWait).
	s.started, s.last, s.rounds = now, now, 0
	s.round, s.full, s.fullAt, s.fullPaced = nil, nil, time.Time{}, false
	clear(s.used)
	clear(s.at)
	s.mu.Unlock()
	s.signal(syscall.SIGCONT)
}

// streamGroups are the process groups of the streams this helper runs:
// its own tool, never a holder a scan reports (a paused one holds its
// devices open all the while). A group id names no other group until its
// leader is reaped, when it leaves the set.
var streamGroups = pgidSet{m: map[int]bool{}}

type pgidSet struct {
	mu sync.Mutex
	m  map[int]bool
}

func (p *pgidSet) add(pgid int)    { p.mu.Lock(); p.m[pgid] = true; p.mu.Unlock() }
func (p *pgidSet) remove(pgid int) { p.mu.Lock(); delete(p.m, pgid); p.mu.Unlock() }
func (p *pgidSet) has(pgid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[pgid]
}

// drainUpdates drops a pending update signal.
func (s *memStream) drainUpdates() {
	select {
	case <-s.updates:
	default:
	}
}

// roundWaitMin is the least roundWait (tests on a loaded machine raise it).
var roundWaitMin = 30 * time.Millisecond

// roundWait is how long a snapshot waits for a whole round that begins
// after its start: the round being printed ends (after a resume, the
// next one too: see paused), a whole one follows, and the next one's
// first line shows it whole: up to four of the stream's actual periods,
// so six periods or four of the latest gaps, bounded by the stall time.
func (s *memStream) roundWait() time.Duration {
	s.mu.Lock()
	gap := s.gap
	s.mu.Unlock()
	return min(max(6*s.period, 4*gap, roundWaitMin), memStreamStall)
}

// reason is why the stream ended; call after done.
func (s *memStream) reason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// close kills the stream, unless it ended by itself, and waits until it
// is reaped.
func (s *memStream) close() {
	s.pmu.Lock()
	s.stop = !s.reaped
	s.pmu.Unlock()
	s.signal(syscall.SIGKILL)
	<-s.done
}

// lockedTail keeps the first max bytes a process writes (its stderr: the
// reason comes first), safe to read while exec's copy still runs.
type lockedTail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *lockedTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil // dropping the rest must not stop the tool
}

func (t *lockedTail) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}

// freshWait is how long a poll waits for a reading newer than its start
// before it runs --query-gpu instead: about two of the stream's actual
// periods (on the H200 the -lms period; on a loaded machine whatever it
// manages), and at least what one nvidia-smi process costs.
func (s *memStream) freshWait() time.Duration {
	s.mu.Lock()
	gap := s.gap
	s.mu.Unlock()
	// Never under what a --query-gpu run costs (20 ms on the H200): the
	// stream's line, even late, comes no later than the one-shot would.
	return min(max(3*s.period, 2*gap, 20*time.Millisecond), memStreamStall)
}

// readingsSince returns the memory of each GPU in idx from lines that came
// after t, waiting up to wait (freshWait when 0) for them; false when they do not come in
// time (the caller runs --query-gpu instead). A line's arrival bounds when
// nvidia-smi read NVML from above only, but the reader is a goroutine of
// its own doing nothing else, and a later line always replaces an earlier
// one, so what is returned is the newest reading the stream has given.
func (s *memStream) readingsSince(ctx context.Context, t time.Time, idx []int, wait time.Duration) (map[int]int64, bool) {
	if wait <= 0 {
		wait = s.freshWait()
	}
	var out map[int]int64
	ok := s.await(ctx, wait, func() bool {
		out = make(map[int]int64, len(idx))
		for _, i := range idx {
			at, seen := s.at[i]
			if !seen || !at.After(t) {
				return false
			}
			out[i] = s.used[i]
		}
		return len(idx) > 0
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// gpusSince returns the GPUs of the first whole, paced round of lines
// that began after t (what a --query-gpu run then would list), waiting up
// to wait; false when none comes in time or the stream ends first.
func (s *memStream) gpusSince(ctx context.Context, t time.Time, wait time.Duration) ([]GPU, bool) {
	var gpus []GPU
	ok := s.await(ctx, wait, func() bool {
		if len(s.full) == 0 || !s.fullPaced || !s.fullAt.After(t) {
			return false
		}
		gpus = slices.Clone(s.full)
		return true
	})
	return gpus, ok
}

// await calls ready under s.mu until it says true, waiting for each new
// line up to wait in all; false when wait, ctx or the stream ends first.
func (s *memStream) await(ctx context.Context, wait time.Duration, ready func() bool) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		ok := ready()
		changed := s.changed
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		case <-s.done:
			return false
		}
	}
}
