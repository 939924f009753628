package lua

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/remote"
)

// TestLibUtil exercises lua/lib/util.lua through a real run.
func TestLibUtil(t *testing.T) {
	r, _ := one(t, `
		local util = require("util")
		local gpus = {{index = 0, used_mib = 10850, user = "a"}, {index = 1, used_mib = 0, user = "b"},
		              {index = 2, used_mib = 4706, user = "a"}}
		local busy = util.filter(gpus, function(g) return g.used_mib > 0 end)
		local by = util.group_by(gpus, "user")
		return {
			busy = util.pluck(busy, "index"),
			total = util.sum(gpus, "used_mib"),
			plain = util.sum({1, 2.5}),
			has = util.contains({"x", "y"}, "y"),
			hasnt = util.contains(nil, "y"),
			keys = util.keys({b = 1, a = 2}),
			a = #by.a,
			doubled = util.map({1, 2}, function(x) return 2 * x end),
			mib = {util.mib(512), util.mib(10850), util.mib(-1)},
		}`, Options{})
	want := "map[a:2 busy:[0 2] doubled:[2 4] has:true hasnt:false keys:[a b] mib:[512 MiB 10.6 GiB ?] plain:3.5 total:15556]"
	if r.Status != StatusOK || fmt.Sprint(r.Value) != want {
		t.Errorf("got %+v\nwant %s", r, want)
	}
}

// TestLibUtilConverters exercises util.list, util.bool and util.duration
// through a real run: values as undeclared host vars bring them, and the
// errors a bad one raises.
func TestLibUtilConverters(t *testing.T) {
	r, _ := one(t, `
		local util = require("util")
		local function err(f, v)
			local ok, e = pcall(f, v)
			if ok then return "no error" end
			return (string.gsub(tostring(e), "^.-:%d+: ", ""))
		end
		return {
			list = {util.list("a.service, b.service"), util.list('["x","y"]'), util.list({"t"}), util.list("one"), util.list(3)},
			list_nil = util.list(nil) == nil,
			list_err = {err(util.list, ""), err(util.list, {}), err(util.list, "a,,b"), err(util.list, "[1"), err(util.list, "[]")},
			bool = {util.bool("no"), util.bool("Yes"), util.bool("off"), util.bool("ON"), util.bool("0"), util.bool(1),
			        util.bool(false), util.bool(" true ")},
			bool_nil = util.bool(nil) == nil,
			bool_err = {err(util.bool, "maybe"), err(util.bool, 2)},
			dur = {util.duration("5s"), util.duration("1m30s"), util.duration("500ms"), util.duration("90"),
			       util.duration(2.5), util.duration("1h2m"), util.duration("1.5s"), util.duration("250us")},
			dur_nil = util.duration(nil) == nil,
			dur_err = {err(util.duration, "soon"), err(util.duration, "5"..string.rep("x", 1).."s"), err(util.duration, "-1"),
			           err(util.duration, ""), err(util.duration, "5s3"), err(util.duration, {})},
		}`, Options{})
	want := "map[" +
		"bool:[false true false true false true false true] bool_err:[\"maybe\" is not a bool: want true/false, yes/no, on/off, y/n or 1/0 \"2\" is not a bool: want true/false, yes/no, on/off, y/n or 1/0] bool_nil:true " +
		"dur:[5 90 0.5 90 2.5 3720 1.5 0.00025] " +
		"dur_err:[\"soon\" is not a duration like \"5s\", \"1m30s\" or a number of seconds \"5xs\" is not a duration like \"5s\", \"1m30s\" or a number of seconds " +
		"-1 is not a duration: want a number of seconds >= 0 or a string like \"5s\" empty duration; leave it out instead " +
		"\"5s3\" is not a duration like \"5s\", \"1m30s\" or a number of seconds " +
		"table: 0x is not a duration: want a number of seconds >= 0 or a string like \"5s\"] dur_nil:true " +
		"list:[[a.service b.service] [x y] [t] [one] [3]] " +
		"list_err:[empty list; leave it out instead empty list; leave it out instead \"a,,b\": item 2 is empty \"[1\" is not a JSON list empty list; leave it out instead] list_nil:true]"
	got := regexp.MustCompile(`table: 0x[0-9a-f]+`).ReplaceAllString(fmt.Sprint(r.Value), "table: 0x")
	if r.Status != StatusOK || got != want {
		t.Errorf("got %+v\n%s\nwant\n%s", r, got, want)
	}
}

// TestLibUtilLists: each case is one Lua expression over util, evaluated
// in a real run, as its own subtest.
func TestLibUtilLists(t *testing.T) {
	const rows = `{{gpu = 2, user = "bob", mib = 10}, {gpu = 0, user = "alice", mib = 30},
		{gpu = 1, user = "bob", mib = 20}, {gpu = 0, user = "carol"}}`
	for _, tc := range []struct{ name, expr, want string }{
		{"values", `util.values({b = 2, a = 1, [3] = "x"})`, `[x 1 2]`},
		{"keys mixed", `util.keys({b = 1, [10] = 1, [2] = 1, a = 1})`, `[2 10 a b]`},
		{"uniq", `util.uniq({3, 1, 3, 2, 1})`, `[3 1 2]`},
		{"uniq key", `util.pluck(util.uniq(R, "user"), "gpu")`, `[2 0 0]`},
		{"uniq fn", `util.uniq({"a", "B", "b", "A"}, string.lower)`, `[a B]`},
		{"sort_by", `util.pluck(util.sort_by(R, "gpu"), "user")`, `[alice carol bob bob]`},
		{"sort_by desc", `util.pluck(util.sort_by(R, "gpu", true), "user")`, `[bob bob alice carol]`},
		{"sort_by nil last", `util.pluck(util.sort_by(R, "mib"), "user")`, `[bob bob alice carol]`},
		{"sort_by desc nil last", `util.pluck(util.sort_by(R, "mib", true), "user")`, `[alice bob bob carol]`},
		{"sort_by fn", `util.pluck(util.sort_by(R, function(x) return x.user .. x.gpu end), "gpu")`, `[0 1 2 0]`},
		{"sort_by leaves input", `(function() util.sort_by(R, "gpu") return util.pluck(R, "gpu") end)()`, `[2 0 1 0]`},
		{"group_by fn", `util.count(util.group_by(R, function(x) return x.gpu == 0 and "zero" or "other" end).zero)`, `2`},
		{"index_by", `util.index_by(R, "user").bob.gpu`, `1`},
		{"count", `util.count(R, "user")`, `map[alice:1 bob:2 carol:1]`},
		{"count all", `util.count(R)`, `4`},
		{"count nil list", `util.count(nil)`, `0`},
		{"join", `util.join({0, 2, "x"})`, `0,2,x`},
		{"join sep", `util.join(util.pluck(R, "gpu"), " ")`, `2 0 1 0`},
		{"join empty", `util.join({})`, ``},
		{"format_duration", `util.map({0, 0.25, 1, 45, 90, 3600, 3605, 3660, 7260, 86400 * 3 + 4 * 3600 + 5}, util.format_duration)`,
			`[0s 250ms 1s 45s 1m30s 1h 1h 1h1m 2h1m 3d4h]`},
		{"format_duration round trip", `util.duration(util.format_duration(3 * 86400 + 7200))`, `266400`},
		{"duration days", `util.duration("2d12h")`, `216000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := one(t, "local util = require(\"util\")\nlocal R = "+rows+"\nreturn "+tc.expr, Options{})
			if r.Status != StatusOK || fmt.Sprint(r.Value) != tc.want {
				t.Errorf("%s\ngot  %v (%v)\nwant %s", tc.expr, r.Value, r.Error, tc.want)
			}
		})
	}
	r, _ := one(t, `return require("util").format_duration(-1)`, Options{})
	if r.Status == StatusOK || !strings.Contains(r.Error, "-1 is not a number of seconds >= 0") {
		t.Errorf("format_duration(-1): %+v", r)
	}
}

// ansiblePython is the interpreter ansible runs under (its script's #!
// line), which has Ansible's own modules.
func ansiblePython(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("ansible")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs ansible (Debian's ansible-core): %v", err)
		}
		t.Skipf("skipping, ansible not installed: %v", err)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	py := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "#!"))
	if len(py) == 0 {
		t.Fatalf("%s: no #! line", bin)
	}
	return py[0]
}

// util.bool against Ansible's own: every value Ansible's boolean() (the
// rule for a module's bool argument, strict) takes, its error for the
// rest, the same answer from util.bool.
func TestLibUtilBoolAgreesWithAnsible(t *testing.T) {
	py := ansiblePython(t)
	inputs := []any{"yes", "no", "Yes", "NO", "y", "n", "Y", "t", "f", "T", "true", "false", "True", "FALSE",
		"on", "off", "On", "1", "0", " yes ", "\tno\n", "maybe", "2", "", "yes please", "ja", "-1", "1.0", "0.0",
		true, false, 1, 0, 1.0, 2, -1, 0.5}
	in, _ := json.Marshal(inputs)
	cmd := exec.Command(py, "-c", `
import json, sys
from ansible.module_utils.parsing.convert_bool import boolean
out = []
for v in json.loads(sys.argv[1]):
    try:
        out.append(boolean(v))
    except TypeError:
        out.append("error")
print(json.dumps(out))
`, string(in))
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s with ansible: %v", py, err)
	}
	var want []any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("ansible's answers %q: %v", b, err)
	}
	r, _ := one(t, fmt.Sprintf(`
		local util = require("util")
		local out = {}
		for i, v in ipairs(json.decode(%q)) do
			local ok, b = pcall(util.bool, v)
			if ok then out[i] = b else out[i] = "error" end
		end
		return out`, in), Options{})
	got, ok := r.Value.([]any)
	if r.Status != StatusOK || !ok || len(got) != len(inputs) {
		t.Fatalf("util.bool: %+v", r)
	}
	for i := range inputs {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("%q: util.bool %v, Ansible %v", fmt.Sprint(inputs[i]), got[i], want[i])
		}
	}
}

// BenchmarkRun measures the runner's own cost per host (state, globals,
// modules, one helper call) over a fake fleet.
func BenchmarkRun(b *testing.B) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("gpu%03d", i)
	}
	_, hosts := newFleet(names...)
	model := modulestest.NewGPUHost("model", 8)
	dial := func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
		return modulestest.NewConn(h.Name, model), nil // a connection lives for one run
	}
	s := script(`return #gpu.mem()`)
	for b.Loop() {
		for _, r := range Run(b.Context(), s, hosts, Options{Dial: dial}) {
			if r.Status != StatusOK {
				b.Fatalf("%+v", r)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(hosts)), "µs/host")
}

// lib/util.lua runs once for the process: every state's require gives a
// view of the one module, what a host sets in it stays on that host, and
// its functions' environment is not a script's to read or change.
func TestLibUtilShared(t *testing.T) {
	r, _ := one(t, `
		local util = require("util")
		assert(require("util") == util and package.loaded.util == util)
		util.map = function() return "mine" end
		assert(util.map() == "mine" and util.pluck({{a = 1}}, "a")[1] == 1)
		local out = {}
		-- The library's functions report the caller's globals, as builtins do.
		out[#out+1] = tostring(getfenv(util.keys) == _G)
		local seen
		util.filter({1}, function() seen = getfenv(2) == _G return true end)
		out[#out+1] = tostring(seen)
		out[#out+1] = tostring(pcall(setfenv, util.keys, {}))
		local ok, e = pcall(util.filter, {1}, function() setfenv(2, {}) end)
		out[#out+1] = tostring(ok) .. " " .. tostring(e):gsub("^.-:%d+: ", "")
		-- setfenv of the script's own functions still works.
		local function f() return x end
		setfenv(f, {x = 7})
		out[#out+1] = f()
		return out`, Options{})
	want := "[true true false false cannot change an environment while a function of gpush's library runs: it is shared by every host 7]"
	if r.Status != StatusOK || fmt.Sprint(r.Value) != want {
		t.Fatalf("got %+v\nwant %s", r, want)
	}
	r, _ = one(t, `
		local util = require("util")
		return {rawget(util, "map") == nil, util.map({2}, function(x) return x * 3 end)[1], util.keys(util.index_by({{k = "b"}, {k = "a"}}, "k"))}`, Options{})
	if want := "[true 6 [a b]]"; r.Status != StatusOK || fmt.Sprint(r.Value) != want {
		t.Fatalf("second host: got %+v\nwant %s", r, want)
	}
}
