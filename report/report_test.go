package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/inventory"
)

func clock() func() time.Time {
	t := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(100 * time.Millisecond); return t }
}

func join(h []string) string { return "{" + strings.Join(h, "+") + "}" }

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		statuses []string
		want     int
	}{
		{nil, 0},
		{[]string{"ok", "ok"}, 0},
		{[]string{"ok", "failed"}, 2},
		{[]string{"unreachable", "ok"}, 4},
		{[]string{"failed", "unreachable", "failed"}, 4},
		{[]string{"weird"}, 2},
	} {
		var rs []Result
		for i, s := range c.statuses {
			rs = append(rs, Result{Host: string(rune('a' + i)), Status: s})
		}
		if got := ExitCode(rs); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.statuses, got, c.want)
		}
	}
}

func TestStreamingAndRecapFolding(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, Fold: join, Now: clock()})
	p.Event(Event{Host: "gpu01", Level: "info", Message: "stopped sglang.service"})
	p.Event(Event{Host: "gpu02", Level: "debug", Message: "hidden without -v"})
	p.Event(Event{Host: "gpu02", Level: "warn", Message: "slow"})
	freed := Stats{HaveMem: true, GPUs: 2, GPUsFreed: 2, MemBeforeMiB: 20480, MemAfterMiB: 0}
	rs := []Result{
		{Host: "gpu10", Status: StatusOK, Stats: freed, Elapsed: 1200 * time.Millisecond},
		{Host: "gpu01", Status: StatusOK, Stats: freed, Elapsed: 1100 * time.Millisecond},
		{Host: "gpu02", Status: StatusOK, Stats: freed, Elapsed: 1300 * time.Millisecond},
		{Host: "gpu03", Status: StatusFailed, Error: "GPU 1: new-holder pid 42 (python3)", Elapsed: time.Second},
		{Host: "gpu04", Status: StatusUnreachable, Error: "dial 127.0.0.1:1: connection refused"},
		{Host: "gpu05", Status: StatusOK, Stats: Stats{HaveMem: true, GPUs: 8, MemBeforeMiB: 512, MemAfterMiB: 512}},
	}
	for _, r := range rs {
		p.Done(r)
	}
	p.Finish(rs)
	s := out.String()
	for _, want := range []string{
		"gpu01 | INFO stopped sglang.service\n",
		"gpu02 | WARN slow\n",
		"RECAP ok=4 failed=1 unreachable=1",
		"8 GPUs          512 MiB used",
		"{gpu01+gpu02+gpu10}  ok",
		"freed 2/2 GPUs  20480 -> 0 MiB  1.1s-1.3s",
		"gpu03", "failed", "GPU 1: new-holder pid 42 (python3)",
		"dial 127.0.0.1:1: connection refused",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "hidden") || strings.Contains(s, "\x1b[") {
		t.Errorf("debug line or colour in plain output:\n%s", s)
	}
}

func TestGatherFoldsEqualLines(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, Gather: true, Fold: join, Now: clock()})
	for _, h := range []string{"gpu01", "gpu02", "gpu03"} {
		p.Event(Event{Host: h, Level: "info", Message: "freed 2 GPUs"})
	}
	p.Event(Event{Host: "gpu02", Level: "error", Message: "GPU 1 not freed"})
	if out.Len() != 0 {
		t.Fatalf("gather mode printed before the end: %q", out.String())
	}
	p.Finish(nil)
	s := out.String()
	if !strings.Contains(s, "{gpu01+gpu02+gpu03} (3) | INFO freed 2 GPUs\n{gpu02} | ERROR GPU 1 not freed\n") {
		t.Errorf("not gathered:\n%s", s)
	}
}

func TestFleetTable(t *testing.T) {
	row := func(gpu float64, step string) map[string]any {
		return map[string]any{"gpu": gpu, "step": step, "freed": true, "reason": ""}
	}
	rs := []Result{
		{Host: "gpu02", Status: StatusOK, Value: []any{row(0, "kill"), row(1, "already-free")}},
		{Host: "gpu01", Status: StatusOK, Value: []any{row(0, "kill"), row(1, "service-stop")}},
		{Host: "gpu03", Status: StatusFailed, Error: "x"},
		{Host: "gpu04", Status: StatusOK, Value: map[string]any{"a": 1.0}},
	}
	tb := FleetTable(rs, join)
	if tb == nil {
		t.Fatal("no table")
	}
	if got := strings.Join(tb.Columns, ","); got != "host,gpu,step,freed,reason" {
		t.Errorf("columns %s", got)
	}
	var got []string
	for _, r := range tb.Rows {
		got = append(got, strings.Join(r, "|"))
	}
	want := []string{"{gpu01+gpu02}|0|kill|true|", "{gpu01}|1|service-stop|true|", "{gpu02}|1|already-free|true|"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b bytes.Buffer
	tb.Write(&b)
	if !strings.HasPrefix(b.String(), "HOST           GPU  STEP          FREED  REASON\n{gpu01+gpu02}  0    kill          true\n") {
		t.Errorf("table:\n%s", b.String())
	}
	if FleetTable([]Result{{Host: "a", Value: []any{"x", "y"}}}, nil) != nil {
		t.Error("a list of strings is not a table")
	}
	if FleetTable([]Result{{Host: "a", Value: []any{map[string]any{"n": map[string]any{}}}}}, nil) != nil {
		t.Error("nested records are not a table")
	}
}

func TestJSONLines(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, JSON: true, Fold: join, Now: clock()})
	p.Event(Event{Host: "gpu01", Level: "info", Message: "hello"})
	rs := []Result{
		{Host: "gpu01", Status: StatusOK, Value: []any{map[string]any{"gpu": 0.0}}, Elapsed: 1500 * time.Millisecond,
			Stats: Stats{HaveMem: true, GPUs: 1, GPUsFreed: 1, MemBeforeMiB: 5, MemAfterMiB: 1}},
		{Host: "gpu02", Status: StatusUnreachable, Error: "refused"},
	}
	for _, r := range rs {
		p.Done(r)
	}
	p.Finish(rs)
	sc := bufio.NewScanner(&out)
	var objs []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		objs = append(objs, m)
	}
	if len(objs) != 2 {
		t.Fatalf("want 2 JSON lines, got %d", len(objs))
	}
	if objs[0]["host"] != "gpu01" || objs[0]["elapsed_s"] != 1.5 || objs[0]["stats"].(map[string]any)["gpus_freed"] != 1.0 {
		t.Errorf("first object %v", objs[0])
	}
	if l := objs[0]["log"].([]any); len(l) != 1 || l[0].(map[string]any)["message"] != "hello" {
		t.Errorf("log %v", objs[0]["log"])
	}
	if objs[1]["status"] != "unreachable" || objs[1]["error"] != "refused" || objs[1]["stats"] != nil {
		t.Errorf("second object %v", objs[1])
	}
}

func TestColourAndProgress(t *testing.T) {
	var out, errb bytes.Buffer
	p := New(Options{Out: &out, Err: &errb, Color: true, Progress: true, Total: 2, Now: clock()})
	p.Event(Event{Host: "h1", Level: "error", Message: "bad"})
	p.Done(Result{Host: "h1", Status: StatusFailed})
	p.Finish([]Result{{Host: "h1", Status: StatusFailed}})
	if !strings.Contains(out.String(), "\x1b[31mERROR\x1b[0m") {
		t.Errorf("no colour: %q", out.String())
	}
	if !strings.Contains(errb.String(), "[1/2] ok=0 failed=1") || !strings.HasSuffix(errb.String(), "\r\x1b[K") {
		t.Errorf("progress: %q", errb.String())
	}
}

func TestUseColorHonoursNoColor(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if UseColor(f) {
		t.Error("a file is not a terminal")
	}
	t.Setenv("NO_COLOR", "")
	if UseColor(os.Stdout) {
		t.Error("NO_COLOR set (even empty) must disable colour")
	}
}

func TestNaturalLessAndSummary(t *testing.T) {
	if !naturalLess("gpu2", "gpu10") || naturalLess("gpu10", "gpu2") || !naturalLess("a", "b") {
		t.Error("natural order")
	}
	if s := summary(map[string]any{"b": 2.0, "a": "x"}); s != "a=x b=2" {
		t.Errorf("summary %q", s)
	}
	if s := summary([]any{map[string]any{"a": 1.0}}); s != "1 rows" {
		t.Errorf("summary %q", s)
	}
	if s := summary(map[string]any{"n": []any{1.0}}); s != `{"n":[1]}` {
		t.Errorf("summary %q", s)
	}
}

func TestIsRecords(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{[]any{map[string]any{"gpu": 0.0, "used_mib": 12.0}}, true},
		{[]any{map[string]any{"gpu": 0.0}, map[string]any{"gpu": 1.0, "holders": nil}}, true},
		{[]any{}, false},
		{[]any{map[string]any{}}, false},
		{[]any{map[string]any{"gpus": []any{0.0}}}, false},
		{[]any{"a", "b"}, false},
		{map[string]any{"gpu": 0.0}, false},
		{nil, false},
	} {
		if got := IsRecords(c.v); got != c.want {
			t.Errorf("IsRecords(%#v) = %v, want %v", c.v, got, c.want)
		}
		// The REPL shows records through FleetTable: the two must agree.
		if tbl := FleetTable([]Result{{Host: "h", Status: StatusOK, Value: c.v}}, nil); (tbl != nil) != c.want {
			t.Errorf("FleetTable(%#v) table = %v, IsRecords says %v", c.v, tbl != nil, c.want)
		}
	}
}

// The recap folds through inventory's node sets, so hosts that vary on
// several numbers (a node and its IB ports) fold as nodeset -f folds them.
func TestRecapFoldsSeveralAxes(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, Fold: inventory.FoldNodeSet, Now: clock()})
	var rs []Result
	for _, h := range []string{"node2-ib1", "node1-ib0", "node3-ib0", "node1-ib1", "node2-ib0"} {
		rs = append(rs, Result{Host: h, Status: StatusOK})
	}
	rs = append(rs, Result{Host: "node3-ib1", Status: StatusUnreachable, Error: "connection refused"})
	for _, r := range rs {
		p.Done(r)
	}
	p.Finish(rs)
	s := out.String()
	for _, want := range []string{"node[1-2]-ib[0-1],node3-ib0  ok", "node3-ib1"} {
		if !strings.Contains(s, want) {
			t.Errorf("recap lacks %q:\n%s", want, s)
		}
	}
}
