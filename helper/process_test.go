package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpush/gpush/lab/labbuild"
	"github.com/gpush/gpush/lab/labgpu"
)

// Binaries built once by TestMain from lab/cmd.
var holderBin, fakeSMIBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gpush-helper-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	holderBin = filepath.Join(dir, "gpu-holder")
	fakeSMIBin = filepath.Join(dir, "fake-nvidia-smi")
	// The holder the lab runs: its C build where cc is there.
	kind, err := labbuild.TestHolder(context.Background(), holderBin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build gpu-holder: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "helper tests: %s gpu-holder\n", kind)
	cmd := exec.Command("go", "build", "-o", fakeSMIBin, "../lab/cmd/fake-nvidia-smi")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build fake-nvidia-smi: %v\n", err)
		return 1
	}
	// Orphaned holders are re-parented to this process, which reaps them,
	// instead of to a pid 1 that may never reap (zombies left behind).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
	}
	return m.Run()
}

// fakeGPU and fakeConfig mirror fake-nvidia-smi.json (written here by hand:
// the helper must not depend on the lab's code).
type fakeGPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	BusID       string `json:"bus_id"`
	TotalMiB    int64  `json:"total_mib"`
	BaselineMiB int64  `json:"baseline_mib"`
}

type fakeConfig struct {
	DevDir       string    `json:"dev_dir"`
	GPUs         []fakeGPU `json:"gpus"`
	ReleaseDelay string    `json:"release_delay,omitempty"`
	Fault        string    `json:"fault,omitempty"`
	FaultOn      []string  `json:"fault_on,omitempty"`
}

// host is one simulated GPU host: fake device files and a fake nvidia-smi.
type host struct {
	t    testing.TB
	dir  string
	dev  string
	smi  string
	fake fakeConfig
	cfg  Config
}

func newHost(t testing.TB, nGPU int) *host {
	t.Helper()
	dir := t.TempDir()
	h := &host{t: t, dir: dir, dev: filepath.Join(dir, "dev"), smi: filepath.Join(dir, "smi", "nvidia-smi")}
	for _, d := range []string{h.dev, filepath.Join(h.dev, "nvidia-caps"), filepath.Dir(h.smi)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps/nvidia-cap1"}
	for i := 0; i < nGPU; i++ {
		names = append(names, fmt.Sprintf("nvidia%d", i))
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(h.dev, n), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(fakeSMIBin, h.smi); err != nil {
		t.Fatal(err)
	}
	h.fake = fakeConfig{DevDir: h.dev}
	for i := 0; i < nGPU; i++ {
		h.fake.GPUs = append(h.fake.GPUs, fakeGPU{Index: i, UUID: fmt.Sprintf("GPU-d7f963c5-cdb5-ba9d-c562-%012d", i), Name: "NVIDIA H200", BusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i), TotalMiB: 143771})
	}
	h.save()
	h.cfg = Config{DevDir: h.dev, NvidiaSMI: h.smi, SMITimeout: Duration(5 * time.Second)}
	return h
}

// save writes the fake nvidia-smi's config beside it.
func (h *host) save() {
	b, err := json.Marshal(h.fake)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(h.smi), "fake-nvidia-smi.json"), b, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *host) d(name string) string { return filepath.Join(h.dev, name) }

// holder is a started gpu-holder; child is its --child-mem-mib worker.
type holder struct {
	cmd   *exec.Cmd
	pid   int
	child int
	done  chan error
}

// start runs gpu-holder (bin, or a copy named as) in its own process group
// and waits for its ready lines.
func (h *host) start(bin string, args ...string) *holder {
	h.t.Helper()
	if bin == "" {
		bin = holderBin
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	want := 1
	for _, a := range args {
		if a == "--child-mem-mib" || a == "--keeper" {
			want = 2
		}
	}
	sc := bufio.NewScanner(out)
	var pids []int
	for len(pids) < want && sc.Scan() {
		if p, ok := labgpu.ReadyPID(sc.Text()); ok {
			pids = append(pids, p)
		}
	}
	if len(pids) < want {
		cmd.Process.Kill()
		cmd.Wait()
		h.t.Fatalf("%s %v: exited before ready", bin, args)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	hd := &holder{cmd: cmd, pid: pids[0], done: make(chan error, 1)}
	if want == 2 {
		hd.child = pids[1]
	}
	go func() { hd.done <- cmd.Wait() }()
	h.t.Cleanup(func() {
		// Our own children: their pids cannot be reused before they are reaped.
		cmd.Process.Kill()
		<-hd.done
		if hd.child > 0 {
			syscall.Kill(hd.child, syscall.SIGKILL)
			var ws unix.WaitStatus
			unix.Wait4(hd.child, &ws, 0, nil)
		}
	})
	return hd
}

// as returns the holder binary linked under another name (comm follows).
func (h *host) as(name string) string {
	p := filepath.Join(h.dir, "as", name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if _, err := os.Lstat(p); err == nil {
		return p
	}
	if err := os.Symlink(holderBin, p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// alive reports whether pid runs (zombies are dead).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st, err := parseStat(b)
	return err == nil && st.State != "Z" && st.State != "X"
}

// liveThreads counts pid's threads other than its leader that still run.
func liveThreads(pid int) int {
	tids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	n := 0
	for _, d := range tids {
		if d.Name() == strconv.Itoa(pid) {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, d.Name()))
		if st, perr := parseStat(b); err == nil && perr == nil && st.State != "Z" && st.State != "X" {
			n++
		}
	}
	return n
}

func identity(t *testing.T, pid int) Identity {
	t.Helper()
	st, err := procFS{dir: "/proc"}.stat(pid)
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	boot, _ := procFS{dir: "/proc"}.bootID()
	return Identity{PID: pid, StartTime: st.StartTime, BootID: boot}
}

func snapshot(t *testing.T, cfg Config) *Snapshot {
	t.Helper()
	s, err := TakeSnapshot(context.Background(), cfg)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

func findHolder(s *Snapshot, pid int) *Holder {
	for i := range s.Holders {
		if s.Holders[i].PID == pid {
			return &s.Holders[i]
		}
	}
	return nil
}

func result(t *testing.T, r *KillResponse, pid int) KillResult {
	t.Helper()
	for _, x := range r.Results {
		if x.PID == pid {
			return x
		}
	}
	t.Fatalf("no result for pid %d in %+v", pid, r.Results)
	return KillResult{}
}

func TestSnapshotPlainHolder(t *testing.T) {
	h := newHost(t, 2)
	p := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia-uvm"), "--dev", h.d("nvidia-caps/nvidia-cap1"), "--mem-mib", "10850")
	s := snapshot(t, h.cfg)
	if !s.SMI || len(s.GPUs) != 2 || s.Version != Version || s.BootID == "" {
		t.Fatalf("snapshot: smi %v gpus %+v warnings %v", s.SMI, s.GPUs, s.Warnings)
	}
	if s.GPUs[1].MemUsedMiB != 10850 || s.GPUs[0].MemUsedMiB != 0 || s.GPUs[1].MemTotalMiB != 143771 || s.GPUs[1].Minor != 1 {
		t.Errorf("gpus: %+v", s.GPUs)
	}
	x := findHolder(s, p.pid)
	if x == nil {
		t.Fatalf("holder %d not found in %+v", p.pid, s.Holders)
	}
	want := identity(t, p.pid)
	if x.Identity != want {
		t.Errorf("identity %+v, want %+v", x.Identity, want)
	}
	self := os.Getpid()
	if x.PPID != self || x.PGID != p.pid || x.SID != mustSid(t) || x.UID != os.Getuid() || x.User == "" || x.Comm != "gpu-holder" || x.State != "S" {
		t.Errorf("fields: %+v (want ppid %d pgid %d uid %d)", x, self, p.pid, os.Getuid())
	}
	if len(x.Cmdline) != 11 || x.Cmdline[0] != holderBin || x.Cmdline[10] != "10850" {
		t.Errorf("cmdline %q", x.Cmdline)
	}
	if strings.Join(x.Devices, ",") != "nvidia-caps/nvidia-cap1,nvidia-uvm,nvidia1,nvidiactl" || len(x.GPUs) != 1 || x.GPUs[0] != 1 || x.SharedOnly {
		t.Errorf("devices %v gpus %v shared %v", x.Devices, x.GPUs, x.SharedOnly)
	}
	if x.MemMiB != 10850 || x.Protected || x.AgeSeconds < 0 || x.AgeSeconds > 3600 {
		t.Errorf("mem %d protected %v age %v", x.MemMiB, x.Protected, x.AgeSeconds)
	}
	if len(x.NSpid) == 0 || x.NSpid[0] != p.pid {
		t.Errorf("nspid %v", x.NSpid)
	}
	cg, _ := os.ReadFile("/proc/self/cgroup")
	if want := parseCgroup(cg); x.Cgroup != want.Path || x.Unit != want.Unit {
		t.Errorf("cgroup %q unit %q, want %+v", x.Cgroup, x.Unit, want)
	}
	for _, other := range s.Holders {
		if other.PID == os.Getpid() {
			t.Error("the helper lists itself")
		}
	}
	var tbl strings.Builder
	WriteTable(&tbl, s)
	if !strings.Contains(tbl.String(), strconv.Itoa(p.pid)) || !strings.Contains(tbl.String(), "10850MiB") {
		t.Errorf("table lacks the holder:\n%s", tbl.String())
	}
}

func TestSnapshotSharedOnly(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidiactl"), "--mem-mib", "500")
	s := snapshot(t, h.cfg)
	x := findHolder(s, p.pid)
	if x == nil {
		t.Fatal("ctl-only holder not found")
	}
	if !x.SharedOnly || len(x.GPUs) != 0 || x.MemMiB != 0 || s.GPUs[0].MemUsedMiB != 0 {
		t.Errorf("shared %v gpus %v mem %d gpu0 used %d", x.SharedOnly, x.GPUs, x.MemMiB, s.GPUs[0].MemUsedMiB)
	}
	for _, w := range s.Warnings {
		if strings.Contains(w, strconv.Itoa(p.pid)) {
			t.Errorf("nvidia-smi listed the ctl-only holder: %s", w)
		}
	}
}

func TestSnapshotWithoutSMI(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	cfg := h.cfg
	cfg.NvidiaSMI = filepath.Join(h.dir, "no-such-nvidia-smi")
	s := snapshot(t, cfg)
	x := findHolder(s, p.pid)
	if s.SMI || x == nil || len(x.GPUs) != 1 || x.GPUs[0] != 0 {
		t.Fatalf("smi %v holder %+v", s.SMI, x)
	}
	if !strings.Contains(strings.Join(s.Warnings, "\n"), "not found") || !strings.Contains(strings.Join(s.Warnings, "\n"), "assuming /dev/nvidiaN") {
		t.Errorf("warnings %v", s.Warnings)
	}
}

func TestSnapshotSMIFaults(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	// The two placeholders mean different things, and the reason says which.
	for fault, want := range map[string]string{"na": "memory [N/A] (no value now",
		"not_supported": "memory [Not Supported] for this GPU"} {
		h.fake.Fault = fault
		h.save()
		s := snapshot(t, h.cfg)
		x := findHolder(s, p.pid)
		if !s.SMI || len(s.GPUs) != 1 || s.GPUs[0].MemUsedMiB != -1 || s.GPUs[0].MemTotalMiB != -1 || x == nil || x.MemMiB != -1 {
			t.Errorf("%s: smi %v gpus %+v holder %+v", fault, s.SMI, s.GPUs, x)
		}
		if len(s.Status) != 1 || !strings.Contains(s.Status[0].Reason, want) {
			t.Errorf("%s: status %+v, want a reason with %q", fault, s.Status, want)
		}
	}
	h.fake.Fault = "fail"
	h.save()
	s := snapshot(t, h.cfg)
	if s.SMI || findHolder(s, p.pid) == nil || !strings.Contains(strings.Join(s.Warnings, "\n"), "couldn't communicate with the NVIDIA driver") {
		t.Errorf("fail: smi %v warnings %v", s.SMI, s.Warnings)
	}
	// nvidia-smi finds no GPU (exit 6; not an error), but /dev/nvidia0 is
	// held: that GPU still counts, memory unknown, never free.
	h.fake.Fault, h.fake.GPUs = "", nil
	h.save()
	s = snapshot(t, h.cfg)
	if !s.SMI || len(s.GPUs) != 1 || s.GPUs[0].Source != SourceDevice || s.GPUs[0].Index != 0 || s.GPUs[0].MemUsedMiB != -1 {
		t.Errorf("no devices: smi %v gpus %+v warnings %v", s.SMI, s.GPUs, s.Warnings)
	}
	// Its holder maps the device (a context): held, and the reason says
	// the memory is unknown.
	if len(s.Status) != 1 || s.Status[0].State != GPUHeld || !strings.Contains(s.Status[0].Reason, "/dev/nvidia0") || !strings.Contains(s.Status[0].Reason, "pid "+strconv.Itoa(p.pid)) {
		t.Errorf("no devices: status %+v", s.Status)
	}
}

// smiRunning lists live processes started from path.
func smiRunning(path string) []int {
	var out []int
	pids, _ := procFS{dir: "/proc"}.pids()
	for _, pid := range pids {
		argv := procFS{dir: "/proc"}.cmdline(pid)
		if len(argv) > 0 && argv[0] == path && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func TestSMIHangIsAnError(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	h.fake.Fault = "hang"
	h.save()
	cfg := h.cfg
	cfg.SMITimeout = Duration(300 * time.Millisecond)
	s := snapshot(t, cfg)
	if s.SMI || findHolder(s, p.pid) == nil || !strings.Contains(strings.Join(s.Warnings, "\n"), "timed out after 300ms") {
		t.Errorf("snapshot with hung nvidia-smi: smi %v warnings %v", s.SMI, s.Warnings)
	}
	if left := smiRunning(h.smi); len(left) > 0 {
		t.Errorf("hung nvidia-smi still running after the deadline: %v", left)
	}
	_, err := WaitFree(context.Background(), WaitFreeRequest{Config: cfg, Timeout: Duration(time.Second)})
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("wait-free with hung nvidia-smi: err %v, want a timeout error", err)
	}
}

// A failing nvidia-smi on a host where nothing else names a GPU (no driver
// entry, no held device): the snapshot is an error, never an empty list
// that would read as "no GPU here".
func TestSnapshotSMIFailsNothingKnown(t *testing.T) {
	h := newHost(t, 1)
	for _, fault := range []string{"fail", "hang"} {
		h.fake.Fault = fault
		h.save()
		cfg := h.cfg
		cfg.SMITimeout = Duration(300 * time.Millisecond)
		s, err := TakeSnapshot(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), "no GPU is known otherwise") {
			t.Errorf("%s: snapshot %+v, err %v; want an error saying the GPUs cannot be told", fault, s, err)
		}
	}
}

func TestKillPlain(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, p.pid)}})
	if err != nil {
		t.Fatal(err)
	}
	x := result(t, r, p.pid)
	if x.Outcome != OutcomeExited || strings.Join(x.Signals, ",") != "TERM" || x.Comm != "gpu-holder" || x.Via != "target" {
		t.Errorf("result %+v", x)
	}
	err = <-p.done
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
		t.Errorf("holder ended with %v, want SIGTERM", err)
	}
	p.done <- err // for the cleanup
}

// A holder with SIGTERM set to SIG_IGN was never told: it gets KILL at
// once. The grace is an hour and the request's context a minute: had the
// grace been waited, the context would end it first, "KILL not sent".
func TestKillIgnoresTerm(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "4706", "--ignore-term")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Kill(ctx, KillRequest{Config: h.cfg, Targets: []Identity{identity(t, p.pid)}, Grace: Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	x := result(t, r, p.pid)
	if x.Outcome != OutcomeKilled || strings.Join(x.Signals, ",") != "TERM,KILL" || !strings.Contains(x.Reason, "SIG_IGN") {
		t.Errorf("result %+v", x)
	}
	if alive(p.pid) {
		t.Error("still alive")
	}
}

// A holder that catches SIGTERM and carries on may still be draining: it
// gets the whole grace before KILL.
func TestKillCatchesTermWaitsGrace(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "4706", "--catch-term")
	const grace = 300 * time.Millisecond
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, p.pid)}, Grace: Duration(grace)})
	if err != nil {
		t.Fatal(err)
	}
	x := result(t, r, p.pid)
	if x.Outcome != OutcomeKilled || strings.Join(x.Signals, ",") != "TERM,KILL" || strings.Contains(x.Reason, "SIG_IGN") {
		t.Errorf("result %+v", x)
	}
	// A lower bound only: KILL cannot come before the grace was waited.
	if r.Elapsed.D() < grace {
		t.Errorf("KILL after %v, before the %v grace", r.Elapsed.D(), grace)
	}
	if alive(p.pid) {
		t.Error("still alive")
	}
}

func TestSigIgnored(t *testing.T) {
	status := []byte("Name:\tx\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000004001\nSigCgt:\t0000000000000002\n")
	for sig, want := range map[unix.Signal]bool{unix.SIGTERM: true, unix.SIGHUP: true, unix.SIGINT: false, unix.SIGKILL: false} {
		if got := sigIgnored(status, sig); got != want {
			t.Errorf("signal %d: ignored %v, want %v", sig, got, want)
		}
	}
	if sigIgnored([]byte("Name:\tx\n"), unix.SIGTERM) {
		t.Error("no SigIgn line: ignored")
	}
}

func TestKillOrphanedWorker(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "3682", "--child-mem-mib", "6754")
	s := snapshot(t, h.cfg)
	c := findHolder(s, p.child)
	if c == nil || c.PPID != p.pid || c.MemMiB != 6754 || s.GPUs[0].MemUsedMiB != 3682+6754 {
		t.Fatalf("child %+v gpu %+v", c, s.GPUs)
	}
	// Killing the parent alone leaves the worker running, re-parented.
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, p.pid)}})
	if err != nil {
		t.Fatal(err)
	}
	if x := result(t, r, p.pid); x.Outcome != OutcomeExited {
		t.Fatalf("parent: %+v", x)
	}
	if len(r.Results) != 1 || !alive(p.child) {
		t.Fatalf("results %+v, child alive %v", r.Results, alive(p.child))
	}
	s = snapshot(t, h.cfg)
	c = findHolder(s, p.child)
	if c == nil || c.PPID == p.pid || c.MemMiB != 6754 {
		t.Fatalf("orphan not found or not re-parented: %+v", c)
	}
	r, err = Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{c.Identity}})
	if err != nil {
		t.Fatal(err)
	}
	if x := result(t, r, p.child); x.Outcome != OutcomeExited || alive(p.child) {
		t.Errorf("orphan: %+v alive %v", x, alive(p.child))
	}
}

func TestKillProtected(t *testing.T) {
	h := newHost(t, 1)
	p := h.start(h.as("nvidia-persistenced"), "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia0"))
	q := h.start(h.as("site-daemon"), "--dev", h.d("nvidiactl"))
	cfg := h.cfg
	cfg.Protected = []string{"site-*"}
	s := snapshot(t, cfg)
	for _, pid := range []int{p.pid, q.pid} {
		x := findHolder(s, pid)
		if x == nil || !x.Protected || !strings.Contains(x.ProtectedWhy, "protected name") {
			t.Errorf("pid %d: %+v", pid, x)
		}
	}
	r, err := Kill(context.Background(), KillRequest{Config: cfg, Targets: []Identity{identity(t, p.pid), identity(t, q.pid)}, Grace: Duration(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{p.pid, q.pid} {
		if x := result(t, r, pid); x.Outcome != OutcomeSkipped || len(x.Signals) != 0 || !alive(pid) {
			t.Errorf("pid %d: %+v alive %v", pid, x, alive(pid))
		}
	}
	r, err = Kill(context.Background(), KillRequest{Config: cfg, Targets: []Identity{identity(t, p.pid)}, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if x := result(t, r, p.pid); x.Outcome != OutcomeExited {
		t.Errorf("forced: %+v", x)
	}
}

func TestKillReusedPID(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--ignore-term")
	id := identity(t, p.pid)
	// The same pid with another start time is another process: the one the
	// snapshot saw is gone and its pid now names this one.
	stale := id
	stale.StartTime = id.StartTime - 1
	otherBoot := id
	otherBoot.BootID = "00000000-0000-0000-0000-000000000000"
	for _, target := range []Identity{stale, otherBoot} {
		r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{target}, Signal: "KILL"})
		if err != nil {
			t.Fatal(err)
		}
		if x := result(t, r, p.pid); x.Outcome != OutcomeSkipped || !strings.Contains(x.Reason, "pid reused") || len(x.Signals) != 0 {
			t.Errorf("%+v: %+v", target, x)
		}
		if !alive(p.pid) {
			t.Fatal("a reused pid was signalled")
		}
	}
}

func TestKillZombieCountsAsGone(t *testing.T) {
	h := newHost(t, 1)
	// Started by hand, not by h.start, whose Wait would reap the zombie.
	z := exec.Command(holderBin, "--dev", h.d("nvidia0"))
	z.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := z.StdoutPipe()
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(out).ReadString('\n')
	zid := identity(t, z.Process.Pid)
	syscall.Kill(z.Process.Pid, syscall.SIGKILL)
	// Until it is a whole zombie: the leader turns Z before its other
	// threads are gone, and a Z leader with live threads is one Kill
	// signals (zombie_leader). The test's deadline bounds this.
	for alive(z.Process.Pid) || liveThreads(z.Process.Pid) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	defer z.Wait()
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{zid}})
	if err != nil {
		t.Fatal(err)
	}
	if x := result(t, r, zid.PID); x.Outcome != OutcomeExited || len(x.Signals) != 0 || x.State != "Z" {
		t.Errorf("zombie: %+v", x)
	}
	if s := snapshot(t, h.cfg); findHolder(s, zid.PID) != nil {
		t.Error("a zombie is listed as a holder")
	}
}

func TestKillTreeAndGroup(t *testing.T) {
	for _, mode := range []string{"tree", "group"} {
		t.Run(mode, func(t *testing.T) {
			h := newHost(t, 1)
			p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "3", "--child-mem-mib", "6", "--ignore-term")
			bystander := h.start("", "--dev", h.d("nvidia0"))
			req := KillRequest{Config: h.cfg, Targets: []Identity{identity(t, p.pid)}, Grace: Duration(time.Second), Tree: mode == "tree", Group: mode == "group"}
			r, err := Kill(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Results) != 2 {
				t.Fatalf("results %+v", r.Results)
			}
			if x := result(t, r, p.pid); x.Outcome != OutcomeKilled {
				t.Errorf("parent (ignores TERM): %+v", x)
			}
			wantVia := "child of " + strconv.Itoa(p.pid)
			if mode == "group" {
				wantVia = "group of " + strconv.Itoa(p.pid)
			}
			if x := result(t, r, p.child); x.Outcome != OutcomeExited || x.Via != wantVia {
				t.Errorf("child: %+v, want exited via %q", x, wantVia)
			}
			if alive(p.pid) || alive(p.child) || !alive(bystander.pid) {
				t.Errorf("alive: parent %v child %v bystander %v", alive(p.pid), alive(p.child), alive(bystander.pid))
			}
		})
	}
}

func TestKillDryRun(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--child-mem-mib", "1")
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, p.pid)}, Tree: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{p.pid, p.child} {
		if x := result(t, r, pid); x.Outcome != OutcomeWould || !alive(pid) {
			t.Errorf("pid %d: %+v alive %v", pid, x, alive(pid))
		}
	}
}

func TestKillNeverSignalsGuarded(t *testing.T) {
	h := newHost(t, 1)
	targets := []Identity{identity(t, 1), identity(t, os.Getpid()), identity(t, os.Getppid())}
	var kthread int
	pids, _ := procFS{dir: "/proc"}.pids()
	for _, pid := range pids {
		if st, err := (procFS{dir: "/proc"}).stat(pid); err == nil && st.Flags&pfKthread != 0 && pid != 1 {
			kthread = pid
			targets = append(targets, identity(t, pid))
			break
		}
	}
	for _, force := range []bool{false, true} {
		// No Group/Tree here: were the expansion rule broken, the tree of
		// pid 1 would be every process on the machine.
		r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: targets, Signal: "KILL", Force: force})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range targets {
			x := result(t, r, id.PID)
			if x.Outcome != OutcomeSkipped || len(x.Signals) != 0 {
				t.Errorf("force %v pid %d: %+v", force, id.PID, x)
			}
		}
		for _, x := range r.Results {
			if len(x.Signals) > 0 {
				t.Errorf("force %v: signalled %+v", force, x)
			}
		}
	}
	if kthread == 0 {
		t.Log("no kernel thread visible in this PID namespace; kernel-thread rule not exercised")
	}
	if _, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{{PID: 5}}}); err == nil {
		t.Error("target without start_time: want an error")
	}
	if _, err := Kill(context.Background(), KillRequest{Config: h.cfg, Signal: "STOP"}); err == nil {
		t.Error("signal STOP: want an error")
	}
}

func mustSid(t *testing.T) int {
	sid, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	return sid
}

// A skipped target lends nobody its group or descendants.
func TestKillSkippedTargetDoesNotExpand(t *testing.T) {
	h := newHost(t, 1)
	p := h.start(h.as("nv-hostengine"), "--dev", h.d("nvidia0"), "--child-mem-mib", "1")
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, p.pid)}, Tree: true, Group: true, Signal: "KILL"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 1 || r.Results[0].Outcome != OutcomeSkipped || !alive(p.pid) || !alive(p.child) {
		t.Errorf("results %+v, alive %v %v", r.Results, alive(p.pid), alive(p.child))
	}
}

// An interrupted kill never escalates: a cancelled request signals nothing,
// and one cancelled during the grace period does not send KILL.
func TestKillInterruptedDoesNotEscalate(t *testing.T) {
	h := newHost(t, 1)
	// A TERM handler, not SIG_IGN: one that ignores TERM gets KILL with no
	// grace period to interrupt.
	p := h.start("", "--dev", h.d("nvidia0"), "--catch-term")
	id := identity(t, p.pid)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err := Kill(ctx, KillRequest{Config: h.cfg, Targets: []Identity{id}}); err == nil || !strings.Contains(err.Error(), "nothing signalled") {
		t.Errorf("cancelled before: response %+v err %v, want a 'nothing signalled' error", r, err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	r, err := Kill(&cancelOnWait{Context: ctx, cancel: cancel}, KillRequest{Config: h.cfg, Targets: []Identity{id}, Grace: Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	x := result(t, r, p.pid)
	if x.Outcome != OutcomeSurvived || strings.Join(x.Signals, ",") != "TERM" || !strings.Contains(x.Reason, "KILL not sent") {
		t.Errorf("result %+v", x)
	}
	if !alive(p.pid) {
		t.Error("holder was killed after the request was cancelled")
	}
}

// cancelOnWait is cancelled the first time someone waits on it: Kill waits
// only once TERM is out, so the cancel lands inside the grace period.
type cancelOnWait struct {
	context.Context
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnWait) Done() <-chan struct{} {
	c.once.Do(c.cancel)
	return c.Context.Done()
}

// The holder these tests run is the build the lab runs: C where cc is
// there (labbuild.TestHolder), unless GPUSH_TEST_HOLDER asks for Go.
func TestHolderIsTheLabsBuild(t *testing.T) {
	_, ccErr := exec.LookPath("cc")
	wantGo := ccErr != nil || os.Getenv(labbuild.HolderEnv) == labbuild.KindGo
	out, err := exec.Command("go", "version", holderBin).CombinedOutput()
	if isGo := err == nil && !strings.Contains(string(out), "not a Go executable"); isGo != wantGo {
		t.Errorf("the tests' gpu-holder is a Go build: %v, want %v (go version: %s)", isGo, wantGo, out)
	}
}

// countingKill counts the /proc reads a kill makes of its victims.
type countingKill struct {
	*hostKill
	reads int
}

func (c *countingKill) Proc(pid int) (KillProc, bool) {
	c.reads++
	return c.hostKill.Proc(pid)
}

// A victim that takes its time to end after TERM (a torch worker: 100-300
// ms) is waited on through its pidfd: the wait wakes at the exit, not
// every killPoll, so it reads the victim a few times, not once a poll.
func TestKillWaitWakesAtExit(t *testing.T) {
	if !havePidfd() {
		t.Skip("no pidfd here: the wait polls")
	}
	const drain = 300 * time.Millisecond
	cmd := exec.Command("sh", "-c", "trap 'sleep 0.3; exit 0' TERM; echo ready; while :; do sleep 0.02; done")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	bufio.NewReader(out).ReadString('\n')
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	h := newHost(t, 1)
	s, err := newScanner(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := &countingKill{hostKill: &hostKill{s: s, pidfds: map[int]int{}}}
	defer src.close()
	r, err := KillOn(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, cmd.Process.Pid)}, Grace: Duration(5 * time.Second)}, src)
	if err != nil {
		t.Fatal(err)
	}
	x := result(t, r, cmd.Process.Pid)
	if x.Outcome != OutcomeExited || strings.Join(x.Signals, ",") != "TERM" {
		t.Fatalf("result %+v", x)
	}
	if r.Elapsed.D() < drain {
		t.Errorf("gone after %v, before its %v drain", r.Elapsed.D(), drain)
	}
	if polls := int(drain / killPoll); src.reads >= polls/4 {
		t.Errorf("the victim was read %d times over its %v drain (a poll every %v reads it %d times)", src.reads, drain, killPoll, polls)
	}
}
