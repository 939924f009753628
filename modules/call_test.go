package modules_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/pkg/sftp"
	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/remote"
)

type marked struct{ u bool }

func (m marked) Error() string     { return "marked" }
func (m marked) Unreachable() bool { return m.u }

func TestIsConnError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("helper exited 1"), false},
		{fmt.Errorf("snapshot: %w", remote.ErrConnectionLost), true},
		{&remote.DialError{Host: "h", Addr: "h:22", Stage: remote.StageConnect, Err: syscall.ECONNREFUSED}, true},
		{&remote.HelperError{Host: "h", Verb: "kill", ExitCode: 2, Message: "bad request"}, false},
		{fmt.Errorf("x: %w", io.EOF), true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		// The SFTP client's word for a link that died mid-upload.
		{fmt.Errorf("h: upload helper to /x: write /x.tmp: %w", sftp.ErrSSHFxConnectionLost), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{fmt.Errorf("h: helper snapshot: decode response: %w", errors.New("unexpected end of JSON input")), false},
		{fmt.Errorf("x: %w", marked{true}), true},
		{marked{false}, false},
		{fmt.Errorf("call: %w", context.Canceled), false},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), false},
	} {
		if got := modules.IsConnError(tc.err); got != tc.want {
			t.Errorf("IsConnError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestStats(t *testing.T) {
	var s modules.Stats
	if snap := s.Snapshot(); len(snap.GPUs) != 0 || snap.Freed != nil {
		t.Fatalf("zero stats: %+v", snap)
	}
	s.ObserveGPUs([]helper.GPU{{Index: 0, MemUsedMiB: 26018, MemTotalMiB: 143771}, {Index: 1, MemUsedMiB: 4},
		{Index: 2, MemUsedMiB: -1}}, nil)
	s.ObserveGPUs([]helper.GPU{{Index: 1, MemUsedMiB: 4}}, map[int]int64{1: 4})
	s.ObserveGPUs([]helper.GPU{{Index: 0, MemUsedMiB: 0, MemTotalMiB: 143771}, {Index: 2, MemUsedMiB: 7}}, nil)
	id := func(pid int) helper.Identity { return helper.Identity{PID: pid, StartTime: uint64(pid * 10)} }
	term, kill := []string{"TERM"}, []string{"TERM", "KILL"}
	s.AddKills([]helper.KillResult{{Identity: id(1), Outcome: helper.OutcomeKilled, Signals: kill},
		{Identity: id(2), Outcome: helper.OutcomeExited, Signals: term},
		{Identity: id(3), Outcome: helper.OutcomeExited, Signals: term}, {Identity: id(4), Outcome: helper.OutcomeSurvived, Signals: kill},
		{Identity: id(5), Outcome: helper.OutcomeWould, Signals: term}, {Identity: id(6), Outcome: helper.OutcomeSkipped},
		// Gone before any signal: neither exited nor killed.
		{Identity: id(7), Outcome: helper.OutcomeExited, Reason: "already gone"},
		// Cut off after TERM, before KILL went out: alive, not "survived KILL".
		{Identity: id(8), Outcome: helper.OutcomeSurvived, Signals: term, Reason: "interrupted: KILL not sent"}})
	// The same processes again: found gone, or named again; each counts once.
	s.AddKills([]helper.KillResult{{Identity: id(1), Outcome: helper.OutcomeExited, Reason: "already gone"},
		{Identity: id(2), Outcome: helper.OutcomeExited, Reason: "already gone"}, {Identity: id(5), Outcome: helper.OutcomeWould, Signals: term}})
	snap := s.Snapshot()
	if got := fmt.Sprint(snap.Freed); got != "[0]" {
		t.Errorf("freed %s, want [0] (GPU 1 was idle at its baseline, GPU 2 unknown at first)", got)
	}
	g := snap.GPUs
	if len(g) != 3 || g[0].BeforeMiB != 26018 || g[0].AfterMiB != 0 || g[1].ThresholdMiB != 4 || g[2].BeforeMiB != -1 || g[2].AfterMiB != 7 {
		t.Errorf("gpus %+v (an unknown first reading stays unknown)", g)
	}
	if snap.Kills != (modules.KillStats{Exited: 2, Killed: 1, Survived: 1, AliveAfterTerm: 1, Skipped: 1, Gone: 1, Would: 1}) {
		t.Errorf("kills %+v", snap.Kills)
	}
}

// A would-kill of the same holders three times is those holders once, and
// their memory once; an unknown memory is counted apart, never as -1.
func TestStatsWouldKillDistinct(t *testing.T) {
	var s modules.Stats
	a := helper.Holder{Identity: helper.Identity{PID: 10, StartTime: 1}, MemMiB: 7000, GPUs: []int{0}}
	b := helper.Holder{Identity: helper.Identity{PID: 11, StartTime: 2}, MemMiB: -1, GPUs: []int{0}}
	s.ObserveHolders([]helper.Holder{a, b})
	for range 3 {
		s.AddKills([]helper.KillResult{{Identity: a.Identity, Outcome: helper.OutcomeWould}, {Identity: b.Identity, Outcome: helper.OutcomeWould}})
	}
	snap := s.Snapshot()
	if snap.Kills.Would != 2 || snap.WouldKillMiB != 7000 || snap.WouldKillMiBUnknown != 1 {
		t.Errorf("would %d, %d MiB + %d unknown; want 2, 7000 MiB + 1 unknown", snap.Kills.Would, snap.WouldKillMiB, snap.WouldKillMiBUnknown)
	}
}

// A stop counts as stopped only when it changed the unit: one inactive
// already is unchanged, one that does not exist or still runs failed;
// each unit once however often it is stopped. Under check, what the stop
// would end follows the unit's KillMode=.
func TestStatsUnits(t *testing.T) {
	var s modules.Stats
	s.AddUnit(helper.UnitStop, false, helper.UnitResponse{Unit: "a.service", Systemd: true, OK: true, LoadState: "loaded",
		PriorActiveState: "active", ActiveState: "inactive"})
	s.AddUnit(helper.UnitStop, false, helper.UnitResponse{Unit: "a.service", Systemd: true, OK: true, LoadState: "loaded",
		PriorActiveState: "inactive", ActiveState: "inactive"})
	s.AddUnit(helper.UnitStop, false, helper.UnitResponse{Unit: "b.service", Systemd: true, OK: true, LoadState: "loaded",
		PriorActiveState: "inactive", ActiveState: "inactive"})
	s.AddUnit(helper.UnitStop, false, helper.UnitResponse{Unit: "typo.service", Systemd: true, LoadState: "not-found", ActiveState: "inactive"})
	s.AddUnit(helper.UnitStop, false, helper.UnitResponse{Unit: "stuck.service", Systemd: true, LoadState: "loaded",
		PriorActiveState: "active", ActiveState: "deactivating"})
	u := s.Snapshot().Units
	// a.service's second stop found it stopped: the first one changed it.
	if u.Stopped != 1 || u.Unchanged != 1 || u.Failed != 2 {
		t.Errorf("units %+v, want stopped 1, unchanged 1, failed 2", u)
	}

	var c modules.Stats
	main := helper.Holder{Identity: helper.Identity{PID: 20, StartTime: 1}, MemMiB: 2048}
	child := helper.Holder{Identity: helper.Identity{PID: 21, StartTime: 2}, MemMiB: 8192}
	c.AddUnit(helper.UnitStop, true, helper.UnitResponse{Unit: "sglang.service", Systemd: true, LoadState: "loaded", ActiveState: "active",
		KillMode: "process", MainPID: 20, GPUHolders: []helper.Holder{main, child}})
	c.AddUnit(helper.UnitStop, true, helper.UnitResponse{Unit: "vllm.service", Systemd: true, LoadState: "loaded", ActiveState: "active",
		GPUHolders: []helper.Holder{{Identity: helper.Identity{PID: 30, StartTime: 3}, MemMiB: -1}}})
	c.AddUnit(helper.UnitStop, true, helper.UnitResponse{Unit: "typo.service", Systemd: true, LoadState: "not-found"})
	if c.WouldEnd(20, 1) != "sglang.service" || c.WouldEnd(21, 2) != "" || c.WouldEnd(30, 3) != "vllm.service" {
		t.Errorf("would end: main %q, child %q (KillMode=process leaves it), vllm's %q", c.WouldEnd(20, 1), c.WouldEnd(21, 2), c.WouldEnd(30, 3))
	}
	cu := c.Snapshot().Units
	if cu.WouldStop != 2 || cu.WouldStopMiB != 2048 || cu.WouldStopMiBUnknown != 1 {
		t.Errorf("check units %+v", cu)
	}
}

func TestRegistry(t *testing.T) {
	m := modules.Module{Name: "test_only", Loader: func(L *glua.LState, h modules.Host) int { return 0 }}
	modules.Register(m)
	// The registry is process-wide: leave it as found, so -count=N reruns.
	t.Cleanup(func() { delete(modules.Registry, m.Name) })
	if _, ok := modules.Lookup("test_only"); !ok {
		t.Fatal("registered module not found")
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a name twice did not panic")
		}
	}()
	modules.Register(m)
}

// A module of functions gets the default loader: every state it loads
// into is bound to its host and gets a view of one table of the functions.
func TestRegisterFuncs(t *testing.T) {
	m := modules.Register(modules.Module{Name: "test_funcs", Funcs: map[string]glua.LGFunction{
		"host": func(L *glua.LState) int {
			L.Push(glua.LString(modules.HostOf(L).Name()))
			return 1
		},
	}})
	t.Cleanup(func() { delete(modules.Registry, m.Name) })
	if r, _ := modules.Lookup(m.Name); m.Loader == nil || r.Loader == nil {
		t.Fatal("Register did not set the loader of a module of functions")
	}
	var shared *glua.LTable
	for _, name := range []string{"a", "b"} {
		L := glua.NewState()
		t.Cleanup(L.Close)
		if n := m.Loader(L, modulestest.NewHost(name, modulestest.NewGPUHost(name, 1))); n != 1 {
			t.Fatalf("loader returned %d values", n)
		}
		view := L.Get(-1).(*glua.LTable)
		if shared == nil {
			shared = modules.Behind(view)
		}
		if modules.Behind(view) == nil || modules.Behind(view) != shared {
			t.Errorf("host %s: the module table is not a view of the one shared table", name)
		}
		L.SetGlobal("m", view)
		if err := L.DoString(`assert(m.host() == "` + name + `")`); err != nil {
			t.Errorf("host %s: %v", name, err)
		}
	}
}
