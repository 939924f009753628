package inventory

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkINIManyHostsMemory reports what an INI inventory of many small
// host lines (a fleet's generated inventory) holds once parsed and
// selected, as live heap over the file's size: the per-host records, not
// the text, are what such a file costs.
//
//	go test -run '^$' -bench INIManyHostsMemory -benchtime 3x ./inventory/
func BenchmarkINIManyHostsMemory(b *testing.B) {
	var ini strings.Builder
	ini.WriteString("[gpu]\n")
	const hosts = 50000
	for i := range hosts {
		fmt.Fprintf(&ini, "gpu%07d ansible_host=10.%d.%d.%d ansible_user=root gpu_count=8 rack=r%d\n", i, i>>16&255, i>>8&255, i&255, i%100)
	}
	ini.WriteString("[gpu:vars]\nansible_port=22\n")
	data := []byte(ini.String())
	var live float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		inv, err := ParseINI("fleet.ini", data)
		if err != nil {
			b.Fatal(err)
		}
		sel, err := inv.Select("all")
		if err != nil || len(sel) != hosts {
			b.Fatalf("%d hosts, %v", len(sel), err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		live = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		runtime.KeepAlive(inv)
		runtime.KeepAlive(sel)
	}
	b.ReportMetric(live/float64(len(data)), "live/input")
	b.ReportMetric(live/hosts, "live-B/host")
}
