// Package procstat is the lab's one reader of /proc/PID/stat: the state,
// parent and start time of a process (proc(5)).
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// Stat is what the lab reads of a /proc/PID/stat.
type Stat struct {
	// Comm is the name between the parentheses (it may hold spaces and
	// parentheses itself).
	Comm string
	// State is field 3: R, S, D, Z (a zombie), X (dead), ...
	State byte
	// PPID is field 4.
	PPID int
	// StartTime is field 22, in clock ticks since boot: with the pid, it
	// names a process (a reused pid starts later).
	StartTime uint64
}

// Exited reports whether the process has exited: a zombie (or a dead
// task) has let go of everything; nobody may reap it when its parent is
// gone. The files of a thread-group leader that is a zombie may still be
// held by its other threads, until they exit too: a pidfd reads as ready
// only then.
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// Read reads /proc/PID/stat.
func Read(pid int) (Stat, error) { return ReadIn("/proc", pid) }

// ReadIn reads PID/stat under procDir (a proc mount, or a copy of one),
// allocating nothing but the Comm.
func ReadIn(procDir string, pid int) (Stat, error) {
	path := procDir + "/" + strconv.Itoa(pid) + "/stat"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stat{}, &pathError{path, err}
	}
	defer unix.Close(fd)
	// Fields are at most 20 digits, 52 of them, and the comm 64 bytes:
	// the whole file fits.
	var buf [2048]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Stat{}, &pathError{path, err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	s, err := Parse(buf[:n])
	if err != nil {
		return Stat{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// ErrShort is the error for a stat that lacks the fields read.
var ErrShort = errors.New("not a /proc/PID/stat (too few fields)")

// Parse reads the content of a /proc/PID/stat.
func Parse(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, ErrShort
	}
	var s Stat
	rest := b[end+1:]
	// Fields from 3 (state) on, separated by single spaces.
	for i := 3; i <= 22; i++ {
		f := field(&rest)
		if f == nil {
			return Stat{}, ErrShort
		}
		switch i {
		case 3:
			if len(f) != 1 {
				return Stat{}, fmt.Errorf("state %q: not one letter", f)
			}
			s.State = f[0]
		case 4:
			n, err := strconv.Atoi(string(f))
			if err != nil {
				return Stat{}, fmt.Errorf("ppid %q: %w", f, err)
			}
			s.PPID = n
		case 22:
			n, err := strconv.ParseUint(string(f), 10, 64)
			if err != nil {
				return Stat{}, fmt.Errorf("starttime %q: %w", f, err)
			}
			s.StartTime = n
		}
	}
	s.Comm = string(b[open+1 : end])
	return s, nil
}

// field cuts the next blank-separated field off *rest (nil when none).
func field(rest *[]byte) []byte {
	b := bytes.TrimLeft(*rest, " \t\n")
	if len(b) == 0 {
		return nil
	}
	i := bytes.IndexAny(b, " \t\n")
	if i < 0 {
		i = len(b)
	}
	*rest = b[i:]
	return b[:i]
}
