package report

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpush/gpush/termsafe"
)

// statusRank orders the recap: the hosts that need a look come last, next
// to the exit status.
var statusRank = map[string]int{StatusOK: 0, StatusSkipped: 1, StatusFailed: 2, StatusUnreachable: 3}

// recapGroup is one recap line: hosts with the same status, detail and
// figures, but for their figures (MiB, seconds, counts), shown as ranges;
// identities (pids, GPU indices) never fold.
type recapGroup struct {
	hosts    []string
	status   string
	detail   string    // the first host's own text
	tmpl     *numRange // the detail with {host} and {address}, numbers folded
	figures  []*numRange
	min, max time.Duration
}

func (p *Printer) recap(rs []Result) {
	w := p.out
	sorted := append([]Result(nil), rs...)
	sort.SliceStable(sorted, func(i, j int) bool { return naturalLess(sorted[i].Host, sorted[j].Host) })
	var groups []*recapGroup
	idx := map[string]*recapGroup{}
	counts := map[string]int{}
	changed := 0
	for _, r := range sorted {
		counts[r.Status]++
		if r.Stats.Changed {
			changed++
		}
		detail := r.Error
		if detail == "" {
			detail = summary(r.Value)
			if n := len(hostRecords(r)); n > 0 && (r.Value == nil || IsRecords(r.Value)) {
				// The table has them all, recorded and returned.
				detail = fmt.Sprintf("%d rows", n)
			}
		}
		tmpl := hostTemplate(detail, r.Host, r.Address)
		figs := figureCells(r.Stats)
		var key strings.Builder
		// Only figures fold (MiB, seconds, counts): hosts whose details
		// differ in a pid, a GPU index or a job id stay apart, as in -b.
		key.WriteString(r.Status + "\x00" + parseTemplate(tmpl, "", true).key())
		for _, f := range figs {
			key.WriteString("\x00" + numPattern.ReplaceAllString(f, "#"))
		}
		g := idx[key.String()]
		if g == nil {
			g = &recapGroup{status: r.Status, detail: detail, tmpl: newNumRange(tmpl), min: r.Elapsed, max: r.Elapsed}
			for _, f := range figs {
				g.figures = append(g.figures, newNumRange(f))
			}
			idx[key.String()] = g
			groups = append(groups, g)
		} else {
			g.tmpl.add(tmpl)
			for i, f := range figs {
				g.figures[i].add(f)
			}
		}
		g.hosts = append(g.hosts, r.Host)
		g.min, g.max = min(g.min, r.Elapsed), max(g.max, r.Elapsed)
	}
	sort.SliceStable(groups, func(i, j int) bool { return statusRank[groups[i].status] < statusRank[groups[j].status] })

	w.Line()
	// As Ansible's: changed counts the hosts where something was changed
	// (under --check, would be).
	head := []termsafe.Safe{termsafe.Data("RECAP "), w.Paint(colOK, "ok"), termsafe.Dataf("=%d ", counts[StatusOK]),
		w.Paint(colWarn, "changed"), termsafe.Dataf("=%d ", changed)}
	if counts[StatusSkipped] > 0 {
		head = append(head, w.Paint(colWarn, "skipped"), termsafe.Dataf("=%d ", counts[StatusSkipped]))
	}
	head = append(head, w.Paint(colFail, "failed"), termsafe.Dataf("=%d ", counts[StatusFailed]),
		w.Paint(colUnreach, "unreachable"), termsafe.Dataf("=%d  %s", counts[StatusUnreachable], fmtDur(p.o.Now().Sub(p.start))))
	if p.interrupted {
		head = append(head, termsafe.Data("  "), w.Paint(colFail, "interrupted"))
	}
	w.Line(head...)

	// Cells: host, status, the figures, time; then the detail, unpadded.
	var rows [][]string
	for _, g := range groups {
		t := fmtDur(g.min)
		if fmtDur(g.max) != t {
			t += "-" + fmtDur(g.max)
		}
		detail := g.detail
		if len(g.hosts) > 1 {
			// Figures that differ (MiB, seconds) show their range in
			// brackets, as --fold-numbers shows them.
			detail = g.tmpl.bracketed()
		}
		// Sanitized before measuring: an escape is wider than its byte.
		row := []string{termsafe.String(p.o.Fold(g.hosts)), termsafe.String(g.status)}
		for _, f := range g.figures {
			row = append(row, f.String())
		}
		rows = append(rows, append(row, t, termsafe.String(detail)))
	}
	if len(rows) == 0 {
		return
	}
	n := len(rows[0]) - 1 // padded cells
	widths := make([]int, n)
	for _, row := range rows {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(row[i]))
		}
	}
	for _, row := range rows {
		var parts []termsafe.Safe
		for i := range widths {
			if widths[i] == 0 {
				continue // a figure no host has
			}
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
		if row[n] == "" {
			// No detail: the line ends at the last padded cell, trimmed.
			last := termsafe.Data(strings.TrimRight(fmt.Sprintf("%-*s", widths[n-1], row[n-1]), " "))
			parts = append(parts[:len(parts)-2], last)
		} else {
			parts = append(parts, termsafe.Data(row[n]))
		}
		w.Line(parts...)
	}
}

// figureCells are a host's recap figures: GPUs, memory, what was (or would
// be) stopped and killed. Each is "" when the host has none.
func figureCells(st Stats) []string {
	gpus, mem := "", ""
	switch {
	case !st.HaveMem:
	case st.GPUsFreed == 0 && st.GPUsRestarting == 0 && st.MemBeforeMiB == st.MemAfterMiB && st.MemBeforeUnknown == st.MemAfterUnknown:
		// A read-only script: say what is there, not "freed 0".
		gpus = fmt.Sprintf("%d GPUs", st.GPUs)
		mem = fmtMiB(st.MemAfterMiB, st.MemAfterUnknown) + " used"
	default:
		gpus = fmt.Sprintf("freed %d/%d GPUs", st.GPUsFreed, st.GPUs)
		if st.GPUsRestarting > 0 {
			// Free now, but what restarts their workers lives: apart.
			gpus += fmt.Sprintf(", %d free with a restarter alive", st.GPUsRestarting)
		}
		mem = strings.TrimSuffix(fmtMiB(st.MemBeforeMiB, st.MemBeforeUnknown), " MiB") + " -> " + fmtMiB(st.MemAfterMiB, st.MemAfterUnknown)
	}
	if st.Stale && mem != "" {
		mem += " (read before the last stop/kill)"
	}
	var acts []string
	if st.WouldStop > 0 {
		acts = append(acts, fmt.Sprintf("would stop %s (%s)", plural(st.WouldStop, "unit"), fmtMiB(st.WouldStopMiB, st.WouldStopMiBUnknown)))
	}
	if st.WouldStopRestarters > 0 {
		acts = append(acts, "would stop "+plural(st.WouldStopRestarters, "restarter"))
	}
	if st.WouldKill > 0 {
		acts = append(acts, fmt.Sprintf("would kill %s (%s)", plural(st.WouldKill, "process"), fmtMiB(st.WouldKillMiB, st.WouldKillMiBUnknown)))
	}
	if st.UnitsStopped > 0 {
		acts = append(acts, "stopped "+plural(st.UnitsStopped, "unit"))
	}
	if st.UnitsFailed > 0 {
		acts = append(acts, fmt.Sprintf("%s not stopped", plural(st.UnitsFailed, "unit")))
	}
	if st.UnitsStarted > 0 {
		acts = append(acts, "started "+plural(st.UnitsStarted, "unit"))
	}
	if st.RestartersStopped > 0 {
		acts = append(acts, "stopped "+plural(st.RestartersStopped, "restarter"))
	}
	if st.Exited > 0 {
		acts = append(acts, fmt.Sprintf("%s exited after TERM", plural(st.Exited, "process")))
	}
	if st.Killed > 0 {
		acts = append(acts, fmt.Sprintf("%s killed with KILL", plural(st.Killed, "process")))
	}
	if st.Survived > 0 {
		acts = append(acts, fmt.Sprintf("%d survived KILL", st.Survived))
	}
	if st.AliveAfterTerm > 0 {
		acts = append(acts, fmt.Sprintf("%d alive after TERM (cut off before KILL)", st.AliveAfterTerm))
	}
	return []string{gpus, mem, strings.Join(acts, ", ")}
}

// fmtMiB is a sum of memory and how many things of unknown memory it
// leaves out: "7000 MiB", "7000 MiB + 1 unknown".
func fmtMiB(known int64, unknown int) string {
	if unknown == 0 {
		return fmt.Sprintf("%d MiB", known)
	}
	return fmt.Sprintf("%d MiB + %d unknown", known, unknown)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "s") {
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// hostTemplate puts {host} and {address} where msg names the host's own name
// or address as a whole word, so that the same message from many hosts
// folds into one recap line. The longer of the two is replaced first (a name
// may contain the address, or the other way round).
func hostTemplate(msg, host, addr string) string {
	type sub struct{ text, ph string }
	subs := []sub{{host, "{host}"}, {addr, "{address}"}}
	if addr == host {
		subs = subs[:1]
	}
	if len(addr) > len(host) {
		subs[0], subs[1] = subs[1], subs[0]
	}
	for _, s := range subs {
		if s.text != "" {
			msg = replaceWord(msg, s.text, s.ph)
		}
	}
	return msg
}

// replaceWord replaces old in s where it is not part of a longer name: the
// characters around it are not letters, digits, '-' or '_' ("gpu1" is not
// replaced in "gpu10", "10.0.0.1" not in "10.0.0.12"; "gpu1:" and "gpu1."
// are).
func replaceWord(s, old, with string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, old)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(old)
		if (i == 0 || !nameByte(s[i-1])) && (end == len(s) || !nameByte(s[end]) || s[end] == '.' && (end+1 == len(s) || !nameByte(s[end+1]))) {
			b.WriteString(s[:i])
			b.WriteString(with)
		} else {
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

var numPattern = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// numRange is a figure folded over several hosts: its text with each
// number's lowest and highest value.
type numRange struct {
	parts    []string // the text around the numbers (len(nums)+1)
	lo, hi   []float64
	loS, hiS []string
}

func newNumRange(s string) *numRange {
	r := &numRange{}
	last := 0
	for _, m := range numPattern.FindAllStringIndex(s, -1) {
		r.parts = append(r.parts, s[last:m[0]])
		v, _ := strconv.ParseFloat(s[m[0]:m[1]], 64)
		r.lo, r.hi = append(r.lo, v), append(r.hi, v)
		r.loS, r.hiS = append(r.loS, s[m[0]:m[1]]), append(r.hiS, s[m[0]:m[1]])
		last = m[1]
	}
	r.parts = append(r.parts, s[last:])
	return r
}

// add folds in s, which has the same text around its numbers.
func (r *numRange) add(s string) {
	for i, m := range numPattern.FindAllString(s, -1) {
		if i >= len(r.lo) {
			return
		}
		v, _ := strconv.ParseFloat(m, 64)
		if v < r.lo[i] {
			r.lo[i], r.loS[i] = v, m
		}
		if v > r.hi[i] {
			r.hi[i], r.hiS[i] = v, m
		}
	}
}

// String shows a number that differs as "lo-hi".
func (r *numRange) String() string { return r.render("", "") }

// bracketed shows a number that differs as "[lo-hi]": inside free text a bare
// range could read as part of it.
func (r *numRange) bracketed() string { return r.render("[", "]") }

func (r *numRange) render(open, closing string) string {
	var b strings.Builder
	for i, p := range r.parts {
		b.WriteString(p)
		if i < len(r.lo) {
			if r.hi[i] != r.lo[i] {
				b.WriteString(open + r.loS[i] + "-" + r.hiS[i] + closing)
			} else {
				b.WriteString(r.loS[i])
			}
		}
	}
	return b.String()
}
