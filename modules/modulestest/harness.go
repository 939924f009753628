package modulestest

import (
	_ "embed"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/luaconv"
)

//go:embed assert.lua
var assertLua string

// NewState returns a Lua state with the safe standard libraries, the
// `assert` test helpers, a `fake` table driving h's model (see Fake), and
// each module loaded as a global over h. The state's context is ctx's
// test context; close it with L.Close.
func NewState(t testing.TB, h *Host, mods ...modules.Module) *glua.LState {
	t.Helper()
	L := glua.NewState(glua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		fn   glua.LGFunction
	}{{glua.LoadLibName, glua.OpenPackage}, {glua.BaseLibName, glua.OpenBase},
		{glua.TabLibName, glua.OpenTable}, {glua.StringLibName, glua.OpenString},
		{glua.MathLibName, glua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(glua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetContext(t.Context())
	fn, err := L.Load(strings.NewReader(assertLua), "assert.lua")
	if err != nil {
		t.Fatalf("assert.lua: %v", err)
	}
	L.Push(fn)
	L.Call(0, 1)
	L.SetGlobal("assert", L.Get(-1))
	L.Pop(1)
	L.SetGlobal("fake", Fake(L, h))
	for _, m := range mods {
		m.Loader(L, h)
		L.SetGlobal(m.Name, L.Get(-1))
		L.Pop(1)
	}
	return L
}

// RunLuaFiles runs every file matching glob (e.g. "testdata/*_test.lua")
// as a subtest, each in a fresh state over the host newHost returns.
func RunLuaFiles(t *testing.T, glob string, newHost func(t *testing.T) *Host, mods ...modules.Module) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatalf("glob %s: %v", glob, err)
	}
	if len(files) == 0 {
		t.Fatalf("no Lua test files match %s", glob)
	}
	sort.Strings(files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".lua"), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatalf("read %s: %v", f, err)
			}
			h := newHost(t)
			L := NewState(t, h, mods...)
			defer L.Close()
			fn, err := L.Load(strings.NewReader(string(src)), f)
			if err != nil {
				t.Fatalf("%v", err)
			}
			L.Push(fn)
			if err := L.PCall(0, 0, nil); err != nil {
				t.Fatalf("%v", err)
			}
		})
	}
}

// Fake returns the `fake` table Lua tests use to drive the model behind h:
//
//	fake.add_holder{mem={[0]=10850}, gpus={0}, comm=, user=, unit=, pid=, ppid=, pgid=,
//	    container=ID, runtime=, container_name=, pod=, namespace=, pod_uid=, age_s=,
//	    cmdline={...}, ignore_term=, stuck=, protected=, monitor=, uvm=, heir=,
//	    respawn_after_polls=, zombie_leader=, exit_after_polls=, appear_after_polls=} -> pid
//	fake.add_proc{pid=, ppid=, comm=, cmdline={...}} -> pid   (a supervisor, no GPU)
//	fake.ghost(pid, name, gpu, mib, keeper)   (memory of a dead pid kept by keeper)
//	fake.source(gpu, "driver"|"device")   fake.unknown(gpu)   fake.no_smi()
//	fake.holders_of(gpu) -> pids
//	fake.add_unit{name=, active=, main_pid=, stay=, restart=}
//	fake.used(gpu) -> MiB          fake.alive(pid) -> bool
//	fake.leak(gpu, mib)            fake.baseline(gpu, mib)
//	fake.calls([verb]) -> list of helper requests (as JSON tables)
//	fake.runs() -> list of {argv=, stdin=, sudo=}
//	fake.check(bool)               fake.lose()
//	fake.events() -> list of {kind, level, message}
//	fake.stats() -> the host's stats (as JSON tables)
//	fake.file(path) -> content or nil    fake.set_file(path, content)
func Fake(L *glua.LState, h *Host) *glua.LTable {
	m := h.FakeConn.Model
	toLua := func(v any) glua.LValue {
		b, err := json.Marshal(v)
		if err != nil {
			L.RaiseError("fake: %v", err)
		}
		lv, err := luaconv.DecodeJSON(L, b)
		if err != nil {
			L.RaiseError("fake: %v", err)
		}
		return lv
	}
	fns := map[string]glua.LGFunction{
		"add_holder": func(L *glua.LState) int {
			t := L.CheckTable(1)
			o := luaconv.OptsOf(L, 1, "fake.add_holder", t)
			fh := FakeHolder{MemByGPU: map[int]int64{}}
			if mem, ok := t.RawGetString("mem").(*glua.LTable); ok {
				mem.ForEach(func(k, v glua.LValue) {
					fh.MemByGPU[int(glua.LVAsNumber(k))] = int64(glua.LVAsNumber(v))
				})
			}
			o.Has("mem")
			fh.PID = int(o.Int("pid", 0))
			fh.PPID = int(o.Int("ppid", 0))
			fh.PGID = int(o.Int("pgid", 0))
			fh.Comm = o.String("comm", "")
			fh.User = o.String("user", "")
			fh.Unit = o.String("unit", "")
			// A container as the helper names it: the full id in, the short
			// one shown; pod and names as the kubelet's folders give them.
			if id := o.String("container", ""); id != "" {
				fh.ContainerID, fh.Container = id, helper.ShortID(id)
				fh.Runtime = o.String("runtime", "docker")
			}
			fh.ContainerName = o.String("container_name", "")
			fh.Pod, fh.Namespace, fh.PodUID = o.String("pod", ""), o.String("namespace", ""), o.String("pod_uid", "")
			fh.AgeSeconds = float64(o.Int("age_s", 0))
			fh.IgnoreTerm = o.Bool("ignore_term", false)
			fh.Stuck = o.Bool("stuck", false)
			fh.Protected = o.Bool("protected", false)
			fh.Monitor = o.Bool("monitor", false)
			// uvm: nil keeps AddHolder's default, false never opens it, true
			// always does (a protected name with nvidia-uvm open).
			fh.UVM = o.Has("uvm") && o.Bool("uvm", false)
			fh.NoUVM = o.Has("uvm") && !fh.UVM
			fh.Heir = int(o.Int("heir", 0))
			fh.RespawnAfterPolls = int(o.Int("respawn_after_polls", 0))
			fh.ZombieLeader = o.Bool("zombie_leader", false)
			if o.Has("gpus") {
				fh.GPUs = o.Ints("gpus")
			}
			fh.ExitAfterPolls = int(o.Int("exit_after_polls", 0))
			fh.AppearAfterPolls = int(o.Int("appear_after_polls", 0))
			if o.Has("cmdline") {
				fh.Cmdline = o.Strings("cmdline")
			}
			o.Done()
			p := m.AddHolder(fh)
			L.Push(glua.LNumber(p.PID))
			return 1
		},
		"add_proc": func(L *glua.LState) int {
			o := luaconv.OptsOf(L, 1, "fake.add_proc", L.CheckTable(1))
			p := FakeProc{Identity: helper.Identity{PID: int(o.Int("pid", 0))}, PPID: int(o.Int("ppid", 0)),
				Comm: o.String("comm", "")}
			if o.Has("cmdline") {
				p.Cmdline = o.Strings("cmdline")
			}
			o.Done()
			L.Push(glua.LNumber(m.AddProc(p).PID))
			return 1
		},
		"ghost": func(L *glua.LState) int {
			m.AddGhost(L.CheckInt(1), L.CheckString(2), L.CheckInt(3), int64(L.CheckInt(4)), L.CheckInt(5))
			return 0
		},
		"source": func(L *glua.LState) int {
			m.GPU(L.CheckInt(1)).Source = L.CheckString(2)
			return 0
		},
		"unknown": func(L *glua.LState) int {
			m.GPU(L.CheckInt(1)).Unknown = true
			return 0
		},
		"no_smi": func(L *glua.LState) int {
			m.NoSMI = true
			return 0
		},
		"holders_of": func(L *glua.LState) int {
			L.Push(toLua(append([]int{}, m.HoldersOf(L.CheckInt(1))...)))
			return 1
		},
		"add_unit": func(L *glua.LState) int {
			o := luaconv.OptsOf(L, 1, "fake.add_unit", L.CheckTable(1))
			u := FakeUnit{Name: o.String("name", ""), Active: o.Bool("active", true),
				MainPID: int(o.Int("main_pid", 0)), StayAfterStop: o.Bool("stay", false),
				Restart: o.String("restart", "")}
			o.Done()
			m.AddUnit(u)
			return 0
		},
		"used": func(L *glua.LState) int {
			L.Push(glua.LNumber(m.UsedMiB(L.CheckInt(1))))
			return 1
		},
		"alive": func(L *glua.LState) int {
			L.Push(glua.LBool(m.Alive(L.CheckInt(1))))
			return 1
		},
		"leak": func(L *glua.LState) int {
			m.GPU(L.CheckInt(1)).LeakedMiB = int64(L.CheckInt(2))
			return 0
		},
		"baseline": func(L *glua.LState) int {
			m.GPU(L.CheckInt(1)).BaselineMiB = int64(L.CheckInt(2))
			return 0
		},
		"calls": func(L *glua.LState) int {
			var reqs []any
			for _, c := range h.FakeConn.Calls(L.OptString(1, "helper")) {
				if c.Method == "helper" {
					reqs = append(reqs, c.Request)
				}
			}
			L.Push(toLua(append([]any{}, reqs...)))
			return 1
		},
		"runs": func(L *glua.LState) int {
			var out []any
			for _, c := range h.FakeConn.Calls("run") {
				out = append(out, map[string]any{"argv": c.Argv, "stdin": c.Stdin, "sudo": c.Opts.Sudo,
					"timeout": c.Opts.Timeout.Seconds()})
			}
			L.Push(toLua(append([]any{}, out...)))
			return 1
		},
		"check": func(L *glua.LState) int {
			h.SetCheck(L.CheckBool(1))
			return 0
		},
		"lose": func(L *glua.LState) int {
			h.FakeConn.Lose()
			return 0
		},
		"events": func(L *glua.LState) int {
			L.Push(toLua(append([]any{}, anySlice(h.Events())...)))
			return 1
		},
		"stats": func(L *glua.LState) int {
			L.Push(toLua(h.Stats().Snapshot()))
			return 1
		},
		"file": func(L *glua.LState) int {
			b, ok := h.FakeConn.File(L.CheckString(1))
			if !ok {
				L.Push(glua.LNil)
			} else {
				L.Push(glua.LString(b))
			}
			return 1
		},
		"set_file": func(L *glua.LState) int {
			h.FakeConn.SetFile(L.CheckString(1), []byte(L.CheckString(2)))
			return 0
		},
	}
	return L.SetFuncs(L.NewTable(), fns)
}

func anySlice[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
