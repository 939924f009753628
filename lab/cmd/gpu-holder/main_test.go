package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/labgpu"

	"github.com/gpush/gpush/lab/procstat"
)

// eachHolder runs test against every build of the holder.
func eachHolder(t *testing.T, test func(t *testing.T, bin string)) {
	for _, h := range impls {
		t.Run(h.name, func(t *testing.T) {
			if h.skip != "" {
				t.Skipf("skipping the %s holder: %s", h.name, h.skip)
			}
			test(t, h.bin)
		})
	}
}

// Every test runs against each build of the holder: the Go one (this
// package) and the C one (./c, what the lab uses when cc is there).
type impl struct {
	name, bin string
	skip      string // why this build is missing (no C compiler, outside CI)
}

var impls []impl

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpu-holder-test-")
	if err != nil {
		panic(err)
	}
	goBin := filepath.Join(dir, "go", "gpu-holder")
	if b, err := exec.Command("go", "build", "-o", goBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, b)
		os.Exit(1)
	}
	impls = append(impls, impl{name: "go", bin: goBin})
	// Same file name: argv[0] and comm read the same for both.
	cBin := filepath.Join(dir, "c", "gpu-holder")
	os.MkdirAll(filepath.Dir(cBin), 0o755)
	c := impl{name: "c", bin: cBin}
	if err := lab.BuildHolderC(context.Background(), cBin); err != nil {
		if !errors.Is(err, lab.ErrNoCC) || os.Getenv("CI") == "true" {
			// CI installs gcc (Makefile DEB_PACKAGES): the C holder is the
			// lab's, so it must be built and tested there.
			fmt.Fprintf(os.Stderr, "C gpu-holder: %v\n", err)
			os.Exit(1)
		}
		c.skip = err.Error()
	}
	impls = append(impls, c)
	// Orphans come back to this process, which reaps them (no zombies left).
	syscall.RawSyscall6(syscall.SYS_PRCTL, 36 /* PR_SET_CHILD_SUBREAPER */, 1, 0, 0, 0, 0)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// holds lists the files under dir that pid has open.
func holds(t *testing.T, pid int, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	var out []string
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, dir+"/") {
			out = append(out, strings.TrimPrefix(l, dir+"/"))
		}
	}
	return out
}

// sigIgnored reads whether sig is in the process's ignored-signal mask.
func sigIgnored(t *testing.T, pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatal("no SigIgn line")
	return false
}

func state(pid int) string {
	st, err := procstat.Read(pid)
	if err != nil {
		return "gone"
	}
	return string(st.State)
}

func TestHolderAndOrphanedChild(t *testing.T) { eachHolder(t, testHolderAndOrphanedChild) }

func testHolderAndOrphanedChild(t *testing.T, bin string) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidiactl"} {
		os.WriteFile(filepath.Join(dev, n), nil, 0o666)
	}
	cmd := exec.Command(bin, "--dev", filepath.Join(dev, "nvidia0"), "--dev", filepath.Join(dev, "nvidiactl"), "--mem-mib", "3", "--child-mem-mib", "6", "--ignore-term")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var pids []int
	for len(pids) < 2 && sc.Scan() {
		p, ok := labgpu.ReadyPID(sc.Text())
		if !ok {
			t.Fatalf("line %q, want ready <pid>", sc.Text())
		}
		pids = append(pids, p)
	}
	if len(pids) != 2 || pids[0] != cmd.Process.Pid {
		t.Fatalf("ready pids %v, parent %d", pids, cmd.Process.Pid)
	}
	child := pids[1]
	defer func() {
		syscall.Kill(child, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(child, &ws, 0, nil)
	}()
	for _, p := range pids {
		if got := strings.Join(holds(t, p, dev), ","); got != "nvidia0,nvidiactl" && got != "nvidiactl,nvidia0" {
			t.Errorf("pid %d holds %q", p, got)
		}
	}
	if !sigIgnored(t, pids[0], syscall.SIGTERM) || sigIgnored(t, child, syscall.SIGTERM) {
		t.Errorf("SIGTERM ignored: parent %v child %v", sigIgnored(t, pids[0], syscall.SIGTERM), sigIgnored(t, child, syscall.SIGTERM))
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
	if argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"); strings.Join(argv[len(argv)-2:], " ") != "--mem-mib 6" {
		t.Errorf("child argv %q", argv)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if s := state(child); s == "gone" || s == "Z" {
		t.Errorf("child died with its parent: %s", s)
	}
}

func TestHolderUsage(t *testing.T) { eachHolder(t, testHolderUsage) }

func testHolderUsage(t *testing.T, bin string) {
	for _, args := range [][]string{{}, {"--dev", "/nonexistent/nvidia0"}, {"--dev", os.DevNull, "--mem-mib", "-1"}} {
		err := exec.Command(bin, args...).Run()
		if err == nil {
			t.Errorf("%v: exit 0", args)
		}
	}
}

// startReady runs the holder and returns its ready pids (want of them).
func startReady(t *testing.T, bin string, want int, args ...string) (*exec.Cmd, []int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var pids []int
	for len(pids) < want && sc.Scan() {
		if p, ok := labgpu.ReadyPID(sc.Text()); ok {
			pids = append(pids, p)
		}
	}
	if len(pids) < want {
		t.Fatalf("%v: %d ready lines, want %d", args, len(pids), want)
	}
	return cmd, pids
}

// --keeper: a child inherits the open devices and names the parent whose
// memory it keeps; it lives on when the parent dies.
func TestKeeper(t *testing.T) { eachHolder(t, testKeeper) }

func testKeeper(t *testing.T, bin string) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia-uvm"} {
		os.WriteFile(filepath.Join(dev, n), nil, 0o666)
	}
	cmd, pids := startReady(t, bin, 2, "--dev", filepath.Join(dev, "nvidia0"), "--dev", filepath.Join(dev, "nvidia-uvm"), "--mem-mib", "8802", "--keeper")
	keeper := pids[1]
	defer func() {
		syscall.Kill(keeper, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(keeper, &ws, 0, nil)
	}()
	got := holds(t, keeper, dev)
	sort.Strings(got)
	if strings.Join(got, ",") != "nvidia-uvm,nvidia-uvm,nvidia0,nvidia0" {
		t.Errorf("keeper holds %q: want the inherited fds and their reopened twins", got)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", keeper))
	argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if of, mem := labgpu.KeepsMemOf(argv); of != pids[0] || mem != 8802 || labgpu.MemMiB(argv) != 0 || argv[0] != bin {
		t.Errorf("keeper argv %q", argv)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if s := state(keeper); s == "gone" || s == "Z" {
		t.Errorf("keeper died with its parent: %s", s)
	}
}

// --zombie-leader: the leader turns Z with no fds while another thread of
// the process still holds the devices, and a signal still ends it.
func TestZombieLeader(t *testing.T) { eachHolder(t, testZombieLeader) }

func testZombieLeader(t *testing.T, bin string) {
	dev := t.TempDir()
	os.WriteFile(filepath.Join(dev, "nvidia0"), nil, 0o666)
	cmd, pids := startReady(t, bin, 1, "--dev", filepath.Join(dev, "nvidia0"), "--zombie-leader")
	pid := pids[0]
	for state(pid) != "Z" {
		time.Sleep(5 * time.Millisecond) // bounded by the test's deadline
	}
	if fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); len(fds) != 0 {
		t.Errorf("leader has %d fds", len(fds))
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	held := 0
	for _, tk := range tasks {
		if tk.Name() == strconv.Itoa(pid) {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task/%s/fd", pid, tk.Name()))
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/task/%s/fd/%s", pid, tk.Name(), fd.Name())); l == filepath.Join(dev, "nvidia0") {
				held++
			}
		}
	}
	if held == 0 {
		t.Fatalf("no live thread holds the device (%d tasks)", len(tasks))
	}
	syscall.Kill(pid, syscall.SIGTERM)
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
		t.Errorf("ended with %v, want SIGTERM", cmd.ProcessState)
	}
}

// statusMask reads a signal mask line (SigCgt:, ShdPnd:, ...) of pid.
func statusMask(t *testing.T, pid int, key string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("pid %d: no %s line", pid, key)
	return 0
}

// mapped lists the files under dir that pid has mapped.
func mapped(t *testing.T, pid int, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 6 && strings.HasPrefix(f[5], dir+"/") {
			out = append(out, strings.TrimPrefix(f[5], dir+"/"))
		}
	}
	sort.Strings(out)
	return out
}

func comm(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Owners map their devices and monitors do not (the helper tells them
// apart by that); a link's name is the comm of the holder and of its
// child; --catch-term takes TERM and carries on; the flag forms of Go's
// flag package all parse.
func TestOwnersMonitorsNamesAndTerm(t *testing.T) { eachHolder(t, testOwnersMonitorsNamesAndTerm) }

func testOwnersMonitorsNamesAndTerm(t *testing.T, bin string) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		os.WriteFile(filepath.Join(dev, n), nil, 0o666)
	}
	py := filepath.Join(t.TempDir(), "python3")
	if err := os.Link(bin, py); err != nil {
		t.Fatal(err)
	}
	owner, pids := startReady(t, py, 2, "-dev", filepath.Join(dev, "nvidia0"), "--dev="+filepath.Join(dev, "nvidiactl"), "--mem-mib=5", "--child-mem-mib", "7", "--catch-term")
	child := pids[1]
	defer func() {
		syscall.Kill(child, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(child, &ws, 0, nil)
		owner.Process.Kill()
		owner.Wait()
	}()
	monitor, mpids := startReady(t, bin, 1, "--dev", filepath.Join(dev, "nvidia0"), "--dev", filepath.Join(dev, "nvidia1"))
	defer func() { monitor.Process.Kill(); monitor.Wait() }()

	for _, p := range pids {
		if got := strings.Join(mapped(t, p, dev), ","); got != "nvidia0,nvidiactl" {
			t.Errorf("owner pid %d maps %q, want nvidia0,nvidiactl", p, got)
		}
		if c := comm(t, p); c != "python3" {
			t.Errorf("pid %d comm %q, want python3", p, c)
		}
	}
	if got := mapped(t, mpids[0], dev); len(got) != 0 {
		t.Errorf("monitor maps %q, want nothing", got)
	}
	if got := holds(t, mpids[0], dev); len(got) != 2 {
		t.Errorf("monitor holds %q, want nvidia0 and nvidia1", got)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
	if argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"); labgpu.MemMiB(argv) != 5 {
		t.Errorf("owner argv %q: mem-mib not 5", argv)
	}
	b, _ = os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
	if argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"); labgpu.MemMiB(argv) != 7 {
		t.Errorf("child argv %q: mem-mib not 7", argv)
	}

	const term = 1 << (uint(syscall.SIGTERM) - 1)
	if statusMask(t, pids[0], "SigCgt")&term == 0 || sigIgnored(t, pids[0], syscall.SIGTERM) {
		t.Fatalf("--catch-term: TERM not caught")
	}
	syscall.Kill(pids[0], syscall.SIGTERM)
	// Delivered once no longer pending; a handler that carries on leaves
	// the process running.
	for statusMask(t, pids[0], "ShdPnd")&term != 0 || statusMask(t, pids[0], "SigPnd")&term != 0 {
		time.Sleep(time.Millisecond) // bounded by the test's deadline
	}
	if s := state(pids[0]); s == "gone" || s == "Z" {
		t.Errorf("--catch-term: TERM ended the holder (%s)", s)
	}
	// The child dies of TERM (its parent's --catch-term is not its own);
	// once the parent is gone it is this process's (the subreaper's) to wait.
	owner.Process.Kill()
	owner.Wait()
	syscall.Kill(child, syscall.SIGTERM)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(child, &ws, 0, nil); err != nil || ws.Signal() != syscall.SIGTERM {
		t.Errorf("child: TERM gave %v (%v), want death by SIGTERM", ws, err)
	}
}

// Usage errors exit 2, a device that cannot be opened 1, each naming
// what was wrong.
func TestHolderErrors(t *testing.T) { eachHolder(t, testHolderErrors) }

func testHolderErrors(t *testing.T, bin string) {
	for _, c := range []struct {
		args []string
		code int
		say  string
	}{
		{nil, 2, "--dev is required"},
		{[]string{"--dev", os.DevNull, "--bogus"}, 2, "bogus"},
		{[]string{"--dev", os.DevNull, "--mem-mib", "lots"}, 2, "lots"},
		{[]string{"--dev"}, 2, "dev"},
		{[]string{"--dev", os.DevNull, "--child-mem-mib", "-3"}, 2, "memory must be >= 0"},
		{[]string{"--dev", "/nonexistent/nvidia0"}, 1, "/nonexistent/nvidia0"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		var x *exec.ExitError
		if !errors.As(err, &x) || x.ExitCode() != c.code || !strings.Contains(string(out), c.say) {
			t.Errorf("%q: %v, want exit %d saying %q:\n%s", c.args, err, c.code, c.say, out)
		}
	}
}
