package lua

import (
	"context"
	"strings"
	"testing"
)

// What a script raises ends the host with a message that names the file
// and line and shows the value as Lua would write it, whatever the value.
func TestRaisedValuesNameTheLineAndShowTheValue(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`error({code=42})`, `t.lua:1: error({code=42})`},
		{"local x = 1\nlocal function f()\n  error({code = 42, msg = \"GPU 0 busy\"})\nend\nf()\n",
			`t.lua:3: error({code=42, msg="GPU 0 busy"})`},
		{`error(nil)`, `t.lua:1: error(nil)`},
		{`error(42)`, `t.lua:1: error(42)`},
		{`error(true)`, `t.lua:1: error(true)`},
		{`error(newproxy())`, `t.lua:1: error(userdata)`},
		{`error(function() end)`, `t.lua:1: error(function<t.lua:1>)`},
		// Keys in a fixed order: the list part, numbers, then names, then
		// keys that are no names; nested tables and a cycle.
		{`local t = {3, 2, 1, z = 1, a = {b = {}}, [10] = "x", ["a b"] = 2, ["end"] = 0}; t.self = t; error(t)`,
			`t.lua:1: error({3, 2, 1, [10]="x", a={b={}}, ["a b"]=2, ["end"]=0, self={...}, z=1})`},
		// Strings keep Lua's rules: a position unless level 0.
		{`error("boom")`, `t.lua:1: boom`},
		{`error("boom", 0)`, `boom`},
		// The runtime's fail(): a message as written, any other value
		// shown and placed.
		{`fail("GPU %d still holds %d MiB", 0, 512)`, `GPU 0 still holds 512 MiB`},
		{"local r = {}\n\nfail(r.reason)", `t.lua:3: fail(nil)`},
		{`fail({code = 42})`, `t.lua:1: fail({code=42})`},
		{"\nfail()", `t.lua:2: fail() called`},
		{`fail("")`, `t.lua:1: fail() called`},
		{`fail(7)`, `7`},
	} {
		r, _ := one(t, tc.src, Options{})
		if r.Status != StatusFailed || r.Error != tc.want {
			t.Errorf("%s:\n got %s %q\nwant %q", tc.src, r.Status, r.Error, tc.want)
		}
	}
}

// The same value reads the same every time (no addresses, no map order).
func TestRaisedTableIsDeterministic(t *testing.T) {
	src := `local t = {}; for i = 1, 30 do t["k" .. i] = i end; error(t)`
	first, _ := one(t, src, Options{})
	if strings.Contains(first.Error, "0x") || !strings.HasPrefix(first.Error, "t.lua:1: error({k1=1, k10=10, k11=11") {
		t.Fatalf("%q", first.Error)
	}
	for range 5 {
		if r, _ := one(t, src, Options{}); r.Error != first.Error {
			t.Fatalf("%q then %q", first.Error, r.Error)
		}
	}
	big, _ := one(t, `local t = {}; for i = 1, 1000 do t[i] = "xxxxxxxx" end; error(t)`, Options{})
	if len(big.Error) > errorValueMax+100 || !strings.HasSuffix(big.Error, "...)") {
		t.Errorf("a big table is not cut: %d bytes", len(big.Error))
	}
}

// A pcall still gets the value itself; only the host's end renders it.
func TestPcallGetsTheRaisedTable(t *testing.T) {
	r, _ := one(t, `local ok, e = pcall(error, {code = 42}); return e.code`, Options{})
	if r.Status != StatusOK || r.Value != float64(42) {
		t.Errorf("%+v", r)
	}
}

func TestREPLShowsARaisedTable(t *testing.T) {
	f, hosts := newFleet("gpu01")
	s, err := NewSession(hosts[0], "", Options{Dial: f.dial})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Eval(context.Background(), `error({code = 42})`)
	if err == nil || !strings.HasSuffix(err.Error(), ": <string>:1: error({code=42})") {
		t.Errorf("%v", err)
	}
}
