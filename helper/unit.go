package helper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultUnitTimeout bounds a systemctl call when UnitRequest.Timeout is 0.
const DefaultUnitTimeout = 90 * time.Second

// Where systemd is looked for; tests on hosts with systemd may not change them.
var (
	systemdRunDir = "/run/systemd/system"
	cgroupRoot    = "/sys/fs/cgroup"
	systemctlDirs = []string{"/usr/bin/systemctl", "/bin/systemctl"}
)

// unitTypes are systemd's unit suffixes.
var unitTypes = []string{"service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"}

// NormalizeUnit validates a unit name by systemd's rules and appends
// ".service" when it has no unit-type suffix (as systemctl does).
func NormalizeUnit(name string) (string, error) {
	if name == "" {
		return "", errors.New("unit name is empty")
	}
	if strings.HasPrefix(name, "-") {
		return "", fmt.Errorf("unit name %q: must not start with '-'", name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_.\\@-", r)
		if !ok {
			return "", fmt.Errorf("unit name %q: character %q at %d not allowed (only A-Z a-z 0-9 : _ . \\ @ -)", name, r, i)
		}
	}
	hasType := false
	if dot := strings.LastIndexByte(name, '.'); dot >= 0 {
		for _, t := range unitTypes {
			if name[dot+1:] == t {
				hasType = true
			}
		}
	}
	if !hasType {
		name += ".service"
	}
	if len(name) > 255 {
		return "", fmt.Errorf("unit name %.40q...: %d bytes, limit 255", name, len(name))
	}
	prefix := name[:strings.LastIndexByte(name, '.')]
	if prefix == "" {
		return "", fmt.Errorf("unit name %q: empty name before the suffix", name)
	}
	if at := strings.IndexByte(prefix, '@'); at >= 0 {
		if at == 0 {
			return "", fmt.Errorf("unit name %q: empty template name before '@'", name)
		}
		if at == len(prefix)-1 {
			return "", fmt.Errorf("unit name %q: template without an instance (name@instance.service)", name)
		}
		if strings.Count(prefix, "@") > 1 {
			return "", fmt.Errorf("unit name %q: more than one '@'", name)
		}
	}
	return name, nil
}

// findSystemd returns systemctl's path, or why systemd cannot be driven.
func findSystemd(cfg Config) (string, string) {
	if cfg.Systemctl != "" {
		fi, err := os.Stat(cfg.Systemctl)
		if err != nil {
			return "", fmt.Sprintf("systemctl %q (gpush_systemctl): %v", cfg.Systemctl, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Sprintf("systemctl %q (gpush_systemctl) is not an executable file", cfg.Systemctl)
		}
		return cfg.Systemctl, ""
	}
	if fi, err := os.Stat(systemdRunDir); err != nil || !fi.IsDir() {
		return "", "systemd is not running on this host (no " + systemdRunDir + ")"
	}
	if p, err := exec.LookPath("systemctl"); err == nil {
		return p, ""
	}
	for _, p := range systemctlDirs {
		if _, err := os.Stat(p); err == nil {
			return p, ""
		}
	}
	return "", "systemctl not found on PATH or in /usr/bin, /bin"
}

// Unit stops, starts, restarts or reports one systemd unit (req.Unit), or
// several in one call (req.Units), with systemctl run as an argument vector
// under a deadline. After a stop it lists what is still alive in each unit's
// cgroup and the GPU holders that belong to it. Several units cost what one
// does: one `systemctl show` before, one action, one show after and one
// snapshot; each unit still gets its own truthful result, in req.Units' order,
// in the response's Units.
func Unit(ctx context.Context, req UnitRequest) (*UnitResponse, error) {
	start := time.Now()
	switch req.Action {
	case UnitStop, UnitStart, UnitRestart, UnitStatus:
	default:
		return nil, fmt.Errorf("unit action %q: want stop, start, restart or status", req.Action)
	}
	names, err := requestUnits(req)
	if err != nil {
		return nil, err
	}
	batch := len(req.Units) > 0
	units := make([]*UnitResponse, len(names))
	for i, n := range names {
		units[i] = &UnitResponse{Version: Version, Unit: n, Action: req.Action}
	}
	resp := units[0]
	if batch {
		resp = &UnitResponse{Version: Version, Action: req.Action}
	}
	defer func() {
		el := Duration(time.Since(start))
		resp.Elapsed = el
		if batch {
			resp.OK, resp.Units = true, make([]UnitResponse, len(units))
			bad := 0
			for i, u := range units {
				u.Elapsed = el
				resp.Units[i] = *u
				if !u.OK {
					resp.OK = false
					bad++
				}
			}
			if bad > 0 && resp.Reason == "" {
				resp.Reason = fmt.Sprintf("%d of %d units not ok", bad, len(units))
			}
		}
	}()
	systemctl, why := findSystemd(req.Config)
	if systemctl == "" {
		resp.Reason = why
		for _, u := range units {
			u.Reason = why
		}
		return resp, nil
	}
	resp.Systemd = true
	for _, u := range units {
		u.Systemd = true
	}
	// The look before and the action share the unit's timeout; the look
	// after has its own short one, so that a timed-out action still reports
	// the unit's state. systemd runs the jobs of one systemctl call side by
	// side, so the timeout still bounds each unit's action as it does alone.
	timeout := unitTimeout(req)
	actCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Look before acting: a unit systemd does not know is never acted on,
	// and is never reported as stopped (a typo in a unit name is not a free).
	// Before an action the session's reading of the units will do when it
	// is under unitReuse old (a free's snapshot read them just before);
	// status always reads them now.
	pre, err := lookUnits(actCtx, systemctl, timeout, names, req.Action != UnitStatus)
	if err != nil {
		return nil, err
	}
	var known []*UnitResponse
	for i, u := range units {
		u.fill(pre[i])
		u.PriorActiveState = u.ActiveState
		if why := u.Unknown(); why != "" {
			u.Reason = why
			continue
		}
		known = append(known, u)
	}
	if len(known) == 0 {
		if batch && req.Action != UnitStatus {
			resp.Reason = refusal(req.Action, names)
		}
		return resp, nil
	}
	// A list with one typo acts on none: stopping the valid units and then
	// failing on the typo leaves the host half-done and the operator asking
	// what was. Status only looks, so it answers for each unit.
	if req.Action != UnitStatus {
		if missing := RefuseUnknown(req.Action, units); len(missing) > 0 {
			resp.Reason = refusal(req.Action, missing)
			return resp, nil
		}
	}
	knownNames := make([]string, len(known))
	for i, u := range known {
		knownNames[i] = u.Unit
	}
	var actionErr error
	var actionStderr []byte
	if req.Action != UnitStatus {
		sessionOf(ctx).forgetUnits(systemctl, knownNames)
		_, errb, err := runBounded(actCtx, timeout, append([]string{systemctl, req.Action, "--"}, knownNames...))
		if err != nil {
			actionErr, actionStderr = err, errb
		}
		post, err := lookUnits(ctx, systemctl, unitAfterTimeout(req), knownNames, false)
		if err != nil {
			return nil, err
		}
		for i, u := range known {
			u.fill(post[i])
		}
	}
	if req.Action == UnitStop || req.Action == UnitStatus {
		if err := fillUnitLeftovers(ctx, req.Config, known); err != nil {
			return nil, err
		}
	}
	// When the failure names some units, it is theirs; when it names none
	// (a timeout), it concerns every unit that did not get there.
	attributed := false
	for _, u := range known {
		attributed = attributed || linesNaming(actionStderr, u.Unit) != ""
	}
	for _, u := range known {
		u.judge(actionErr, actionStderr, len(known), attributed)
	}
	return resp, nil
}

// requestUnits validates and normalizes the request's unit names: Unit, or
// every one of Units (none may repeat another).
func requestUnits(req UnitRequest) ([]string, error) {
	if len(req.Units) == 0 {
		name, err := NormalizeUnit(req.Unit)
		if err != nil {
			return nil, err
		}
		return []string{name}, nil
	}
	if req.Unit != "" {
		return nil, fmt.Errorf("unit request: unit %q and units %q both given (one or the other)", req.Unit, req.Units)
	}
	names := make([]string, len(req.Units))
	at := map[string]int{}
	for i, u := range req.Units {
		n, err := NormalizeUnit(u)
		if err != nil {
			return nil, fmt.Errorf("units[%d]: %w", i, err)
		}
		if j, dup := at[n]; dup {
			return nil, fmt.Errorf("units[%d]: unit %q repeats units[%d] (%s)", i, u, j, n)
		}
		at[n], names[i] = i, n
	}
	return names, nil
}

// judge sets OK and Reason of a known unit from its state after the action.
// actionErr is the action's failure (stderr its output), shared by the n
// units it acted on: with one unit it is that unit's, as it always was; with
// several only the stderr lines that name a unit are that unit's (or, when
// attributed is false, no line names any unit, the failure of every unit
// that did not get there), and a unit that reached the state asked for is ok
// whatever the others did.
func (r *UnitResponse) judge(actionErr error, stderr []byte, n int, attributed bool) {
	var ownErr error
	if actionErr != nil {
		if n == 1 {
			ownErr = withOutput(actionErr, stderr)
		} else if lines := linesNaming(stderr, r.Unit); lines != "" {
			ownErr = withOutput(actionErr, []byte(lines))
		}
	}
	masked := r.LoadState == "masked"
	reached := false
	switch r.Action {
	case UnitStop:
		reached = (r.ActiveState == "inactive" || r.ActiveState == "failed") && len(r.Remaining) == 0 && len(r.GPUHolders) == 0
	case UnitStart, UnitRestart:
		reached = r.ActiveState == "active" || r.ActiveState == "activating" || r.ActiveState == "reloading"
	default:
		reached = true
	}
	switch {
	case masked && (r.Action == UnitStart || r.Action == UnitRestart):
		r.Reason = "unit " + r.Unit + " is masked: it cannot be started"
	case ownErr != nil && (n == 1 || !reached):
		r.Reason = ownErr.Error()
	case reached:
		r.OK = true
	case r.Action == UnitStop:
		r.Reason = fmt.Sprintf("after stop: state %s, %d processes left in the cgroup, %d GPU holders of the unit", r.ActiveState, len(r.Remaining), len(r.GPUHolders))
	default:
		r.Reason = "after " + r.Action + ": state " + r.ActiveState + "/" + r.SubState
	}
	if !r.OK && ownErr == nil && actionErr != nil && !attributed && !masked {
		// No line names a unit (a timeout): the call that acted on this
		// one failed as a whole.
		r.Reason += fmt.Sprintf(" (systemctl %s of %d units: %v)", r.Action, n, withOutput(actionErr, stderr))
	}
	if masked && r.OK {
		// Stopped or looked at, and true; the operator still learns the unit is masked.
		r.Reason = "unit " + r.Unit + " is masked"
	}
}

// linesNaming returns the lines of out that name unit as a whole name
// ("Failed to stop a.service: ..." names a.service, not b-a.service).
func linesNaming(out []byte, unit string) string {
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		for rest, off := line, 0; ; {
			i := strings.Index(rest, unit)
			if i < 0 {
				break
			}
			at := off + i
			end := at + len(unit)
			if (at == 0 || !isUnitByte(line[at-1])) && (end == len(line) || !isUnitByte(line[end]) || line[end] == ':') {
				keep = append(keep, strings.TrimSpace(line))
				break
			}
			rest, off = line[at+1:], at+1
		}
	}
	return strings.Join(keep, "\n")
}

// isUnitByte reports whether c may be part of a unit name.
func isUnitByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":_.\\@-", c) >= 0
}

// unitTimeout is the deadline for a unit request's systemctl calls up to
// and including the action.
func unitTimeout(req UnitRequest) time.Duration {
	if t := req.Timeout.D(); t > 0 {
		return t
	}
	return DefaultUnitTimeout
}

// unitAfterTimeout bounds the `systemctl show` after the action.
func unitAfterTimeout(req UnitRequest) time.Duration {
	return min(unitTimeout(req), 10*time.Second)
}

// showProps are the properties every `systemctl show` of a unit reads:
// the unit verb's and a unit manager's, so that one reading serves both
// (session.freshUnits).
var showProps = []string{"LoadState", "ActiveState", "SubState", "MainPID", "ControlGroup", "Restart", "KillMode", "RestartUSec", "NRestarts"}

// lookUnits reads names as showUnits does and keeps the reading in ctx's
// session; with reuse, the session's reading under unitReuse old that no
// action of the session came after will do instead (freshUnits).
func lookUnits(ctx context.Context, systemctl string, timeout time.Duration, names []string, reuse bool) ([]map[string]string, error) {
	if reuse {
		if all, ok := sessionOf(ctx).freshUnits(systemctl, names); ok {
			return all, nil
		}
	}
	all, err := showUnits(ctx, systemctl, timeout, names)
	if err != nil {
		return nil, err
	}
	sessionOf(ctx).noteUnits(systemctl, names, all)
	return all, nil
}

// showUnits runs one `systemctl show -p ... -- name...` and parses its
// blocks: systemctl prints one per unit, in the order given, separated by a
// blank line.
func showUnits(ctx context.Context, systemctl string, timeout time.Duration, names []string) ([]map[string]string, error) {
	argv := []string{systemctl, "show"}
	for _, p := range showProps {
		argv = append(argv, "-p", p)
	}
	what := "unit " + names[0]
	if len(names) > 1 {
		what = "units " + strings.Join(names, " ")
	}
	out, errb, err := runBounded(ctx, timeout, append(append(argv, "--"), names...))
	if err != nil {
		return nil, fmt.Errorf("%s: systemctl show: %w", what, withOutput(err, errb))
	}
	blocks := strings.Split(strings.TrimSpace(string(out)), "\n\n")
	if len(blocks) != len(names) {
		return nil, fmt.Errorf("%s: systemctl show gave %d blocks of properties for %d units: %.300q", what, len(blocks), len(names), out)
	}
	all := make([]map[string]string, len(names))
	for i, b := range blocks {
		all[i] = parseShow([]byte(b))
		if all[i]["LoadState"] == "" {
			return nil, fmt.Errorf("unit %s: systemctl show gave no LoadState: %.200q", names[i], b)
		}
	}
	return all, nil
}

// Unknown says why the unit cannot be acted on when systemd has no such
// unit, or "". A unit whose file was removed while it ran is "not-found"
// but still active: that one is real and may be stopped.
func (r *UnitResponse) Unknown() string {
	switch r.LoadState {
	case "not-found":
		if r.ActiveState == "" || r.ActiveState == "inactive" {
			return "unit " + r.Unit + " not found"
		}
	case "bad-setting", "error":
		if r.ActiveState == "" || r.ActiveState == "inactive" {
			return "unit " + r.Unit + " could not be loaded (LoadState=" + r.LoadState + ")"
		}
	}
	return ""
}

// RefuseUnknown applies the rule that a stop, start or restart of a list
// naming a unit systemd does not know acts on no unit of it: when some of
// units are Unknown it returns their names and marks every unit not ok,
// the unknown ones with why, the others refused because of them. It is
// the helper's rule, and what --check (which only looks) reports.
func RefuseUnknown(action string, units []*UnitResponse) []string {
	var missing []string
	for _, u := range units {
		if u.Unknown() != "" {
			missing = append(missing, u.Unit)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	for _, u := range units {
		u.OK = false
		if why := u.Unknown(); why != "" {
			u.Reason = why
		} else {
			u.Reason = refusal(action, missing)
		}
	}
	return missing
}

// refusal says why no unit of a list was acted on.
func refusal(action string, missing []string) string {
	what := "unit " + missing[0] + " is"
	if len(missing) > 1 {
		what = "units " + strings.Join(missing, ", ") + " are"
	}
	return fmt.Sprintf("no unit of the list was %s: %s not found", pastTense(action), what)
}

func pastTense(action string) string {
	switch action {
	case UnitStop:
		return "stopped"
	case UnitStart:
		return "started"
	case UnitRestart:
		return "restarted"
	}
	return action + "ed"
}

// fill copies the shown properties into the response.
func (r *UnitResponse) fill(props map[string]string) {
	r.LoadState, r.ActiveState, r.SubState = props["LoadState"], props["ActiveState"], props["SubState"]
	r.ControlGroup, r.Restart, r.KillMode = props["ControlGroup"], props["Restart"], props["KillMode"]
	r.MainPID, _ = strconv.Atoi(props["MainPID"])
}

// parseShow reads `systemctl show` Key=Value lines.
func parseShow(b []byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

// fillUnitLeftovers lists processes in each unit's cgroup and the GPU
// holders that belong to the unit, from one snapshot for all of them.
func fillUnitLeftovers(ctx context.Context, cfg Config, units []*UnitResponse) error {
	s, err := newScanner(cfg)
	if err != nil {
		return err
	}
	s.noManagers, s.holdersOnly = true, true
	for _, u := range units {
		if u.ControlGroup == "" {
			continue
		}
		pids := unitCgroupProcs(cgroupRoot, u.ControlGroup)
		if pids == nil {
			pids = s.pidsInCgroup(u.ControlGroup)
		}
		for _, pid := range pids {
			st, err := s.proc.stat(pid)
			if err != nil || st.State == "Z" {
				continue
			}
			u.Remaining = append(u.Remaining, Proc{
				Identity: Identity{PID: pid, StartTime: st.StartTime, BootID: s.bootID},
				Comm:     st.Comm, Cmdline: s.proc.cmdline(pid), State: st.State,
			})
		}
	}
	snap, err := s.snapshot(ctx)
	if err != nil {
		if len(units) == 1 {
			return fmt.Errorf("unit %s: %w", units[0].Unit, err)
		}
		return fmt.Errorf("units' GPU holders: %w", err)
	}
	for _, h := range snap.Holders {
		for _, u := range units {
			if h.Unit == u.Unit || (u.ControlGroup != "" && inCgroup(h.Cgroup, u.ControlGroup)) {
				u.GPUHolders = append(u.GPUHolders, h)
			}
		}
	}
	return nil
}

// inCgroup reports whether path is cg or below it.
func inCgroup(path, cg string) bool {
	cg = strings.TrimSuffix(cg, "/")
	return cg != "" && (path == cg || strings.HasPrefix(path, cg+"/"))
}

// unitCgroupProcs lists the processes of a unit's ControlGroup in every
// hierarchy where it exists: root itself on pure cgroup v2, root/unified and
// root/systemd (name=systemd) on a hybrid host, root/systemd on a legacy v1
// host. A hybrid host has the unit in both, and a process moved by hand may
// be in only one, so the lists are merged. nil when the cgroup is in none.
func unitCgroupProcs(root, cg string) []int {
	var pids []int
	seen := map[int]bool{}
	found := false // an existing empty cgroup gives [], not nil
	for _, sub := range []string{"", "unified", "systemd"} {
		ps := cgroupProcs(filepath.Join(root, sub, cg))
		if ps == nil {
			continue
		}
		if !found {
			found, pids = true, []int{}
		}
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				pids = append(pids, p)
			}
		}
	}
	if !found {
		return nil
	}
	return pids
}

// cgroupProcs reads cgroup.procs of dir and its sub-cgroups (cgroup v2);
// nil when dir does not exist.
func cgroupProcs(dir string) []int {
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return nil
	}
	pids := []int{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// pidsInCgroup finds processes whose /proc/PID/cgroup lies in cg (cgroup v1
// hosts, or when the cgroup tree is not mounted where expected).
func (s *scanner) pidsInCgroup(cg string) []int {
	pids, err := s.proc.pids()
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(s.proc.path(pid, "cgroup"))
		if err != nil {
			continue
		}
		if inCgroup(parseCgroup(b).Path, cg) {
			out = append(out, pid)
		}
	}
	return out
}
