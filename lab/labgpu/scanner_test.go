package labgpu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var holderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "labgpu-test-")
	if err != nil {
		panic(err)
	}
	holderBin = filepath.Join(dir, "gpu-holder")
	if b, err := exec.Command("go", "build", "-o", holderBin, "../cmd/gpu-holder").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build gpu-holder: %v\n%s", err, b)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startHolder starts a real gpu-holder and returns the pids of its ready
// lines (two with --keeper or --child-mem-mib); the test kills them.
func startHolder(t testing.TB, args ...string) []int {
	t.Helper()
	cmd := exec.Command(holderBin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	want := 1
	if slices.Contains(args, "--keeper") || slices.Contains(args, "--child-mem-mib") {
		want = 2
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < want && sc.Scan() {
		if p, ok := ReadyPID(sc.Text()); ok {
			pids = append(pids, p)
		}
	}
	go io.Copy(io.Discard, out)
	t.Cleanup(func() {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		cmd.Wait()
	})
	if len(pids) < want {
		t.Fatalf("gpu-holder %v: %d ready lines, want %d", args, len(pids), want)
	}
	return pids
}

// killDead kills pid and waits until /proc shows it gone or a zombie
// (bounded by the test's deadline).
func killDead(t testing.TB, procDir string, pid int) {
	t.Helper()
	syscall.Kill(pid, syscall.SIGKILL)
	waitDead(t, procDir, pid)
}

func waitDead(t testing.TB, procDir string, pid int) {
	t.Helper()
	for {
		b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// describe is a scan's result in a comparable form.
func describe(ps []Proc) string {
	var lines []string
	for _, p := range ps {
		devs := make([]string, 0, len(p.Devices))
		for d := range p.Devices {
			devs = append(devs, d)
		}
		sort.Strings(devs)
		lines = append(lines, fmt.Sprintf("%d/%d %s %v mem=%d keeps=%d/%d", p.PID, p.StartTime, filepath.Base(p.Name), devs, p.MemMiB, p.KeepsOf, p.KeepsMiB))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func devDir(t testing.TB) string {
	dir := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A Scanner kept across scans (both ways of counting fds), a fresh one and
// ScanClaimsOnce all say what ScanClaims says, while real holders of every
// kind come and go: claimants, a keeper and its dead parent, a parent and
// its child, a monitor, a zombie leader whose threads hold on.
func TestScannerIsScanClaims(t *testing.T) {
	dev := devDir(t)
	d := func(n string) string { return filepath.Join(dev, n) }
	kept, err := NewScanner("/proc", dev)
	if err != nil {
		t.Fatal(err)
	}
	listing, _ := NewScanner("/proc", dev)
	listing.sizeIsCount = false // as on Linux before 6.2
	if !kept.sizeIsCount {
		t.Log("this kernel does not count fds in an fd folder's size: both scanners list")
	}
	check := func(step string, wantN int) {
		t.Helper()
		want, err := ScanClaims("/proc", dev)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) != wantN {
			t.Fatalf("%s: ScanClaims found %d claimants, want %d:\n%s", step, len(want), wantN, describe(want))
		}
		fresh, _ := NewScanner("/proc", dev)
		for name, scan := range map[string]func() ([]Proc, error){
			"kept": kept.Scan, "listing": listing.Scan, "fresh": fresh.Scan,
			"once": func() ([]Proc, error) { return ScanClaimsOnce("/proc", dev) },
		} {
			got, err := scan()
			if err != nil {
				t.Fatalf("%s: %s: %v", step, name, err)
			}
			if describe(got) != describe(want) {
				t.Errorf("%s: %s scanner:\n%s\nScanClaims:\n%s", step, name, describe(got), describe(want))
			}
		}
	}
	check("none", 0)
	a := startHolder(t, "--dev", d("nvidia0"), "--dev", d("nvidiactl"), "--mem-mib", "100")
	startHolder(t, "--dev", d("nvidia0"), "--dev", d("nvidia1")) // a monitor: claims nothing
	check("a claimant and a monitor", 1)
	pk := startHolder(t, "--dev", d("nvidia1"), "--mem-mib", "300", "--keeper")
	pc := startHolder(t, "--dev", d("nvidia0"), "--mem-mib", "10", "--child-mem-mib", "20")
	zl := startHolder(t, "--dev", d("nvidia1"), "--mem-mib", "7", "--zombie-leader")
	for !strings.Contains(readStat(zl[0]), ") Z ") {
		time.Sleep(2 * time.Millisecond)
	}
	check("keeper, child, zombie leader", 6)
	killDead(t, "/proc", a[0])
	killDead(t, "/proc", pk[0])
	check("claimant and keeper's parent dead", 4)
	killDead(t, "/proc", pc[0])
	b := startHolder(t, "--dev", d("nvidia1"), "--mem-mib", "5")
	check("a parent dead, a new claimant", 4)
	syscall.Kill(zl[0], syscall.SIGKILL) // the whole group: its threads too
	for tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", zl[0])); len(tasks) > 1; tasks, _ = os.ReadDir(fmt.Sprintf("/proc/%d/task", zl[0])) {
		time.Sleep(2 * time.Millisecond)
	}
	killDead(t, "/proc", b[0])
	check("zombie leader and the new one dead", 2)
}

func readStat(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return string(b)
}
