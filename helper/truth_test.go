package helper

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
)

// driverInfo writes fake /proc/driver/nvidia/gpus/BUS/information files
// (bus -> minor) and points the host's config at them.
func (h *host) driverInfo(minors map[string]int) {
	h.t.Helper()
	dir := filepath.Join(h.dir, "driver")
	for bus, minor := range minors {
		d := filepath.Join(dir, "gpus", bus)
		if err := os.MkdirAll(d, 0o755); err != nil {
			h.t.Fatal(err)
		}
		text := fmt.Sprintf("Model:\t\t NVIDIA H200\nIRQ:\t\t 42\nGPU UUID:\t GPU-drv-%s\nDevice Minor:\t %d\nBus Location:\t %s\n", bus, minor, bus)
		if err := os.WriteFile(filepath.Join(d, "information"), []byte(text), 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
	h.cfg.DriverDir = dir
}

// devFile creates DEVDIR/name (a GPU the fake nvidia-smi does not know).
func (h *host) devFile(name string) string {
	h.t.Helper()
	if err := os.WriteFile(h.d(name), nil, 0o666); err != nil {
		h.t.Fatal(err)
	}
	return h.d(name)
}

func gpuByIndex(gpus []GPU, idx int) *GPU {
	for i := range gpus {
		if gpus[i].Index == idx {
			return &gpus[i]
		}
	}
	return nil
}

func statusOf(t *testing.T, sts []GPUStatus, idx int) GPUStatus {
	t.Helper()
	for _, st := range sts {
		if st.Index == idx {
			return st
		}
	}
	t.Fatalf("no status for GPU %d in %+v", idx, sts)
	return GPUStatus{}
}

// A GPU the driver knows but nvidia-smi does not list gets a row of its
// own (memory unknown, never free); minors follow the driver, not N == index.
func TestSnapshotDriverGPUs(t *testing.T) {
	h := newHost(t, 2)
	// Swapped on purpose: bus 18 (GPU 0) is /dev/nvidia1.
	h.driverInfo(map[string]int{"0000:18:00.0": 1, "0000:19:00.0": 0, "0000:1a:00.0": 2})
	a := h.start("", "--dev", h.d("nvidia1"), "--mem-mib", "700")
	b := h.start("", "--dev", h.devFile("nvidia2"), "--dev", h.d("nvidia-uvm"))
	s := snapshot(t, h.cfg)
	if len(s.GPUs) != 3 {
		t.Fatalf("gpus %+v warnings %v", s.GPUs, s.Warnings)
	}
	g0, g2 := gpuByIndex(s.GPUs, 0), gpuByIndex(s.GPUs, 2)
	if g0 == nil || g0.Minor != 1 || g0.Source != SourceSMI || g0.MemUsedMiB != 0 {
		t.Errorf("GPU 0: %+v (nvidia-smi reads the holder's 700 MiB on the GPU it numbers 0, whose minor the driver says is 1)", g0)
	}
	if g2 == nil || g2.Source != SourceDriver || g2.Minor != 2 || g2.MemUsedMiB != -1 || g2.UUID != "GPU-drv-0000:1a:00.0" {
		t.Fatalf("GPU 2: %+v", g2)
	}
	if x := findHolder(s, a.pid); x == nil || !slices.Equal(x.GPUs, []int{0}) {
		t.Errorf("holder of nvidia1: %+v", x)
	}
	if x := findHolder(s, b.pid); x == nil || !slices.Equal(x.GPUs, []int{2}) {
		t.Errorf("holder of nvidia2: %+v", x)
	}
	st := statusOf(t, s.Status, 2)
	if st.State != GPUUnknown || !slices.Equal(st.Others, []int{b.pid}) || !strings.Contains(st.Reason, "open by pid "+strconv.Itoa(b.pid)) {
		t.Errorf("GPU 2 status %+v", st)
	}
	if w := strings.Join(s.Warnings, "\n"); !strings.Contains(w, "nvidia-smi does not list it: listed as GPU 2, memory unknown") {
		t.Errorf("warnings %q", w)
	}
	// Its owner gone, the GPU is unknown, not free.
	syscall.Kill(b.pid, syscall.SIGKILL)
	err := <-b.done
	b.done <- err
	if st := statusOf(t, snapshot(t, h.cfg).Status, 2); st.State != GPUUnknown || !strings.Contains(st.Reason, "known from /proc/driver/nvidia") {
		t.Errorf("GPU 2 without holder: %+v", st)
	}
}

// A held /dev/nvidiaN that neither nvidia-smi nor the driver names is a GPU
// too; its index is N unless a listed GPU has that number.
func TestSnapshotDeviceGPUs(t *testing.T) {
	h := newHost(t, 2)
	h.driverInfo(map[string]int{"0000:18:00.0": 3, "0000:19:00.0": 4})
	h.devFile("nvidia3")
	h.devFile("nvidia4")
	p := h.start("", "--dev", h.d("nvidia1"), "--dev", h.devFile("nvidia7"))
	s := snapshot(t, h.cfg)
	g1, g7 := gpuByIndex(s.GPUs, 2), gpuByIndex(s.GPUs, 7)
	if len(s.GPUs) != 4 || g1 == nil || g1.Source != SourceDevice || g1.Minor != 1 || g7 == nil || g7.Source != SourceDevice || g7.Minor != 7 {
		t.Fatalf("gpus %+v", s.GPUs)
	}
	x := findHolder(s, p.pid)
	if x == nil || !slices.Equal(x.GPUs, []int{2, 7}) {
		t.Fatalf("holder %+v", x)
	}
	w := strings.Join(s.Warnings, "\n")
	if !strings.Contains(w, "/dev/nvidia1 is held but matches no GPU nvidia-smi or the driver lists: listed as GPU 2, memory unknown (index 1 is taken)") || !strings.Contains(w, "/dev/nvidia7 is held but matches no GPU nvidia-smi or the driver lists: listed as GPU 7") {
		t.Errorf("warnings %q", w)
	}
	for _, idx := range []int{2, 7} {
		if st := statusOf(t, s.Status, idx); st.State != GPUUnknown || !slices.Equal(st.Others, []int{p.pid}) {
			t.Errorf("GPU %d: %+v", idx, st)
		}
	}
	var tbl strings.Builder
	WriteTable(&tbl, s)
	if !strings.Contains(tbl.String(), "GPU 7 unknown: memory unknown: only a held /dev/nvidia7 names this GPU") {
		t.Errorf("table:\n%s", tbl.String())
	}
}

// Owners own memory (nvidia-smi lists them) or a context (nvidia-uvm);
// monitors hold device files only. Memory is per GPU.
func TestSnapshotOwnersAndMonitors(t *testing.T) {
	h := newHost(t, 3)
	two := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidia2"), "--dev", h.d("nvidiactl"), "--mem-mib", "4096")
	mon := h.start("", "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia0"), "--dev", h.d("nvidia1"), "--dev", h.d("nvidia2"))
	// An NVML client as measured on the H200: nvidia-uvm open, no context.
	nvml := h.start("", "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia1"), "--dev", h.d("nvidia-uvm"))
	worker := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidia-uvm"), "--mem-mib", "900")
	s := snapshot(t, h.cfg)
	x := findHolder(s, two.pid)
	if x == nil || !x.Owner || x.MemMiB != 8192 || len(x.MemByGPU) != 2 || x.MemByGPU[0] != 4096 || x.MemByGPU[2] != 4096 {
		t.Fatalf("holder of GPUs 0 and 2: %+v", x)
	}
	if m := findHolder(s, mon.pid); m == nil || m.Owner || m.MemMiB != 0 {
		t.Errorf("monitor %+v", m)
	}
	if u := findHolder(s, nvml.pid); u == nil || u.Owner || u.MemMiB != 0 {
		t.Errorf("NVML client %+v", u)
	}
	if u := findHolder(s, worker.pid); u == nil || !u.Owner || u.MemMiB != 900 {
		t.Errorf("worker %+v", u)
	}
	st0 := statusOf(t, s.Status, 0)
	if st0.State != GPUHeld || !slices.Equal(st0.Owners, []int{two.pid}) || !slices.Equal(st0.Others, []int{mon.pid}) {
		t.Errorf("GPU 0 %+v", st0)
	}
	if !strings.Contains(st0.Reason, " 4096 MiB") || strings.Contains(st0.Reason, "8192") {
		t.Errorf("GPU 0 reason %q: want the holder's 4096 MiB on this GPU, not its total", st0.Reason)
	}
	if st1 := statusOf(t, s.Status, 1); st1.State != GPUHeld || !slices.Equal(st1.Owners, []int{worker.pid}) || !slices.Equal(st1.Others, []int{mon.pid, nvml.pid}) {
		t.Errorf("GPU 1 %+v", st1)
	}
	// The fake lists only processes with memory, per GPU, as NVML does.
	for _, w := range s.Warnings {
		if strings.Contains(w, "nvidia-smi lists") {
			t.Errorf("unexpected %q", w)
		}
	}
}

// A protected name is protection only while the process acts like the
// daemon it names: nvidia-uvm open or memory of its own makes it suspicious.
func TestProtectedNameSpoofing(t *testing.T) {
	h := newHost(t, 3)
	h.fake.GPUs[2].BaselineMiB = 5000
	h.save()
	persistenced := h.as("nvidia-persistenced")
	real := h.start(persistenced, "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia0"), "--dev", h.d("nvidia1"), "--dev", h.d("nvidia2"))
	uvm := h.start(persistenced, "--dev", h.d("nvidia0"), "--dev", h.d("nvidia-uvm"))
	mem := h.start(h.as("nv-hostengine"), "--dev", h.d("nvidia1"), "--mem-mib", "4096")
	s := snapshot(t, h.cfg)
	if x := findHolder(s, real.pid); x == nil || !x.Protected || x.Suspicious != "" {
		t.Errorf("the real daemon's way of holding: %+v", x)
	}
	x := findHolder(s, uvm.pid)
	if x == nil || !x.Protected || x.Suspicious != "protected name nvidia-persistenced, but it has nvidia-uvm open" {
		t.Errorf("uvm spoof: %+v", x)
	}
	y := findHolder(s, mem.pid)
	if y == nil || !y.Protected || y.Suspicious != "protected name nv-hostengine, but owns 4096 MiB" {
		t.Errorf("memory spoof: %+v", y)
	}
	for idx, pid := range map[int]int{0: uvm.pid, 1: mem.pid} {
		st := statusOf(t, s.Status, idx)
		if st.State != GPUSuspicious || !slices.Equal(st.Suspicious, []int{pid}) || !strings.Contains(st.Reason, "not killed without force") {
			t.Errorf("GPU %d: %+v", idx, st)
		}
	}
	// Memory held with only the real daemon there: protected, named.
	if st := statusOf(t, s.Status, 2); st.State != GPUProtected || !strings.Contains(st.Reason, "held by protected pid "+strconv.Itoa(real.pid)) {
		t.Errorf("GPU 2: %+v", st)
	}
	// Still not killed without force, and wait-free does not read it free.
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{x.Identity, y.Identity}, Signal: "KILL"})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{uvm.pid, mem.pid} {
		if res := result(t, r, pid); res.Outcome != OutcomeSkipped || !alive(pid) {
			t.Errorf("pid %d: %+v", pid, res)
		}
	}
	w := waitFree(t, WaitFreeRequest{Config: h.cfg, GPUs: []int{0, 1}, Timeout: Duration(300 * time.Millisecond)})
	if w.Outcome != WaitSuspicious || w.OK || !strings.Contains(w.Reason, "GPU 0: suspicious holder") || !strings.Contains(w.Reason, "GPU 1: suspicious holder") {
		t.Errorf("wait-free: %s %q", w.Outcome, w.Reason)
	}
}

// waitState polls /proc until pid's state is want (bounded by the test's
// own deadline, not a timed assertion).
func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	for {
		st, err := procFS{dir: "/proc"}.stat(pid)
		if err != nil {
			t.Fatalf("pid %d: %v", pid, err)
		}
		if st.State == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A process whose main thread exited while other threads hold the devices
// is a holder, and kill signals it; it is not "already exited".
func TestZombieLeader(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidia-uvm"), "--mem-mib", "2048", "--zombie-leader")
	waitState(t, p.pid, "Z")
	if fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid)); len(fds) != 0 {
		t.Fatalf("leader still has %d fds: the mode did not exit the main thread alone", len(fds))
	}
	s := snapshot(t, h.cfg)
	x := findHolder(s, p.pid)
	if x == nil || !x.ZombieLeader || x.State != "Z" || !x.Owner || x.MemMiB != 2048 || !slices.Equal(x.GPUs, []int{0}) || len(x.Cmdline) == 0 || x.Cmdline[0] != holderBin {
		t.Fatalf("zombie leader: %+v", x)
	}
	if st := statusOf(t, s.Status, 0); st.State != GPUHeld || !slices.Equal(st.Owners, []int{p.pid}) {
		t.Errorf("status %+v", st)
	}
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{x.Identity}, Grace: Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	res := result(t, r, p.pid)
	if res.Outcome != OutcomeExited || !slices.Equal(res.Signals, []string{"TERM"}) {
		t.Errorf("kill: %+v", res)
	}
	err = <-p.done
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
		t.Errorf("ended with %v, want SIGTERM", err)
	}
	p.done <- err
}

// Memory nvidia-smi charges to a dead pid whose forked child kept the
// device files: a ghost, with the keeper named.
func TestGhostMemory(t *testing.T) {
	if !(procFS{dir: "/proc"}).inHostPIDNamespace() {
		t.Skip("the test runs outside the host's PID namespace: a missing pid proves nothing there")
	}
	// With nvidia-uvm (inherited, as a forked CUDA child has it) or not.
	for _, uvm := range []bool{true, false} {
		t.Run(fmt.Sprintf("uvm=%v", uvm), func(t *testing.T) {
			h := newHost(t, 1)
			args := []string{"--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "8802", "--keeper"}
			if uvm {
				args = append(args, "--dev", h.d("nvidia-uvm"))
			}
			p := h.start(h.as("python3"), args...)
			// A monitor of the same GPU maps nothing: it is not a keeper.
			mon := h.start(h.as("nvitop"), "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
			syscall.Kill(p.pid, syscall.SIGKILL)
			err := <-p.done
			p.done <- err
			s := snapshot(t, h.cfg)
			if len(s.Ghosts) != 1 {
				t.Fatalf("ghosts %+v warnings %v", s.Ghosts, s.Warnings)
			}
			g := s.Ghosts[0]
			if g.PID != p.pid || g.GPU != 0 || g.MemMiB != 8802 || !slices.Equal(g.HeldBy, []int{p.child}) || filepath.Base(g.Name) != "python3" {
				t.Errorf("ghost %+v (keeper %d)", g, p.child)
			}
			for _, w := range s.Warnings {
				if strings.Contains(w, "another PID namespace") {
					t.Errorf("warning %q", w)
				}
			}
			st := statusOf(t, s.Status, 0)
			want := fmt.Sprintf("pid %d (python3) is gone but 8802 MiB is still charged to it; its device files are still open in pid %d", p.pid, p.child)
			if !strings.Contains(st.Reason, want) {
				t.Errorf("reason %q, want %q", st.Reason, want)
			}
			if !slices.Equal(st.Others, []int{mon.pid}) {
				t.Errorf("monitor %d: others %v", mon.pid, st.Others)
			}
			// nvidia-smi does not list the keeper (as on the H200), but it
			// maps the device files as the forked CUDA child does: an owner.
			if st.State != GPUHeld || !slices.Equal(st.Owners, []int{p.child}) {
				t.Errorf("keeper: %+v", st)
			}
			// Wait-free names the keeper as what is left to stop.
			r := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(200 * time.Millisecond)})
			if r.Outcome != WaitTimedOut || len(r.Holders) != 1 || r.Holders[0].PID != p.child || !strings.Contains(r.Reason, fmt.Sprintf("held by pid %d", p.child)) {
				t.Errorf("wait-free: %s %q holders %+v", r.Outcome, r.Reason, r.Holders)
			}
		})
	}
}

// supervised starts sh looping over a gpu-holder (a respawning parent)
// and returns the shell's pid and a channel of worker pids.
func (h *host) supervised(delay string, args ...string) (int, <-chan int) {
	h.t.Helper()
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + a + "'"
	}
	script := fmt.Sprintf("while :; do '%s' %s; sleep %s; done", holderBin, strings.Join(q, " "), delay)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	pids := make(chan int, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if pid, ok := labgpu.ReadyPID(sc.Text()); ok {
				pids <- pid
			}
		}
	}()
	h.t.Cleanup(func() {
		// The group this test made: the shell and its current worker.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd.Process.Pid, pids
}

// A killed worker's live parent is reported as a supervisor, and a settle
// catches the worker it starts again, naming the supervisor.
func TestSupervisorAndSettle(t *testing.T) {
	h := newHost(t, 1)
	sh, workers := h.supervised("0.3", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "2100")
	w1 := <-workers
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, w1)}})
	if err != nil {
		t.Fatal(err)
	}
	if res := result(t, r, w1); res.Outcome != OutcomeExited || res.PPID != sh {
		t.Fatalf("worker: %+v (shell %d)", res, sh)
	}
	if len(r.Managers) != 1 || r.Managers[0].PID != sh || !slices.Equal(r.Managers[0].Children, []int{w1}) || r.Managers[0].StartTime == 0 {
		t.Fatalf("supervisors %+v", r.Managers)
	}
	why := r.Managers[0].Why
	if !strings.HasPrefix(why, fmt.Sprintf("pid %d (sh -c while", sh)) || !strings.HasSuffix(why, fmt.Sprintf("may restart its workers: kill %d", sh)) {
		t.Errorf("why %q", why)
	}
	wr := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(20 * time.Second), Settle: Duration(10 * time.Second), Watch: r.Managers})
	w2 := <-workers
	if wr.Outcome != WaitNewHolder || wr.OK || wr.Settled <= 0 || wr.Settled.D() >= 10*time.Second {
		t.Fatalf("outcome %s ok %v settled %s reason %q", wr.Outcome, wr.OK, wr.Settled.D(), wr.Reason)
	}
	if !strings.Contains(wr.Reason, fmt.Sprintf("GPU 0: new holder pid %d (gpu-holder", w2)) || !strings.Contains(wr.Reason, "after it read free; "+why) {
		t.Errorf("reason %q", wr.Reason)
	}
	if st := statusOf(t, wr.Status, 0); st.State != GPUNewHolder {
		t.Errorf("status %+v", st)
	}
	if len(wr.Holders) != 1 || wr.Holders[0].PID != w2 {
		t.Errorf("holders %+v", wr.Holders)
	}
}

// A new holder of a watched supervisor fails the settle even before it
// owns anything; a monitor that appears during the settle does not.
func TestSettleMonitorVsSupervised(t *testing.T) {
	h := newHost(t, 1)
	sh, workers := h.supervised("0.2", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	w1 := <-workers
	watch := []Manager{{Identity: identity(t, sh)}}
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, w1)}, Signal: "KILL"})
	if err != nil || len(r.Managers) != 1 {
		t.Fatalf("kill: %v %+v", err, r)
	}
	wr := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(20 * time.Second), Settle: Duration(10 * time.Second), Watch: watch})
	w2 := <-workers
	if wr.Outcome != WaitNewHolder || !strings.Contains(wr.Reason, fmt.Sprintf("new holder pid %d", w2)) || !strings.Contains(wr.Reason, fmt.Sprintf("pid %d (sh -c while", sh)) {
		t.Errorf("supervised monitor-like worker: %s %q", wr.Outcome, wr.Reason)
	}
	if st := statusOf(t, wr.Status, 0); st.State != GPUNewHolder || !strings.Contains(st.Reason, "restarts its workers") {
		t.Errorf("status %+v", st)
	}

	h2 := newHost(t, 1)
	var mon *holder
	withHook(t, func(n int) {
		if n == 2 {
			mon = h2.start("", "--dev", h2.d("nvidia0"), "--dev", h2.d("nvidiactl"))
		}
	})
	wr = waitFree(t, WaitFreeRequest{Config: h2.cfg, Timeout: Duration(10 * time.Second), Settle: Duration(400 * time.Millisecond), Interval: Duration(50 * time.Millisecond), Watch: watch})
	if wr.Outcome != WaitFreed || !wr.OK || wr.Settled.D() < 400*time.Millisecond || mon == nil || !alive(mon.pid) {
		t.Errorf("monitor during settle: %s %q settled %s", wr.Outcome, wr.Reason, wr.Settled.D())
	}
	// A new owner fails the settle whoever started it.
	var owner *holder
	withHook(t, func(n int) {
		if n == 2 {
			owner = h2.start("", "--dev", h2.d("nvidia0"), "--mem-mib", "10")
		}
	})
	wr = waitFree(t, WaitFreeRequest{Config: h2.cfg, Timeout: Duration(10 * time.Second), Settle: Duration(5 * time.Second), Interval: Duration(50 * time.Millisecond)})
	if wr.Outcome != WaitNewHolder || owner == nil || !strings.Contains(wr.Reason, fmt.Sprintf("new holder pid %d", owner.pid)) {
		t.Errorf("new owner during settle: %s %q", wr.Outcome, wr.Reason)
	}
}

// The live parent of a killed worker is its supervisor unless it is a
// system reaper, the helper's own line, or killed in the same request.
func TestKillSupervisors(t *testing.T) {
	h := newHost(t, 1)
	py := h.start(h.as("python3"), "--dev", h.d("nvidia0"), "--mem-mib", "10", "--child-mem-mib", "20")
	tini := h.start(h.as("tini"), "--dev", h.d("nvidia0"), "--child-mem-mib", "20")
	plain := h.start("", "--dev", h.d("nvidia0"))
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, py.child), identity(t, tini.child), identity(t, plain.pid)}})
	if err != nil {
		t.Fatal(err)
	}
	if res := result(t, r, py.child); res.PPID != py.pid || res.Outcome != OutcomeExited {
		t.Errorf("python3's child: %+v", res)
	}
	if res := result(t, r, plain.pid); res.PPID != os.Getpid() {
		t.Errorf("plain: ppid %d, want the test (the helper) %d", res.PPID, os.Getpid())
	}
	if len(r.Managers) != 1 || r.Managers[0].PID != py.pid || !slices.Equal(r.Managers[0].Children, []int{py.child}) {
		t.Fatalf("supervisors %+v: want only python3 %d (not tini %d, not the helper)", r.Managers, py.pid, tini.pid)
	}
	if why := r.Managers[0].Why; !strings.HasPrefix(why, fmt.Sprintf("pid %d (python3 --dev ", py.pid)) || !strings.HasSuffix(why, fmt.Sprintf("may restart its workers: kill %d", py.pid)) {
		t.Errorf("why %q", why)
	}
	// Parent and child killed together: nobody is left to restart.
	q := h.start(h.as("python3"), "--dev", h.d("nvidia0"), "--child-mem-mib", "20")
	r, err = Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, q.pid)}, Tree: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 2 || len(r.Managers) != 0 {
		t.Errorf("tree kill: results %+v supervisors %+v", r.Results, r.Managers)
	}
}

// A worker its supervisor started again before the wait's first poll is
// new from its start time (the kill's Since): the wait ends at once as
// new-holder, naming the supervisor, not after the timeout and the settle.
func TestWaitFreeBackBeforeFirstPoll(t *testing.T) {
	h := newHost(t, 1)
	sh, workers := h.supervised("0", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "2100")
	w1 := <-workers
	r, err := Kill(context.Background(), KillRequest{Config: h.cfg, Targets: []Identity{identity(t, w1)}, Signal: "KILL"})
	if err != nil || r.Since == 0 || len(r.Managers) != 1 {
		t.Fatalf("kill: %v since %d managers %+v", err, r.Since, r.Managers)
	}
	w2 := <-workers // back, and holding memory, before the wait begins
	start := time.Now()
	wr := waitFree(t, WaitFreeRequest{Config: h.cfg, Timeout: Duration(5 * time.Second), Settle: Duration(10 * time.Second),
		Watch: r.Managers, NewSince: r.Since})
	if took := time.Since(start); wr.Outcome != WaitNewHolder || took > 3*time.Second {
		t.Fatalf("outcome %s after %s (want new-holder at once): %q", wr.Outcome, took, wr.Reason)
	}
	if !strings.Contains(wr.Reason, fmt.Sprintf("new holder appeared: pid %d (gpu-holder)", w2)) || !strings.Contains(wr.Reason, fmt.Sprintf("pid %d (sh -c while", sh)) {
		t.Errorf("reason %q", wr.Reason)
	}
}
