package nssystemd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// boot boots a systemd for t; not being able to is a failure in CI
// (CI=true) and for root, a skip otherwise.
func boot(t *testing.T, share ...string) *Systemd {
	t.Helper()
	need(t)
	s, err := Boot(context.Background(), Options{Dir: t.TempDir(), Share: share})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// need fails (CI, root) or skips t when no systemd can be booted here.
func need(t *testing.T) {
	t.Helper()
	if why := Available(); why != "" {
		if os.Getenv("CI") == "true" || os.Geteuid() == 0 {
			t.Fatalf("real systemd needed in CI and for root: %s", why)
		}
		t.Skip("skipping: " + why)
	}
}

// A boot gives a running systemd whose units live in its own cgroup subtree
// and run inside its namespace; the host's /tmp is left as it was, and Stop
// removes what the boot made.
func TestBootRunStop(t *testing.T) {
	// A file in the host's /tmp that systemd-tmpfiles would clean up.
	marker, err := os.CreateTemp("", "gpush-nssystemd-marker-")
	if err != nil {
		t.Fatal(err)
	}
	marker.Close()
	old := time.Now().Add(-90 * 24 * time.Hour)
	os.Chtimes(marker.Name(), old, old)
	defer os.Remove(marker.Name())

	before := hostCgroupState()
	work := t.TempDir()
	s := boot(t, work)
	rss, err := s.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd pid %d booted in %s, RSS %d KiB, cgroup %s", s.PID, s.Boot, rss, s.CgroupBase)

	ctx := context.Background()
	out := filepath.Join(work, "out")
	unit := "[Service]\nExecStart=/bin/sh -c 'echo $$$$ > " + out + "; exec sleep 600'\n"
	if err := s.WriteUnit(ctx, "nss-probe.service", unit); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx, "start", "nss-probe.service"); err != nil {
		t.Fatal(err)
	}
	p, err := s.Show(ctx, "nss-probe.service", "MainPID", "ControlGroup", "ActiveState")
	if err != nil {
		t.Fatal(err)
	}
	if p["ActiveState"] != "active" || p["ControlGroup"] != s.CgroupBase+"/system.slice/nss-probe.service" {
		t.Fatalf("show: %v", p)
	}
	// MainPID is a namespace pid; the unit wrote the same one into a shared folder.
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); len(b) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ = os.ReadFile(out)
	}
	if strings.TrimSpace(string(b)) != p["MainPID"] {
		t.Fatalf("unit wrote pid %q, MainPID %s", b, p["MainPID"])
	}
	ns, _ := strconv.Atoi(p["MainPID"])
	host := s.HostPID(ns)
	if host <= 0 || host == ns {
		t.Fatalf("HostPID(%d) = %d", ns, host)
	}
	cg, err := os.ReadFile(filepath.Join(s.Hierarchies[0], p["ControlGroup"], "cgroup.procs"))
	if err != nil || strings.TrimSpace(string(cg)) != strconv.Itoa(host) {
		t.Fatalf("cgroup.procs of the unit: %q %v, want %d", cg, err, host)
	}
	if _, err := os.Stat(marker.Name()); err != nil {
		t.Errorf("host /tmp file gone after the boot: %v", err)
	}

	stopStart := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("halted and cleaned up in %s", time.Since(stopStart))
	if _, err := os.Stat("/proc/" + strconv.Itoa(host)); err == nil {
		t.Errorf("unit process %d alive after Stop", host)
	}
	for _, h := range s.Hierarchies {
		if _, err := os.Stat(filepath.Join(h, s.CgroupBase)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s still there after Stop (%v)", filepath.Join(h, s.CgroupBase), err)
		}
	}
	if _, err := os.Stat(marker.Name()); err != nil {
		t.Errorf("host /tmp file gone after the stop: %v", err)
	}
	if after := hostCgroupState(); after != before {
		t.Errorf("host cgroup roots changed:\nbefore %s\nafter  %s", before, after)
	}
}

// hostCgroupState is what a systemd that took the host's cgroups over
// would change: release agents, enabled controllers, slices at the roots.
func hostCgroupState() string {
	var b strings.Builder
	roots, _ := filepath.Glob(cgroupRoot + "/*")
	roots = append(roots, cgroupRoot)
	for _, r := range roots {
		for _, f := range []string{"release_agent", "notify_on_release", "cgroup.subtree_control"} {
			if v, err := os.ReadFile(filepath.Join(r, f)); err == nil {
				fmt.Fprintf(&b, "%s/%s=%q ", r, f, strings.TrimSpace(string(v)))
			}
		}
		for _, d := range []string{"system.slice", "init.scope", "user.slice"} {
			if _, err := os.Stat(filepath.Join(r, d)); err == nil {
				fmt.Fprintf(&b, "%s/%s ", r, d)
			}
		}
	}
	return b.String()
}

// Boot refuses a relative folder (or says why it cannot boot at all).
func TestBootNeedsAbsoluteDir(t *testing.T) {
	if _, err := Boot(context.Background(), Options{Dir: "rel"}); err == nil {
		t.Errorf("err = %v", err)
	}
}

// A boot that fails (here: its deadline passes at once) leaves no process
// and no cgroup behind.
func TestBootFailureCleansUp(t *testing.T) {
	need(t)
	s, err := Boot(context.Background(), Options{Dir: t.TempDir(), BootTimeout: time.Nanosecond})
	if err == nil {
		s.Stop()
		t.Fatal("boot with a 1ns deadline succeeded")
	}
	t.Log(err)
	hs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", fmt.Sprintf("gpush-nssystemd-%d-*", os.Getpid())))
	top, _ := filepath.Glob(filepath.Join(cgroupRoot, fmt.Sprintf("gpush-nssystemd-%d-*", os.Getpid())))
	if left := append(hs, top...); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
}

// A call cut off by its deadline leaves no process behind: the systemctl
// that nsenter forked into the namespace is killed and reaped with the call,
// not left waiting on its job (and holding the call's output pipes).
func TestRunTimeoutLeavesNoProcess(t *testing.T) {
	s := boot(t)
	ctx := context.Background()
	// A oneshot's start job lasts as long as its ExecStart: 10 minutes here.
	if err := s.WriteUnit(ctx, "nss-hang.service", "[Service]\nType=oneshot\nExecStart=/bin/sleep 600\n"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(short, "start", "nss-hang.service")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("start of a unit that never finishes starting returned no error")
		}
		t.Log(err)
	case <-time.After(time.Minute):
		// Not a speed goal: a Run that outlives its deadline by a minute
		// waits for a process its timeout left running.
		t.Fatalf("Run still waiting a minute after its deadline; systemctl left in the namespace: %v", inNamespace(t, s, "systemctl"))
	}
	if left := inNamespace(t, s, "systemctl"); len(left) > 0 {
		t.Errorf("systemctl processes left in the namespace after the timed-out call (zombies count: nobody reaped them): %v", left)
	}
}

// inNamespace lists the host pids of the processes named comm (in any
// state) in s's PID namespace.
func inNamespace(t *testing.T, s *Systemd, comm string) []int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", s.PID))
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		if c, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(c)) == comm {
			out = append(out, pid)
		}
	}
	return out
}
