package lua

import (
	"fmt"
	"strings"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

// ender is fail() or skip(): fail(fmt, ...[, rows]) ends the host as failed,
// skip(fmt, ...[, rows]) as skipped (left alone on purpose: a drain refused
// on a busy host). A last argument that is a list of tables (or {}) is not
// a format argument but rows for the fleet table, kept with the host's
// outcome; the message is formatted as string.format would from the rest.
func ender(h *hostState, status string) glua.LGFunction {
	name := "fail"
	if status == StatusSkipped {
		name = "skip"
	}
	return func(L *glua.LState) int {
		if top := L.GetTop(); top >= 2 {
			if t, ok := L.Get(top).(*glua.LTable); ok && isRowList(t) {
				recordRows(L, h, name, t)
				L.SetTop(top - 1)
			}
		}
		at := strings.TrimSuffix(L.Where(1), ":") + ": "
		var msg string
		switch v := L.Get(1); {
		case isMessage(v) || v.Type() == glua.LTNumber:
			msg = luaconv.Format(L, 1)
		case L.GetTop() > 0:
			// fail(r.reason) with no reason, fail({code = 42}): the value
			// as written, and where the script gave it.
			msg = at + name + "(" + Literal(v) + ")"
		}
		if msg == "" {
			msg = at + name + "() called"
		}
		msg = strings.TrimPrefix(msg, ": ")
		h.setEnd(status, msg)
		L.Error(glua.LString(msg), 0)
		return 0
	}
}

// isRowList: t is a list whose every element is a table (or empty).
func isRowList(t *glua.LTable) bool {
	ok := true
	n := 0
	t.ForEach(func(k, v glua.LValue) {
		n++
		if _, isNum := k.(glua.LNumber); !isNum {
			ok = false
		}
		if _, isTbl := v.(*glua.LTable); !isTbl {
			ok = false
		}
	})
	return ok && n == t.Len()
}

// recordRows converts and records each table of list as a row, raising a
// Lua error naming fn and the row when one does not convert.
func recordRows(L *glua.LState, h *hostState, fn string, list *glua.LTable) {
	n := list.Len()
	rows := make([]any, 0, n)
	for i := 1; i <= n; i++ {
		rows = append(rows, checkRow(L, fn, fmt.Sprintf("row %d", i), list.RawGetInt(i)))
	}
	if err := h.addRows(rows...); err != nil {
		L.RaiseError("%s: %v", fn, err)
	}
}

// checkRow converts one row; a row is a table of fields.
func checkRow(L *glua.LState, fn, what string, lv glua.LValue) any {
	if _, ok := lv.(*glua.LTable); !ok {
		L.RaiseError("%s: %s: want a table of fields, got %s", fn, what, lv.Type())
	}
	v, err := luaconv.FromLua(lv)
	if err != nil {
		L.RaiseError("%s: %s: %v", fn, what, err)
	}
	if _, ok := v.(map[string]any); !ok {
		// An empty table converts to an empty list; anything else that is
		// not a record is refused rather than shown as garbage.
		if l, isList := v.([]any); !isList || len(l) > 0 {
			L.RaiseError("%s: %s: want a table of named fields ({gpu = 0, state = \"free\"}), got a list", fn, what)
		}
		v = map[string]any{}
	}
	return v
}

// reportTable is the `report` global: rows recorded as the script builds
// them survive whatever ends the host (fail, an error, --timeout, Ctrl-C),
// and the script's choice of table columns.
//
//	report.row{gpu = 0, state = "free"}  -- one row
//	report.rows(list)                    -- each table of a list
//	report.columns{"gpu", "state", "..."} -- these first, in this order; "..." the others after
func reportTable(L *glua.LState, h *hostState) *glua.LTable {
	return modules.FuncTable(L, map[string]glua.LGFunction{
		"row": func(L *glua.LState) int {
			row := checkRow(L, "report.row", "argument", L.CheckAny(1))
			if err := h.addRows(row); err != nil {
				L.RaiseError("report.row: %v", err)
			}
			return 0
		},
		"rows": func(L *glua.LState) int {
			recordRows(L, h, "report.rows", L.CheckTable(1))
			return 0
		},
		"columns": func(L *glua.LState) int {
			cols, err := luaconv.StringList(L.CheckTable(1))
			if err != nil {
				L.ArgError(1, "report.columns: "+err.Error())
			}
			if len(cols) == 0 {
				L.ArgError(1, "report.columns: empty list (leave the call out for the default columns)")
			}
			seen := map[string]bool{}
			for i, c := range cols {
				if c == "" || seen[c] {
					L.ArgError(1, fmt.Sprintf("report.columns: column %d: %q is empty or given twice", i+1, c))
				}
				seen[c] = true
			}
			h.setColumns(cols)
			return 0
		},
	})
}
