package lua

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"
)

// The hints are checked through Run, on the real module tables a script
// sees, so a renamed module function shows up here.
func TestErrorsNameWhatWasNil(t *testing.T) {
	for _, c := range []struct {
		src, want string
	}{
		{"local x = 1\nreturn gpu.holder()", "t.lua:2: gpu.holder is nil; did you mean gpu.holders? (attempt to call it)"},
		{"return gpus.x", "t.lua:1: gpus is nil; did you mean gpu? (attempt to index it with 'x')"},
		{"return nosuchthing_at_all.x", "t.lua:1: nosuchthing_at_all is nil (attempt to index it with 'x')"},
		{"gpus.x = 1", "t.lua:1: gpus is nil; did you mean gpu? (attempt to index it with 'x')"},
		{"function helper() end\nhelpr()", "t.lua:2: helpr is nil; did you mean helper? (attempt to call it)"},
		{"limit = 3\nlimit()", "t.lua:2: limit is a number (attempt to call it)"},
		{"return gpu.mem().x.y", ""}, // a call's result: not a name
		{"vars.a = {}\nreturn vars.a.b.c", "t.lua:2: vars.a.b is nil (attempt to index it with 'c')"},
		{"return systemd:stp()", "t.lua:1: systemd.stp is nil; did you mean systemd.stop? (attempt to call it)"},
		{"return json.encode(vars.nope[1])", "t.lua:1: vars.nope is nil (attempt to index it with '1')"},
		{"local gpu = {}\nreturn gpu.holder()", ""}, // a local: not looked up
		{"local util = require(\"util\")\nreturn util.lst(\"a\")", "t.lua:2: util.lst is nil; did you mean util.list? (attempt to call it)"},
		{"local g = require(\"gpu\")\nlocal function f() return g.holder() end\nreturn f()", "t.lua:2: g.holder is nil; did you mean g.holders? (attempt to call it)"},
		{"local util = require(\"util\")\nutil = {}\nreturn util.lst()", ""},                   // reassigned: not the module any more
		{"local util = require(\"util\")\nfunction util() end\nreturn util.lst()", ""},         // replaced by a function
		{"function f() return util.lst() end\nlocal util = require(\"util\")\nreturn f()", ""}, // line 1 reads a global util
		{"local require = function() return {} end\nlocal util = require(\"util\")\nreturn util.lst()", ""},
		{"local function f(host) return host.x.y end\nreturn f({})", ""}, // a parameter
	} {
		res, _ := one(t, c.src, Options{})
		if res.Status != StatusFailed {
			t.Errorf("%q: status %s, want failed", c.src, res.Status)
			continue
		}
		if c.want == "" {
			if strings.Contains(res.Error, " is nil") || !strings.Contains(res.Error, "attempt to") {
				t.Errorf("%q: error %q, want gopher-lua's own message", c.src, res.Error)
			}
			continue
		}
		if res.Error != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.src, res.Error, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"holders", "kill", "wait_free", "mem", "free"}
	for in, want := range map[string]string{"holder": "holders", "kil": "kill", "wait_fre": "wait_free", "xyzzy": "", "holders": ""} {
		if got := Closest(in, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}

// ExplainError runs on every failing host: whatever the source and the
// line, it must not panic and must keep the chunk:line prefix.
func FuzzExplainError(f *testing.F) {
	f.Add("return gpu.holder()", 1, true)
	f.Add("local util = require('util')\nreturn util.x.y", 2, false)
	f.Add("function a.b:c() return self.d.e end", 1, false)
	f.Add("x = {[1] = y.z, w = q:r()}", 1, true)
	f.Fuzz(func(t *testing.T, src string, line int, call bool) {
		L := glua.NewState()
		defer L.Close()
		L.SetGlobal("gpu", L.NewTable())
		text := "attempt to index a non-table object(nil) with key 'z'"
		if call {
			text = "attempt to call a non-function object"
		}
		msg := fmt.Sprintf("f.lua:%d: %s", line, text)
		got := ExplainError(L, "f.lua", []byte(src), msg)
		if !strings.HasPrefix(got, fmt.Sprintf("f.lua:%d: ", line)) {
			t.Fatalf("ExplainError(%q) = %q: lost the prefix", msg, got)
		}
	})
}

// BenchmarkExplainError: the cost of a hint on the largest library script,
// reported as a ratio to compiling that script once (what every run does).
func BenchmarkExplainError(b *testing.B) {
	src, err := os.ReadFile("../scripts/free_gpus.lua")
	if err != nil {
		b.Fatal(err)
	}
	s := &Script{Name: "free_gpus.lua", Source: src}
	lines := bytes.Count(src, []byte("\n"))
	L := glua.NewState()
	defer L.Close()
	msg := fmt.Sprintf("free_gpus.lua:%d: attempt to call a non-function object", lines/2)
	start := time.Now()
	for range 50 {
		if _, err := s.Compile(); err != nil {
			b.Fatal(err)
		}
	}
	compile := time.Since(start) / 50
	b.ResetTimer()
	for b.Loop() {
		ExplainError(L, "free_gpus.lua", src, msg)
	}
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(compile), "x-compile")
}
