package helper

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// pfKthread is PF_KTHREAD in the flags field of /proc/PID/stat.
const pfKthread = 0x00200000

// procStat is the part of /proc/PID/stat the helper uses.
type procStat struct {
	PID       int
	Comm      string
	State     string
	PPID      int
	PGID      int
	SID       int
	Flags     uint64
	StartTime uint64 // clock ticks since boot (field 22)
}

// parseStat parses one /proc/PID/stat line. comm may hold spaces and
// parentheses, so it is taken between the first '(' and the LAST ')'.
func parseStat(b []byte) (procStat, error) {
	var st procStat
	s := string(bytes.TrimSpace(b))
	open := strings.IndexByte(s, '(')
	closing := strings.LastIndexByte(s, ')')
	if open < 1 || closing < open {
		return st, fmt.Errorf("stat %.40q: no (comm)", s)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil || pid < 0 {
		return st, fmt.Errorf("stat %.40q: bad pid", s)
	}
	st.PID = pid
	st.Comm = s[open+1 : closing]
	// Fields after comm start at field 3 (state).
	f := strings.Fields(s[closing+1:])
	if len(f) < 20 {
		return st, fmt.Errorf("stat of pid %d: %d fields after comm, want >= 20", pid, len(f))
	}
	st.State = f[0]
	ints := []*int{&st.PPID, &st.PGID, &st.SID}
	for i, p := range ints {
		v, err := strconv.Atoi(f[1+i])
		if err != nil {
			return st, fmt.Errorf("stat of pid %d: field %d %q: %w", pid, 4+i, f[1+i], err)
		}
		*p = v
	}
	if st.Flags, err = strconv.ParseUint(f[6], 10, 64); err != nil {
		return st, fmt.Errorf("stat of pid %d: flags %q: %w", pid, f[6], err)
	}
	if st.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return st, fmt.Errorf("stat of pid %d: starttime %q: %w", pid, f[19], err)
	}
	return st, nil
}

// procStatus holds what the helper reads from /proc/PID/status.
type procStatus struct {
	UID   int
	NSpid []int
}

func parseStatus(b []byte) procStatus {
	st := procStatus{UID: -1}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Uid":
			if f := strings.Fields(v); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					st.UID = n
				}
			}
		case "NSpid":
			for _, x := range strings.Fields(v) {
				if n, err := strconv.Atoi(x); err == nil {
					st.NSpid = append(st.NSpid, n)
				}
			}
		}
	}
	return st
}

// splitCmdline turns a NUL-separated /proc/PID/cmdline into argv.
func splitCmdline(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	parts := bytes.Split(b, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}

// cgroupInfo is a process's cgroup and what it says about systemd units and containers.
type cgroupInfo struct {
	Path string
	Unit string
	// Container is the container's full id (64 hex; LXC: its name).
	Container string
	Ref       containerRef
}

// parseCgroup picks the cgroup path that names the process's place: the
// name=systemd hierarchy (cgroup v1/hybrid), else the unified "0::" line,
// else the first non-root controller path.
func parseCgroup(b []byte) cgroupInfo {
	var sysd, unified, other string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		p := parts[2]
		switch {
		case parts[1] == "name=systemd":
			sysd = p
		case parts[0] == "0" && parts[1] == "":
			unified = p
		case other == "" && p != "/" && p != "":
			other = p
		}
	}
	path := "/"
	for _, c := range []string{sysd, unified, other} {
		if c != "" && c != "/" {
			path = c
			break
		}
	}
	if path == "/" && unified == "" && sysd == "" && other == "" {
		path = ""
	}
	info := cgroupInfo{Path: path}
	info.Unit, info.Ref = unitAndContainer(path)
	info.Container = info.Ref.ID
	if info.Container == "" {
		info.Container = info.Ref.Name
	}
	return info
}

// unitAndContainer names the container a cgroup path is in (docker,
// containerd, cri-o, podman, Kubernetes pods, LXC: see findContainer) and
// the innermost systemd service or scope that is the process's own: never
// a container's scope (docker-ID.scope is a container, not a unit anyone
// names), nothing inside a Kubernetes pod, and, for a container, only a
// service that runs it (a quadlet's), not the user manager around a
// rootless one.
func unitAndContainer(path string) (unit string, ref containerRef) {
	comps := strings.Split(strings.Trim(path, "/"), "/")
	ref, at := findContainer(comps)
	for i := len(comps) - 1; i >= 0 && unit == ""; i-- {
		c := comps[i]
		if !strings.HasSuffix(c, ".service") && !strings.HasSuffix(c, ".scope") {
			continue
		}
		switch {
		case at >= 0 && i >= at, ref.PodUID != "", strings.Contains(c, "kubepods"):
			// The container itself, or a pod's own scopes.
		case at >= 0 && (strings.HasSuffix(c, ".scope") || userManager.MatchString(c)):
			// Around a container: its runtime's or the user's manager.
		case scopeContainer.MatchString(c) || strings.HasPrefix(c, "libpod-conmon-") || strings.HasPrefix(c, "crio-conmon-"):
			// A runtime's monitor scope beside a container.
		default:
			unit = c
		}
	}
	return unit, ref
}

// passwd maps uid -> user name from /etc/passwd (no cgo, no NSS).
func parsePasswd(b []byte) map[int]string {
	m := map[int]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		if _, dup := m[uid]; !dup {
			m[uid] = f[0]
		}
	}
	return m
}

var (
	passwdOnce sync.Once
	passwdMap  map[int]string
)

// userName resolves a uid; an unknown uid reads as its number.
func userName(uid int) string {
	passwdOnce.Do(func() {
		b, err := os.ReadFile("/etc/passwd")
		if err != nil {
			passwdMap = map[int]string{}
			return
		}
		passwdMap = parsePasswd(b)
	})
	if n, ok := passwdMap[uid]; ok {
		return n
	}
	if uid < 0 {
		return ""
	}
	return strconv.Itoa(uid)
}

var (
	clkTckOnce sync.Once
	clkTck     uint64
)

// clockTicks is USER_HZ: AT_CLKTCK from the auxiliary vector (no cgo
// sysconf), falling back to 100, which is what Linux uses on every arch gpush
// targets.
func clockTicks() uint64 {
	clkTckOnce.Do(func() {
		clkTck = 100
		b, err := os.ReadFile("/proc/self/auxv")
		if err != nil {
			return
		}
		const atClkTck = 17
		for i := 0; i+16 <= len(b); i += 16 {
			k := binary.NativeEndian.Uint64(b[i:])
			v := binary.NativeEndian.Uint64(b[i+8:])
			if k == atClkTck && v > 0 {
				clkTck = v
				return
			}
		}
	})
	return clkTck
}

// procFS reads one proc filesystem (ProcDir).
type procFS struct {
	dir string
}

func (p procFS) path(pid int, name string) string {
	return filepath.Join(p.dir, strconv.Itoa(pid), name)
}

func (p procFS) stat(pid int) (procStat, error) {
	b, err := os.ReadFile(p.path(pid, "stat"))
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(b)
	if err != nil {
		return st, fmt.Errorf("%s: %w", p.path(pid, "stat"), err)
	}
	return st, nil
}

// cmdline reads pid's argv, or that of its thread tid when one is given.
func (p procFS) cmdline(pid int, tid ...int) []string {
	f := p.path(pid, "cmdline")
	if len(tid) > 0 {
		f = filepath.Join(p.path(pid, "task"), strconv.Itoa(tid[0]), "cmdline")
	}
	b, _ := os.ReadFile(f)
	return splitCmdline(b)
}

// pids lists the numeric entries of ProcDir.
func (p procFS) pids() ([]int, error) {
	d, err := os.Open(p.dir)
	if err != nil {
		return nil, fmt.Errorf("open proc dir: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read proc dir %s: %w", p.dir, err)
	}
	out := make([]int, 0, len(names))
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue
		}
		if pid, err := strconv.Atoi(n); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// bootID reads the kernel's boot id.
func (p procFS) bootID() (string, error) {
	b, err := os.ReadFile(filepath.Join(p.dir, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// uptime is seconds since boot, from /proc/uptime.
func (p procFS) uptime() (float64, error) {
	b, err := os.ReadFile(filepath.Join(p.dir, "uptime"))
	if err != nil {
		return 0, fmt.Errorf("read uptime: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s: empty", filepath.Join(p.dir, "uptime"))
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(p.dir, "uptime"), err)
	}
	return v, nil
}

// ancestors returns pid and every ancestor of it, up to pid 1.
func (p procFS) ancestors(pid int) map[int]bool {
	seen := map[int]bool{}
	for pid > 0 && !seen[pid] {
		seen[pid] = true
		st, err := p.stat(pid)
		if err != nil {
			break
		}
		pid = st.PPID
	}
	return seen
}

// driverGPU is one /proc/driver/nvidia/gpus/*/information file.
type driverGPU struct {
	BusID string // normalised, see normBusID
	Minor int
	UUID  string
	Model string
}

// parseDriverInfo reads the "Key: value" lines of an information file.
func parseDriverInfo(b []byte) (driverGPU, error) {
	g := driverGPU{Minor: -1}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Device Minor":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				//lint:ignore ST1005 "Device Minor" is the key as the driver's information file spells it; the error is always shown after that file's path.
				return g, fmt.Errorf("Device Minor %q: not a number", v)
			}
			g.Minor = n
		case "Bus Location":
			g.BusID = normBusID(v)
		case "GPU UUID":
			g.UUID = v
		case "Model":
			g.Model = v
		}
	}
	if g.Minor < 0 || g.BusID == "" {
		return g, errors.New("no Device Minor or Bus Location line")
	}
	return g, nil
}

// normBusID makes "00000000:00:06.0" (nvidia-smi) and "0000:00:06.0"
// (/proc/driver/nvidia) comparable: lower case, 4-digit domain.
func normBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

// readDriverGPUs reads every GPU the kernel driver knows (driverDir is
// /proc/driver/nvidia or Config.DriverDir); ok is false when
// the driver's proc folder is absent. An unreadable information file is
// reported and skipped: the other GPUs' minors are still worth having.
func readDriverGPUs(driverDir string) (gpus []driverGPU, ok bool, err error) {
	dir := filepath.Join(driverDir, "gpus")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("read %s: %w", dir, err)
	}
	var errs []error
	for _, e := range ents {
		f := filepath.Join(dir, e.Name(), "information")
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", f, err))
			continue
		}
		g, err := parseDriverInfo(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		gpus = append(gpus, g)
	}
	return gpus, true, errors.Join(errs...)
}
