package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab/labsystemd"
	"github.com/gpush/gpush/lab/procstat"
	"golang.org/x/sys/unix"
)

// A lab folder serves one lab at a time. The lab that runs in it holds an
// exclusive flock on Dir/lab.lock from Start to the end of Stop, with its
// pid and start time written in the file: the kernel drops the lock when
// that process dies, however it dies, so a held lock whose holder lives
// means a live lab (also one still starting, before the CLI's lab.json
// exists). A lab whose server died without Stop leaves its holders and
// services behind, running programs from the folder: those make the folder
// busy too, since a new lab's hosts would show them as holders of its own
// fake GPUs.
//
// "Dies" takes a moment the lock must not outlive: a KILLed server's
// leader thread turns zombie (what Alive and the CLI see as dead) while its
// other threads, which share its files, are still on their way out, and
// the lock is dropped only when the last of them has gone. A lock held by
// a holder that has exited, or by none recorded (a check such as Busy, a
// lab between its flock and its pid), is waited for (lockWait): the lock
// ends with its lab, whatever the timing.

// lockWait bounds how long a lock held by no live lab is waited for.
var lockWait = 10 * time.Second

// LockName is the lock file in a lab folder.
const LockName = "lab.lock"

// BusyError says why a lab cannot start in Dir: a lab holds its lock
// (Running), or a dead lab's Leftovers still run.
type BusyError struct {
	Dir     string
	Running bool
	// PID is the running lab's process as its lock file says (0 while it
	// has not written it yet).
	PID int
	// Leftovers are the live processes of a lab that is gone (its
	// programs, its sshd).
	Leftovers []int
}

func (e *BusyError) Error() string {
	if e.Running {
		pid := ""
		if e.PID > 0 {
			pid = fmt.Sprintf(" (pid %d)", e.PID)
		}
		return fmt.Sprintf("lab folder %s is in use by a running lab%s; stop that lab first (gpush-lab down --dir %s)", e.Dir, pid, e.Dir)
	}
	return fmt.Sprintf("lab folder %s: processes of an earlier lab still run from it (pids %v); end them first (gpush-lab down --dir %s)", e.Dir, e.Leftovers, e.Dir)
}

// lockDir takes dir's lock for the calling lab, with its pid and start
// time recorded, or returns a *BusyError naming the lab that holds it. The
// file is close-on-exec: no child keeps the lock after the lab is gone.
func lockDir(dir string) (*os.File, error) {
	f, err := tryLock(dir)
	if err != nil {
		return nil, err
	}
	st, err := procstat.Read(os.Getpid())
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+" "+strconv.FormatUint(st.StartTime, 10)+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lab: lock folder %s: record pid: %w", dir, err)
	}
	return f, nil
}

// tryLock takes dir's lock without recording a pid (a check, or a cleanup
// that starts no lab), or returns a *BusyError: at once while a live lab
// holds it, else once the lock is free, waiting up to lockWait.
func tryLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lab: lock folder %s: %w", dir, err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err == unix.EINTR {
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lab: lock folder %s: %w", dir, err)
		}
		pid, start, live := lockHolder(dir)
		if live || !time.Now().Before(deadline) {
			f.Close()
			if !live {
				pid = 0
			}
			return nil, &BusyError{Dir: dir, Running: true, PID: pid}
		}
		awaitGone(pid, start, time.Until(deadline))
	}
}

// awaitGone waits up to d for the recorded holder pid (started at start,
// 0: not recorded), which has exited, to be gone with all its threads: the
// kernel has dropped its lock by then. Where there is no such process to
// wait on (none recorded, or it is gone and something else holds the lock
// for a moment), it waits a short while.
func awaitGone(pid int, start uint64, d time.Duration) {
	const step = 20 * time.Millisecond
	if pid > 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			defer unix.Close(fd)
			// Checked after the pidfd pins it: the holder, exited.
			st, err := procstat.Read(pid)
			if err == nil && st.Exited() && (start == 0 || st.StartTime == start) {
				// A pidfd reads as ready once the whole thread group
				// has exited (a zombie too): not before its last
				// thread let go of the lock.
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if n, _ := unix.Poll(fds, 0); n == 0 {
					unix.Poll(fds, int(d.Milliseconds())+1)
					return
				}
			}
		}
	}
	time.Sleep(min(step, d))
}

// unlockDir releases a lock lockDir took, clearing the pid first: a pid
// left in the file would name a process that may be another by then.
func unlockDir(f *os.File) {
	f.Truncate(0)
	f.Close()
}

// lockHolder is the pid and start time a lock holder wrote (0 while it has
// not yet; a start time 0 from a lab that wrote none), and whether that
// process still runs: the same process (its start time, where written,
// matches) and not exited.
func lockHolder(dir string) (pid int, start uint64, live bool) {
	b, _ := os.ReadFile(filepath.Join(dir, LockName))
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	if len(f) > 1 {
		if start, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			return 0, 0, false
		}
	}
	st, err := procstat.Read(pid)
	return pid, start, err == nil && !st.Exited() && (start == 0 || st.StartTime == start)
}

// Busy says why a lab cannot start in dir now (a *BusyError), nil when it
// can: no lab holds its lock and nothing runs programs from it.
func Busy(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("lab dir %s: %w", dir, err)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	f, err := tryLock(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if left := leftovers(dir); len(left) > 0 {
		return &BusyError{Dir: dir, Leftovers: left}
	}
	return nil
}

// leftovers are the live processes of a lab in dir: those running its
// programs, and its sshd (the system's binary, known by its pid file and
// its config in dir).
func leftovers(dir string) []int {
	left := exesUnder(dir)
	if pid := labSSHD(dir); pid > 0 {
		left = append(left, pid)
	}
	return left
}

// labSSHD is the pid of the sshd that a lab in dir started, while that
// process still runs with the lab's config; 0 when none does.
func labSSHD(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "sshd", "sshd.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 || !isLabSSHD(pid, dir) {
		return 0
	}
	return pid
}

// isLabSSHD reports whether pid is a live sshd run with dir's config.
func isLabSSHD(pid int, dir string) bool {
	if !labsystemd.Live(pid) {
		return false
	}
	cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	// sshd rewrites its argv as a title ("sshd: /usr/sbin/sshd -D -e -f
	// CFG [listener] ..."), so the words may be joined by spaces or NULs.
	words := strings.Fields(strings.ReplaceAll(string(cl), "\x00", " "))
	cfg := filepath.Join(dir, "sshd", "sshd_config")
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "-f" && words[i+1] == cfg {
			return true
		}
	}
	return false
}

// EndLeftovers ends what a lab that died without Stop left in dir: procs
// (its record of them, by identity; supervisors with their group first, so
// that they restart nothing), its cgroups (those of a lab that ran as
// serverPID), the containers of its private podman (Options.Podman, by
// name), and whatever still runs programs from dir. It refuses while a lab
// holds dir's lock. It returns how many processes and containers it ended.
func EndLeftovers(dir string, serverPID int, procs []Proc, wait time.Duration) (int, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return 0, fmt.Errorf("lab dir %s: %w", dir, err)
	}
	f, err := tryLock(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var errs []error
	// Containers first, by name: their runtime restarts a killed worker.
	killed, err := endContainers(dir)
	if err != nil {
		errs = append(errs, fmt.Errorf("lab: remove the containers of %s: %w", podmanDir(dir), err))
	}
	for _, p := range procs {
		if p.Role == RoleSupervisor && Alive(p) && syscall.Kill(-p.PID, syscall.SIGKILL) == nil {
			killed++
		}
	}
	for _, p := range procs {
		if Alive(p) && syscall.Kill(p.PID, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if serverPID > 0 {
		base := cgroupBaseFor(dir, serverPID)
		if hs, err := labsystemd.Hierarchies(labsystemd.DefaultCgroupRoot); err == nil {
			left := labsystemd.KillTree(hs, base, wait)
			if len(left) > 0 {
				errs = append(errs, fmt.Errorf("lab: processes %v still alive in cgroup %s", left, base))
			}
			for _, h := range hs {
				if _, err := os.Stat(filepath.Join(h, base)); err != nil {
					continue
				}
				if err := labsystemd.RemoveTree(h, base); err != nil {
					errs = append(errs, fmt.Errorf("lab: %w", err))
				}
				labsystemd.Prune(filepath.Join(h, filepath.Dir(base)), h)
			}
			errs = append(errs, removeControllerTrees(hs, base)...)
		}
	}
	if pid := labSSHD(dir); pid > 0 && killSSHD(pid, dir, wait) {
		killed++
	}
	seen := map[int]bool{}
	deadline := time.Now().Add(wait)
	for {
		left := exesUnder(dir)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("lab: processes %v still run programs from %s after %s", left, dir, wait))
			break
		}
		for _, pid := range left {
			if killExeUnder(pid, dir) && !seen[pid] {
				seen[pid] = true
				killed++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return killed, errors.Join(errs...)
}

// killSSHD KILLs pid while it is dir's sshd (checked after pinning it)
// and waits up to wait for it to exit: a KILL is delivered asynchronously,
// and down must not return while the old sshd still holds its port.
func killSSHD(pid int, dir string, wait time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if !isLabSSHD(pid, dir) || unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
		return false
	}
	// The pidfd reads as ready once the process has exited (a zombie too).
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for end := time.Now().Add(wait); ; {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if n > 0 || err != nil && err != unix.EINTR {
			break
		}
	}
	return true
}

// killExeUnder KILLs pid only while its executable lies under dir: the
// pidfd pins the process, so the check after opening it holds for the
// process signalled, not for one that reused the pid.
func killExeUnder(pid int, dir string) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil || !strings.HasPrefix(exe, dir+string(filepath.Separator)) {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}
