package labgpu

import (
	"bufio"
	"context"
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

	"github.com/gpush/gpush/lab/labbuild"

	"github.com/gpush/gpush/lab/procstat"
)

var holderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "labgpu-test-")
	if err != nil {
		panic(err)
	}
	holderBin = filepath.Join(dir, "gpu-holder")
	// The holder the lab runs: its C build where cc is there.
	kind, err := labbuild.TestHolder(context.Background(), holderBin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build gpu-holder: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "labgpu tests: %s gpu-holder\n", kind)
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
		st, err := procstat.ReadIn(procDir, pid)
		if err != nil || st.State == 'Z' {
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
	defer kept.Close()
	listing, _ := NewScanner("/proc", dev)
	defer listing.Close()
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
		defer fresh.Close()
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
	for st, _ := procstat.Read(zl[0]); st.State != 'Z'; st, _ = procstat.Read(zl[0]) {
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

// nsShell is a shell that is pid 1 of a PID namespace of its own (with its
// own /proc), where the test can make a pid be reused on purpose.
type nsShell struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
	procDir string // the namespace's /proc, seen from here
}

func startNSShell(t *testing.T) *nsShell {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace and ns_last_pid need root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("unshare (util-linux) is missing")
		}
		t.Skip("unshare (util-linux) is missing")
	}
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder // the shell's job messages ("Killed")
	cmd.Stderr = &stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sh := &nsShell{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		// The shell is the namespace's init: killing it kills all in it.
		if pid, err := sh.initPID(); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("the namespace's shell said on stderr:\n%s", stderr.String())
		}
	})
	pid, err := sh.initPID()
	for ; err != nil; pid, err = sh.initPID() {
		time.Sleep(5 * time.Millisecond) // until unshare forked (bounded by the test's deadline)
	}
	sh.procDir = fmt.Sprintf("/proc/%d/root/proc", pid)
	if got := sh.say("echo $$"); got != "1" {
		t.Fatalf("the shell is pid %s in its namespace, want 1", got)
	}
	return sh
}

// initPID is the machine pid of the namespace's init: unshare's child.
func (sh *nsShell) initPID() (int, error) {
	p := sh.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0, fmt.Errorf("unshare %d has children %q", p, f)
	}
	return strconv.Atoi(f[0])
}

// say runs one line in the shell and returns the line it prints.
func (sh *nsShell) say(line string) string {
	sh.t.Helper()
	if _, err := io.WriteString(sh.in, line+"\n"); err != nil {
		sh.t.Fatal(err)
	}
	if !sh.out.Scan() {
		sh.t.Fatalf("%q: the shell said nothing: %v", line, sh.out.Err())
	}
	return strings.TrimSpace(sh.out.Text())
}

// A pid reused between two scans, both ways, by a process of the same
// binary holding the same device (so the same exe, and here the same fd
// count): a claimant's pid taken by a monitor is no longer listed, a
// monitor's taken by a claimant is.
func TestScannerPidReused(t *testing.T) {
	sh := startNSShell(t)
	dev := devDir(t)
	hold := holderBin + " --dev " + filepath.Join(dev, "nvidia0")
	fds := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	before := fds()
	s, err := NewScanner(sh.procDir, dev)
	if err != nil {
		t.Fatal(err)
	}
	// until waits for ScanClaims and Scan to agree on the namespace's
	// holders, then checks the Scanner against them.
	until := func(step string, pid int, claims, holds bool) {
		t.Helper()
		for {
			all, err := Scan(sh.procDir, dev)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ScanClaims(sh.procDir, dev)
			if slices.ContainsFunc(all, func(p Proc) bool { return p.PID == pid }) == holds &&
				slices.ContainsFunc(want, func(p Proc) bool { return p.PID == pid }) == claims {
				got, err := s.Scan()
				if err != nil {
					t.Fatal(err)
				}
				if describe(got) != describe(want) {
					t.Errorf("%s: Scanner:\n%s\nScanClaims:\n%s", step, describe(got), describe(want))
				}
				return
			}
			time.Sleep(5 * time.Millisecond) // bounded by the test's deadline
		}
	}
	pid, err := strconv.Atoi(sh.say(hold + " --mem-mib 7 >/dev/null & echo $!"))
	if err != nil {
		t.Fatal(err)
	}
	until("a claimant", pid, true, true)
	// Nothing changes in the namespace: a scan examines nothing again.
	examined := s.examined
	for i := 0; i < 3; i++ {
		if got, err := s.Scan(); err != nil || len(got) != 1 {
			t.Fatalf("a stable namespace: %s %v", describe(got), err)
		}
	}
	if n := s.examined - examined; n != 0 {
		t.Errorf("3 scans of an unchanged namespace examined %d processes again, want 0", n)
	}
	reuse := func(args string) {
		t.Helper()
		// One line: no scan between the death and the reuse.
		got := sh.say(fmt.Sprintf("kill -9 %d; wait %d; echo %d >/proc/sys/kernel/ns_last_pid; %s %s >/dev/null & echo $!", pid, pid, pid-1, hold, args))
		if got != strconv.Itoa(pid) {
			t.Fatalf("the new process got pid %s, want %d again", got, pid)
		}
	}
	reuse("")
	until("the claimant's pid taken by a monitor", pid, false, true)
	reuse("--mem-mib 9")
	until("the monitor's pid taken by a claimant", pid, true, true)
	if got, _ := s.Scan(); len(got) != 1 || got[0].MemMiB != 9 {
		t.Errorf("after the reuse: %s, want pid %d claiming 9 MiB", describe(got), pid)
	}
	// Two files kept per claimant, those of the dead ones closed.
	if n := fds() - before; n != 2 {
		t.Errorf("the scanner keeps %d files open for 1 claimant, want 2", n)
	}
	s.Close()
	if n := fds() - before; n != 0 {
		t.Errorf("after Close: %d files still open", n)
	}
}

// A process examined as no claimant that then execs one (its fd count and
// exe change), keeping the
// device it holds (no new pid, no new /proc inode): a shell holding the
// device on fd 3 that, told to, execs a holder of /dev/fd/3.
func TestScannerSeesExec(t *testing.T) {
	dev := devDir(t)
	script := `exec 3<"$0"; read go; exec "$1" --dev /dev/fd/3 --mem-mib 5`
	cmd := exec.Command("sh", "-c", script, filepath.Join(dev, "nvidia0"), holderBin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	pid := cmd.Process.Pid
	s, err := NewScanner("/proc", dev)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		all, _ := Scan("/proc", dev)
		if slices.ContainsFunc(all, func(p Proc) bool { return p.PID == pid }) {
			break // the shell holds the device
		}
		time.Sleep(2 * time.Millisecond) // bounded by the test's deadline
	}
	if got, _ := s.Scan(); len(got) != 0 {
		t.Fatalf("the shell is no claimant: %s", describe(got))
	}
	io.WriteString(in, "go\n")
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != ReadyLine(pid) {
		t.Fatalf("after the exec: %q %v, want %q", line, err, ReadyLine(pid))
	}
	want, _ := ScanClaims("/proc", dev)
	got, _ := s.Scan()
	if len(want) != 1 || describe(got) != describe(want) {
		t.Errorf("after the exec: Scanner:\n%s\nScanClaims:\n%s", describe(got), describe(want))
	}
}
