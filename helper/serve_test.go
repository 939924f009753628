package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// helperBin is cmd/gpush-helper, built on first use.
var helperBin string

func buildHelper(t *testing.T) string {
	t.Helper()
	if helperBin != "" {
		return helperBin
	}
	out := filepath.Join(filepath.Dir(holderBin), "gpush-helper")
	cmd := exec.Command("go", "build", "-o", out, "../cmd/gpush-helper")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build gpush-helper: %v\n%s", err, b)
	}
	helperBin = out
	return out
}

func TestServeSnapshotJSON(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "42")
	req, _ := json.Marshal(SnapshotRequest{Config: h.cfg})
	var out bytes.Buffer
	if err := Serve(context.Background(), VerbSnapshot, bytes.NewReader(req), &out); err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	if x := findHolder(&s, p.pid); x == nil || x.MemMiB != 42 || s.Version != Version {
		t.Errorf("holder %+v version %q", x, s.Version)
	}
}

func TestServeRejectsBadRequests(t *testing.T) {
	for _, tc := range []struct{ verb, in, want string }{
		{VerbSnapshot, "{", "unexpected EOF"},
		{VerbKill, `{"targets":[{"pid":1}],"grace":"soon"}`, "soon"},
		{VerbWaitFree, `{"gpus":[0],"timout":"1s"}`, `unknown field "timout"`},
		{VerbUnit, `{"action":"stop","unit":"x;reboot"}`, "not allowed"},
		{VerbUnit, `{"action":"mask","unit":"x"}`, "want stop, start"},
		{VerbSnapshot, `{} {}`, "more than one"},
		{"frobnicate", `{}`, "unknown verb"},
	} {
		var out bytes.Buffer
		err := Serve(context.Background(), tc.verb, strings.NewReader(tc.in), &out)
		if err == nil {
			t.Errorf("%s %s: no error", tc.verb, tc.in)
			continue
		}
		var e ErrorResponse
		if jerr := json.Unmarshal(out.Bytes(), &e); jerr != nil || e.Version != Version || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s %s: response %s (%v), want error containing %q", tc.verb, tc.in, out.Bytes(), jerr, tc.want)
		}
	}
}

// The real binary: JSON in, JSON out, exit status, --help, --table.
func TestHelperBinary(t *testing.T) {
	bin := buildHelper(t)
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "7")
	run := func(stdin string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	req := fmt.Sprintf(`{"dev_dir":%q,"nvidia_smi":%q}`, h.dev, h.smi)
	out, _, code := run(req, "snapshot")
	var s Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 || findHolder(&s, p.pid) == nil {
		t.Errorf("snapshot: code %d err %v out %s", code, err, out)
	}
	out, _, code = run("{nope", "kill")
	var e ErrorResponse
	if err := json.Unmarshal([]byte(out), &e); err != nil || code == 0 || e.Error == "" {
		t.Errorf("bad request: code %d out %s", code, out)
	}
	out, _, code = run("", "wait-free", "--help")
	if code != 0 || !strings.Contains(out, "threshold_mib") || !strings.Contains(out, "memory-held") {
		t.Errorf("wait-free --help: code %d out %s", code, out)
	}
	out, _, code = run("", "version")
	if code != 0 || !strings.HasPrefix(out, "gpush-helper "+Version) {
		t.Errorf("version: %d %q", code, out)
	}
	out, _, code = run("", "snapshot", "--table", "--dev-dir", h.dev, "--nvidia-smi", h.smi)
	if code != 0 || !strings.Contains(out, "GPU-MEMORY") || !strings.Contains(out, fmt.Sprint(p.pid)) || !strings.Contains(out, "7MiB / 143771MiB") {
		t.Errorf("table: %d\n%s", code, out)
	}
	if _, _, code = run("", "snapshot", "--bogus"); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if _, _, code = run(""); code != 2 {
		t.Errorf("no verb: exit %d, want 2", code)
	}
	// kill through the binary, by identity from the snapshot.
	id := identity(t, p.pid)
	out, _, code = run(fmt.Sprintf(`{"targets":[{"pid":%d,"start_time":%d}],"grace":"2s"}`, id.PID, id.StartTime), "kill")
	var kr KillResponse
	if err := json.Unmarshal([]byte(out), &kr); err != nil || code != 0 || len(kr.Results) != 1 || kr.Results[0].Outcome != OutcomeExited {
		t.Errorf("kill: %d %s", code, out)
	}
}

func TestUnitWithoutSystemd(t *testing.T) {
	old := systemdRunDir
	systemdRunDir = filepath.Join(t.TempDir(), "no-systemd")
	t.Cleanup(func() { systemdRunDir = old })
	r, err := Unit(context.Background(), UnitRequest{Action: UnitStop, Unit: "sglang"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Systemd || r.OK || r.Unit != "sglang.service" || !strings.Contains(r.Reason, "systemd is not running") {
		t.Errorf("%+v", r)
	}
	if _, err := Unit(context.Background(), UnitRequest{Action: UnitStop, Unit: "-x"}); err == nil {
		t.Error("bad name: want an error")
	}
}

// On a host that runs systemd, status of a unit every systemd has.
func TestUnitStatusWithSystemd(t *testing.T) {
	if fi, err := os.Stat(systemdRunDir); err != nil || !fi.IsDir() {
		t.Skipf("systemd not running here (%s absent)", systemdRunDir)
	}
	r, err := Unit(context.Background(), UnitRequest{Action: UnitStatus, Unit: "systemd-journald", Timeout: Duration(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Systemd || r.ActiveState == "" || r.ControlGroup == "" {
		t.Errorf("%+v", r)
	}
}

func TestCgroupMembers(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"))
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cg := parseCgroup(b).Path
	s, err := newScanner(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, pid := range s.pidsInCgroup(cg) {
		found = found || pid == p.pid
	}
	if !found {
		t.Errorf("holder %d not found in cgroup %s", p.pid, cg)
	}
	// cgroup v2 layout: a unit's cgroup and a sub-cgroup.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte("10\n11\n"), 0o644)
	os.WriteFile(filepath.Join(root, "sub", "cgroup.procs"), []byte("12\n"), 0o644)
	if got := fmt.Sprint(cgroupProcs(root)); got != "[10 11 12]" {
		t.Errorf("cgroupProcs = %s", got)
	}
	if cgroupProcs(filepath.Join(root, "absent")) != nil {
		t.Error("absent cgroup: want nil")
	}
	if !inCgroup("/system.slice/a.service/x", "/system.slice/a.service") || inCgroup("/system.slice/a.service2", "/system.slice/a.service") {
		t.Error("inCgroup prefix rule")
	}
}
