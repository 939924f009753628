package labgpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

func TestMemMiB(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want int64
	}{
		{[]string{"x", "--dev", "a", "--mem-mib", "10850"}, 10850},
		{[]string{"x", "--mem-mib=7"}, 7},
		{[]string{"x", "-mem-mib", "3"}, 3},
		{[]string{"x", "--child-mem-mib", "6"}, 0},
		{[]string{"x", "--mem-mib"}, 0},
		{[]string{"x", "--mem-mib", "-4"}, 0},
		{nil, 0},
	} {
		if got := MemMiB(tc.argv); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.argv, got, tc.want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, ConfigName)
	zero := 0
	c := Config{DevDir: dir, ReleaseDelay: "70ms", GPUs: []GPU{{Index: 1, Minor: &zero}}}
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(p)
	if err != nil || got.GPUs[0].Dev() != "nvidia0" {
		t.Fatalf("%+v %v", got, err)
	}
	if d, _ := got.Delay(); d.Milliseconds() != 70 {
		t.Errorf("delay %v", d)
	}
	for _, bad := range []string{`{"dev_dir":""}`, `{"dev_dir":"/d","fault":"explode"}`, `{"dev_dir":"/d","release_delay":"soon"}`, `{`} {
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := LoadConfig(p); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestScanFindsOwnFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "nvidia0"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	procs, err := Scan("/proc", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].PID != os.Getpid() || !procs[0].Devices["nvidia0"] {
		t.Errorf("%+v", procs)
	}
}

// ScanClaims finds exactly the processes of Scan that claim memory: real
// processes holding the device, one claiming (--mem-mib in its argv), one
// keeping a parent's (--keeps-mem-mib), one claiming nothing (a monitor).
func TestScanClaimsIsScanOfClaimants(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "nvidia0")
	if err := os.WriteFile(dev, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(args ...string) int {
		// sh keeps the device open on fd 3 (its sleep does not) and has
		// the argv the fake driver reads.
		cmd := exec.Command("sh", append([]string{"-c", `exec 3<"$0"; sleep 60 3<&-; :`, dev}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its sleep goes with it
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return cmd.Process.Pid
	}
	claim := start("--mem-mib", "512")
	keep := start("--keeps-mem-of", "1", "--keeps-mem-mib", "256")
	monitor := start("--interval", "1")
	var all, claimants []Proc
	for try := 0; try < 100; try++ { // until all three opened it
		var err error
		if all, err = Scan("/proc", dir); err != nil {
			t.Fatal(err)
		}
		if claimants, err = ScanClaims("/proc", dir); err != nil {
			t.Fatal(err)
		}
		if len(all) == 3 && len(claimants) == 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	pids := func(ps []Proc) map[int]bool {
		m := map[int]bool{}
		for _, p := range ps {
			m[p.PID] = true
		}
		return m
	}
	if got := pids(all); !got[claim] || !got[keep] || !got[monitor] || len(got) != 3 {
		t.Fatalf("Scan: %+v, want pids %d %d %d", all, claim, keep, monitor)
	}
	if got := pids(claimants); !got[claim] || !got[keep] || got[monitor] || len(got) != 2 {
		t.Fatalf("ScanClaims: %+v, want pids %d %d only", claimants, claim, keep)
	}
	for _, p := range claimants {
		for _, q := range all {
			if p.PID == q.PID && (p.MemMiB != q.MemMiB || p.KeepsMiB != q.KeepsMiB || p.Name != q.Name || !reflect.DeepEqual(p.Devices, q.Devices)) {
				t.Errorf("pid %d: ScanClaims %+v, Scan %+v", p.PID, p, q)
			}
		}
	}
}
