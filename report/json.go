package report

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/gpush/gpush/termsafe"
)

type jsonEvent struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind,omitempty"` // kill, exit, freed, ...; empty for a log line
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// jsonHost is one "host" line of --json (docs/json-schema.json). Rows are
// every row of the host, those it recorded and those it returned, as the
// fleet table shows them; Value is the return value only when it is not
// rows (null then). Nothing in it is cut.
type jsonHost struct {
	Type     string      `json:"type"`
	Host     string      `json:"host"`
	Status   string      `json:"status"`
	Value    any         `json:"value"`
	Error    string      `json:"error,omitempty"`
	Address  string      `json:"address,omitempty"`
	Rows     []any       `json:"rows"`
	Columns  []string    `json:"columns,omitempty"`
	ElapsedS float64     `json:"elapsed_s"`
	Stats    *Stats      `json:"stats,omitempty"`
	Log      []jsonEvent `json:"log,omitempty"`
	// Journal: what was done (see Result.Journal); RowsFrom "journal"
	// when the rows were built from it.
	Journal  any    `json:"journal,omitempty"`
	RowsFrom string `json:"rows_from,omitempty"`
}

// Totals add up the hosts' figures for the summary.
type Totals struct {
	GPUs      int `json:"gpus"`
	GPUsFreed int `json:"gpus_freed"`
	// GPUsRestarting: free now, with a live manager that would take them back.
	GPUsRestarting int `json:"gpus_restarting"`
	// Changed: hosts where something was (or would be) changed.
	Changed             int   `json:"changed"`
	MemBeforeMiB        int64 `json:"mem_before_mib"`
	MemAfterMiB         int64 `json:"mem_after_mib"`
	MemBeforeUnknown    int   `json:"mem_before_unknown"`
	MemAfterUnknown     int   `json:"mem_after_unknown"`
	Exited              int   `json:"exited"`
	Killed              int   `json:"killed"`
	Survived            int   `json:"survived"`
	AliveAfterTerm      int   `json:"alive_after_term"`
	UnitsStopped        int   `json:"units_stopped"`
	UnitsStarted        int   `json:"units_started"`
	UnitsUnchanged      int   `json:"units_unchanged"`
	UnitsFailed         int   `json:"units_failed"`
	RestartersStopped   int   `json:"restarters_stopped"`
	WouldKill           int   `json:"would_kill"`
	WouldKillMiB        int64 `json:"would_kill_mib"`
	WouldKillMiBUnknown int   `json:"would_kill_mib_unknown"`
	WouldStop           int   `json:"would_stop"`
	WouldStopMiB        int64 `json:"would_stop_mib"`
	WouldStopMiBUnknown int   `json:"would_stop_mib_unknown"`
	WouldStopRestarters int   `json:"would_stop_restarters"`
	Rows                int   `json:"rows"`
}

// jsonSummary is the last line of --json.
type jsonSummary struct {
	Type        string         `json:"type"`
	Hosts       int            `json:"hosts"`
	Counts      map[string]int `json:"counts"`
	ExitCode    int            `json:"exit_code"`
	Interrupted bool           `json:"interrupted"`
	ElapsedS    float64        `json:"elapsed_s"`
	Totals      Totals         `json:"totals"`
}

func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// writeHost writes r's "host" line; callers hold p.mu.
func (p *Printer) writeHost(r Result) {
	p.printed[r.Host] = true
	j := jsonHost{Type: "host", Host: r.Host, Address: r.Address, Status: r.Status, Error: r.Error, Value: r.Value,
		Rows: []any{}, Columns: r.Columns, ElapsedS: seconds(r.Elapsed), Journal: r.Journal}
	for _, rec := range hostRecords(r) {
		j.Rows = append(j.Rows, rec)
	}
	if IsRecords(r.Value) {
		j.Value = nil // in rows
	}
	if r.FromJournal {
		j.RowsFrom = "journal"
	}
	if r.Stats.HaveMem || r.Stats.Changed || r.Stats.Exited+r.Stats.Killed+r.Stats.Survived+r.Stats.WouldKill+r.Stats.WouldStop+r.Stats.UnitsStopped+r.Stats.UnitsStarted+r.Stats.UnitsUnchanged+r.Stats.UnitsFailed > 0 {
		s := r.Stats
		j.Stats = &s
	}
	for _, e := range p.events[r.Host] {
		kind := e.Kind
		if kind == "log" {
			kind = ""
		}
		j.Log = append(j.Log, jsonEvent{Time: e.Time, Kind: kind, Level: e.Level, Message: e.Message})
	}
	b, err := json.Marshal(j)
	if err != nil {
		// A value that does not encode (NaN) must not lose the host's line.
		b, _ = json.Marshal(jsonHost{Type: "host", Host: r.Host, Address: r.Address, Status: r.Status, Rows: []any{},
			Error: joinErr(r.Error, "encode result: "+err.Error()), ElapsedS: j.ElapsedS, Stats: j.Stats, Log: j.Log, Journal: j.Journal})
	}
	p.writeJSON(b)
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// writeSummary writes the "summary" line; callers hold p.mu.
func (p *Printer) writeSummary(rs []Result) {
	s := jsonSummary{Type: "summary", Hosts: len(rs), Interrupted: p.interrupted, ExitCode: p.exitCode(rs),
		ElapsedS: seconds(p.o.Now().Sub(p.start)), Counts: map[string]int{StatusOK: 0, StatusSkipped: 0, StatusFailed: 0, StatusUnreachable: 0}}
	for _, r := range rs {
		s.Counts[r.Status]++
		st, t := r.Stats, &s.Totals
		t.GPUs += st.GPUs
		t.GPUsFreed += st.GPUsFreed
		t.GPUsRestarting += st.GPUsRestarting
		if st.Changed {
			t.Changed++
		}
		t.MemBeforeMiB += st.MemBeforeMiB
		t.MemAfterMiB += st.MemAfterMiB
		t.MemBeforeUnknown += st.MemBeforeUnknown
		t.MemAfterUnknown += st.MemAfterUnknown
		t.Exited += st.Exited
		t.Killed += st.Killed
		t.Survived += st.Survived
		t.AliveAfterTerm += st.AliveAfterTerm
		t.UnitsStopped += st.UnitsStopped
		t.UnitsStarted += st.UnitsStarted
		t.UnitsUnchanged += st.UnitsUnchanged
		t.UnitsFailed += st.UnitsFailed
		t.RestartersStopped += st.RestartersStopped
		t.WouldKill += st.WouldKill
		t.WouldKillMiB += st.WouldKillMiB
		t.WouldKillMiBUnknown += st.WouldKillMiBUnknown
		t.WouldStop += st.WouldStop
		t.WouldStopMiB += st.WouldStopMiB
		t.WouldStopMiBUnknown += st.WouldStopMiBUnknown
		t.WouldStopRestarters += st.WouldStopRestarters
		t.Rows += len(hostRecords(r))
	}
	b, err := json.Marshal(s)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"type":"summary","error":%q}`, err.Error()))
	}
	p.writeJSON(b)
}

func (p *Printer) writeJSON(b []byte) {
	// Exact text, but no raw C1 or bidi control for a terminal.
	fmt.Fprintf(p.o.Out, "%s\n", termsafe.JSON(b))
}
