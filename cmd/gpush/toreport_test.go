package main

import (
	"testing"

	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
)

// The recap's figures: an unknown reading (-1) is counted apart, never
// summed; kills are exited after TERM or killed with KILL; a host changed
// only when something was (or would be) done.
func TestToReportFigures(t *testing.T) {
	r := lua.HostResult{Host: "a", Status: lua.StatusOK, Stats: modules.StatsSnapshot{
		GPUs:  []modules.GPUStat{{Index: 0, BeforeMiB: 7000, AfterMiB: 0}, {Index: 1, BeforeMiB: -1, AfterMiB: -1}},
		Kills: modules.KillStats{Exited: 1, Killed: 2, Gone: 3, Skipped: 1},
		Units: modules.UnitStats{Stopped: 1, Unchanged: 2, Failed: 1}, Managers: modules.ManagerStats{Stopped: 1},
	}}
	st := toReport(r, "").Stats
	if st.MemBeforeMiB != 7000 || st.MemBeforeUnknown != 1 || st.MemAfterMiB != 0 || st.MemAfterUnknown != 1 {
		t.Errorf("memory %+v: want 7000 + 1 unknown -> 0 + 1 unknown", st)
	}
	if st.Exited != 1 || st.Killed != 2 || st.UnitsStopped != 1 || st.UnitsUnchanged != 2 || st.UnitsFailed != 1 ||
		st.RestartersStopped != 1 || !st.Changed {
		t.Errorf("figures %+v", st)
	}
	idle := toReport(lua.HostResult{Host: "b", Status: lua.StatusOK, Stats: modules.StatsSnapshot{
		Kills: modules.KillStats{Gone: 2}, Units: modules.UnitStats{Unchanged: 2, Failed: 1}}}, "").Stats
	if idle.Changed || idle.Exited+idle.Killed != 0 {
		t.Errorf("a rerun that found everything done changed nothing: %+v", idle)
	}
}
