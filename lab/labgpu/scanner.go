package labgpu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpush/gpush/lab/procstat"
)

// Scanner is ScanClaims for a process that reads the same /proc again and
// again (fake-nvidia-smi -lms): it remembers every process it examined and,
// per Scan, lists procDir (readdir only) and examines only what may have
// changed. It makes raw system calls where os makes more (os.ReadFile's
// fstat, fcntl and poller registration cost more than the read itself on
// procfs); its first Scan reads two more things per process than
// ScanClaimsOnce (the fd count and exe that later Scans compare).
//
// What marks a process for a new examination:
//   - a new incarnation: the inode procfs gives /proc/PID in the listing
//     is new (a reused pid gets a new one);
//   - a change of its fd count (the size of /proc/PID/fd since Linux 6.2,
//     one stat; before, a listing): an open, a close, an exit (the fds
//     close before the zombie), an exec (close-on-exec);
//   - for a claimant: a device fd that no longer names its device, or a
//     cmdline that differs (an exec that keeps the fd count);
//   - for any other process: a new /proc/PID/exe (an exec of another
//     binary).
//
// Not seen until something above changes: a process that was no claimant
// and execs the same binary with the same fd count or rewrites its argv in
// place, or one that swaps an fd for a device fd within a period (close,
// then open of the device at the same count).
type Scanner struct {
	procDir, devDir string
	once            bool // ScanClaimsOnce: nothing is read for later scans
	sizeIsCount     bool // an fd folder's size is its fd count (Linux 6.2+)
	known           map[int]*tracked
	gen             uint32
	buf, lnk        []byte // reused read buffers
	dents, sub      []byte // getdents buffers of /proc and of one process's folders
	out             []Proc
	examined        int // examinations so far (the tests check the cache works)
}

type tracked struct {
	ino   uint64
	gen   uint32
	nfds  int64  // size of fdDir at the last examination
	fdDir string // the fd folder the process's files are read from
	exe   string // non-claimants: /proc/PID/exe at the last examination
	// claimants only:
	claim  bool
	cmd    []byte   // cmdline at the last examination
	devFDs []string // fd names under fdDir that name a device
	devOf  []string // the device each names
	proc   Proc
	// Kept open between scans (-1: none, read by path): procfs answers a
	// read or stat of an open file from the task's state at that moment,
	// without a path walk through /proc/PID again; a dead task's give an
	// error, a reused pid's belong to the dead one.
	cmdFD, dirFD int
}

func (t *tracked) close() {
	if t.cmdFD >= 0 {
		unix.Close(t.cmdFD)
	}
	if t.dirFD >= 0 {
		unix.Close(t.dirFD)
	}
	t.cmdFD, t.dirFD = -1, -1
}

// NewScanner returns a Scanner of the processes in procDir that claim
// memory on the files under devDir.
func NewScanner(procDir, devDir string) (*Scanner, error) {
	abs, err := filepath.Abs(devDir)
	if err != nil {
		return nil, fmt.Errorf("scanner: dev dir %s: %w", devDir, err)
	}
	var st unix.Stat_t
	// Any process has an fd open while it stats: a size of 0 is a kernel
	// that does not count.
	sizeIsCount := unix.Stat("/proc/self/fd", &st) == nil && st.Size > 0
	return &Scanner{procDir: procDir, devDir: abs, known: map[int]*tracked{}, sizeIsCount: sizeIsCount,
		buf: make([]byte, 4096), lnk: make([]byte, 512),
		dents: make([]byte, 32<<10), sub: make([]byte, 8<<10)}, nil
}

// Close releases the files the Scanner keeps open (two per claimant).
func (s *Scanner) Close() {
	for pid, t := range s.known {
		t.close()
		delete(s.known, pid)
	}
}

// ScanClaimsOnce is ScanClaims with a Scanner's raw calls, for a process
// that scans once: it reads nothing only later scans would need.
func ScanClaimsOnce(procDir, devDir string) ([]Proc, error) {
	s, err := NewScanner(procDir, devDir)
	if err != nil {
		return nil, err
	}
	s.once = true
	return s.Scan()
}

// Scan returns what ScanClaims would return now (in /proc's order). The
// slice and the Procs' Devices maps are reused by the next Scan: callers
// must not keep or change them.
func (s *Scanner) Scan() ([]Proc, error) {
	s.gen++
	s.out = s.out[:0]
	err := list(s.procDir, s.dents, func(pid int, ino uint64) {
		t := s.known[pid]
		if t == nil || t.ino != ino || s.changed(pid, t) {
			if t != nil {
				t.close()
			}
			t = s.examine(pid, ino)
			if !s.once {
				s.known[pid] = t
			}
		}
		t.gen = s.gen
		if t.claim {
			s.out = append(s.out, t.proc)
		}
	})
	if err != nil {
		return nil, err
	}
	for pid, t := range s.known {
		if t.gen != s.gen {
			t.close()
			delete(s.known, pid)
		}
	}
	return s.out, nil
}

// list calls fn for every numeric entry of dir (pids, fds, tids) with its
// inode, reading the directory through buf.
func list(dir string, buf []byte, fn func(n int, ino uint64)) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("scan %s: %w", dir, err)
	}
	defer unix.Close(fd)
	return listFD(fd, dir, buf, fn)
}

// listFD is list of the folder fd is open on (named dir in errors).
func listFD(fd int, dir string, buf []byte, fn func(n int, ino uint64)) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("scan %s: %w", dir, err)
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for off := 0; off+19 <= n; {
			ino := binary.NativeEndian.Uint64(buf[off:])
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return fmt.Errorf("scan %s: bad directory entry", dir)
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if pid, ok := atoi(name); ok {
				fn(pid, ino)
			}
			off += reclen
		}
	}
}

// atoi parses a decimal name without allocating.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// changed reports whether a known process needs a new examination.
func (s *Scanner) changed(pid int, t *tracked) bool {
	if !t.claim {
		if n, ok := s.fdCount(t.fdDir); !ok || n != t.nfds {
			return true
		}
		return s.readlink(s.pidDir(pid)+"/exe") != t.exe
	}
	if t.dirFD < 0 || t.cmdFD < 0 { // not kept open: by path
		if n, ok := s.fdCount(t.fdDir); !ok || n != t.nfds {
			return true
		}
		cmd, err := s.read(s.pidDir(pid) + "/cmdline")
		if err != nil || !bytes.Equal(cmd, t.cmd) {
			return true
		}
		for i, fd := range t.devFDs {
			if l, ok := strings.CutPrefix(s.readlink(t.fdDir+"/"+fd), s.devDir+"/"); !ok || l != t.devOf[i] {
				return true
			}
		}
		return false
	}
	if s.sizeIsCount {
		var st unix.Stat_t
		if unix.Fstat(t.dirFD, &st) != nil || st.Size != t.nfds {
			return true
		}
	} else if n, ok := s.fdCount(t.fdDir); !ok || n != t.nfds {
		return true
	}
	cmd, err := s.pread(t.cmdFD)
	if err != nil || !bytes.Equal(cmd, t.cmd) {
		return true
	}
	for i, fd := range t.devFDs {
		if !s.names(s.readlinkAt(t.dirFD, fd), t.devOf[i]) {
			return true
		}
	}
	return false
}

// names reports whether link is devDir/dev (without allocating).
func (s *Scanner) names(link []byte, dev string) bool {
	d := len(s.devDir)
	return len(link) == d+1+len(dev) && string(link[:d]) == s.devDir && link[d] == '/' && string(link[d+1:]) == dev
}

func (s *Scanner) pidDir(pid int) string { return s.procDir + "/" + strconv.Itoa(pid) }

// examine reads one process as scan(claimsOnly) does.
func (s *Scanner) examine(pid int, ino uint64) *tracked {
	s.examined++
	base := s.pidDir(pid)
	t := &tracked{ino: ino, fdDir: base + "/fd", cmdFD: -1, dirFD: -1}
	if !s.once {
		// Read before deciding: a change after this examination
		// changes what changed compares against.
		t.nfds, _ = s.fdCount(t.fdDir)
		t.exe = s.readlink(base + "/exe")
	}
	cmd, err := s.read(base + "/cmdline")
	if err != nil || len(cmd) > 0 && !claims(cmd) {
		return t
	}
	cmd = bytes.Clone(cmd) // s.buf is read into again below
	devs, fds, nfds := s.devsUnder(t.fdDir)
	// A leader that exited keeps no fds; its live threads hold them (see
	// scan), and the first one that holds a device is read instead.
	live := base
	if nfds == 0 {
		var tids []int
		_ = list(base+"/task", s.sub, func(tid int, _ uint64) { tids = append(tids, tid) })
		for _, tid := range tids {
			dir := base + "/task/" + strconv.Itoa(tid)
			n, _ := s.fdCount(dir + "/fd")
			if d, f, _ := s.devsUnder(dir + "/fd"); len(d) > 0 {
				devs, fds, live = d, f, dir
				t.fdDir, t.nfds = dir+"/fd", n
				break
			}
		}
	}
	if len(devs) == 0 {
		return t
	}
	stat, err := procstat.ReadIn(s.procDir, pid)
	if err != nil || stat.State == 'Z' && live == base {
		return t
	}
	name := stat.Comm
	argvOf := cmd
	if live != base {
		if argvOf, err = s.read(live + "/cmdline"); err != nil {
			argvOf = nil
		}
	}
	argv := strings.Split(strings.TrimRight(string(argvOf), "\x00"), "\x00")
	if len(argv) > 0 && argv[0] != "" {
		name = argv[0]
	}
	p := Proc{PID: pid, StartTime: stat.StartTime, Name: name, Devices: devs, MemMiB: MemMiB(argv)}
	p.KeepsOf, p.KeepsMiB = KeepsMemOf(argv)
	if p.MemMiB == 0 && p.KeepsMiB == 0 {
		return t
	}
	// changed compares the leader's cmdline, read above.
	t.claim, t.cmd, t.proc = true, cmd, p
	for fd, dev := range fds {
		t.devFDs, t.devOf = append(t.devFDs, fd), append(t.devOf, dev)
	}
	if !s.once {
		// Opened after the examination: if they are another process's
		// already, its cmdline or fds differ at the next scan. Out of
		// fds, this process is read by path.
		var err1, err2 error
		t.cmdFD, err1 = unix.Open(base+"/cmdline", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		t.dirFD, err2 = unix.Open(t.fdDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err1 != nil || err2 != nil {
			if err1 == nil {
				unix.Close(t.cmdFD)
			}
			if err2 == nil {
				unix.Close(t.dirFD)
			}
			t.cmdFD, t.dirFD = -1, -1
		}
	}
	return t
}

// devsUnder is devsUnder with raw calls: the devices the fd links of fdDir
// name (relative to the dev dir), the fds that name them, and how many fds
// there are.
func (s *Scanner) devsUnder(fdDir string) (map[string]bool, map[string]string, int) {
	if s.sizeIsCount {
		if n, ok := s.fdCount(fdDir); ok && n == 0 {
			return map[string]bool{}, nil, 0 // a kernel thread, a zombie: one stat, no listing
		}
	}
	dfd, err := unix.Open(fdDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, 0
	}
	defer unix.Close(dfd)
	var names []int
	if err := listFD(dfd, fdDir, s.sub, func(fd int, _ uint64) { names = append(names, fd) }); err != nil {
		return nil, nil, 0
	}
	devs, fds := map[string]bool{}, map[string]string{}
	d := len(s.devDir)
	for _, n := range names {
		// Relative to the open folder: no path walk through /proc per fd.
		fd := strconv.Itoa(n)
		l := s.readlinkAt(dfd, fd)
		if len(l) > d+1 && string(l[:d]) == s.devDir && l[d] == '/' {
			rel := string(l[d+1:])
			devs[rel] = true
			fds[fd] = rel
		}
	}
	return devs, fds, len(names)
}

// read reads a whole small file into the scanner's buffer (valid until
// the next read).
func (s *Scanner) read(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(s.buf) {
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		m, err := unix.Read(fd, s.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return s.buf[:n], nil
		}
		n += m
	}
}

// pread reads a whole small file from its start through an open fd into
// the scanner's buffer (valid until the next read).
func (s *Scanner) pread(fd int) ([]byte, error) {
	n := 0
	for {
		if n == len(s.buf) {
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		m, err := unix.Pread(fd, s.buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return s.buf[:n], nil
		}
		n += m
	}
}

// readlinkAt is readlink of name in the folder dirFD is open on, into
// the scanner's buffer (valid until the next readlink); nil when it cannot
// be read.
func (s *Scanner) readlinkAt(dirFD int, name string) []byte {
	for {
		n, err := unix.Readlinkat(dirFD, name, s.lnk)
		if err != nil {
			return nil
		}
		if n < len(s.lnk) {
			return s.lnk[:n]
		}
		s.lnk = make([]byte, 2*len(s.lnk))
	}
}

// readlink returns the link's target, or "" when it cannot be read.
func (s *Scanner) readlink(path string) string {
	for {
		n, err := unix.Readlink(path, s.lnk)
		if err != nil {
			return ""
		}
		if n < len(s.lnk) {
			return string(s.lnk[:n])
		}
		s.lnk = make([]byte, 2*len(s.lnk))
	}
}

// fdCount is the number of open fds of an fd folder.
func (s *Scanner) fdCount(fdDir string) (int64, bool) {
	if !s.sizeIsCount {
		n := int64(0)
		err := list(fdDir, s.sub, func(int, uint64) { n++ })
		return n, err == nil
	}
	var st unix.Stat_t
	if err := unix.Stat(fdDir, &st); err != nil {
		return 0, false
	}
	return st.Size, true
}
