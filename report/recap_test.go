package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/inventory"
)

// 24 hosts failing with the same reason, each naming itself or its
// address, are one recap line with {host}/{address} in the message.
func TestRecapFoldsFailuresNamingTheirHost(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, Fold: inventory.FoldNodeSet, Now: clock()})
	var rs []Result
	for i := 1; i <= 24; i++ {
		h := fmt.Sprintf("gpu%02d", i)
		addr := fmt.Sprintf("10.0.0.%d", i)
		rs = append(rs,
			Result{Host: h, Address: addr, Status: StatusFailed, Elapsed: time.Duration(i) * 100 * time.Millisecond,
				Error: fmt.Sprintf("GPU 0: taken again %dms after it read free on %s (worker respawned)", 100+i, h),
				Stats: Stats{HaveMem: true, GPUs: 8, GPUsFreed: 7, MemBeforeMiB: int64(10240 * i), MemAfterMiB: 10240}})
	}
	for i := 1; i <= 3; i++ {
		h := fmt.Sprintf("cpu%d", i)
		rs = append(rs, Result{Host: h, Address: fmt.Sprintf("192.168.1.%d", i), Status: StatusUnreachable,
			Error: fmt.Sprintf("dial 192.168.1.%d:22: connection refused", i)})
	}
	rs = append(rs, Result{Host: "busy1", Status: StatusSkipped, Error: "drain refused: busy1 has 2 holders"},
		Result{Host: "busy2", Status: StatusSkipped, Error: "drain refused: busy2 has 2 holders"},
		// Not folded with the others: "gpu1" in "gpu10" is not its name.
		Result{Host: "gpu1", Status: StatusSkipped, Error: "drain refused: gpu10 has 2 holders"})
	if code := p.Finish(rs); code != ExitUnreachable {
		t.Errorf("exit %d", code)
	}
	s := out.String()
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 5 {
		t.Fatalf("want the RECAP line and 4 groups:\n%s", s)
	}
	for i, want := range []string{
		"RECAP ok=0 changed=0 skipped=3 failed=24 unreachable=3",
		"busy[1-2]   skipped  ",
		"gpu1        skipped  ",
		"gpu[01-24]  failed       freed 7/8 GPUs  10240-245760 -> 10240 MiB  100ms-2.4s  GPU 0: taken again [101-124]ms after it read free on {host} (worker respawned)",
		"cpu[1-3]    unreachable",
	} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d: %q, want it to start %q", i, lines[i], want)
		}
	}
	for _, want := range []string{"drain refused: {host} has 2 holders", "drain refused: gpu10 has 2 holders", "dial {address}:22: connection refused"} {
		if !strings.Contains(s, want) {
			t.Errorf("recap lacks %q:\n%s", want, s)
		}
	}
	// Identities never fold: hosts whose reasons differ in a pid stay apart.
	out.Reset()
	p = New(Options{Out: &out, Fold: inventory.FoldNodeSet, Now: clock()})
	p.Finish([]Result{{Host: "gpu01", Status: StatusFailed, Error: "GPU 0: held by pid 4401"},
		{Host: "gpu02", Status: StatusFailed, Error: "GPU 0: held by pid 4402"}})
	if s := out.String(); !strings.Contains(s, "pid 4401") || !strings.Contains(s, "pid 4402") || strings.Contains(s, "[4401-4402]") {
		t.Errorf("pids folded in the recap:\n%s", s)
	}
	// One host alone keeps its own text.
	out.Reset()
	p = New(Options{Out: &out, Now: clock()})
	p.Finish(rs[:1])
	if !strings.Contains(out.String(), "taken again 101ms after it read free on gpu01 (worker respawned)") {
		t.Errorf("single host:\n%s", out.String())
	}
}

func TestHostTemplate(t *testing.T) {
	for _, c := range []struct{ msg, host, addr, want string }{
		{"gpu1: refused", "gpu1", "", "{host}: refused"},
		{"gpu10: refused", "gpu1", "", "gpu10: refused"},
		{"on gpu1.", "gpu1", "", "on {host}."},
		{"gpu1.lab: refused", "gpu1", "", "gpu1.lab: refused"},
		{"gpu1.lab: refused", "gpu1", "gpu1.lab", "{address}: refused"},
		{"dial 10.0.0.1:22 (10.0.0.12)", "n1", "10.0.0.1", "dial {address}:22 (10.0.0.12)"},
		{"n1 at n1", "n1", "n1", "{host} at {host}"},
		{"x-n1 n1_y n1", "n1", "", "x-n1 n1_y {host}"},
	} {
		if got := hostTemplate(c.msg, c.host, c.addr); got != c.want {
			t.Errorf("hostTemplate(%q, %q, %q) = %q, want %q", c.msg, c.host, c.addr, got, c.want)
		}
	}
}

func TestRecapFigures(t *testing.T) {
	for _, c := range []struct {
		st   Stats
		want string
	}{
		{Stats{HaveMem: true, GPUs: 4, MemBeforeMiB: 10240, MemAfterMiB: 10240}, "4 GPUs|10240 MiB used|"},
		{Stats{HaveMem: true, GPUs: 4, MemBeforeMiB: 30720, MemAfterMiB: 10240, UnitsStopped: 1}, "freed 0/4 GPUs|30720 -> 10240 MiB|stopped 1 unit"},
		{Stats{HaveMem: true, GPUs: 4, MemBeforeMiB: 30720, MemAfterMiB: 30720, WouldStop: 2, WouldStopMiB: 20480, WouldKill: 3, WouldKillMiB: 30720},
			"4 GPUs|30720 MiB used|would stop 2 units (20480 MiB), would kill 3 processes (30720 MiB)"},
		{Stats{HaveMem: true, GPUs: 1, MemBeforeMiB: 5, MemAfterMiB: 5, Stale: true, Killed: 1, Survived: 1},
			"1 GPUs|5 MiB used (read before the last stop/kill)|1 process killed with KILL, 1 survived KILL"},
		// Exited after TERM and killed with KILL apart.
		{Stats{HaveMem: true, GPUs: 2, MemBeforeMiB: 9000, MemAfterMiB: 0, GPUsFreed: 2, Exited: 1, Killed: 2},
			"freed 2/2 GPUs|9000 -> 0 MiB|1 process exited after TERM, 2 processes killed with KILL"},
		// Unknown memory is never summed as -1 (a 7000 MiB holder and an unknown one).
		{Stats{HaveMem: true, GPUs: 2, MemBeforeMiB: 7000, MemAfterMiB: 7000, MemBeforeUnknown: 1, MemAfterUnknown: 1, WouldKill: 2, WouldKillMiB: 7000, WouldKillMiBUnknown: 1},
			"2 GPUs|7000 MiB + 1 unknown used|would kill 2 processes (7000 MiB + 1 unknown)"},
		{Stats{HaveMem: true, GPUs: 2, MemBeforeMiB: 7000, MemAfterMiB: 0, MemAfterUnknown: 1, GPUsFreed: 1, Exited: 1},
			"freed 1/2 GPUs|7000 -> 0 MiB + 1 unknown|1 process exited after TERM"},
		// A unit already stopped is no change; a failed stop is never "stopped".
		{Stats{UnitsUnchanged: 2, UnitsFailed: 1}, "||1 unit not stopped"},
		{Stats{UnitsStopped: 1, UnitsUnchanged: 1, RestartersStopped: 1}, "||stopped 1 unit, stopped 1 restarter"},
		{Stats{WouldStop: 1, WouldStopMiB: 10240, WouldStopRestarters: 1}, "||would stop 1 unit (10240 MiB), would stop 1 restarter"},
		{Stats{}, "||"},
	} {
		if got := strings.Join(figureCells(c.st), "|"); got != c.want {
			t.Errorf("%+v: %q, want %q", c.st, got, c.want)
		}
	}
}

func TestRecapMarksAnInterruptedRun(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, Now: clock()})
	p.Interrupted()
	if code := p.Finish([]Result{{Host: "a", Status: StatusFailed, Error: "interrupted"}}); code != ExitInterrupted {
		t.Errorf("exit %d", code)
	}
	if !strings.Contains(out.String(), "  interrupted\n") {
		t.Errorf("recap:\n%s", out.String())
	}
}

func TestRecapCountsEveryRow(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, Now: clock()})
	rec := map[string]any{"a": 1.0}
	p.Finish([]Result{
		{Host: "a", Status: StatusOK, Rows: []any{rec}, Value: []any{rec, rec}},
		{Host: "b", Status: StatusOK, Rows: []any{rec}},
		{Host: "c", Status: StatusOK, Rows: []any{rec}, Value: map[string]any{"x": 1.0}},
	})
	s := out.String()
	// Row counts that differ fold as a range, as other numbers do.
	for _, want := range []string{"\na,b  ok  0ms  [1-3] rows\n", "\nc    ok  0ms  x=1\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("recap lacks %q:\n%s", want, s)
		}
	}
}

// changed= counts the hosts where something changed (Ansible's): a unit
// already stopped, or a failed stop, changes nothing.
func TestRecapCountsChangedHosts(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, Now: clock()})
	p.Finish([]Result{
		{Host: "a", Status: StatusOK, Stats: Stats{UnitsStopped: 1, Changed: true}},
		{Host: "b", Status: StatusOK, Stats: Stats{UnitsUnchanged: 1}},
		{Host: "c", Status: StatusFailed, Error: "no such unit", Stats: Stats{UnitsFailed: 1}},
	})
	if s := out.String(); !strings.Contains(s, "RECAP ok=2 changed=1 failed=1 unreachable=0") {
		t.Errorf("recap:\n%s", s)
	}
}
