package helper

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seedFixture adds a fixture file as a seed when present.
func seedFixture(f *testing.F, name string) {
	if b, err := os.ReadFile(filepath.Join(fixtureDir, name)); err == nil {
		f.Add(b)
	}
}

func FuzzParseQueryGPU(f *testing.F) {
	f.Add([]byte("0, GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab, NVIDIA H200, 00000000:00:06.0, 26018, 143771\n"))
	f.Add([]byte("0, GPU-x, NVIDIA H200, 00000000:00:06.0, [N/A], [Not Supported]\n1, GPU-y, A, B, 0 MiB, 5 MiB\n"))
	f.Add([]byte("No devices were found\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := parseQueryGPU(b)
		if err != nil {
			return
		}
		for _, g := range gpus {
			if g.Index < 0 || g.MemUsedMiB < -1 || g.MemTotalMiB < -1 || g.Minor != -1 {
				t.Fatalf("out of range: %+v", g)
			}
			// What was parsed prints back to a line that parses the same.
			if strings.ContainsAny(g.UUID+g.BusID, ",\n") || strings.Contains(g.Name, "\n") {
				t.Fatalf("field spans a separator: %+v", g)
			}
			line := fmt.Sprintf("%d, %s, %s, %s, %s, %s", g.Index, g.UUID, g.Name, g.BusID, memText(g.MemUsedMiB, g.MemUnread), memText(g.MemTotalMiB, totalUnread(g)))
			again, err := parseQueryGPU([]byte(line))
			if err != nil || len(again) != 1 || again[0] != g {
				// Leading/trailing spaces in a field are trimmed, so only
				// compare when the fields were already trimmed.
				if g.UUID == strings.TrimSpace(g.UUID) && g.Name == strings.TrimSpace(g.Name) && g.BusID == strings.TrimSpace(g.BusID) && g.UUID != "" && g.BusID != "" {
					t.Fatalf("round trip %q: %+v %v, want %+v", line, again, err, g)
				}
			}
		}
	})
}

func memText(v int64, unread string) string {
	if v < 0 {
		return unread
	}
	return fmt.Sprint(v)
}

// totalUnread is a placeholder for memory.total that parses back to g:
// MemUnread is memory.used's when that was unread.
func totalUnread(g GPU) string {
	if g.MemUsedMiB < 0 {
		return "[N/A]"
	}
	return g.MemUnread
}

func FuzzParseComputeApps(f *testing.F) {
	seedFixture(f, "compute-apps.csv")
	f.Add([]byte("12, a, b, c, GPU-x, 00000000:00:06.0, [N/A]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		apps, err := parseComputeApps(b)
		if err != nil {
			return
		}
		for _, a := range apps {
			if a.PID < 0 || a.MemMiB < -1 || strings.Contains(a.GPUUUID, ",") || strings.Contains(a.BusID, ",") {
				t.Fatalf("out of range: %+v", a)
			}
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("437 (python3) S 415 414 414 0 -1 4194560 90908 0 154 0 415 54 0 0 20 0 18 0 2602 29034573824 156796 18446744073709551615"))
	f.Add([]byte("99 (a) b (c)) R 1 2 3 0 -1 2097216 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0"))
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err != nil {
			return
		}
		if st.PID < 0 {
			t.Fatalf("pid %d", st.PID)
		}
		// Rebuilding the line with the parsed comm gives the same fields,
		// whatever parentheses and spaces comm holds.
		line := fmt.Sprintf("%d (%s) %s %d %d %d 0 -1 %d 0 0 0 0 0 0 0 0 20 0 1 0 %d 0", st.PID, st.Comm, st.State, st.PPID, st.PGID, st.SID, st.Flags, st.StartTime)
		again, err := parseStat([]byte(line))
		if err != nil || again != st {
			t.Fatalf("round trip %q: %+v %v, want %+v", line, again, err, st)
		}
	})
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("0::/process_api/ae8071e8ab4b0bf187188cc92bde5bf7\n"))
	f.Add([]byte("9:name=systemd:/\n4:memory:/process_api/e99c\n0::/\n"))
	f.Add([]byte("0::/system.slice/docker-4f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0.scope\n"))
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2f0c7e5c_8e2a_4e73_8f0d_94d2e3b3d8a1.slice/cri-containerd-" + ctrID + ".scope\n"))
	f.Add([]byte("1:name=systemd:/kubepods/pod2f0c7e5c-8e2a-4e73-8f0d-94d2e3b3d8a1/" + ctrID + "\n"))
	f.Add([]byte("0::/system.slice/llm.service/libpod-payload-" + ctrID + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := parseCgroup(b)
		if c.Unit != "" && !strings.HasSuffix(c.Unit, ".service") && !strings.HasSuffix(c.Unit, ".scope") {
			t.Fatalf("unit %q", c.Unit)
		}
		if c.Unit != "" && !strings.Contains(c.Path, c.Unit) {
			t.Fatalf("unit %q not in path %q", c.Unit, c.Path)
		}
		if c.Container != "" && (c.Ref.ID != "" && len(c.Container) != 64 || !strings.Contains(c.Path, c.Container)) {
			t.Fatalf("container %q path %q", c.Container, c.Path)
		}
		// A container's own scope is never shown as the unit.
		if scopeContainer.MatchString(c.Unit) || c.Container != "" && c.Ref.ID != "" && strings.Contains(c.Unit, c.Ref.ID) {
			t.Fatalf("unit %q is container %q's scope", c.Unit, c.Container)
		}
		if c.Ref.PodUID != "" && (len(c.Ref.PodUID) != 36 || c.Ref.QoS == "") {
			t.Fatalf("pod uid %q qos %q", c.Ref.PodUID, c.Ref.QoS)
		}
	})
}

func FuzzParseDriverInfo(f *testing.F) {
	seedFixture(f, "proc-driver-nvidia-gpu-information.txt")
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := parseDriverInfo(b)
		if err != nil {
			return
		}
		if g.Minor < 0 || g.BusID == "" || normBusID(g.BusID) != g.BusID {
			t.Fatalf("%+v", g)
		}
	})
}

func FuzzNormalizeUnit(f *testing.F) {
	for _, s := range []string{"sglang", "vllm@gpu0", "a.socket", "-x", "a b", `x\x2dy.device`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := NormalizeUnit(s)
		if err != nil {
			return
		}
		if len(n) > 255 || strings.HasPrefix(n, "-") || strings.ContainsAny(n, " /;$`'\"\n\x00") {
			t.Fatalf("%q -> %q", s, n)
		}
		if again, err := NormalizeUnit(n); err != nil || again != n {
			t.Fatalf("not idempotent: %q -> %q -> %q %v", s, n, again, err)
		}
	})
}

// FuzzAssess checks the judge's promises on arbitrary readings: a GPU is
// free only at or under its threshold, with its memory known from
// nvidia-smi, and with no owner or suspicious holder of it; each holder
// lands in exactly one list of each GPU it holds.
func FuzzAssess(f *testing.F) {
	f.Add(int64(0), int64(64), uint8(0), uint8(0), int64(0), uint8(3))
	f.Add(int64(-1), int64(64), uint8(1), uint8(1), int64(4096), uint8(7))
	f.Add(int64(8802), int64(0), uint8(2), uint8(2), int64(-1), uint8(0))
	f.Fuzz(func(t *testing.T, used, th int64, source, flags uint8, mem int64, gpuSel uint8) {
		if th < 0 {
			th = -th
		}
		src := []string{SourceSMI, SourceDriver, SourceDevice, ""}[int(source)%4]
		gpus := []GPU{{Index: 0, MemUsedMiB: used, Source: src}, {Index: 3, MemUsedMiB: 0, Source: SourceSMI}}
		h := Holder{Identity: Identity{PID: 100}, Comm: "w", MemMiB: mem}
		h.Owner = flags&1 != 0
		h.Protected = flags&2 != 0
		if flags&4 != 0 {
			h.Protected, h.Suspicious = true, "protected name x, but it has nvidia-uvm open"
		}
		switch gpuSel % 4 {
		case 0:
			h.GPUs = []int{0}
		case 1:
			h.GPUs = []int{0, 3}
		case 2:
			h.GPUs = []int{}
		case 3:
			h.GPUs = []int{9} // a GPU the reading does not have
		}
		if flags&8 != 0 {
			h.MemByGPU = map[int]int64{0: mem}
		}
		var ghosts []Ghost
		if flags&16 != 0 {
			ghosts = []Ghost{{PID: 5, GPU: 0, MemMiB: mem, HeldBy: []int{100}}}
		}
		out := Assess(gpus, []Holder{h}, ghosts, map[int]int64{0: th})
		if len(out) != 2 || out[0].Index != 0 || out[1].Index != 3 {
			t.Fatalf("statuses %+v", out)
		}
		st := out[0]
		if st.State == GPUFree {
			if used < 0 || used > th || src != SourceSMI && src != "" {
				t.Fatalf("free with used %d threshold %d source %q: %+v", used, th, src, st)
			}
			if len(st.Owners)+len(st.Suspicious) > 0 {
				t.Fatalf("free with owners: %+v", st)
			}
		} else if st.Reason == "" {
			t.Fatalf("state %s without a reason", st.State)
		}
		for _, s := range out {
			n := len(s.Owners) + len(s.Others) + len(s.Protected) + len(s.Suspicious)
			if n > 1 {
				t.Fatalf("holder listed %d times on GPU %d: %+v", n, s.Index, s)
			}
			if h.Suspicious != "" && n == 1 && len(s.Suspicious) != 1 {
				t.Fatalf("suspicious holder not listed as such: %+v", s)
			}
		}
	})
}
