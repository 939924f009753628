package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stream is a running `nvidia-smi -lms 10 --query-gpu=index,memory.used`.
type stream struct {
	t     testing.TB
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

func (h *h200) stream(env ...string) *stream {
	h.t.Helper()
	cmd := exec.Command(h.smi, "-lms", "10", "--query-gpu=index,memory.used", noUnits)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	s := &stream{t: h.t, cmd: cmd, lines: bufio.NewScanner(out)}
	h.t.Cleanup(s.stop)
	return s
}

// next is the memory.used of the next reading.
func (s *stream) next() string {
	s.t.Helper()
	if !s.lines.Scan() {
		s.t.Fatalf("the stream ended: %v", s.lines.Err())
	}
	used, ok := strings.CutPrefix(s.lines.Text(), "0, ")
	if !ok {
		s.t.Fatalf("stream line %q", s.lines.Text())
	}
	return used
}

// until reads until a reading says want; every reading before it must be
// one of allowed.
func (s *stream) until(want string, allowed ...string) {
	s.t.Helper()
	for {
		u := s.next()
		if u == want {
			return
		}
		ok := false
		for _, a := range allowed {
			ok = ok || u == a
		}
		if !ok {
			s.t.Fatalf("reading %s while waiting for %s (allowed: %v)", u, want, allowed)
		}
	}
}

func (s *stream) stop() {
	if s.cmd.Process != nil {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) // the group this test started
		s.cmd.Wait()
	}
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGKILL)
	for state(pid) != "gone" && state(pid) != "Z" {
		time.Sleep(2 * time.Millisecond) // bounded by the test's deadline
	}
}

// Holders that die and appear while a stream runs: each reading is one of
// the states the holders passed through, in order, never an older one
// again, and the last agrees with a one-shot by full scan (a whole scan).
func TestStreamHoldersComeAndGo(t *testing.T) {
	for _, delay := range []string{"", "20ms"} {
		h := newH200(t)
		h.cfg.GPUs[0].BaselineMiB = 1
		h.cfg.ReleaseDelay = delay
		h.save()
		a := h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "100")
		h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "200")
		s := h.stream()
		s.until("301")
		waitDead(t, a[0])
		s.until("201", "301")
		h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "50")
		h.start("python3", "--dev", h.dv("nvidia0")) // a monitor: no memory
		s.until("251", "201")
		for i := 0; i < 5; i++ {
			if u := s.next(); u != "251" {
				t.Errorf("delay %q: reading %s after 251", delay, u)
			}
		}
		cmd := exec.Command(h.smi, "--query-gpu=memory.used", noUnits)
		cmd.Env = append(os.Environ(), fullScanEnv+"=1")
		if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "251" {
			t.Errorf("delay %q: the old way says %q (%v), want 251", delay, out, err)
		}
		s.stop()
	}
}

type stateEntry struct {
	LastSeen time.Time `json:"last_seen"`
	Live     bool      `json:"live"`
}

// readState returns the state file's entries by pid, its mtime and inode.
func (h *h200) readState() (map[int]stateEntry, time.Time, uint64) {
	h.t.Helper()
	path := strings.TrimSuffix(h.cfgAt, ".json") + ".state.json"
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		h.t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		h.t.Fatal(err)
	}
	var raw map[string]stateEntry
	if err := json.Unmarshal(b, &raw); err != nil {
		h.t.Fatalf("state %s: %v", b, err)
	}
	m := map[int]stateEntry{}
	for k, e := range raw {
		pid, _ := strconv.Atoi(strings.Split(k, "/")[0])
		m[pid] = e
	}
	return m, time.Unix(st.Mtim.Unix()), st.Ino
}

// The release delay across a stream and the one-shots after it: the stream
// records its sightings by moving the state file's mtime (no rewrite while
// nothing changes), a holder that dies mid-stream stays charged, and one
// that dies after the stream was killed is dated from the stream's last
// reading, as if it had rewritten the file every period.
func TestStreamReleaseDelay(t *testing.T) {
	h := newH200(t)
	h.cfg.ReleaseDelay = "1h"
	h.save()
	a := h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "100")
	b := h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "20")
	s := h.stream()
	s.until("120")
	_, m1, ino1 := h.readState()
	for i := 0; i < 5; i++ {
		s.until("120")
	}
	st, m2, ino2 := h.readState()
	if ino2 != ino1 || !m2.After(m1) || !st[a[0]].Live || !st[b[0]].Live {
		t.Errorf("nothing changed: state inode %d then %d (want the same), mtime %v then %v (want later), entries %+v", ino1, ino2, m1, m2, st)
	}
	waitDead(t, a[0])
	dead := time.Now()       // no reading after this saw it alive
	for i := 0; i < 5; i++ { // dead, still charged
		s.until("120")
	}
	st, m3, ino3 := h.readState()
	if e := st[a[0]]; e.Live || e.LastSeen.After(dead) || e.LastSeen.Before(m2) {
		t.Errorf("a dead holder: %+v, want dead, last seen between %v and its death by %v", e, m2, dead)
	}
	for i := 0; i < 5; i++ {
		s.until("120")
	}
	if _, m4, ino4 := h.readState(); ino4 != ino3 || !m4.After(m3) {
		t.Errorf("after the death was recorded: inode %d then %d, mtime %v then %v", ino3, ino4, m3, m4)
	}
	s.stop()
	_, last, _ := h.readState() // the stream's last reading
	waitDead(t, b[0])
	if out, _ := h.run("--query-gpu=memory.used", noUnits); strings.TrimSpace(out) != "120" {
		t.Errorf("one-shot after the stream: %q, want 120 (both dead within release_delay)", out)
	}
	st, _, _ = h.readState()
	if e := st[b[0]]; e.Live || !e.LastSeen.Equal(last) {
		t.Errorf("the holder that died after the stream: %+v, want last seen at the stream's last reading %v", e, last)
	}
	h.cfg.ReleaseDelay = "1ns"
	h.save()
	if out, _ := h.run("--query-gpu=memory.used", noUnits); strings.TrimSpace(out) != "0" {
		t.Errorf("after release_delay: %q, want 0", out)
	}
}
