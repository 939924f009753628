package helper

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memStreamPeriod is the -lms period of the memory stream a wait-free reads
// while it waits; 0 turns the stream off (tests compare with plain polling).
// On the H200 one NVML memory read costs well under a millisecond inside a
// running nvidia-smi, against ~47 ms for a fresh process.
var memStreamPeriod = 10 * time.Millisecond

// memStreamStall: a stream printing nothing this long is stuck (a wedged
// driver call); the wait kills it and polls as before.
var memStreamStall = 2 * time.Second

// memStreamHook, when set by tests, is told each stream's pid once started.
var memStreamHook func(pid int)

// memStream is one long-running `nvidia-smi --query-gpu=index,memory.used
// -lms N`: the real tool prints one line per GPU every N ms until killed
// (no header with noheader), so each line is the GPU's latest reading.
type memStream struct {
	cmd     *exec.Cmd
	updates chan struct{} // one pending signal: a new reading arrived
	done    chan struct{} // closed when the process has ended and been reaped

	mu   sync.Mutex
	used map[int]int64 // latest memory.used by index; -1 unknown
	last time.Time     // when the last line came
	err  error         // why the stream ended (read after done)
	stop bool          // close asked for the end
}

// startMemStream starts the stream in its own process group.
func startMemStream(path string, period time.Duration) (*memStream, error) {
	ms := max(period.Milliseconds(), 1)
	// -lms first: options may come in any order.
	argv := []string{path, "-lms", strconv.FormatInt(ms, 10), "--query-gpu=index,memory.used", csvFormat}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// A grandchild keeping stdout open must not hold the reap up.
	cmd.WaitDelay = time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("memory stream %s: %w", path, err)
	}
	s := &memStream{cmd: cmd, updates: make(chan struct{}, 1), done: make(chan struct{}), used: map[int]int64{}, last: time.Now()}
	stderr := &cappedBuffer{max: 4096, over: func() {}}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("memory stream %s: %w", path, err)
	}
	if memStreamHook != nil {
		memStreamHook(cmd.Process.Pid)
	}
	go func() {
		readErr := s.read(stdout)
		if readErr != nil {
			// A bad line: the stream is of no use any more.
			s.kill()
		}
		waitErr := cmd.Wait()
		s.mu.Lock()
		switch {
		case s.stop:
			s.err = errors.New("stopped")
		case readErr != nil:
			s.err = readErr
		case waitErr != nil:
			s.err = withOutput(fmt.Errorf("%s: %w", path, waitErr), stderr.buf)
		default:
			s.err = withOutput(fmt.Errorf("%s exited", path), stderr.buf)
		}
		s.mu.Unlock()
		close(s.done)
	}()
	return s, nil
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
		idx, used, err := parseMemLine(line)
		if err != nil {
			return fmt.Errorf("memory stream line %d %.200q: %w", n, line, err)
		}
		s.mu.Lock()
		s.used[idx], s.last = used, time.Now()
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

// parseMemLine reads "index, memory.used" (nounits); [N/A] reads as -1.
func parseMemLine(line string) (int, int64, error) {
	if isSMIMessage(line) {
		return 0, 0, errors.New("nvidia-smi message, not a reading")
	}
	f, err := csvFields(line, 2, -1)
	if err != nil || len(f) != 2 {
		return 0, 0, fmt.Errorf("want 2 columns (index, memory.used)")
	}
	idx, err := strconv.Atoi(f[0])
	if err != nil || idx < 0 {
		return 0, 0, fmt.Errorf("index %.40q is not a number", f[0])
	}
	used, err := parseMiB(f[1])
	if err != nil {
		return 0, 0, fmt.Errorf("memory.used: %w", err)
	}
	return idx, used, nil
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

// stalled: no line for memStreamStall.
func (s *memStream) stalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.last) > memStreamStall
}

// reason is why the stream ended; call after done.
func (s *memStream) reason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *memStream) pid() int { return s.cmd.Process.Pid }

// kill ends the whole process group (a wrapper's children too).
func (s *memStream) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
}

// close kills the stream and waits until it is reaped.
func (s *memStream) close() {
	select {
	case <-s.done:
		return // reaped: its pid may belong to someone else now
	default:
	}
	s.mu.Lock()
	s.stop = true
	s.mu.Unlock()
	s.kill()
	<-s.done
}
