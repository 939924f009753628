package report

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/gpush/gpush/termsafe"
)

// DefaultTableWidth is how wide a fleet table may be when stdout is not a
// terminal (a pipe, a file, a CI log).
const DefaultTableWidth = 120

// minCell is the narrowest a cut column gets (its header, when wider).
const minCell = 12

// Fit cuts t's widest cells until the table fits width columns (width <=
// 0: no limit). The host column is never cut; the others are cut to one
// cap, the narrowest that still fits, but never below their header or
// minCell. A cut cell keeps its start: in a command line, each path but
// its last element goes first ("python3 …/train.py --lr 0.1" from
// "/usr/bin/python3 /opt/jobs/a/train.py ..."), so argv[0] and the script
// name stay; then the end goes ("…"). A note under the table names the
// columns cut.
func (t *Table) Fit(width int) {
	if width <= 0 || len(t.Columns) < 2 {
		return
	}
	// Cut what will show: each cell as Write escapes it (escaping the
	// result again changes nothing, it is printable).
	for _, r := range t.Rows {
		for i, c := range r {
			r[i] = termsafe.String(c)
		}
	}
	widths := colWidths(t)
	if tableWidth(widths) <= width {
		return
	}
	floors := make([]int, len(widths))
	for i, c := range t.Columns {
		floors[i] = max(minCell, utf8.RuneCountInString(termsafe.String(strings.ToUpper(c))))
	}
	capped := func(limit int) []int {
		w := append([]int(nil), widths...)
		for i := 1; i < len(w); i++ {
			w[i] = min(w[i], max(limit, floors[i]))
		}
		return w
	}
	// The widest cap that fits (or the floors, when nothing does).
	limit := 0
	for lo, hi := 1, maxInt(widths); lo <= hi; {
		mid := (lo + hi) / 2
		if tableWidth(capped(mid)) <= width {
			limit, lo = mid, mid+1
		} else {
			hi = mid - 1
		}
	}
	var cut []string
	for i := 1; i < len(widths); i++ {
		lim := max(limit, floors[i])
		if widths[i] <= lim {
			continue
		}
		for _, r := range t.Rows {
			if i < len(r) {
				r[i] = Shorten(r[i], lim)
			}
		}
		cut = append(cut, strings.ToUpper(t.Columns[i]))
	}
	if len(cut) > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("cut to %d columns: %s (--wide: every cell whole; --json: every value exact)",
			width, strings.Join(cut, ", ")))
	}
}

// Shorten cuts s to at most n runes: first every path in it loses its
// folders, longest first, to "…/" and its last element, until s fits; then
// its end goes, marked "…". A command line keeps its program and its
// script: "python3 …/train.py --lr…".
func Shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	fields := strings.Split(s, " ")
	for utf8.RuneCountInString(strings.Join(fields, " ")) > n {
		best, gain := -1, 0
		for i, f := range fields {
			if short := shortPath(f); len(f)-len(short) > gain {
				best, gain = i, len(f)-len(short)
			}
		}
		if best < 0 {
			break
		}
		fields[best] = shortPath(fields[best])
	}
	s = strings.Join(fields, " ")
	if r := []rune(s); len(r) > n {
		return string(r[:max(n-1, 0)]) + "…"
	}
	return s
}

// shortPath is a word whose path ("/opt/jobs/a/train.py", within quotes or
// brackets too) keeps only its last element: "…/train.py". A word with no
// folder to drop is itself.
func shortPath(w string) string {
	start := strings.IndexAny(w, "/")
	if start < 0 {
		return w
	}
	// The path starts after any opening punctuation: "(/usr/bin/x".
	for start > 0 && !strings.ContainsAny(w[start-1:start], "([{'\"=:,") {
		start--
	}
	end := len(w)
	for end > start && strings.ContainsAny(w[end-1:end], ")]}'\",;") {
		end--
	}
	p := w[start:end]
	base := path.Base(p)
	if base == "." || base == "/" || strings.HasSuffix(p, "/") {
		return w
	}
	short := "…/" + base
	if len(short) >= len(p) {
		return w
	}
	return w[:start] + short + w[end:]
}

func colWidths(t *Table) []int {
	w := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		w[i] = utf8.RuneCountInString(termsafe.String(strings.ToUpper(c)))
	}
	for _, row := range t.Rows {
		for i, c := range row {
			if i < len(w) {
				w[i] = max(w[i], utf8.RuneCountInString(termsafe.String(c)))
			}
		}
	}
	return w
}

func tableWidth(widths []int) int {
	n := 0
	for _, w := range widths {
		n += w + 2
	}
	return n - 2
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
