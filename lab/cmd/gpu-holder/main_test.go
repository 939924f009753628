package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

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
