package helper

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A manager kind knows how to find its kind of manager above a process,
// read its state and stop it. One entry each in managerKinds; the chain
// walk, the kill's report and the managers verb are written once above them.
type managerKind interface {
	// find returns the manager of this kind that p runs under, from /proc
	// and the cgroup alone (no command runs); ok is false when none is.
	find(r *managerReader, p procInfo) (m Manager, ok bool)
	// read refreshes ms, every one of this kind in the request, from the
	// host (settings, state, restart count) and says of each whether it
	// is alive. What cannot be read is alive, Restarts maybe.
	read(r *managerReader, ms []*Manager) []managerState
	// stop stops m, or says what it would do under dryRun.
	stop(r *managerReader, m Manager, grace time.Duration, dryRun bool) (outcome, reason string)
}

// managerReadTimeout bounds each command a kind runs to read its managers
// (systemctl show, podman inspect, scontrol).
const managerReadTimeout = 5 * time.Second

// managerState is what a read says of one manager.
type managerState struct {
	alive bool
	state string
}

// The kinds, in the order a chain lists them after the process parents:
// the container (or the pod around it), the unit, the Slurm job.
var managerKinds = map[string]managerKind{
	ManagerProcess:   processKind{},
	ManagerContainer: containerKind{},
	ManagerPod:       podKind{},
	ManagerUnit:      unitKind{},
	ManagerSlurm:     slurmKind{},
}

var chainOrder = []string{ManagerContainer, ManagerPod, ManagerUnit, ManagerSlurm}

// procInfo is what the kinds' find reads of one process.
type procInfo struct {
	pid int
	st  procStat
	cg  cgroupInfo
	r   *managerReader
	env map[string]string
}

// environ reads the process's environment once (empty when unreadable).
func (p *procInfo) environ() map[string]string {
	if p.env == nil {
		p.env = map[string]string{}
		if b, err := os.ReadFile(p.r.s.proc.path(p.pid, "environ")); err == nil {
			for _, kv := range strings.Split(string(b), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					p.env[k] = v
				}
			}
		}
	}
	return p.env
}

// envVar is one variable of pid's environment, "" when unset or unreadable.
func (s *scanner) envVar(pid int, key string) string {
	b, err := os.ReadFile(s.proc.path(pid, "environ"))
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// managerReader resolves managers for one request; each kind reads the
// host once for all of its managers (one systemctl show for every unit).
type managerReader struct {
	s   *scanner
	ctx context.Context
	// cache holds what a kind read during this request, by its own keys.
	cache map[string]any
	// reuseUnits: a unit reading of the session under unitReuse old will
	// do (a snapshot's look; never a read after signals, whose readers
	// are fresh ones).
	reuseUnits bool
}

func (s *scanner) managerReader(ctx context.Context) *managerReader {
	return &managerReader{s: s, ctx: ctx, cache: map[string]any{}}
}

// knownSupervisors restart what they run by design (comm or argv[0]'s base,
// or a python module run with -m): a process manager named so restarts,
// any other live parent may.
var knownSupervisors = []string{"supervisord", "torchrun", "torch.distributed.run", "torch.distributed.launch",
	"raylet", "ray", "s6-supervise", "runsv", "monit", "pm2*", "circusd", "gunicorn", "systemd-run"}

// managerReapers adopt or run processes but never start a worker again;
// the walk up a holder's parents stops at them (the manager of what they
// run is its unit, container or job).
var managerReapers = append(slices.Clone(systemReapers), "slurmstepd", "sshd", "sudo", "su", "login", "tmux*", "screen", "containerd", "dockerd", "kubelet", "crio", "podman",
	// The runtimes' monitors, a container's process's parent: its runtime
	// restarts it by policy (the container manager), they do not.
	"conmon", "containerd-shim*")

// chains returns the manager chain of each pid (innermost first), read
// in one pass: the process parents, then a container or pod, the unit
// and the Slurm job; every kind refreshed once for all the pids.
func (r *managerReader) chains(pids []int) map[int][]Manager { return r.chainsExcept(pids, nil) }

// chainsExcept is chains leaving the kinds in unread as found (from the
// process's own files) and not read: the caller reads them later.
func (r *managerReader) chainsExcept(pids []int, unread map[string]bool) map[int][]Manager {
	out := map[int][]Manager{}
	for _, pid := range pids {
		out[pid] = r.skeleton(pid)
	}
	byKind := map[string][]*Manager{}
	for _, pid := range pids {
		for i := range out[pid] {
			m := &out[pid][i]
			byKind[m.Kind] = append(byKind[m.Kind], m)
		}
	}
	for kind, ms := range byKind {
		if unread[kind] {
			continue
		}
		managerKinds[kind].read(r, ms)
		for _, m := range ms {
			m.Why = managerLine(*m)
		}
	}
	return out
}

// skeleton is pid's chain before the kinds read the host.
func (r *managerReader) skeleton(pid int) []Manager {
	st, err := r.s.proc.stat(pid)
	if err != nil {
		return nil
	}
	var chain []Manager
	// The direct parent, then known supervisors above it.
	seen := map[int]bool{}
	for p, first := st.PPID, true; p > 1 && !seen[p]; first = false {
		seen[p] = true
		pst, err := r.s.proc.stat(p)
		if err != nil || p == r.s.self || r.s.guarded[p] || r.s.isKernelThread(pst) || isReaperComm(pst.Comm) {
			break
		}
		argv := r.s.proc.cmdline(p)
		if (pst.State != "Z" && pst.State != "X" || r.s.proc.liveThreads(p)) && (first || isKnownSupervisor(pst.Comm, argv)) {
			m := Manager{Kind: ManagerProcess, Identity: Identity{PID: p, StartTime: pst.StartTime, BootID: r.s.bootID},
				Comm: pst.Comm, Cmdline: argv, Restarts: RestartsMaybe, Stop: []string{"kill", strconv.Itoa(p)}}
			if b, err := os.ReadFile(r.s.proc.path(p, "cgroup")); err == nil {
				m.Unit = parseCgroup(b).Unit
			}
			if isKnownSupervisor(pst.Comm, argv) {
				m.Restarts = RestartsYes
			}
			chain = append(chain, m)
		}
		p = pst.PPID
	}
	info := procInfo{pid: pid, st: st, r: r}
	if b, err := os.ReadFile(r.s.proc.path(pid, "cgroup")); err == nil {
		info.cg = parseCgroup(b)
	}
	for _, kind := range chainOrder {
		if m, ok := managerKinds[kind].find(r, info); ok {
			chain = append(chain, m)
		}
	}
	return chain
}

func isReaperComm(comm string) bool {
	for _, p := range managerReapers {
		if ok, _ := path.Match(p, comm); ok {
			return true
		}
	}
	return false
}

// isKnownSupervisor: comm, argv[0]'s base or a `python -m MODULE` is a
// known supervisor.
func isKnownSupervisor(comm string, argv []string) bool {
	names := []string{comm}
	if len(argv) > 0 {
		names = append(names, path.Base(argv[0]))
		for i, a := range argv[1:] {
			if a == "-m" && i+2 < len(argv) {
				names = append(names, argv[i+2])
			}
		}
	}
	for _, n := range names {
		for _, p := range knownSupervisors {
			if ok, _ := path.Match(p, n); ok {
				return true
			}
		}
	}
	return false
}

// nowTicks is the host's clock in Identity.StartTime's unit (clock ticks
// since boot), rounded down: a process started after this call has a
// start time at or above it. 0 when /proc/uptime cannot be read.
func (s *scanner) nowTicks() uint64 {
	up, err := s.proc.uptime()
	if err != nil || up <= 0 {
		return 0
	}
	return uint64(up * float64(clockTicks()))
}

// fillManagers sets every holder's Managers.
func (s *scanner) fillManagers(ctx context.Context, holders []Holder) {
	if len(holders) == 0 {
		return
	}
	pids := make([]int, len(holders))
	for i, h := range holders {
		pids[i] = h.PID
	}
	r := s.managerReader(ctx)
	r.reuseUnits = true
	chains := r.chains(pids)
	for i := range holders {
		holders[i].Managers = chains[holders[i].PID]
	}
}

// killedManagers are the managers of the processes a kill ended (chains
// read before the signals), read again after it: those still alive that
// restart or may, each once, with the killed pids it manages.
func killedManagers(ctx context.Context, src KillSource, chains map[int][]Manager, results []KillResult) []Manager {
	signalled := map[int]bool{}
	for _, res := range results {
		if res.Outcome == OutcomeExited || res.Outcome == OutcomeKilled || res.Outcome == OutcomeSurvived {
			signalled[res.PID] = true
		}
	}
	var out []*Manager
	byKey := map[string]*Manager{}
	for _, res := range results {
		if res.Outcome != OutcomeExited && res.Outcome != OutcomeKilled {
			continue
		}
		for _, m := range chains[res.PID] {
			if m.Kind == ManagerProcess && signalled[m.PID] || m.Restarts == RestartsNo {
				continue
			}
			k := m.Key()
			if o, ok := byKey[k]; ok {
				o.Children = appendMissing(o.Children, res.PID)
				continue
			}
			m.Children = []int{res.PID}
			c := m
			byKey[k] = &c
			out = append(out, &c)
		}
	}
	if len(out) == 0 {
		return nil
	}
	live := src.Alive(ctx, out)
	var alive []Manager
	for i, m := range out {
		if live[i] && m.Restarts != RestartsNo {
			alive = append(alive, *m)
		}
	}
	return alive
}

func appendMissing(xs []int, x int) []int {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

// read refreshes ms by kind and returns their states in ms's order.
func (r *managerReader) read(ms []*Manager) []managerState {
	states := make([]managerState, len(ms))
	byKind := map[string][]int{}
	for i, m := range ms {
		if m.Kind == "" {
			m.Kind = ManagerProcess
		}
		byKind[m.Kind] = append(byKind[m.Kind], i)
	}
	for kind, idx := range byKind {
		k, ok := managerKinds[kind]
		if !ok {
			for _, i := range idx {
				states[i] = managerState{alive: true, state: "unknown kind " + kind}
			}
			continue
		}
		sub := make([]*Manager, len(idx))
		for j, i := range idx {
			sub[j] = ms[i]
		}
		for j, st := range k.read(r, sub) {
			states[idx[j]] = st
			ms[idx[j]].Why = managerLine(*ms[idx[j]])
		}
	}
	return states
}

// Managers is the managers verb: read the given managers again, or stop
// them (outermost first, the order an operator would: a unit before the
// process it runs).
func Managers(ctx context.Context, req ManagersRequest) (*ManagersResponse, error) {
	start := time.Now()
	if req.Action != ManagersStatus && req.Action != ManagersStop {
		return nil, fmt.Errorf("managers: action %q: want %s or %s", req.Action, ManagersStatus, ManagersStop)
	}
	for i, m := range req.Managers {
		if _, ok := managerKinds[m.Kind]; !ok {
			return nil, fmt.Errorf("managers: manager %d: unknown kind %q", i+1, m.Kind)
		}
	}
	s, err := newScanner(req.Config)
	if err != nil {
		return nil, err
	}
	r := s.managerReader(ctx)
	grace := req.Grace.D()
	if grace <= 0 {
		grace = DefaultGrace
	}
	ms := make([]*Manager, len(req.Managers))
	for i := range req.Managers {
		m := req.Managers[i]
		ms[i] = &m
	}
	states := r.read(ms)
	resp := &ManagersResponse{Version: Version, Results: make([]ManagerResult, len(ms))}
	for i, m := range ms {
		resp.Results[i] = ManagerResult{Manager: *m, Alive: states[i].alive, State: states[i].state}
	}
	if req.Action == ManagersStop {
		for i, m := range ms {
			res := &resp.Results[i]
			switch {
			case !states[i].alive:
				res.Outcome = StopAlready
			case m.Kind == ManagerPod:
				res.Outcome, res.Reason = StopRefused, "gpush never deletes Kubernetes objects: "+strings.Join(m.Stop, " ")
			default:
				if err := ctx.Err(); err != nil {
					res.Outcome, res.Reason = StopFailed, "not stopped: "+err.Error()
					continue
				}
				res.Outcome, res.Reason = managerKinds[m.Kind].stop(r, *m, grace, req.DryRun)
			}
		}
		// What the stops left: read again, so Alive says what is true now.
		if !req.DryRun {
			again := make([]*Manager, len(ms))
			for i := range ms {
				c := *ms[i]
				again[i] = &c
			}
			for i, st := range r.fresh().read(again) {
				resp.Results[i].Manager, resp.Results[i].Alive, resp.Results[i].State = *again[i], st.alive, st.state
			}
		}
	}
	resp.Elapsed = Duration(time.Since(start))
	return resp, nil
}

// fresh is a reader with nothing cached: a state after a stop is read anew.
func (r *managerReader) fresh() *managerReader { return r.s.managerReader(r.ctx) }

// managerLine is a manager's report line: what it is and how to stop it.
func managerLine(m Manager) string {
	what := ManagerLabel(m)
	verb := "restarts its workers"
	if m.Restarts == RestartsMaybe {
		verb = "may restart its workers"
	}
	if len(m.Stop) == 0 {
		return what + " " + verb
	}
	return what + " " + verb + ": " + strings.Join(m.Stop, " ")
}

// ManagerLabel names a manager for a table or a report:
// "unit sglang.service (Restart=always, 15s)", "podman container w1
// (restart=always, 3 restarts)", "pod default/vllm-0", "slurm job 42
// (requeue)", "pid 633 (python3 sup.py)".
func ManagerLabel(m Manager) string {
	switch m.Kind {
	case ManagerUnit:
		var parts []string
		if m.Restart != "" {
			parts = append(parts, "Restart="+m.Restart)
		}
		if m.DelayKnown && m.Restart != "" && m.Restart != "no" {
			parts = append(parts, m.Delay.D().String())
		}
		if m.ActiveState != "" {
			st := m.ActiveState
			if m.SubState != "" && m.SubState != m.ActiveState {
				st += " (" + m.SubState + ")"
			}
			parts = append(parts, st)
		}
		return "unit " + m.Unit + parens(parts)
	case ManagerContainer:
		name := m.ContainerName
		if name == "" {
			name = ShortID(m.ContainerID)
		}
		var parts []string
		if m.RestartPolicy != "" {
			parts = append(parts, "restart="+m.RestartPolicy)
		}
		if m.RestartCount > 0 {
			parts = append(parts, fmt.Sprintf("%d restarts", m.RestartCount))
		}
		rt := m.Runtime
		if rt == "" {
			rt = "container"
		} else {
			rt += " container"
		}
		return rt + " " + name + parens(parts)
	case ManagerPod:
		name := "uid " + m.PodUID
		if m.Pod != "" {
			name = m.Namespace + "/" + m.Pod
		}
		return "pod " + name + " (the kubelet restarts its containers)"
	case ManagerSlurm:
		var parts []string
		if m.JobUser != "" {
			parts = append(parts, "user "+m.JobUser)
		}
		if m.Step != "" {
			parts = append(parts, "step "+m.Step)
		}
		if m.Requeue {
			parts = append(parts, "requeue")
		}
		return "slurm job " + m.JobID + parens(parts)
	}
	l := Label(m.PID, m.Comm, m.Cmdline)
	if m.Unit != "" && strings.HasSuffix(m.Unit, ".service") {
		l += " in " + m.Unit
	}
	return l
}

func parens(parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// processKind: a live parent of a worker, or a known supervisor above it.
type processKind struct{}

func (processKind) find(*managerReader, procInfo) (Manager, bool) { return Manager{}, false }

func (processKind) read(r *managerReader, ms []*Manager) []managerState {
	out := make([]managerState, len(ms))
	for i, m := range ms {
		if m.BootID == "" {
			m.BootID = r.s.bootID
		}
		alive, _, state := liveness(&hostKill{s: r.s}, m.Identity)
		if m.BootID != r.s.bootID {
			alive = false
		}
		if alive && (state == "Z" || state == "X") && !r.s.proc.liveThreads(m.PID) {
			alive = false
		}
		out[i] = managerState{alive: alive, state: "gone"}
		if alive {
			out[i].state = "running (state " + state + ")"
		}
		if m.Restarts == "" {
			m.Restarts = RestartsMaybe
		}
		if len(m.Stop) == 0 {
			m.Stop = []string{"kill", strconv.Itoa(m.PID)}
		}
	}
	return out
}

// stop kills the process and its tree (TERM, grace, KILL), by identity.
func (processKind) stop(r *managerReader, m Manager, grace time.Duration, dryRun bool) (string, string) {
	if dryRun {
		return StopWould, "would kill " + Label(m.PID, m.Comm, m.Cmdline) + " and its tree"
	}
	resp, err := Kill(r.ctx, KillRequest{Config: r.s.cfg, Targets: []Identity{m.Identity}, Tree: true, Grace: Duration(grace)})
	if err != nil {
		return StopFailed, err.Error()
	}
	for _, k := range resp.Results {
		if k.PID != m.PID {
			continue
		}
		switch k.Outcome {
		case OutcomeExited, OutcomeKilled:
			return StopStopped, fmt.Sprintf("%s %s (%d processes of its tree signalled)", k.Outcome, Label(m.PID, m.Comm, m.Cmdline), len(resp.Results))
		default:
			return StopFailed, k.Outcome + ": " + k.Reason
		}
	}
	return StopFailed, "the kill did not report it"
}

// unitKind: the systemd service a process runs in.
type unitKind struct{}

func (unitKind) find(_ *managerReader, p procInfo) (Manager, bool) {
	if !strings.HasSuffix(p.cg.Unit, ".service") {
		return Manager{}, false
	}
	return Manager{Kind: ManagerUnit, Unit: p.cg.Unit, Restarts: RestartsMaybe}, true
}

func (unitKind) read(r *managerReader, ms []*Manager) []managerState {
	out := make([]managerState, len(ms))
	var names []string
	for _, m := range ms {
		if !slices.Contains(names, m.Unit) {
			names = append(names, m.Unit)
		}
	}
	props := map[string]map[string]string{}
	systemctl, why := findSystemd(r.s.cfg)
	if systemctl != "" {
		all, err := lookUnits(r.ctx, systemctl, managerReadTimeout, names, r.reuseUnits)
		if err != nil {
			why = err.Error()
		}
		for i, n := range names {
			if err == nil {
				props[n] = all[i]
			}
		}
	}
	for i, m := range ms {
		m.Stop = []string{"systemctl", "stop", m.Unit}
		p, ok := props[m.Unit]
		if !ok {
			m.Restarts = RestartsMaybe
			out[i] = managerState{alive: true, state: "unknown: " + why}
			continue
		}
		m.Restart, m.ActiveState, m.SubState = p["Restart"], p["ActiveState"], p["SubState"]
		if d, ok := parseSystemdUSec(p["RestartUSec"]); ok {
			m.Delay, m.DelayKnown = Duration(d), true
		}
		switch m.Restart {
		case "", "no":
			m.Restarts = RestartsNo
		case "on-success":
			// A killed worker did not succeed; its unit's next exit might.
			m.Restarts = RestartsMaybe
		default:
			m.Restarts = RestartsYes
		}
		switch m.ActiveState {
		case "inactive", "failed":
			out[i] = managerState{alive: false, state: m.ActiveState}
		default:
			out[i] = managerState{alive: true, state: m.ActiveState + " (" + m.SubState + ")"}
		}
	}
	return out
}

// parseSystemdUSec reads systemctl show's RestartUSec ("100ms", "15s",
// "1min 30s", or a bare number of microseconds with --value=... older).
func parseSystemdUSec(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || v == "infinity" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Microsecond, true
	}
	var total time.Duration
	for _, f := range strings.Fields(v) {
		i := strings.IndexFunc(f, func(c rune) bool { return (c < '0' || c > '9') && c != '.' })
		if i <= 0 {
			return 0, false
		}
		n, err := strconv.ParseFloat(f[:i], 64)
		if err != nil {
			return 0, false
		}
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
			"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[f[i:]]
		if unit == 0 {
			return 0, false
		}
		total += time.Duration(n * float64(unit))
	}
	return total, true
}

func (unitKind) stop(r *managerReader, m Manager, _ time.Duration, dryRun bool) (string, string) {
	if dryRun {
		return StopWould, "would run systemctl stop " + m.Unit
	}
	resp, err := Unit(r.ctx, UnitRequest{Config: r.s.cfg, Action: UnitStop, Unit: m.Unit})
	if err != nil {
		return StopFailed, err.Error()
	}
	if !resp.OK && resp.ActiveState != "inactive" && resp.ActiveState != "failed" {
		return StopFailed, resp.Reason
	}
	return StopStopped, "systemctl stop " + m.Unit + ": " + resp.ActiveState
}
