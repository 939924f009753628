// Package nssystemd boots the machine's real systemd (Debian's systemd 252,
// /lib/systemd/systemd) as PID 1 of a private PID and mount namespace, for
// tests of everything that drives systemd on a machine that runs none.
//
// Everything it makes is private and goes away with it: the namespace gets
// its own /run, /tmp and /dev (tmpfs) and a read-only view of /, so nothing
// systemd does can change the host. The vendor *.wants folders and the
// generators are hidden, and tmpfiles is masked: systemd-tmpfiles-setup
// would otherwise clean /tmp. systemd runs in a cgroup subtree of its own
// (one per boot) in the hierarchies it tracks units in, with accounting off
// so it creates nothing in the v1 controller hierarchies. Stop halts it by
// its pid, KILLs it if it does not exit, and removes the cgroup subtree.
//
// Units are written into the private /run/systemd/system. Host folders that
// units must see (test binaries, fake device files) are bind-mounted at the
// same path (Options.Share). ControlGroup paths systemd reports are host
// paths; MainPID and every pid a unit prints are namespace pids (HostPID
// maps them). Systemctl is a small executable that runs systemctl inside the
// namespace: it is what gpush_systemctl points at.
package nssystemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab/labsystemd"
)

// Binary is the systemd that is booted.
const Binary = "/lib/systemd/systemd"

// Where the real systemctl and the namespace tools are expected.
var (
	systemctlPaths = []string{"/usr/bin/systemctl", "/bin/systemctl"}
	toolNames      = []string{"nsenter", "mount", "umount", "mknod"}
)

// cgroupRoot is where cgroupfs is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// Options configures one boot.
type Options struct {
	// Dir is a host folder for the harness's files (boot script, wrapper,
	// log); it is shared into the namespace. Required.
	Dir string
	// Share are more host folders made visible at the same path inside.
	Share []string
	// StopTimeout is DefaultTimeoutStopSec (default 3s: KillMode tests
	// should not wait for systemd's 90s).
	StopTimeout time.Duration
	// BootTimeout bounds the wait for systemd to report running (default 30s).
	BootTimeout time.Duration
}

// Systemd is one booted systemd.
type Systemd struct {
	// PID is systemd's pid on the host (it is 1 inside).
	PID int
	// Dir is Options.Dir.
	Dir string
	// Systemctl runs systemctl inside the namespace: `Systemctl ARGS...`.
	Systemctl string
	// CgroupBase is the cgroup (the same path in every hierarchy) systemd
	// runs in; units are below it (CgroupBase/system.slice/UNIT).
	CgroupBase string
	// Hierarchies are the mounted cgroup trees systemd tracks units in.
	Hierarchies []string
	// Boot is how long it took from the start to `is-system-running` saying
	// running or degraded.
	Boot time.Duration
	// Log is PID 1's console (its own log lines).
	Log string

	// nsenter and systemctl are the host's tools Run goes through.
	nsenter, systemctl string

	cmd     *exec.Cmd
	waited  chan struct{}
	waitErr error
	stopped atomic.Bool
}

// Available says why a real systemd cannot be booted here, or "" if it can.
func Available() string {
	if os.Geteuid() != 0 {
		return "booting systemd in a namespace needs root"
	}
	if _, err := os.Stat(Binary); err != nil {
		return "no systemd (" + Binary + "): install the Debian package systemd"
	}
	if _, err := findSystemctl(); err != nil {
		return err.Error()
	}
	for _, t := range toolNames {
		if _, err := exec.LookPath(t); err != nil {
			return t + " not found: install util-linux"
		}
	}
	if _, err := labsystemd.Hierarchies(cgroupRoot); err != nil {
		return err.Error()
	}
	return ""
}

func findSystemctl() (string, error) {
	for _, p := range systemctlPaths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no systemctl in %s: install the Debian package systemd", strings.Join(systemctlPaths, ", "))
}

var boots atomic.Int64

// Boot starts systemd and waits until it is running. On error nothing is
// left behind.
func Boot(ctx context.Context, o Options) (_ *Systemd, err error) {
	if why := Available(); why != "" {
		return nil, errors.New("nssystemd: " + why)
	}
	if o.Dir == "" || !filepath.IsAbs(o.Dir) {
		return nil, fmt.Errorf("nssystemd: Options.Dir %q: want an absolute folder", o.Dir)
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 3 * time.Second
	}
	if o.BootTimeout <= 0 {
		o.BootTimeout = 30 * time.Second
	}
	share := []string{o.Dir}
	for _, d := range o.Share {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("nssystemd: share %q: want an absolute path", d)
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("nssystemd: share %q: not a folder", d)
		}
		share = append(share, filepath.Clean(d))
	}
	systemctl, _ := findSystemctl()
	nsenter, _ := exec.LookPath("nsenter")
	hs, err := labsystemd.Hierarchies(cgroupRoot)
	if err != nil {
		return nil, fmt.Errorf("nssystemd: %w", err)
	}
	// s, not the result: a failed Boot returns nil and still cleans up s.
	s := &Systemd{Dir: o.Dir, Hierarchies: hs, Log: filepath.Join(o.Dir, "systemd-console.log"), waited: make(chan struct{}),
		nsenter: nsenter, systemctl: systemctl}
	s.CgroupBase, err = s.makeCgroups()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if serr := s.Stop(); serr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, serr)
			}
		}
	}()

	script := filepath.Join(o.Dir, "nssystemd-boot.sh")
	if err := os.WriteFile(script, []byte(bootScript(s, share, o.StopTimeout)), 0o755); err != nil {
		return nil, fmt.Errorf("nssystemd: %w", err)
	}
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("nssystemd: %w", err)
	}
	defer logf.Close()

	start := time.Now()
	s.cmd = exec.Command("/bin/sh", script)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// container= tells systemd it is a container's init: it leaves the
	// machine (hostname, kernel modules, reboot) alone and exits on halt.
	s.cmd.Env = []string{"container=gpush-nssystemd", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	// Pdeathsig: a test binary that dies without Stop (a panic, a timeout)
	// takes its systemd, and with it the whole namespace, along.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("nssystemd: start %s in a new PID+mount namespace: %w", script, err)
	}
	s.PID = s.cmd.Process.Pid
	go func() { s.waitErr = s.cmd.Wait(); close(s.waited) }()

	s.Systemctl = filepath.Join(o.Dir, "systemctl")
	wrapper := fmt.Sprintf("#!/bin/sh\n# systemctl of the namespaced systemd (pid %d on the host)\nexec %s -t %d -m -p -- %s \"$@\"\n",
		s.PID, shquote(nsenter), s.PID, shquote(systemctl))
	if err := os.WriteFile(s.Systemctl, []byte(wrapper), 0o755); err != nil {
		return nil, fmt.Errorf("nssystemd: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, o.BootTimeout)
	defer cancel()
	// Its private socket first (a stat, cheap on a loaded machine), then
	// one systemctl that waits for the boot to finish.
	sock := filepath.Join(s.root(), "run/systemd/private")
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case <-s.waited:
			return nil, fmt.Errorf("nssystemd: systemd exited while booting (%v): %s", s.waitErr, tail(s.Log))
		case <-ctx.Done():
			return nil, fmt.Errorf("nssystemd: no %s after %s: %s", sock, o.BootTimeout, tail(s.Log))
		case <-time.After(2 * time.Millisecond):
		}
	}
	out, _ := s.command(ctx, "is-system-running", "--wait").Output()
	if st := strings.TrimSpace(string(out)); st != "running" && st != "degraded" {
		return nil, fmt.Errorf("nssystemd: systemd did not boot (is-system-running: %q, %v): %s", st, ctx.Err(), tail(s.Log))
	}
	s.Boot = time.Since(start)
	return s, nil
}

// makeCgroups creates this boot's cgroup in every hierarchy, below the
// caller's own cgroup there.
func (s *Systemd) makeCgroups() (string, error) {
	own, err := ownCgroup(s.Hierarchies[0])
	if err != nil {
		return "", err
	}
	base := filepath.Join(own, fmt.Sprintf("gpush-nssystemd-%d-%d", os.Getpid(), boots.Add(1)))
	for _, h := range s.Hierarchies {
		if err := os.MkdirAll(filepath.Join(h, base), 0o755); err != nil {
			for _, made := range s.Hierarchies {
				labsystemd.RemoveTree(made, base)
			}
			return "", fmt.Errorf("nssystemd: create cgroup %s (needs root and a read-write cgroupfs): %w", filepath.Join(h, base), err)
		}
	}
	return base, nil
}

// ownCgroup is this process's cgroup in hierarchy h, from /proc/self/cgroup.
func ownCgroup(h string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("nssystemd: %w", err)
	}
	v2 := filepath.Base(h) != "systemd"
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 && parts[0] == "0" && parts[1] == "" || !v2 && parts[1] == "name=systemd" {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("nssystemd: /proc/self/cgroup has no line for %s", h)
}

// bootScript is what runs as PID 1 of the new namespaces before it execs
// systemd. Order matters: shared folders are bound into the new /run before
// /tmp is covered, since they may live in the host's /tmp.
func bootScript(s *Systemd, share []string, stopTimeout time.Duration) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("#!/bin/sh")
	w("# PID 1 of a private PID+mount namespace; written by lab/nssystemd.")
	w("set -eu")
	for _, h := range s.Hierarchies {
		w("echo 0 > %s", shquote(filepath.Join(h, s.CgroupBase, "cgroup.procs")))
	}
	w("mount --make-rprivate /")
	w("mount -t tmpfs -o mode=755,size=256m gpush-run /run")
	for i, d := range share {
		w("mkdir -p /run/.share/%d && mount --rbind %s /run/.share/%d", i, shquote(d), i)
	}
	w("mount -t tmpfs -o mode=1777,size=256m gpush-tmp /tmp")
	w("mount -t tmpfs -o mode=755,size=4m gpush-dev /dev")
	for i, d := range share {
		w("mkdir -p %s && mount --rbind /run/.share/%d %s && umount -l /run/.share/%d", shquote(d), i, shquote(d), i)
	}
	w("rm -rf /run/.share")
	for _, n := range []struct {
		name         string
		major, minor int
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		w("mknod -m 666 /dev/%s c %d %d", n.name, n.major, n.minor)
	}
	w("ln -s /proc/self/fd /dev/fd")
	// PID 1 writes its log lines to /dev/console: make that the log file.
	w(": > /dev/console && mount --bind %s /dev/console", shquote(s.Log))
	w("mount -t proc -o nosuid,nodev,noexec proc /proc")
	w("for d in /usr/lib/systemd/system/*.wants /etc/systemd/system/*.wants /usr/lib/systemd/system-generators /etc/systemd/system-generators /usr/local/lib/systemd/system-generators; do")
	w("  if [ -d \"$d\" ]; then mount -t tmpfs -o ro,mode=755,size=4k gpush-hidden \"$d\"; fi")
	w("done")
	w("mkdir -p /run/systemd/system /run/systemd/system.conf.d")
	w("cat > /run/systemd/system.conf.d/gpush-nssystemd.conf <<'EOF'")
	w("[Manager]")
	w("DefaultTimeoutStopSec=%dms", stopTimeout.Milliseconds())
	w("DefaultTasksAccounting=no")
	w("DefaultMemoryAccounting=no")
	w("DefaultCPUAccounting=no")
	w("DefaultIOAccounting=no")
	w("DefaultBlockIOAccounting=no")
	w("EOF")
	// tmpfiles would clean /tmp (private here, but never take the chance).
	for _, u := range []string{"systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service", "systemd-tmpfiles-clean.service", "systemd-tmpfiles-clean.timer"} {
		w("ln -s /dev/null /run/systemd/system/%s", u)
	}
	w("mount -o remount,bind,ro /")
	w("exec %s --system --log-target=console --log-level=info --show-status=no", Binary)
	return b.String()
}

// WriteUnit writes a unit file into the namespace's /run/systemd/system and
// reloads systemd.
func (s *Systemd) WriteUnit(ctx context.Context, name, body string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || name[0] == '.' {
		return fmt.Errorf("nssystemd: unit name %q", name)
	}
	p := filepath.Join(s.root(), "run/systemd/system", name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		return fmt.Errorf("nssystemd: write unit %s: %w", name, err)
	}
	if _, err := s.Run(ctx, "daemon-reload"); err != nil {
		return err
	}
	return nil
}

// root is the namespace's / seen from the host (through PID 1).
func (s *Systemd) root() string { return fmt.Sprintf("/proc/%d/root", s.PID) }

// Run runs systemctl ARGS inside the namespace and returns its stdout; a
// non-zero exit is an error carrying what it printed.
func (s *Systemd) Run(ctx context.Context, args ...string) (string, error) {
	cmd := s.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return out.String(), fmt.Errorf("nssystemd: systemctl %s: %w (killed with the systemctl it ran: %v): %s%s", strings.Join(args, " "), ctx.Err(), err, out.String(), errb.String())
		}
		return out.String(), fmt.Errorf("nssystemd: systemctl %s: %w: %s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// command is `systemctl ARGS` inside the namespace, through nsenter as the
// Systemctl wrapper runs it. nsenter forks systemctl into the PID namespace
// and waits for it, so killing nsenter alone when ctx ends leaves systemctl
// running there (re-parented to the namespace's systemd, still waiting on
// its job) and holding the output pipes that Wait reads to their end. Its
// cancel kills that child too, by its pid, and lets nsenter reap it.
func (s *Systemd) command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{"-t", strconv.Itoa(s.PID), "-m", "-p", "--", s.systemctl}, args...)
	cmd := exec.CommandContext(ctx, s.nsenter, argv...)
	cmd.Cancel = func() error { return labsystemd.KillForker(cmd.Process) }
	// Should anything still hold the pipes after that, Wait stops reading.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Show returns the unit's properties as `systemctl show` prints them.
func (s *Systemd) Show(ctx context.Context, unit string, props ...string) (map[string]string, error) {
	args := []string{"show"}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out, err := s.Run(ctx, append(args, "--", unit)...)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// HostPID maps a pid inside the namespace to the host's, by the NSpid line
// of the processes in systemd's cgroup subtree; 0 when none matches.
func (s *Systemd) HostPID(nspid int) int {
	if nspid == 1 {
		return s.PID
	}
	for _, p := range s.Procs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
				ids := strings.Fields(f)
				if len(ids) >= 2 && ids[len(ids)-1] == strconv.Itoa(nspid) {
					return p
				}
			}
		}
	}
	return 0
}

// Procs lists the host pids of every process in systemd's cgroup subtree.
func (s *Systemd) Procs() []int {
	seen := map[int]bool{}
	var out []int
	for _, h := range s.Hierarchies {
		for _, p := range labsystemd.Procs(filepath.Join(h, s.CgroupBase)) {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// RSS is PID 1's resident memory in KiB (VmRSS).
func (s *Systemd) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID))
	if err != nil {
		return 0, fmt.Errorf("nssystemd: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(f), " kB"), 10, 64)
		}
	}
	return 0, errors.New("nssystemd: no VmRSS in /proc/PID/status")
}

// Stop halts systemd (SIGRTMIN+3, as a container manager does; KILL if
// the boot did not finish), KILLs it if it has not exited after 10s (the kernel then kills everything in its
// PID namespace), and removes its cgroup subtree. It may be called twice.
func (s *Systemd) Stop() error {
	if s.stopped.Swap(true) {
		return nil
	}
	var errs []error
	switch {
	case s.cmd == nil || s.cmd.Process == nil:
	case s.Boot == 0:
		// Not booted: PID 1 may still be the boot script, which (as a
		// namespace's init without a handler) ignores everything but KILL.
		s.cmd.Process.Kill()
		<-s.waited
	default:
		halt := syscall.Signal(34 + 3) // SIGRTMIN+3 (glibc's SIGRTMIN is 34): halt
		if err := s.cmd.Process.Signal(halt); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("halt pid %d: %w", s.PID, err))
		}
		select {
		case <-s.waited:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("systemd (pid %d) did not halt within 10s; killed", s.PID))
			s.cmd.Process.Kill()
			<-s.waited
		}
	}
	// PID 1 is gone, so is every process of the namespace; what is left in
	// the subtree (nothing, unless something escaped) is killed by membership.
	if left := labsystemd.KillTree(s.Hierarchies, s.CgroupBase, 5*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes left in cgroup %s: %v", s.CgroupBase, left))
	}
	for _, h := range s.Hierarchies {
		if err := labsystemd.RemoveTree(h, s.CgroupBase); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nssystemd: stop: %w", err)
	}
	return nil
}

func shquote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tail is the end of a log file, for errors.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
