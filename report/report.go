// Package report prints a run's output: per-host lines as they happen, a
// recap that folds hosts with the same outcome into node sets, fleet tables
// gathered from scripts that return lists of flat records, JSON lines, and a
// progress line on a terminal.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpush/gpush/termsafe"
)

// Host statuses.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"
	StatusUnreachable = "unreachable"
)

// Exit codes, as Ansible's: unreachable (4) wins over failed (2) because a
// host that was never reached may hide a failure too.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitFailed      = 2
	ExitUnreachable = 4
)

// Event is one line a host's script printed (log.*) or the runner noted.
type Event struct {
	Host    string
	Time    time.Time
	Kind    string // "log", "step", ...
	Level   string // debug, info, warn, error
	Message string
}

// Stats are the GPU numbers of one host's run, shown in the recap.
type Stats struct {
	// HaveMem is false when the script never read GPU memory.
	HaveMem      bool  `json:"-"`
	GPUs         int   `json:"gpus"`
	GPUsFreed    int   `json:"gpus_freed"`
	MemBeforeMiB int64 `json:"mem_before_mib"`
	MemAfterMiB  int64 `json:"mem_after_mib"`
}

// Result is one host's outcome. Value is the script's return value as plain
// Go data (nil, bool, float64, string, []any, map[string]any).
type Result struct {
	Host    string
	Status  string
	Value   any
	Error   string
	Elapsed time.Duration
	Stats   Stats
}

// ExitCode maps a run's results to the process exit status.
func ExitCode(rs []Result) int {
	code := ExitOK
	for _, r := range rs {
		switch r.Status {
		case StatusUnreachable:
			return ExitUnreachable
		case StatusFailed:
			code = ExitFailed
		case StatusOK:
		default:
			code = ExitFailed
		}
	}
	return code
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
	// Gather (-b) holds per-host lines and prints them at the end: lines
	// that differ only in their numbers once, with the node set and count
	// of the hosts that printed them and each number's values, every
	// host's lines in its own order (see gather.go).
	Gather bool
	// ByOutput (-B, clush -b's layout) holds per-host lines and prints
	// each distinct whole output once under a header naming its hosts.
	ByOutput bool
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
	return &Printer{o: o, out: termsafe.NewWriter(o.Out, o.Color), errw: termsafe.NewWriter(o.Err, o.Color), start: o.Now(), events: map[string][]Event{}, counts: map[string]int{}, wait: newWaiting(o.Hosts)}
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
	if p.o.Gather || p.o.ByOutput {
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

// Done records a finished host for the progress line; only Host and Status
// are needed.
func (p *Printer) Done(r Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.counts[r.Status]++
	p.wait.finish(r.Host)
	p.drawProgress()
}

type jsonEvent struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

type jsonResult struct {
	Host     string      `json:"host"`
	Status   string      `json:"status"`
	Value    any         `json:"value"`
	Error    string      `json:"error,omitempty"`
	ElapsedS float64     `json:"elapsed_s"`
	Stats    *Stats      `json:"stats,omitempty"`
	Log      []jsonEvent `json:"log,omitempty"`
}

func (p *Printer) jsonResult(r Result) jsonResult {
	j := jsonResult{Host: r.Host, Status: r.Status, Value: r.Value, Error: r.Error,
		ElapsedS: math.Round(r.Elapsed.Seconds()*1000) / 1000}
	if r.Stats.HaveMem {
		s := r.Stats
		j.Stats = &s
	}
	for _, e := range p.events[r.Host] {
		j.Log = append(j.Log, jsonEvent{Time: e.Time, Level: e.Level, Message: e.Message})
	}
	return j
}

// Finish prints the gathered lines, the fleet table and the recap, or in
// JSON mode one JSON object per host, in the order of rs.
func (p *Printer) Finish(rs []Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearProgress()
	if p.o.JSON {
		for _, r := range rs {
			b, err := json.Marshal(p.jsonResult(r))
			if err != nil {
				b, _ = json.Marshal(map[string]string{"host": r.Host, "status": r.Status, "error": "encode result: " + err.Error()})
			}
			// Exact text, but no raw C1 or bidi control for a terminal.
			fmt.Fprintf(p.o.Out, "%s\n", termsafe.JSON(b))
		}
		return
	}
	p.printGathered()
	if t := FleetTable(rs, p.o.Fold); t != nil {
		p.out.Line()
		t.Write(p.out)
	}
	p.recap(rs)
}

func (p *Printer) recap(rs []Result) {
	w := p.out
	type group struct {
		hosts    []string
		r        Result
		min, max time.Duration
	}
	var groups []*group
	idx := map[string]*group{}
	sorted := append([]Result(nil), rs...)
	sort.SliceStable(sorted, func(i, j int) bool { return naturalLess(sorted[i].Host, sorted[j].Host) })
	for _, r := range sorted {
		k := strings.Join([]string{r.Status, fmt.Sprint(r.Stats), r.Error, summary(r.Value)}, "\x00")
		g := idx[k]
		if g == nil {
			g = &group{r: r, min: r.Elapsed, max: r.Elapsed}
			idx[k] = g
			groups = append(groups, g)
		}
		g.hosts = append(g.hosts, r.Host)
		g.min, g.max = min(g.min, r.Elapsed), max(g.max, r.Elapsed)
	}
	counts := map[string]int{}
	for _, r := range rs {
		counts[r.Status]++
	}
	w.Line()
	w.Line(termsafe.Data("RECAP "), w.Paint(colOK, "ok"), termsafe.Dataf("=%d ", counts[StatusOK]),
		w.Paint(colFail, "failed"), termsafe.Dataf("=%d ", counts[StatusFailed]),
		w.Paint(colUnreach, "unreachable"), termsafe.Dataf("=%d  %s", counts[StatusUnreachable], fmtDur(p.o.Now().Sub(p.start))))
	var rows [][]string
	for _, g := range groups {
		r := g.r
		gpus, mem := "", ""
		switch st := r.Stats; {
		case !st.HaveMem:
		case st.GPUsFreed == 0 && st.MemBeforeMiB == st.MemAfterMiB:
			// A read-only script: say what is there, not "freed 0".
			gpus = fmt.Sprintf("%d GPUs", st.GPUs)
			mem = fmt.Sprintf("%d MiB used", st.MemAfterMiB)
		default:
			gpus = fmt.Sprintf("freed %d/%d GPUs", st.GPUsFreed, st.GPUs)
			mem = fmt.Sprintf("%d -> %d MiB", st.MemBeforeMiB, st.MemAfterMiB)
		}
		t := fmtDur(g.min)
		if fmtDur(g.max) != t {
			t += "-" + fmtDur(g.max)
		}
		detail := r.Error
		if detail == "" {
			detail = summary(r.Value)
		}
		// Sanitized before measuring: an escape is wider than its byte.
		rows = append(rows, []string{termsafe.String(p.o.Fold(g.hosts)), termsafe.String(r.Status), gpus, mem, t,
			termsafe.String(detail)})
	}
	widths := make([]int, 5)
	for _, row := range rows {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(row[i]))
		}
	}
	for _, row := range rows {
		parts := make([]termsafe.Safe, 0, 6)
		for i := range widths {
			cell := fmt.Sprintf("%-*s", widths[i], row[i])
			switch i {
			case 0:
				parts = append(parts, w.Paint(colHost, cell))
			case 1:
				parts = append(parts, w.Paint(statusColor(row[1]), cell))
			default:
				parts = append(parts, termsafe.Data(cell))
			}
			parts = append(parts, termsafe.Data("  "))
		}
		if row[5] == "" {
			// No detail: the line ends at the last padded cell, trimmed.
			last := termsafe.Data(strings.TrimRight(fmt.Sprintf("%-*s", widths[4], row[4]), " "))
			parts = append(parts[:len(parts)-2], last)
		} else {
			parts = append(parts, termsafe.Data(row[5]))
		}
		w.Line(parts...)
	}
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
