package luaconv

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"
)

func eval(t *testing.T, L *glua.LState, expr string) glua.LValue {
	t.Helper()
	if err := L.DoString("return " + expr); err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	v := L.Get(-1)
	L.Pop(1)
	return v
}

func TestFromLua(t *testing.T) {
	L := glua.NewState()
	defer L.Close()
	for expr, want := range map[string]string{
		`{1, 2, 3}`:                 `[1,2,3]`,
		`{}`:                        `[]`,
		`{a = 1, b = {true, "x"}}`:  `{"a":1,"b":[true,"x"]}`,
		`{[1] = "a", [3] = "c"}`:    `{"1":"a","3":"c"}`,
		`{[0] = 5, [1] = 6}`:        `{"0":5,"1":6}`,
		`{[1.5] = "x"}`:             `{"1.5":"x"}`,
		`{1, 2, x = 3}`:             `{"1":1,"2":2,"x":3}`,
		`"s"`:                       `"s"`,
		`1e3`:                       `1000`,
		`nil`:                       `null`,
		`{{index = 0, used = 0.5}}`: `[{"index":0,"used":0.5}]`,
	} {
		v, err := FromLua(eval(t, L, expr))
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		b, _ := json.Marshal(v)
		if string(b) != want {
			t.Errorf("%s -> %s, want %s", expr, b, want)
		}
	}
	for expr, want := range map[string]string{
		`print`:       "function cannot be converted",
		`{f = print}`: "value.f: a function",
		`(function() local t = {}; t[1] = t; return t end)()`: "table contains itself",
		`{[{}] = 1}`: "table key of type table",
	} {
		if _, err := FromLua(eval(t, L, expr)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", expr, err, want)
		}
	}
	// A table shared twice (not a cycle) converts.
	if _, err := FromLua(eval(t, L, `(function() local x = {1}; return {x, x} end)()`)); err != nil {
		t.Errorf("shared table: %v", err)
	}
}

func TestToLuaRoundTrip(t *testing.T) {
	L := glua.NewState()
	defer L.Close()
	in := map[string]any{"list": []any{1.0, nil, "x"}, "ints": []int{3, 4}, "m": map[int]int64{0: 7},
		"d": 1500 * time.Millisecond, "s": struct {
			A int `json:"a"`
		}{A: 2}, "p": (*int)(nil), "b": []byte("raw")}
	lv := ToLua(L, in)
	L.SetGlobal("v", lv)
	for expr, want := range map[string]string{
		`v.list[3]`: "x", `v.list[2] == nil`: "true", `v.ints[2]`: "4", `v.m[0]`: "7", `v.d`: "1.5",
		`v.s.a`: "2", `v.p == nil`: "true", `v.b`: "raw",
	} {
		if got := eval(t, L, expr).String(); got != want {
			t.Errorf("%s = %s, want %s", expr, got, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for lv, want := range map[glua.LValue]time.Duration{
		glua.LString("500ms"): 500 * time.Millisecond, glua.LNumber(1.5): 1500 * time.Millisecond,
		glua.LString("1m"): time.Minute, glua.LNumber(0): 0,
	} {
		if got, err := ParseDuration(lv); err != nil || got != want {
			t.Errorf("%v: %v %v, want %v", lv, got, err, want)
		}
	}
	for _, lv := range []glua.LValue{glua.LString("5"), glua.LString("soon"), glua.LNumber(-1), glua.LString("-2s"), glua.LTrue, glua.LNil} {
		if _, err := ParseDuration(lv); err == nil {
			t.Errorf("%v: no error", lv)
		}
	}
}

func TestFormat(t *testing.T) {
	L := glua.NewState()
	defer L.Close()
	var got []string
	L.SetGlobal("f", L.NewFunction(func(L *glua.LState) int {
		got = append(got, Format(L, 1))
		return 0
	}))
	if err := L.DoString(`
		f("plain 100%")
		f("%d GPUs, %5.1f%% used, %s", 8, 12.25, "ok")
		f("t=%s", {a = 1})
		f("%s %s", nil, false)
		f({1, 2})
		f(3)
		f("%s", "a", "b")
	`); err != nil {
		t.Fatal(err)
	}
	want := []string{"plain 100%", "8 GPUs,  12.2% used, ok", `t={"a":1}`, "nil false", "[1,2]", "3", "a"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestOpts(t *testing.T) {
	L := glua.NewState()
	defer L.Close()
	L.SetGlobal("f", L.NewFunction(func(L *glua.LState) int {
		o := CheckOpts(L, 1, "t.f")
		s := o.String("s", "def")
		n := o.Int("n", 7)
		b := o.Bool("b", false)
		d := o.Duration("d", time.Second)
		l := o.Strings("l")
		i := o.Ints("i")
		o.Done()
		L.Push(glua.LString(fmt.Sprintf("%v %v %v %v %v %v", s, n, b, d, l, i)))
		return 1
	}))
	for expr, want := range map[string]string{
		`f()`: "def 7 false 1s [] []",
		`f{s="x", n=3, b=true, d="2s", l="a", i=1}`: "x 3 true 2s [a] [1]",
		`f{l={"a","b"}, i={0,1}}`:                   "def 7 false 1s [a b] [0 1]",
	} {
		if got := eval(t, L, expr).String(); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}
	for expr, want := range map[string]string{
		`f{x=1}`:       "unknown option x (known: b, d, i, l, n, s)",
		`f{n=1.5}`:     "option n: want a whole number",
		`f{s=1}`:       "option s: want a string",
		`f{b="yes"}`:   "option b: want true or false",
		`f{d="later"}`: "option d: duration",
		`f{l={1}}`:     "option l: element 1: want a string",
		`f{i={a=1}}`:   "option i: want a list",
		`f(5)`:         "options must be a table",
	} {
		err := L.DoString(expr)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "t.f") {
			t.Errorf("%s: %v, want %q", expr, err, want)
		}
	}
}

// FuzzJSON: whatever JSON decodes, encoding it back gives JSON that means
// the same (arrays, objects, numbers, strings, booleans survive the trip
// through Lua tables; null inside arrays is kept by position).
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `[]`, `"x"`, `1.5`, `[true,false]`, `{"1":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		L := glua.NewState(glua.Options{SkipOpenLibs: true})
		defer L.Close()
		lv, err := DecodeJSON(L, []byte(s))
		if err != nil {
			return
		}
		if _, err := EncodeJSON(lv); err != nil {
			t.Fatalf("decoded %q but cannot encode it back: %v", s, err)
		}
	})
}
