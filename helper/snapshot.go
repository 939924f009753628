package helper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
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
	// hostPIDs: the helper sees the host's PID namespace.
	hostPIDs bool
	// names: container and pod names, read when a container first asks.
	names *containerNames
	// noManagers: a snapshot that needs no holder's managers (the unit
	// verb's look at what a stop left: the unit is their manager).
	noManagers bool
	// holdersOnly: a snapshot whose caller reads only its holders (the
	// unit verb's leftovers), not the GPUs' statuses or ghosts: it may
	// judge them by the session's listing on the holders alone (see
	// reuseListing).
	holdersOnly bool
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
	if cfg.RootDir == "" {
		cfg.RootDir = "/"
	}
	s := &scanner{cfg: cfg, proc: procFS{dir: cfg.ProcDir}, devDirs: []string{dev}, self: os.Getpid(),
		names: &containerNames{root: cfg.RootDir}}
	if real, err := filepath.EvalSymlinks(dev); err == nil && real != dev {
		s.devDirs = append(s.devDirs, real)
	}
	if s.bootID, err = s.proc.bootID(); err != nil {
		return nil, err
	}
	s.guarded = s.proc.ancestors(s.self)
	s.guarded[1] = true
	s.hostPIDs = s.proc.inHostPIDNamespace()
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
	// task is the thread whose fd table was read when the leader's was
	// empty (an exited main thread); 0 for the leader itself.
	task int
}

// scanFDsUncached walks ProcDir/*/fd the way fuser does. A process whose fd folder
// is empty (its main thread exited, a zombie leader) is looked at through
// its threads, ProcDir/PID/task/TID/fd. Processes that vanish mid-scan are
// skipped; unreadable ones are counted for a warning.
// scanFDs (scancache.go) answers the same from a cache where it can.
func (s *scanner) scanFDsUncached() (holders []rawHolder, denied int, err error) {
	pids, err := s.proc.pids()
	if err != nil {
		return nil, 0, err
	}
	for _, pid := range pids {
		base := filepath.Join(s.proc.dir, strconv.Itoa(pid))
		devs, n, err := s.devicesIn(filepath.Join(base, "fd"))
		if err != nil {
			if errors.Is(err, os.ErrPermission) {
				denied++
			}
			continue
		}
		task := 0
		if n == 0 {
			task, devs = s.threadDevices(pid)
		}
		if len(devs) > 0 {
			holders = append(holders, rawHolder{pid: pid, devices: devs, task: task})
		}
	}
	return holders, denied, nil
}

// devicesIn lists the NVIDIA devices an fd folder's links name (sorted,
// once each) and how many fds it has.
func (s *scanner) devicesIn(fdDir string) ([]string, int, error) {
	d, err := os.Open(fdDir)
	if err != nil {
		return nil, 0, err
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var devs []string
	for _, n := range names {
		link, err := os.Readlink(fdDir + "/" + n)
		if err != nil {
			continue
		}
		if rel, ok := s.deviceOf(link); ok && !slices.Contains(devs, rel) {
			devs = append(devs, rel)
		}
	}
	sort.Strings(devs)
	return devs, len(names), nil
}

// threadDevices reads the fd tables of pid's other threads: the first one
// holding NVIDIA devices wins (threads of a process share one table).
func (s *scanner) threadDevices(pid int) (int, []string) {
	tasks, err := os.ReadDir(s.proc.path(pid, "task"))
	if err != nil {
		return 0, nil
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil || tid == pid {
			continue
		}
		devs, _, err := s.devicesIn(filepath.Join(s.proc.path(pid, "task"), t.Name(), "fd"))
		if err == nil && len(devs) > 0 {
			return tid, devs
		}
	}
	return 0, nil
}

// liveThreads reports whether any thread of pid other than its leader
// still runs: a Z leader with live threads is a live process.
func (p procFS) liveThreads(pid int) bool {
	tasks, err := os.ReadDir(p.path(pid, "task"))
	if err != nil {
		return false
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil || tid == pid {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p.path(pid, "task"), t.Name(), "stat"))
		if err != nil {
			continue
		}
		if st, err := parseStat(b); err == nil && st.State != "Z" && st.State != "X" {
			return true
		}
	}
	return false
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
func (s *scanner) describe(r rawHolder, uptime float64) (Holder, bool) {
	pid := r.pid
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
	if r.task > 0 {
		h.ZombieLeader = true
		if len(h.Cmdline) == 0 {
			// The leader's mm is gone with it; a live thread still has it.
			h.Cmdline = s.proc.cmdline(pid, r.task)
		}
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
		h.Cgroup, h.Unit = cg.Path, cg.Unit
		if ref := cg.Ref; cg.Container != "" {
			h.Container, h.ContainerID, h.Runtime = ShortID(cg.Container), ref.ID, ref.Runtime
			h.PodUID, h.PodQoS = ref.PodUID, ref.QoS
			if ref.ID == "" {
				h.Container, h.ContainerName = ref.Name, ref.Name
			}
			s.names.fill(&h, ref)
		}
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

// gpuMapping maps /dev/nvidiaN minors to GPU indices.
type gpuMapping struct {
	minorToIndex map[int]int
	// assumed: no driver information, N is taken as the index of a GPU
	// nvidia-smi lists.
	assumed bool
	listed  map[int]bool // indices nvidia-smi lists (for assumed)
}

func (m gpuMapping) index(minor int) (int, bool) {
	if i, ok := m.minorToIndex[minor]; ok {
		return i, true
	}
	if m.assumed && m.listed[minor] {
		return minor, true
	}
	return 0, false
}

// mapGPUs sets GPU.Minor from the driver's information files (matched by
// bus id), adds the driver's GPUs nvidia-smi does not list (Source driver,
// memory unknown) and returns the GPUs with the mapping; warnings say when
// it had to guess.
func mapGPUs(gpus []GPU, drv []driverGPU, drvOK bool, smiOK bool) ([]GPU, gpuMapping, []string) {
	var warns []string
	m := gpuMapping{minorToIndex: map[int]int{}, listed: map[int]bool{}}
	for _, g := range gpus {
		m.listed[g.Index] = true
	}
	if !drvOK || len(drv) == 0 {
		m.assumed = true
		for i := range gpus {
			gpus[i].Minor = gpus[i].Index
		}
		if len(gpus) > 0 || !smiOK {
			warns = append(warns, "no /proc/driver/nvidia/gpus: assuming /dev/nvidiaN is GPU index N")
		}
		return gpus, m, warns
	}
	sorted := append([]driverGPU{}, drv...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a].BusID < sorted[b].BusID })
	if !smiOK {
		// nvidia-smi numbers GPUs in PCI bus order.
		for i, d := range sorted {
			gpus = append(gpus, driverRow(i, d))
			m.minorToIndex[d.Minor] = i
		}
		warns = append(warns, "GPU indices taken from PCI bus order of /proc/driver/nvidia/gpus (no nvidia-smi)")
		return gpus, m, warns
	}
	byBus := map[string]int{}
	for i := range gpus {
		byBus[normBusID(gpus[i].BusID)] = i
	}
	matched := map[string]bool{}
	for _, d := range sorted {
		i, ok := byBus[d.BusID]
		if !ok {
			continue
		}
		matched[d.BusID] = true
		gpus[i].Minor = d.Minor
		m.minorToIndex[d.Minor] = gpus[i].Index
	}
	for _, g := range gpus {
		if g.Minor < 0 {
			warns = append(warns, fmt.Sprintf("GPU %d (bus %s) has no /proc/driver/nvidia entry; its device minor is unknown", g.Index, g.BusID))
		}
	}
	used := map[int]bool{}
	for _, g := range gpus {
		used[g.Index] = true
	}
	for _, d := range sorted {
		if matched[d.BusID] {
			continue
		}
		idx := freeIndex(used, d.Minor)
		gpus = append(gpus, driverRow(idx, d))
		m.minorToIndex[d.Minor] = idx
		warns = append(warns, fmt.Sprintf("GPU at bus %s (/dev/nvidia%d) is known to the driver but nvidia-smi does not list it: listed as GPU %d, memory unknown", d.BusID, d.Minor, idx))
	}
	return gpus, m, warns
}

func driverRow(idx int, d driverGPU) GPU {
	return GPU{Index: idx, UUID: d.UUID, Name: d.Model, BusID: d.BusID, Minor: d.Minor, MemUsedMiB: -1, MemTotalMiB: -1, Source: SourceDriver}
}

// freeIndex returns want when no GPU has that index yet, else the lowest
// index above every used one, and marks it used: a GPU nvidia-smi does not
// list must never take the number of one it does.
func freeIndex(used map[int]bool, want int) int {
	if want < 0 || used[want] {
		want = 0
		for i := range used {
			want = max(want, i+1)
		}
	}
	used[want] = true
	return want
}

// collect scans holders and describes them, GPUs mapped through gs. A
// held /dev/nvidiaN that maps to no GPU becomes a GPU of its own (Source
// device, memory unknown): a holder of a GPU nobody lists is never "no
// holder".
func (s *scanner) collect(gs *gpuState) ([]Holder, []string, error) {
	raw, denied, err := s.scanFDs()
	if err != nil {
		return nil, nil, err
	}
	holders, warns := s.collectFrom(gs, raw, denied)
	return holders, warns, nil
}

// collectFrom is collect on a scan already made.
func (s *scanner) collectFrom(gs *gpuState, raw []rawHolder, denied int) ([]Holder, []string) {
	var warns []string
	if denied > 0 {
		warns = append(warns, fmt.Sprintf("%d processes' fds were not readable (permission denied): run the helper as root (become) to see every holder", denied))
	}
	var unmapped []int
	for _, r := range raw {
		for _, minor := range gpuMinors(r.devices) {
			if _, ok := gs.mapping.index(minor); !ok && !slices.Contains(unmapped, minor) {
				unmapped = append(unmapped, minor)
			}
		}
	}
	sort.Ints(unmapped)
	used := map[int]bool{}
	for _, g := range gs.gpus {
		used[g.Index] = true
	}
	for _, minor := range unmapped {
		idx := freeIndex(used, minor)
		gs.gpus = append(gs.gpus, GPU{Index: idx, Name: "unknown", Minor: minor, MemUsedMiB: -1, MemTotalMiB: -1, Source: SourceDevice})
		gs.mapping.minorToIndex[minor] = idx
		w := fmt.Sprintf("/dev/nvidia%d is held but matches no GPU nvidia-smi or the driver lists: listed as GPU %d, memory unknown", minor, idx)
		if idx != minor {
			w += fmt.Sprintf(" (index %d is taken)", minor)
		}
		warns = append(warns, w)
	}
	uptime, _ := s.proc.uptime()
	holders := make([]Holder, 0, len(raw))
	for _, r := range raw {
		h, ok := s.describe(r, uptime)
		if !ok || streamGroups.has(h.PGID) {
			// Gone, or the helper's own memory stream (its group).
			continue
		}
		h.Devices = r.devices
		h.GPUs = []int{}
		for _, minor := range gpuMinors(r.devices) {
			if idx, ok := gs.mapping.index(minor); ok {
				h.GPUs = append(h.GPUs, idx)
			}
		}
		sort.Ints(h.GPUs)
		h.SharedOnly = len(h.GPUs) == 0
		// Owner is set from --query-compute-apps (mergeApps), or from
		// nvidia-uvm where that cannot be had (uvmOwners).
		holders = append(holders, h)
	}
	sort.Slice(holders, func(a, b int) bool { return holders[a].PID < holders[b].PID })
	return holders, warns
}

// gpuMinors lists the N of every /dev/nvidiaN in devs.
func gpuMinors(devs []string) []int {
	var out []int
	for _, d := range devs {
		if mm := gpuDevRe.FindStringSubmatch(d); mm != nil {
			if n, err := strconv.Atoi(mm[1]); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// mergeApps adds nvidia-smi's per-process memory to the holders (per GPU,
// through the app's GPU uuid or bus id), marks them owners, flags protected
// names that own memory, and returns the ghosts: listed pids that no longer
// exist, when the helper sees the host's PIDs (hostPIDs).
func mergeApps(holders []Holder, gpus []GPU, apps []computeApp, hostPIDs bool, exists func(pid int) bool) ([]Ghost, []string) {
	byPID := map[int]*Holder{}
	for i := range holders {
		byPID[holders[i].PID] = &holders[i]
	}
	listed := map[int]bool{}
	for _, a := range apps {
		listed[a.PID] = true
	}
	var ghosts []Ghost
	var warns []string
	for _, a := range apps {
		idx, idxOK := appGPU(gpus, a)
		h, ok := byPID[a.PID]
		if !ok {
			switch {
			case hostPIDs && idxOK && !exists(a.PID):
				ghosts = append(ghosts, Ghost{PID: a.PID, Name: a.Name, GPU: idx, MemMiB: a.MemMiB, MemUnread: a.MemUnread, HeldBy: keepers(holders, idx, listed)})
			case hostPIDs && !exists(a.PID):
				warns = append(warns, fmt.Sprintf("nvidia-smi lists pid %d (%s, %s) which no longer exists, on a GPU (%s) it does not list", a.PID, a.Name, memFigure(a.MemMiB, a.MemUnread), a.GPUUUID))
			case hostPIDs:
				warns = append(warns, fmt.Sprintf("nvidia-smi lists pid %d (%s, %s) which has no NVIDIA device open", a.PID, a.Name, memFigure(a.MemMiB, a.MemUnread)))
			default:
				warns = append(warns, fmt.Sprintf("nvidia-smi lists pid %d (%s, %s) which the /proc scan did not find (another PID namespace?)", a.PID, a.Name, memFigure(a.MemMiB, a.MemUnread)))
			}
			continue
		}
		h.Owner, h.OwnerWhy = true, "listed by nvidia-smi"
		switch {
		case a.MemMiB < 0 && h.MemMiB == 0:
			h.MemMiB = -1
		case a.MemMiB >= 0 && h.MemMiB < 0:
			h.MemMiB = a.MemMiB
		case a.MemMiB >= 0:
			h.MemMiB += a.MemMiB
		}
		if idxOK {
			if h.MemByGPU == nil {
				h.MemByGPU = map[int]int64{}
			}
			switch cur, seen := h.MemByGPU[idx]; {
			case !seen || cur < 0:
				h.MemByGPU[idx] = a.MemMiB
			case a.MemMiB > 0:
				h.MemByGPU[idx] = cur + a.MemMiB
			}
		}
	}
	for i := range holders {
		markSuspicious(&holders[i])
	}
	return ghosts, warns
}

// keepers are the live holders of GPU idx nvidia-smi does not list and
// that protection does not explain: what keeps a dead pid's memory.
func keepers(holders []Holder, idx int, listed map[int]bool) []int {
	var out []int
	for _, h := range holders {
		if listed[h.PID] || !slices.Contains(h.GPUs, idx) || h.Protected && h.Suspicious == "" && !h.Owner {
			continue
		}
		out = append(out, h.PID)
	}
	return out
}

// uvmOwners is the fallback owner rule when nvidia-smi cannot list compute
// apps: a holder with nvidia-uvm open may own a context. Only a fallback:
// on the H200 (driver 580) every NVML client (nvidia-smi -l, pynvml) has
// nvidia-uvm open too, and a process is listed only once it has a context.
func uvmOwners(holders []Holder) {
	for i := range holders {
		if !holders[i].Owner && slices.Contains(holders[i].Devices, "nvidia-uvm") {
			holders[i].Owner, holders[i].OwnerWhy = true, "has nvidia-uvm open (nvidia-smi cannot list compute apps)"
		}
		markSuspicious(&holders[i])
	}
}

// noUVMDaemons are protected daemons that never open nvidia-uvm (they talk
// to the driver directly, not through NVML or CUDA): one with it open is
// someone else under their name. NVML clients (nv-hostengine, dcgm) do open
// it, so for them only memory of their own is suspicious.
var noUVMDaemons = []string{"nvidia-persistenced"}

// markSuspicious flags a holder protected by its name alone that behaves
// like a worker: the real daemons own no GPU memory; a name is easy to
// borrow (exec -a, prctl).
func markSuspicious(h *Holder) {
	if !h.Protected || !strings.HasPrefix(h.ProtectedWhy, "protected name ") {
		return
	}
	name := strings.TrimPrefix(h.ProtectedWhy, "protected name ")
	var why []string
	if slices.Contains(h.Devices, "nvidia-uvm") && slices.Contains(noUVMDaemons, name) {
		why = append(why, "it has nvidia-uvm open")
	}
	switch {
	case h.MemMiB > 0:
		why = append(why, fmt.Sprintf("owns %d MiB", h.MemMiB))
	case strings.HasPrefix(h.OwnerWhy, "maps "):
		why = append(why, "it "+strings.TrimSuffix(h.OwnerWhy, " but nvidia-smi does not list it"))
	case h.MemMiB < 0:
		why = append(why, "nvidia-smi lists it as a compute app")
	}
	if len(why) > 0 {
		h.Suspicious = "protected name " + name + ", but " + strings.Join(why, " and ")
	}
}

// gpuState is one read of the host: GPUs (nvidia-smi, the driver, held
// device files), the mapping to minors and the holders.
type gpuState struct {
	smi     *smiRunner
	smiOK   bool
	gpus    []GPU
	mapping gpuMapping
	holders []Holder
	// apps: compute apps were read and merged (owners, memory, ghosts).
	apps   bool
	ghosts []Ghost
	// elsewhereMiB is the memory the listing charged to pids no holder is
	// (gone: ghosts; or not seen), per GPU, -1 for an amount it did not
	// tell; unplaced: it listed an app on a GPU it does not list.
	elsewhereMiB map[int]int64
	unplaced     bool
	warns        []string
	// early is the listing readEarly started, nil when it started none.
	early *earlyApps
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
	for i := range st.gpus {
		st.gpus[i].Source = SourceSMI
	}
	drv, drvOK, err := readDriverGPUs(s.driverDir())
	if err != nil {
		st.warns = append(st.warns, err.Error())
	}
	var w []string
	st.gpus, st.mapping, w = mapGPUs(st.gpus, drv, drvOK, st.smiOK)
	st.warns = append(st.warns, w...)
	return st, smiErr
}

// read is readGPUs plus the /proc scan: one nvidia-smi run. smiErr is a
// failing or hung nvidia-smi, err a failed scan.
func (s *scanner) read(ctx context.Context, smi *smiRunner, smiFindErr error) (gs gpuState, smiErr, err error) {
	gs, smiErr = s.readGPUs(ctx, smi, smiFindErr)
	holders, w, err := s.collect(&gs)
	if err != nil {
		return gs, smiErr, err
	}
	gs.holders = holders
	gs.warns = append(gs.warns, w...)
	return gs, smiErr, nil
}

// readEarly is read for a snapshot whose GPU reading waits on a process
// start (a one-shot, or a stream's first round) and that can reuse no
// listing: the /proc scan comes first, and when a holder maps a device
// (a context: nothingAllocated cannot hold, the listing is needed) the
// listing starts beside the GPU reading instead of after it (its output
// read once the reading is done). On the H200 each is a process start of
// ~20 ms. The scan before the reading is as good a snapshot as the scan
// after it: a holder that starts between them shows as memory held by
// nobody, which is never "free".
func (s *scanner) readEarly(ctx context.Context, smi *smiRunner, smiFindErr error) (gs gpuState, smiErr, err error) {
	raw, denied, err := s.scanFDs()
	if err != nil {
		return gs, nil, err
	}
	var apps *earlyApps
	if smiFindErr == nil && s.someMapped(raw) {
		gate := make(chan struct{})
		apps = startApps(withOutputGate(ctx, gate), smi) // its reader stops it (gpuState.early)
		defer close(gate)
	}
	gs, smiErr = s.readGPUs(ctx, smi, smiFindErr)
	holders, w := s.collectFrom(&gs, raw, denied)
	gs.holders = holders
	gs.warns = append(gs.warns, w...)
	gs.early = apps
	return gs, smiErr, nil
}

// someMapped: a scanned holder of a GPU maps an NVIDIA device.
func (s *scanner) someMapped(raw []rawHolder) bool {
	for _, r := range raw {
		if len(gpuMinors(r.devices)) > 0 && len(s.mappedDevices(r.pid)) > 0 {
			return true
		}
	}
	return false
}

// earlyApps is a --query-compute-apps run started before its snapshot
// needed it (readEarly).
type earlyApps struct {
	at     time.Time
	done   chan struct{}
	apps   []computeApp
	err    error
	cancel context.CancelFunc
}

func startApps(ctx context.Context, smi *smiRunner) *earlyApps {
	ctx, cancel := context.WithCancel(ctx)
	e := &earlyApps{at: time.Now(), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(e.done)
		e.apps, e.err = smi.queryApps(ctx)
	}()
	return e
}

// result waits for the listing.
func (e *earlyApps) result() ([]computeApp, error) {
	<-e.done
	return e.apps, e.err
}

// stop ends the listing if nobody read it (a failed GPU reading) and
// waits until its process is reaped.
func (e *earlyApps) stop() {
	e.cancel()
	<-e.done
}

// readApps runs --query-compute-apps (or takes the one readEarly started)
// and merges it into gs: owners, memory per GPU, suspicious protected
// names, ghosts.
func (s *scanner) readApps(ctx context.Context, gs *gpuState) error {
	if !gs.smiOK {
		return nil
	}
	var apps []computeApp
	var err error
	if gs.early != nil {
		apps, err = gs.early.result()
	} else {
		apps, err = gs.smi.queryApps(ctx)
	}
	if err != nil {
		return err
	}
	// The listing replaces whatever was known of the holders before.
	for i := range gs.holders {
		h := &gs.holders[i]
		h.Owner, h.MemMiB, h.MemByGPU, h.Suspicious = false, 0, nil, ""
	}
	var w []string
	gs.ghosts, w = mergeApps(gs.holders, gs.gpus, apps, s.hostPIDs, s.exists)
	gs.warns = append(gs.warns, w...)
	listed := map[int]bool{}
	for _, a := range apps {
		listed[a.PID] = true
	}
	gs.elsewhereMiB, gs.unplaced = chargedElsewhere(gs.holders, gs.gpus, apps)
	s.markMapped(gs.holders, listed, gs.mapping)
	narrowKeepers(gs.ghosts, gs.holders)
	gs.apps = true
	return nil
}

// appGPU is the index of the GPU a listed app runs on, by its uuid or bus id.
func appGPU(gpus []GPU, a computeApp) (int, bool) {
	for _, g := range gpus {
		if a.GPUUUID != "" && g.UUID == a.GPUUUID || a.BusID != "" && g.BusID != "" && normBusID(g.BusID) == normBusID(a.BusID) {
			return g.Index, true
		}
	}
	return 0, false
}

// chargedElsewhere sums, per GPU, the memory apps charge to pids that no
// holder is (see gpuState.elsewhereMiB).
func chargedElsewhere(holders []Holder, gpus []GPU, apps []computeApp) (map[int]int64, bool) {
	held := map[int]bool{}
	for _, h := range holders {
		held[h.PID] = true
	}
	out := map[int]int64{}
	unplaced := false
	for _, a := range apps {
		if held[a.PID] {
			continue
		}
		g, ok := appGPU(gpus, a)
		if !ok {
			unplaced = true
			continue
		}
		switch {
		case a.MemMiB < 0 || out[g] < 0:
			out[g] = -1
		default:
			out[g] += a.MemMiB
		}
	}
	return out, unplaced
}

// nothingAllocated: every GPU nvidia-smi lists reads 0 MiB used, the
// helper sees the host's PIDs, and no holder of a GPU maps an NVIDIA
// device: then --query-compute-apps would list nothing a snapshot uses.
// Why: a process it lists has a compute context, and a context holds GPU
// memory (hundreds of MiB on the H200) and maps the device files
// (context.go), so with no memory in use and no mapping nobody is an owner
// and no gone pid has memory charged to it (no ghost). Idle drivers that
// show a few MiB (older ones, MIG) never skip the listing.
func (s *scanner) nothingAllocated(gs gpuState) bool {
	if !s.hostPIDs || len(gs.gpus) == 0 {
		return false
	}
	for _, g := range gs.gpus {
		if g.Source != SourceSMI || g.MemUsedMiB != 0 {
			return false
		}
	}
	for _, h := range gs.holders {
		if len(h.GPUs) > 0 && len(s.mappedDevices(h.PID)) > 0 {
			return false
		}
	}
	return true
}

// listingReuse bounds the age of a session's listing that a snapshot
// may judge by instead of listing anew: a wait's polls keep theirs for
// appsRefresh polls of its default interval. A variable for tests.
var listingReuse = appsRefresh * DefaultWaitInterval

// reuseListing judges gs by the session's latest snapshot listing, younger
// than listingReuse, when a listing now could say nothing else of it, and
// reports whether it did. A free reads the host once per step (the unit
// stop's leftovers, gpu.free's look, its verification) a round trip or
// two apart; each --query-compute-apps costs a process start (47 ms on
// the H200).
//
// Why that stays true: every process the listing names has a compute
// context, and a context maps the device files and holds GPU memory (see
// nothingAllocated). So a holder that maps a device now and was no owner
// then (a new worker, a monitor that made a context) makes a listing
// needed, and so does memory that grew. For each GPU, the owners the
// listing named on it that are still there held no more than it reads now,
// and it reads no more than it read then less all the listing charged to
// pids no holder was and to the owners now gone (the same contexts less
// the gone ones, whose memory is released: what else went is memory of
// gone pids, a stopped worker's still draining then); or it reads 0 MiB
// and none of those owners is there (no context at all: no owner, no
// ghost). Anything else (an owner gone while its memory stays, charges of
// an amount unknown, an app on a GPU not listed, another GPU list): a new
// listing. The owners' amounts are the listing's, at most listingReuse
// old.
//
// A holdersOnly snapshot needs the holder part alone: what a listing would
// say of each holder. A process stays listed while its context lives (a
// context holds memory) and a new context maps the device files, so the
// GPUs' memory is not checked; its statuses and ghosts are not to be read.
func (s *scanner) reuseListing(ctx context.Context, gs *gpuState, key string) bool {
	l, ok := sessionOf(ctx).snapshotListing(key)
	if !ok || l.unplaced || time.Since(l.at) >= listingReuse || !sameGPUs(l.gpus, gs.gpus) {
		return false
	}
	here := map[Identity]bool{}
	for _, h := range gs.holders {
		here[h.Identity] = true
	}
	all := map[int]bool{}
	for i, g := range gs.gpus {
		if g.Source != SourceSMI || l.gpus[i].Source != SourceSMI {
			return false
		}
		all[g.Index] = true
		if s.holdersOnly {
			continue
		}
		owners := l.owners[g.Index]
		left := 0
		for _, id := range owners {
			if here[id] {
				left++
			}
		}
		now, then := g.MemUsedMiB, l.gpus[i].MemUsedMiB
		elsewhere, held := l.elsewhereMiB[g.Index], l.ownersMiB[g.Index]
		gone := int64(0)
		if left < len(owners) {
			gone = l.goneMiB(g.Index, here)
		}
		switch {
		case elsewhere >= 0 && held >= 0 && gone >= 0 && now >= held-gone && now <= then-elsewhere-gone:
		case now == 0 && left == 0:
		default:
			return false
		}
	}
	for _, h := range gs.holders {
		if j, judged := l.judged[h.Identity]; judged && j.Owner || !h.SharedOnly && len(h.GPUs) == 0 {
			continue
		}
		if len(s.mappedDevices(h.PID)) > 0 {
			return false
		}
	}
	l.judged.apply(gs.holders, all)
	for i := range gs.holders {
		markSuspicious(&gs.holders[i])
	}
	gs.apps = true
	return true
}

// narrowKeepers: where some of a ghost's unlisted holders map its context
// (owners), those keep its memory, not the monitors beside them (on the
// H200 a pynvml monitor was named with the forked child otherwise).
func narrowKeepers(ghosts []Ghost, holders []Holder) {
	owner := map[int]bool{}
	for _, h := range holders {
		owner[h.PID] = h.Owner
	}
	for i := range ghosts {
		var keep []int
		for _, pid := range ghosts[i].HeldBy {
			if owner[pid] {
				keep = append(keep, pid)
			}
		}
		if len(keep) > 0 {
			ghosts[i].HeldBy = keep
		}
	}
}

// noListing judges owners when nvidia-smi cannot list compute apps: a
// mapped device (a context) first, then nvidia-uvm, which NVML clients
// have open too: without a listing gpush cannot tell them apart.
func (s *scanner) noListing(gs *gpuState) {
	s.markMapped(gs.holders, nil, gs.mapping)
	uvmOwners(gs.holders)
}

// exists reports whether pid names a process (a zombie with no live
// thread has died).
func (s *scanner) exists(pid int) bool {
	st, err := s.proc.stat(pid)
	if err != nil {
		return false
	}
	return st.State != "Z" && st.State != "X" || s.proc.liveThreads(pid)
}

func (s *scanner) driverDir() string {
	if s.cfg.DriverDir != "" {
		return s.cfg.DriverDir
	}
	return filepath.Join(s.proc.dir, "driver/nvidia")
}

// inHostPIDNamespace: kernel threads (kthreadd is pid 2) are visible only
// in the initial PID namespace, and there the helper's NSpid has one entry.
// Only then does a pid nvidia-smi lists but /proc lacks mean a dead process.
func (p procFS) inHostPIDNamespace() bool {
	st, err := p.stat(2)
	if err != nil || st.Flags&pfKthread == 0 {
		return false
	}
	b, err := os.ReadFile(filepath.Join(p.dir, "self/status"))
	if err != nil {
		return false
	}
	return len(parseStatus(b).NSpid) == 1
}

// snapshotStartHook, when set by tests, runs as a snapshot begins, before
// it notes the time its readings must be newer than.
var snapshotStartHook func()

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
	if snapshotStartHook != nil {
		snapshotStartHook()
	}
	since := time.Now()
	smi, findErr := newSMIRunner(s.cfg)
	// slow: the GPU reading waits on a process start.
	slow := true
	if findErr == nil {
		// A stream a wait of this session left running: its first whole
		// round begun after this call did is as fresh as a --query-gpu
		// run started now, and costs no process start.
		if st, release, started := sessionOf(ctx).snapshotStream(smi.path); st != nil {
			defer release()
			smi.stream, smi.since = st, since
			slow = started
			if started {
				smi.streamWait = min(smi.timeout, memStreamStall)
			}
		}
	}
	read, key := s.read, ""
	if findErr == nil {
		key = listingKey(s.cfg, smi.path)
		if l, ok := sessionOf(ctx).snapshotListing(key); slow && (!ok || time.Since(l.at) >= listingReuse) {
			read = s.readEarly
		}
	}
	gs, smiErr, err := read(ctx, smi, findErr)
	if gs.early != nil {
		defer gs.early.stop() // unread when the GPU reading failed
	}
	if err != nil {
		return nil, err
	}
	if smiErr != nil {
		if len(gs.gpus) == 0 {
			// Neither the driver nor a held device names a GPU: an empty
			// list would read as "no GPU here", which nobody can tell.
			return nil, fmt.Errorf("nvidia-smi failed and no GPU is known otherwise (no /proc/driver/nvidia entry, no held device): how many GPUs this host has and what they hold cannot be told: %w", smiErr)
		}
		gs.warns = append(gs.warns, "nvidia-smi failed: "+smiErr.Error())
	}
	if !gs.smiOK {
		s.noListing(&gs)
	} else if s.nothingAllocated(gs) {
		// The listing could name no process: judged as an empty one.
		for i := range gs.holders {
			markSuspicious(&gs.holders[i])
		}
		gs.apps = true
	} else if !s.reuseListing(ctx, &gs, key) {
		at := time.Now()
		if gs.early != nil {
			at = gs.early.at
		}
		if err := s.readApps(ctx, &gs); err != nil {
			gs.warns = append(gs.warns, "nvidia-smi compute apps: "+err.Error()+": owners judged by mapped devices and nvidia-uvm only")
			s.noListing(&gs)
		} else {
			// The session's next wait and snapshot may start from it (see
			// WaitFree, reuseListing).
			sessionOf(ctx).recordListing(key, at, gs)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	snap.SMI = gs.smiOK
	if gs.gpus != nil {
		snap.GPUs = gs.gpus
	}
	if gs.holders != nil {
		snap.Holders = gs.holders
	}
	snap.Ghosts = gs.ghosts
	snap.Warnings = gs.warns
	if !s.noManagers {
		s.fillManagers(ctx, snap.Holders)
	}
	snap.Status = Assess(snap.GPUs, snap.Holders, snap.Ghosts, nil)
	return snap, nil
}
