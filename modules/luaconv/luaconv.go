// Package luaconv converts between Go and Lua values and checks the
// arguments of module functions. Every module uses it, so that a number, a
// duration or an options table reads the same everywhere.
package luaconv

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	glua "github.com/yuin/gopher-lua"
)

// ToLua converts a Go value to Lua: nil, bool, strings, numbers, slices and
// maps become nil, booleans, strings, numbers and tables; anything else
// (structs) goes through its JSON form.
func ToLua(L *glua.LState, v any) glua.LValue {
	switch x := v.(type) {
	case nil:
		return glua.LNil
	case glua.LValue:
		return x
	case bool:
		return glua.LBool(x)
	case string:
		return glua.LString(x)
	case []byte:
		return glua.LString(x)
	case int:
		return glua.LNumber(x)
	case int64:
		return glua.LNumber(x)
	case int32:
		return glua.LNumber(x)
	case uint64:
		return glua.LNumber(x)
	case uint32:
		return glua.LNumber(x)
	case uint:
		return glua.LNumber(x)
	case float64:
		return glua.LNumber(x)
	case float32:
		return glua.LNumber(x)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return glua.LString(x)
		}
		return glua.LNumber(f)
	case time.Duration:
		return glua.LNumber(x.Seconds())
	case []any:
		t := L.CreateTable(len(x), 0)
		for i, e := range x {
			t.RawSetInt(i+1, ToLua(L, e)) // by index: Append skips nil and would shift the rest
		}
		return t
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, e := range x {
			t.RawSetString(k, ToLua(L, e))
		}
		return t
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		t := L.CreateTable(rv.Len(), 0)
		for i := 0; i < rv.Len(); i++ {
			t.RawSetInt(i+1, ToLua(L, rv.Index(i).Interface()))
		}
		return t
	case reflect.Map:
		t := L.CreateTable(0, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			t.RawSet(ToLua(L, iter.Key().Interface()), ToLua(L, iter.Value().Interface()))
		}
		return t
	case reflect.Pointer:
		if rv.IsNil() {
			return glua.LNil
		}
		return ToLua(L, rv.Elem().Interface())
	case reflect.String:
		return glua.LString(rv.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return glua.LNumber(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return glua.LNumber(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return glua.LNumber(rv.Float())
	case reflect.Bool:
		return glua.LBool(rv.Bool())
	}
	b, err := json.Marshal(v)
	if err != nil {
		return glua.LString(fmt.Sprint(v))
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		return glua.LString(fmt.Sprint(v))
	}
	return ToLua(L, generic)
}

// FromLua converts a Lua value to Go: nil, bool, string, float64,
// []any (a table whose keys are exactly 1..n, and the empty table) or
// map[string]any (any other table; number keys are written as numbers).
// Functions, userdata, threads and cyclic tables are errors.
func FromLua(lv glua.LValue) (any, error) {
	return fromLua(lv, map[*glua.LTable]bool{}, "value")
}

func fromLua(lv glua.LValue, seen map[*glua.LTable]bool, where string) (any, error) {
	switch x := lv.(type) {
	case *glua.LNilType:
		return nil, nil
	case glua.LBool:
		return bool(x), nil
	case glua.LString:
		return string(x), nil
	case glua.LNumber:
		return float64(x), nil
	case *glua.LTable:
		if seen[x] {
			return nil, fmt.Errorf("%s: table contains itself", where)
		}
		seen[x] = true
		defer delete(seen, x)
		if n, ok := isList(x); ok {
			out := make([]any, 0, n)
			for i := 1; i <= n; i++ {
				v, err := fromLua(x.RawGetInt(i), seen, fmt.Sprintf("%s[%d]", where, i))
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			return out, nil
		}
		out := map[string]any{}
		var err error
		x.ForEach(func(k, v glua.LValue) {
			if err != nil {
				return
			}
			var key string
			switch kk := k.(type) {
			case glua.LString:
				key = string(kk)
			case glua.LNumber:
				key = FormatNumber(float64(kk))
			case glua.LBool:
				key = strconv.FormatBool(bool(kk))
			default:
				err = fmt.Errorf("%s: table key of type %s cannot be converted", where, k.Type())
				return
			}
			var gv any
			gv, err = fromLua(v, seen, where+"."+key)
			out[key] = gv
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%s: a %s cannot be converted to data", where, lv.Type())
	}
}

// isList reports whether t's keys are exactly 1..n (n may be 0).
func isList(t *glua.LTable) (int, bool) {
	n := 0
	list := true
	t.ForEach(func(k, _ glua.LValue) {
		n++
		if num, ok := k.(glua.LNumber); !ok || float64(num) != math.Trunc(float64(num)) || num < 1 {
			list = false
		}
	})
	if !list {
		return 0, false
	}
	// Keys are positive integers; they are 1..n exactly when the largest is n.
	for i := 1; i <= n; i++ {
		if t.RawGetInt(i) == glua.LNil {
			return 0, false
		}
	}
	return n, true
}

// FormatNumber writes integral numbers without a fraction ("3", not "3.0").
func FormatNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// ParseDuration reads a Lua duration: a string such as "500ms" or a number
// of seconds. Negative durations are refused.
func ParseDuration(lv glua.LValue) (time.Duration, error) {
	var d time.Duration
	switch x := lv.(type) {
	case glua.LNumber:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("duration %v is not a finite number", f)
		}
		d = time.Duration(f * float64(time.Second))
	case glua.LString:
		v, err := time.ParseDuration(string(x))
		if err != nil {
			return 0, fmt.Errorf("duration %q: want a number of seconds or a string like \"5s\" or \"500ms\"", string(x))
		}
		d = v
	default:
		return 0, fmt.Errorf("duration must be a string like \"5s\" or a number of seconds, got %s", lv.Type())
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %s is negative", lv.String())
	}
	return d, nil
}

// CheckDuration reads argument n as a duration, raising an argument error.
func CheckDuration(L *glua.LState, n int) time.Duration {
	d, err := ParseDuration(L.Get(n))
	if err != nil {
		L.ArgError(n, err.Error())
	}
	return d
}

// EncodeJSON writes a Lua value as JSON (map keys sorted; the empty table is []).
func EncodeJSON(lv glua.LValue) ([]byte, error) {
	v, err := FromLua(lv)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// DecodeJSON reads JSON into a Lua value (null becomes nil).
func DecodeJSON(L *glua.LState, b []byte) (glua.LValue, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return glua.LNil, err
	}
	return ToLua(L, v), nil
}

// SetStr sets t[key] = v, leaving optional strings nil when empty: "" is
// true in Lua, and `if h.unit then` must mean "has a unit".
func SetStr(t *glua.LTable, key, v string) {
	if v != "" {
		t.RawSetString(key, glua.LString(v))
	}
}
