// Package report prints a run's output: per-host lines as they happen, a
// recap that folds hosts with the same outcome into node sets, fleet tables
// gathered from the rows scripts produce, JSON lines, and a progress line on
// a terminal.
//
// Fleet table. A host's rows are the records its script recorded
// (report.row, report.rows, or the rows given to fail() and skip()) followed
// by the records it returned (a list of tables). Every row is shown, whatever
// the host's outcome: a host that failed or was skipped keeps its rows, and
// a STATUS column marks them when some host is not ok. Hosts whose rows are
// all the same (same cells, same order, same status) fold into one group:
// the HOST column names their node set and the # column how many hosts it
// holds, and a note under the table says how many rows were folded. A host's
// rows stay together and in the order its script produced them.
//
// Columns: report.columns{"gpu", "state", ...} in a script chooses which
// columns show and in what order; a last entry "..." adds the others after
// them. Without it, columns come in a fixed order for the library's keys
// (gpu, index, pid, ... see columnOrder), then the others alphabetically,
// then holders, reason, error. A cell is its value as text; an object with
// a "label" (a holder, a manager) shows as its label and a list of them as
// their labels; other nested tables as compact JSON; in a column holding
// values of several types, a string that would read as another type (1,
// true, an empty string) is quoted, so that the number 1 and the string "1"
// stay apart. A missing key is an empty cell. Hosts whose rows differ only
// in volatile columns (age, elapsed, ...: volatileColumns) fold too, the
// cell showing the group's range. Marks of the library's columns (the *
// of holders) are explained under the table. The table fits a width
// (Options.TableWidth; Table.Fit): cells are cut, command lines losing
// their folders first.
//
// Recap. Hosts with the same status, detail and figures, numbers aside, are
// one line with their node set; in a folded line, a detail that names each
// host's own name or address shows {host} or {address} in its place, numbers
// that differ show their range, bracketed in the detail (pid [4410-4433])
// and bare in the figures (10240-20480 MiB). Memory figures are each GPU's first
// and newest reading, an unknown one counted apart ("7000 MiB + 1 unknown"), never
// summed; under --check the recap says what would be stopped and killed. The
// head counts changed= hosts, as Ansible's: a unit stopped or started, a
// restarter stopped, a signal delivered (under --check: would be); a unit
// already stopped or a failed stop is no change, and processes are "exited
// after TERM" or "killed with KILL", each once.
//
// JSON (--json): one object per line, each with a "type": "host" objects as
// each host finishes (host, status, value, error, address, rows, columns,
// elapsed_s, stats, log), then one "summary" object (hosts, counts per
// status, exit_code, interrupted, elapsed_s, totals). A host's rows are
// always in rows (recorded and returned, as the fleet table shows them);
// value is a return value that is not rows, else null. Nothing is cut. The
// schema is docs/json-schema.json.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/gpush/gpush/termsafe"
)

// Host statuses. A skipped host is one whose script chose to leave it alone
// (skip(): a drain refused on a busy host): not a failure.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"
	StatusUnreachable = "unreachable"
	StatusSkipped     = "skipped"
)

// Exit codes, as ansible-playbook's (ansible-core 2.14: TaskQueueManager's
// RUN_* codes and the CLI's handlers): ok and skipped hosts alone give 0;
// unreachable (4) wins over failed (2) because a host that was never
// reached may hide a failure too; an interrupted run is 99 whatever its
// hosts did. 130 (128+SIGINT, as a shell reports it) is gpush's own: a
// second interrupt quit at once, before the report was complete.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitFailed      = 2
	ExitUnreachable = 4
	ExitInterrupted = 99
	ExitQuit        = 130
)

// Event is one line a host's script printed (log.*) or the runner noted.
type Event struct {
	Host    string
	Time    time.Time
	Kind    string // "log", "step", ...
	Level   string // debug, info, warn, error
	Message string
}

// Stats are the GPU numbers of one host's run, shown in the recap. Memory
// sums skip what is unknown and count it apart (the ...Unknown fields): an
// unknown reading is never read as 0.
type Stats struct {
	// HaveMem is false when the script never read GPU memory.
	HaveMem   bool `json:"-"`
	GPUs      int  `json:"gpus"`
	GPUsFreed int  `json:"gpus_freed"`
	// GPUsRestarting: free now, but a manager that would start their
	// workers again is alive: not freed, counted apart.
	GPUsRestarting int `json:"gpus_restarting,omitempty"`
	// MemBeforeMiB is the sum of each GPU's first reading, MemAfterMiB of
	// its newest one; MemBeforeUnknown and MemAfterUnknown count the GPUs
	// whose reading was unknown, left out of the sums.
	MemBeforeMiB     int64 `json:"mem_before_mib"`
	MemAfterMiB      int64 `json:"mem_after_mib"`
	MemBeforeUnknown int   `json:"mem_before_unknown,omitempty"`
	MemAfterUnknown  int   `json:"mem_after_unknown,omitempty"`
	// Stale: the newest reading came before a kill or a unit action (a
	// reading at the end of the script failed).
	Stale bool `json:"stale,omitempty"`
	// Changed: the run changed something on the host (a unit stopped or
	// started, a restarter stopped, a signal delivered); under --check,
	// it would have.
	Changed bool `json:"changed"`
	// Processes signalled, each once: gone after the first signal (TERM),
	// gone after KILL, alive after KILL. A target gone before any signal
	// is in none of them.
	Exited   int `json:"exited,omitempty"`
	Killed   int `json:"killed,omitempty"`
	Survived int `json:"survived,omitempty"`
	// AliveAfterTerm: signalled, alive when the kill was cut off before
	// its KILL (Ctrl-C): not a survivor of KILL.
	AliveAfterTerm int `json:"alive_after_term,omitempty"`
	// Units a stop changed (active, now stopped) and started; those a
	// stop found stopped already; the stops that failed (no such unit,
	// processes left): never counted as stopped.
	UnitsStopped   int `json:"units_stopped,omitempty"`
	UnitsStarted   int `json:"units_started,omitempty"`
	UnitsUnchanged int `json:"units_unchanged,omitempty"`
	UnitsFailed    int `json:"units_failed,omitempty"`
	// Restarters (supervisors, units, containers, jobs) stop_restarters
	// stopped.
	RestartersStopped int `json:"restarters_stopped,omitempty"`
	// Under --check: the processes that would be signalled, the units and
	// restarters that would be stopped, with the GPU memory they hold
	// (the ...Unknown fields: how many of unknown memory, not in the sum).
	WouldKill           int   `json:"would_kill,omitempty"`
	WouldKillMiB        int64 `json:"would_kill_mib,omitempty"`
	WouldKillMiBUnknown int   `json:"would_kill_mib_unknown,omitempty"`
	WouldStop           int   `json:"would_stop,omitempty"`
	WouldStopMiB        int64 `json:"would_stop_mib,omitempty"`
	WouldStopMiBUnknown int   `json:"would_stop_mib_unknown,omitempty"`
	WouldStopRestarters int   `json:"would_stop_restarters,omitempty"`
}

// Result is one host's outcome. Value is the script's return value as plain
// Go data (nil, bool, float64, string, []any, map[string]any).
type Result struct {
	Host string
	// Address is what was dialled; the recap folds messages naming it.
	Address string
	Status  string
	Value   any
	// Rows are the records the script recorded or gave to fail()/skip(),
	// kept whatever the outcome; the fleet table shows them before the
	// records of Value.
	Rows []any
	// Columns is the script's choice of table columns (report.columns).
	Columns []string
	Error   string
	Elapsed time.Duration
	Stats   Stats
	// Journal is the host's record of what was done (signals with their
	// pids and times, units, each GPU's last reading), for --json; nil:
	// none. FromJournal: Rows were built from it (the script left none).
	Journal     any
	FromJournal bool
}

// ExitCode maps a run's results to the process exit status.
func ExitCode(rs []Result) int {
	code := ExitOK
	for _, r := range rs {
		switch r.Status {
		case StatusUnreachable:
			return ExitUnreachable
		case StatusOK, StatusSkipped:
		default:
			code = ExitFailed
		}
	}
	return code
}

// RunExitCode is ExitCode for a run that may have been interrupted: then
// ExitInterrupted, as ansible-playbook's 99.
func RunExitCode(rs []Result, interrupted bool) int {
	if interrupted {
		return ExitInterrupted
	}
	return ExitCode(rs)
}

// Options say where and how to print.
type Options struct {
	Out io.Writer // results (stdout)
	Err io.Writer // progress (stderr)
	// JSON prints one JSON object per host (JSON lines) and nothing else on Out.
	JSON bool
	// Color uses ANSI colours (only on a terminal and without NO_COLOR).
	Color bool
	// Progress keeps a progress line on Err (a terminal) for long runs.
	Progress bool
	// ProgressAfter is how long a run must last before progress shows.
	ProgressAfter time.Duration
	// Gather (-b, clush -b) holds per-host lines and prints each distinct
	// whole output once, at the end, under a header naming its hosts.
	Gather bool
	// FoldNumbers (--fold-numbers) lets lines that differ only in figures
	// (counts, MiB, durations; never pids, GPU indices or other numbers)
	// be one, showing each figure's values: with Gather, whole outputs;
	// alone, each line at its place in every host's order (see gather.go).
	FoldNumbers bool
	// TableWidth is how wide fleet tables may be: 0 is DefaultTableWidth,
	// below 0 no limit (--wide).
	TableWidth int
	// Verbose shows debug lines.
	Verbose bool
	// Total is the number of hosts, for progress.
	Total int
	// Hosts are the run's host names: the progress line names those not
	// done yet ("waiting: gpu[017,204]"). Empty: counts only.
	Hosts []string
	// Width is the terminal's width, for the progress line (nil or <= 0:
	// 80 columns).
	Width func() int
	// Fold turns host names into a node set ("gpu[01-14]"); nil joins with commas.
	Fold func([]string) string
	// Now is the clock (tests).
	Now func() time.Time
}

// Printer is safe for concurrent use by the runner's per-host goroutines.
type Printer struct {
	o Options
	// out and errw sanitize everything human: host names, messages, cells
	// and errors are the hosts' data (JSON goes to o.Out as it is).
	out, errw *termsafe.Writer
	mu        sync.Mutex
	start     time.Time
	events    map[string][]Event
	done      int
	counts    map[string]int
	progress  bool // a progress line is on screen
	wait      waiting
	steps     map[string]hostStep // what each running host is doing (Step)
	// JSON mode: the hosts whose object is out, and whether the run was
	// interrupted (for the summary).
	printed     map[string]bool
	interrupted bool
	quit        bool
	finished    bool // after Finish, a late Done prints nothing
}

// New returns a Printer.
func New(o Options) *Printer {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Fold == nil {
		o.Fold = func(h []string) string { return strings.Join(h, ",") }
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	return &Printer{o: o, out: termsafe.NewWriter(o.Out, o.Color), errw: termsafe.NewWriter(o.Err, o.Color), start: o.Now(), events: map[string][]Event{}, counts: map[string]int{}, printed: map[string]bool{}, wait: newWaiting(o.Hosts)}
}

// Event prints (or gathers) one host line.
func (p *Printer) Event(e Event) {
	if e.Level == "debug" && !p.o.Verbose {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events[e.Host] = append(p.events[e.Host], e)
	if p.o.JSON {
		return
	}
	if p.o.Gather || p.o.FoldNumbers {
		return // printed by Finish, from p.events
	}
	p.clearProgress()
	p.hostLines(e.Host, e.Level, e.Message)
	p.drawProgress()
}

// hostLines prints "host | LEVEL line" for each line of msg: a message of
// several lines (a tool's output) keeps the host in front of every line, so
// no line of it can pass for another host's. Callers hold p.mu.
func (p *Printer) hostLines(host, level, msg string) {
	prefix := termsafe.Join(p.out.Paint(colHost, host), termsafe.Data(" | "), p.level(level), termsafe.Data(" "))
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		p.out.Line(prefix, termsafe.Block(line))
	}
}

// Done records a finished host: for the progress line, and in JSON mode
// its object is written at once (a run of 300 hosts streams them). Call it
// once per host, with the whole result.
func (p *Printer) Done(r Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.done++
	p.counts[r.Status]++
	p.wait.finish(r.Host)
	delete(p.steps, r.Host)
	if p.o.JSON {
		p.writeHost(r)
		return
	}
	p.drawProgress()
}

// Interrupted marks the run as interrupted (Ctrl-C): the summary says so
// and carries ExitInterrupted. Quit marks a run quit at a second interrupt
// (ExitQuit).
func (p *Printer) Interrupted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.interrupted = true
}

// Quit: see Interrupted.
func (p *Printer) Quit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.interrupted, p.quit = true, true
}

// exitCode is the run's exit status as the summary reports it; callers hold p.mu.
func (p *Printer) exitCode(rs []Result) int {
	if p.quit {
		return ExitQuit
	}
	return RunExitCode(rs, p.interrupted)
}

// Finish prints the gathered lines, the fleet table and the recap, or in
// JSON mode the objects of the hosts Done has not seen (in the order of
// rs) and the summary. It returns the run's exit status.
func (p *Printer) Finish(rs []Result) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = true
	p.clearProgress()
	if p.o.JSON {
		for _, r := range rs {
			if !p.printed[r.Host] {
				p.writeHost(r)
			}
		}
		p.writeSummary(rs)
		return p.exitCode(rs)
	}
	p.printGathered()
	if t := FleetTable(rs, p.o.Fold); t != nil {
		w := p.o.TableWidth
		if w == 0 {
			w = DefaultTableWidth
		}
		t.Fit(w)
		p.out.Line()
		t.Write(p.out)
	}
	p.recap(rs)
	return p.exitCode(rs)
}

// summary is a one-line rendering of a script's value for the recap; lists
// of records are shown by the fleet table instead.
func summary(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case map[string]any:
		if !isFlat(x) {
			return compactJSON(x)
		}
		keys := sortedKeys(x)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+"="+cellString(x[k]))
		}
		return strings.Join(parts, " ")
	case []any:
		if _, ok := records(x); ok {
			return fmt.Sprintf("%d rows", len(x))
		}
		return compactJSON(x)
	default:
		return cellString(x)
	}
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}
