package lua

import (
	"context"
	"fmt"
	"regexp"
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
		"bool:[false true false true false true false true] bool_err:[\"maybe\" is not a bool: want true/false, yes/no, on/off or 1/0 \"2\" is not a bool: want true/false, yes/no, on/off or 1/0] bool_nil:true " +
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
