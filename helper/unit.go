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

// Unit stops, starts, restarts or reports one systemd unit, with systemctl
// run as an argument vector under a deadline. After a stop it lists what
// is still alive in the unit's cgroup and the GPU holders that belong to it.
func Unit(ctx context.Context, req UnitRequest) (*UnitResponse, error) {
	start := time.Now()
	switch req.Action {
	case UnitStop, UnitStart, UnitRestart, UnitStatus:
	default:
		return nil, fmt.Errorf("unit action %q: want stop, start, restart or status", req.Action)
	}
	name, err := NormalizeUnit(req.Unit)
	if err != nil {
		return nil, err
	}
	resp := &UnitResponse{Version: Version, Unit: name, Action: req.Action}
	defer func() { resp.Elapsed = Duration(time.Since(start)) }()
	systemctl, why := findSystemd(req.Config)
	if systemctl == "" {
		resp.Reason = why
		return resp, nil
	}
	resp.Systemd = true
	// The look before and the action share the unit's timeout; the look
	// after has its own short one, so that a timed-out action still reports
	// the unit's state.
	timeout := unitTimeout(req)
	actCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Look before acting: a unit systemd does not know is never acted on,
	// and is never reported as stopped (a typo in a unit name is not a free).
	pre, err := showUnit(actCtx, systemctl, timeout, name)
	if err != nil {
		return nil, err
	}
	if why := unknownUnit(name, pre); why != "" {
		resp.fill(pre)
		resp.Reason = why
		return resp, nil
	}
	var actionErr error
	if req.Action != UnitStatus {
		_, errb, err := runBounded(actCtx, timeout, []string{systemctl, req.Action, "--", name})
		if err != nil {
			actionErr = withOutput(err, errb)
		}
	}
	props := pre
	if req.Action != UnitStatus {
		if props, err = showUnit(ctx, systemctl, unitAfterTimeout(req), name); err != nil {
			return nil, err
		}
	}
	resp.fill(props)
	if req.Action == UnitStop || req.Action == UnitStatus {
		if err := fillUnitLeftovers(ctx, req.Config, resp); err != nil {
			return nil, err
		}
	}
	masked := resp.LoadState == "masked"
	switch {
	case masked && (req.Action == UnitStart || req.Action == UnitRestart):
		resp.Reason = "unit " + name + " is masked: it cannot be started"
	case actionErr != nil:
		resp.Reason = actionErr.Error()
	case req.Action == UnitStop:
		resp.OK = (resp.ActiveState == "inactive" || resp.ActiveState == "failed") && len(resp.Remaining) == 0 && len(resp.GPUHolders) == 0
		if !resp.OK {
			resp.Reason = fmt.Sprintf("after stop: state %s, %d processes left in the cgroup, %d GPU holders of the unit", resp.ActiveState, len(resp.Remaining), len(resp.GPUHolders))
		}
	case req.Action == UnitStart || req.Action == UnitRestart:
		resp.OK = resp.ActiveState == "active" || resp.ActiveState == "activating" || resp.ActiveState == "reloading"
		if !resp.OK {
			resp.Reason = "after " + req.Action + ": state " + resp.ActiveState + "/" + resp.SubState
		}
	default:
		resp.OK = true
	}
	if masked && resp.OK {
		// Stopped or looked at, and true; the operator still learns the unit is masked.
		resp.Reason = "unit " + name + " is masked"
	}
	return resp, nil
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

// showProps are the properties the unit verb reads.
var showProps = []string{"LoadState", "ActiveState", "SubState", "MainPID", "ControlGroup", "Restart"}

// showUnit runs `systemctl show -p ... -- name` and parses it.
func showUnit(ctx context.Context, systemctl string, timeout time.Duration, name string) (map[string]string, error) {
	argv := []string{systemctl, "show"}
	for _, p := range showProps {
		argv = append(argv, "-p", p)
	}
	out, errb, err := runBounded(ctx, timeout, append(argv, "--", name))
	if err != nil {
		return nil, fmt.Errorf("unit %s: systemctl show: %w", name, withOutput(err, errb))
	}
	props := parseShow(out)
	if props["LoadState"] == "" {
		return nil, fmt.Errorf("unit %s: systemctl show gave no LoadState: %.200q", name, out)
	}
	return props, nil
}

// unknownUnit says why name cannot be acted on when systemd has no such
// unit, or "". A unit whose file was removed while it ran is "not-found"
// but still active: that one is real and may be stopped.
func unknownUnit(name string, props map[string]string) string {
	active := props["ActiveState"]
	switch props["LoadState"] {
	case "not-found":
		if active == "" || active == "inactive" {
			return "unit " + name + " not found"
		}
	case "bad-setting", "error":
		if active == "" || active == "inactive" {
			return "unit " + name + " could not be loaded (LoadState=" + props["LoadState"] + ")"
		}
	}
	return ""
}

// fill copies the shown properties into the response.
func (r *UnitResponse) fill(props map[string]string) {
	r.LoadState, r.ActiveState, r.SubState = props["LoadState"], props["ActiveState"], props["SubState"]
	r.ControlGroup, r.Restart = props["ControlGroup"], props["Restart"]
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

// fillUnitLeftovers lists processes in the unit's cgroup and the GPU holders
// that belong to the unit.
func fillUnitLeftovers(ctx context.Context, cfg Config, resp *UnitResponse) error {
	s, err := newScanner(cfg)
	if err != nil {
		return err
	}
	if resp.ControlGroup != "" {
		pids := unitCgroupProcs(cgroupRoot, resp.ControlGroup)
		if pids == nil {
			pids = s.pidsInCgroup(resp.ControlGroup)
		}
		for _, pid := range pids {
			st, err := s.proc.stat(pid)
			if err != nil || st.State == "Z" {
				continue
			}
			resp.Remaining = append(resp.Remaining, Proc{
				Identity: Identity{PID: pid, StartTime: st.StartTime, BootID: s.bootID},
				Comm:     st.Comm, Cmdline: s.proc.cmdline(pid), State: st.State,
			})
		}
	}
	snap, err := s.snapshot(ctx)
	if err != nil {
		return fmt.Errorf("unit %s: %w", resp.Unit, err)
	}
	for _, h := range snap.Holders {
		if h.Unit == resp.Unit || (resp.ControlGroup != "" && inCgroup(h.Cgroup, resp.ControlGroup)) {
			resp.GPUHolders = append(resp.GPUHolders, h)
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
