package helper

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureDir holds real outputs of an NVIDIA H200 host; CI lays shared/
// beside the checkout.
const fixtureDir = "../../shared/fixtures/nvidia-h200"

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		if os.IsNotExist(err) {
			t.Skipf("fixture %s absent (shared/fixtures/nvidia-h200 must sit beside the checkout): %v", name, err)
		}
		t.Fatalf("fixture %s: %v", name, err)
	}
	return b
}

// probeSection returns the lines of probe.log under "== title".
func probeSection(t testing.TB, file, title string) []string {
	t.Helper()
	var out []string
	in := false
	for _, l := range strings.Split(string(fixture(t, file)), "\n") {
		if strings.HasPrefix(l, "== ") {
			in = strings.TrimPrefix(l, "== ") == title
			continue
		}
		if in {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no section %q", file, title)
	}
	return out
}

// h200QueryGPU turns the probe's query-gpu lines (captured in the order
// index,uuid,name,memory.used,memory.total,pci.bus_id) into the column
// order the helper asks for, keeping the driver's text byte for byte.
func h200QueryGPU(t *testing.T, section string) []byte {
	line := strings.TrimSpace(probeSection(t, "probe.log", section)[0])
	f := strings.Split(line, ", ")
	if len(f) != 6 {
		t.Fatalf("probe %s line %q: %d columns", section, line, len(f))
	}
	return []byte(strings.Join([]string{f[0], f[1], f[2], f[5], f[3], f[4]}, ", ") + "\n")
}

func TestParseQueryGPUFixture(t *testing.T) {
	const uuid = "GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab"
	for _, tc := range []struct {
		section string
		used    int64
	}{{"query-gpu (idle)", 0}, {"query-gpu (busy)", 26018}} {
		gpus, err := parseQueryGPU(h200QueryGPU(t, tc.section))
		if err != nil {
			t.Fatalf("%s: %v", tc.section, err)
		}
		want := GPU{Index: 0, UUID: uuid, Name: "NVIDIA H200", BusID: "00000000:00:06.0", Minor: -1, MemUsedMiB: tc.used, MemTotalMiB: 143771}
		if len(gpus) != 1 || gpus[0].UUID != want.UUID || gpus[0].Name != want.Name || gpus[0].BusID != want.BusID ||
			gpus[0].MemUsedMiB != want.MemUsedMiB || gpus[0].MemTotalMiB != want.MemTotalMiB || gpus[0].Minor != -1 {
			t.Errorf("%s: got %+v, want %+v", tc.section, gpus, want)
		}
	}
	// The busy table printed by plain nvidia-smi agrees with the CSV.
	if !strings.Contains(string(fixture(t, "nvidia-smi-busy.txt")), "26018MiB / 143771MiB") {
		t.Error("busy table does not show 26018MiB / 143771MiB")
	}
}

func TestParseQueryGPUVariants(t *testing.T) {
	for _, tc := range []struct {
		name, in    string
		used, total int64
		n           int
		err         bool
		unread      string
	}{
		{"units kept", "0, GPU-x, NVIDIA H200, 00000000:00:06.0, 0 MiB, 143771 MiB", 0, 143771, 1, false, ""},
		{"N/A", "0, GPU-x, NVIDIA H200, 00000000:00:06.0, [N/A], [N/A]", -1, -1, 1, false, "[N/A]"},
		{"not supported", "3, GPU-x, NVIDIA H200, 00000000:00:06.0, [Not Supported], 143771", -1, 143771, 1, false, "[Not Supported]"},
		{"total not supported", "3, GPU-x, NVIDIA H200, 00000000:00:06.0, 5, [Not Supported]", 5, -1, 1, false, "[Not Supported]"},
		{"bare N/A", "3, GPU-x, NVIDIA H200, 00000000:00:06.0, N/A, 10", -1, 10, 1, false, "[N/A]"},
		{"comma in name", "0, GPU-x, NVIDIA H200, rev 2, 00000000:00:06.0, 5, 10", 5, 10, 1, false, ""},
		{"no devices", "No devices were found\n", 0, 0, 0, false, ""},
		{"empty", "", 0, 0, 0, false, ""},
		{"short", "0, GPU-x, 5", 0, 0, 0, true, ""},
		{"bad index", "x, GPU-x, NVIDIA H200, 00000000:00:06.0, 1, 2", 0, 0, 0, true, ""},
		{"negative mem", "0, GPU-x, NVIDIA H200, 00000000:00:06.0, -5, 2", 0, 0, 0, true, ""},
		{"garbage mem", "0, GPU-x, NVIDIA H200, 00000000:00:06.0, lots, 2", 0, 0, 0, true, ""},
	} {
		gpus, err := parseQueryGPU([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("%s: err %v, want error %v", tc.name, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if len(gpus) != tc.n {
			t.Errorf("%s: %d GPUs, want %d", tc.name, len(gpus), tc.n)
			continue
		}
		if tc.n == 1 && gpus[0].MemUnread != tc.unread {
			t.Errorf("%s: unread %q, want %q", tc.name, gpus[0].MemUnread, tc.unread)
		}
		if tc.n == 1 && (gpus[0].MemUsedMiB != tc.used || gpus[0].MemTotalMiB != tc.total) {
			t.Errorf("%s: used/total %d/%d, want %d/%d", tc.name, gpus[0].MemUsedMiB, gpus[0].MemTotalMiB, tc.used, tc.total)
		}
	}
}

func TestParseComputeAppsFixture(t *testing.T) {
	apps, err := parseComputeApps(fixture(t, "compute-apps.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := []computeApp{
		{439, "python3", "GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab", "00000000:00:06.0", 3682, ""},
		{438, "python3", "GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab", "00000000:00:06.0", 4706, ""},
		{437, "python3", "GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab", "00000000:00:06.0", 10850, ""},
		{541, "/opt/torch/.venv/bin/python3", "GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab", "00000000:00:06.0", 6754, ""},
	}
	if len(apps) != len(want) {
		t.Fatalf("got %d apps, want %d: %+v", len(apps), len(want), apps)
	}
	for i := range want {
		if apps[i] != want[i] {
			t.Errorf("app %d: got %+v, want %+v", i, apps[i], want[i])
		}
	}
	for _, tc := range []struct {
		in  string
		mem int64
		err bool
	}{
		{"12, my, odd, name, GPU-x, 00000000:00:06.0, 5", 5, false},
		{"12, python3, GPU-x, 00000000:00:06.0, [N/A]", -1, false},
		{"12, python3, GPU-x, 00000000:00:06.0, 5 MiB", 5, false},
		{"-3, python3, GPU-x, 00000000:00:06.0, 5", 0, true},
		{"12, python3, GPU-x", 0, true},
	} {
		apps, err := parseComputeApps([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("%q: err %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err == nil && apps[0].MemMiB != tc.mem {
			t.Errorf("%q: mem %d, want %d", tc.in, apps[0].MemMiB, tc.mem)
		}
	}
	if a, _ := parseComputeApps([]byte("12, my, odd, name, GPU-x, 00000000:00:06.0, 5")); a[0].Name != "my, odd, name" {
		t.Errorf("name with commas: %q", a[0].Name)
	}
}

func TestParseDriverInfoFixture(t *testing.T) {
	g, err := parseDriverInfo(fixture(t, "proc-driver-nvidia-gpu-information.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Minor != 0 || g.BusID != "0000:00:06.0" || g.Model != "NVIDIA H200" || g.UUID != "GPU-0a838be3-c66c-e0d7-940d-890d58e1c6b0" {
		t.Errorf("got %+v", g)
	}
	// The driver's bus location and nvidia-smi's bus id name the same GPU.
	if normBusID("00000000:00:06.0") != g.BusID {
		t.Errorf("normBusID(nvidia-smi bus id) = %q, want %q", normBusID("00000000:00:06.0"), g.BusID)
	}
	if _, err := parseDriverInfo([]byte("Model: x\nBus Location: 0000:00:06.0\n")); err == nil {
		t.Error("no Device Minor: want an error")
	}
	if _, err := parseDriverInfo([]byte("Device Minor: x\nBus Location: 0000:00:06.0\n")); err == nil {
		t.Error("bad Device Minor: want an error")
	}
}

func TestMapGPUs(t *testing.T) {
	drv, err := parseDriverInfo(fixture(t, "proc-driver-nvidia-gpu-information.txt"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := parseQueryGPU(h200QueryGPU(t, "query-gpu (busy)"))
	if err != nil {
		t.Fatal(err)
	}
	// Pretend the driver says minor 3 for this bus, so a mapping that
	// ignored the driver (N == index) would be visibly wrong.
	drv.Minor = 3
	gpus, m, warns := mapGPUs(gpus, []driverGPU{drv}, true, true)
	if len(warns) != 0 || gpus[0].Minor != 3 {
		t.Fatalf("minor %d warns %v", gpus[0].Minor, warns)
	}
	if i, ok := m.index(3); !ok || i != 0 {
		t.Errorf("minor 3 -> %d %v, want GPU 0", i, ok)
	}
	if _, ok := m.index(0); ok {
		t.Error("minor 0 mapped although the driver names only minor 3")
	}
	// No driver information: N == index, with a warning saying so.
	gpus2, _ := parseQueryGPU(h200QueryGPU(t, "query-gpu (busy)"))
	_, m2, warns := mapGPUs(gpus2, nil, false, true)
	if !m2.assumed || len(warns) != 1 || !strings.Contains(warns[0], "assuming") {
		t.Errorf("fallback: assumed %v warns %v", m2.assumed, warns)
	}
}

func TestParseStat(t *testing.T) {
	var line string
	for _, l := range probeSection(t, "probe.log", "stat/cgroup/status P1") {
		if strings.HasPrefix(l, "437 (") {
			line = l
		}
	}
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{PID: 437, Comm: "python3", State: "S", PPID: 415, PGID: 414, SID: 414, Flags: 4194560, StartTime: 2602}
	if st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
	// comm with spaces and parentheses: only the last ')' ends it.
	rest := " R 1 2 3 0 -1 2097216 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0"
	st, err = parseStat([]byte("99 (a) b (c))" + rest))
	if err != nil || st.Comm != "a) b (c)" || st.StartTime != 777 || st.PPID != 1 || st.Flags&pfKthread == 0 {
		t.Errorf("odd comm: %+v %v", st, err)
	}
	for _, bad := range []string{"", "99 noparen", "99 (x) S 1 2", "x (y)" + rest, "99 (x) S a 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestParseStatusFixture(t *testing.T) {
	st := parseStatus([]byte(strings.Join(probeSection(t, "probe.log", "stat/cgroup/status P1"), "\n")))
	if st.UID != 0 || len(st.NSpid) != 1 || st.NSpid[0] != 437 {
		t.Errorf("got %+v", st)
	}
	st = parseStatus([]byte("Uid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t17\n"))
	if st.UID != 1000 || len(st.NSpid) != 2 || st.NSpid[1] != 17 {
		t.Errorf("namespaced: %+v", st)
	}
}

func TestParseCgroup(t *testing.T) {
	const id = "4f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	h200 := ""
	for _, l := range probeSection(t, "probe.log", "stat/cgroup/status P1") {
		if strings.HasPrefix(l, "0::") {
			h200 = l
		}
	}
	for _, tc := range []struct{ in, path, unit, ctr string }{
		{h200, "/process_api/ae8071e8ab4b0bf187188cc92bde5bf7", "", ""},
		{"0::/system.slice/sglang.service\n", "/system.slice/sglang.service", "sglang.service", ""},
		{"0::/user.slice/user-1000.slice/user@1000.service/app.slice/train.service\n", "/user.slice/user-1000.slice/user@1000.service/app.slice/train.service", "train.service", ""},
		{"0::/user.slice/user-1000.slice/session-3.scope\n", "/user.slice/user-1000.slice/session-3.scope", "session-3.scope", ""},
		{"0::/system.slice/docker-" + id + ".scope\n", "/system.slice/docker-" + id + ".scope", "", id},
		{"12:pids:/docker/" + id + "\n1:name=systemd:/docker/" + id + "\n0::/\n", "/docker/" + id, "", id},
		{"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b.slice/cri-containerd-" + id + ".scope\n", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b.slice/cri-containerd-" + id + ".scope", "", id},
		{"0::/kubepods/burstable/pod1a2b/" + id + "\n", "/kubepods/burstable/pod1a2b/" + id, "", id},
		{"0::/machine.slice/libpod-" + id + ".scope/container\n", "/machine.slice/libpod-" + id + ".scope/container", "", id},
		{"9:name=systemd:/\n4:memory:/process_api/e99c\n0::/\n", "/process_api/e99c", "", ""},
		{"0::/\n", "/", "", ""},
		{"", "", "", ""},
	} {
		got := parseCgroup([]byte(tc.in))
		if got.Path != tc.path || got.Unit != tc.unit || got.Container != tc.ctr {
			t.Errorf("%q: got %+v, want path %q unit %q container %q", tc.in, got, tc.path, tc.unit, tc.ctr)
		}
	}
}

func TestParsePasswd(t *testing.T) {
	m := parsePasswd([]byte("root:x:0:0:root:/root:/bin/bash\n# comment\nbad line\nalice:x:1000:1000::/home/alice:/bin/sh\ndup:x:1000:1000::/:/bin/sh\n"))
	if m[0] != "root" || m[1000] != "alice" || len(m) != 2 {
		t.Errorf("got %v", m)
	}
}

func TestMatchProtected(t *testing.T) {
	for _, tc := range []struct {
		comm  string
		argv  []string
		extra []string
		want  string
	}{
		{"nvidia-persiste", []string{"/usr/bin/nvidia-persistenced", "--verbose"}, nil, "nvidia-persistenced"},
		{"nvidia-persiste", nil, nil, "nvidia-persistenced"}, // comm truncated to 15 bytes, no cmdline
		{"dcgm-exporter", []string{"dcgm-exporter"}, nil, "dcgm*"},
		{"Xorg", []string{"/usr/lib/xorg/Xorg", ":0"}, nil, "Xorg"},
		{"python3", []string{"python3", "train.py"}, nil, ""},
		{"python3", []string{"python3"}, []string{"py*"}, "py*"},
		{"Xor", nil, nil, ""},
	} {
		if got := matchProtected(tc.comm, tc.argv, tc.extra); got != tc.want {
			t.Errorf("%s %v %v: got %q, want %q", tc.comm, tc.argv, tc.extra, got, tc.want)
		}
	}
}

func TestNormalizeUnit(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{"sglang", "sglang.service", false},
		{"sglang.service", "sglang.service", false},
		{"docker.socket", "docker.socket", false},
		{"vllm@gpu0", "vllm@gpu0.service", false},
		{"vllm@gpu0.service", "vllm@gpu0.service", false},
		{"foo.bar", "foo.bar.service", false},
		{`dev-nvidia\x2d0.device`, `dev-nvidia\x2d0.device`, false},
		{"a:b_c.scope", "a:b_c.scope", false},
		{"", "", true},
		{"-foo", "", true},
		{"foo bar", "", true},
		{"foo;rm -rf /", "", true},
		{"foo/../bar", "", true},
		{"$(reboot)", "", true},
		{"ünit", "", true},
		{"@x.service", "", true},
		{"vllm@.service", "", true},
		{"a@b@c", "", true},
		{".service", "", true},
		{strings.Repeat("a", 247), strings.Repeat("a", 247) + ".service", false},
		{strings.Repeat("a", 248), "", true},
	} {
		got, err := NormalizeUnit(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("NormalizeUnit(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{"": "TERM", "term": "TERM", "SIGKILL": "KILL", "9": "KILL", "HUP": "HUP"} {
		if got, _, err := parseSignal(in); err != nil || got != want {
			t.Errorf("parseSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"STOP", "99", "TERM; reboot"} {
		if _, _, err := parseSignal(bad); err == nil {
			t.Errorf("parseSignal(%q): want an error", bad)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	if err := d.UnmarshalJSON([]byte(`"150ms"`)); err != nil || d.D().Milliseconds() != 150 {
		t.Errorf("150ms: %v %v", d, err)
	}
	if err := d.UnmarshalJSON([]byte(`1.5`)); err != nil || d.D().Milliseconds() != 1500 {
		t.Errorf("1.5: %v %v", d, err)
	}
	if err := d.UnmarshalJSON([]byte(`"soon"`)); err == nil {
		t.Error("soon: want an error")
	}
}

// Without nvidia-smi the driver's GPUs are numbered in bus order, and one
// unreadable information file costs only that GPU, with a warning.
func TestReadGPUsFromDriverOnly(t *testing.T) {
	proc := t.TempDir()
	info := map[string]string{
		// Directory order is not bus order: the bus decides the index.
		"0000:0a:00.0": "Model: NVIDIA H200\nDevice Minor: 5\nBus Location: 0000:0a:00.0\nGPU UUID: GPU-b\n",
		"0000:05:00.0": "Model: NVIDIA H200\nDevice Minor: 2\nBus Location: 0000:05:00.0\nGPU UUID: GPU-a\n",
		"0000:01:00.0": "Model: NVIDIA H200\nBus Location: 0000:01:00.0\n", // no Device Minor, read first
	}
	for bus, text := range info {
		dir := filepath.Join(proc, "driver/nvidia/gpus", bus)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "information"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &scanner{proc: procFS{dir: proc}}
	st, err := s.readGPUs(context.Background(), nil, errNoSMI)
	if err != nil {
		t.Fatal(err)
	}
	if st.smiOK || len(st.gpus) != 2 || st.gpus[0].UUID != "GPU-a" || st.gpus[0].Minor != 2 || st.gpus[1].UUID != "GPU-b" || st.gpus[1].Minor != 5 {
		t.Fatalf("gpus %+v", st.gpus)
	}
	for minor, want := range map[int]int{2: 0, 5: 1} {
		if i, ok := st.mapping.index(minor); !ok || i != want {
			t.Errorf("minor %d -> %d %v, want GPU %d", minor, i, ok, want)
		}
	}
	if w := strings.Join(st.warns, "\n"); !strings.Contains(w, "0000:01:00.0/information: no Device Minor") {
		t.Errorf("warnings %q: want the broken information file named", w)
	}
}

// The H200's compute apps merged into /proc holders: memory per GPU by
// uuid, owners marked, and, seen from the host's PID namespace, a listed
// pid that is gone is a ghost kept by the unlisted holder of its GPU.
func TestMergeAppsFixture(t *testing.T) {
	apps, err := parseComputeApps(fixture(t, "compute-apps.csv"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := parseQueryGPU(h200QueryGPU(t, "query-gpu (busy)"))
	if err != nil {
		t.Fatal(err)
	}
	mk := func(pid int, devs ...string) Holder {
		return Holder{Identity: Identity{PID: pid}, Comm: "python3", GPUs: []int{0}, Devices: devs}
	}
	// 541 died; 600, a forked child nobody lists, holds the device; 700 is
	// a monitor.
	holders := []Holder{mk(437, "nvidia-uvm", "nvidia0"), mk(438, "nvidia0"), mk(439, "nvidia0"), mk(600, "nvidia-uvm", "nvidia0"), mk(700, "nvidia0", "nvidiactl")}
	exists := func(pid int) bool { return pid != 541 }
	ghosts, warns := mergeApps(holders, gpus, apps, true, exists)
	if len(warns) != 0 || len(ghosts) != 1 {
		t.Fatalf("ghosts %+v warns %v", ghosts, warns)
	}
	if g := ghosts[0]; g.PID != 541 || g.GPU != 0 || g.MemMiB != 6754 || g.Name != "/opt/torch/.venv/bin/python3" || fmt.Sprint(g.HeldBy) != "[600 700]" {
		t.Errorf("ghost %+v", g)
	}
	for i, want := range []int64{10850, 4706, 3682, 0, 0} {
		h := holders[i]
		// Owner here is what the listing says; nvidia-uvm is read by the scan.
		if h.MemMiB != want || h.Owner != (want > 0) {
			t.Errorf("pid %d: mem %d owner %v", h.PID, h.MemMiB, h.Owner)
		}
		if want > 0 && h.MemByGPU[0] != want {
			t.Errorf("pid %d: mem by GPU %v", h.PID, h.MemByGPU)
		}
	}
	st := Assess(gpus, holders, ghosts, nil)[0]
	if st.State != GPUHeld || !strings.Contains(st.Reason, "pid 541 (python3) is gone but 6754 MiB is still charged to it; its device files are still open in pid 600 (python3), pid 700 (python3)") {
		t.Errorf("status %+v", st)
	}
	// From another PID namespace the same listing proves nothing.
	ghosts, warns = mergeApps(holders, gpus, apps, false, exists)
	if len(ghosts) != 0 || len(warns) != 1 || !strings.Contains(warns[0], "pid 541") || !strings.Contains(warns[0], "another PID namespace?") {
		t.Errorf("ghosts %+v warns %v", ghosts, warns)
	}
}

// CUDA opens every visible GPU's device file: a worker listed on GPU 0 only
// owns GPU 0, and on GPU 1 it is one of the others (second stage).
func TestAssessOwnerPerGPU(t *testing.T) {
	gpus := []GPU{{Index: 0, MemUsedMiB: 8000, Source: SourceSMI}, {Index: 1, MemUsedMiB: 0, Source: SourceSMI}, {Index: 2, MemUsedMiB: 900, Source: SourceSMI}}
	w := Holder{Identity: Identity{PID: 10}, Comm: "python3", GPUs: []int{0, 1, 2}, Owner: true, MemMiB: 8000, MemByGPU: map[int]int64{0: 8000}}
	uvmOnly := Holder{Identity: Identity{PID: 11}, Comm: "python3", GPUs: []int{2}, Owner: true} // no listing: owner of what it holds
	out := Assess(gpus, []Holder{w, uvmOnly}, nil, nil)
	if out[0].State != GPUHeld || fmt.Sprint(out[0].Owners) != "[10]" || !strings.Contains(out[0].Reason, "pid 10 (python3) 8000 MiB") {
		t.Errorf("GPU 0: %+v", out[0])
	}
	if out[1].State != GPUFree || len(out[1].Owners) != 0 || fmt.Sprint(out[1].Others) != "[10]" {
		t.Errorf("GPU 1: %+v", out[1])
	}
	if out[2].State != GPUHeld || fmt.Sprint(out[2].Owners) != "[11]" || fmt.Sprint(out[2].Others) != "[10]" {
		t.Errorf("GPU 2: %+v", out[2])
	}
}

// [Not Supported] and [N/A] stay apart from the parser to the reasons and
// warnings: one never reads otherwise, the other may on the next poll.
func TestUnreadMemoryPlaceholdersStayApart(t *testing.T) {
	for unread, want := range map[string]string{
		SMINotSupported: "nvidia-smi reports memory [Not Supported] for this GPU",
		SMINotAvailable: "nvidia-smi reports memory [N/A] (no value now",
		"":              "nvidia-smi gave no reading",
	} {
		g := GPU{Index: 0, UUID: "GPU-x", Minor: 0, MemUsedMiB: -1, MemTotalMiB: 143771, MemUnread: unread, Source: SourceSMI}
		st := Assess([]GPU{g}, nil, nil, nil)
		if len(st) != 1 || st[0].State != GPUUnknown || !strings.Contains(st[0].Reason, want) {
			t.Errorf("%q: %+v, want %q", unread, st, want)
		}
	}
	gpus, _ := parseQueryGPU([]byte("0, GPU-x, NVIDIA H200, 00000000:00:06.0, 0, 143771\n"))
	apps, err := parseComputeApps([]byte("12, python3, GPU-y, 00000000:00:07.0, [Not Supported]\n13, python3, GPU-y, 00000000:00:07.0, [N/A]\n"))
	if err != nil || apps[0].MemUnread != SMINotSupported || apps[1].MemUnread != SMINotAvailable {
		t.Fatalf("apps %+v %v", apps, err)
	}
	_, warns := mergeApps(nil, gpus, apps, true, func(int) bool { return false })
	all := strings.Join(warns, "\n")
	if !strings.Contains(all, "pid 12 (python3, memory [Not Supported])") || !strings.Contains(all, "pid 13 (python3, memory [N/A])") ||
		strings.Contains(all, "-1 MiB") {
		t.Errorf("warnings %q", warns)
	}
	// The real H200's CSV prints numbers for both memory columns (its
	// -q -x prints N/A for fields it has no value for, never for memory).
	for _, sec := range []string{"query-gpu (idle)", "query-gpu (busy)"} {
		g, err := parseQueryGPU(h200QueryGPU(t, sec))
		if err != nil || len(g) != 1 || g[0].MemUnread != "" {
			t.Errorf("%s: %+v %v", sec, g, err)
		}
	}
}

// Every --query-gpu field of the real H200 (driver 580.159.04), nounits,
// serial zeroed: which fields print a placeholder, and which one. Fields
// the model has no value for print [N/A] there (fan.speed of a passive
// module, retired_pages of HBM), none [Not Supported]; memory reads as
// numbers. Each placeholder reads as unread and keeps its text.
func TestH200PlaceholdersAsPrinted(t *testing.T) {
	b, err := os.ReadFile("testdata/h200-query-gpu-all.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	head, vals := strings.Split(lines[0], ", "), strings.Split(lines[1], ", ")
	if len(head) != len(vals) {
		t.Fatalf("%d columns, %d values", len(head), len(vals))
	}
	by := map[string]string{}
	for i, k := range head {
		by[k] = vals[i]
		if strings.HasPrefix(vals[i], "[") {
			if v, err := parseMiB(vals[i]); err != nil || v != -1 || unreadText(vals[i]) != vals[i] {
				t.Errorf("%s = %s: %d %v %q", k, vals[i], v, err, unreadText(vals[i]))
			}
		}
	}
	for k, want := range map[string]string{"fan.speed [%]": "[N/A]", "retired_pages.single_bit_ecc.count": "[N/A]",
		"memory.used [MiB]": "0", "memory.total [MiB]": "143771"} {
		if by[k] != want {
			t.Errorf("%s = %q, want %q", k, by[k], want)
		}
	}
}
