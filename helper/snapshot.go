package helper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultProtected are process names (comm or argv[0] base, globs) that are
// never signalled without Force: the driver's and the display's daemons.
var DefaultProtected = []string{
	"nvidia-persistenced", "nv-hostengine", "nvidia-fabricmanager", "nv-fabricmanager",
	"nvidia-dcgm", "dcgm*", "Xorg", "X", "Xwayland", "gdm*", "sddm*", "lightdm",
	"gnome-shell", "kwin_wayland", "kwin_x11",
}

var gpuDevRe = regexp.MustCompile(`^nvidia([0-9]+)$`)

// scanner reads one host's processes and devices for one request.
type scanner struct {
	cfg     Config
	proc    procFS
	devDirs []string // DevDir as given (absolute) and with symlinks resolved
	bootID  string
	self    int
	// guarded holds pid 1, the helper and its ancestors: never signalled.
	guarded map[int]bool
}

func newScanner(cfg Config) (*scanner, error) {
	if cfg.ProcDir == "" {
		cfg.ProcDir = "/proc"
	}
	if cfg.DevDir == "" {
		cfg.DevDir = "/dev"
	}
	dev, err := filepath.Abs(cfg.DevDir)
	if err != nil {
		return nil, fmt.Errorf("dev_dir %q: %w", cfg.DevDir, err)
	}
	s := &scanner{cfg: cfg, proc: procFS{dir: cfg.ProcDir}, devDirs: []string{dev}, self: os.Getpid()}
	if real, err := filepath.EvalSymlinks(dev); err == nil && real != dev {
		s.devDirs = append(s.devDirs, real)
	}
	if s.bootID, err = s.proc.bootID(); err != nil {
		return nil, err
	}
	s.guarded = s.proc.ancestors(s.self)
	s.guarded[1] = true
	return s, nil
}

// deviceOf returns the path of an fd link relative to DevDir when it names
// an NVIDIA device node.
func (s *scanner) deviceOf(link string) (string, bool) {
	link = strings.TrimSuffix(link, " (deleted)")
	for _, d := range s.devDirs {
		if !strings.HasPrefix(link, d+"/") {
			continue
		}
		rel := link[len(d)+1:]
		first, _, _ := strings.Cut(rel, "/")
		if strings.HasPrefix(first, "nvidia") {
			return rel, true
		}
	}
	return "", false
}

// rawHolder is a pid and the NVIDIA devices it has open.
type rawHolder struct {
	pid     int
	devices []string
}

// scanFDs walks ProcDir/*/fd the way fuser does. Processes that vanish
// mid-scan are skipped; unreadable ones are counted for a warning.
func (s *scanner) scanFDs() (holders []rawHolder, denied int, err error) {
	pids, err := s.proc.pids()
	if err != nil {
		return nil, 0, err
	}
	for _, pid := range pids {
		fdDir := filepath.Join(s.proc.dir, strconv.Itoa(pid), "fd")
		d, err := os.Open(fdDir)
		if err != nil {
			if errors.Is(err, os.ErrPermission) {
				denied++
			}
			continue
		}
		names, _ := d.Readdirnames(-1)
		d.Close()
		var devs []string
		seen := map[string]bool{}
		for _, n := range names {
			link, err := os.Readlink(fdDir + "/" + n)
			if err != nil {
				continue
			}
			if rel, ok := s.deviceOf(link); ok && !seen[rel] {
				seen[rel] = true
				devs = append(devs, rel)
			}
		}
		if len(devs) > 0 {
			sort.Strings(devs)
			holders = append(holders, rawHolder{pid: pid, devices: devs})
		}
	}
	return holders, denied, nil
}

// protectedWhy says which rule protects a process, or "".
func (s *scanner) protectedWhy(pid int, comm string, argv []string) string {
	switch {
	case pid <= 1:
		return "pid " + strconv.Itoa(pid)
	case pid == s.self:
		return "the helper itself"
	case s.guarded[pid]:
		return "ancestor of the helper"
	}
	if pat := matchProtected(comm, argv, s.cfg.Protected); pat != "" {
		return "protected name " + pat
	}
	return ""
}

// matchProtected returns the first pattern naming the process, or "". The
// kernel truncates comm to 15 bytes, so a literal name also matches a comm
// that is its 15-byte prefix.
func matchProtected(comm string, argv []string, extra []string) string {
	base := baseName(argv)
	pats := append(append([]string{}, DefaultProtected...), extra...)
	for _, p := range pats {
		for _, name := range []string{comm, base} {
			if name == "" {
				continue
			}
			if ok, _ := path.Match(p, name); ok {
				return p
			}
		}
		if len(comm) == 15 && !strings.ContainsAny(p, "*?[") && strings.HasPrefix(p, comm) {
			return p
		}
	}
	return ""
}

// describe fills a Holder from /proc; ok is false when the process is gone.
func (s *scanner) describe(pid int, uptime float64) (Holder, bool) {
	st, err := s.proc.stat(pid)
	if err != nil {
		return Holder{}, false
	}
	h := Holder{
		Identity: Identity{PID: pid, StartTime: st.StartTime, BootID: s.bootID},
		PPID:     st.PPID, PGID: st.PGID, SID: st.SID,
		Comm: st.Comm, State: st.State,
		Cmdline: s.proc.cmdline(pid),
	}
	if b, err := os.ReadFile(s.proc.path(pid, "status")); err == nil {
		ps := parseStatus(b)
		h.UID, h.NSpid = ps.UID, ps.NSpid
		h.User = userName(ps.UID)
	} else {
		h.UID = -1
	}
	if b, err := os.ReadFile(s.proc.path(pid, "cgroup")); err == nil {
		cg := parseCgroup(b)
		h.Cgroup, h.Unit, h.Container = cg.Path, cg.Unit, cg.Container
	}
	if uptime > 0 {
		age := uptime - float64(st.StartTime)/float64(clockTicks())
		if age < 0 {
			age = 0
		}
		h.AgeSeconds = float64(int64(age*1000)) / 1000
	}
	h.ProtectedWhy = s.protectedWhy(pid, st.Comm, h.Cmdline)
	h.Protected = h.ProtectedWhy != ""
	return h, true
}

// gpuMapping maps /dev/nvidiaN minors to nvidia-smi indices.
type gpuMapping struct {
	minorToIndex map[int]int
	// assumed: no driver information, N is taken as the index.
	assumed bool
}

func (m gpuMapping) index(minor int) (int, bool) {
	if m.assumed {
		return minor, true
	}
	i, ok := m.minorToIndex[minor]
	return i, ok
}

// mapGPUs sets GPU.Minor from the driver's information files (matched by
// bus id) and returns the mapping; warnings say when it had to guess.
func mapGPUs(gpus []GPU, drv []driverGPU, drvOK bool, smiOK bool) (gpuMapping, []string) {
	var warns []string
	m := gpuMapping{minorToIndex: map[int]int{}}
	byBus := map[string]driverGPU{}
	for _, d := range drv {
		byBus[d.BusID] = d
	}
	if drvOK && len(drv) > 0 && smiOK {
		for i := range gpus {
			if d, ok := byBus[normBusID(gpus[i].BusID)]; ok {
				gpus[i].Minor = d.Minor
				m.minorToIndex[d.Minor] = gpus[i].Index
			} else {
				warns = append(warns, fmt.Sprintf("GPU %d (bus %s) has no /proc/driver/nvidia entry; its device minor is unknown", gpus[i].Index, gpus[i].BusID))
			}
		}
		return m, warns
	}
	if drvOK && len(drv) > 0 && !smiOK {
		// readGPUs listed the driver's GPUs in PCI bus order, the order
		// nvidia-smi numbers them in.
		for _, g := range gpus {
			m.minorToIndex[g.Minor] = g.Index
		}
		warns = append(warns, "GPU indices taken from PCI bus order of /proc/driver/nvidia/gpus (no nvidia-smi)")
		return m, warns
	}
	m.assumed = true
	for i := range gpus {
		gpus[i].Minor = gpus[i].Index
	}
	if len(gpus) > 0 || !smiOK {
		warns = append(warns, "no /proc/driver/nvidia/gpus: assuming /dev/nvidiaN is GPU index N")
	}
	return m, warns
}

// collect scans holders and describes them, GPUs mapped through m.
func (s *scanner) collect(m gpuMapping) ([]Holder, []string, error) {
	raw, denied, err := s.scanFDs()
	if err != nil {
		return nil, nil, err
	}
	var warns []string
	if denied > 0 {
		warns = append(warns, fmt.Sprintf("%d processes' fds were not readable (permission denied): run the helper as root (become) to see every holder", denied))
	}
	uptime, _ := s.proc.uptime()
	unmapped := map[int]bool{}
	holders := make([]Holder, 0, len(raw))
	for _, r := range raw {
		h, ok := s.describe(r.pid, uptime)
		if !ok {
			continue
		}
		h.Devices = r.devices
		h.GPUs = []int{}
		for _, d := range r.devices {
			mm := gpuDevRe.FindStringSubmatch(d)
			if mm == nil {
				continue
			}
			minor, _ := strconv.Atoi(mm[1])
			if idx, ok := m.index(minor); ok {
				h.GPUs = append(h.GPUs, idx)
			} else {
				unmapped[minor] = true
			}
		}
		sort.Ints(h.GPUs)
		h.SharedOnly = len(h.GPUs) == 0 && !hasGPUDevice(r.devices)
		holders = append(holders, h)
	}
	for minor := range unmapped {
		warns = append(warns, fmt.Sprintf("/dev/nvidia%d is held but matches no GPU nvidia-smi lists", minor))
	}
	sort.Slice(holders, func(a, b int) bool { return holders[a].PID < holders[b].PID })
	return holders, warns, nil
}

func hasGPUDevice(devs []string) bool {
	for _, d := range devs {
		if gpuDevRe.MatchString(d) {
			return true
		}
	}
	return false
}

// mergeApps adds nvidia-smi's per-process memory to the holders.
func mergeApps(holders []Holder, apps []computeApp) []string {
	byPID := map[int]*Holder{}
	for i := range holders {
		byPID[holders[i].PID] = &holders[i]
	}
	var warns []string
	for _, a := range apps {
		h, ok := byPID[a.PID]
		if !ok {
			warns = append(warns, fmt.Sprintf("nvidia-smi lists pid %d (%s, %d MiB) which the /proc scan did not find (another PID namespace?)", a.PID, a.Name, a.MemMiB))
			continue
		}
		switch {
		case a.MemMiB < 0 && h.MemMiB == 0:
			h.MemMiB = -1
		case a.MemMiB >= 0 && h.MemMiB < 0:
			h.MemMiB = a.MemMiB
		case a.MemMiB >= 0:
			h.MemMiB += a.MemMiB
		}
	}
	return warns
}

// gpuState is one read of GPUs (nvidia-smi) plus the mapping to minors.
type gpuState struct {
	smi     *smiRunner
	smiOK   bool
	gpus    []GPU
	mapping gpuMapping
	warns   []string
}

// readGPUs runs --query-gpu and maps minors. A missing nvidia-smi is not an
// error (smiOK false + warning); a failing or hung one is returned as smiErr.
func (s *scanner) readGPUs(ctx context.Context, smi *smiRunner, smiFindErr error) (st gpuState, smiErr error) {
	st.smi = smi
	if smiFindErr != nil {
		st.warns = append(st.warns, smiFindErr.Error()+": GPU memory unknown, holders from /proc only")
	} else {
		gpus, err := smi.queryGPUs(ctx)
		if err != nil {
			smiErr = err
		} else {
			st.gpus, st.smiOK = gpus, true
		}
	}
	drv, drvOK, err := s.proc.readDriverGPUs()
	if err != nil {
		st.warns = append(st.warns, err.Error())
	}
	if !st.smiOK && drvOK {
		// Without nvidia-smi, still list the GPUs the driver knows.
		sorted := append([]driverGPU{}, drv...)
		sort.Slice(sorted, func(a, b int) bool { return sorted[a].BusID < sorted[b].BusID })
		for i, d := range sorted {
			st.gpus = append(st.gpus, GPU{Index: i, UUID: d.UUID, Name: d.Model, BusID: d.BusID, Minor: d.Minor, MemUsedMiB: -1, MemTotalMiB: -1})
		}
	}
	var w []string
	st.mapping, w = mapGPUs(st.gpus, drv, drvOK, st.smiOK)
	st.warns = append(st.warns, w...)
	return st, smiErr
}

// TakeSnapshot lists the host's GPUs and every process holding an NVIDIA
// device. nvidia-smi missing, failing or hung is reported as SMI=false with
// a warning: the /proc holders are still listed, since a wedged driver is
// exactly when an operator needs them.
func TakeSnapshot(ctx context.Context, cfg Config) (*Snapshot, error) {
	s, err := newScanner(cfg)
	if err != nil {
		return nil, err
	}
	return s.snapshot(ctx)
}

// snapshot is TakeSnapshot on a scanner a caller already has.
func (s *scanner) snapshot(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{Version: Version, BootID: s.bootID, Time: time.Now().UTC(), GPUs: []GPU{}, Holders: []Holder{}}
	snap.Hostname, _ = os.Hostname()
	smi, findErr := newSMIRunner(s.cfg)
	gs, smiErr := s.readGPUs(ctx, smi, findErr)
	if smiErr != nil {
		gs.warns = append(gs.warns, "nvidia-smi failed: "+smiErr.Error())
	}
	snap.SMI = gs.smiOK
	if gs.gpus != nil {
		snap.GPUs = gs.gpus
	}
	snap.Warnings = append(snap.Warnings, gs.warns...)
	holders, w, err := s.collect(gs.mapping)
	if err != nil {
		return nil, err
	}
	snap.Holders = holders
	snap.Warnings = append(snap.Warnings, w...)
	if gs.smiOK {
		apps, err := smi.queryApps(ctx)
		if err != nil {
			snap.Warnings = append(snap.Warnings, "nvidia-smi compute apps: "+err.Error())
		} else {
			snap.Warnings = append(snap.Warnings, mergeApps(snap.Holders, apps)...)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	return snap, nil
}
