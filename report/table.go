package report

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpush/gpush/termsafe"
)

// Table is a fleet table: one header, rows of cells.
type Table struct {
	Columns []string
	Rows    [][]string
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
}

// columnOrder puts the columns the library's scripts return in a readable
// order (identity first, long free text last); Lua tables carry no order.
var columnOrder = []string{"gpu", "index", "pid", "ppid", "user", "comm", "name", "service",
	"step", "freed", "state", "used_mib", "total_mib", "before_mib", "after_mib", "mem_mib",
	"gpus", "owner", "age", "protected"}

var lastColumns = []string{"holders", "reason", "error"}

// FleetTable gathers the rows of every host whose value is a list of flat
// records into one table with a leading host column. Rows that are equal on
// several hosts are folded into one row naming the node set. It returns nil
// when no host returned records.
func FleetTable(rs []Result, fold func([]string) string) *Table {
	if fold == nil {
		fold = func(h []string) string { return strings.Join(h, ",") }
	}
	sorted := append([]Result(nil), rs...)
	sort.SliceStable(sorted, func(i, j int) bool { return naturalLess(sorted[i].Host, sorted[j].Host) })
	type hostRows struct {
		host string
		recs []map[string]any
	}
	var all []hostRows
	cols := map[string]bool{}
	for _, r := range sorted {
		list, ok := r.Value.([]any)
		if !ok || len(list) == 0 {
			continue
		}
		recs, ok := records(list)
		if !ok {
			continue
		}
		for _, rec := range recs {
			for k := range rec {
				cols[k] = true
			}
		}
		all = append(all, hostRows{r.Host, recs})
	}
	if len(all) == 0 {
		return nil
	}
	var order []string
	for _, c := range columnOrder {
		if cols[c] {
			order = append(order, c)
			delete(cols, c)
		}
	}
	var tail []string
	for _, c := range lastColumns {
		if cols[c] {
			tail = append(tail, c)
			delete(cols, c)
		}
	}
	order = append(append(order, sortedKeys(cols)...), tail...)

	// Fold equal rows: the key is the cells, the hosts keep first-seen order.
	type folded struct {
		hosts []string
		cells []string
	}
	var out []*folded
	idx := map[string]*folded{}
	for _, hr := range all {
		for _, rec := range hr.recs {
			cells := make([]string, len(order))
			for i, c := range order {
				if v, ok := rec[c]; ok {
					cells[i] = cellString(v)
				}
			}
			k := strings.Join(cells, "\x00")
			f := idx[k]
			if f == nil {
				f = &folded{cells: cells}
				idx[k] = f
				out = append(out, f)
			}
			if len(f.hosts) == 0 || f.hosts[len(f.hosts)-1] != hr.host {
				f.hosts = append(f.hosts, hr.host)
			}
		}
	}
	t := &Table{Columns: append([]string{"host"}, order...)}
	for _, f := range out {
		t.Rows = append(t.Rows, append([]string{fold(f.hosts)}, f.cells...))
	}
	return t
}

// IsRecords reports whether v is what FleetTable shows as rows: a non-empty
// list of non-empty tables of scalars.
func IsRecords(v any) bool {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return false
	}
	_, ok = records(list)
	return ok
}

// records returns the list as flat records, or false when an element is not
// a table of scalars.
func records(list []any) ([]map[string]any, bool) {
	out := make([]map[string]any, 0, len(list))
	for _, v := range list {
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 || !isFlat(m) {
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
	default:
		return fmt.Sprint(x)
	}
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
