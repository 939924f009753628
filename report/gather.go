package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpush/gpush/termsafe"
)

// Gathering (-b, clush -b) and number folding (--fold-numbers).
//
// -b prints each distinct whole output of a host once, under a header
// naming the hosts that printed exactly it, byte for byte: as clush -b.
//
// --fold-numbers also lets lines that differ only in their figures be one,
// each figure showing its hosts' values. A figure is a number that
// measures (an amount of memory, a duration, a share, a count): it has a
// unit, attached or as the next word ("10240MiB", "0.8 s", "80%"), or the
// next word is a thing counted ("3 processes", "2 GPUs"), or it is the
// first of a pair whose second is one ("80000 -> 3 MiB", "3/8 GPUs"). Every
// other number is an identity (a pid, a GPU index, a job id, a port) and
// stays text: "GPU 0 would kill 5" and "GPU 1 would kill 12" never gather.
// A number is a word of its own: digits with an optional leading '-' and
// an optional decimal part, then an optional unit of letters or '%'. A
// word is a run of letters, digits and "_.-:%" (and any non-ASCII rune);
// one trailing '.' or ':' ends a sentence or a label and is not part of it.
// So digits inside a word stay text: host names (gpu017, ct129-017),
// device names (nvidia0, cuda:0, H200), ids (0x1f, a UUID), versions
// (1.2.3), times (10:30:00), ranges (0-3) and unit names (sglang-7.service).
// The line's own host name, as a whole word, is a placeholder: "gpu017:
// done" from gpu017 and "gpu018: done" from gpu018 gather as "{host}: done"
// (the header names each host, so nothing is lost).

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

// parseTemplate cuts msg at its foldable numbers (none when fold is
// false: the line is one text, byte for byte). With fold, host (the line's
// own host name, may be empty) becomes the host mark where it is a whole
// word. A NUL in msg is replaced (it would collide with the host mark).
func parseTemplate(msg, host string, fold bool) template {
	msg = strings.ReplaceAll(msg, "\x00", "\uFFFD")
	if !fold {
		return template{text: []string{msg}}
	}
	toks := tokenize(msg)
	var t template
	var text strings.Builder
	for i, tk := range toks {
		if !tk.word {
			text.WriteString(tk.text)
			continue
		}
		word, tail := tk.text, tk.tail
		if host != "" && (word == host || word+tail == host) {
			if word+tail == host {
				tail = "" // a host name may end in '.' itself
			}
			text.WriteString(hostMark + tail)
			continue
		}
		if num, unit, ok := splitNumber(word); ok && foldable(toks, i) {
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

// token is a word (with its closing '.' or ':' apart, in tail) or the
// text between two words.
type token struct {
	text, tail string
	word       bool
}

func tokenize(msg string) []token {
	var out []token
	for i := 0; i < len(msg); {
		j := i
		word := isWordByte(msg[i])
		for j < len(msg) && isWordByte(msg[j]) == word {
			j++
		}
		tk := token{text: msg[i:j], word: word}
		// One trailing '.' or ':' closes a sentence or a label ("GPU 1:").
		if n := len(tk.text); word && n > 1 && (tk.text[n-1] == '.' || tk.text[n-1] == ':') {
			tk.text, tk.tail = tk.text[:n-1], tk.text[n-1:]
		}
		out = append(out, tk)
		i = j
	}
	return out
}

// foldUnits are the units a measured quantity is written in (case aside):
// a number with one, attached ("512MiB", "0.8s", "80%") or as the next
// word ("512 MiB"), is a figure and folds.
var foldUnits = words("b kb mb gb tb kib mib gib tib % ns us ms s sec secs second seconds m min mins minute minutes h hr hrs hour hours d day days")

// countWords are the things a number counts: "3 processes", "2 GPUs"
// ("GPU 2" is an index: its number is followed by something else).
var countWords = words("process processes proc procs holder holders gpu gpus unit units service services host hosts " +
	"row rows worker workers thread threads child children time times attempt attempts try tries retry retries " +
	"kill kills survivor survivors restart restarts line lines file files job jobs container containers pod pods " +
	"error errors warning warnings more left remaining pid pids signal signals stage stages step steps")

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// foldable says whether the number at toks[i] is a figure (a count, an
// amount of memory, a duration, a share): it has a unit, or the next word
// is a unit or a thing counted, or it is the first of a pair "80000 -> 3
// MiB" / "3/8 GPUs" whose second is a figure. Every other number is an
// identity (a pid, a GPU index, a job id) or unknown, and stays text: two
// lines that differ in one never gather.
func foldable(toks []token, i int) bool {
	_, unit, _ := splitNumber(toks[i].text)
	if unit != "" {
		return foldUnits[strings.ToLower(unit)]
	}
	// A field's value ("pid=4410", "used_mib=512") is a figure when its
	// key names a unit.
	if i >= 2 && !toks[i-1].word && strings.HasSuffix(toks[i-1].text, "=") && toks[i-2].word {
		key := strings.ToLower(toks[i-2].text)
		_, u, ok := strings.Cut(key, "_")
		for ok {
			key = u
			_, u, ok = strings.Cut(key, "_")
		}
		return key != toks[i-2].text && (foldUnits[key] || key == "pct" || key == "mib")
	}
	if toks[i].tail != "" {
		return false // "GPU 1:" or "GPU 1."
	}
	// The text up to the next word: a space ("512 MiB") or a pair's sign
	// ("80000 -> 3 MiB", "3/8 GPUs").
	j, sep := i+1, ""
	for j < len(toks) && (!toks[j].word || toks[j].text == "-" && toks[j].tail == "") {
		sep += toks[j].text
		j++
	}
	if j >= len(toks) {
		return false
	}
	next := toks[j]
	if strings.TrimSpace(sep) == "" {
		w := strings.ToLower(next.text)
		return foldUnits[w] || countWords[w]
	}
	if s := strings.TrimSpace(sep); s == "->" || s == "/" {
		if _, _, ok := splitNumber(next.text); ok {
			return foldable(toks, j)
		}
	}
	return false
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

// outputGroup is one distinct whole output (-b) and the
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

// headerRule frames a -b header, as clush -b draws it.
const headerRule = "---------------"

// hostsLabel is a node set, with the number of hosts when several.
func (p *Printer) hostsLabel(hosts []string) string {
	if len(hosts) == 1 {
		return p.o.Fold(hosts)
	}
	return fmt.Sprintf("%s (%d)", p.o.Fold(hosts), len(hosts))
}

// hostSeqs returns the hosts that printed lines, in natural order, and
// their lines (cut at their figures when fold is set). Callers hold p.mu.
func (p *Printer) hostSeqs(fold bool) ([]string, [][]hostLine) {
	hosts := make([]string, 0, len(p.events))
	for h := range p.events {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool { return naturalLess(hosts[i], hosts[j]) })
	seqs := make([][]hostLine, len(hosts))
	for i, h := range hosts {
		for _, e := range p.events[h] {
			seqs[i] = append(seqs[i], newHostLine(h, e.Level, e.Message, fold))
		}
	}
	return hosts, seqs
}

// printGathered prints what -b and --fold-numbers held back: with Gather
// each distinct whole output once under a header naming its hosts (as
// clush -b; with FoldNumbers, outputs that differ only in figures are
// one); with FoldNumbers alone each gathered line once, prefixed with its
// hosts, at its place in every host's order. Callers hold p.mu.
func (p *Printer) printGathered() {
	switch {
	case p.o.Gather:
		hosts, seqs := p.hostSeqs(p.o.FoldNumbers)
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
	case p.o.FoldNumbers:
		hosts, seqs := p.hostSeqs(true)
		for _, g := range mergeLines(hosts, seqs) {
			p.hostLines(p.hostsLabel(g.hosts), g.level, g.render())
		}
	}
}
