package helper

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ctlProc is a real process driven line by line: each line written to its
// stdin runs the script's next step, which answers with one line.
type ctlProc struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	pid int
}

// startCtl runs prog args in a process group of its own and waits for its
// first line ("ready" or the pids it prints); stopped by pid at cleanup.
func startCtl(t *testing.T, prog string, args ...string) (*ctlProc, string) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &ctlProc{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out), pid: cmd.Process.Pid}
	t.Cleanup(func() {
		syscall.Kill(-p.pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return p, p.line()
}

func (p *ctlProc) line() string {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("pid %d: exited before answering: %v", p.pid, p.out.Err())
	}
	return p.out.Text()
}

// step sends one line and returns the answer.
func (p *ctlProc) step() string {
	p.t.Helper()
	if _, err := io.WriteString(p.in, "\n"); err != nil {
		p.t.Fatalf("pid %d: %v", p.pid, err)
	}
	return p.line()
}

// waitIdle waits until pid sleeps and its CPU clock stops moving, so that
// a test's "idle" is the process's, not a guess.
func waitIdle(t *testing.T, pid int) {
	t.Helper()
	var st, st2 procStat
	var a, b int64
	for i := 0; i < 1000; i++ {
		var err error
		st, err = procFS{dir: "/proc"}.stat(pid)
		if err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
		a, _ = procCPU(pid)
		time.Sleep(10 * time.Millisecond)
		b, _ = procCPU(pid)
		st2, _ = procFS{dir: "/proc"}.stat(pid)
		if st.State == "S" && st2.State == "S" && a == b && a > 0 {
			return
		}
	}
	t.Fatalf("pid %d never went idle: states %s %s, CPU clock %d then %d", pid, st.State, st2.State, a, b)
}

func cachedScanner(t *testing.T, cfg Config) (*scanner, *scanCache) {
	t.Helper()
	s, err := newScanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := cacheFor(s)
	if c == nil {
		t.Fatal("no scan cache for the real /proc")
	}
	return s, c
}

func scanNow(t *testing.T, s *scanner) map[int]rawHolder {
	t.Helper()
	raw, _, err := s.scanFDs()
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]rawHolder{}
	for _, r := range raw {
		m[r.pid] = r
	}
	return m
}

// dropped reports whether the cache was dropped since drops0 (a mount
// made by another test on the machine): its read counts start over then.
func dropped(t *testing.T, c *scanCache, drops0 int) bool {
	c.mu.Lock()
	d := c.drops
	c.mu.Unlock()
	if d != drops0 {
		t.Logf("the cache was dropped (mount table or DevDir changed): read counts not checked")
	}
	return d != drops0
}

// dropScanCacheT forgets s's cache: the next scan is cold.
func dropScanCacheT(s *scanner) {
	key, ok := cacheKey(s)
	if !ok {
		return
	}
	scanCaches.mu.Lock()
	delete(scanCaches.m, key)
	scanCaches.mu.Unlock()
}

func entryOf(c *scanCache, pid int) *scanEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[pid]
}

// A process that opens a device after a scan ran, so the next scan reads
// it; one that closes it again is read again (a cached holder always is);
// while it sleeps its table is not read.
func TestScanCacheOpenCloseIdle(t *testing.T) {
	h := newHost(t, 1)
	s, c := cachedScanner(t, h.cfg)
	script := `echo ready; read x; exec 3<"$1"; echo opened; read x; exec 3<&-; echo closed; read x`
	p, _ := startCtl(t, "sh", "-c", script, "sh", h.d("nvidia0"))
	waitIdle(t, p.pid)
	if _, ok := scanNow(t, s)[p.pid]; ok {
		t.Fatalf("pid %d listed before it opened anything", p.pid)
	}
	d0 := c.drops
	if e := entryOf(c, p.pid); e == nil || e.reads != 1 {
		t.Fatalf("entry after the first scan: %+v, want read once", e)
	}
	for i := 0; i < 3; i++ {
		scanNow(t, s)
	}
	if e := entryOf(c, p.pid); e.reads != 1 && !dropped(t, c, d0) {
		t.Fatalf("idle process read %d times in 4 scans, want 1", e.reads)
	}

	if got := p.step(); got != "opened" {
		t.Fatalf("got %q", got)
	}
	waitIdle(t, p.pid)
	r, ok := scanNow(t, s)[p.pid]
	if !ok || !slices.Equal(r.devices, []string{"nvidia0"}) {
		t.Fatalf("after open: %+v (listed %v), want nvidia0", r, ok)
	}
	if e := entryOf(c, p.pid); e.reads != 2 && !dropped(t, c, d0) {
		t.Fatalf("reads %d after it ran, want 2", e.reads)
	}

	if got := p.step(); got != "closed" {
		t.Fatalf("got %q", got)
	}
	waitIdle(t, p.pid)
	if r, ok := scanNow(t, s)[p.pid]; ok {
		t.Fatalf("after close still listed: %+v", r)
	}
	scanNow(t, s)
	if e := entryOf(c, p.pid); e.reads != 3 && !dropped(t, c, d0) {
		t.Fatalf("reads %d after close and an idle scan, want 3", e.reads)
	}
}

// A process whose fd table another process shares (clone CLONE_FILES)
// changes without running: when the sharer opens a device, the idle one
// is listed too, and no longer once it is closed.
func TestScanCacheSharedTable(t *testing.T) {
	py := needPython(t)
	h := newHost(t, 1)
	s, c := cachedScanner(t, h.cfg)
	p, first := startCtl(t, py, "-c", shareFilesPy, h.d("nvidia0"))
	f := strings.Fields(first)
	if len(f) != 3 || f[0] != "ready" {
		t.Fatalf("sharer said %q", first)
	}
	child, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(child, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(child, &ws, 0, nil)
	})
	if same, err := kcmpFiles(p.pid, child); err != nil || !same {
		t.Fatalf("pids %d and %d do not share their fd table (%v)", p.pid, child, err)
	}
	waitIdle(t, child)
	waitIdle(t, p.pid)
	scanNow(t, s)
	d0 := c.drops
	scanNow(t, s)
	if e := entryOf(c, child); e == nil || e.reads != 1 && !dropped(t, c, d0) {
		t.Fatalf("idle sharer's entry: %+v, want read once", e)
	}
	if got := p.step(); got != "opened" {
		t.Fatalf("got %q", got)
	}
	waitIdle(t, p.pid)
	got := scanNow(t, s)
	for _, pid := range []int{p.pid, child} {
		if r, ok := got[pid]; !ok || !slices.Equal(r.devices, []string{"nvidia0"}) {
			t.Fatalf("pid %d after its sharer opened nvidia0: %+v (listed %v)", pid, r, ok)
		}
	}
	if got := p.step(); got != "closed" {
		t.Fatalf("got %q", got)
	}
	waitIdle(t, p.pid)
	got = scanNow(t, s)
	for _, pid := range []int{p.pid, child} {
		if r, ok := got[pid]; ok {
			t.Fatalf("pid %d still listed after close: %+v", pid, r)
		}
	}
}

// kcmpFiles (tests) reports whether pids a and b share one fd table.
func kcmpFiles(a, b int) (bool, error) {
	r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpFilesType, 0, 0, 0)
	if e != 0 {
		return false, e
	}
	return r == 0, nil
}

// shareFilesPy clones a child that shares the parent's fd table
// (CLONE_FILES, no CLONE_VM: a fork otherwise) and only sleeps; the parent
// opens and closes argv[1] one stdin line at a time.
const shareFilesPy = `
import ctypes, os, platform, signal, sys
nr = {"x86_64": 56, "aarch64": 220}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
pid = libc.syscall(nr, 0x400 | signal.SIGCHLD, 0, 0, 0, 0)
if pid < 0:
    sys.exit("clone: errno %d" % ctypes.get_errno())
if pid == 0:
    while True:
        signal.pause()
print("ready", os.getpid(), pid, flush=True)
sys.stdin.readline()
fd = os.open(sys.argv[1], os.O_RDONLY)
print("opened", flush=True)
sys.stdin.readline()
os.close(fd)
print("closed", flush=True)
sys.stdin.readline()
`

// A pid reused by a new process is read, whatever the cache says of the
// old one: the old one is made idle and cached, killed, and its pid handed
// to a holder through ns_last_pid.
func TestScanCacheReusedPID(t *testing.T) {
	h := newHost(t, 1)
	s, c := cachedScanner(t, h.cfg)
	old, _ := startCtl(t, "sh", "-c", "echo ready; read x")
	waitIdle(t, old.pid)
	scanNow(t, s)
	d0 := c.drops
	scanNow(t, s)
	e := entryOf(c, old.pid)
	if e == nil || e.reads != 1 && !dropped(t, c, d0) || len(e.devs) != 0 {
		t.Fatalf("old process's entry %+v", e)
	}
	pid := old.pid
	syscall.Kill(-pid, syscall.SIGKILL)
	old.cmd.Wait()
	// start time is in clock ticks: let one pass so the pid is all that
	// the two share.
	time.Sleep(30 * time.Millisecond)
	var p *ctlProc
	for try := 0; try < 200 && p == nil; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI runs as root: ns_last_pid: %v", err)
			}
			t.Skipf("needs root to choose a pid: %v", err)
		}
		q, _ := startCtl(t, "sh", "-c", `exec 3<"$1"; echo ready; read x`, "sh", h.d("nvidia0"))
		if q.pid == pid {
			p = q
		}
	}
	if p == nil {
		t.Fatalf("pid %d was not handed out again in 200 tries", pid)
	}
	waitIdle(t, pid)
	r, ok := scanNow(t, s)[pid]
	if !ok || !slices.Equal(r.devices, []string{"nvidia0"}) {
		t.Fatalf("new process at reused pid %d: %+v (listed %v)", pid, r, ok)
	}
	if ne := entryOf(c, pid); ne.start == e.start {
		t.Fatalf("same start time %d for both processes", e.start)
	}
}

// The cached scan answers what the uncached one does, on the live /proc
// with many processes: holders of every kind (several devices, a zombie
// leader whose threads hold them, shared devices only), sleepers, and the
// machine's own processes. A pid whose answer changed between two uncached
// scans is in flux and not compared.
func TestScanCacheMatchesUncached(t *testing.T) {
	h := newHost(t, 2)
	h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidia-uvm"), "--child-mem-mib", "10")
	z := h.start("", "--dev", h.d("nvidia1"), "--zombie-leader")
	h.start("", "--dev", h.d("nvidia-caps/nvidia-cap1"))
	sleepers := startSleepers(t, 300)
	for _, pid := range sleepers[:5] {
		waitIdle(t, pid)
	}
	s, _ := cachedScanner(t, h.cfg)
	u1, den1, err := s.scanFDsUncached()
	if err != nil {
		t.Fatal(err)
	}
	_, denCold, err := s.scanFDs()
	if err != nil {
		t.Fatal(err)
	}
	dropScanCacheT(s)
	s, c := cachedScanner(t, h.cfg)
	cold := scanNow(t, s)
	readsCold, d0 := c.tableReads, c.drops
	_, denWarm, err := s.scanFDs()
	if err != nil {
		t.Fatal(err)
	}
	warm := scanNow(t, s)
	readsWarm := c.tableReads - readsCold
	u2, den2, err := s.scanFDsUncached()
	if err != nil {
		t.Fatal(err)
	}
	byPID := func(raw []rawHolder) map[int]rawHolder {
		m := map[int]rawHolder{}
		for _, r := range raw {
			m[r.pid] = r
		}
		return m
	}
	a, b := byPID(u1), byPID(u2)
	pids := map[int]bool{}
	for _, m := range []map[int]rawHolder{a, b, cold, warm} {
		for pid := range m {
			pids[pid] = true
		}
	}
	compared := 0
	for pid := range pids {
		ra, ina := a[pid]
		rb, inb := b[pid]
		if ina != inb || !slices.Equal(ra.devices, rb.devices) || ra.task != rb.task {
			continue
		}
		compared++
		for name, m := range map[string]map[int]rawHolder{"cold": cold, "warm": warm} {
			r, in := m[pid]
			if in != ina || !slices.Equal(r.devices, ra.devices) || r.task != ra.task {
				t.Errorf("pid %d: %s cached scan %+v (listed %v), uncached %+v (listed %v)", pid, name, r, in, ra, ina)
			}
		}
	}
	if den1 == den2 && (denCold != den1 || denWarm != den1) {
		t.Errorf("processes denied: uncached %d, cached cold %d, warm %d", den1, denCold, denWarm)
	}
	if compared < 5 {
		t.Fatalf("only %d holders compared, want the test's 5", compared)
	}
	if z := a[z.pid]; z.task == 0 {
		t.Errorf("zombie leader %d not found through its threads: %+v", z.pid, z)
	}
	// Most of the machine sleeps: the warm scan reads far fewer tables.
	n, err := s.proc.pids()
	if err != nil {
		t.Fatal(err)
	}
	if readsWarm*2 > int64(len(n)) && !dropped(t, c, d0) {
		t.Errorf("warm scan read %d fd tables of %d processes (cold: %d)", readsWarm, len(n), readsCold)
	}
	t.Logf("%d processes; fd tables read: cold %d, warm %d", len(n), readsCold, readsWarm)
}

// startSleepers starts n sleep processes in one process group of their
// own, each with /dev/null as stdin, stdout and stderr as a daemon has,
// and stops them by pid at cleanup.
func startSleepers(t testing.TB, n int) []int {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var pids []int
	pgid := 0
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
	})
	for i := 0; i < n; i++ {
		attr := syscall.ProcAttr{Files: []uintptr{null.Fd(), null.Fd(), null.Fd()}}
		attr.Sys = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
		pid, err := syscall.ForkExec(sleepPath(t), []string{"sleep", "3600"}, &attr)
		if err != nil {
			t.Fatalf("sleeper %d: %v", i, err)
		}
		if pgid == 0 {
			pgid = pid
		}
		pids = append(pids, pid)
	}
	return pids
}

func sleepPath(t testing.TB) string {
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A scan of a fake ProcDir is never cached: its pids are no kernel's.
func TestScanCacheOnlyRealProc(t *testing.T) {
	dir := t.TempDir()
	if cacheFor(&scanner{proc: procFS{dir: dir}}) != nil {
		t.Fatal("a cache for a plain folder")
	}
	if realProc(dir) {
		t.Fatal("a plain folder taken for /proc")
	}
	if !realProc("/proc") {
		t.Fatal("/proc not taken for the kernel's")
	}
}

// Configs with different DevDirs get caches of their own.
func TestScanCacheKeyed(t *testing.T) {
	h1, h2 := newHost(t, 1), newHost(t, 1)
	_, c1 := cachedScanner(t, h1.cfg)
	_, c2 := cachedScanner(t, h2.cfg)
	_, c1again := cachedScanner(t, h1.cfg)
	if c1 == c2 || c1 != c1again {
		t.Fatalf("caches %p %p %p: want one per DevDir", c1, c2, c1again)
	}
}

// A file renamed to a device name changes what an idle process's fd link
// reads: the cache notices DevDir moved and reads every table again.
func TestScanCacheRenameIntoDevDir(t *testing.T) {
	h := newHost(t, 1)
	s, _ := cachedScanner(t, h.cfg)
	other := h.d("other")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := startCtl(t, "sh", "-c", `exec 3<"$1"; echo ready; read x`, "sh", other)
	waitIdle(t, p.pid)
	if _, ok := scanNow(t, s)[p.pid]; ok {
		t.Fatal("holder of a non-device file listed")
	}
	scanNow(t, s)
	if err := os.Rename(other, h.d("nvidia7")); err != nil {
		t.Fatal(err)
	}
	r, ok := scanNow(t, s)[p.pid]
	if !ok || !slices.Equal(r.devices, []string{"nvidia7"}) {
		t.Fatalf("after the rename: %+v (listed %v), want nvidia7", r, ok)
	}
}

func TestParseStatBrief(t *testing.T) {
	for line, want := range map[string]statBrief{
		"437 (python3) S 415 414 414 0 -1 4194560 90908 0 154 0 415 54 0 0 20 0 18 0 2602 29034573824": {'S', 18, 2602},
		"99 (a) 1 2 (c)) R 1 2 3 0 -1 2097216 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n":                      {'R', 1, 777},
		"7 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 2 0 9\n":                                            {'Z', 2, 9},
	} {
		if got, ok := parseStatBrief([]byte(line)); !ok || got != want {
			t.Errorf("%q: %+v %v, want %+v", line, got, ok, want)
		}
	}
	for _, bad := range []string{
		"99 (a) R 1 2 3",
		"no parenthesis at all 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22",
		"5 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 -3 0 7",
		"5 (x) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7",
		"5 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 x7",
		"5 (x) S 1 1 1 0 -1 0 0 0 0 0\n0 0 0 0 20 0 1 0 7",
	} {
		if got, ok := parseStatBrief([]byte(bad)); ok {
			t.Errorf("%q: %+v, want refused", bad, got)
		}
	}
	r, err := newProcReader("/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	st, ok := r.stat(os.Getpid(), 0)
	full, err := procFS{dir: "/proc"}.stat(os.Getpid())
	if !ok || err != nil || st.start != full.StartTime || st.threads < 2 {
		t.Errorf("this process: %+v %v, stat %+v %v: want its start time and several threads (Go runtime)", st, ok, full, err)
	}
	tids, ok := r.tids(os.Getpid(), nil)
	if !ok || len(tids) != st.threads && len(tids) < 2 || !slices.IsSorted(tids) {
		t.Errorf("tids %v %v, num_threads %d", tids, ok, st.threads)
	}
}

// Scans of one config from several goroutines (a long-lived helper's
// concurrent calls) and of another beside them: each answers its own.
func TestScanCacheConcurrent(t *testing.T) {
	h1, h2 := newHost(t, 1), newHost(t, 1)
	hd := h1.start("", "--dev", h1.d("nvidia0"))
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		cfg, want := h1.cfg, true
		if i%2 == 1 {
			cfg, want = h2.cfg, false
		}
		go func() {
			s, err := newScanner(cfg)
			if err != nil {
				errs <- err
				return
			}
			for j := 0; j < 5; j++ {
				raw, _, err := s.scanFDs()
				if err != nil {
					errs <- err
					return
				}
				found := false
				for _, r := range raw {
					found = found || r.pid == hd.pid
				}
				if found != want {
					errs <- fmt.Errorf("scan %d of %s: holder %d listed %v, want %v", j, cfg.DevDir, hd.pid, found, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// Past maxScanCaches configs the least recently used cache goes; a scan
// that still holds it reads without it.
func TestScanCacheEviction(t *testing.T) {
	h0 := newHost(t, 1)
	s0, c0 := cachedScanner(t, h0.cfg)
	scanNow(t, s0)
	for i := 0; i < maxScanCaches; i++ {
		cachedScanner(t, newHost(t, 1).cfg)
	}
	c0.mu.Lock()
	dead, rd := c0.dead, c0.rd
	c0.mu.Unlock()
	if !dead || rd != nil {
		t.Fatalf("oldest cache after %d others: dead %v, reader %v", maxScanCaches, dead, rd)
	}
	hd := h0.start("", "--dev", h0.d("nvidia0"))
	reads := c0.tableReads
	raw, _, err := s0.scanFDs()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range raw {
		found = found || r.pid == hd.pid
	}
	if !found {
		t.Fatalf("holder %d not found after its cache went", hd.pid)
	}
	if c0.tableReads != reads {
		t.Fatal("an evicted cache was used")
	}
	if c := cacheFor(s0); c == c0 {
		t.Fatal("evicted cache handed out again")
	}
}

// A change of the mount table (a mount moved could change what fd links
// read) drops the cache: an idle process is read again.
func TestScanCacheMountChange(t *testing.T) {
	h := newHost(t, 1)
	s, c := cachedScanner(t, h.cfg)
	p, _ := startCtl(t, "sh", "-c", "echo ready; read x")
	waitIdle(t, p.pid)
	scanNow(t, s)
	d0 := c.drops
	scanNow(t, s)
	if e := entryOf(c, p.pid); e == nil || e.reads != 1 && !dropped(t, c, d0) {
		t.Fatalf("idle process's entry %+v", e)
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI runs as root: mount: %v", err)
		}
		t.Skipf("needs root to mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	drops, reads := c.drops, c.tableReads
	scanNow(t, s)
	if e := entryOf(c, p.pid); e.reads != 1 || c.drops < drops+1 || c.tableReads-reads < 2 {
		t.Fatalf("after a mount: drops %d (before %d), %d tables read, entry %+v: want the cache dropped once, so every table read again", c.drops, drops, c.tableReads-reads, e)
	}
	d1 := c.drops
	r1 := c.tableReads
	scanNow(t, s)
	if c.drops == d1 && c.tableReads-r1 > (r1-reads)/2 {
		t.Fatalf("no mount change, yet %d tables read (%d after the mount)", c.tableReads-r1, r1-reads)
	}
}

// A process of two threads is reused while both sleep (the thread list
// path); when its second thread opens a device and exits, it is read.
func TestScanCacheThreads(t *testing.T) {
	py := needPython(t)
	h := newHost(t, 1)
	s, c := cachedScanner(t, h.cfg)
	p, _ := startCtl(t, py, "-c", twoThreadsPy, h.d("nvidia0"))
	waitIdle(t, p.pid)
	scanNow(t, s)
	d0 := c.drops
	for i := 0; i < 3; i++ {
		scanNow(t, s)
	}
	e := entryOf(c, p.pid)
	if e == nil || e.threads != 2 || len(e.tids) != 2 {
		t.Fatalf("entry %+v: want 2 threads listed", e)
	}
	if e.reads != 1 && !dropped(t, c, d0) {
		t.Fatalf("idle two-thread process read %d times in 4 scans, want 1", e.reads)
	}
	if got := p.step(); got != "opened" {
		t.Fatalf("got %q", got)
	}
	waitIdle(t, p.pid)
	r, ok := scanNow(t, s)[p.pid]
	if !ok || !slices.Equal(r.devices, []string{"nvidia0"}) {
		t.Fatalf("after its thread opened nvidia0 and exited: %+v (listed %v)", r, ok)
	}
}

// twoThreadsPy sleeps in two threads; on a stdin line the second opens
// argv[1] and exits, the fd staying in the process's table.
const twoThreadsPy = `
import os, sys, threading
go = threading.Event()
def worker():
    go.wait()
    os.open(sys.argv[1], os.O_RDONLY)
t = threading.Thread(target=worker)
t.start()
print("ready", flush=True)
sys.stdin.readline()
go.set()
t.join()
print("opened", flush=True)
sys.stdin.readline()
`

// needPython finds python3: CI must have it (make deps), elsewhere the test
// is skipped without it.
func needPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI needs python3 (make deps)")
		}
		t.Skip("needs python3")
	}
	return py
}
