package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/report/jsoncheck"
)

// loadSchema reads docs/json-schema.json, the schema operators read.
func loadSchema(t testing.TB) *jsoncheck.Schema {
	t.Helper()
	s, err := jsoncheck.Load("../docs/json-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkJSONLines validates every line of a --json output.
func checkJSONLines(t *testing.T, s *jsoncheck.Schema, out string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if err := s.ValidateJSON([]byte(line)); err != nil {
			t.Errorf("%v\n%s", err, line)
		}
	}
}

// Every shape of host the printer writes (rows returned, recorded, both,
// a plain value, a failure with rows, an unreachable host, stats, log,
// holders and managers as objects) fits the documented schema, and rows
// are always in .rows.
func TestJSONMatchesSchema(t *testing.T) {
	s := loadSchema(t)
	holder := map[string]any{"pid": 633.0, "user": "alice", "comm": "python3", "owner": true, "mem_mib": 10240.0,
		"where": "vllm.service", "label": "633 alice python3* 10.0 GiB (vllm.service)"}
	mgr := map[string]any{"kind": "unit", "label": "unit vllm.service (Restart=always, 15s)", "restarts": "yes",
		"stop": "systemctl stop vllm.service", "pid": 0.0, "why": "its unit restarts it"}
	long := "pid 4410 (python3 /opt/jobs/team/very/long/path/to/the/deployment/train.py --lr 0.1 --epochs 100)"
	rs := []Result{
		{Host: "gpu01", Address: "10.0.0.1", Status: StatusOK, Value: []any{
			map[string]any{"gpu": 0.0, "state": "held", "holders": []any{holder}, "reason": "held by " + long},
			map[string]any{"gpu": 1.0, "state": "free", "holders": []any{}, "reason": ""}},
			Elapsed: 1500 * time.Millisecond, Stats: Stats{HaveMem: true, GPUs: 2, MemBeforeMiB: 10240, MemAfterMiB: 10240}},
		{Host: "gpu02", Status: StatusFailed, Error: "GPU 0 not freed", Rows: []any{
			map[string]any{"gpu": 0.0, "freed": false, "step": "not-freed", "restarters": []any{mgr}, "reason": long}},
			Stats: Stats{HaveMem: true, GPUs: 1, Killed: 2, Survived: 1}},
		{Host: "gpu03", Status: StatusOK, Rows: []any{map[string]any{"pid": 7.0, "manager": mgr}}, Value: map[string]any{"freed": 1.0}},
		{Host: "gpu04", Status: StatusOK, Value: "done", Columns: []string{"gpu", "..."}},
		{Host: "gpu05", Status: StatusUnreachable, Error: "dial: connection refused"},
		{Host: "gpu06", Status: StatusSkipped, Error: "busy", Rows: []any{map[string]any{"gpu": "-"}}, Value: []any{map[string]any{"gpu": 1.0}}},
	}
	var out bytes.Buffer
	p := New(Options{Out: &out, JSON: true, Now: clock()})
	p.Event(Event{Host: "gpu01", Time: time.Unix(0, 0).UTC(), Level: "info", Message: "GPU 0 held"})
	p.Finish(rs)
	checkJSONLines(t, s, out.String())
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != len(rs)+1 {
		t.Fatalf("%d lines, want %d", len(lines), len(rs)+1)
	}
	for i, want := range []string{
		`"value":null`, `"value":null`, `"value":{"freed":1}`, `"value":"done"`, `"rows":[]`, `"value":null`,
	} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], `"rows":[`) {
			t.Errorf("%s: lacks %s or rows:\n%s", rs[i].Host, want, lines[i])
		}
	}
	// Both kinds of rows in one place, recorded first.
	if !strings.Contains(lines[5], `"rows":[{"gpu":"-"},{"gpu":1}]`) {
		t.Errorf("gpu06's rows:\n%s", lines[5])
	}
	// Nothing cut: the reason and the holder's fields are whole.
	if !strings.Contains(lines[0], `"comm":"python3"`) || !strings.Contains(lines[0], "--epochs 100)") {
		t.Errorf("gpu01 cut:\n%s", lines[0])
	}
}

// The schema rejects wrong shapes: rows in .value, holders as one string,
// a summary without counts.
func TestSchemaRejects(t *testing.T) {
	s := loadSchema(t)
	for _, bad := range []string{
		`{"type":"host","host":"a","status":"ok","value":null,"elapsed_s":1}`,
		`{"type":"host","host":"a","status":"ok","value":null,"rows":[{"holders":"633 alice python3*"}],"elapsed_s":1}`,
		`{"type":"host","host":"a","status":"ok","value":null,"rows":[{"manager":"unit x"}],"elapsed_s":1}`,
		`{"type":"host","host":"a","status":"weird","value":null,"rows":[],"elapsed_s":1}`,
		`{"type":"host","host":"a","status":"ok","value":null,"rows":[],"elapsed_s":1,"extra":1}`,
		`{"type":"host","host":"a","status":"ok","value":null,"rows":[{"pid":1.5}],"elapsed_s":1}`,
		`{"type":"summary","hosts":1,"exit_code":0,"interrupted":false,"elapsed_s":1,"totals":{}}`,
	} {
		if err := s.ValidateJSON([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	if _, err := jsoncheck.Parse([]byte(`{"type":"object","minProperties":1}`)); err == nil {
		t.Error("a keyword jsoncheck does not check must be refused")
	}
}
