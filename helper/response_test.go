package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
)

// manyHolders is a snapshot of a real holder, the holder repeated n times
// under distinct pids as a host with n holders would list them.
func manyHolders(t *testing.T, n int) *Snapshot {
	t.Helper()
	freeAfter(t)
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--dev", h.d("nvidia-uvm"), "--mem-mib", "100")
	s := snapshot(t, h.cfg)
	x := findHolder(s, p.pid)
	if x == nil {
		t.Fatalf("holder %d not in the snapshot", p.pid)
	}
	one := *x
	s.Holders = make([]Holder, n)
	s.Status[0].Owners = make([]int, n)
	for i := range s.Holders {
		s.Holders[i] = one
		s.Holders[i].PID = 100000 + i
		s.Status[0].Owners[i] = 100000 + i
	}
	return s
}

// freeAfter collects the test's big garbage when it ends, so that its GC
// work does not land in the timing of the tests that follow.
func freeAfter(t *testing.T) {
	t.Cleanup(debug.FreeOSMemory)
}

// 100k holders (the most a host lists; pid_max here is 32768, so they are
// one real holder repeated): the response stays under MaxResponse, keeps
// every identity, and says what was cut.
func TestResponse100kHolders(t *testing.T) {
	const n = 100000
	s := manyHolders(t, n)
	one, _ := json.Marshal(s.Holders[0])
	// A realistic command line: a launcher with its options.
	argv := []string{"/opt/conda/envs/train/bin/python3", "-u", "-m", "torch.distributed.run", "--nproc_per_node=8",
		"--rdzv_endpoint=10.0.0.1:29500", "train.py", "--config", "configs/llama-70b-sft.yaml", "--output_dir", "/scratch/runs/2026-12-01/sft-llama-70b"}
	for i := range s.Holders {
		s.Holders[i].Cmdline = argv
	}
	long, _ := json.Marshal(s.Holders[0])
	var out bytes.Buffer
	if err := writeBounded(&out, s); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d holders: a holder is %d bytes as the snapshot found it, %d with a %d-byte command line; %d bytes written",
		n, len(one), len(long), len(strings.Join(argv, " ")), out.Len())
	if out.Len() >= MaxResponse {
		t.Fatalf("%d bytes written, limit %d", out.Len(), MaxResponse)
	}
	// Only what is checked is decoded: a 50 MB decode is slow under -race.
	var got struct {
		Holders []struct {
			PID       int      `json:"pid"`
			StartTime uint64   `json:"start_time"`
			Cmdline   []string `json:"cmdline"`
		} `json:"holders"`
		Status   []struct{ Owners []int } `json:"status"`
		Warnings []string                 `json:"warnings"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Holders) != n || got.Holders[n-1].PID != 100000+n-1 || got.Holders[0].StartTime != s.Holders[0].StartTime || len(got.Status[0].Owners) != n {
		t.Fatalf("holders %d, status owners %d: identities lost", len(got.Holders), len(got.Status[0].Owners))
	}
	if n*len(long) >= MaxResponse {
		// Trimmed: the note says so and the command lines end in the marker.
		last := got.Warnings[len(got.Warnings)-1]
		if !strings.Contains(last, "over 60 MiB: command lines cut") {
			t.Errorf("warnings %q: no note of the trim", got.Warnings)
		}
		if c := got.Holders[0].Cmdline; !strings.HasSuffix(c[len(c)-1], "more bytes]") || c[0] != argv[0] {
			t.Errorf("cut command line %q", c)
		}
	}
}

// A few processes with huge command lines (6 MiB is what Linux allows):
// cut before encoding, the rest of each holder intact.
func TestResponseHugeCommandLines(t *testing.T) {
	s := manyHolders(t, 20)
	huge := strings.Repeat("A", 6<<20)
	for i := range s.Holders {
		s.Holders[i].Cmdline = []string{"/usr/bin/python3", huge}
	}
	var out bytes.Buffer
	if err := writeBounded(&out, s); err != nil {
		t.Fatal(err)
	}
	var got Snapshot
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	c := got.Holders[19].Cmdline
	if out.Len() > 1<<20 || len(c) != 3 || c[0] != "/usr/bin/python3" || c[2] != fmt.Sprintf("...[%d more bytes]", 16+6<<20-1024) {
		t.Errorf("%d bytes written, last command line %d args ending %.60q", out.Len(), len(c), c[len(c)-1])
	}
	if got.Holders[19].PID != s.Holders[19].PID || got.Holders[19].MemMiB != 100 || !got.Holders[19].Owner {
		t.Errorf("holder %+v lost more than its command line", got.Holders[19])
	}
}

// What cannot be cut (GPUs a hostile nvidia-smi lists by the hundred
// thousand) fails the request with the sizes, never an oversized write.
func TestResponseTooBigIsAnError(t *testing.T) {
	freeAfter(t)
	s := &Snapshot{Version: Version}
	name := strings.Repeat("NVIDIA H200 ", 100000) // 1.2 MB of GPU name
	for i := 0; i < 60; i++ {
		s.GPUs = append(s.GPUs, GPU{Index: i, UUID: "GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab", Name: name, BusID: "00000000:00:06.0", Minor: i, MemTotalMiB: 143771, Source: SourceSMI})
	}
	var out bytes.Buffer
	err := writeBounded(&out, s)
	if err == nil || out.Len() != 0 || !strings.Contains(err.Error(), "over the helper's limit of 60 MiB") || !strings.Contains(err.Error(), "60 GPUs") {
		t.Errorf("err %v, %d bytes written", err, out.Len())
	}
}

// An error quoting what a tool printed is bounded too.
func TestErrorResponseBounded(t *testing.T) {
	_, err := parseQueryGPU([]byte(strings.Repeat("x", 1<<20)))
	if err == nil || len(err.Error()) > 1024 {
		t.Errorf("parse error of %d bytes", len(err.Error()))
	}
	var out bytes.Buffer
	req := `{"action":"status","unit":"` + strings.Repeat("x;", 400<<10) + `"}`
	err = Serve(context.Background(), VerbUnit, strings.NewReader(req), &out)
	var e ErrorResponse
	if jerr := json.Unmarshal(out.Bytes(), &e); err == nil || jerr != nil || out.Len() > maxErrorText+1024 || !strings.HasSuffix(e.Error, "more bytes]") {
		t.Errorf("error response of %d bytes (%v): %.200s", out.Len(), jerr, out.Bytes())
	}
}

func TestThinTimeline(t *testing.T) {
	var ss []Sample
	for i := 0; i < 1000; i++ {
		ss = append(ss, Sample{T: Duration(i)})
	}
	got := thinTimeline(ss, 10)
	if len(got) != 10 || got[0].T != 0 || got[9].T != 999 || got[1].T != 111 {
		t.Errorf("thinned %v", got)
	}
	if got := thinTimeline(ss[:5], 10); len(got) != 5 {
		t.Errorf("short timeline changed: %v", got)
	}
}

// cutArgv keeps a prefix of the joined arguments of exactly max bytes
// when it cuts, and the marker counts the rest.
func FuzzCutArgv(f *testing.F) {
	f.Add("/usr/bin/python3\x00train.py\x00--config\x00a.yaml", 12)
	f.Add("", 0)
	f.Add("a\x00\x00b", 1)
	f.Fuzz(func(t *testing.T, joined string, max int) {
		if max < 0 || max > 1<<16 {
			return
		}
		argv := strings.Split(joined, "\x00")
		got, cut := cutArgv(argv, max)
		total := len(joined) - (len(argv) - 1)
		if !cut {
			if total > max || len(got) != len(argv) {
				t.Fatalf("not cut: %q (%d bytes, max %d) -> %q", argv, total, max, got)
			}
			return
		}
		kept := strings.Join(got[:len(got)-1], "")
		if total <= max || len(kept) != max || !strings.HasPrefix(strings.Join(argv, ""), kept) ||
			got[len(got)-1] != fmt.Sprintf("...[%d more bytes]", total-max) {
			t.Fatalf("cut %q (%d bytes, max %d) -> %q", argv, total, max, got)
		}
	})
}
