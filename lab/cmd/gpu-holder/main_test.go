package main

import (
	"bufio"
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

	"github.com/gpush/gpush/lab/labgpu"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpu-holder-test-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "gpu-holder")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, b)
		os.Exit(1)
	}
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "gone"
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func TestHolderAndOrphanedChild(t *testing.T) {
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

func TestHolderUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"--dev", "/nonexistent/nvidia0"}, {"--dev", os.DevNull, "--mem-mib", "-1"}} {
		err := exec.Command(bin, args...).Run()
		if err == nil {
			t.Errorf("%v: exit 0", args)
		}
	}
}

// startReady runs the holder and returns its ready pids (want of them).
func startReady(t *testing.T, want int, args ...string) (*exec.Cmd, []int) {
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
func TestKeeper(t *testing.T) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia-uvm"} {
		os.WriteFile(filepath.Join(dev, n), nil, 0o666)
	}
	cmd, pids := startReady(t, 2, "--dev", filepath.Join(dev, "nvidia0"), "--dev", filepath.Join(dev, "nvidia-uvm"), "--mem-mib", "8802", "--keeper")
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
func TestZombieLeader(t *testing.T) {
	dev := t.TempDir()
	os.WriteFile(filepath.Join(dev, "nvidia0"), nil, 0o666)
	cmd, pids := startReady(t, 1, "--dev", filepath.Join(dev, "nvidia0"), "--zombie-leader")
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
