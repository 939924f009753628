package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/inventory"
)

// A long gpu.free shows its step, with how long it has lasted, beside the
// counts: the step of the host that has been at it longest; a host done
// drops out of it.
func TestProgressShowsTheStep(t *testing.T) {
	clk := newManualClock()
	var errb bytes.Buffer
	p := New(Options{Out: &bytes.Buffer{}, Err: &errb, Progress: true, Total: 2, Hosts: []string{"lab01", "lab02"},
		Width: func() int { return 120 }, Fold: inventory.FoldNodeSet, Now: clk.now})
	clk.add(time.Second)
	p.Step("lab01", "gpu.free stage 1: killed 2, waiting GPU 0,3", clk.now())
	clk.add(200 * time.Millisecond)
	p.Step("lab02", "gpu.free stage 1: signalling 1 (TERM, KILL after 5s)", clk.now())
	clk.add(3 * time.Second)
	p.Tick()
	want := "[0/2] ok=0 4.2s lab01 gpu.free stage 1: killed 2, waiting GPU 0,3 (3.2s) waiting: lab[01-02]"
	if got, _ := lastDrawn(&errb); got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	p.Done(Result{Host: "lab01", Status: StatusOK})
	p.Tick()
	if got, _ := lastDrawn(&errb); !strings.Contains(got, "lab02 gpu.free stage 1: signalling 1 (TERM, KILL after 5s) (3.0s)") {
		t.Errorf("line %q: want lab02's step", got)
	}
	// A narrow terminal cuts the step, never its time.
	p.o.Width = func() int { return 60 }
	p.Tick()
	if got, _ := lastDrawn(&errb); got != "[1/2] ok=1 4.2s lab02 gpu.free stage 1: signalling… (3.0s)" {
		t.Errorf("narrow line %q", got)
	}
	// A late step of a host done is not shown.
	p.Step("lab01", "late", clk.now())
	p.Tick()
	if got, _ := lastDrawn(&errb); strings.Contains(got, "late") {
		t.Errorf("line %q shows a done host's step", got)
	}
}

// --json: a host's journal and where its rows came from are in its object;
// each streamed event keeps its kind.
func TestJSONCarriesTheJournal(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, JSON: true})
	p.Event(Event{Host: "lab01", Kind: "kill", Level: "info", Message: "signalled pid 7 (python3): TERM at 12:00:00.000"})
	p.Event(Event{Host: "lab01", Kind: "log", Level: "info", Message: "hello"})
	p.Interrupted()
	p.Finish([]Result{{Host: "lab01", Status: StatusFailed, Error: "interrupted", FromJournal: true,
		Rows:    []any{map[string]any{"gpu": float64(1), "killed": "7", "step": "interrupted"}},
		Journal: map[string]any{"signals": []any{map[string]any{"pid": 7, "signal": "TERM"}}}}})
	line, _, _ := strings.Cut(out.String(), "\n")
	var h struct {
		RowsFrom string           `json:"rows_from"`
		Rows     []map[string]any `json:"rows"`
		Journal  struct {
			Signals []map[string]any `json:"signals"`
		} `json:"journal"`
		Log []map[string]any `json:"log"`
	}
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		t.Fatal(err)
	}
	if h.RowsFrom != "journal" || len(h.Rows) != 1 || len(h.Journal.Signals) != 1 || h.Journal.Signals[0]["pid"] != float64(7) {
		t.Errorf("host line %s", line)
	}
	if len(h.Log) != 2 || h.Log[0]["kind"] != "kill" || h.Log[1]["kind"] != nil {
		t.Errorf("log %v: want the kill's kind, none for a log line", h.Log)
	}
}
