package helper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A tool printing without end, on either stream, is killed at the cap
// and the call fails naming the tool, the stream and the cap; output up to
// the cap, inclusive, is returned whole.
func TestToolOutputCapped(t *testing.T) {
	freeAfter(t)
	h := newHost(t, 1)
	argv := []string{h.smi, "--query-gpu=" + queryGPUFields, csvFormat}
	for _, stream := range []string{"stdout", "stderr"} {
		t.Setenv("FAKE_NVIDIA_SMI_FLOOD", stream)
		t.Setenv("FAKE_NVIDIA_SMI_FLOOD_BYTES", "")
		out, errb, err := runBounded(context.Background(), time.Minute, argv)
		var ce *OutputCapError
		if !errors.As(err, &ce) || ce.Stream != stream || ce.Tool != h.smi || ce.Cap != MaxToolOutput {
			t.Fatalf("%s flood: err %v, want an OutputCapError for %s", stream, err, stream)
		}
		if msg := err.Error(); !strings.Contains(msg, h.smi) || !strings.Contains(msg, "16 MiB on "+stream) {
			t.Errorf("%s flood: message %q does not name the tool and the cap", stream, msg)
		}
		if out != nil || errb != nil {
			t.Errorf("%s flood: %d/%d bytes returned, want none", stream, len(out), len(errb))
		}
		if left := smiRunning(h.smi); len(left) > 0 {
			t.Errorf("%s flood: nvidia-smi still running after the cap: %v", stream, left)
		}
	}
	t.Setenv("FAKE_NVIDIA_SMI_FLOOD", "stdout")
	t.Setenv("FAKE_NVIDIA_SMI_FLOOD_BYTES", strconv.Itoa(MaxToolOutput))
	out, _, err := runBounded(context.Background(), time.Minute, argv)
	if err != nil || len(out) != MaxToolOutput {
		t.Errorf("exactly the cap: %d bytes, err %v; want %d, nil", len(out), err, MaxToolOutput)
	}
	t.Setenv("FAKE_NVIDIA_SMI_FLOOD_BYTES", strconv.Itoa(MaxToolOutput+1))
	if _, _, err := runBounded(context.Background(), time.Minute, argv); !errors.As(err, new(*OutputCapError)) {
		t.Errorf("one byte over the cap: err %v, want an OutputCapError", err)
	}
	// Through a snapshot: nvidia-smi is reported failed, the holders are
	// still found from /proc.
	t.Setenv("FAKE_NVIDIA_SMI_FLOOD_BYTES", "")
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	s := snapshot(t, h.cfg)
	if s.SMI || findHolder(s, p.pid) == nil || !strings.Contains(strings.Join(s.Warnings, "\n"), "more than 16 MiB on stdout") {
		t.Errorf("snapshot with a flooding nvidia-smi: smi %v warnings %v", s.SMI, s.Warnings)
	}
}

// A hung tool whose child holds its output open: the whole group is
// killed at the deadline, the child too.
func TestToolHangWithChild(t *testing.T) {
	h := newHost(t, 1)
	t.Setenv("FAKE_NVIDIA_SMI_HANG", "child")
	_, _, err := runBounded(context.Background(), 300*time.Millisecond, []string{h.smi, "--query-gpu=" + queryGPUFields, csvFormat})
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms (process group killed)") {
		t.Errorf("err %v, want the tool's timeout", err)
	}
	if left := append(smiRunning(h.smi), smiRunning(fakeSMIBin)...); len(left) > 0 {
		t.Errorf("still running after the deadline: %v", left)
	}
}

// memoryCgroup makes a private child of the test's own cgroup v1 memory
// cgroup with a limit, and removes it when the test ends. It returns the
// cgroup's folder.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	const mount = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(mount, "memory.limit_in_bytes")); err != nil {
		t.Skipf("no cgroup v1 memory controller at %s: %v", mount, err)
	}
	parent := mount
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.SplitN(sc.Text(), ":", 3); len(f) == 3 && f[1] == "memory" {
				if _, err := os.Stat(filepath.Join(mount, f[2])); err == nil {
					parent = filepath.Join(mount, f[2])
				}
			}
		}
	}
	dir, err := os.MkdirTemp(parent, "gpush-caps-test-")
	if err != nil {
		t.Skipf("cannot create a memory cgroup under %s: %v", parent, err)
	}
	t.Cleanup(func() {
		// Empty once what the test started has exited.
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
	})
	set := func(file string, v int64) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			t.Fatalf("cgroup %s: %v", file, err)
		}
	}
	set("memory.limit_in_bytes", limit)
	// With swap accounting, no swap either: the limit is the memory there is.
	if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
		set("memory.memsw.limit_in_bytes", limit)
	}
	return dir
}

func cgroupValue(t *testing.T, dir, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v
}

// The helper binary in a 64 MiB memory cgroup, its nvidia-smi printing
// without end: without the cap it would be OOM-killed (exit 137, no
// message); with it, it answers. The snapshot reports nvidia-smi failed and
// the holder found from /proc; wait-free fails with the cap's message.
func TestHelperCapInMemoryCgroup(t *testing.T) {
	bin := buildHelper(t)
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "100")
	const limit = 64 << 20
	cg := memoryCgroup(t, limit)
	req, _ := json.Marshal(WaitFreeRequest{Config: h.cfg, Timeout: Duration(time.Minute)})
	for _, verb := range []string{VerbSnapshot, VerbWaitFree} {
		// sh joins the cgroup, then becomes the helper: it runs there from its first instruction.
		cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1" && exec "$2" "$3"`, "sh", filepath.Join(cg, "cgroup.procs"), bin, verb)
		cmd.Env = append(os.Environ(), "FAKE_NVIDIA_SMI_FLOOD=stdout")
		cmd.Stdin = bytes.NewReader(req)
		if verb == VerbSnapshot {
			cmd.Stdin = bytes.NewReader([]byte(fmt.Sprintf(`{"dev_dir":%q,"nvidia_smi":%q}`, h.dev, h.smi)))
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if ee != nil && ee.ExitCode() != 1 {
			t.Fatalf("%s: helper died: %v (stderr %q); memory cgroup failcnt %d", verb, err, errb.String(), cgroupValue(t, cg, "memory.failcnt"))
		}
		switch verb {
		case VerbSnapshot:
			var s Snapshot
			if err := json.Unmarshal(out.Bytes(), &s); err != nil || ee != nil {
				t.Fatalf("snapshot: %v, exit %v: %s", err, ee, out.Bytes())
			}
			if s.SMI || findHolder(&s, p.pid) == nil || !strings.Contains(strings.Join(s.Warnings, "\n"), "printed more than 16 MiB on stdout") {
				t.Errorf("snapshot: smi %v warnings %v", s.SMI, s.Warnings)
			}
		case VerbWaitFree:
			var e ErrorResponse
			if err := json.Unmarshal(out.Bytes(), &e); err != nil || ee == nil || !strings.Contains(e.Error, h.smi+" printed more than 16 MiB on stdout") {
				t.Errorf("wait-free: exit %v, response %s (%v), want the cap's error", ee, out.Bytes(), err)
			}
		}
	}
	peak := cgroupValue(t, cg, "memory.max_usage_in_bytes")
	t.Logf("peak memory of the helper and its nvidia-smi: %.1f MiB (limit %d MiB)", float64(peak)/(1<<20), limit>>20)
	if peak > limit {
		t.Errorf("peak %d over the limit %d: the cgroup did not bound the helper", peak, limit)
	}
}

// A wait-free's timeout bounds the nvidia-smi runs beneath it: with a hung
// nvidia-smi whose own timeout is 60s, a 2s wait through Serve ends well
// before that, with an error naming nvidia-smi and the deadline.
func TestWaitFreeDeadlineBoundsHungSMI(t *testing.T) {
	h := newHost(t, 1)
	h.fake.Fault = "hang"
	h.save()
	cfg := h.cfg
	cfg.SMITimeout = Duration(time.Minute)
	req, _ := json.Marshal(WaitFreeRequest{Config: cfg, Timeout: Duration(2 * time.Second)})
	var out bytes.Buffer
	start := time.Now()
	err := Serve(context.Background(), VerbWaitFree, bytes.NewReader(req), &out)
	took := time.Since(start)
	var e ErrorResponse
	if jerr := json.Unmarshal(out.Bytes(), &e); err == nil || jerr != nil ||
		!strings.Contains(e.Error, h.smi+": cut off by the request's deadline") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, response %s: want the deadline's error naming nvidia-smi", err, out.Bytes())
	}
	// The logical bound: the smi timeout (60s) did not apply, the wait's did.
	if took >= cfg.SMITimeout.D() {
		t.Errorf("took %s: the 60s nvidia-smi timeout applied, not the wait's 2s", took)
	}
	if left := smiRunning(h.smi); len(left) > 0 {
		t.Errorf("hung nvidia-smi still running: %v", left)
	}
}

// A unit request's timeout is shared by the look before and the action;
// the look after still reports the state when the action hung.
func TestUnitTimeoutEndToEnd(t *testing.T) {
	dir := t.TempDir()
	sc := filepath.Join(dir, "systemctl")
	// show answers at once, stop hangs (with a child: the group is killed).
	script := "#!/bin/sh\ncase \"$1\" in\nshow) printf 'LoadState=loaded\\nActiveState=active\\nSubState=running\\nMainPID=0\\nControlGroup=\\nRestart=no\\n';;\n" +
		"stop) sleep 3600 & sleep 3600;;\nesac\n"
	if err := os.WriteFile(sc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	req := UnitRequest{Config: Config{Systemctl: sc, ProcDir: "/proc", DevDir: t.TempDir(), NvidiaSMI: filepath.Join(dir, "absent")},
		Action: UnitStop, Unit: "x", Timeout: Duration(time.Second)}
	b, _ := json.Marshal(req)
	var out bytes.Buffer
	if err := Serve(context.Background(), VerbUnit, bytes.NewReader(b), &out); err != nil {
		t.Fatalf("unit: %v: %s", err, out.Bytes())
	}
	var r UnitResponse
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	// The stop got what the look before left of the 1s, not a 1s of its own.
	if r.OK || r.ActiveState != "active" || !strings.Contains(r.Reason, sc+": cut off by the request's deadline") {
		t.Errorf("hung stop: ok %v state %q reason %q", r.OK, r.ActiveState, r.Reason)
	}
	t.Logf("reason %q, elapsed %s", r.Reason, r.Elapsed.D())
}

// systemctl's output is capped like nvidia-smi's.
func TestSystemctlOutputCapped(t *testing.T) {
	sc := filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(sc, []byte("#!/bin/sh\nexec yes LoadState=loaded\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Unit(context.Background(), UnitRequest{Config: Config{Systemctl: sc, ProcDir: "/proc"}, Action: UnitStatus, Unit: "x"})
	if err == nil || !strings.Contains(err.Error(), "systemctl show: "+sc+" printed more than 16 MiB on stdout") {
		t.Errorf("err %v, want the cap's error", err)
	}
}
