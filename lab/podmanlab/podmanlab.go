// Package podmanlab runs real podman containers for tests and labs, in a
// podman of their own: storage, run and temporary folders and locks under
// one folder (a test's temporary folder, a lab's Dir/podman), set through
// CONTAINERS_CONF and CONTAINERS_STORAGE_CONF (in the test process's
// environment; in a lab's sshd sessions), so that a plain `podman` the code
// under test runs finds the same containers; the machine's own containers
// are neither seen nor touched. Containers run with runc and the cgroupfs
// cgroup manager, no network and no image: their root folder holds a
// static busybox (for tests; a lab's holds what it bind-mounts) (what works on the machines the tests run on:
// shared/recipes/podman.md). The helper knows nothing of this package.
package podmanlab

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequireEnv, when set, makes a missing podman a test failure, not a skip
// (CI sets it).
const RequireEnv = "GPUSH_REQUIRE_PODMAN"

// Runtime is one private podman setup, for tests (New) and for labs that
// outlive a test (lab.Options.Podman: Setup).
type Runtime struct {
	// Dir holds the configuration, storage, run and temporary folders.
	Dir string
	// Podman and Runc are the binaries used.
	Podman, Runc string
	// Rootfs is the containers' root folder: bin/busybox and its sh and
	// sleep with Setup's busybox, else empty (a container then runs a
	// static program bind-mounted in).
	Rootfs string
	// Env is what points podman at this setup: CONTAINERS_CONF and
	// CONTAINERS_STORAGE_CONF, as KEY=VALUE.
	Env []string
}

// Find returns the podman and runc binaries, or why podman cannot run
// here (not installed, not root: the private storage needs root).
func Find() (podman, runc string, err error) {
	podman, err = exec.LookPath("podman")
	if err != nil {
		return "", "", err
	}
	if os.Geteuid() != 0 {
		return "", "", fmt.Errorf("podman's private storage needs root (uid %d)", os.Geteuid())
	}
	runc, err = exec.LookPath("runc")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/runc"); serr != nil {
			return "", "", fmt.Errorf("podman is installed but runc is not: %w (apt-get install runc)", err)
		}
		runc = "/usr/sbin/runc"
	}
	return podman, runc, nil
}

// Setup writes a private podman setup into dir (created if missing): its
// containers.conf and storage.conf, storage, run and temporary folders and
// the containers' root folder. busybox puts a static busybox (and its sh
// and sleep) in the root folder and fails without one. Nothing is started.
func Setup(dir string, busybox bool) (*Runtime, error) {
	podman, runc, err := Find()
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	r := &Runtime{Dir: dir, Podman: podman, Runc: runc, Rootfs: filepath.Join(dir, "rootfs")}
	for _, d := range []string{"rootfs/bin", "storage", "run", "tmp", "networks"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if busybox {
		bb, err := staticBusybox()
		if err != nil {
			return nil, fmt.Errorf("%w (apt-get install busybox-static)", err)
		}
		b, err := os.ReadFile(bb)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(r.Rootfs, "bin/busybox"), b, 0o755); err != nil {
			return nil, err
		}
		for _, applet := range []string{"sh", "sleep"} {
			link := filepath.Join(r.Rootfs, "bin", applet)
			os.Remove(link)
			if err := os.Symlink("busybox", link); err != nil {
				return nil, err
			}
		}
	}
	// default_ulimits and pids_limit: the runtime may not set RLIMIT_NPROC
	// or NOFILE here, nor a pids limit on hybrid cgroups. lock_type file:
	// the locks live in tmp_dir, not in the machine's /dev/shm/libpod_lock.
	conf := fmt.Sprintf(`[containers]
default_ulimits = []
pids_limit = 0
netns = "none"

[network]
network_config_dir = %q

[engine]
runtime = %q
cgroup_manager = "cgroupfs"
tmp_dir = %q
lock_type = "file"
events_logger = "file"
events_logfile_path = %q
`, filepath.Join(dir, "networks"), runc, filepath.Join(dir, "tmp"), filepath.Join(dir, "events.log"))
	// vfs: no overlay mount, which a test machine that is itself a
	// container may refuse.
	storage := fmt.Sprintf(`[storage]
driver = "vfs"
graphroot = %q
runroot = %q
`, filepath.Join(dir, "storage"), filepath.Join(dir, "run"))
	confFile, storageFile := filepath.Join(dir, "containers.conf"), filepath.Join(dir, "storage.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(storageFile, []byte(storage), 0o644); err != nil {
		return nil, err
	}
	r.Env = []string{"CONTAINERS_CONF=" + confFile, "CONTAINERS_STORAGE_CONF=" + storageFile}
	return r, nil
}

// Exec runs podman with args in this setup and returns its stdout, or an
// error with what it printed.
func (r *Runtime) Exec(args ...string) (string, error) {
	cmd := exec.Command(r.Podman, args...)
	cmd.Env = append(os.Environ(), r.Env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Options for a container.
type Options struct {
	// Restart is podman run's --restart (always, on-failure, no, ...);
	// empty: podman's default (no).
	Restart string
	// Binds are host folders mounted at the same path inside, so that a
	// file the container opens has the same path in the host's /proc.
	Binds []string
	// Hold are files the container's process holds open (see Hold), when
	// Cmd is empty.
	Hold []string
	// Cmd is the container's command; default Hold(Hold...).
	Cmd []string
	// User is podman run's --user (uid[:gid]); empty: root.
	User string
	// CgroupParent is podman run's --cgroup-parent (a cgroupfs path);
	// empty: podman's default, /libpod_parent.
	CgroupParent string
	// HostPID shares the host's PID namespace (--pid=host) and Privileged
	// runs privileged (--privileged): the DaemonSet pattern, a container
	// whose root sees the host's processes and their open files.
	HostPID, Privileged bool
}

// RunArgs are the arguments of `podman run` for a container named name.
func (r *Runtime) RunArgs(name string, o Options) []string {
	args := []string{"run", "-d", "--name", name, "--network", "none"}
	if o.Restart != "" {
		args = append(args, "--restart", o.Restart)
	}
	if o.User != "" {
		args = append(args, "--user", o.User)
	}
	if o.CgroupParent != "" {
		args = append(args, "--cgroup-parent", o.CgroupParent)
	}
	if o.HostPID {
		args = append(args, "--pid", "host")
	}
	if o.Privileged {
		args = append(args, "--privileged")
	}
	for _, b := range o.Binds {
		args = append(args, "-v", b+":"+b)
	}
	cmd := o.Cmd
	if len(cmd) == 0 {
		cmd = Hold(o.Hold...)
	}
	args = append(args, "--rootfs", r.Rootfs)
	return append(args, cmd...)
}

// Run starts a container named name (detached) and returns its id once
// podman has started it.
func (r *Runtime) Run(name string, o Options) (string, error) {
	out, err := r.Exec(r.RunArgs(name, o)...)
	return strings.TrimSpace(out), err
}

// Remove removes the named container at once (podman rm -f, by name: it
// ends that container only); one that is not there is no error.
func (r *Runtime) Remove(name string) error {
	_, err := r.Exec("rm", "-f", "-t", "0", "--ignore", name)
	return err
}

// State reads the named container's state; ok is false when podman has no
// such container.
func (r *Runtime) State(name string) (st State, ok bool, err error) {
	out, err := r.Exec("container", "inspect", "--format", "{{.State.Status}} {{.State.Pid}} {{.RestartCount}} {{.State.ExitCode}}", name)
	if err != nil {
		if strings.Contains(err.Error(), "no such") {
			return State{}, false, nil
		}
		return State{}, false, err
	}
	f := strings.Fields(out)
	if len(f) != 4 {
		return State{}, false, fmt.Errorf("podman inspect %s: %q", name, out)
	}
	st.Status = f[0]
	st.Pid, _ = strconv.Atoi(f[1])
	st.RestartCount, _ = strconv.Atoi(f[2])
	st.ExitCode, _ = strconv.Atoi(f[3])
	return st, true, nil
}

// Lab is one private podman setup of a test.
type Lab struct {
	*Runtime
	t     testing.TB
	names []string
}

// New sets up a private podman for t and removes, at t's end, every
// container started through it (by name). It sets environment variables:
// not for parallel tests. Skips t when podman is not installed or the test
// does not run as root, unless RequireEnv is set (then t fails).
func New(t testing.TB) *Lab {
	t.Helper()
	if _, _, err := Find(); err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%s is set, but podman cannot run: %v (apt-get install podman runc busybox-static)", RequireEnv, err)
		}
		t.Skipf("skipping: podman cannot run here: %v (apt-get install podman runc busybox-static; %s=1 makes this a failure)", err, RequireEnv)
	}
	r, err := Setup(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	l := &Lab{Runtime: r, t: t}
	for _, kv := range l.Env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	// After t.Setenv's restore in t.Cleanup's order: registered last,
	// run first.
	t.Cleanup(l.removeAll)
	return l
}

// staticBusybox finds a busybox that runs in an empty root folder (no
// dynamic loader): busybox-static's.
func staticBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p, nil
		}
	}
	return "", fmt.Errorf("no static busybox in /bin or /usr/bin")
}

// Container is one container of the lab.
type Container struct {
	lab        *Lab
	Name, ID   string
	holdsFirst string
}

// Run starts a container named name (detached) and returns once podman
// has started it; see WaitReady for its process.
func (l *Lab) Run(name string, o Options) *Container {
	l.t.Helper()
	first := ""
	if len(o.Cmd) == 0 && len(o.Hold) > 0 {
		first = o.Hold[0]
	}
	l.names = append(l.names, name)
	id, err := l.Runtime.Run(name, o)
	if err != nil {
		l.t.Fatal(err)
	}
	return &Container{lab: l, Name: name, ID: id, holdsFirst: first}
}

// Hold is a container command that holds files open (read only, at fds 3
// to 9, at most 7 files) in the container's first process until a TERM,
// which it exits 0 on (podman stop's signal: a PID 1 without a handler
// would ignore it). Its one child, a sleep, holds none of them.
func Hold(files ...string) []string {
	if len(files) > 7 {
		panic("podmanlab.Hold: at most 7 files")
	}
	var open, closed []string
	for i, f := range files {
		open = append(open, fmt.Sprintf("%d<%s", i+3, shellQuote(f)))
		closed = append(closed, fmt.Sprintf("%d<&-", i+3))
	}
	script := ""
	if len(open) > 0 {
		script = "exec " + strings.Join(open, " ") + "\n"
	}
	script += "trap 'exit 0' TERM\nsleep 2147483647 " + strings.Join(closed, " ") + " &\nwait\n"
	return []string{"/bin/sh", "-c", script}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// State is what podman says of a container.
type State struct {
	Status       string
	Pid          int
	RestartCount int
	ExitCode     int
}

// State reads the container's state; ok is false when podman has no such
// container.
func (c *Container) State() (State, bool) {
	c.lab.t.Helper()
	st, ok, err := c.lab.Runtime.State(c.Name)
	if err != nil {
		c.lab.t.Fatal(err)
	}
	return st, ok
}

// WaitReady waits until the container runs a process other than notPid
// (0: any), and, for a Hold command, until that process holds its first
// file; it returns the process's pid (in the host's pid namespace).
func (c *Container) WaitReady(notPid int, timeout time.Duration) int {
	c.lab.t.Helper()
	deadline := time.Now().Add(timeout)
	var last State
	for time.Now().Before(deadline) {
		st, ok := c.State()
		last = st
		if ok && st.Status == "running" && st.Pid > 0 && st.Pid != notPid {
			if c.holdsFirst == "" {
				return st.Pid
			}
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", st.Pid)); err == nil && l == c.holdsFirst {
				return st.Pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.lab.t.Fatalf("container %s: no process (other than %d) ready after %s: last state %+v", c.Name, notPid, timeout, last)
	return 0
}

// Remove removes the container at once (podman rm -f, by name).
func (c *Container) Remove() {
	c.lab.t.Helper()
	if err := c.lab.Runtime.Remove(c.Name); err != nil {
		c.lab.t.Fatal(err)
	}
}

// removeAll removes every container Run started, by name, then the lab's
// folder: conmon and exec sessions still write their exit files there for
// a moment after podman rm returns, which would fail t.TempDir's own
// removal ("directory not empty").
func (l *Lab) removeAll() {
	for _, n := range l.names {
		if err := l.Remove(n); err != nil {
			l.t.Error(err)
		}
	}
	var err error
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err = os.RemoveAll(l.Dir); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		l.t.Errorf("podmanlab: removing %s: %v", l.Dir, err)
	}
}
