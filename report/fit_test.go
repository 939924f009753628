package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestShorten(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		// Paths lose their folders first, the longest first: argv[0] and
		// the script keep their names.
		{"/usr/bin/python3 /opt/jobs/team/a/train.py --lr 0.1", 40, "/usr/bin/python3 …/train.py --lr 0.1"},
		{"/usr/bin/python3 /opt/jobs/team/a/train.py --lr 0.1", 30, "…/python3 …/train.py --lr 0.1"},
		{"/usr/bin/python3 /opt/jobs/team/a/train.py --lr 0.1 --epochs 100", 24, "…/python3 …/train.py --…"},
		// Inside a reason: brackets and the pid stay.
		{"held by pid 4410 (python3 /opt/jobs/team/a/train.py --lr 0.1) 10240 MiB", 50, "held by pid 4410 (python3 …/train.py --lr 0.1) 10…"},
		{"no/paths/here/ but a long text without any folder to drop at all", 20, "no/paths/here/ but …"},
		{"日本語のテキストがとても長い", 5, "日本語の…"},
	} {
		got := Shorten(c.in, c.n)
		if got != c.want {
			t.Errorf("Shorten(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
		if utf8.RuneCountInString(got) > c.n {
			t.Errorf("Shorten(%q, %d) = %q: %d runes", c.in, c.n, got, utf8.RuneCountInString(got))
		}
	}
}

// A table wider than its width is cut to it: never the host column, the
// widest columns first, to one cap; a note names them. --wide (no limit)
// cuts nothing.
func TestTableFit(t *testing.T) {
	long := "held by pid 4410 (python3 /opt/jobs/team/a/very/long/path/train.py --lr 0.1 --epochs 100 --data /data/sets/imagenet) 10240 MiB"
	rs := []Result{{Host: "gpu-node-with-a-long-name-017", Status: StatusOK, Value: []any{
		map[string]any{"gpu": 0.0, "state": "held", "holders": "4410 alice python3* 10.0 GiB (slurm job 4711), 4411 alice python3 (slurm job 4711)", "reason": long},
		map[string]any{"gpu": 1.0, "state": "free", "holders": "", "reason": ""}}}}
	var out bytes.Buffer
	p := New(Options{Out: &out, Now: clock()})
	p.Finish(rs)
	s := out.String()
	for _, l := range strings.Split(s, "\n") {
		if n := utf8.RuneCountInString(l); n > DefaultTableWidth {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	for _, want := range []string{"gpu-node-with-a-long-name-017  0", "(python3 …/train.py", "cut to 120 columns: HOLDERS, REASON",
		"HOLDERS *: owns GPU memory"} {
		if !strings.Contains(s, want) {
			t.Errorf("lacks %q:\n%s", want, s)
		}
	}
	out.Reset()
	p = New(Options{Out: &out, TableWidth: -1, Now: clock()})
	p.Finish(rs)
	if s := out.String(); !strings.Contains(s, long) || strings.Contains(s, "cut to") {
		t.Errorf("--wide cut:\n%s", s)
	}
	// A narrow terminal: cells go down to their floor, never below.
	tb := FleetTable(rs, nil)
	tb.Fit(40)
	for _, r := range tb.Rows {
		if r[0] != "gpu-node-with-a-long-name-017" || utf8.RuneCountInString(r[4]) > minCell {
			t.Errorf("fit 40: %q", r)
		}
	}
}

// Hosts whose rows differ only in a volatile column (a process's age) are
// one group, the column showing the group's range; any other difference
// keeps them apart.
func TestFleetTableVolatileFolds(t *testing.T) {
	var rs []Result
	for i, age := range []string{"21s", "22s", "1m2s", "25s"} {
		user := "alice"
		if i == 3 {
			user = "bob"
		}
		rs = append(rs, Result{Host: fmt.Sprintf("lab%02d", i+1), Status: StatusOK, Value: []any{
			map[string]any{"gpu": 0.0, "pid": 4410.0, "user": user, "age": age}}})
	}
	tb := FleetTable(rs, nil)
	got := strings.Join(tableLines(tb), "\n")
	want := "lab01,lab02,lab03|3|0|4410|alice|21s..1m2s\nlab04|1|0|4410|bob|25s"
	if got != want {
		t.Errorf("rows:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(strings.Join(tb.Notes, "\n"), "AGE: lowest..highest of the group") {
		t.Errorf("notes: %q", tb.Notes)
	}
	// The same age everywhere: one value, no note.
	for i := range rs {
		rs[i].Value.([]any)[0].(map[string]any)["age"] = "5m"
	}
	tb = FleetTable(rs[:3], nil)
	if got := strings.Join(tableLines(tb), "\n"); got != "lab01,lab02,lab03|3|0|4410|alice|5m" || len(tb.Notes) != 1 {
		t.Errorf("same ages: %s %q", got, tb.Notes)
	}
}

// Objects with a label (holders, managers) show as their labels; --json
// keeps them whole (TestJSONMatchesSchema).
func TestCellLabels(t *testing.T) {
	h := func(pid int, label string) map[string]any { return map[string]any{"pid": float64(pid), "label": label} }
	for _, c := range []struct {
		v    any
		want string
	}{
		{[]any{h(1, "1 alice python3*"), h(2, "2 root nvitop")}, "1 alice python3*, 2 root nvitop"},
		{map[string]any{"kind": "unit", "label": "unit vllm.service"}, "unit vllm.service"},
		{[]any{}, ""},
		{[]any{h(1, "x"), map[string]any{"pid": 2.0}}, `[{"label":"x","pid":1},{"pid":2}]`},
		{map[string]any{"a": 1.0}, `{"a":1}`},
	} {
		if got := CellText(c.v); got != c.want {
			t.Errorf("CellText(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}
