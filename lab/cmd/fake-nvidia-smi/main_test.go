package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labbuild"
	"github.com/gpush/gpush/lab/labgpu"

	"github.com/gpush/gpush/lab/procstat"
)

const fixtureDir = "../../../../shared/fixtures/nvidia-h200"

var fakeBin, holderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fake-smi-test-")
	if err != nil {
		panic(err)
	}
	fakeBin, holderBin = filepath.Join(dir, "fake-nvidia-smi"), filepath.Join(dir, "gpu-holder")
	if b, err := exec.Command("go", "build", "-o", fakeBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build fake-nvidia-smi: %v\n%s", err, b)
		os.Exit(1)
	}
	// The holder the lab runs: its C build where cc is there.
	kind, err := labbuild.TestHolder(context.Background(), holderBin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build gpu-holder: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "fake-nvidia-smi tests: %s gpu-holder\n", kind)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Skipf("fixture %s absent (shared/ must sit beside the checkout): %v", name, err)
	}
	return string(b)
}

// probeLine returns the first line under "== title" in a probe log.
func probeLine(t *testing.T, file, title string, n int) string {
	t.Helper()
	lines := strings.Split(fixture(t, file), "\n")
	for i, l := range lines {
		if l == "== "+title && i+n < len(lines) {
			return lines[i+n]
		}
	}
	t.Fatalf("%s: no section %q", file, title)
	return ""
}

// h200 is a host dir: dev files, nvidia-smi linked in smi/ with its config.
type h200 struct {
	t          testing.TB
	dir, dev   string
	smi, cfgAt string
	cfg        labgpu.Config
}

func newH200(t testing.TB) *h200 {
	dir := t.TempDir()
	h := &h200{t: t, dir: dir, dev: filepath.Join(dir, "dev"), smi: filepath.Join(dir, "smi", "nvidia-smi")}
	h.cfgAt = filepath.Join(dir, "smi", labgpu.ConfigName)
	os.MkdirAll(h.dev, 0o755)
	os.MkdirAll(filepath.Dir(h.smi), 0o755)
	for _, n := range []string{"nvidia0", "nvidiactl", "nvidia-uvm"} {
		os.WriteFile(filepath.Join(h.dev, n), nil, 0o666)
	}
	// A symlink: the config is found beside the path it runs as.
	if err := os.Symlink(fakeBin, h.smi); err != nil {
		t.Fatal(err)
	}
	h.cfg = labgpu.Config{DevDir: h.dev, GPUs: []labgpu.GPU{{Index: 0, UUID: "GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab", Name: "NVIDIA H200", BusID: "00000000:00:06.0", TotalMiB: 143771}}}
	h.save()
	return h
}

func (h *h200) save() {
	if err := h.cfg.Save(h.cfgAt); err != nil {
		h.t.Fatal(err)
	}
}

func (h *h200) run(args ...string) (string, int) {
	h.t.Helper()
	cmd := exec.Command(h.smi, args...)
	cmd.Env = os.Environ()
	for i, e := range cmd.Env {
		if strings.HasPrefix(e, labgpu.ConfigEnv+"=") {
			cmd.Env[i] = labgpu.ConfigEnv + "="
		}
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatal(err)
	}
	return string(out), code
}

const (
	queryGPU  = "--query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total"
	queryApps = "--query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory"
	noUnits   = "--format=csv,noheader,nounits"
)

// start runs a holder as argv0 (found through PATH like `python3 hold.py`)
// and returns the pids of its ready lines.
func (h *h200) start(argv0 string, args ...string) []int {
	h.t.Helper()
	binDir := filepath.Join(h.dir, "bin")
	os.MkdirAll(binDir, 0o755)
	if _, err := os.Stat(filepath.Join(binDir, argv0)); err != nil {
		// A hard link (or copy): /proc/self/exe keeps this name for the child.
		if err := os.Link(holderBin, filepath.Join(binDir, argv0)); err != nil {
			b, _ := os.ReadFile(holderBin)
			os.WriteFile(filepath.Join(binDir, argv0), b, 0o755)
		}
	}
	cmd := exec.Command(argv0, args...)
	cmd.Path = filepath.Join(binDir, argv0)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	want := 1
	for _, a := range args {
		if a == "--child-mem-mib" || a == "--keeper" {
			want = 2
		}
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < want && sc.Scan() {
		if p, ok := labgpu.ReadyPID(sc.Text()); ok {
			pids = append(pids, p)
		}
	}
	h.t.Cleanup(func() {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		cmd.Wait()
	})
	if len(pids) < want {
		h.t.Fatalf("holder %v: no ready lines", args)
	}
	return pids
}

func (h *h200) dv(n string) string { return filepath.Join(h.dev, n) }

// The H200 scenario of the fixtures, replayed: same lines, byte for byte,
// once pids and the venv path are mapped to the captured ones.
func TestMatchesH200Fixtures(t *testing.T) {
	h := newH200(t)
	idle := probeLine(t, "probe.log", "query-gpu (idle)", 1) // index,uuid,name,memory.used,memory.total,pci.bus_id
	if out, code := h.run("--query-gpu=index,uuid,name,memory.used,memory.total,pci.bus_id", noUnits); code != 0 || out != idle+"\n" {
		t.Errorf("idle query-gpu: exit %d\n got %q\nwant %q", code, out, idle+"\n")
	}
	if out, _ := h.run("-L"); out != probeLine(t, "probe.log", "versions", 5)+"\n" {
		t.Errorf("-L: got %q, want %q", out, probeLine(t, "probe.log", "versions", 5))
	}
	withUnits := probeLine(t, "probe2.log", "query with units (no nounits)", 1) + "\n" + probeLine(t, "probe2.log", "query with units (no nounits)", 2) + "\n"
	if out, _ := h.run("--query-gpu=index,memory.used,memory.total", "--format=csv"); out != withUnits {
		t.Errorf("with units: got %q, want %q", out, withUnits)
	}

	// The driver's own 26 MiB shows in memory.used on the busy host.
	h.cfg.GPUs[0].BaselineMiB = 26
	h.save()
	common := []string{"--dev", h.dv("nvidia0"), "--dev", h.dv("nvidiactl"), "--dev", h.dv("nvidia-uvm")}
	p437 := h.start("python3", append(common, "--mem-mib", "10850")...)
	p438 := h.start("python3", append(common, "--mem-mib", "4706", "--ignore-term")...)
	p439 := h.start("python3", append(common, "--mem-mib", "3682", "--child-mem-mib", "6754")...)
	ctl := h.start("python3", "--dev", h.dv("nvidiactl"), "--mem-mib", "999") // only nvidiactl: no memory, not listed
	_ = ctl
	busy := probeLine(t, "probe.log", "query-gpu (busy)", 1)
	if out, _ := h.run("--query-gpu=index,uuid,name,memory.used,memory.total,pci.bus_id", noUnits); out != busy+"\n" {
		t.Errorf("busy query-gpu: got %q, want %q", out, busy+"\n")
	}
	out, code := h.run(queryApps, noUnits)
	if code != 0 {
		t.Fatalf("compute apps: exit %d %s", code, out)
	}
	repl := strings.NewReplacer(
		strconv.Itoa(p437[0])+",", "437,", strconv.Itoa(p438[0])+",", "438,",
		strconv.Itoa(p439[0])+",", "439,", strconv.Itoa(p439[1])+",", "541,",
		filepath.Join(h.dir, "bin")+"/", "/opt/torch/.venv/bin/")
	got := strings.Split(strings.TrimSpace(repl.Replace(out)), "\n")
	want := strings.Split(strings.TrimSpace(fixture(t, "compute-apps.csv")), "\n")
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("compute apps:\n got %q\nwant %q", got, want)
	}
}

func TestReleaseDelay(t *testing.T) {
	h := newH200(t)
	h.cfg.ReleaseDelay = "1h" // long enough to never expire during the test
	h.save()
	pids := h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "100")
	used := func() string {
		out, _ := h.run("--query-gpu=memory.used", noUnits)
		return strings.TrimSpace(out)
	}
	if u := used(); u != "100" {
		t.Fatalf("alive: used %s", u)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	for state(pids[0]) != "gone" && state(pids[0]) != "Z" {
		time.Sleep(5 * time.Millisecond)
	}
	if u := used(); u != "100" {
		t.Errorf("dead within release_delay: used %s, want 100", u)
	}
	if out, _ := h.run(queryApps, noUnits); strings.TrimSpace(out) != "" {
		t.Errorf("a dead holder is listed: %q", out)
	}
	h.cfg.ReleaseDelay = "1ns"
	h.save()
	if u := used(); u != "0" {
		t.Errorf("after release_delay: used %s, want 0", u)
	}
}

func TestFaults(t *testing.T) {
	h := newH200(t)
	h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "100")
	for fault, want := range map[string]string{labgpu.FaultNA: "[N/A]", labgpu.FaultNotSupported: "[Not Supported]"} {
		h.cfg.Fault = fault
		h.save()
		out, code := h.run(queryGPU, noUnits)
		if code != 0 || out != "0, GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab, NVIDIA H200, 00000000:00:06.0, "+want+", "+want+"\n" {
			t.Errorf("%s: %d %q", fault, code, out)
		}
		if out, _ := h.run(queryApps, noUnits); !strings.HasSuffix(strings.TrimSpace(out), ", "+want) {
			t.Errorf("%s compute apps: %q", fault, out)
		}
	}
	h.cfg.Fault = labgpu.FaultFail
	h.save()
	if out, code := h.run(queryGPU, noUnits); code != 9 || !strings.HasPrefix(out, "NVIDIA-SMI has failed") {
		t.Errorf("fail: %d %q", code, out)
	}
	h.cfg.Fault, h.cfg.FaultOn = labgpu.FaultHang, []string{"compute-apps"}
	h.save()
	if _, code := h.run(queryGPU, noUnits); code != 0 {
		t.Errorf("hang limited to compute-apps: query-gpu exit %d", code)
	}
	cmd := exec.Command(h.smi, queryApps, noUnits)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
		t.Error("hang: nvidia-smi answered")
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Kill()
	<-exited
	h.cfg.Fault, h.cfg.FaultOn, h.cfg.GPUs = "", nil, nil
	h.save()
	if out, code := h.run(queryGPU, noUnits); code != 6 || out != "No devices were found\n" {
		t.Errorf("no GPUs: %d %q", code, out)
	}
	h.cfg.GPUs = []labgpu.GPU{{Index: 0}}
	h.save()
	if out, code := h.run("--query-gpu=index,fan.speed", noUnits); code != 2 || !strings.Contains(out, `"fan.speed" is not a valid field`) {
		t.Errorf("bad field: %d %q", code, out)
	}
	if _, code := h.run("--query-gpu=index"); code != 2 {
		t.Errorf("no --format: exit %d, want 2", code)
	}
}

func TestConfigFromEnv(t *testing.T) {
	h := newH200(t)
	other := filepath.Join(t.TempDir(), "other.json")
	c := h.cfg
	c.GPUs = append(c.GPUs, labgpu.GPU{Index: 1, UUID: "GPU-2", Name: "NVIDIA H200", BusID: "00000000:00:07.0", TotalMiB: 1})
	if err := c.Save(other); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(h.smi, "-L")
	cmd.Env = append(os.Environ(), labgpu.ConfigEnv+"="+other)
	out, err := cmd.Output()
	if err != nil || bytes.Count(out, []byte("\n")) != 2 {
		t.Errorf("env config: %v %q", err, out)
	}
}

// NVML lists only processes with a context: a monitor holding the device
// file is no compute app. A dead parent whose memory a --keeper child keeps
// stays listed under its own pid, its memory still counted; a holder whose
// main thread exited is listed too (its threads keep the context).
func TestComputeAppsOwnersGhostsZombies(t *testing.T) {
	h := newH200(t)
	mon := h.start("python3", "--dev", h.dv("nvidia0"), "--dev", h.dv("nvidiactl"))
	pk := h.start("python3", "--dev", h.dv("nvidia0"), "--dev", h.dv("nvidia-uvm"), "--mem-mib", "8802", "--keeper")
	zl := h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "100", "--zombie-leader")
	for state(zl[0]) != "Z" {
		time.Sleep(5 * time.Millisecond) // bounded by the test's deadline
	}
	apps := func() map[int]string {
		out, code := h.run(queryApps, noUnits)
		if code != 0 {
			t.Fatalf("compute apps: exit %d %s", code, out)
		}
		m := map[int]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Split(l, ", ")
			pid, _ := strconv.Atoi(f[0])
			m[pid] = filepath.Base(f[1]) + " " + f[4]
		}
		return m
	}
	used := func() string {
		out, _ := h.run("--query-gpu=memory.used", noUnits)
		return strings.TrimSpace(out)
	}
	got := apps()
	if len(got) != 2 || got[pk[0]] != "python3 8802" || got[zl[0]] != "python3 100" {
		t.Errorf("apps %v (monitor %d, parent %d, keeper %d, zombie leader %d)", got, mon[0], pk[0], pk[1], zl[0])
	}
	if u := used(); u != "8902" {
		t.Errorf("used %s, want 8902", u)
	}
	syscall.Kill(pk[0], syscall.SIGKILL)
	for state(pk[0]) != "gone" && state(pk[0]) != "Z" {
		time.Sleep(5 * time.Millisecond)
	}
	got = apps()
	if len(got) != 2 || got[pk[0]] != "python3 8802" || got[pk[1]] != "" {
		t.Errorf("after the parent died: apps %v (parent %d, keeper %d)", got, pk[0], pk[1])
	}
	if u := used(); u != "8902" {
		t.Errorf("after the parent died: used %s, want 8902 (the keeper keeps it)", u)
	}
	syscall.Kill(pk[1], syscall.SIGKILL)
	for state(pk[1]) != "gone" && state(pk[1]) != "Z" {
		time.Sleep(5 * time.Millisecond)
	}
	if got = apps(); len(got) != 1 || used() != "100" {
		t.Errorf("keeper gone too: apps %v used %s", got, used())
	}
}

func state(pid int) string {
	st, err := procstat.Read(pid)
	if err != nil {
		return "gone"
	}
	return string(st.State)
}

// The flood prints the very row the idle H200 answers, over and over, on
// the stream asked for, and exactly FAKE_NVIDIA_SMI_FLOOD_BYTES of it.
func TestFlood(t *testing.T) {
	h := newH200(t)
	row, code := h.run(queryGPU, noUnits)
	if code != 0 {
		t.Fatalf("idle query-gpu: exit %d %q", code, row)
	}
	const n = 1<<20 + 7 // not a whole number of rows or blocks
	for _, stream := range []string{"stdout", "stderr"} {
		cmd := exec.Command(h.smi, queryGPU, noUnits)
		cmd.Env = append(os.Environ(), "FAKE_NVIDIA_SMI_FLOOD="+stream, "FAKE_NVIDIA_SMI_FLOOD_BYTES="+strconv.Itoa(n))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s flood: %v", stream, err)
		}
		got, other := out.Bytes(), errb.Bytes()
		if stream == "stderr" {
			got, other = other, got
		}
		if len(got) != n || len(other) != 0 {
			t.Errorf("%s flood: %d bytes there, %d on the other stream; want %d and 0", stream, len(got), len(other), n)
			continue
		}
		whole := got[:bytes.LastIndexByte(got, '\n')+1]
		if want := strings.Repeat(row, len(whole)/len(row)); string(whole) != want {
			t.Errorf("%s flood: rows differ from the idle answer %q", stream, row)
		}
	}
	// Without a byte count it does not end: it is still printing after
	// more output than any real nvidia-smi gives (64 MiB), then dies of a
	// closed pipe.
	cmd := exec.Command(h.smi, queryGPU, noUnits)
	cmd.Env = append(os.Environ(), "FAKE_NVIDIA_SMI_FLOOD=stdout")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read, err := io.CopyN(io.Discard, pipe, 64<<20)
	pipe.Close()
	werr := cmd.Wait()
	if err != nil || read != 64<<20 || werr == nil {
		t.Errorf("endless flood: read %d (%v), exit %v; want 64 MiB and death by the closed pipe", read, err, werr)
	}
}

// FAKE_NVIDIA_SMI_HANG=child: one row, then the tool and a child of its
// process group hang, both holding the output open.
func TestHangWithChild(t *testing.T) {
	h := newH200(t)
	cmd := exec.Command(h.smi, queryGPU, noUnits)
	cmd.Env = append(os.Environ(), "FAKE_NVIDIA_SMI_HANG=child")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	defer func() {
		syscall.Kill(-pgid, syscall.SIGKILL) // the group this test started
		cmd.Wait()
	}()
	line, err := bufio.NewReader(pipe).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "0, GPU-d7f963c5") {
		t.Fatalf("first row %q: %v", line, err)
	}
	// The child is in the same group, still alive, with the pipe open.
	members := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			members++
		}
	}
	if members != 2 {
		t.Errorf("process group %d has %d members, want the tool and its child", pgid, members)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the hung tool exited: %v", err)
	}
}

// -lms prints the current state every period until killed: one line per
// GPU per period, the header once, a holder started meanwhile seen in the
// lines after it.
func TestLoopMS(t *testing.T) {
	for _, format := range []string{noUnits, "--format=csv"} {
		h := newH200(t) // a holder of its own
		cmd := exec.Command(h.smi, "-lms", "10", "--query-gpu=index,memory.used", format)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A bound, not a measure: a fake that never shows the holder is
		// killed, and the lines say what it printed.
		bound := time.AfterFunc(time.Minute, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		sc := bufio.NewScanner(out)
		var lines []string
		var started bool
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "0, ") && strings.Count(strings.Join(lines, "\n"), "0, 0") == 3 && !started {
				h.start("python3", "--dev", h.dv("nvidia0"), "--mem-mib", "700")
				started = true
			}
			if strings.HasSuffix(sc.Text(), "700") || strings.HasSuffix(sc.Text(), "700 MiB") {
				break
			}
		}
		bound.Stop()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		body := lines
		if format == "--format=csv" {
			if len(lines) == 0 || lines[0] != "index, memory.used [MiB]" {
				t.Fatalf("%s: first line %q, want the header", format, lines)
			}
			body = lines[1:]
		}
		if len(body) < 4 {
			t.Fatalf("%s: lines %q: want readings before and after the holder", format, lines)
		}
		for i, l := range body {
			if strings.HasPrefix(l, "index") {
				t.Errorf("%s: header repeated at line %d: %q", format, i, lines)
			}
			if i < 3 && l != "0, 0" && l != "0, 0 MiB" {
				t.Errorf("%s: idle reading %d %q", format, i, l)
			}
		}
		if last := body[len(body)-1]; last != "0, 700" && last != "0, 700 MiB" {
			t.Errorf("%s: the holder is never seen: %q", format, lines)
		}
	}
	if out, code := newH200(t).run("-lms", "0", queryGPU, noUnits); code != exitUsage || !strings.Contains(out, "invalid value") {
		t.Errorf("-lms 0: exit %d %q", code, out)
	}
}
