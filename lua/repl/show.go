package repl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/report"
	"github.com/gpush/gpush/termsafe"
)

// inlineMax is how long a table of scalars may be, as JSON, and still be
// shown inline after its hosts; a longer one is a row of a table.
const inlineMax = 100

// display is one evaluation laid out: fleet tables (named by the field of
// the result they come from; "" for results that are record lists), then
// the rest gathered by text.
type display struct {
	tables map[string][]report.Result
	inline []inlineItem
}

type inlineItem struct {
	host, text string
	color      string // "" plain, "31" an error, "35" interrupted
}

// tableName of a big table of scalars returned as a whole (one row a host).
const wholeRecord = "{}"

// layout sorts each host's result into tables or inline text.
func layout(rs []lua.EvalResult, timeout string) display {
	d := display{tables: map[string][]report.Result{}}
	addRows := func(name, host string, list []any) {
		d.tables[name] = append(d.tables[name], report.Result{Host: host, Status: report.StatusOK, Value: flatRecords(list)})
	}
	for _, x := range rs {
		if x.Err != nil {
			var intr *lua.Interrupted
			switch {
			case errors.As(x.Err, &intr) && errors.Is(x.Err, context.DeadlineExceeded) && timeout != "":
				d.inline = append(d.inline, inlineItem{x.Host, "error: timed out after " + timeout, "31"})
			case errors.As(x.Err, &intr):
				d.inline = append(d.inline, inlineItem{x.Host, "interrupted", "35"})
			default:
				d.inline = append(d.inline, inlineItem{x.Host, "error: " + x.Err.Error(), "31"})
			}
			continue
		}
		if len(x.Values) != 1 {
			if t := lua.FormatValues(x.Values); t != "" {
				d.inline = append(d.inline, inlineItem{x.Host, t, ""})
			}
			continue
		}
		switch v := x.Values[0].(type) {
		case []any:
			if isRecordList(v) {
				addRows("", x.Host, v)
				continue
			}
		case map[string]any:
			rest := map[string]any{}
			for k, f := range v {
				if list, ok := f.([]any); ok && isRecordList(list) {
					addRows(k, x.Host, list)
					continue
				}
				rest[k] = f
			}
			if len(rest) == 0 {
				continue
			}
			if text := lua.FormatValues([]any{rest}); len(text) > inlineMax && len(rest) == len(v) {
				addRows(wholeRecord, x.Host, []any{rest})
			} else {
				d.inline = append(d.inline, inlineItem{x.Host, text, ""})
			}
			continue
		}
		if t := lua.FormatValues(x.Values); t != "" {
			d.inline = append(d.inline, inlineItem{x.Host, t, ""})
		}
	}
	return d
}

// isRecordList: a non-empty list of non-empty tables with string keys
// (holders, kill results, mem rows).
func isRecordList(list []any) bool {
	if len(list) == 0 {
		return false
	}
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok || len(m) == 0 {
			return false
		}
	}
	return true
}

// flatRecords makes every field a cell: lists of scalars joined with
// commas ("0,2"), tables of scalars as k=v pairs, deeper data as JSON.
func flatRecords(list []any) []any {
	out := make([]any, len(list))
	for i, e := range list {
		m := e.(map[string]any)
		flat := make(map[string]any, len(m))
		for k, v := range m {
			flat[k] = flatCell(v)
		}
		out[i] = flat
	}
	return out
}

func flatCell(v any) any {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			if !isScalar(e) {
				return compactJSON(v)
			}
			parts[i] = lua.FormatValues([]any{e})
		}
		return strings.Join(parts, ",")
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k, e := range x {
			if !isScalar(e) {
				return compactJSON(v)
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + lua.FormatValues([]any{x[k]})
		}
		return strings.Join(parts, ",")
	}
	return v
}

func isScalar(v any) bool {
	switch v.(type) {
	case nil, bool, string, float64, int, int64:
		return true
	}
	return false
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// show prints one evaluation.
func (r *repl) show(rs []lua.EvalResult) {
	for _, x := range rs {
		if x.Err != nil {
			r.mu.Lock()
			r.failed = true
			r.mu.Unlock()
		}
	}
	timeout := ""
	if r.cfg.Timeout > 0 {
		timeout = r.cfg.Timeout.String()
	}
	d := layout(rs, timeout)
	names := make([]string, 0, len(d.tables))
	for n := range d.tables {
		if n != "" && n != wholeRecord {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range append([]string{"", wholeRecord}, names...) {
		t := report.FleetTable(d.tables[n], inventory.FoldNodeSet)
		if t == nil {
			continue
		}
		if n != "" && n != wholeRecord {
			r.scr.line(r.scr.out.Paint("1", n+":"))
		}
		notes := fit(t, r.width)
		var b bytes.Buffer
		t.Write(&b)
		for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
			r.scr.line(termsafe.Data(l))
		}
		for _, note := range notes {
			r.scr.line(r.scr.out.Paint("2", note))
		}
	}
	for _, g := range gather(d.inline) {
		hosts := termsafe.Join(r.scr.out.Paint("1", inventory.FoldNodeSet(g.hosts)), termsafe.Data(":"))
		// A value of several lines (a file, a tool's output) shows as lines
		// under its hosts; each line is sanitized on its own.
		lines := strings.Split(strings.TrimRight(g.text, "\n"), "\n")
		text := func(l string) termsafe.Safe {
			if g.color != "" {
				return r.scr.out.Paint(g.color, l)
			}
			return termsafe.Block(l) // tabs between values stay
		}
		if len(lines) == 1 {
			r.scr.line(hosts, termsafe.Data(" "), text(lines[0]))
			continue
		}
		r.scr.line(hosts)
		for _, l := range lines {
			r.scr.line(text(l))
		}
	}
}

type inlineGroup struct {
	hosts       []string
	text, color string
}

// hostMark stands for a host's own name in an error gathered across hosts.
const hostMark = "<host>"

// gather groups equal texts (errors apart from values) in first-seen order.
// Errors that differ only by the host's own name ("lab01: probe: ...") are
// one group, the name shown as <host>; values never are (host.name must
// show each name).
func gather(items []inlineItem) []inlineGroup {
	var out []inlineGroup
	idx := map[string]int{}
	for _, it := range items {
		text := it.text
		if it.color == "31" {
			text = maskHost(text, it.host)
		}
		k := it.color + "\x00" + text
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, inlineGroup{text: it.text, color: it.color})
		}
		out[i].hosts = append(out[i].hosts, it.host)
		if len(out[i].hosts) == 2 {
			out[i].text = text // more than one host: the masked form
		}
	}
	return out
}

// maskHost replaces host where it stands as a name of its own (not inside
// a longer name: lab1 in lab10 stays).
func maskHost(s, host string) string {
	if host == "" {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, host)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(host)
		if (i == 0 || !nameByte(s[i-1])) && (end == len(s) || !nameByte(s[end])) {
			b.WriteString(s[:i])
			b.WriteString(hostMark)
		} else {
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
}

func nameByte(c byte) bool {
	return c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// minCell is the narrowest a cut column gets.
const minCell = 12

// fit narrows t to width columns (0: no limit): columns equal in every row
// move to a note under the table, then the widest cells are cut ("…"),
// their column named in a note. Nothing is dropped silently.
func fit(t *report.Table, width int) []string {
	if width <= 0 || tableWidth(t) <= width {
		return nil
	}
	var notes []string
	if len(t.Rows) > 1 {
		var same []string
		for i := len(t.Columns) - 1; i >= 1; i-- {
			v, ok := constant(t, i)
			if !ok {
				continue
			}
			same = append([]string{t.Columns[i] + "=" + v}, same...)
			t.Columns = append(t.Columns[:i:i], t.Columns[i+1:]...)
			for j, row := range t.Rows {
				if i < len(row) {
					t.Rows[j] = append(row[:i:i], row[i+1:]...)
				}
			}
		}
		if len(same) > 0 {
			notes = append(notes, "every row: "+strings.Join(same, "  "))
		}
	}
	var cut []string
	// Bounded: a cell of escaped control characters may not shrink by a
	// cut of its runes.
	for round := 0; round < 4*len(t.Columns) && tableWidth(t) > width; round++ {
		// The widest column that can still give: never below its header or
		// minCell, and never the host column.
		widths := colWidths(t)
		wide, floor := -1, 0
		for i := 1; i < len(widths); i++ {
			f := max(minCell, utf8.RuneCountInString(termsafe.String(t.Columns[i])))
			if widths[i] > f && (wide < 0 || widths[i] > widths[wide]) {
				wide, floor = i, f
			}
		}
		if wide < 0 {
			break // every column is as narrow as it gets
		}
		limit := max(floor, widths[wide]-(tableWidth(t)-width))
		for _, row := range t.Rows {
			// Cut what will show: the cell escaped (Write's escaping of it
			// again changes nothing, it is printable).
			if wide >= len(row) {
				continue
			}
			// As gpush run cuts: a command line keeps its program and script.
			if c := termsafe.String(row[wide]); utf8.RuneCountInString(c) > limit {
				row[wide] = report.Shorten(c, limit)
			}
		}
		if len(cut) == 0 || cut[len(cut)-1] != t.Columns[wide] {
			cut = append(cut, t.Columns[wide])
		}
	}
	if len(cut) > 0 {
		notes = append(notes, "cut to fit the terminal: "+strings.Join(cut, ", ")+" (return the fields you need to see them whole)")
	}
	return notes
}

// constant reports whether column i holds the same non-empty cell in every
// row.
func constant(t *report.Table, i int) (string, bool) {
	var v string
	for j, row := range t.Rows {
		c := ""
		if i < len(row) {
			c = row[i]
		}
		if j == 0 {
			v = c
		} else if c != v {
			return "", false
		}
	}
	return v, v != ""
}

func colWidths(t *report.Table) []int {
	w := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		w[i] = utf8.RuneCountInString(termsafe.String(c))
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

func tableWidth(t *report.Table) int {
	n := 0
	for _, w := range colWidths(t) {
		n += w + 2
	}
	return n - 2
}
