// Package systemd is the `systemd` Lua module: stop, start, restart and
// query systemd units through the helper's unit verb (systemctl run with an
// argument vector, never a shell). See README.md.
package systemd

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/gpu"
	"github.com/gpush/gpush/modules/luaconv"
)

//go:embed README.md
var doc string

// Module is the systemd module as registered: one function per action.
var Module = modules.Register(modules.Module{Name: "systemd", Doc: doc,
	Funcs: modules.FuncsFor([]string{helper.UnitStop, helper.UnitStart, helper.UnitRestart, helper.UnitStatus}, action)})

// unitName is what systemd accepts in a unit name (escapes included); a
// leading '-' is refused so that a name can never read as an option.
var unitName = regexp.MustCompile(`^[A-Za-z0-9:_.@\\-]{1,255}$`)

// CheckUnit reads argument n as a unit name.
func CheckUnit(L *glua.LState, n int, fn string) string {
	u := L.CheckString(n)
	if !unitName.MatchString(u) || strings.HasPrefix(u, "-") {
		L.ArgError(n, fmt.Sprintf("%s: invalid unit name %q (letters, digits and :_.@-\\ only, not starting with -)", fn, u))
	}
	return u
}

// checkUnits reads argument n as a list of unit names (its form for
// several units): each must be valid and none may repeat another, so that
// nothing runs on a list with a bad name.
func checkUnits(L *glua.LState, n int, fn string, list *glua.LTable) []string {
	var units []string
	at := map[string]int{}
	bad := func(i int, format string, a ...any) {
		L.ArgError(n, fmt.Sprintf("%s: unit %d of the list: %s", fn, i, fmt.Sprintf(format, a...)))
	}
	for i := 1; i <= list.Len(); i++ {
		v, ok := list.RawGetInt(i).(glua.LString)
		if !ok {
			bad(i, "%s, want a unit name", list.RawGetInt(i).Type())
		}
		u := string(v)
		if !unitName.MatchString(u) || strings.HasPrefix(u, "-") {
			bad(i, "invalid unit name %q (letters, digits and :_.@-\\ only, not starting with -)", u)
		}
		full, err := helper.NormalizeUnit(u)
		if err != nil {
			bad(i, "%v", err)
		}
		if j, dup := at[full]; dup {
			bad(i, "%q repeats unit %d (%s)", u, j, full)
		}
		at[full] = i
		units = append(units, u)
	}
	// A table with other keys than 1..n is not a list of units.
	keys := 0
	list.ForEach(func(glua.LValue, glua.LValue) { keys++ })
	if keys != len(units) {
		L.ArgError(n, fmt.Sprintf("%s: want a list of unit names (%d entries, %d of them at 1..%d)", fn, keys, len(units), len(units)))
	}
	if len(units) == 0 {
		L.ArgError(n, fn+": the list of units is empty")
	}
	return units
}

func action(act string) glua.LGFunction {
	fn := "systemd." + act
	return func(L *glua.LState) int {
		h := modules.HostOf(L)
		req := helper.UnitRequest{Config: h.HelperConfig(), Action: act}
		if list, ok := L.Get(1).(*glua.LTable); ok {
			req.Units = checkUnits(L, 1, fn, list)
		} else {
			req.Unit = CheckUnit(L, 1, fn)
		}
		o := luaconv.CheckOpts(L, 2, fn)
		if o.Has("timeout") {
			req.Timeout = helper.Duration(o.Duration("timeout", 0))
		}
		o.Done()
		would := h.Check() && act != helper.UnitStatus
		if would {
			// Under check only look: report the unit as it is now.
			req.Action = helper.UnitStatus
		}
		var resp helper.UnitResponse
		modules.CallHelper(L, h, fn, helper.VerbUnit, req, &resp)
		units := []helper.UnitResponse{resp}
		if req.Units != nil {
			if len(resp.Units) != len(req.Units) {
				L.RaiseError("%s: the helper answered for %d of %d units", fn, len(resp.Units), len(req.Units))
			}
			units = resp.Units
		}
		// A unit systemd does not know means nothing was acted on (the
		// helper's rule, helper.RefuseUnknown); under check, which only
		// looked, the same rule says what the action would have done.
		refused := false
		if act != helper.UnitStatus {
			ptrs := make([]*helper.UnitResponse, len(units))
			for i := range units {
				ptrs[i] = &units[i]
			}
			refused = len(helper.RefuseUnknown(act, ptrs)) > 0
		}
		t := L.CreateTable(len(units), 0)
		for _, u := range units {
			t.Append(result(L, h, act, would, refused, u))
		}
		if req.Units == nil {
			L.Push(t.RawGetInt(1))
			return 1
		}
		L.Push(t)
		return 1
	}
}

// result records one unit's outcome (stats, a unit that may restart) and
// returns its table; a refused unit was not acted on, and would not be.
func result(L *glua.LState, h modules.Host, act string, would, refused bool, resp helper.UnitResponse) *glua.LTable {
	t := unitTable(L, resp)
	t.RawSetString("missing", glua.LBool(resp.Unknown() != ""))
	t.RawSetString("status", glua.LString(modules.StatusOf(resp.OK && !refused)))
	if refused {
		if resp.Unknown() != "" {
			h.Stats().AddUnit(act, would, resp) // counted failed, never stopped
		}
		t.RawSetString("action", glua.LString(act))
		t.RawSetString("changed", glua.LFalse)
		return t
	}
	h.Stats().AddUnit(act, would, resp)
	if !would && act == helper.UnitStop {
		noteRestart(h, resp)
	}
	if would {
		// The plan: the one unit it would act on, as a row of its own.
		w := L.CreateTable(1, 0)
		row := L.CreateTable(0, 3)
		row.RawSetString("unit", glua.LString(resp.Unit))
		row.RawSetString("action", glua.LString(act))
		row.RawSetString("active_state", glua.LString(resp.ActiveState))
		w.Append(row)
		t.RawSetString("ok", glua.LTrue)
		t.RawSetString("status", glua.LString(modules.StatusWould))
		t.RawSetString("would", w)
		t.RawSetString("action", glua.LString(act))
		return t
	}
	// changed, as Ansible's: the action changed the unit's state (a stop of
	// an active unit, a start of an inactive one), as the recap counts it.
	t.RawSetString("changed", glua.LBool(changed(act, resp)))
	return t
}

// changed: act changed the unit (it was running and is stopped now, or
// the other way round; a restart always).
func changed(act string, r helper.UnitResponse) bool {
	if !r.Systemd || r.LoadState == "not-found" {
		return false
	}
	was := r.PriorActiveState == "active" || r.PriorActiveState == "activating" || r.PriorActiveState == "reloading" ||
		r.PriorActiveState == "deactivating"
	switch act {
	case helper.UnitStop:
		return was && (r.ActiveState == "inactive" || r.ActiveState == "failed")
	case helper.UnitStart:
		return r.OK && !was
	case helper.UnitRestart:
		return r.OK
	}
	return false
}

// noteRestart records a stopped unit whose Restart= is set as something
// that may bring a GPU worker back, so that gpu.wait_free keeps the GPUs
// watched for the settle time instead of calling them free at once.
func noteRestart(h modules.Host, r helper.UnitResponse) {
	if !r.Systemd || r.LoadState == "not-found" || r.Restart == "" || r.Restart == "no" {
		return
	}
	m := helper.Manager{Kind: helper.ManagerUnit, Unit: r.Unit, Restart: r.Restart, Restarts: helper.RestartsYes,
		ActiveState: r.ActiveState, SubState: r.SubState, Stop: []string{"systemctl", "stop", r.Unit}}
	m.Why = fmt.Sprintf("unit %s has Restart=%s: it may start again", r.Unit, r.Restart)
	h.Managers().Add(m)
}

// unitTable is one unit's result, its tables sized for their fields (see
// modules.FuncTable); result may add 4 to it.
func unitTable(L *glua.LState, r helper.UnitResponse) *glua.LTable {
	t := L.CreateTable(0, 19)
	t.RawSetString("ok", glua.LBool(r.OK))
	t.RawSetString("unit", glua.LString(r.Unit))
	t.RawSetString("action", glua.LString(r.Action))
	t.RawSetString("systemd", glua.LBool(r.Systemd))
	luaconv.SetStr(t, "load_state", r.LoadState)
	luaconv.SetStr(t, "restart", r.Restart)
	luaconv.SetStr(t, "active_state", r.ActiveState)
	luaconv.SetStr(t, "prior_active_state", r.PriorActiveState)
	luaconv.SetStr(t, "kill_mode", r.KillMode)
	luaconv.SetStr(t, "sub_state", r.SubState)
	t.RawSetString("main_pid", glua.LNumber(r.MainPID))
	luaconv.SetStr(t, "reason", r.Reason)
	rem := L.CreateTable(len(r.Remaining), 0)
	for _, p := range r.Remaining {
		pt := L.CreateTable(0, 6)
		pt.RawSetString("pid", glua.LNumber(p.PID))
		pt.RawSetString("start_time", glua.LNumber(p.StartTime))
		pt.RawSetString("boot_id", glua.LString(p.BootID))
		pt.RawSetString("comm", glua.LString(p.Comm))
		pt.RawSetString("cmdline", glua.LString(strings.Join(p.Cmdline, " ")))
		pt.RawSetString("state", glua.LString(p.State))
		rem.Append(pt)
	}
	t.RawSetString("rows", rem)
	hs := L.CreateTable(len(r.GPUHolders), 0)
	for _, h := range r.GPUHolders {
		hs.Append(gpu.HolderTable(L, h))
	}
	t.RawSetString("holders", hs)
	return t
}
