package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
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
		{[]string{"ok", "skipped"}, 0},
		{[]string{"skipped", "failed"}, 2},
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
		"RECAP ok=4 changed=0 failed=1 unreachable=1",
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
	p := New(Options{Out: &out, FoldNumbers: true, Fold: join, Now: clock()})
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

func tableLines(tb *Table) []string {
	var got []string
	for _, r := range tb.Rows {
		got = append(got, strings.Join(r, "|"))
	}
	return got
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
	// Hosts whose rows differ keep all their rows, together: no row of
	// one host is folded into another's.
	want := []string{"{gpu01}|0|kill|true|", "{gpu01}|1|service-stop|true|", "{gpu02}|0|kill|true|", "{gpu02}|1|already-free|true|"}
	if got := tableLines(tb); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b bytes.Buffer
	tb.Write(&b)
	if !strings.HasPrefix(b.String(), "HOST     GPU  STEP          FREED  REASON\n{gpu01}  0    kill          true\n") {
		t.Errorf("table:\n%s", b.String())
	}
	if FleetTable([]Result{{Host: "a", Value: []any{"x", "y"}}}, nil) != nil {
		t.Error("a list of strings is not a table")
	}
	// A record's own host column is not the table's.
	tb = FleetTable([]Result{{Host: "a", Status: StatusOK, Value: []any{map[string]any{"host": "b", "gpu": 0.0}}}}, nil)
	if strings.Join(tb.Columns, ",") != "host,gpu,row.host" {
		t.Errorf("columns %v", tb.Columns)
	}
	// Nested values are cells of compact JSON, not a reason to drop the rows.
	tb = FleetTable([]Result{{Host: "a", Value: []any{map[string]any{"pid": 7.0, "gpus": []any{0.0, 2.0}, "mem_by_gpu": map[string]any{"0": 5.0}}}}}, nil)
	if tb == nil || strings.Join(tableLines(tb), "") != `a|7|[0,2]|{"0":5}` {
		t.Errorf("nested cells: %+v", tb)
	}
}

// A host returning {{a=1},{a=1},{a=2}} shows 3 rows.
func TestFleetTableNeverDropsARow(t *testing.T) {
	v := []any{map[string]any{"a": 1.0}, map[string]any{"a": 1.0}, map[string]any{"a": 2.0}}
	tb := FleetTable([]Result{{Host: "h1", Status: StatusOK, Value: v}}, nil)
	if got := strings.Join(tableLines(tb), ","); got != "h1|1,h1|1,h1|2" {
		t.Errorf("rows %s", got)
	}
	if len(tb.Notes) != 0 {
		t.Errorf("nothing folded, yet notes %q", tb.Notes)
	}
}

func TestFleetTableFoldsHostsWithTheSameRows(t *testing.T) {
	rows := func(used float64) []any {
		return []any{map[string]any{"gpu": 0.0, "used_mib": 0.0}, map[string]any{"gpu": 1.0, "used_mib": used}}
	}
	var rs []Result
	for _, h := range []string{"gpu3", "gpu1", "gpu2", "gpu10"} {
		rs = append(rs, Result{Host: h, Status: StatusOK, Value: rows(0)})
	}
	rs = append(rs, Result{Host: "gpu4", Status: StatusOK, Value: rows(512)})
	tb := FleetTable(rs, join)
	want := []string{"{gpu1+gpu2+gpu3+gpu10}|4|0|0", "{gpu1+gpu2+gpu3+gpu10}|4|1|0", "{gpu4}|1|0|0", "{gpu4}|1|1|512"}
	if got := tableLines(tb); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(tb.Columns, ",") != "host,#,gpu,used_mib" {
		t.Errorf("columns %v", tb.Columns)
	}
	if len(tb.Notes) != 1 || tb.Notes[0] != "10 rows of 5 hosts shown as 4: hosts with the same rows are one group (#: its hosts)" {
		t.Errorf("notes %q", tb.Notes)
	}
	var b bytes.Buffer
	tb.Write(&b)
	if !strings.HasSuffix(b.String(), "(#: its hosts)\n") || !strings.HasPrefix(b.String(), "HOST                    #  GPU  USED_MIB\n") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestFleetTableKeepsRowsOfFailedAndSkippedHosts(t *testing.T) {
	rec := func(gpu float64, step string) map[string]any { return map[string]any{"gpu": gpu, "step": step} }
	rs := []Result{
		{Host: "a1", Status: StatusOK, Value: []any{rec(0, "stage 1")}},
		// Recorded rows, then the failure: they survive, marked failed.
		{Host: "a2", Status: StatusFailed, Error: "GPU 1 not freed", Rows: []any{rec(0, "stage 1"), rec(1, "not-freed")}},
		{Host: "a3", Status: StatusSkipped, Error: "busy", Rows: []any{rec(0, "busy")}},
		// Recorded rows come before the returned ones.
		{Host: "a4", Status: StatusOK, Rows: []any{rec(0, "first")}, Value: []any{rec(1, "second")}},
	}
	tb := FleetTable(rs, nil)
	want := []string{"a1|ok|0|stage 1", "a2|failed|0|stage 1", "a2|failed|1|not-freed", "a3|skipped|0|busy",
		"a4|ok|0|first", "a4|ok|1|second"}
	if got := tableLines(tb); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(tb.Columns, ",") != "host,status,gpu,step" {
		t.Errorf("columns %v", tb.Columns)
	}
}

func TestFleetTableColumnsChosenByTheScript(t *testing.T) {
	rec := map[string]any{"gpu": 0.0, "state": "free", "zeta": "z", "alpha": "a", "reason": "r"}
	for _, c := range []struct {
		cols []string
		want string
	}{
		{nil, "host,gpu,state,alpha,zeta,reason"},
		{[]string{"reason", "gpu"}, "host,reason,gpu"},
		{[]string{"zeta", "..."}, "host,zeta,gpu,state,alpha,reason"},
		// A column no row has is still shown: the script asked for it.
		{[]string{"gpu", "missing"}, "host,gpu,missing"},
	} {
		tb := FleetTable([]Result{{Host: "h", Status: StatusOK, Value: []any{rec}, Columns: c.cols}}, nil)
		if got := strings.Join(tb.Columns, ","); got != c.want {
			t.Errorf("columns %q: got %s, want %s", c.cols, got, c.want)
		}
	}
}

func TestFleetTableCellsOfSeveralTypesStayApart(t *testing.T) {
	v := []any{
		map[string]any{"v": 1.0}, map[string]any{"v": "1"}, map[string]any{"v": true}, map[string]any{"v": "true"},
		map[string]any{"v": ""}, map[string]any{"w": 0.0}, map[string]any{"v": "text"}, map[string]any{"v": 1.5},
	}
	tb := FleetTable([]Result{{Host: "h", Status: StatusOK, Value: v}}, nil)
	var got []string
	for _, r := range tb.Rows {
		got = append(got, r[1])
	}
	want := []string{"1", `"1"`, "true", `"true"`, `""`, "", "text", "1.5"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("cells %q, want %q", got, want)
	}
	// A column of strings only shows them as they are.
	tb = FleetTable([]Result{{Host: "h", Status: StatusOK, Value: []any{map[string]any{"v": "1"}, map[string]any{"v": ""}}}}, nil)
	if got := strings.Join(tableLines(tb), ","); got != "h|1,h|" {
		t.Errorf("string column %s", got)
	}
}

func jsonLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	sc := bufio.NewScanner(b)
	var objs []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		objs = append(objs, m)
	}
	return objs
}

func TestJSONLines(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, JSON: true, Fold: join, Now: clock()})
	p.Event(Event{Host: "gpu01", Level: "info", Message: "hello"})
	rs := []Result{
		{Host: "gpu01", Status: StatusOK, Value: []any{map[string]any{"gpu": 0.0}}, Elapsed: 1500 * time.Millisecond,
			Stats: Stats{HaveMem: true, GPUs: 1, GPUsFreed: 1, MemBeforeMiB: 5, MemAfterMiB: 1, Killed: 2}},
		{Host: "gpu02", Status: StatusUnreachable, Error: "refused"},
		{Host: "gpu03", Status: StatusSkipped, Error: "busy", Rows: []any{map[string]any{"gpu": 0.0}}, Columns: []string{"gpu"}},
	}
	// A host's object is out as soon as it is done, before the others.
	p.Done(rs[0])
	if objs := jsonLines(t, bytes.NewBuffer(out.Bytes())); len(objs) != 1 || objs[0]["type"] != "host" || objs[0]["host"] != "gpu01" {
		t.Fatalf("after the first host: %v", objs)
	}
	p.Done(rs[1])
	// gpu03 never reached Done (a second Ctrl-C): Finish writes it.
	if code := p.Finish(rs); code != ExitUnreachable {
		t.Errorf("exit %d", code)
	}
	objs := jsonLines(t, &out)
	if len(objs) != 4 {
		t.Fatalf("want 4 JSON lines, got %d", len(objs))
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
	if objs[2]["status"] != "skipped" || len(objs[2]["rows"].([]any)) != 1 || objs[2]["columns"].([]any)[0] != "gpu" {
		t.Errorf("third object %v", objs[2])
	}
	sum := objs[3]
	counts, _ := sum["counts"].(map[string]any)
	totals, _ := sum["totals"].(map[string]any)
	if sum["type"] != "summary" || sum["hosts"] != 3.0 || sum["exit_code"] != 4.0 || sum["interrupted"] != false ||
		counts["ok"] != 1.0 || counts["unreachable"] != 1.0 || counts["skipped"] != 1.0 || counts["failed"] != 0.0 ||
		totals["killed"] != 2.0 || totals["rows"] != 2.0 || totals["mem_before_mib"] != 5.0 {
		t.Errorf("summary %v", sum)
	}
	if _, ok := sum["elapsed_s"].(float64); !ok {
		t.Errorf("summary elapsed %v", sum["elapsed_s"])
	}
}

func TestJSONSummaryOfAnInterruptedRun(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, JSON: true, Now: clock()})
	rs := []Result{{Host: "a", Status: StatusOK}, {Host: "b", Status: StatusFailed, Error: "interrupted"}}
	p.Interrupted()
	if code := p.Finish(rs); code != ExitInterrupted {
		t.Errorf("exit %d", code)
	}
	objs := jsonLines(t, &out)
	if s := objs[len(objs)-1]; s["exit_code"] != 99.0 || s["interrupted"] != true {
		t.Errorf("summary %v", s)
	}
	p = New(Options{Out: &out, JSON: true, Now: clock()})
	p.Quit()
	if code := p.Finish(rs); code != ExitQuit {
		t.Errorf("quit: exit %d", code)
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
		{[]any{map[string]any{"gpus": []any{0.0}}}, true},
		{[]any{map[string]any{"gpu": 0.0}, "x"}, false},
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

// However rows fold, none is lost: each group's rows times its N add up to
// every row of every host, and a host's rows keep their order.
func FuzzFleetTableKeepsEveryRow(f *testing.F) {
	f.Add([]byte("aab|ab|aab|c"))
	f.Add([]byte("x||x|xx"))
	f.Fuzz(func(t *testing.T, spec []byte) {
		var rs []Result
		total := 0
		for i, part := range strings.Split(string(spec), "|") {
			var rows []any
			for _, c := range part {
				rows = append(rows, map[string]any{"v": string(c)})
			}
			total += len(rows)
			st := StatusOK
			if i%3 == 2 {
				st = StatusFailed
			}
			rs = append(rs, Result{Host: fmt.Sprintf("h%d", i), Status: st, Rows: rows})
		}
		tb := FleetTable(rs, nil)
		if tb == nil {
			if total != 0 {
				t.Fatalf("no table for %d rows", total)
			}
			return
		}
		nCol := -1
		for i, c := range tb.Columns {
			if c == CountColumn {
				nCol = i
			}
		}
		got := 0
		byGroup := map[string][]string{}
		for _, r := range tb.Rows {
			n := 1
			if nCol >= 0 {
				n, _ = strconv.Atoi(r[nCol])
			}
			got += n
			byGroup[r[0]] = append(byGroup[r[0]], r[len(r)-1])
		}
		if got != total {
			t.Fatalf("%q: %d rows shown (times N), want %d", spec, got, total)
		}
		for _, r := range rs {
			var want []string
			for _, row := range r.Rows {
				want = append(want, row.(map[string]any)["v"].(string))
			}
			for group, cells := range byGroup {
				if slices.Contains(strings.Split(group, ","), r.Host) && strings.Join(cells, "") != strings.Join(want, "") {
					t.Fatalf("%s: rows %q, want %q in order", r.Host, cells, want)
				}
			}
		}
	})
}
