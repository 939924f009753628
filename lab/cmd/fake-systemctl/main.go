// Command fake-systemctl stands in for systemctl on lab hosts, which run no
// systemd: it starts, stops and reports the services of a JSON config with
// systemctl's output formats and exit codes, and puts each service in a real
// cgroup (CGROUP_BASE/system.slice/UNIT in the unified and name=systemd
// hierarchies of a hybrid host, or the one v2 hierarchy), so that what the
// helper reads from /proc/PID/cgroup and cgroup.procs is what a systemd host
// shows. The verbs gpush's helper uses:
//
//	systemctl start|stop|restart [--] UNIT...
//	systemctl show [-p PROP[,PROP]]... [--value] [--] UNIT...
//	systemctl is-active [-q] [--] UNIT...
//	systemctl status [--] UNIT...
//
// The config (labsystemd.Config) is the file named by $FAKE_SYSTEMCTL_CONFIG,
// else fake-systemctl.json beside the path it was run as (a per-host link
// named systemctl), else beside the resolved executable. State and each
// unit's output (its journal) live in the config's state_dir.
//
// Stop follows the unit's kill_mode: control-group TERMs every process of
// the cgroup and KILLs what is left after stop_timeout; process TERMs the
// main process only, so its workers live on (a stopped service's
// leftovers); mixed TERMs the main process, then KILLs the rest.
//
// Several units in one start, stop or restart are one job each, run side
// by side as systemd runs its jobs; the exit status is the first failure's
// in the order the units were given, each failure one message on stderr.
//
// Every call is a fresh process (a free runs four per host), so a run
// does only what its verb needs: no collector, the executable resolved only
// when no config sits beside the path it ran as, one /proc/PID/stat read per
// check of the main process, and show works out only the properties asked
// for and writes once. Most of what is left is the Go runtime's own start
// and exit (measured on the 2-core lab machine: ~3.1 ms CPU of a show's
// ~3.6 ms and a stop's ~5.8 ms, whose rest is mostly the state file's write
// and rename and the cgroup reads); BenchmarkRunCost measures show and stop
// against an older binary.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab/labsystemd"
	"golang.org/x/sys/unix"

	"github.com/gpush/gpush/lab/procstat"
)

// systemctl's exit statuses (LSB, as systemctl uses them).
const (
	exitFailure    = 1
	exitNotActive  = 3
	exitNoSuchUnit = 4 // status of an unknown unit
	exitRefused    = 4 // a stop refused by RefuseManualStop= (EXIT_NOPERMISSION)
	exitNotLoaded  = 5 // start/stop of an unknown unit
)

// execFlag makes the binary the unit's first process: join the cgroups,
// then exec the unit's command.
const execFlag = "--fake-systemctl-exec"

// unitPath is the PATH a unit runs with (systemd's default).
const unitPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// oneShotHeap bounds the heap of a run with the collector off: a stop that
// polls for its whole timeout allocates a few MiB, a show a few KiB.
const oneShotHeap = 64 << 20

func main() {
	// A run lives a few milliseconds (a stop at most its timeouts): the
	// collector's work is wasted on it, so it runs only near oneShotHeap.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(oneShotHeap)
	if len(os.Args) > 1 && os.Args[1] == execFlag {
		os.Exit(execUnit(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// execUnit joins every cgroup.procs file given before "--", then execs the
// argv after it, so that the unit's process and all it forks are in the
// unit's cgroup before its real work starts. Failures go to fd 3, which is
// close-on-exec: the starter reads EOF on success.
func execUnit(args []string) int {
	status := os.NewFile(3, "start-status")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(status, format, a...)
		return 127
	}
	i := slices.Index(args, "--")
	if i < 0 || i == len(args)-1 {
		return fail("internal: bad exec arguments %q", args)
	}
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, procs := range args[:i] {
		if err := os.WriteFile(procs, self, 0); err != nil {
			return fail("join cgroup %s: %v", filepath.Dir(procs), err)
		}
	}
	unix.CloseOnExec(3)
	argv := args[i+1:]
	err := syscall.Exec(argv[0], argv, []string{unitPath})
	return fail("exec %s: %v", argv[0], err)
}

// cfgPath caches configPath: show and status print it, and finding it
// costs a PATH search, stats and a symlink walk.
var cfgPath string

func configPath() string {
	if cfgPath != "" {
		return cfgPath
	}
	p := findConfig()
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	cfgPath = p
	return p
}

func findConfig() string {
	if p := os.Getenv(labsystemd.ConfigEnv); p != "" {
		return p
	}
	beside := ""
	if a0 := os.Args[0]; strings.Contains(a0, "/") {
		beside = filepath.Join(filepath.Dir(a0), labsystemd.ConfigName)
	} else if p, err := exec.LookPath(a0); err == nil {
		beside = filepath.Join(filepath.Dir(p), labsystemd.ConfigName)
	}
	if beside != "" {
		if _, err := os.Stat(beside); err == nil {
			return beside
		}
	}
	// The per-host link has none beside it: resolve the executable (a
	// readlink and a symlink walk) only now.
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		c := filepath.Join(filepath.Dir(exe), labsystemd.ConfigName)
		if _, err := os.Stat(c); err == nil || beside == "" {
			return c
		}
	}
	if beside != "" {
		return beside
	}
	return labsystemd.ConfigName
}

type options struct {
	verb  string
	units []string
	props []string
	value bool
	quiet bool
}

// parseArgs reads systemctl's command line: options anywhere before "--",
// the verb, then unit names.
func parseArgs(args []string) (options, error) {
	var o options
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		switch {
		case name == "-p" || name == "--property":
			if !hasVal {
				if i+1 >= len(args) {
					return o, fmt.Errorf("option '%s' requires an argument", name)
				}
				i++
				val = args[i]
			}
			o.props = append(o.props, strings.Split(val, ",")...)
		case strings.HasPrefix(a, "-p") && !strings.HasPrefix(a, "--"):
			o.props = append(o.props, strings.Split(a[2:], ",")...)
		case a == "--value":
			o.value = true
		case a == "-q" || a == "--quiet":
			o.quiet = true
		case a == "-n" || a == "--lines":
			i++ // a value, ignored: there is no journal to tail
		case name == "--lines":
		case slices.Contains([]string{"--no-pager", "--no-block", "--no-legend", "--plain", "--full", "-l", "--no-ask-password", "--system"}, a):
		default:
			return o, fmt.Errorf("unrecognized option '%s'", a)
		}
	}
	if len(pos) == 0 {
		return o, errors.New("no verb given (this stand-in knows start, stop, restart, show, is-active, status)")
	}
	o.verb, o.units = pos[0], pos[1:]
	for i, u := range o.units {
		o.units[i] = normalize(u)
	}
	return o, nil
}

// unitSuffixes are systemd's unit types.
var unitSuffixes = []string{".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path", ".timer", ".slice", ".scope"}

// normalize appends .service to a name without a unit type, as systemctl does.
func normalize(u string) string {
	for _, s := range unitSuffixes {
		if strings.HasSuffix(u, s) {
			return u
		}
	}
	return u + ".service"
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "systemctl: %v\n", err)
		return exitFailure
	}
	cfg, err := labsystemd.Load(configPath())
	if err != nil {
		fmt.Fprintf(stderr, "fake-systemctl: %v\n", err)
		return exitFailure
	}
	m := &manager{cfg: cfg, stderr: stderr}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		fmt.Fprintf(stderr, "fake-systemctl: state dir: %v\n", err)
		return exitFailure
	}
	// One systemctl at a time per host, like jobs queued in one manager.
	unlock, err := lockDir(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(stderr, "fake-systemctl: %v\n", err)
		return exitFailure
	}
	defer unlock()
	m.hs, m.hsErr = labsystemd.Hierarchies(cfg.CgroupRoot)
	needUnit := func() bool {
		if len(o.units) == 0 {
			fmt.Fprintln(stderr, "Too few arguments.")
			return false
		}
		return true
	}
	switch o.verb {
	case "start", "stop", "restart":
		if !needUnit() {
			return exitFailure
		}
		// systemctl queues one job per unit and waits for all of them: a
		// failing unit (named on stderr) does not keep the others from their
		// job, and the exit status is the first failure's in the order
		// given. The jobs run side by side, as systemd's do, so that a slow
		// unit does not hold back the others (a restart's stop included);
		// m.cgMu keeps one unit's cgroup pruning from racing another's
		// creation under the shared system.slice.
		codes := make([]int, len(o.units))
		act := func(i int, u string) {
			switch o.verb {
			case "start":
				codes[i] = m.start(u)
			case "stop":
				codes[i] = m.stop(u)
			default:
				if codes[i] = m.stop(u); codes[i] == 0 {
					codes[i] = m.start(u)
				}
			}
		}
		if len(o.units) == 1 {
			act(0, o.units[0])
		} else {
			m.stderr = &lockedWriter{w: stderr}
			var wg sync.WaitGroup
			for i, u := range o.units {
				wg.Add(1)
				go func() {
					defer wg.Done()
					act(i, u)
				}()
			}
			wg.Wait()
		}
		for _, c := range codes {
			if c != 0 {
				return c
			}
		}
		return 0
	case "show":
		if !needUnit() {
			return exitFailure
		}
		for i, u := range o.units {
			if i > 0 && !o.value {
				fmt.Fprintln(stdout)
			}
			m.show(stdout, u, o.props, o.value)
		}
		return 0
	case "is-active":
		if !needUnit() {
			return exitFailure
		}
		code := exitNotActive
		for _, u := range o.units {
			_, st := m.current(u)
			if !o.quiet {
				fmt.Fprintln(stdout, st.Active)
			}
			if st.Active == "active" {
				code = 0
			}
		}
		return code
	case "status":
		if !needUnit() {
			return exitFailure
		}
		code := 0
		for i, u := range o.units {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			if c := m.status(stdout, stderr, u); c > code {
				code = c
			}
		}
		return code
	default:
		fmt.Fprintf(stderr, "Unknown command verb '%s'.\n", o.verb)
		return exitFailure
	}
}

// lockedWriter serializes the writes of the jobs of one call (whole lines each).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// unitState is what the fake remembers of a unit between calls.
type unitState struct {
	Active    string    `json:"active_state"` // active, inactive, failed
	Sub       string    `json:"sub_state"`    // running, dead, failed
	Result    string    `json:"result"`       // success, timeout, exit-code, signal
	MainPID   int       `json:"main_pid"`
	StartTime uint64    `json:"start_time"` // identity of MainPID
	Since     time.Time `json:"since"`
}

type manager struct {
	cfg    *labsystemd.Config
	hs     []string // cgroup hierarchies; empty when hsErr is set
	hsErr  error
	stderr io.Writer
	// cgMu serializes creating and pruning unit cgroups between the jobs
	// of one call: a prune removes an empty system.slice that another
	// unit's MkdirAll has just made, before it makes the unit's own below.
	cgMu sync.Mutex
}

func (m *manager) statePath(u string) string { return filepath.Join(m.cfg.StateDir, u+".json") }

// LogPath is where a unit's stdout and stderr go (its journal).
func (m *manager) logPath(u string) string { return filepath.Join(m.cfg.StateDir, u+".log") }

// current returns the unit's LoadState and state. A recorded main process
// that died without a stop makes the unit failed, as systemd sees it.
func (m *manager) current(u string) (string, unitState) {
	st := unitState{Active: "inactive", Sub: "dead", Result: "success"}
	if _, ok := m.cfg.Units[u]; !ok {
		return "not-found", st
	}
	if b, err := os.ReadFile(m.statePath(u)); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			fmt.Fprintf(m.stderr, "fake-systemctl: %s: %v (unit taken as inactive)\n", m.statePath(u), err)
			st = unitState{Active: "inactive", Sub: "dead", Result: "success"}
		}
	}
	if st.Active == "active" && !m.mainAlive(st) {
		st = unitState{Active: "failed", Sub: "failed", Result: "signal", Since: time.Now()}
		m.save(u, st)
	}
	if st.Active != "active" {
		st.MainPID, st.StartTime = 0, 0
		// systemd lets go of a stopped unit's cgroup once it is empty.
		m.prune(u)
	}
	return "loaded", st
}

// mainAlive reports whether the recorded main process still lives: one
// read of /proc/PID/stat for both its state and its start time (a stop
// polls this).
func (m *manager) mainAlive(st unitState) bool {
	if st.MainPID <= 0 {
		return false
	}
	s, err := procstat.Read(st.MainPID)
	return err == nil && !s.Exited() && s.StartTime == st.StartTime
}

func (m *manager) save(u string, st unitState) {
	b, _ := json.Marshal(st)
	tmp := m.statePath(u) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		err = os.Rename(tmp, m.statePath(u))
		if err == nil {
			return
		}
	}
	fmt.Fprintf(m.stderr, "fake-systemctl: cannot save the state of %s in %s\n", u, m.cfg.StateDir)
}

// cgroupDirs are the unit's cgroup in every hierarchy.
func (m *manager) cgroupDirs(u string) []string {
	var out []string
	for _, h := range m.hs {
		out = append(out, filepath.Join(h, m.cfg.UnitCgroup(u)))
	}
	return out
}

// controlGroup is the ControlGroup property: set while the unit's cgroup
// exists (also after a stop that left processes, as systemd keeps it).
func (m *manager) controlGroup(u string) string {
	for _, d := range m.cgroupDirs(u) {
		if _, err := os.Stat(d); err == nil {
			return m.cfg.UnitCgroup(u)
		}
	}
	return ""
}

// members are the live processes of the unit's cgroup.
func (m *manager) members(u string) []int {
	var all []int
	for _, d := range m.cgroupDirs(u) {
		all = append(all, labsystemd.Procs(d)...)
	}
	slices.Sort(all)
	return labsystemd.LivePids(slices.Compact(all))
}

// prune removes the unit's cgroup (and an empty system.slice) once empty.
func (m *manager) prune(u string) {
	m.cgMu.Lock()
	defer m.cgMu.Unlock()
	for _, h := range m.hs {
		labsystemd.Prune(filepath.Join(h, m.cfg.UnitCgroup(u)), filepath.Join(h, m.cfg.CgroupBase))
	}
}

func (m *manager) start(u string) int {
	load, st := m.current(u)
	if load == "not-found" {
		fmt.Fprintf(m.stderr, "Failed to start %s: Unit %s not found.\n", u, u)
		return exitNotLoaded
	}
	if st.Active == "active" {
		return 0
	}
	unit := m.cfg.Units[u]
	logf, err := os.OpenFile(m.logPath(u), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(m.stderr, "fake-systemctl: %s: %v\n", u, err)
		return exitFailure
	}
	defer logf.Close()
	var procs []string
	cgErr := m.hsErr
	if cgErr == nil {
		m.cgMu.Lock()
		for _, d := range m.cgroupDirs(u) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				cgErr = fmt.Errorf("create cgroup %s: %w", d, err)
				break
			}
			procs = append(procs, filepath.Join(d, "cgroup.procs"))
		}
		m.cgMu.Unlock()
	}
	if cgErr != nil {
		// Not root, or a read-only cgroupfs: the unit still runs, but
		// nothing ties its processes to it.
		fmt.Fprintf(m.stderr, "fake-systemctl: cgroups not writable, starting %s without a cgroup: %v\n", u, cgErr)
		m.prune(u)
		procs = nil
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(m.stderr, "fake-systemctl: %v\n", err)
		return exitFailure
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(m.stderr, "fake-systemctl: %v\n", err)
		return exitFailure
	}
	defer r.Close()
	argv := append(append([]string{execFlag}, procs...), "--")
	cmd := exec.Command(self, append(argv, unit.Exec...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.Dir = "/"
	cmd.Env = []string{unitPath}
	// Its own session: the unit outlives this systemctl and its terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		fmt.Fprintf(m.stderr, "fake-systemctl: start %s: %v\n", u, err)
		m.prune(u)
		return exitFailure
	}
	msg, _ := io.ReadAll(r)
	if len(msg) > 0 {
		cmd.Wait()
		fmt.Fprintf(logf, "%s: failed to start: %s\n", u, msg)
		m.prune(u)
		m.save(u, unitState{Active: "failed", Sub: "failed", Result: "exit-code", Since: time.Now()})
		fmt.Fprintf(m.stderr, "Job for %s failed because the control process exited with error code.\nSee \"systemctl status %s\" and \"journalctl -xeu %s\" for details.\n", u, u, u)
		return exitFailure
	}
	pid := cmd.Process.Pid
	s, err := procstat.Read(pid)
	stt := s.StartTime
	if err != nil {
		fmt.Fprintf(m.stderr, "fake-systemctl: %s: main process %d: %v\n", u, pid, err)
	}
	// Never waited for: the unit lives on after this command, as under pid 1.
	cmd.Process.Release()
	m.save(u, unitState{Active: "active", Sub: "running", Result: "success", MainPID: pid, StartTime: stt, Since: time.Now()})
	return 0
}

// signal sends sig to the unit's main process, then CONT (as systemd does
// after TERM, so that a stopped process can act on it).
func signal(pid int, sig syscall.Signal) {
	if pid <= 1 || pid == os.Getpid() {
		return
	}
	_ = syscall.Kill(pid, sig)
	if sig == syscall.SIGTERM {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// signalMember is signal for a pid read from the unit's cgroup.procs: it is
// signalled only while it is still in the unit's cgroup.
func (m *manager) signalMember(u string, pid int, sig syscall.Signal) {
	if labsystemd.SignalMember(pid, m.cfg.UnitCgroup(u), sig) && sig == syscall.SIGTERM {
		labsystemd.SignalMember(pid, m.cfg.UnitCgroup(u), syscall.SIGCONT)
	}
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finalKillWait is how long KILLed processes get to vanish.
const finalKillWait = 5 * time.Second

func (m *manager) stop(u string) int {
	load, st := m.current(u)
	if load == "not-found" {
		fmt.Fprintf(m.stderr, "Failed to stop %s: Unit %s not loaded.\n", u, u)
		return exitNotLoaded
	}
	unit := m.cfg.Units[u]
	if unit.RefuseManualStop {
		fmt.Fprintf(m.stderr, "Failed to stop %s: Operation refused, unit %s may be requested by dependency only (it is configured to refuse manual start/stop).\nSee system logs and 'systemctl status %s' for details.\n", u, u, u)
		return exitRefused
	}
	if st.Active != "active" {
		m.prune(u)
		return 0
	}
	timeout, _ := unit.Timeout() // checked by Load
	main := st.MainPID
	mainGone := func() bool { return !m.mainAlive(st) }
	killedMain := false
	switch unit.Mode() {
	case labsystemd.KillControlGroup:
		targets := m.members(u)
		if !slices.Contains(targets, main) {
			targets = append(targets, main)
		}
		for _, p := range targets {
			if p == main {
				if !mainGone() {
					signal(p, syscall.SIGTERM)
				}
				continue
			}
			m.signalMember(u, p, syscall.SIGTERM)
		}
		if !waitUntil(timeout, func() bool { return mainGone() && len(m.members(u)) == 0 }) {
			killedMain = !mainGone()
			if killedMain {
				signal(main, syscall.SIGKILL)
			}
			for _, p := range m.members(u) {
				m.signalMember(u, p, syscall.SIGKILL)
			}
			waitUntil(finalKillWait, func() bool { return mainGone() && len(m.members(u)) == 0 })
		}
	case labsystemd.KillProcess, labsystemd.KillMixed:
		if !mainGone() {
			signal(main, syscall.SIGTERM)
		}
		if !waitUntil(timeout, mainGone) {
			killedMain = true
			signal(main, syscall.SIGKILL)
			waitUntil(finalKillWait, mainGone)
		}
		if unit.Mode() == labsystemd.KillMixed {
			for _, p := range m.members(u) {
				m.signalMember(u, p, syscall.SIGKILL)
			}
			waitUntil(finalKillWait, func() bool { return len(m.members(u)) == 0 })
		}
	}
	next := unitState{Active: "inactive", Sub: "dead", Result: "success", Since: time.Now()}
	if killedMain {
		next = unitState{Active: "failed", Sub: "failed", Result: "timeout", Since: time.Now()}
	}
	if left := m.members(u); len(left) > 0 {
		// What systemd logs for KillMode=process leftovers.
		if logf, err := os.OpenFile(m.logPath(u), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			for _, p := range left {
				fmt.Fprintf(logf, "%s: Unit process %d (%s) remains running after unit stopped.\n", u, p, comm(p))
			}
			logf.Close()
		}
	}
	m.prune(u)
	m.save(u, next)
	return 0
}

func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// showOrder is the order `systemctl show` prints these properties in (the
// service interface's before the unit interface's), whatever the -p order.
var showOrder = []string{"Type", "Result", "MainPID", "ControlGroup", "KillMode", "TimeoutStopUSec",
	"Id", "Names", "Description", "LoadState", "ActiveState", "SubState", "FragmentPath"}

func (m *manager) show(w io.Writer, u string, props []string, valueOnly bool) {
	load, st := m.current(u)
	unit := m.cfg.Units[u]
	// Only what is asked for is worked out: ControlGroup stats the cgroup
	// and FragmentPath finds the config.
	value := func(p string) string {
		switch p {
		case "Type":
			return "simple"
		case "Result":
			return st.Result
		case "MainPID":
			return strconv.Itoa(st.MainPID)
		case "ControlGroup":
			return m.controlGroup(u)
		case "KillMode":
			return unit.Mode()
		case "TimeoutStopUSec":
			if load != "loaded" {
				return timespan(labsystemd.DefaultStopTimeout)
			}
			t, _ := unit.Timeout()
			return timespan(t)
		case "Id", "Names":
			return u
		case "Description":
			if load == "loaded" && unit.Description != "" {
				return unit.Description
			}
			return u
		case "LoadState":
			return load
		case "ActiveState":
			return st.Active
		case "SubState":
			return st.Sub
		case "FragmentPath":
			if load != "loaded" {
				return ""
			}
			return configPath()
		}
		return ""
	}
	var b strings.Builder
	for _, p := range showOrder {
		if len(props) > 0 && !slices.Contains(props, p) {
			continue
		}
		if !valueOnly {
			b.WriteString(p)
			b.WriteByte('=')
		}
		b.WriteString(value(p))
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}

// timespan formats d as systemd does ("1min 30s", "5s", "200ms").
func timespan(d time.Duration) string {
	var parts []string
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "min"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / u.d; n > 0 {
			parts = append(parts, strconv.FormatInt(int64(n), 10)+u.name)
			d -= n * u.d
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " ")
}

// status prints a short `systemctl status`: exit 0 active, 3 not active, 4
// unknown unit.
func (m *manager) status(w, stderr io.Writer, u string) int {
	load, st := m.current(u)
	if load == "not-found" {
		fmt.Fprintf(stderr, "Unit %s could not be found.\n", u)
		return exitNoSuchUnit
	}
	unit := m.cfg.Units[u]
	desc := unit.Description
	if desc == "" {
		desc = u
	}
	dot := "○"
	switch st.Active {
	case "active":
		dot = "●"
	case "failed":
		dot = "×"
	}
	fmt.Fprintf(w, "%s %s - %s\n", dot, u, desc)
	fmt.Fprintf(w, "     Loaded: loaded (%s; static)\n", configPath())
	since := ""
	if !st.Since.IsZero() {
		since = " since " + st.Since.Format("Mon 2006-01-02 15:04:05 MST")
	}
	active := fmt.Sprintf("%s (%s)%s", st.Active, st.Sub, since)
	if st.Active == "failed" {
		active = fmt.Sprintf("failed (Result: %s)%s", st.Result, since)
	}
	fmt.Fprintf(w, "     Active: %s\n", active)
	if st.MainPID > 0 {
		fmt.Fprintf(w, "   Main PID: %d (%s)\n", st.MainPID, comm(st.MainPID))
	}
	if cg := m.controlGroup(u); cg != "" {
		fmt.Fprintf(w, "     CGroup: %s\n", cg)
		ps := m.members(u)
		for i, p := range ps {
			branch := "├─"
			if i == len(ps)-1 {
				branch = "└─"
			}
			cl, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
			fmt.Fprintf(w, "             %s%d %s\n", branch, p, strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " ")))
		}
	}
	if st.Active != "active" {
		return exitNotActive
	}
	return 0
}
