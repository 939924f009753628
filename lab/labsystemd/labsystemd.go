// Package labsystemd is the code shared by the lab's systemd stand-in
// (lab/cmd/fake-systemctl) and the lab that configures and cleans it up:
// the config format, where the cgroup hierarchies are, and how to empty and
// remove a cgroup tree. Cgroups are real: a unit's processes are placed in
// /<base>/system.slice/<unit> of every systemd-relevant hierarchy, the way
// systemd does it on pure cgroup v2, hybrid and legacy hosts. The helper
// knows nothing of this package.
package labsystemd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpush/gpush/lab/procstat"
)

// Kill modes, as systemd's KillMode=.
const (
	KillControlGroup = "control-group" // TERM every process of the cgroup, KILL what is left after the timeout
	KillProcess      = "process"       // TERM the main process only: the rest stays (leftovers)
	KillMixed        = "mixed"         // TERM the main process, then KILL the rest of the cgroup
)

// DefaultStopTimeout is systemd's DefaultTimeoutStopSec.
const DefaultStopTimeout = 90 * time.Second

// Unit is one service of the fake.
type Unit struct {
	// Exec is ExecStart as an argument vector; Exec[0] is an absolute path.
	Exec []string `json:"exec"`
	// KillMode: control-group (default), process or mixed.
	KillMode string `json:"kill_mode,omitempty"`
	// StopTimeout is TimeoutStopSec ("5s"; default 90s).
	StopTimeout string `json:"stop_timeout,omitempty"`
	// Description shows in `status`.
	Description string `json:"description,omitempty"`
	// RefuseManualStop is systemd's RefuseManualStop=: `systemctl stop`
	// fails for this unit (exit 4, a line naming it) and leaves it running.
	RefuseManualStop bool `json:"refuse_manual_stop,omitempty"`
}

// Timeout returns the parsed StopTimeout.
func (u Unit) Timeout() (time.Duration, error) {
	if u.StopTimeout == "" {
		return DefaultStopTimeout, nil
	}
	d, err := time.ParseDuration(u.StopTimeout)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("stop_timeout %q: want a positive duration like \"5s\"", u.StopTimeout)
	}
	return d, nil
}

// Mode returns KillMode with its default.
func (u Unit) Mode() string {
	if u.KillMode == "" {
		return KillControlGroup
	}
	return u.KillMode
}

// Config is fake-systemctl.json.
type Config struct {
	// Units by full name ("sglang-qwen.service").
	Units map[string]Unit `json:"units"`
	// CgroupBase is where this fake's units live inside each hierarchy
	// ("/gpush-lab/x/lab01"): ControlGroup = CgroupBase/system.slice/UNIT.
	CgroupBase string `json:"cgroup_base"`
	// CgroupRoot is where cgroupfs is mounted (default /sys/fs/cgroup).
	CgroupRoot string `json:"cgroup_root,omitempty"`
	// StateDir keeps unit state and logs (default: "state" beside the config).
	StateDir string `json:"state_dir,omitempty"`
}

// ConfigName is the file looked for beside the executable.
const ConfigName = "fake-systemctl.json"

// ConfigEnv names a config file explicitly.
const ConfigEnv = "FAKE_SYSTEMCTL_CONFIG"

// DefaultCgroupRoot is where cgroupfs is mounted on Linux hosts.
const DefaultCgroupRoot = "/sys/fs/cgroup"

// Load reads and checks a config file; relative StateDir is taken from the
// config's folder.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fake systemctl config: %w", err)
	}
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("fake systemctl config %s: %w", path, err)
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	if c.StateDir == "" {
		c.StateDir = "state"
	}
	if !filepath.IsAbs(c.StateDir) {
		c.StateDir = filepath.Join(filepath.Dir(path), c.StateDir)
	}
	if !strings.HasPrefix(c.CgroupBase, "/") || strings.Contains(c.CgroupBase, "..") {
		return nil, fmt.Errorf("fake systemctl config %s: cgroup_base %q must be an absolute path with no \"..\" in it", path, c.CgroupBase)
	}
	for name, u := range c.Units {
		if len(u.Exec) == 0 || !filepath.IsAbs(u.Exec[0]) {
			return nil, fmt.Errorf("fake systemctl config %s: unit %s: exec must start with an absolute path, got %q", path, name, u.Exec)
		}
		switch u.Mode() {
		case KillControlGroup, KillProcess, KillMixed:
		default:
			return nil, fmt.Errorf("fake systemctl config %s: unit %s: kill_mode %q (want control-group, process or mixed)", path, name, u.KillMode)
		}
		if _, err := u.Timeout(); err != nil {
			return nil, fmt.Errorf("fake systemctl config %s: unit %s: %w", path, name, err)
		}
		if strings.ContainsAny(name, "/") || !strings.Contains(name, ".") {
			return nil, fmt.Errorf("fake systemctl config %s: unit name %q: want a full name like x.service", path, name)
		}
	}
	return &c, nil
}

// Save writes the config.
func (c *Config) Save(path string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("fake systemctl config: %w", err)
	}
	return nil
}

// UnitCgroup is a unit's ControlGroup path.
func (c *Config) UnitCgroup(unit string) string {
	return strings.TrimSuffix(c.CgroupBase, "/") + "/system.slice/" + unit
}

// Filesystem magic numbers (statfs f_type).
const (
	cgroup2Magic = 0x63677270
	cgroup1Magic = 0x27e0eb
)

// Hierarchies returns the mounted hierarchies systemd places units in:
// root itself on a pure cgroup v2 host; root/unified (v2) and root/systemd
// (name=systemd, v1) on a hybrid host; root/systemd on a legacy host.
func Hierarchies(root string) ([]string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("cgroup root %s: %w", root, err)
	}
	if st.Type == cgroup2Magic {
		return []string{root}, nil
	}
	var out []string
	for _, sub := range []struct {
		name  string
		magic int64
	}{{"unified", cgroup2Magic}, {"systemd", cgroup1Magic}} {
		p := filepath.Join(root, sub.name)
		if err := unix.Statfs(p, &st); err == nil && int64(st.Type) == sub.magic {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cgroup root %s: neither cgroup2 nor a name=systemd hierarchy (unified/, systemd/) is mounted there", root)
	}
	return out, nil
}

// Writable reports why cgroups under base cannot be created (nil when they
// can): it creates and removes a probe cgroup in every hierarchy.
func Writable(root, base string) error {
	hs, err := Hierarchies(root)
	if err != nil {
		return err
	}
	for _, h := range hs {
		probe := filepath.Join(h, base, fmt.Sprintf(".probe-%d", os.Getpid()))
		if err := os.MkdirAll(probe, 0o755); err != nil {
			return fmt.Errorf("cgroups not writable (need root and a read-write cgroupfs): %w", err)
		}
		// A probe that cannot be joined is no use either.
		if _, err := os.Stat(filepath.Join(probe, "cgroup.procs")); err != nil {
			unix.Rmdir(probe)
			return fmt.Errorf("cgroup %s has no cgroup.procs: %w", probe, err)
		}
		if err := os.Remove(probe); err != nil {
			return fmt.Errorf("remove probe cgroup %s: %w", probe, err)
		}
	}
	return nil
}

// Procs lists the pids in cgroup dir and its sub-cgroups (deduplicated,
// sorted); nil when dir does not exist. Each cgroup costs one read of its
// cgroup.procs and one listing for its sub-cgroups (a stop polls this).
func Procs(dir string) []int {
	var out []int
	procsIn(dir, &out)
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// procsIn appends the pids of cgroup dir and those below it to out.
func procsIn(dir string, out *[]int) {
	if b, err := os.ReadFile(dir + "/cgroup.procs"); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				*out = append(*out, n)
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			procsIn(dir+"/"+e.Name(), out)
		}
	}
}

// Live reports whether pid exists and is not a zombie (a zombie has let go
// of everything; nobody may reap it when its parent is gone).
func Live(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && !st.Exited()
}

// LivePids filters pids down to the live ones.
func LivePids(pids []int) []int {
	var out []int
	for _, p := range pids {
		if Live(p) {
			out = append(out, p)
		}
	}
	return out
}

// SignalMember sends sig to pid only while pid is in cgroup cg (a path
// inside the hierarchies, such as a unit's ControlGroup) or below it. A pid
// read from cgroup.procs may exit and be reused by an unrelated process
// before the signal: the pidfd pins the process, and the membership read
// after opening it proves it is still the one that was listed. pid <= 1 and
// the caller itself are never signalled.
func SignalMember(pid int, cg string, sig unix.Signal) bool {
	if pid <= 1 || pid == os.Getpid() {
		return false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil && !errors.Is(err, unix.ENOSYS) {
		return false // gone (ESRCH), or not ours to signal
	}
	if err == nil {
		defer unix.Close(fd)
	}
	if !InCgroup(pid, cg) {
		return false
	}
	if err == nil {
		return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
	}
	// No pidfd (kernel < 5.3): the membership was re-read just now.
	return unix.Kill(pid, sig) == nil
}

// InCgroup reports whether /proc/PID/cgroup places pid in cg or below it,
// in any hierarchy.
func InCgroup(pid int, cg string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	cg = strings.TrimSuffix(cg, "/")
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == cg || strings.HasPrefix(parts[2], cg+"/")) {
			return true
		}
	}
	return false
}

// KillTree sends KILL to every live process in base of each hierarchy and
// waits (up to wait) for them to be gone; it returns the pids still alive.
// Only members of the cgroup are hit, each re-checked as it is signalled
// (SignalMember).
func KillTree(hs []string, base string, wait time.Duration) []int {
	members := func() []int {
		var all []int
		for _, h := range hs {
			all = append(all, Procs(filepath.Join(h, base))...)
		}
		return LivePids(all)
	}
	deadline := time.Now().Add(wait)
	for {
		left := members()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return left
		}
		for _, p := range left {
			SignalMember(p, base, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RemoveTree removes the cgroup dir base of hierarchy h and every cgroup
// below it, deepest first; cgroups still holding processes stay (EBUSY).
func RemoveTree(h, base string) error {
	top := filepath.Join(h, base)
	var dirs []string
	_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := rmdirCgroup(dirs[i]); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// rmdirCgroup removes one cgroup dir (cgroupfs dirs go with rmdir even though
// they list files). A task that was just killed can keep the cgroup busy for
// a moment after it stops being live (exit is not yet complete), so EBUSY is
// retried briefly before it counts.
func rmdirCgroup(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Prune removes dir if it is an empty cgroup (no processes, no children),
// then its parents up to (not including) stop, while they are empty too.
func Prune(dir, stop string) {
	for dir != stop && strings.HasPrefix(dir, stop+"/") {
		if err := unix.Rmdir(dir); err != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// KillForker ends p, a process that forks a child and waits for it
// (nsenter), together with its children. Stopped first, p forks no child
// after they are listed; each child is KILLed by its pid while it is still
// p's; continued, p reaps them and exits with their signal (nsenter does),
// and p itself is KILLed when it had none. The caller's Wait reaps p.
func KillForker(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err // gone already (os.ErrProcessDone)
	}
	// A signal takes effect on the way out of the kernel: after a fork in
	// flight, so the children listed below are all there are.
	for i := 0; i < 1000; i++ {
		st, err := procstat.Read(p.Pid)
		if err != nil || st.State == 'T' || st.State == 't' || st.Exited() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	children := ChildrenOf(p.Pid)
	var errs []error
	for _, c := range children {
		if err := killChild(c, p.Pid); err != nil {
			errs = append(errs, err)
		}
	}
	if len(children) == 0 {
		errs = append(errs, p.Kill())
	} else {
		errs = append(errs, p.Signal(syscall.SIGCONT))
	}
	return errors.Join(errs...)
}

// ChildrenOf lists the pids whose parent is pid (from /proc/*/stat: this
// kernel has no /proc/PID/task/TID/children).
func ChildrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procstat.Read(c); err == nil && st.PPID == pid {
			out = append(out, c)
		}
	}
	return out
}

// killChild KILLs pid while it is parent's child: the pidfd pins the
// process, so the parent read after opening it is that process's.
func killChild(pid, parent int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // gone already
	}
	defer unix.Close(fd)
	if st, err := procstat.Read(pid); err != nil || st.PPID != parent {
		return nil // no longer parent's
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill pid %d (forked by pid %d): %w", pid, parent, err)
	}
	return nil
}
