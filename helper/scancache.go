package helper

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The scan cache keeps, for the life of the helper process, what each
// process's fd table held when it was last read, and reuses it only when
// the table provably cannot have changed since. Why the rule holds:
//
//   - Only a running task changes an fd table: open, dup, close, exec's
//     close-on-exec, SCM_RIGHTS (installed by the receiver's recvmsg),
//     seccomp's ADDFD, userfaultfd and fanotify events, io_uring (its
//     workers and SQPOLL thread are threads of the process) all install
//     in the table of the task that runs. pidfd_getfd copies out of a
//     table, not into it.
//   - Whether any thread of a process ran is told by its process CPU clock
//     (clock_gettime on the pid's CPUCLOCK_SCHED): the ns sum_exec_runtime
//     of every live thread plus that of every thread that exited. It is
//     read before the table, so a change made while the table is read
//     shows at the next check. utime/stime ticks are not used: a short
//     syscall may be charged none.
//   - The clock lags for a thread on a CPU right now (its slice is added at
//     a tick or when it leaves the CPU, and the tick may be late: nohz_full,
//     a preempted vCPU), so no thread may be in state R; states are read
//     before the clock, and a thread not in R has had its running counted.
//     An exiting thread's last slice is not added to the clock: the tids
//     read (with the states) must equal those read with the table; with
//     one thread (num_threads 1) the list is not read: a second thread
//     needs the first to run.
//   - Same pid and same start time (field 22): a new process (pid reused)
//     is always read, and its clock would differ besides.
//   - Processes made with CLONE_FILES share one table: a sharer that ran
//     can change an idle one's table. Every freshly read holder is looked
//     up (kcmp KCMP_FILES) among the reused processes, kept sorted by
//     table in c.idx; a match is read again. A process cached as a holder
//     is always read again (holders are few; that covers a sharer that
//     closed the device), and so is a Z leader (read through its threads)
//     and a process of several threads whose leader's table is empty.
//     A process whose table cannot be read (permission) that ran, or is
//     new, may share a reused one's table as well: it is looked up the
//     same way, and where kcmp is refused too every reused table is read.
//   - fd links are paths: a file renamed into DevDir, or a mount moved,
//     changes what a link reads without the process running. The cache is
//     dropped when DevDir or a folder under its nvidia* entries changes
//     (mtime, ctime, inode) or the helper's mountinfo reads otherwise.
//
// Where the clock, a state or kcmp cannot be had, the table is read as
// without the cache. The cache is used only for the kernel's own /proc of
// the helper's pid namespace (a fake ProcDir's pids are no kernel's). Like
// the uncached scan it looks at fd tables only (not mmaps, not io_uring's
// registered files).

// scanEntry is what one read of a process's fd table found.
type scanEntry struct {
	start   uint64 // start time (field 22) when read
	cpu     int64  // process CPU clock (ns), read before the table
	devs    []string
	task    int   // the thread whose table held devs (zombie leader), else 0
	nfds    int   // fds in the leader's table
	threads int   // num_threads when read
	tids    []int // the threads when read, sorted (several threads only)
	reads   int   // times this process's table was read (tests, benchmark)
	// denied: the table could not be read (permission); the entry only
	// tells whether the process ran since.
	denied bool
}

// scanCache is one config's cache; mu serialises scans that share it.
type scanCache struct {
	mu      sync.Mutex
	entries map[int]*scanEntry
	guard   []dirStamp
	mounts  []byte // the helper's mountinfo at the last scan
	// tableReads counts fd tables read (leader and thread tables).
	tableReads int64
	rd         *procReader
	tidBuf     []int
	// idx: reused entries in the kcmp order of their fd tables.
	idx []idxItem
	// kcmpOff: the kernel has no kcmp; every scan with a fresh holder then
	// reads every table.
	kcmpOff bool
	used    uint64 // scan sequence number of the last use, for eviction
	// dead: evicted; a scan that got it before then reads without it.
	dead bool
	// drops counts the times DevDir or the mounts changed (tests).
	drops int
}

// dirStamp is what a change under DevDir would move.
type dirStamp struct {
	path         string
	dev, ino     uint64
	mtime, ctime syscall.Timespec
}

const maxScanCaches = 8

var scanCaches struct {
	mu  sync.Mutex
	m   map[string]*scanCache
	seq uint64
}

// cacheFor returns the cache for s's ProcDir and DevDir, or nil when
// ProcDir is not the kernel's /proc of this pid namespace.
func cacheFor(s *scanner) *scanCache {
	key, ok := cacheKey(s)
	if !ok {
		return nil
	}
	scanCaches.mu.Lock()
	defer scanCaches.mu.Unlock()
	if scanCaches.m == nil {
		scanCaches.m = map[string]*scanCache{}
	}
	scanCaches.seq++
	c := scanCaches.m[key]
	if c == nil {
		if len(scanCaches.m) >= maxScanCaches {
			evictOldest()
		}
		c = &scanCache{entries: map[int]*scanEntry{}}
		scanCaches.m[key] = c
	}
	c.used = scanCaches.seq
	return c
}

// cacheKey names s's config: ProcDir and every form of DevDir, which is
// all that decides what a table read finds.
func cacheKey(s *scanner) (string, bool) {
	if !realProc(s.proc.dir) {
		return "", false
	}
	abs, err := filepath.Abs(s.proc.dir)
	if err != nil {
		return "", false
	}
	return abs + "\x00" + strings.Join(s.devDirs, "\x00"), true
}

// evictOldest drops the least recently used cache (scanCaches.mu held).
// A scan still running on it finishes on its own copy.
func evictOldest() {
	var oldKey string
	var oldest uint64
	for k, c := range scanCaches.m {
		if oldKey == "" || c.used < oldest {
			oldKey, oldest = k, c.used
		}
	}
	if c := scanCaches.m[oldKey]; c != nil {
		c.mu.Lock()
		c.dead = true
		c.rd.close()
		c.rd = nil
		c.mu.Unlock()
	}
	delete(scanCaches.m, oldKey)
}

// realProc: dir is a procfs whose "self" is this process, so its pids are
// the ones clock_gettime and kcmp take.
func realProc(dir string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || fs.Type != unix.PROC_SUPER_MAGIC {
		return false
	}
	self, err := os.Readlink(filepath.Join(dir, "self"))
	return err == nil && self == strconv.Itoa(os.Getpid())
}

// procCPU is the process CPU clock of pid in ns (all threads, live and
// exited).
func procCPU(pid int) (int64, bool) {
	// CPUCLOCK_SCHED (2) of a process (not a thread) clock: ~pid << 3.
	id := int32(^uint32(pid)<<3 | 2)
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0, false
	}
	return ts.Nano(), true
}

// kcmpFilesType is KCMP_FILES of linux/kcmp.h.
const kcmpFilesType = 2

// stampDirs stats DevDir (each form of it) and every folder below its
// nvidia* entries: a rename into any of them moves its mtime.
func stampDirs(devDirs []string) []dirStamp {
	var out []dirStamp
	var add func(p string, top bool)
	add = func(p string, top bool) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			// Absent is a state too: its appearance moves the parent.
			out = append(out, dirStamp{path: p})
			return
		}
		out = append(out, dirStamp{path: p, dev: st.Dev, ino: st.Ino, mtime: syscall.Timespec(st.Mtim), ctime: syscall.Timespec(st.Ctim)})
		ents, err := os.ReadDir(p)
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.IsDir() && (!top || strings.HasPrefix(e.Name(), "nvidia")) {
				add(filepath.Join(p, e.Name()), false)
			}
		}
	}
	for _, d := range devDirs {
		add(d, true)
	}
	return out
}

// stillSame re-stats the stamped folders (no listing: a new folder moves
// its parent's mtime).
func stillSame(stamps []dirStamp) bool {
	for _, d := range stamps {
		var st unix.Stat_t
		if err := unix.Stat(d.path, &st); err != nil {
			if d.ino != 0 {
				return false
			}
			continue
		}
		if d.ino != st.Ino || d.dev != st.Dev || d.mtime != syscall.Timespec(st.Mtim) || d.ctime != syscall.Timespec(st.Ctim) {
			return false
		}
	}
	return true
}

// mountsChanged reports whether the helper's mount table differs from
// the last scan's. It compares the whole of /proc/self/mountinfo (every
// mount has a line with a unique id): polling it for POLLPRI was tried
// and missed mounts made by the helper's own tests.
func (c *scanCache) mountsChanged() bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		c.mounts = nil
		return true
	}
	same := c.mounts != nil && bytes.Equal(b, c.mounts)
	c.mounts = b
	return !same
}

// idle reports whether old still describes pid's table: same process,
// the same threads, none running now and none ran since old was read.
// Otherwise it returns the parts of a fresh entry read before the table:
// start time, threads and clock (cpu -1 where one cannot be had).
func (c *scanCache) idle(pid int, old *scanEntry) (fresh scanEntry, ok bool) {
	fresh = scanEntry{cpu: -1, reads: 1}
	st, stOK := c.rd.stat(pid, 0)
	if !stOK {
		return fresh, false
	}
	fresh.start, fresh.threads = st.start, st.threads
	same := old != nil && old.start == st.start
	if same {
		fresh.reads = old.reads + 1
	}
	// A Z or X leader is read through its threads each time (few).
	if st.state == 'Z' || st.state == 'X' || st.threads < 1 {
		return fresh, false
	}
	// Thread states and tids are read before the clock (see above). A
	// thread that exited took its last slice out of the clock: its tid is
	// gone from the list. The list is read only where that is cheaper than
	// the table.
	same = same && len(old.devs) == 0 && st.state != 'R' && old.threads == st.threads
	switch {
	case st.threads == 1:
	case old == nil || st.threads <= max(old.nfds, 1):
		tids, asleep := c.threadsAsleep(pid)
		if tids == nil {
			return fresh, false
		}
		if same = same && asleep && slices.Equal(tids, old.tids); same {
			fresh.tids = old.tids // never changed once stored
		} else {
			fresh.tids = slices.Clone(tids)
		}
	default:
		return fresh, false
	}
	cpu, cpuOK := procCPU(pid)
	if !cpuOK || cpu <= 0 {
		return fresh, false
	}
	if same && cpu == old.cpu {
		return fresh, true
	}
	fresh.cpu = cpu
	return fresh, false
}

// threadsAsleep lists pid's tids (sorted; valid until the next call) and
// whether none is in state R; nil when the list or a state cannot be read.
func (c *scanCache) threadsAsleep(pid int) ([]int, bool) {
	tids, ok := c.rd.tids(pid, c.tidBuf)
	if !ok {
		return nil, false
	}
	c.tidBuf = tids
	asleep := true
	for _, tid := range tids {
		st, ok := c.rd.stat(pid, tid)
		if !ok {
			return nil, false
		}
		asleep = asleep && st.state != 'R'
	}
	return tids, asleep
}

// readTable reads pid's fd table into e as scanFDsUncached does; counted.
func (s *scanner) readTable(c *scanCache, pid int, e *scanEntry) error {
	c.tableReads++
	devs, n, err := c.rd.table(s, pid, 0)
	if err != nil {
		return err
	}
	e.devs, e.nfds, e.task = devs, n, 0
	if n == 0 {
		c.tableReads++
		e.task, e.devs = c.rd.threadTable(s, pid)
	}
	return nil
}

// scanFDs is scanFDsUncached with the cache (see the top of this file).
func (s *scanner) scanFDs() ([]rawHolder, int, error) {
	c := cacheFor(s)
	if c == nil {
		return s.scanFDsUncached()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return s.scanFDsUncached()
	}
	if c.rd == nil {
		rd, err := newProcReader(s.proc.dir)
		if err != nil {
			return s.scanFDsUncached()
		}
		c.rd = rd
	}
	pids, err := s.proc.pids()
	if err != nil {
		return nil, 0, err
	}
	// Both checks run every scan (each resets what it watches).
	mounts := c.mountsChanged()
	if same := c.guard != nil && stillSame(c.guard); mounts || !same {
		if c.guard != nil {
			c.drops++
		}
		c.entries = map[int]*scanEntry{}
		c.guard = stampDirs(s.devDirs)
	}
	next := make(map[int]*scanEntry, len(pids))
	var reused, fresh []int
	denied := 0
	for _, pid := range pids {
		old := c.entries[pid]
		fe, ok := c.idle(pid, old)
		if ok {
			next[pid] = old
			if old.denied {
				denied++
			} else {
				reused = append(reused, pid)
			}
			continue
		}
		e := &fe
		if err := s.readTable(c, pid, e); err != nil {
			if errors.Is(err, os.ErrPermission) {
				denied++
				// Its table is unknown and may be a reused one's: looked
				// up like a fresh holder's. Kept while it does not run.
				fresh = append(fresh, pid)
				if e.cpu > 0 {
					e.denied, e.nfds = true, math.MaxInt32
					next[pid] = e
				}
			}
			continue
		}
		next[pid] = e
		if len(e.devs) > 0 {
			fresh = append(fresh, pid)
		}
	}
	if len(fresh) > 0 && len(reused) > 0 {
		s.rereadSharers(c, next, fresh, reused)
	}
	c.entries = next
	var holders []rawHolder
	for _, pid := range pids {
		if e := next[pid]; e != nil && len(e.devs) > 0 {
			holders = append(holders, rawHolder{pid: pid, devices: e.devs, task: e.task})
		}
	}
	return holders, denied, nil
}

// idxItem is a reused entry in the kcmp order of its fd table.
type idxItem struct {
	pid int
	e   *scanEntry
}

// kcmpOrder compares the fd tables of pids a and b in the kernel's order
// (kcmp returns 0 equal, 1 less, 2 greater).
func kcmpOrder(a, b int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpFilesType, 0, 0, 0)
	switch {
	case e != 0:
		return 0, e
	case r == 1:
		return -1, nil
	case r == 2:
		return 1, nil
	case r == 0:
		return 0, nil
	}
	return 0, fmt.Errorf("kcmp %d %d: unexpected %d", a, b, r)
}

// errIdx: a kcmp failed in a way that leaves sharers unknown.
var errIdx = errors.New("fd tables cannot be compared")

// search finds where pid's table sits in c.idx: the first index whose
// table is not less than pid's. A member that vanished or cannot be
// compared is taken out (returned in drop); errIdx when pid itself cannot
// be compared.
func (c *scanCache) search(pid int) (at int, drop []int, err error) {
	if !comparable(pid) {
		return 0, nil, errIdx
	}
	lo, hi := 0, len(c.idx)
	for lo < hi {
		mid := (lo + hi) / 2
		o, err := kcmpOrder(c.idx[mid].pid, pid)
		if err != nil {
			if !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
				return 0, drop, err
			}
			if !comparable(pid) {
				return 0, drop, errIdx
			}
			// Deleting keeps the order; search the shorter slice again.
			drop = append(drop, c.idx[mid].pid)
			c.idx = slices.Delete(c.idx, mid, mid+1)
			lo, hi = 0, len(c.idx)
			continue
		}
		if o < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, drop, nil
}

// comparable reports whether kcmp can look at pid's table at all.
func comparable(pid int) bool {
	_, err := kcmpOrder(pid, pid)
	return err == nil
}

// rereadSharers reads again every reused process that shares its fd table
// with a freshly read holder (processes made with CLONE_FILES). Reused
// entries are kept in c.idx, sorted by table (kcmp order): their tables
// cannot have moved (exec and unshare run in the process), so each scan
// only places the newly reused ones and looks up each fresh holder.
func (s *scanner) rereadSharers(c *scanCache, next map[int]*scanEntry, fresh, reused []int) {
	again, err := c.sharers(next, fresh, reused)
	if err != nil {
		// Unknown sharers: every reused table is read. The index stays
		// good when only a holder could not be compared (errIdx).
		again = reused
		if !errors.Is(err, errIdx) {
			c.idx, c.kcmpOff = nil, true
		}
	}
	done := make(map[int]bool, len(again))
	for _, pid := range again {
		old := next[pid]
		if old == nil || done[pid] {
			continue
		}
		done[pid] = true
		delete(next, pid)
		e := &scanEntry{start: old.start, cpu: -1, threads: old.threads, tids: old.tids, reads: old.reads + 1}
		if cpu, ok := procCPU(pid); ok {
			e.cpu = cpu
		}
		if err := s.readTable(c, pid, e); err == nil {
			next[pid] = e
		}
	}
}

// sharers brings c.idx up to date with this scan's reused entries and
// returns those whose table is a fresh holder's.
func (c *scanCache) sharers(next map[int]*scanEntry, fresh, reused []int) ([]int, error) {
	if c.kcmpOff {
		return nil, errors.New("no kcmp")
	}
	// Keep the members still reused as the same entry.
	in := map[int]bool{}
	c.idx = slices.DeleteFunc(c.idx, func(it idxItem) bool {
		keep := next[it.pid] == it.e
		in[it.pid] = keep
		return !keep
	})
	var again []int
	dropped := func(pids []int) {
		// Vanished or not comparable: read them again (if still there).
		again = append(again, pids...)
	}
	for _, pid := range reused {
		if in[pid] {
			continue
		}
		at, drop, err := c.search(pid)
		dropped(drop)
		if err != nil {
			if errors.Is(err, errIdx) {
				// This one cannot be placed: read it again.
				again = append(again, pid)
				continue
			}
			return nil, err
		}
		c.idx = slices.Insert(c.idx, at, idxItem{pid: pid, e: next[pid]})
	}
	for _, h := range fresh {
		self := h
		if e := next[h]; e != nil && e.task > 0 {
			self = e.task
		}
		at, drop, err := c.search(self)
		dropped(drop)
		if err != nil {
			return nil, err
		}
		for i := at; i < len(c.idx); i++ {
			o, err := kcmpOrder(c.idx[i].pid, self)
			if err != nil {
				if !comparable(self) {
					return nil, errIdx
				}
				// The member failed: read it again, look further.
				again = append(again, c.idx[i].pid)
				continue
			}
			if o != 0 {
				break
			}
			again = append(again, c.idx[i].pid)
		}
	}
	return again, nil
}
