package luaconv

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	glua "github.com/yuin/gopher-lua"
)

// Opts reads an optional options table given as argument Arg of a module
// function. Every getter marks its key as known; Done raises an argument
// error naming any key nobody asked for, so a typo ("grase") is caught
// instead of silently ignored.
type Opts struct {
	L     *glua.LState
	Arg   int
	Func  string // "gpu.kill", for messages
	t     *glua.LTable
	known map[string]bool
}

// CheckOpts reads argument n as an options table; nil or absent means empty.
func CheckOpts(L *glua.LState, n int, fn string) *Opts {
	o := &Opts{L: L, Arg: n, Func: fn, known: map[string]bool{}}
	switch v := L.Get(n).(type) {
	case *glua.LNilType:
	case *glua.LTable:
		o.t = v
	default:
		L.ArgError(n, fmt.Sprintf("%s: options must be a table, got %s", fn, v.Type()))
	}
	return o
}

// OptsOf wraps a table already in hand (t may be nil).
func OptsOf(L *glua.LState, n int, fn string, t *glua.LTable) *Opts {
	return &Opts{L: L, Arg: n, Func: fn, t: t, known: map[string]bool{}}
}

func (o *Opts) get(key string) glua.LValue {
	o.known[key] = true
	if o.t == nil {
		return glua.LNil
	}
	return o.t.RawGetString(key)
}

func (o *Opts) fail(key, format string, args ...any) {
	o.L.ArgError(o.Arg, fmt.Sprintf("%s: option %s: %s", o.Func, key, fmt.Sprintf(format, args...)))
}

// Has reports whether key is set (and marks it known).
func (o *Opts) Has(key string) bool { return o.get(key) != glua.LNil }

// String reads a string option.
func (o *Opts) String(key, def string) string {
	switch v := o.get(key).(type) {
	case *glua.LNilType:
		return def
	case glua.LString:
		return string(v)
	default:
		o.fail(key, "want a string, got %s", v.Type())
	}
	return def
}

// Bool reads a boolean option.
func (o *Opts) Bool(key string, def bool) bool {
	switch v := o.get(key).(type) {
	case *glua.LNilType:
		return def
	case glua.LBool:
		return bool(v)
	default:
		o.fail(key, "want true or false, got %s", v.Type())
	}
	return def
}

// Int reads an integral number option.
func (o *Opts) Int(key string, def int64) int64 {
	switch v := o.get(key).(type) {
	case *glua.LNilType:
		return def
	case glua.LNumber:
		f := float64(v)
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			o.fail(key, "want a whole number, got %v", f)
		}
		return int64(f)
	default:
		o.fail(key, "want a number, got %s", v.Type())
	}
	return def
}

// IntPtr reads an optional integral number; nil when absent.
func (o *Opts) IntPtr(key string) *int64 {
	if o.get(key) == glua.LNil {
		return nil
	}
	v := o.Int(key, 0)
	return &v
}

// Duration reads a duration option ("5s" or seconds).
func (o *Opts) Duration(key string, def time.Duration) time.Duration {
	v := o.get(key)
	if v == glua.LNil {
		return def
	}
	d, err := ParseDuration(v)
	if err != nil {
		o.fail(key, "%v", err)
	}
	return d
}

// Strings reads a list of strings; a single string is a list of one.
func (o *Opts) Strings(key string) []string {
	v := o.get(key)
	out, err := StringList(v)
	if err != nil {
		o.fail(key, "%v", err)
	}
	return out
}

// Ints reads a list of whole numbers; a single number is a list of one.
func (o *Opts) Ints(key string) []int {
	v := o.get(key)
	out, err := IntList(v)
	if err != nil {
		o.fail(key, "%v", err)
	}
	return out
}

// Done raises an argument error if the table holds a key no getter asked for.
func (o *Opts) Done() {
	if o.t == nil {
		return
	}
	var unknown []string
	o.t.ForEach(func(k, _ glua.LValue) {
		if !o.known[k.String()] {
			unknown = append(unknown, k.String())
		}
	})
	if len(unknown) > 0 {
		sort.Strings(unknown)
		known := make([]string, 0, len(o.known))
		for k := range o.known {
			known = append(known, k)
		}
		sort.Strings(known)
		o.L.ArgError(o.Arg, fmt.Sprintf("%s: unknown option %s (known: %s)",
			o.Func, strings.Join(unknown, ", "), strings.Join(known, ", ")))
	}
}

// StringList reads nil (empty), a string, or a list of strings.
func StringList(v glua.LValue) ([]string, error) {
	switch x := v.(type) {
	case *glua.LNilType:
		return nil, nil
	case glua.LString:
		return []string{string(x)}, nil
	case *glua.LTable:
		n, ok := isList(x)
		if !ok {
			return nil, fmt.Errorf("want a list of strings, got a table with non-list keys")
		}
		out := make([]string, 0, n)
		for i := 1; i <= n; i++ {
			s, ok := x.RawGetInt(i).(glua.LString)
			if !ok {
				return nil, fmt.Errorf("element %d: want a string, got %s", i, x.RawGetInt(i).Type())
			}
			out = append(out, string(s))
		}
		return out, nil
	default:
		return nil, fmt.Errorf("want a string or a list of strings, got %s", v.Type())
	}
}

// IntList reads nil (empty), a number, or a list of whole numbers.
func IntList(v glua.LValue) ([]int, error) {
	one := func(lv glua.LValue, i int) (int, error) {
		num, ok := lv.(glua.LNumber)
		if !ok || float64(num) != math.Trunc(float64(num)) || math.Abs(float64(num)) > 1<<31 {
			return 0, fmt.Errorf("element %d: want a whole number, got %s %s", i, lv.Type(), lv.String())
		}
		return int(num), nil
	}
	switch x := v.(type) {
	case *glua.LNilType:
		return nil, nil
	case glua.LNumber:
		n, err := one(x, 1)
		if err != nil {
			return nil, err
		}
		return []int{n}, nil
	case *glua.LTable:
		n, ok := isList(x)
		if !ok {
			return nil, fmt.Errorf("want a list of numbers, got a table with non-list keys")
		}
		out := make([]int, 0, n)
		for i := 1; i <= n; i++ {
			v, err := one(x.RawGetInt(i), i)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("want a number or a list of numbers, got %s", v.Type())
	}
}

// Renamed refuses key, an old spelling of an option: a script still
// giving it would otherwise fail with "unknown option", which does not
// say what to write instead. now says it ("shared=false").
func (o *Opts) Renamed(key, now string) {
	if o.get(key) != glua.LNil {
		o.L.ArgError(o.Arg, fmt.Sprintf("%s: option %s is spelled %s", o.Func, key, now))
	}
}
