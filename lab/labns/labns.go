// Package labns gives a simulated host a process view of its own: a PID
// and mount namespace whose pid 1 is the lab's lab-init (lab/cmd/lab-init),
// which mounts the namespace's /proc there, so that what runs inside (the
// helper, fuser, the fake nvidia-smi, a slurmd and its job steps) sees the
// namespace's processes only, as on a real host. The lab's SSH hosts
// (lab.Options.Isolate) and the Slurm lab's nodes (lab/slurmlab) use it.
//
// The caller stays in the machine's namespaces and reaches a view's
// processes by their machine pids (the machine's /proc lists them too);
// HostPID and View.MachinePID translate between the two numberings.
// Killing the init (Stop) makes the kernel kill everything in the view.
package labns

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options shape a view.
type Options struct {
	// Env is the init's environment (nil: this process's).
	Env []string
	// KillWithParent KILLs the init, and so the view, when the thread that
	// started it ends (Pdeathsig): a test process that dies takes its views
	// along. Leave it off where the starter's thread may end first (a
	// daemon that outlives the call, as gpush-lab's server does not).
	KillWithParent bool
}

// View is a running process view.
type View struct {
	// PID is the init's machine pid.
	PID int
	// NSID is its PID namespace as /proc/PID/ns/pid reads ("pid:[N]").
	NSID string

	cmd    *exec.Cmd
	pidNS  *os.File // /proc/PID/ns/pid, kept open for setns
	exited chan struct{}
}

// Start starts init (a lab-init build) in a new PID and mount namespace
// and returns once it says ready, that is once the view's /proc is mounted.
// Needs root.
func Start(ctx context.Context, init string, o Options) (*View, error) {
	cmd := exec.Command(init)
	cmd.Env = o.Env
	// Own process group: a signal to the caller's group does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Setpgid: true}
	if o.KillWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("lab-init: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in a PID and mount namespace of its own (needs root): %w", init, err)
	}
	v := &View{PID: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(v.exited) }()
	fail := func(err error) (*View, error) {
		cmd.Process.Kill()
		<-v.exited
		if v.pidNS != nil {
			v.pidNS.Close()
		}
		return nil, err
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Process.Kill()
			<-v.exited
			return nil, fmt.Errorf("%s exited before ready (%v)", init, cmd.ProcessState)
		}
	case <-ctx.Done():
		return fail(fmt.Errorf("waiting for %s: %w", init, ctx.Err()))
	}
	nsPath := fmt.Sprintf("/proc/%d/ns/pid", v.PID)
	if v.pidNS, err = os.Open(nsPath); err != nil {
		return fail(err)
	}
	if v.NSID, err = os.Readlink(nsPath); err != nil {
		return fail(err)
	}
	return v, nil
}

// Exited is closed once the init has ended (and the view with it).
func (v *View) Exited() <-chan struct{} { return v.exited }

// Stop kills the init (the kernel then kills everything in the view) and
// reaps it. cmd.Process signals through a pidfd: never a reused pid.
// Safe to call twice.
func (v *View) Stop() {
	v.cmd.Process.Kill()
	select {
	case <-v.exited:
	case <-time.After(10 * time.Second):
	}
	v.pidNS.Close()
}

// StartIn starts cmd in the view's PID namespace; its mount namespace
// stays the machine's (Go cannot enter another from a threaded process),
// so its /proc is the machine's: for processes that need no /proc, such
// as holders (Command is for the others). setns(CLONE_NEWPID) only sets
// where the calling thread's children go, so it runs on a locked thread
// that is set back to this process's namespace before it is unlocked. The
// thread must not end instead: it may be the one that started a view's
// init, whose Pdeathsig would then kill that view.
func (v *View) StartIn(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/self/ns/pid")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("this process's PID namespace: %w", err)
			return
		}
		defer own.Close()
		if err := unix.Setns(int(v.pidNS.Fd()), unix.CLONE_NEWPID); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter the PID namespace of init %d: %w", v.PID, err)
			return
		}
		err = cmd.Start()
		// A thread whose children would still go to the view stays
		// locked, and Go ends it with this goroutine.
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWPID) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Command is name with args run in the view's PID and mount namespaces
// (its /proc, its mounts), in dir, through nsenter. nsenter forks the
// program into the view and waits for it, so the returned command's
// process is nsenter's: its exit is the program's, but a signal to it does
// not reach the program (labsystemd.KillForker ends both).
func (v *View) Command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	argv := append([]string{"--target", strconv.Itoa(v.PID), "--pid", "--mount", "--wd=" + dir, "--", name}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	cmd.Dir = dir
	return cmd
}

// Bind bind-mounts source on target in the view's mount namespace only
// (lab-init made its mounts private): the view sees source's files at
// target, the machine and the other views what target holds there. Both
// must exist.
func (v *View) Bind(ctx context.Context, source, target string) error {
	cmd := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(v.PID), "--mount", "--", "mount", "--bind", source, target)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bind %s on %s in the view of init %d: %w: %s", source, target, v.PID, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// Holds says whether machine pid pid lives in the view.
func (v *View) Holds(pid int) bool {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	return err == nil && ns == v.NSID
}

// MachinePID is the machine pid of the view's process whose pid in the
// view is nsPID.
func (v *View) MachinePID(nsPID int) (int, error) {
	if nsPID == 1 {
		return v.PID, nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == v.PID {
			continue
		}
		if v.Holds(pid) && HostPID(pid) == nsPID {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process is pid %d in the view of init %d", nsPID, v.PID)
}

// HostPID is machine pid pid's pid in its own PID namespace: the last
// field of NSpid in /proc/PID/status (pid itself when it is in the
// machine's, or when it is gone).
func HostPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return pid
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
					return n
				}
			}
		}
	}
	return pid
}
