package lab

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"

	"github.com/gpush/gpush/lab/procstat"
)

// With Isolate, a session on a host sees that host's processes only, under
// a pid 1 of its own that adopted the orphan, while the lab tracks them by
// machine pid; a session on the sshd's own port sees the machine's; Stop
// takes every namespace down. With each build of lab-init and the holders.
func TestIsolatedHostsSeeTheirOwnProcesses(t *testing.T) {
	for _, kind := range []string{KindC, KindGo} {
		t.Run(kind, func(t *testing.T) { testIsolatedHosts(t, kind) })
	}
}

func testIsolatedHosts(t *testing.T, kind string) {
	if _, err := sshd.FindBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs sshd: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd and namespaces need root")
	}
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Hosts: 2, Dir: t.TempDir(), Scenario: ScenarioLeftovers, Isolate: true, Bin: Binaries{Kind: kind}})
	if kind == KindC && errors.Is(err, ErrNoCC) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatal(err)
	}
	if l.bin.Kind != kind {
		t.Fatalf("built %s (%s), want %s", l.bin.Kind, l.bin.Note, kind)
	}
	defer l.Stop()
	run := func(host string, cmd string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, ssh, "-F", l.SSHConfig, host, cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh %s %q: %v\n%s\nsshd log:\n%s", host, cmd, err, out, l.SSHD.Logs())
		}
		return string(out)
	}
	const cmdlines = `for d in /proc/[0-9]*; do tr '\0' ' ' < "$d/cmdline" 2>/dev/null; echo; done`
	for i, h := range l.Hosts {
		other := l.Hosts[1-i]
		if h.InitPID == 0 || h.ClientAddr == "" {
			t.Fatalf("host %s: init pid %d, client address %q", h.Name, h.InitPID, h.ClientAddr)
		}
		if got := strings.TrimSpace(run(h.Name, "cat /proc/1/comm")); got != "lab-init" {
			t.Errorf("host %s: pid 1 is %q, want lab-init", h.Name, got)
		}
		seen := run(h.Name, cmdlines)
		if !strings.Contains(seen, h.DevDir+"/") || strings.Contains(seen, other.DevDir+"/") {
			t.Errorf("host %s sees processes of %s (want) and of %s (must not):\n%s", h.Name, h.DevDir, other.DevDir, seen)
		}
		// Every lab process of the host is there under its HostPID, with
		// its own command line; the orphan's parent is the host's pid 1.
		for _, p := range l.Procs() {
			if p.Host != h.Name || !Alive(p) {
				continue
			}
			if p.HostPID == p.PID {
				t.Errorf("%s %s: host pid %d is its machine pid", h.Name, p.Role, p.PID)
			}
			mine, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			there := run(h.Name, "tr '\\0' ' ' < /proc/"+strconv.Itoa(p.HostPID)+"/cmdline")
			if there != strings.ReplaceAll(string(mine), "\x00", " ") {
				t.Errorf("%s %s: host pid %d runs %q there, machine pid %d runs %q", h.Name, p.Role, p.HostPID, there, p.PID, mine)
			}
			if p.Role == RoleOrphan {
				out := run(h.Name, "cat /proc/"+strconv.Itoa(p.HostPID)+"/stat")
				if st, err := procstat.Parse([]byte(out)); err != nil || st.PPID != 1 {
					t.Errorf("%s orphan: stat %q (%v), want parent 1", h.Name, out, err)
				}
			}
		}
		// The host's nvidia-smi charges its own holders only.
		smi := run(h.Name, h.SMI+" --query-gpu=index,memory.used --format=csv,noheader,nounits")
		if lines := strings.Split(strings.TrimSpace(smi), "\n"); len(lines) != 4 || lines[2] != "2, 4096" {
			t.Errorf("host %s nvidia-smi:\n%s", h.Name, smi)
		}
		// SFTP, which gpush uploads the helper with, runs through the same
		// ForceCommand.
		sftp := exec.CommandContext(ctx, "sftp", "-F", l.SSHConfig, "-b", "-", h.Name)
		sftp.Stdin = strings.NewReader("ls " + h.DevDir + "\n")
		if out, err := sftp.CombinedOutput(); err != nil || !strings.Contains(string(out), "nvidia0") {
			t.Errorf("sftp %s: %v\n%s", h.Name, err, out)
		}
	}
	// The host's init reaps what it adopted: a killed orphan goes, it does
	// not stay a zombie.
	if o := l.Find(l.Hosts[0].Name, RoleOrphan); len(o) == 1 {
		syscall.Kill(o[0].PID, syscall.SIGKILL)
		for st, err := procState(o[0].PID); err == nil; st, err = procState(o[0].PID) {
			if ctx.Err() != nil {
				t.Fatalf("orphan %d still there (%s): lab-init does not reap it", o[0].PID, st)
			}
			time.Sleep(5 * time.Millisecond)
		}
	} else {
		t.Errorf("orphans of %s: %v", l.Hosts[0].Name, o)
	}
	// The sshd's own port: the machine's processes, both hosts'.
	direct := exec.CommandContext(ctx, ssh, "-p", strconv.Itoa(l.SSHD.Port), "-i", l.ClientKey, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile="+l.KnownHosts, "-o", "StrictHostKeyChecking=yes", l.User+"@127.0.0.1", cmdlines)
	if out, err := direct.CombinedOutput(); err != nil || !strings.Contains(string(out), l.Hosts[0].DevDir+"/") || !strings.Contains(string(out), l.Hosts[1].DevDir+"/") {
		t.Errorf("ssh to the sshd's own port: %v; want both hosts' processes:\n%.3000s", err, out)
	}
	procs := l.Procs()
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, h := range l.Hosts {
		if err := syscall.Kill(h.InitPID, 0); err == nil {
			if st, _ := procState(h.InitPID); st != "Z" {
				t.Errorf("host %s: lab-init %d still runs after Stop", h.Name, h.InitPID)
			}
		}
	}
	for _, p := range procs {
		if Alive(p) {
			t.Errorf("%s %s %d still alive after Stop", p.Host, p.Role, p.PID)
		}
	}
}
