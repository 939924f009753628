package repl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/report"
)

// holder is shaped as gpu.holders() returns one (modules/gpu/README.md).
func holder(pid float64, user string, gpus []any, mem map[string]any) map[string]any {
	return map[string]any{"pid": pid, "user": user, "comm": "python", "gpus": gpus, "mem_by_gpu": mem,
		"devices": []any{"nvidia0", "nvidiactl"}, "owner": true, "protected": false}
}

func TestLayout(t *testing.T) {
	kill := map[string]any{"ok": true, "exited": float64(1), "killed": float64(0),
		"results": []any{map[string]any{"pid": float64(437), "comm": "python", "outcome": "exited"}}}
	big := map[string]any{}
	for i := 0; i < 12; i++ {
		big[fmt.Sprintf("field_%02d", i)] = "some value"
	}
	rs := []lua.EvalResult{
		{Host: "a", Values: []any{[]any{holder(10, "alice", []any{float64(0), float64(2)}, map[string]any{"0": float64(100), "2": float64(50)})}}},
		{Host: "b", Values: []any{kill}},
		{Host: "c", Values: []any{map[string]any{"x": float64(1)}}},
		{Host: "d", Values: []any{big}},
		{Host: "e", Values: []any{float64(1), "two"}},
		{Host: "f", Err: &lua.Interrupted{Cause: context.Canceled}},
		{Host: "g", Err: &lua.Interrupted{Cause: context.DeadlineExceeded}},
		{Host: "h", Err: errors.New("boom")},
		{Host: "i", Values: []any{[]any{}}},
		{Host: "j"}, // a statement: nothing
	}
	d := layout(rs, "5s")
	h := d.tables[""]
	if len(h) != 1 || h[0].Host != "a" {
		t.Fatalf("record list table: %+v", h)
	}
	row := h[0].Value.([]any)[0].(map[string]any)
	if row["gpus"] != "0,2" || row["mem_by_gpu"] != "0=100,2=50" || row["devices"] != "nvidia0,nvidiactl" || row["pid"] != float64(10) {
		t.Errorf("flattened holder: %#v", row)
	}
	if !report.IsRecords(h[0].Value) {
		t.Error("flattened rows are not records to report.FleetTable")
	}
	if r := d.tables["results"]; len(r) != 1 || r[0].Host != "b" {
		t.Errorf("kill results table: %+v", r)
	}
	if w := d.tables[wholeRecord]; len(w) != 1 || w[0].Host != "d" {
		t.Errorf("a big table of scalars is a row: %+v", w)
	}
	want := []inlineItem{
		{"b", `{"exited":1,"killed":0,"ok":true}`, ""},
		{"c", `{"x":1}`, ""},
		{"e", "1\ttwo", ""},
		{"f", "interrupted", "35"},
		{"g", "error: timed out after 5s", "31"},
		{"h", "error: boom", "31"},
		{"i", "[]", ""},
	}
	if !reflect.DeepEqual(d.inline, want) {
		t.Errorf("inline:\n got %q\nwant %q", d.inline, want)
	}
	// Without a --timeout a deadline is an interrupt like any other.
	if d := layout(rs[6:7], ""); d.inline[0].text != "interrupted" {
		t.Errorf("deadline without timeout: %q", d.inline[0].text)
	}
}

func TestFlatCell(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want any
	}{
		{"x", "x"},
		{float64(3), float64(3)},
		{[]any{}, ""},
		{[]any{"a", float64(1), true}, "a,1,true"},
		{map[string]any{"b": float64(2), "a": "x"}, "a=x,b=2"},
		{[]any{map[string]any{"pid": float64(1)}}, `[{"pid":1}]`},
		{map[string]any{"k": []any{float64(1)}}, `{"k":[1]}`},
	} {
		if got := flatCell(tc.v); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("flatCell(%#v) = %#v, want %#v", tc.v, got, tc.want)
		}
	}
}

func TestFit(t *testing.T) {
	long := strings.Repeat("python -m sglang.launch_server --model x ", 4)
	rs := []report.Result{
		{Host: "gpu01", Value: []any{map[string]any{"pid": float64(1), "boot_id": "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "cmdline": long + "1"}}},
		{Host: "gpu02", Value: []any{map[string]any{"pid": float64(2), "boot_id": "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "cmdline": long + "2"}}},
	}
	wide := report.FleetTable(rs, inventory.FoldNodeSet)
	if notes := fit(wide, 0); notes != nil || len(wide.Columns) != 4 {
		t.Errorf("no width: changed (%v, %v)", notes, wide.Columns)
	}
	tb := report.FleetTable(rs, inventory.FoldNodeSet)
	notes := fit(tb, 60)
	if w := tableWidth(tb); w > 60 {
		t.Errorf("width %d after fit(60)", w)
	}
	if !reflect.DeepEqual(tb.Columns, []string{"host", "pid", "cmdline"}) {
		t.Errorf("columns %v, want boot_id moved out (equal in every row)", tb.Columns)
	}
	if len(notes) != 2 || notes[0] != "every row: boot_id=0f1e2d3c-aaaa-bbbb-cccc-000000000001" || !strings.Contains(notes[1], "cut to fit the terminal: cmdline") {
		t.Errorf("notes %q", notes)
	}
	for _, r := range tb.Rows {
		if c := r[2]; !strings.HasSuffix(c, "…") || !strings.HasPrefix(long, strings.TrimSuffix(c, "…")) {
			t.Errorf("cut cell %q", c)
		}
		if utf8.RuneCountInString(r[2]) < minCell {
			t.Errorf("cell cut below %d: %q", minCell, r[2])
		}
	}
	// One row: nothing is "equal in every row"; only cutting.
	one := report.FleetTable(rs[:1], inventory.FoldNodeSet)
	fit(one, 60)
	if len(one.Columns) != 4 {
		t.Errorf("one row lost a column: %v", one.Columns)
	}
}

func TestHistoryEntry(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"1 + 1"}, "1 + 1"},
		{[]string{"for i = 1, 3 do", "  n = n + i", "end"}, "for i = 1, 3 do n = n + i end"},
		{[]string{"t = {", "", "  a = 1,", "}"}, "t = { a = 1, }"},
		// A comment would swallow what a join puts after it: kept as lines.
		{[]string{"for i = 1, 3 do -- count", "end"}, "for i = 1, 3 do -- count\nend"},
		{[]string{"s = [[a", "b]]"}, "s = [[a\nb]]"},
		{[]string{`s = "a\`, `b"`}, "s = \"a\\\nb\""},
	} {
		if got := historyEntry(tc.lines); got != tc.want {
			t.Errorf("historyEntry(%q) = %q, want %q", tc.lines, got, tc.want)
		}
		if got := decodeHistory(encodeHistory(tc.want)); got != tc.want {
			t.Errorf("round trip of %q: %q", tc.want, got)
		}
		if strings.Contains(encodeHistory(tc.want), "\n") {
			t.Errorf("encoded %q spans lines", tc.want)
		}
	}
	for _, s := range []string{`"quoted" .. x`, `"`, `"\n"`} {
		if got := decodeHistory(encodeHistory(s)); got != s {
			t.Errorf("round trip of %q: %q", s, got)
		}
	}
	// Lines of older files stay as they are, even one that looks quoted.
	if got := decodeHistory(`"abc" .. "def"`); got != `"abc" .. "def"` {
		t.Errorf("plain quoted line: %q", got)
	}
}

func TestOpenHistory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "repl_history")
	h, entries, note, err := openHistory(path)
	if err != nil || len(entries) != 0 || note != "" {
		t.Fatalf("new history: %v, %q, %q", err, entries, note)
	}
	for _, e := range []string{"1 + 1", "for i = 1, 2 do -- c\nend"} {
		if err := h.add(e); err != nil {
			t.Fatal(err)
		}
	}
	h.close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("created with %v, %v; want 0600", st.Mode(), err)
	}
	// A file readable by others is narrowed, and says so.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	h, entries, note, err = openHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	h.close()
	if !reflect.DeepEqual(entries, []string{"1 + 1", "for i = 1, 2 do -- c\nend"}) {
		t.Errorf("entries %q", entries)
	}
	if !strings.Contains(note, path) || !strings.Contains(note, "0644") || !strings.Contains(note, "0600") {
		t.Errorf("note %q", note)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after open, want 0600", st.Mode())
	}
	// A file far over the limit is trimmed to its last entries.
	var b strings.Builder
	for i := 0; i < 2*historyLimit+5; i++ {
		fmt.Fprintf(&b, "x = %d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	h, entries, _, err = openHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.add("last"); err != nil {
		t.Fatal(err)
	}
	h.close()
	if len(entries) != historyLimit || entries[0] != fmt.Sprintf("x = %d", historyLimit+5) {
		t.Errorf("%d entries from %q", len(entries), entries[0])
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != historyLimit+1 || lines[len(lines)-1] != "last" {
		t.Errorf("trimmed file: %d lines ending %q", len(lines), lines[len(lines)-1])
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("trimmed file mode %v", st.Mode())
	}
	// Unusable: a clear error naming the file.
	if _, _, _, err := openHistory(filepath.Join(path, "sub")); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("history under a file: %v", err)
	}
}

// A table of cells that do not shrink (escaped control characters) and
// headers wider than the width: fit ends, the header is never cut.
func TestFitEnds(t *testing.T) {
	rs := []report.Result{
		{Host: "gpu01", Value: []any{map[string]any{"a_very_long_column_name": strings.Repeat("\x01", 40), "b": strings.Repeat("y", 80)}}},
	}
	tb := report.FleetTable(rs, inventory.FoldNodeSet)
	fit(tb, 20)
	for _, r := range tb.Rows {
		if utf8.RuneCountInString(r[2]) < len("b") || utf8.RuneCountInString(r[2]) > minCell {
			t.Errorf("b cut to %q", r[2])
		}
	}
	if tb.Columns[1] != "a_very_long_column_name" {
		t.Errorf("columns %v", tb.Columns)
	}
}

func TestGatherHostNames(t *testing.T) {
	items := []inlineItem{
		{"lab1", "error: gpu.mem: lab1: probe: timed out", "31"},
		{"lab10", "error: gpu.mem: lab10: probe: timed out", "31"},
		{"lab2", "error: gpu.mem: lab2: refused", "31"},
		{"lab3", "lab3", ""},
		{"lab4", "lab4", ""},
		{"lab5", "error: lab50 is not lab5", "31"},
	}
	got := gather(items)
	want := []inlineGroup{
		{[]string{"lab1", "lab10"}, "error: gpu.mem: <host>: probe: timed out", "31"},
		// Alone, an error keeps the name as it was.
		{[]string{"lab2"}, "error: gpu.mem: lab2: refused", "31"},
		// Values are never masked.
		{[]string{"lab3"}, "lab3", ""},
		{[]string{"lab4"}, "lab4", ""},
		{[]string{"lab5"}, "error: lab50 is not lab5", "31"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gather:\n got %q\nwant %q", got, want)
	}
	if got := maskHost("lab5: lab50 lab5-x xlab5 lab5", "lab5"); got != "<host>: lab50 lab5-x xlab5 <host>" {
		t.Errorf("maskHost: %q", got)
	}
}
