package helper

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procReader reads the small per-process files a cached scan checks
// (stat, task lists) with bare syscalls, relative to an open ProcDir and
// into buffers it keeps: on a host of 5,000 processes those checks are
// the whole cost of a warm scan.
type procReader struct {
	dir   int    // ProcDir, O_PATH
	path  []byte // the relative path being built, NUL-terminated
	buf   []byte
	names []byte // fd names of the table being read
	ends  []int  // where each name ends in names
	link  []byte
}

func newProcReader(dir string) (*procReader, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &procReader{dir: fd, path: make([]byte, 0, 64), buf: make([]byte, 4096)}, nil
}

func (r *procReader) close() {
	if r != nil && r.dir >= 0 {
		unix.Close(r.dir)
		r.dir = -1
	}
}

// at builds "pid/name" or "pid/task/tid/name" (tid > 0).
func (r *procReader) at(pid, tid int, name string) {
	p := strconv.AppendInt(r.path[:0], int64(pid), 10)
	if tid > 0 {
		p = append(p, "/task/"...)
		p = strconv.AppendInt(p, int64(tid), 10)
	}
	if name != "" {
		p = append(p, '/')
		p = append(p, name...)
	}
	r.path = append(p, 0)
}

func (r *procReader) open(flags int) (int, error) {
	fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(r.dir), uintptr(unsafe.Pointer(&r.path[0])), uintptr(flags|unix.O_CLOEXEC), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

var errTooLong = errors.New("proc file larger than the read buffer")

// file reads a whole small proc file (one read: seq files hand over a
// record at once); the result is valid until the next call.
func (r *procReader) file(pid, tid int, name string) ([]byte, error) {
	r.at(pid, tid, name)
	fd, err := r.open(unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	n, err := unix.Read(fd, r.buf)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	if n == len(r.buf) {
		return nil, errTooLong
	}
	return r.buf[:n], nil
}

// statBrief is what a cached scan needs of a stat line.
type statBrief struct {
	state   byte
	threads int    // num_threads (field 20)
	start   uint64 // starttime (field 22)
}

// parseStatBrief takes fields 3, 20 and 22 of a stat line, after the
// last ')' (comm may hold anything).
func parseStatBrief(b []byte) (statBrief, bool) {
	var st statBrief
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return st, false
	}
	b = b[i+1:]
	field, got := 2, 0
	for len(b) > 0 {
		for len(b) > 0 && b[0] == ' ' {
			b = b[1:]
		}
		j := bytes.IndexAny(b, " \n")
		if j < 0 {
			j = len(b)
		}
		tok := b[:j]
		b = b[j:]
		if len(tok) == 0 {
			break
		}
		field++
		switch field {
		case 3:
			if len(tok) != 1 {
				return st, false
			}
			st.state = tok[0]
			got++
		case 20:
			n, err := strconv.Atoi(string(tok))
			if err != nil || n < 0 {
				return st, false
			}
			st.threads = n
			got++
		case 22:
			n, err := strconv.ParseUint(string(tok), 10, 64)
			if err != nil {
				return st, false
			}
			st.start = n
			return st, got == 2
		}
		if len(b) > 0 && b[0] == '\n' {
			break
		}
	}
	return st, false
}

// stat reads pid's (or its thread tid's) stat in brief.
func (r *procReader) stat(pid, tid int) (statBrief, bool) {
	b, err := r.file(pid, tid, "stat")
	if err != nil {
		return statBrief{}, false
	}
	return parseStatBrief(b)
}

// tids lists pid's threads, sorted ascending, into out.
func (r *procReader) tids(pid int, out []int) ([]int, bool) {
	r.at(pid, 0, "task")
	out = out[:0]
	err := r.dirents(r.buf, func(name []byte) {
		if tid, err := strconv.Atoi(string(name)); err == nil {
			out = append(out, tid)
		}
	})
	if err != nil {
		return nil, false
	}
	// The kernel lists tasks in pid order; sort in case a kernel does not.
	slices.Sort(out)
	return out, true
}

// dirents calls f with each name in the folder at r.path (built by at),
// skipping "." and ".."; buf holds the getdents batch.
func (r *procReader) dirents(buf []byte, f func(name []byte)) error {
	fd, err := r.open(unix.O_RDONLY | unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		// linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			if reclen < 19 || reclen > len(b) {
				return errors.New("getdents: bad record")
			}
			name := b[19:reclen]
			if k := bytes.IndexByte(name, 0); k >= 0 {
				name = name[:k]
			}
			if !(len(name) == 1 && name[0] == '.' || len(name) == 2 && name[0] == '.' && name[1] == '.') {
				f(name)
			}
			b = b[reclen:]
		}
	}
}

var nvidiaPart = []byte("/nvidia")

// table reads the fd table of pid (tid 0) or of its thread tid as
// devicesIn does: the NVIDIA devices its links name (sorted, once each)
// and how many fds it has.
func (r *procReader) table(s *scanner, pid, tid int) ([]string, int, error) {
	r.at(pid, tid, "fd")
	base := len(r.path) - 1 // without the NUL
	if cap(r.names) == 0 {
		r.names = make([]byte, 0, 16<<10)
		r.link = make([]byte, 4096)
	}
	// The names are kept apart: the links are read once the listing is done.
	r.names, r.ends = r.names[:0], r.ends[:0]
	err := r.dirents(r.buf, func(name []byte) {
		r.names = append(r.names, name...)
		r.ends = append(r.ends, len(r.names))
	})
	if err != nil {
		return nil, 0, err
	}
	var devs []string
	start := 0
	for _, end := range r.ends {
		r.path = append(append(append(r.path[:base], '/'), r.names[start:end]...), 0)
		start = end
		k, _, e := unix.Syscall6(unix.SYS_READLINKAT, uintptr(r.dir), uintptr(unsafe.Pointer(&r.path[0])), uintptr(unsafe.Pointer(&r.link[0])), uintptr(len(r.link)), 0, 0)
		if e != 0 || int(k) >= len(r.link) {
			continue
		}
		link := r.link[:k]
		if !bytes.Contains(link, nvidiaPart) {
			continue
		}
		if rel, ok := s.deviceOf(string(link)); ok && !slices.Contains(devs, rel) {
			devs = append(devs, rel)
		}
	}
	sort.Strings(devs)
	return devs, len(r.ends), nil
}

// threadTable is threadDevices on r: the first of pid's other threads (in
// the order os.ReadDir gives, by name) whose table holds NVIDIA devices.
func (r *procReader) threadTable(s *scanner, pid int) (int, []string) {
	tids, ok := r.tids(pid, nil)
	if !ok {
		return 0, nil
	}
	sort.Slice(tids, func(a, b int) bool { return strconv.Itoa(tids[a]) < strconv.Itoa(tids[b]) })
	for _, tid := range tids {
		if tid == pid {
			continue
		}
		if devs, _, err := r.table(s, pid, tid); err == nil && len(devs) > 0 {
			return tid, devs
		}
	}
	return 0, nil
}
