package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpush/gpush/termsafe"
)

// Table is a fleet table: one header, rows of cells, and notes printed
// under it (how many rows were folded).
type Table struct {
	Columns []string
	Rows    [][]string
	Notes   []string
}

// Write prints the table with aligned columns, every cell sanitized for
// the terminal (cells are the hosts' data: process names, command lines).
func (t *Table) Write(w io.Writer) {
	tw := termsafe.NewWriter(w, false)
	header := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		header[i] = termsafe.String(strings.ToUpper(c))
	}
	rows := make([][]string, len(t.Rows))
	for j, r := range t.Rows {
		rows[j] = make([]string, len(r))
		for i, c := range r {
			rows[j][i] = termsafe.String(c)
		}
	}
	// Widths in runes, as fmt pads, measured after escaping.
	widths := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i == len(cells)-1 || i >= len(widths) {
				b.WriteString(c)
				break
			}
			fmt.Fprintf(&b, "%-*s  ", widths[i], c)
		}
		tw.Line(termsafe.Data(strings.TrimRight(b.String(), " ")))
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	for _, n := range t.Notes {
		tw.Line(termsafe.Block(n))
	}
}

// columnOrder puts the columns the library's scripts return in a readable
// order (identity first, long free text last); Lua tables carry no order.
var columnOrder = []string{"gpu", "index", "pid", "ppid", "user", "comm", "name", "service",
	"step", "freed", "state", "used_mib", "total_mib", "before_mib", "after_mib", "mem_mib",
	"gpus", "owner", "age", "protected"}

var lastColumns = []string{"holders", "reason", "error"}

// CountColumn heads the column that says how many hosts a folded group holds.
const CountColumn = "#"

// RestColumns, as the last entry of a script's columns, adds the columns it
// did not name after those it did, in the default order.
const RestColumns = "..."

// hostRecords are the rows a host produced: those recorded (Rows), then
// those it returned (Value, when a list of records). A recorded row that is
// not a record is kept as a "value" cell rather than dropped.
func hostRecords(r Result) []map[string]any {
	var out []map[string]any
	for _, v := range r.Rows {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			out = append(out, m)
		} else {
			out = append(out, map[string]any{"value": v})
		}
	}
	if list, ok := r.Value.([]any); ok && len(list) > 0 {
		if recs, ok := records(list); ok {
			out = append(out, recs...)
		}
	}
	return out
}

// FleetTable gathers the rows of every host (see the package doc) into one
// table with a leading host column, hosts in natural order. It returns nil
// when no host produced a row.
func FleetTable(rs []Result, fold func([]string) string) *Table {
	if fold == nil {
		fold = func(h []string) string { return strings.Join(h, ",") }
	}
	sorted := append([]Result(nil), rs...)
	sort.SliceStable(sorted, func(i, j int) bool { return naturalLess(sorted[i].Host, sorted[j].Host) })
	type hostRows struct {
		host, status string
		recs         []map[string]any
	}
	var all []hostRows
	keys := map[string]bool{}
	var chosen []string // the scripts' columns, first-seen order
	inChosen := map[string]bool{}
	rest := false
	for _, r := range sorted {
		recs := hostRecords(r)
		if len(recs) == 0 {
			continue
		}
		for _, rec := range recs {
			for k := range rec {
				keys[k] = true
			}
		}
		for _, c := range r.Columns {
			if c == RestColumns {
				rest = true
			} else if !inChosen[c] {
				inChosen[c] = true
				chosen = append(chosen, c)
			}
		}
		all = append(all, hostRows{r.Host, r.Status, recs})
	}
	if len(all) == 0 {
		return nil
	}
	order := chosen
	if len(chosen) == 0 || rest {
		for c := range inChosen {
			delete(keys, c)
		}
		order = append(order, defaultOrder(keys)...)
	}
	cell := cellRenderer(func(yield func(map[string]any)) {
		for _, hr := range all {
			for _, rec := range hr.recs {
				yield(rec)
			}
		}
	})

	// Fold hosts whose rows are all the same, volatile columns aside (each
	// then shows its range); a host's rows stay together.
	vol := make([]bool, len(order))
	for i, c := range order {
		vol[i] = volatileColumns[strings.ToLower(c)]
	}
	type group struct {
		hosts  []string
		status string
		rows   [][]string
		vals   [][][]string // vals[row][col]: the hosts' cells of a volatile column
	}
	var groups []*group
	idx := map[string]*group{}
	notOK := false
	nrows := 0
	for _, hr := range all {
		rows := make([][]string, len(hr.recs))
		var key strings.Builder
		key.WriteString(hr.status)
		for j, rec := range hr.recs {
			rows[j] = make([]string, len(order))
			for i, c := range order {
				rows[j][i] = cell(c, rec)
				key.WriteString("\x01")
				if !vol[i] {
					key.WriteString(rows[j][i])
				}
			}
			key.WriteString("\x02")
		}
		nrows += len(rows)
		notOK = notOK || hr.status != StatusOK && hr.status != ""
		g := idx[key.String()]
		if g == nil {
			g = &group{status: hr.status, rows: rows, vals: make([][][]string, len(rows))}
			for j := range rows {
				g.vals[j] = make([][]string, len(order))
			}
			idx[key.String()] = g
			groups = append(groups, g)
		}
		for j, r := range rows {
			for i := range order {
				if vol[i] {
					g.vals[j][i] = append(g.vals[j][i], r[i])
				}
			}
		}
		g.hosts = append(g.hosts, hr.host)
	}
	var ranged []string
	for _, g := range groups {
		for j, r := range g.rows {
			for i, c := range order {
				if vol[i] {
					var wide bool
					if r[i], wide = cellRange(g.vals[j][i]); wide && !slices.Contains(ranged, c) {
						ranged = append(ranged, c)
					}
				}
			}
		}
	}
	folded := len(groups) < len(all)
	cols := []string{"host"}
	if folded {
		cols = append(cols, CountColumn)
	}
	if notOK {
		cols = append(cols, "status")
	}
	for _, c := range order {
		if slices.Contains(cols, strings.ToLower(c)) {
			// A record's own "host" or "status" is not the table's.
			c = "row." + c
		}
		cols = append(cols, c)
	}
	t := &Table{Columns: cols}
	shown := 0
	for _, g := range groups {
		lead := []string{fold(g.hosts)}
		if folded {
			lead = append(lead, strconv.Itoa(len(g.hosts)))
		}
		if notOK {
			lead = append(lead, g.status)
		}
		for _, r := range g.rows {
			t.Rows = append(t.Rows, append(append([]string(nil), lead...), r...))
			shown++
		}
	}
	if folded {
		t.Notes = append(t.Notes, fmt.Sprintf("%d rows of %d hosts shown as %d: hosts with the same rows are one group (#: its hosts)",
			nrows, len(all), shown))
	}
	if len(ranged) > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%s: lowest..highest of the group (it changes by the moment: hosts differing only there are one group)",
			strings.Join(upper(ranged), ", ")))
	}
	for _, c := range order {
		for _, m := range columnMarks[strings.ToLower(c)] {
			if columnHas(t, c, m.mark) {
				t.Notes = append(t.Notes, fmt.Sprintf("%s %s: %s", strings.ToUpper(c), m.mark, m.means))
			}
		}
	}
	return t
}

// volatileColumns change from moment to moment on a host that does not
// change (how long a process has run, how long a step took): hosts whose
// rows differ only there fold, the cell showing the group's range.
var volatileColumns = map[string]bool{"age": true, "age_s": true, "elapsed": true, "elapsed_s": true,
	"waited_s": true, "uptime": true, "took": true}

// columnMarks are the marks the library's scripts put in a column's cells,
// explained under a table that shows one.
var columnMarks = map[string][]struct{ mark, means string }{
	"holders": {{"*", "owns GPU memory or a compute context (a free kills it first); unmarked: only has the device open"}},
}

// columnHas reports whether a cell of column c holds mark.
func columnHas(t *Table, c, mark string) bool {
	i := slices.Index(t.Columns, c)
	if i < 0 {
		return false
	}
	for _, r := range t.Rows {
		if i < len(r) && strings.Contains(r[i], mark) {
			return true
		}
	}
	return false
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}

// cellRange shows a volatile column's cells of one group: the cell when
// they are all the same, else "lowest..highest" (durations such as "1m30s"
// and numbers by value, other text in byte order); wide says the cells
// differed.
func cellRange(cells []string) (string, bool) {
	if len(cells) == 0 {
		return "", false
	}
	lo, hi := cells[0], cells[0]
	for _, c := range cells[1:] {
		if cellLess(c, lo) {
			lo = c
		}
		if cellLess(hi, c) {
			hi = c
		}
	}
	if lo == hi {
		return lo, false
	}
	return lo + ".." + hi, true
}

func cellLess(a, b string) bool {
	x, okA := cellValue(a)
	y, okB := cellValue(b)
	if okA && okB {
		return x < y
	}
	return a < b
}

// cellValue reads a number or a duration as util.format_duration and Go
// write it ("250ms", "45s", "1m30s", "3d4h").
func cellValue(s string) (float64, bool) {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		return v, true
	}
	units := map[string]float64{"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}
	total, rest := 0.0, s
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		j := i
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.') {
			j++
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		u, ok := units[rest[i:j]]
		if err != nil || !ok {
			return 0, false
		}
		total += n * u
		rest = rest[j:]
	}
	return total, s != ""
}

// defaultOrder is the library's columns first, the others alphabetically,
// the long free text last.
func defaultOrder(keys map[string]bool) []string {
	keys = maps.Clone(keys)
	var order []string
	for _, c := range columnOrder {
		if keys[c] {
			order = append(order, c)
			delete(keys, c)
		}
	}
	var tail []string
	for _, c := range lastColumns {
		if keys[c] {
			tail = append(tail, c)
			delete(keys, c)
		}
	}
	return append(append(order, sortedKeys(keys)...), tail...)
}

// Kinds of cell values, for telling them apart in a mixed column.
const (
	kindString = iota
	kindNumber
	kindBool
	kindJSON
)

func kindOf(v any) int {
	switch v.(type) {
	case string:
		return kindString
	case bool:
		return kindBool
	case float64, float32, int, int64, int32, uint64:
		return kindNumber
	}
	return kindJSON
}

// cellRenderer returns how to show a record's value of a column: strings as
// they are, except in a column that also holds other kinds, where a string
// that would read as one of them (or is empty) is quoted.
func cellRenderer(each func(func(map[string]any))) func(col string, rec map[string]any) string {
	kinds := map[string]map[int]bool{}
	each(func(rec map[string]any) {
		for k, v := range rec {
			if v == nil {
				continue
			}
			if kinds[k] == nil {
				kinds[k] = map[int]bool{}
			}
			kinds[k][kindOf(v)] = true
		}
	})
	return func(col string, rec map[string]any) string {
		v, ok := rec[col]
		if !ok || v == nil {
			return ""
		}
		s := cellString(v)
		if str, isStr := v.(string); isStr && len(kinds[col]) > 1 && ambiguous(str, kinds[col]) {
			return strconv.Quote(str)
		}
		return s
	}
}

// ambiguous: s, shown bare, could be read as a value of another kind the
// column holds (or as a missing one).
func ambiguous(s string, kinds map[int]bool) bool {
	t := strings.TrimSpace(s)
	switch {
	case t == "" || t != s:
		return true
	case kinds[kindNumber]:
		if _, err := strconv.ParseFloat(t, 64); err == nil {
			return true
		}
	}
	if kinds[kindBool] && (t == "true" || t == "false") {
		return true
	}
	return kinds[kindJSON] && (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") || t == "null")
}

// IsRecords reports whether v is what FleetTable shows as rows: a non-empty
// list of non-empty tables (values that are tables show as compact JSON).
func IsRecords(v any) bool {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return false
	}
	_, ok = records(list)
	return ok
}

// records returns the list as records, or false when an element is not a
// non-empty table with string keys.
func records(list []any) ([]map[string]any, bool) {
	out := make([]map[string]any, 0, len(list))
	for _, v := range list {
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			return nil, false
		}
		out = append(out, m)
	}
	return out, true
}

func isFlat(m map[string]any) bool {
	for _, v := range m {
		switch v.(type) {
		case nil, bool, string, float64, float32, int, int64, int32, uint64:
		default:
			return false
		}
	}
	return true
}

func cellString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return cellString(float64(x))
	case bool, int, int64, int32, uint64:
		return fmt.Sprint(x)
	case map[string]any:
		if l, ok := x["label"].(string); ok {
			return l
		}
	case []any:
		if labels, ok := labelList(x); ok {
			return labels
		}
	}
	return compactJSON(v)
}

// labelList shows a list of objects that carry a "label" (holders,
// managers) as their labels, comma-separated; an empty list is an empty
// cell. --json keeps the objects whole.
func labelList(list []any) (string, bool) {
	labels := make([]string, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return "", false
		}
		if labels[i], ok = m["label"].(string); !ok {
			return "", false
		}
	}
	return strings.Join(labels, ", "), true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// naturalLess orders "gpu2" before "gpu10".
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitsPrefix(a), digitsPrefix(b)
		if da > 0 && db > 0 {
			na, _ := strconv.ParseUint(a[:da], 10, 64)
			nb, _ := strconv.ParseUint(b[:db], 10, 64)
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitsPrefix(s string) int {
	n := 0
	for n < len(s) && n < 18 && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// CellText is a value as a fleet table cell shows it: text as it is,
// numbers without a needless decimal part, an object with a "label" (a
// holder, a manager) as its label and a list of them as their labels
// joined by ", ", other tables as compact JSON.
func CellText(v any) string { return cellString(v) }
