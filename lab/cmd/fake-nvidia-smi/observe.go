package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
	"golang.org/x/sys/unix"

	"github.com/gpush/gpush/lab/procstat"
)

// fullScanEnv makes every reading a full scan: a whole ScanClaims and a
// rewrite of the state file, to measure the incremental way against and
// as the tests' reference.
const fullScanEnv = "FAKE_NVIDIA_SMI_FULL_SCAN"

// procDirEnv names the /proc to read (default /proc): the benchmark's
// holders live in a PID namespace of their own, as an isolated lab host's.
const procDirEnv = "FAKE_NVIDIA_SMI_PROC"

type app struct {
	gpu  int // position in cfg.GPUs
	proc labgpu.Proc
}

type observed struct {
	used map[int]int64 // by GPU index
	apps []app
}

// seen is one holder in the state file. A Live one was seen alive at the
// file's mtime: an observer that finds the file's live holders unchanged
// only moves the mtime (one utimensat, no rewrite). A dead one was last
// seen alive at LastSeen, and its memory stays charged release_delay
// after that.
type seen struct {
	LastSeen time.Time `json:"last_seen,omitzero"`
	Live     bool      `json:"live,omitempty"`
	GPUs     []int     `json:"gpus"` // indices
	MemMiB   int64     `json:"mem_mib"`
}

// observer is what the readings of one run share.
type observer struct {
	cfg       *labgpu.Config
	procDir   string
	delay     time.Duration
	full      bool
	once      bool // one reading: nothing kept for the next
	scanner   *labgpu.Scanner
	statePath string
	lock      int             // the state lock's fd, -1 until opened
	last      []byte          // the state file as this process last read or wrote it
	state     map[string]seen // last, parsed
	buf       []byte
}

func newObserver(cfgPath string, cfg *labgpu.Config, full, once bool) (*observer, error) {
	delay, _ := cfg.Delay()
	ob := &observer{cfg: cfg, procDir: "/proc", delay: delay, full: full, once: once, lock: -1,
		statePath: strings.TrimSuffix(cfgPath, ".json") + ".state.json"}
	if d := os.Getenv(procDirEnv); d != "" {
		ob.procDir = d
	}
	if !full && !once {
		s, err := labgpu.NewScanner(ob.procDir, cfg.DevDir)
		if err != nil {
			return nil, err
		}
		ob.scanner = s
	}
	return ob, nil
}

// close releases what the observer keeps open (a run's end does too).
func (ob *observer) close() {
	if ob.scanner != nil {
		ob.scanner.Close()
	}
	if ob.lock >= 0 {
		unix.Close(ob.lock)
		ob.lock = -1
	}
}

// observe reads the live holders and settles them with the state file.
func (ob *observer) observe() (*observed, error) {
	var procs []labgpu.Proc
	var err error
	switch {
	case ob.full:
		procs, err = labgpu.ScanClaims(ob.procDir, ob.cfg.DevDir)
	case ob.once:
		procs, err = labgpu.ScanClaimsOnce(ob.procDir, ob.cfg.DevDir)
	default:
		procs, err = ob.scanner.Scan()
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(procs, func(a, b labgpu.Proc) int { return a.PID - b.PID })
	o := &observed{used: make(map[int]int64, len(ob.cfg.GPUs))}
	for _, g := range ob.cfg.GPUs {
		o.used[g.Index] = g.BaselineMiB
	}
	var live map[string]seen
	if ob.delay > 0 {
		live = make(map[string]seen, len(procs))
	}
	ghosts := map[[2]int]bool{} // (dead pid, GPU position) already charged
	for _, p := range procs {
		var held []int
		for gi, g := range ob.cfg.GPUs {
			if !p.Devices[g.Dev()] {
				continue
			}
			held = append(held, g.Index)
			o.used[g.Index] += p.MemMiB
			// NVML lists only processes with a context on the GPU: a
			// monitor holding the device file is not a compute app.
			if p.MemMiB > 0 {
				o.apps = append(o.apps, app{gpu: gi, proc: p})
			}
			// A keeper's dead parent stays listed, its memory charged to
			// its pid, as the driver does for a context a forked child
			// inherited.
			if p.KeepsOf > 0 && p.KeepsMiB > 0 && !ghosts[[2]int{p.KeepsOf, gi}] && !running(ob.procDir, p.KeepsOf) {
				ghosts[[2]int{p.KeepsOf, gi}] = true
				o.used[g.Index] += p.KeepsMiB
				o.apps = append(o.apps, app{gpu: gi, proc: labgpu.Proc{PID: p.KeepsOf, Name: p.Name, MemMiB: p.KeepsMiB}})
			}
		}
		if live != nil && len(held) > 0 && p.MemMiB > 0 {
			live[strconv.Itoa(p.PID)+"/"+strconv.FormatUint(p.StartTime, 10)] = seen{GPUs: held, MemMiB: p.MemMiB}
		}
	}
	if ob.delay == 0 {
		return o, nil
	}
	if err := ob.settle(o, live); err != nil {
		return nil, err
	}
	return o, nil
}

// settle charges the holders that died less than release_delay ago and
// records the live ones, under a lock so that concurrent runs do not lose
// each other's sightings. It rewrites the state file only when what it
// records changed.
func (ob *observer) settle(o *observed, live map[string]seen) error {
	if ob.lock < 0 {
		fd, err := unix.Open(ob.statePath+".lock", unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("state lock %s.lock: %w", ob.statePath, err)
		}
		ob.lock = fd
	}
	if err := flock(ob.lock, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s.lock: %w", ob.statePath, err)
	}
	defer flock(ob.lock, unix.LOCK_UN)
	b, mtime, exists := ob.readState()
	now := time.Now()
	state := ob.state
	if !exists || !bytes.Equal(b, ob.last) {
		state = map[string]seen{}
		_ = json.Unmarshal(b, &state) // a torn state only loses delays
		ob.last, ob.state = append(ob.last[:0], b...), state
	}
	dirty := ob.full || !exists
	next := make(map[string]seen, len(state)+len(live))
	for k, s := range state {
		if l, ok := live[k]; ok {
			if !s.Live || s.MemMiB != l.MemMiB || !slices.Equal(s.GPUs, l.GPUs) {
				dirty = true
			}
			continue
		}
		if s.Live { // alive at the last sighting, dead now
			s.Live, s.LastSeen, dirty = false, mtime, true
		}
		if now.Sub(s.LastSeen) >= ob.delay {
			dirty = true
			continue
		}
		// Died recently: the driver has not released its memory yet.
		for _, gi := range s.GPUs {
			if _, ok := o.used[gi]; ok {
				o.used[gi] += s.MemMiB
			}
		}
		next[k] = s
	}
	for k, l := range live {
		if _, ok := state[k]; !ok {
			dirty = true
		}
		l.Live = true
		next[k] = l
	}
	ts := []unix.Timespec{unix.NsecToTimespec(now.UnixNano()), unix.NsecToTimespec(now.UnixNano())}
	if !dirty {
		if err := unix.UtimesNano(ob.statePath, ts); err != nil {
			return fmt.Errorf("state %s: %w", ob.statePath, err)
		}
		return nil
	}
	nb, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("state %s: %w", ob.statePath, err)
	}
	tmp := ob.statePath + ".tmp"
	if err := writeFile(tmp, nb); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := unix.UtimesNano(tmp, ts); err != nil {
		return fmt.Errorf("write state %s: %w", tmp, err)
	}
	if err := unix.Rename(tmp, ob.statePath); err != nil {
		return fmt.Errorf("write state %s: %w", ob.statePath, err)
	}
	ob.last, ob.state = append(ob.last[:0], nb...), next
	return nil
}

// readState reads the state file and its mtime; exists is false when
// there is none.
func (ob *observer) readState() (b []byte, mtime time.Time, exists bool) {
	fd, err := unix.Open(ob.statePath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, time.Time{}, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, time.Time{}, false
	}
	if cap(ob.buf) < int(st.Size)+1 {
		ob.buf = make([]byte, int(st.Size)+512)
	}
	buf, n := ob.buf[:cap(ob.buf)], 0
	for {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m == 0 {
			break
		}
		if n += m; n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
			ob.buf = buf
		}
	}
	return buf[:n], time.Unix(st.Mtim.Unix()), true
}

func writeFile(path string, b []byte) error {
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("%s: %w", path, err)
		}
		b = b[n:]
	}
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func flock(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); err != unix.EINTR {
			return err
		}
	}
}

// running reports whether pid is a live process (a zombie has died).
func running(procDir string, pid int) bool {
	st, err := procstat.ReadIn(procDir, pid)
	return err == nil && !st.Exited()
}
