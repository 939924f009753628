package helper

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procReader reads the small per-process files a cached scan checks
// (stat, task lists) with bare syscalls, relative to an open ProcDir and
// into buffers it keeps: on a host of 5,000 processes those checks are
// the whole cost of a warm scan.
type procReader struct {
	dir  int    // ProcDir, O_PATH
	path []byte // the relative path being built, NUL-terminated
	buf  []byte
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
	fd, err := r.open(unix.O_RDONLY | unix.O_DIRECTORY)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	out = out[:0]
	for {
		n, err := unix.ReadDirent(fd, r.buf)
		if err != nil {
			return nil, false
		}
		if n == 0 {
			break
		}
		// linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := r.buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			if reclen < 19 || reclen > len(b) {
				return nil, false
			}
			name := b[19:reclen]
			if k := bytes.IndexByte(name, 0); k >= 0 {
				name = name[:k]
			}
			if tid, err := strconv.Atoi(string(name)); err == nil {
				out = append(out, tid)
			}
			b = b[reclen:]
		}
	}
	// The kernel lists tasks in pid order; sort in case a kernel does not.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, true
}
