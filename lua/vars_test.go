package lua

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseVarDecls(t *testing.T) {
	src := `#!/usr/bin/env gpush
-- Free the host's GPUs.
--
-- @var services list   systemd units to stop first
--   @var grace duration TERM -> KILL grace period (default: 5s)
-- @var gpus intlist GPU indices to free; every GPU when left out
-- @var force bool also signal protected processes (default: no)
-- @var threshold_mib int used MiB that counts as free (default: 512)
-- @var user string only this user's holders (default: "nobody")
-- @var ratio number share of memory (default: 0.5)
-- @var units list only these units (default: [a.service, "b (x).service"])
-- a trailing note, then code
local x = 1
-- @var later string not in the header, so not a declaration
`
	got, err := ParseVarDecls("free.lua", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := VarDecls{
		{Name: "services", Type: VarList, Help: "systemd units to stop first", Line: 4},
		{Name: "grace", Type: VarDuration, Help: "TERM -> KILL grace period", HasDefault: true, Default: "5s", DefaultText: "5s", Line: 5},
		{Name: "gpus", Type: VarIntList, Help: "GPU indices to free; every GPU when left out", Line: 6},
		{Name: "force", Type: VarBool, Help: "also signal protected processes", HasDefault: true, Default: false, DefaultText: "no", Line: 7},
		{Name: "threshold_mib", Type: VarInt, Help: "used MiB that counts as free", HasDefault: true, Default: int64(512), DefaultText: "512", Line: 8},
		{Name: "user", Type: VarString, Help: "only this user's holders", HasDefault: true, Default: "nobody", DefaultText: `"nobody"`, Line: 9},
		{Name: "ratio", Type: VarNumber, Help: "share of memory", HasDefault: true, Default: 0.5, DefaultText: "0.5", Line: 10},
		{Name: "units", Type: VarList, Help: "only these units", HasDefault: true, Default: []any{"a.service", "b (x).service"},
			DefaultText: `[a.service, "b (x).service"]`, Line: 11},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%#v\nwant\n%#v", got, want)
	}
	for name, want := range map[string]string{"gpu": "gpus", "servics": "services", "service": "services", "Force": "force",
		"verify_grace": "grace", "user_name": "user", "zzzzzz": "", "g": "", "unit": "units", "ratios": "ratio", "rat": "ratio"} {
		if c := got.Closest(name); c != want {
			t.Errorf("closest to %q: %q, want %q", name, c, want)
		}
	}
	none, err := ParseVarDecls("none.lua", []byte("-- no vars here\nreturn 1\n-- @var x int after code\n"))
	if err != nil || len(none) != 0 {
		t.Errorf("no declarations: %v %v", none, err)
	}
}

func TestParseVarDeclsErrorsNameFileAndLine(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"-- ok\n-- @var gpus\n", "s.lua:2: "},
		{"-- @var gpus intlist\n", "s.lua:1: @var gpus intlist: want NAME TYPE HELP"},
		{"-- @var gpus ints the GPUs\n", `s.lua:1: @var gpus: unknown type "ints"`},
		{"-- @var GPUs intlist the GPUs\n", `s.lua:1: @var "GPUs": a name is lower-case`},
		{"-- @var 1gpu intlist the GPUs\n", `s.lua:1: @var "1gpu"`},
		{"-- @var gpu-list intlist the GPUs\n", `s.lua:1: @var "gpu-list"`},
		{"--\n--\n-- @var grace duration (default: 5s)\n", "s.lua:3: @var grace: no help text"},
		{"-- @var grace duration how long (default: soon)\n", `s.lua:1: @var grace: default "soon": want a duration`},
		{"-- @var gpus intlist the GPUs (default: 0,x)\n", `s.lua:1: @var gpus: default "0,x": item 2: want an integer`},
		{"-- @var gpus intlist the GPUs (default: )\n", `s.lua:1: @var gpus: default "": empty list`},
		{"-- @var force bool force it (default: maybe)\n", `s.lua:1: @var force: default "maybe": want true/false`},
		{"-- @var a int one\n-- @var a int two\n", "s.lua:2: var a already declared on line 1"},
		{"-- @vars a int one\n", `s.lua:1: "@vars": a declaration starts with @var`},
	} {
		_, err := ParseVarDecls("s.lua", []byte(c.src))
		if err == nil || !strings.HasPrefix(err.Error(), c.want[:6]) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.src, err, c.want)
		}
	}
}

func TestConvert(t *testing.T) {
	decl := func(typ VarType) VarDecl { return VarDecl{Name: "v", Type: typ, Help: "what it does"} }
	for _, c := range []struct {
		typ  VarType
		in   any
		want any
	}{
		{VarString, "a,b", "a,b"},
		{VarString, 12, "12"}, // YAML reads `version: 12` as a number
		{VarString, true, "true"},
		{VarInt, "42", int64(42)},
		{VarInt, " -3 ", int64(-3)},
		{VarInt, 7, int64(7)},
		{VarInt, 7.0, int64(7)},
		{VarNumber, "0.25", 0.25},
		{VarNumber, 3, 3.0},
		{VarBool, "no", false},
		{VarBool, "No", false},
		{VarBool, "off", false},
		{VarBool, "0", false},
		{VarBool, "false", false},
		{VarBool, "yes", true},
		{VarBool, "ON", true},
		{VarBool, "1", true},
		{VarBool, "true", true},
		{VarBool, 1, true},
		{VarBool, false, false},
		{VarDuration, "5s", "5s"},
		{VarDuration, "1m30s", "1m30s"},
		{VarDuration, "90", "1m30s"},
		{VarDuration, "0.5", "500ms"},
		{VarDuration, 10, "10s"},
		{VarDuration, 2.5, "2.5s"},
		{VarDuration, "1500ms", "1.5s"},
		{VarDuration, "0", "0s"},
		{VarList, "a.service,b.service", []any{"a.service", "b.service"}},
		{VarList, " a.service , b.service ", []any{"a.service", "b.service"}},
		{VarList, "one", []any{"one"}},
		{VarList, `["a","b"]`, []any{"a", "b"}},
		{VarList, "[a, b]", []any{"a", "b"}},
		{VarList, []any{"a", 1}, []any{"a", "1"}},
		{VarList, []string{"x"}, []any{"x"}},
		{VarIntList, "0,1", []any{int64(0), int64(1)}},
		{VarIntList, "[2, 3]", []any{int64(2), int64(3)}},
		{VarIntList, []any{0, 1.0, "2"}, []any{int64(0), int64(1), int64(2)}},
		{VarIntList, 3, []any{int64(3)}},
	} {
		d := decl(c.typ)
		got, err := d.Convert(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %#v: got %#v, %v; want %#v", c.typ, c.in, got, err, c.want)
			continue
		}
		// A converted value converts to itself: Run converts what the CLI converted.
		again, err := d.Convert(got)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%s %#v: reconverting %#v gave %#v, %v", c.typ, c.in, got, again, err)
		}
	}
	for _, c := range []struct {
		typ  VarType
		in   any
		want string
	}{
		{VarIntList, "", "empty list; leave it out instead (what it does)"},
		{VarString, " ", "empty value; leave it out instead (what it does)"},
		{VarList, "  ", "empty list"},
		{VarList, []any{}, "empty list"},
		{VarList, "a,,b", "item 2 is empty"},
		{VarList, "[a, [b]]", "item 2: want a string, got a list"},
		{VarList, map[string]any{"a": 1}, "want a list"},
		{VarList, "[a", "not a YAML/JSON list"},
		{VarIntList, "0,x", `item 2: want an integer, got "x"`},
		{VarIntList, "1.5", `item 1: want an integer, got "1.5"`},
		{VarString, "", "empty value"},
		{VarString, nil, "no value"},
		{VarString, []any{"a"}, "want a string, got a list"},
		{VarInt, "4x", `want an integer, got "4x"`},
		{VarInt, 1.5, "want an integer, got 1.5"},
		{VarNumber, "NaN", "finite"},
		{VarNumber, "fast", "want a number"},
		{VarBool, "maybe", `got "maybe"`},
		{VarBool, 2, "want true/false"},
		{VarDuration, "-1s", "negative"},
		{VarDuration, -2, "negative"},
		{VarDuration, "soon", `got "soon"`},
		{VarDuration, "1e300", "not a usable duration"},
	} {
		_, err := decl(c.typ).Convert(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %#v: error %v, want one containing %q", c.typ, c.in, err, c.want)
		}
	}
	for help, want := range map[string]string{
		"GPU indices to free; every GPU when left out":    "empty list; leave it out to mean every GPU",
		"GPU indices to free; leave it out for every GPU": "empty list; leave it out for every GPU",
		"units to stop first":                             "empty list; leave it out instead (units to stop first)",
	} {
		d := VarDecl{Name: "gpus", Type: VarIntList, Help: help}
		if _, err := d.Convert("[]"); err == nil || err.Error() != want {
			t.Errorf("help %q: error %v, want %q", help, err, want)
		}
	}
	withDefault := VarDecl{Name: "grace", Type: VarDuration, Help: "x", HasDefault: true, Default: "5s", DefaultText: "5s"}
	if _, err := withDefault.Convert(""); err == nil || !strings.Contains(err.Error(), "leave it out for its default, 5s") {
		t.Errorf("empty with a default: %v", err)
	}
}

func TestCheckExtraVars(t *testing.T) {
	decls, err := ParseVarDecls("free_gpus.lua", []byte("-- @var gpus intlist GPU indices to free; every GPU when left out\n"+
		"-- @var services list units to stop\n-- @var force bool force (default: false)\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := CheckExtraVars("free_gpus.lua", decls, map[string]any{"gpus": "0,1", "force": "no", "gpush_dev_dir": "/lab/dev"})
	want := map[string]any{"gpus": []any{int64(0), int64(1)}, "force": false, "gpush_dev_dir": "/lab/dev"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, %v; want %#v", got, err, want)
	}
	for _, c := range []struct {
		decls VarDecls
		extra map[string]any
		want  string
	}{
		{decls, map[string]any{"gpu": "2"}, "free_gpus.lua: no var gpu; did you mean gpus?"},
		{decls, map[string]any{"timeout": "2"}, "free_gpus.lua: no var timeout (its vars: gpus, services, force)"},
		{nil, map[string]any{"gpus": "2"}, "free_gpus.lua declares no vars, so it takes no -e gpus; to give it one, declare it with -- @var NAME TYPE"},
		{decls, map[string]any{"gpus": ""}, "gpus: empty list; leave it out to mean every GPU"},
		{decls, map[string]any{"force": "maybe", "gpus": "x"}, "force: want true/false"}, // sorted: the same error every run
	} {
		_, err := CheckExtraVars("free_gpus.lua", c.decls, c.extra)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.extra, err, c.want)
		}
	}
}

func TestApplyVars(t *testing.T) {
	decls, err := ParseVarDecls("s.lua", []byte("-- @var grace duration grace (default: 5)\n-- @var gpus intlist? gpus\n-- @var force bool force\n"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{"force": "off", "other": "as is"}
	if err := ApplyVars("s.lua", decls, vars); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"grace": "5s", "force": false, "other": "as is"} // gpus: optional, stays absent
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("got %#v, want %#v", vars, want)
	}
	err = ApplyVars("s.lua", decls, map[string]any{"gpus": []any{"0", "one"}})
	if err == nil || err.Error() != `var gpus: item 2: want an integer, got "one"` {
		t.Errorf("bad host var: %v", err)
	}
	err = ApplyVars("s.lua", decls, map[string]any{})
	var missing *MissingVarError
	if !errors.As(err, &missing) || err.Error() != "s.lua: var force is required and not given (bool: force); give it with -e force=VALUE or as a host var, or declare it bool? if the script does without it" {
		t.Errorf("a required var given nowhere: %v", err)
	}
}

// TestVarDeclForms: TYPE? is optional, "(empty: ...)" makes an empty list
// a value, in either order with a default; what contradicts is refused.
func TestVarDeclForms(t *testing.T) {
	decls, err := ParseVarDecls("s.lua", []byte(`-- @var a list? units; none when left out
-- @var b list units (empty: stop none)
-- @var c intlist? gpus (empty: no GPU)
-- @var d list units (empty: none) (default: [])
-- @var e list units (default: x,y) (empty: none)
-- @var f string a string
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name             string
		optional, empty  bool
		required         bool
		help, emptyText  string
		hasDefault       bool
		defaultAsWritten string
	}{
		{"a", true, false, false, "units; none when left out", "", false, ""},
		{"b", false, true, true, "units", "stop none", false, ""},
		{"c", true, true, false, "gpus", "no GPU", false, ""},
		{"d", false, true, false, "units", "none", true, "[]"},
		{"e", false, true, false, "units", "none", true, "x,y"},
		{"f", false, false, true, "a string", "", false, ""},
	} {
		d, _ := decls.Lookup(c.name)
		if d.Optional != c.optional || d.EmptyOK != c.empty || d.Required() != c.required || d.Help != c.help ||
			d.EmptyText != c.emptyText || d.HasDefault != c.hasDefault || d.DefaultText != c.defaultAsWritten {
			t.Errorf("%s: %+v", c.name, d)
		}
	}
	b, _ := decls.Lookup("b")
	for _, v := range []any{"[]", "", nil, []any{}} {
		if got, err := b.Convert(v); err != nil || fmt.Sprint(got) != "[]" {
			t.Errorf("b %#v: %v, %v (an empty list is a value)", v, got, err)
		}
	}
	if _, err := b.Convert("a,,b"); err == nil {
		t.Error("an empty item is still an error")
	}
	a, _ := decls.Lookup("a")
	if _, err := a.Convert("[]"); err == nil || err.Error() != "empty list; leave it out to mean none" {
		t.Errorf("a without (empty:): %v", err)
	}
	for src, want := range map[string]string{
		"-- @var x int? n (default: 1)":  "int? and a default",
		"-- @var x bool b (empty: none)": "(empty: ...) is for a list or intlist, not bool",
		"-- @var x list l (empty: )":     "says nothing",
		"-- @var x list? l (default: a)": "list? and a default",
		"-- @var x str? l":               `unknown type "str?"`,
	} {
		if _, err := ParseVarDecls("s.lua", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

// TestCheckRequired: -e or every host's vars give a required var, or the
// run is refused, naming the hosts that lack it.
func TestCheckRequired(t *testing.T) {
	decls, err := ParseVarDecls("s.lua", []byte("-- @var unit string the unit to stop\n-- @var gpus intlist? gpus\n-- @var g duration g (default: 1)\n"))
	if err != nil {
		t.Fatal(err)
	}
	hv := map[string]map[string]any{"a": {"unit": "x"}, "b": {}, "c": nil}
	if err := CheckRequired("s.lua", decls, map[string]any{"unit": "y"}, hv); err != nil {
		t.Errorf("-e gives it: %v", err)
	}
	if err := CheckRequired("s.lua", decls, nil, map[string]map[string]any{"a": {"unit": "x"}}); err != nil {
		t.Errorf("the inventory gives it: %v", err)
	}
	err = CheckRequired("s.lua", decls, nil, hv)
	if err == nil || err.Error() != "s.lua: var unit is required and not given on hosts b, c (string: the unit to stop); give it with -e unit=VALUE or as a host var, or declare it string? if the script does without it" {
		t.Errorf("two hosts lack it: %v", err)
	}
	err = CheckRequired("s.lua", decls, nil, map[string]map[string]any{"b": {}})
	if err == nil || !strings.HasPrefix(err.Error(), "s.lua: var unit is required and not given (string: the unit to stop)") {
		t.Errorf("every host lacks it: %v", err)
	}
}

// TestStrictVars: a declaring script reading an undeclared vars.x fails
// naming the script and the var (and the nearest declared one); declared
// vars given nowhere are nil; vars_from says where each came from. A
// script that declares nothing gets every var, nil for the others.
func TestStrictVars(t *testing.T) {
	f, hosts := newFleet("gpu01")
	hosts[0].Vars = map[string]any{"users": "alice", "site": "x"}
	src := `-- @var users list? only these users
-- @var gpus intlist? gpus
-- @var grace duration g (default: 5s)
`
	res := Run(t.Context(), script(src+`return {users = vars.users[1], gpus = tostring(vars.gpus), site = host.vars.site,
  from = vars_from.users .. " " .. vars_from.gpus .. " " .. vars_from.grace .. " " .. tostring(vars_from.users_typo_nil)}`),
		hosts, Options{Dial: f.dial, ExtraVars: map[string]any{"gpus": "1"}})
	if res[0].Status != StatusFailed || !strings.Contains(res[0].Error, "vars_from.users_typo_nil: t.lua declares no var users_typo_nil") {
		t.Errorf("vars_from is strict too: %+v", res[0])
	}
	res = Run(t.Context(), script(src+`return {users = vars.users[1], gpus = tostring(vars.gpus[1]), site = host.vars.site,
  from = vars_from.users .. " " .. vars_from.gpus .. " " .. vars_from.grace}`),
		hosts, Options{Dial: f.dial, ExtraVars: map[string]any{"gpus": "1"}})
	if want := "map[from:inventory -e default gpus:1 site:x users:alice]"; res[0].Status != StatusOK || fmt.Sprint(res[0].Value) != want {
		t.Errorf("got %+v, want %s", res[0], want)
	}
	for code, want := range map[string]string{
		"return vars.user":                       "t.lua:4: vars.user: t.lua declares no var user; did you mean users?",
		"return vars.site":                       "vars.site: t.lua declares no var site (its vars: users, gpus, grace); the inventory's own is host.vars.site",
		"return vars.gpus":                       "",
		"return vars[1]":                         "vars.1: t.lua declares no var 1",
		"return #gpu.holders{users = vars.user}": "did you mean users?",
	} {
		res = Run(t.Context(), script(src+code), hosts, Options{Dial: f.dial})
		if want == "" {
			if res[0].Status != StatusOK || res[0].Value != nil {
				t.Errorf("%s: %+v, want nil", code, res[0])
			}
		} else if res[0].Status != StatusFailed || !strings.Contains(res[0].Error, want) {
			t.Errorf("%s: %+v, want %q", code, res[0], want)
		}
	}
	res = Run(t.Context(), script(`return {site = vars.site, other = tostring(vars.other)}`), hosts, Options{Dial: f.dial})
	if want := "map[other:nil site:x]"; res[0].Status != StatusOK || fmt.Sprint(res[0].Value) != want {
		t.Errorf("no declarations: %+v, want %s", res[0], want)
	}
}

// TestRunDeclaredVars runs scripts with declarations: Lua sees converted
// values; an undeclared -e fails every host before any is dialled; a bad
// declared host var fails only its host, naming host and var.
func TestRunDeclaredVars(t *testing.T) {
	f, hosts := newFleet("gpu01", "gpu02")
	hosts[0].Vars = map[string]any{"services": "a.service, b.service", "undeclared": "kept"}
	hosts[1].Vars = map[string]any{"gpus": "0,first"}
	s := script(`-- test script
-- @var services list? units
-- @var gpus intlist? GPU indices
-- @var force bool force it (default: off)
-- @var grace duration grace (default: 90)
-- @var user string? a user
return {svc = table.concat(vars.services or {}, "|"), gpu_type = type(vars.gpus[1]), gpu = vars.gpus[2],
        force = tostring(vars.force), grace = vars.grace, user = tostring(vars.user), undeclared = host.vars.undeclared,
        raw = host.vars.services}`)
	res := Run(t.Context(), s, hosts, Options{Dial: f.dial, ExtraVars: map[string]any{"gpus": "[2, 3]"}})
	want := "map[force:false gpu:3 gpu_type:number grace:1m30s raw:a.service, b.service svc:a.service|b.service undeclared:kept user:nil]"
	if res[0].Status != StatusOK || fmt.Sprint(res[0].Value) != want {
		t.Errorf("gpu01: got %+v\nwant %s", res[0], want)
	}
	// -e gpus wins over gpu02's bad host var, so gpu02 runs too.
	if res[1].Status != StatusOK {
		t.Errorf("gpu02: %+v", res[1])
	}
	res = Run(t.Context(), s, hosts, Options{Dial: f.dial})
	if res[0].Status != StatusFailed || !strings.Contains(res[0].Error, "attempt to index") {
		t.Errorf("gpu01 without gpus: %+v (vars.gpus must be nil)", res[0])
	}
	if res[1].Status != StatusFailed || res[1].Error != `host gpu02: var gpus: item 2: want an integer, got "first"` {
		t.Errorf("gpu02 bad host var: %+v", res[1])
	}

	f, hosts = newFleet("gpu01", "gpu02")
	for _, extra := range []map[string]any{{"gpu": "2"}, {"force": "maybe"}} {
		res = Run(t.Context(), s, hosts, Options{Dial: f.dial, ExtraVars: extra})
		for _, r := range res {
			if r.Status != StatusFailed || !strings.Contains(r.Error, "gpu") && !strings.Contains(r.Error, "force") {
				t.Errorf("-e %v: %+v", extra, r)
			}
		}
	}
	if len(f.dialed) != 0 {
		t.Errorf("bad extra vars, yet dialled %v", f.dialed)
	}
	res = Run(t.Context(), script("-- @var x bogus a var\nreturn 1"), hosts, Options{Dial: f.dial})
	if res[0].Status != StatusFailed || !strings.Contains(res[0].Error, `t.lua:1: @var x: unknown type "bogus"`) {
		t.Errorf("bad declaration: %+v", res[0])
	}
}

// FuzzVarDecls: parsing never panics, and every declaration it accepts has
// a valid name, type and help, and a default that converts to itself.
func FuzzVarDecls(f *testing.F) {
	for _, s := range []string{
		"-- @var gpus intlist GPU indices (default: 0,1)\n",
		"#!/x\n-- @var grace duration grace (default: 1m30s)\n-- @var f bool f (default: no)\n",
		"-- @var units list units (default: [a, \"b c\"])\n",
		"-- @var s string s (default: \"\")\n",
		"-- @var n number n (default: 1e3)\n-- @var i int i (default: -4)\n",
		"-- @var x int x (default: (default: 1))\n",
		"--@var\t a  string  b\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		decls, err := ParseVarDecls("f.lua", []byte(src))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.lua:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, d := range decls {
			if !varName.MatchString(d.Name) || !d.Type.valid() || d.Help == "" || d.Line < 1 {
				t.Fatalf("accepted %+v", d)
			}
			if !d.HasDefault {
				continue
			}
			again, err := d.Convert(d.Default)
			if err != nil || !reflect.DeepEqual(again, d.Default) {
				t.Fatalf("%+v: default reconverts to %#v, %v", d, again, err)
			}
		}
	})
}

// FuzzConvert: whatever string -e brings, a conversion that succeeds gives
// a value of the declared Go type that converts to itself, and an empty
// list never comes out.
func FuzzConvert(f *testing.F) {
	for i, s := range []string{"a,b", "0,1", "[0, 1]", `["a"]`, "1m30s", "90", "no", "0.5", "", " , ", "[]", "1e300", "-0"} {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, ti uint8, s string) {
		d := VarDecl{Name: "v", Type: VarTypes[int(ti)%len(VarTypes)], Help: "h"}
		got, err := d.Convert(s)
		if err != nil {
			return
		}
		ok := false
		switch x := got.(type) {
		case string:
			ok = (d.Type == VarString || d.Type == VarDuration) && x != ""
		case int64:
			ok = d.Type == VarInt
		case float64:
			ok = d.Type == VarNumber
		case bool:
			ok = d.Type == VarBool
		case []any:
			ok = (d.Type == VarList || d.Type == VarIntList) && len(x) > 0
		}
		if !ok {
			t.Fatalf("%s %q -> %#v", d.Type, s, got)
		}
		again, err := d.Convert(got)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("%s %q -> %#v reconverts to %#v, %v", d.Type, s, got, again, err)
		}
	})
}
