package lua

import (
	"context"
	"fmt"
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
