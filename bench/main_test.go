package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/sshd"
	"golang.org/x/crypto/ssh"
)

// tree and vmHWM see a real process tree: a shell and its two children.
func TestTreeSeesDescendants(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	var pids []int
	for i := 0; i < 500 && len(pids) < 3; i++ {
		pids = tree(cmd.Process.Pid)
		time.Sleep(10 * time.Millisecond)
	}
	if len(pids) != 3 || pids[0] != cmd.Process.Pid {
		t.Fatalf("tree of the shell %d: %v, want it and its two sleeps", cmd.Process.Pid, pids)
	}
	for _, pid := range pids[1:] {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if strings.TrimSpace(string(comm)) != "sleep" {
			t.Errorf("descendant %d is %q, want sleep", pid, comm)
		}
		if vmHWM(pid) <= 0 {
			t.Errorf("VmHWM of %d not read", pid)
		}
	}
	stop := make(chan struct{})
	close(stop)
	if sum, n := pollTree(cmd.Process.Pid, stop); n != 3 || sum < vmHWM(pids[1]) {
		t.Fatalf("pollTree: %d KiB over %d processes", sum, n)
	}
}

// logCounts counts what the real sshd logs: two logins, three sessions.
func TestLogCountsRealSSHD(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	s := sshd.StartT(t, sshd.Options{LogLevel: "VERBOSE"})
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(s.ClientSigner)}, HostKeyCallback: ssh.FixedHostKey(s.HostKey)}
	before := logCounts(s.LogPath)
	for _, sessions := range []int{1, 2} {
		c, err := ssh.Dial("tcp", s.Addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < sessions; i++ {
			sess, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			if err := sess.Run("true"); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	want := counts{conns: before.conns + 2, sessions: before.sessions + 3}
	var got counts
	for i := 0; i < 200; i++ {
		if got = logCounts(s.LogPath); got == want {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("sshd log counts %+v, want %+v:\n%s", got, want, s.Logs())
	}
}

// pdshConfig names each host in its own SetEnv, after its Host line.
func TestPdshConfig(t *testing.T) {
	dir := t.TempDir()
	l := &lab.Lab{Dir: dir, SSHConfig: filepath.Join(dir, "ssh_config")}
	in := "Host lab01\n  Port 1\nHost lab02\n  Port 2\n"
	if err := os.WriteFile(l.SSHConfig, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := pdshConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	lines := strings.Split(string(b), "\n")
	for _, want := range []string{"Host lab01", "  SetEnv GPUSH_LAB_HOST=lab01", "  Port 1", "Host lab02", "  SetEnv GPUSH_LAB_HOST=lab02", "  Port 2"} {
		if !slices.Contains(lines, want) {
			t.Errorf("%s lacks %q:\n%s", p, want, b)
		}
	}
	if i, j := slices.Index(lines, "Host lab02"), slices.Index(lines, "  SetEnv GPUSH_LAB_HOST=lab02"); j != i+1 {
		t.Errorf("SetEnv of lab02 at line %d, its Host at %d:\n%s", j, i, b)
	}
}

// checkMemory lets a lab through that fits in 90% of MemAvailable and
// refuses one that does not, with the estimate and what to do; the C
// holders fit hosts the Go ones do not.
func TestCheckMemory(t *testing.T) {
	const gib = 1 << 20 // KiB
	if err := checkMemory(1000, lab.KindC, 22*gib); err != nil {
		t.Errorf("1000 C hosts in 22 GiB: %v", err)
	}
	if err := checkMemory(50, lab.KindGo, 2*gib); err != nil {
		t.Errorf("50 Go hosts in 2 GiB: %v", err)
	}
	err := checkMemory(1000, lab.KindGo, 12*gib)
	if err == nil {
		t.Fatal("1000 Go hosts in 12 GiB: no error")
	}
	for _, want := range []string{"1000 lab hosts need ~17.3 GiB", "MemAvailable (12.0 GiB)", "run -n 608 or fewer", "apt-get install gcc libc6-dev", "Go holders"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	err = checkMemory(1000, lab.KindC, 8*gib)
	if err == nil || !strings.Contains(err.Error(), "run -n 602 or fewer") || strings.Contains(err.Error(), "apt-get") {
		t.Errorf("1000 C hosts in 8 GiB: %v", err)
	}
	// The n it suggests fits.
	if err := checkMemory(608, lab.KindGo, 12*gib); err != nil {
		t.Errorf("608 Go hosts in 12 GiB: %v", err)
	}
	if err := checkMemory(609, lab.KindGo, 12*gib); err == nil {
		t.Error("609 Go hosts in 12 GiB: no error")
	}
	if avail, ok, err := memAvailableKiB(); err != nil || !ok || avail <= 0 {
		t.Errorf("MemAvailable of this machine: %d %v %v", avail, ok, err)
	}
}
