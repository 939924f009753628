package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpush/gpush/termsafe"
)

// A line's numbers template (gather mode, -b): lines that differ only in
// their numbers gather into one line that shows each number's values.
//
// A number is a word of its own: digits with an optional leading '-' and
// an optional decimal part, then an optional unit of letters or '%'
// ("10240MiB", "0.8s", "-3", "80%"). A word is a run of letters, digits and
// "_.-:%" (and any non-ASCII rune); one trailing '.' or ':' ends a sentence
// or a label and is not part of it. So digits inside a word stay text: host
// names (gpu017, ct129-017), device names (nvidia0, cuda:0, H200), ids
// (0x1f, a UUID), versions (1.2.3), times (10:30:00) and ranges (0-3) are
// not numbers. The line's own host name, as a whole word, is a placeholder
// too: "gpu017: done" from gpu017 and "gpu018: done" from gpu018 gather as
// "{host}: done".

// template is a line cut at its numbers: len(text) == len(nums)+1, and the
// line is text[0] nums[0] text[1] ... nums[n-1] text[n].
type template struct {
	text []string
	nums []number
}

// number is one number of a line: its text as printed and its value.
type number struct {
	text  string
	value float64
	// integer: no decimal part (runs like 4410-4433 are only for integers).
	integer bool
}

// hostMark stands for the line's own host name in a template's text.
const hostMark = "\x00host\x00"

// key identifies the lines that gather: the same text around the numbers.
func (t template) key() string {
	var b strings.Builder
	for _, s := range t.text {
		b.WriteString(strconv.Quote(s))
	}
	return b.String()
}

// render writes the line with each slot's values from the lines in vals
// (vals[i] is the numbers of one line); host replaces the host mark.
func (t template) render(vals [][]number, host string) string {
	var b strings.Builder
	for i, s := range t.text {
		b.WriteString(strings.ReplaceAll(s, hostMark, host))
		if i < len(t.nums) {
			col := make([]number, len(vals))
			for j, v := range vals {
				col[j] = v[i]
			}
			b.WriteString(renderSlot(col))
		}
	}
	return b.String()
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '-' || c == ':' || c == '%' || c >= 0x80
}

// parseTemplate cuts msg at its numbers (none when numbers is false).
// host (the line's own host name, may be empty) becomes the host mark
// where it is a whole word. A NUL in msg is replaced (it would collide
// with the host mark).
func parseTemplate(msg, host string, numbers bool) template {
	msg = strings.ReplaceAll(msg, "\x00", "\uFFFD")
	var t template
	var text strings.Builder
	for i := 0; i < len(msg); {
		if !isWordByte(msg[i]) {
			text.WriteByte(msg[i])
			i++
			continue
		}
		j := i
		for j < len(msg) && isWordByte(msg[j]) {
			j++
		}
		word := msg[i:j]
		i = j
		// One trailing '.' or ':' closes a sentence or a label ("GPU 1:").
		tail := ""
		if n := len(word); n > 1 && (word[n-1] == '.' || word[n-1] == ':') {
			word, tail = word[:n-1], word[n-1:]
		}
		if host != "" && (word == host || word+tail == host) {
			if word+tail == host {
				tail = "" // a host name may end in '.' itself
			}
			text.WriteString(hostMark + tail)
			continue
		}
		if num, unit, ok := splitNumber(word); ok && numbers {
			t.text = append(t.text, text.String())
			text.Reset()
			t.nums = append(t.nums, num)
			text.WriteString(unit)
		} else {
			text.WriteString(word)
		}
		text.WriteString(tail)
	}
	t.text = append(t.text, text.String())
	return t
}

// splitNumber reads a word as a number and its unit: "-0.8s" is -0.8 and
// "s". The unit is letters or '%' only: "0x1f", "1ab00001" and "5e3" are
// not numbers.
func splitNumber(w string) (number, string, bool) {
	i := 0
	if i < len(w) && w[i] == '-' {
		i++
	}
	d := i
	for i < len(w) && w[i] >= '0' && w[i] <= '9' {
		i++
	}
	if i == d {
		return number{}, "", false
	}
	integer := true
	if i < len(w) && w[i] == '.' {
		f := i + 1
		for f < len(w) && w[f] >= '0' && w[f] <= '9' {
			f++
		}
		if f == i+1 {
			return number{}, "", false // "5." was trimmed; "5.x" is a word
		}
		i, integer = f, false
	}
	unit := w[i:]
	for k := 0; k < len(unit); k++ {
		c := unit[k]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '%') {
			return number{}, "", false
		}
	}
	v, err := strconv.ParseFloat(w[:i], 64)
	if err != nil {
		return number{}, "", false
	}
	return number{text: w[:i], value: v, integer: integer}, unit, true
}

// maxRuns is how many runs of consecutive integers (or distinct decimals)
// a slot lists exactly before it shows only its span.
const maxRuns = 3

// renderSlot shows a slot's values: the value when they are all equal;
// the exact set when it is small, as node sets write numbers ("[0,2-3]":
// runs of consecutive non-negative integers, or up to three decimals
// "[0.8,1.2]"); otherwise the span "[4410..4733]" (lowest to highest,
// values in between may be missing).
func renderSlot(col []number) string {
	vals := append([]number(nil), col...)
	sort.SliceStable(vals, func(i, j int) bool { return vals[i].value < vals[j].value })
	distinct := vals[:0:0]
	for _, v := range vals {
		if len(distinct) == 0 || distinct[len(distinct)-1].value != v.value {
			distinct = append(distinct, v)
		}
	}
	if len(distinct) == 1 {
		return distinct[0].text
	}
	lo, hi := distinct[0], distinct[len(distinct)-1]
	if runs, ok := intRuns(distinct); ok && len(runs) <= maxRuns {
		return "[" + strings.Join(runs, ",") + "]"
	}
	if len(distinct) <= maxRuns {
		texts := make([]string, len(distinct))
		for i, v := range distinct {
			texts[i] = v.text
		}
		return "[" + strings.Join(texts, ",") + "]"
	}
	return "[" + lo.text + ".." + hi.text + "]"
}

// intRuns folds sorted distinct non-negative integers into runs ("4410-4433").
// ok is false for decimals and negative numbers ("-3--1" would read badly).
func intRuns(sorted []number) ([]string, bool) {
	var runs []string
	for i := 0; i < len(sorted); {
		if !sorted[i].integer || sorted[i].value < 0 {
			return nil, false
		}
		j := i
		for j+1 < len(sorted) && sorted[j+1].integer && sorted[j+1].value == sorted[j].value+1 {
			j++
		}
		if j == i {
			runs = append(runs, sorted[i].text)
		} else {
			runs = append(runs, sorted[i].text+"-"+sorted[j].text)
		}
		i = j + 1
	}
	return runs, true
}

// hostLine is one line of a host's output, cut at its numbers.
type hostLine struct {
	level string
	t     template
	key   string // the level and the template's text: what gathers
}

// lineGroup is one gathered line: the same template on several hosts, at
// most one line of each.
type lineGroup struct {
	level string
	t     template
	hosts []string
	vals  [][]number // vals[i]: the numbers of hosts[i]'s line
}

func (g *lineGroup) render() string {
	host := "{host}"
	if len(g.hosts) == 1 {
		host = g.hosts[0]
	}
	return g.t.render(g.vals, host)
}

func newHostLine(host, level, msg string, numbers bool) hostLine {
	t := parseTemplate(msg, host, numbers)
	return hostLine{level: level, t: t, key: level + "\x00" + t.key()}
}

// mergeLines gathers the lines of every host (seqs[i] is hosts[i]'s, in
// the order it printed them) into one sequence of groups that keeps each
// host's lines in its own order: a host's k-th line is in an earlier group
// than its (k+1)-th. Hosts are taken in the order given.
//
// Greedy: at each step every host offers its next line; the lines of one
// template are taken together, from every host that offers it. A template
// is taken only when no host has it further ahead (it would otherwise be
// split off from that host's copy, which comes later); the first host's
// offer that passes wins. When none passes (host a printed X then Y, host b
// Y then X), the first host's offer is taken and the template is split into
// two groups. The result does not depend on how the hosts' lines
// interleaved in time.
func mergeLines(hosts []string, seqs [][]hostLine) []*lineGroup {
	pos := make([]int, len(hosts))
	ahead := make([]map[string]int, len(hosts)) // per host: lines left by key
	holders := map[string]int{}                 // key -> hosts with such a line left
	var active []int
	for i, s := range seqs {
		ahead[i] = map[string]int{}
		for _, l := range s {
			if ahead[i][l.key] == 0 {
				holders[l.key]++
			}
			ahead[i][l.key]++
		}
		if len(s) > 0 {
			active = append(active, i)
		}
	}
	var out []*lineGroup
	offers := map[string]int{}
	for len(active) > 0 {
		clear(offers)
		for _, i := range active {
			offers[seqs[i][pos[i]].key]++
		}
		pick := seqs[active[0]][pos[active[0]]]
		for _, i := range active {
			if l := seqs[i][pos[i]]; offers[l.key] == holders[l.key] {
				pick = l
				break
			}
		}
		g := &lineGroup{level: pick.level, t: pick.t}
		next := active[:0]
		for _, i := range active {
			if l := seqs[i][pos[i]]; l.key == pick.key {
				g.hosts = append(g.hosts, hosts[i])
				g.vals = append(g.vals, l.t.nums)
				if ahead[i][l.key]--; ahead[i][l.key] == 0 {
					holders[l.key]--
				}
				pos[i]++
			}
			if pos[i] < len(seqs[i]) {
				next = append(next, i)
			}
		}
		active = next
		out = append(out, g)
	}
	return out
}

// outputGroup is one distinct whole output (by-output mode, -B) and the
// hosts that printed it.
type outputGroup struct {
	hosts []string
	lines [][]hostLine // lines[i]: hosts[i]'s output
}

// groupOutputs gathers hosts whose whole outputs are equal (line for line
// the same keys). As clush orders them: the most hosts first, then by the
// first host (hosts are in natural order).
func groupOutputs(hosts []string, seqs [][]hostLine) []*outputGroup {
	var out []*outputGroup
	idx := map[string]*outputGroup{}
	for i, s := range seqs {
		if len(s) == 0 {
			continue
		}
		var k strings.Builder
		for _, l := range s {
			k.WriteString(strconv.Quote(l.key))
		}
		g := idx[k.String()]
		if g == nil {
			g = &outputGroup{}
			idx[k.String()] = g
			out = append(out, g)
		}
		g.hosts = append(g.hosts, hosts[i])
		g.lines = append(g.lines, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].hosts) > len(out[j].hosts) })
	return out
}

// renderedLine is a line ready to print.
type renderedLine struct{ level, text string }

// render gives a group's output: line i with the values of every host's
// line i.
func (g *outputGroup) render() []renderedLine {
	host := "{host}"
	if len(g.hosts) == 1 {
		host = g.hosts[0]
	}
	first := g.lines[0]
	out := make([]renderedLine, len(first))
	for i, l := range first {
		vals := make([][]number, len(g.lines))
		for j, s := range g.lines {
			vals[j] = s[i].t.nums
		}
		out[i] = renderedLine{level: l.level, text: l.t.render(vals, host)}
	}
	return out
}

// headerRule frames a by-output header, as clush -b draws it.
const headerRule = "---------------"

// hostsLabel is a node set, with the number of hosts when several.
func (p *Printer) hostsLabel(hosts []string) string {
	if len(hosts) == 1 {
		return p.o.Fold(hosts)
	}
	return fmt.Sprintf("%s (%d)", p.o.Fold(hosts), len(hosts))
}

// hostSeqs returns the hosts that printed lines, in natural order, and
// their lines (cut at their numbers when numbers is set). Callers hold p.mu.
func (p *Printer) hostSeqs(numbers bool) ([]string, [][]hostLine) {
	hosts := make([]string, 0, len(p.events))
	for h := range p.events {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool { return naturalLess(hosts[i], hosts[j]) })
	seqs := make([][]hostLine, len(hosts))
	for i, h := range hosts {
		for _, e := range p.events[h] {
			seqs[i] = append(seqs[i], newHostLine(h, e.Level, e.Message, numbers))
		}
	}
	return hosts, seqs
}

// printGathered prints what gather (-b) and by-output (-B) modes held
// back: with ByOutput each distinct whole output once under a header
// naming its hosts (as clush -b; with Gather too, outputs that differ only
// in numbers are one); with Gather alone each gathered line once, prefixed
// with its hosts, at its place in every host's order. Callers hold p.mu.
func (p *Printer) printGathered() {
	switch {
	case p.o.ByOutput:
		hosts, seqs := p.hostSeqs(p.o.Gather)
		for _, g := range groupOutputs(hosts, seqs) {
			p.out.Line(termsafe.Data(headerRule))
			p.out.Line(p.out.Paint(colHost, p.hostsLabel(g.hosts)))
			p.out.Line(termsafe.Data(headerRule))
			for _, l := range g.render() {
				lvl := p.level(l.level)
				for _, line := range strings.Split(strings.TrimRight(l.text, "\n"), "\n") {
					p.out.Line(lvl, termsafe.Data(" "), termsafe.Block(line))
				}
			}
		}
	case p.o.Gather:
		hosts, seqs := p.hostSeqs(true)
		for _, g := range mergeLines(hosts, seqs) {
			p.hostLines(p.hostsLabel(g.hosts), g.level, g.render())
		}
	}
}
