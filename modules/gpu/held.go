package gpu

import (
	"fmt"
	"slices"
	"strings"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

// DefaultHeldTimeout bounds gpu.wait_held: a service loading a large model
// opens its GPUs within a minute or two (an H200 worker 3.4-6.5 s after its
// start, the model after that).
const DefaultHeldTimeout = 120 * time.Second

// heldSlice bounds one helper wait of gpu.wait_held. The helper's wait
// ends at once on an owner it has not seen before; a process it saw
// holding a device file before it allocated is only caught by the look
// between two waits, so they are kept short.
const heldSlice = 5 * time.Second

// byGPU is gpu.by_gpu(holders, [gpus]): the holders flattened to one
// entry per holder and GPU, as gpu.holders{per_gpu=true} gives them, from
// tables a script already has (a wait's holders, a stop's).
func byGPU(L *glua.LState) int {
	const fn = "gpu.by_gpu"
	list := L.CheckTable(1)
	only, err := luaconv.IntList(L.Get(2))
	if err != nil {
		L.ArgError(2, fmt.Sprintf("%s: gpus: %v", fn, err))
	}
	if L.Get(2) != glua.LNil && len(only) == 0 {
		L.ArgError(2, fn+": gpus: empty list (leave it out to mean every GPU)")
	}
	out := L.CreateTable(list.Len(), 0)
	for i := 1; i <= list.Len(); i++ {
		h, ok := list.RawGetInt(i).(*glua.LTable)
		if !ok {
			L.ArgError(1, fmt.Sprintf("%s: entry %d: want a holder (from gpu.holders), got %s", fn, i, list.RawGetInt(i).Type()))
		}
		gpus, err := luaconv.IntList(h.RawGetString("gpus"))
		if err != nil {
			L.ArgError(1, fmt.Sprintf("%s: entry %d: gpus: %v", fn, i, err))
		}
		total := h.RawGetString("mem_mib")
		if len(gpus) == 0 {
			out.Append(copyWith(L, h, total, nil, nil))
			continue
		}
		byMem, _ := h.RawGetString("mem_by_gpu").(*glua.LTable)
		for _, g := range gpus {
			if len(only) > 0 && !slices.Contains(only, g) {
				continue
			}
			mib := glua.LValue(glua.LNumber(0))
			if v := rawAt(byMem, g); v != glua.LNil {
				mib = v
			} else if len(gpus) == 1 {
				mib = total
			}
			out.Append(copyWith(L, h, total, glua.LNumber(g), mib))
		}
	}
	L.Push(out)
	return 1
}

// copyWith is a shallow copy of holder h with gpu, mem_mib (on that GPU)
// and total_mib (on all) set; gpu nil for a holder of no GPU.
func copyWith(L *glua.LState, h *glua.LTable, total, gpu, mib glua.LValue) *glua.LTable {
	t := L.CreateTable(0, 48)
	h.ForEach(func(k, v glua.LValue) { t.RawSet(k, v) })
	if gpu != nil {
		t.RawSetString("gpu", gpu)
		t.RawSetString("mem_mib", mib)
	}
	t.RawSetString("total_mib", total)
	return t
}

// heldTarget is what gpu.wait_held waits for.
type heldTarget struct {
	what string // "unit sglang.service", for messages
	m    match
	pid  int
	any  bool // owner=false: any holder of a chosen GPU, not only an owner
	gpus []int
}

func (t heldTarget) holds(h helper.Holder) bool {
	if !t.any && !h.Owner {
		return false
	}
	if len(h.GPUs) == 0 || len(t.gpus) > 0 && !anyInt(t.gpus, h.GPUs) {
		return false
	}
	if t.pid > 0 {
		return h.PID == t.pid || h.PPID == t.pid || h.PGID == t.pid
	}
	return t.m.all(h)
}

func checkHeld(L *glua.LState) (heldTarget, time.Duration, time.Duration) {
	const fn = "gpu.wait_held"
	o := luaconv.CheckOpts(L, 1, fn)
	var t heldTarget
	n := 0
	if u := o.String("unit", ""); u != "" {
		if !strings.Contains(u, ".") {
			u += ".service" // as systemctl reads it
		}
		t.m.units, t.what, n = []string{u}, "unit "+u, n+1
	}
	if c := o.String("container", ""); c != "" {
		t.m.containers, t.what, n = []string{c}, "container "+c, n+1
	}
	if p := o.Int("pid", 0); p != 0 {
		if p < 0 {
			L.ArgError(1, fmt.Sprintf("%s: option pid: %d is not a pid", fn, p))
		}
		t.pid, t.what, n = int(p), fmt.Sprintf("pid %d", p), n+1
	}
	if n != 1 {
		L.ArgError(1, fn+": give exactly one of unit=, container= or pid=")
	}
	t.gpus = o.Ints("gpus")
	if o.Has("gpus") && len(t.gpus) == 0 {
		L.ArgError(1, fn+": option gpus: empty list (leave it out to mean every GPU)")
	}
	t.any = !o.Bool("owner", true)
	timeout := o.Duration("timeout", DefaultHeldTimeout)
	interval := o.Duration("interval", 0)
	o.Done()
	if timeout <= 0 {
		L.ArgError(1, fmt.Sprintf("%s: option timeout: %s is not positive", fn, timeout))
	}
	return t, timeout, interval
}

// waitHeld is gpu.wait_held: until the unit, container or pid given holds
// one of the chosen GPUs again (owns memory or a compute context there,
// unless owner=false), or the timeout passes. Between looks the helper's
// wait-free watches the GPUs: with them free it settles, which a new owner
// ends at once; with them held, a new owner ends it too.
func (m *mod) waitHeld(L *glua.LState) int {
	const fn = "gpu.wait_held"
	t, timeout, interval := checkHeld(L)
	if m.h.Check() {
		// Nothing was started under check: nothing to wait for.
		r := L.CreateTable(0, 6)
		r.RawSetString("ok", glua.LTrue)
		r.RawSetString("status", glua.LString(modules.StatusWould))
		r.RawSetString("rows", L.CreateTable(0, 0))
		r.RawSetString("would", L.CreateTable(0, 0))
		r.RawSetString("elapsed", glua.LNumber(0))
		L.Push(r)
		return 1
	}
	what := "a GPU"
	if len(t.gpus) > 0 {
		what = "one of GPU " + intsText(t.gpus, ",")
	}
	modules.Step(m.h, "%s: waiting for %s to hold %s", fn, t.what, what)
	start := time.Now()
	deadline := start.Add(timeout)
	status, reason := modules.StatusExpired, ""
	var found []helper.Holder
	for {
		s := m.fetch(L, fn)
		for _, h := range s.Holders {
			if t.holds(h) {
				found = append(found, h)
			}
		}
		if len(found) > 0 {
			status = modules.StatusDone
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			none := "no GPU"
			if len(t.gpus) > 0 {
				none = "none of GPU " + intsText(t.gpus, ",")
			}
			reason = fmt.Sprintf("%s holds %s after %s", t.what, none, timeout.Round(time.Millisecond))
			break
		}
		slice := min(left, heldSlice)
		req := helper.WaitFreeRequest{Config: m.h.HelperConfig(), GPUs: t.gpus, Timeout: helper.Duration(slice),
			Settle: helper.Duration(slice), IgnoreShared: true}
		if interval > 0 {
			req.Interval = helper.Duration(interval)
		}
		var resp helper.WaitFreeResponse
		modules.CallHelper(L, m.h, fn, helper.VerbWaitFree, req, &resp)
		switch resp.Outcome {
		case helper.WaitNewHolder, helper.WaitFreed, helper.WaitTimedOut:
			// Someone came, or the slice ran out: the next look says whether it is ours.
			continue
		}
		// The GPUs cannot be watched (unknown memory, no GPU known).
		status, reason = modules.StatusFailed, fmt.Sprintf("%s: cannot watch the GPUs: %s", t.what, waitReason(resp))
		break
	}
	r := L.CreateTable(0, 6)
	r.RawSetString("ok", glua.LBool(status == modules.StatusDone))
	r.RawSetString("status", glua.LString(status))
	luaconv.SetStr(r, "reason", reason)
	r.RawSetString("rows", perGPUList(L, found, t.gpus))
	r.RawSetString("elapsed", glua.LNumber(time.Since(start).Seconds()))
	L.Push(r)
	return 1
}

// rawAt is t[i] for any integer i: RawGetInt reads only the array part,
// and GPU 0 is in the hash part.
func rawAt(t *glua.LTable, i int) glua.LValue {
	if t == nil {
		return glua.LNil
	}
	return t.RawGet(glua.LNumber(i))
}
