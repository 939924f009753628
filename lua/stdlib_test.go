package lua

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
)

// describeValue writes what a script can see from v: tables key by key in
// pairs order, or by sorted key where sorted (a table met again by the path
// it was first met at), builtins by their Go function, so that two states
// compare as text.
func describeValue(v glua.LValue, path string, seen map[*glua.LTable]string, out *strings.Builder, sorted bool) {
	switch x := v.(type) {
	case *glua.LTable:
		if p, ok := seen[x]; ok {
			fmt.Fprintf(out, "%s = same as %s\n", path, p)
			return
		}
		seen[x] = path
		if lib := modules.Behind(x); lib != nil {
			// A state's view of a shared library reads as the library,
			// with what the state set in front.
			seen[lib] = path
			fmt.Fprintf(out, "%s = table\n", path)
			var keys []glua.LValue
			for k, _ := lib.Next(glua.LNil); k != glua.LNil; k, _ = lib.Next(k) {
				keys = append(keys, k)
			}
			for k, _ := x.Next(glua.LNil); k != glua.LNil; k, _ = x.Next(k) {
				if lib.RawGet(k) == glua.LNil {
					keys = append(keys, k)
				}
			}
			if sorted {
				sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
			}
			for _, k := range keys {
				v := x.RawGet(k)
				if v == glua.LNil {
					v = lib.RawGet(k)
				}
				describeValue(v, path+"["+k.String()+"]", seen, out, sorted)
			}
			return
		}
		fmt.Fprintf(out, "%s = table\n", path)
		var keys []glua.LValue
		for k, _ := x.Next(glua.LNil); k != glua.LNil; k, _ = x.Next(k) {
			keys = append(keys, k)
		}
		if sorted {
			sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		}
		for _, k := range keys {
			describeValue(x.RawGet(k), path+"["+k.String()+"]", seen, out, sorted)
		}
		if mt, ok := x.Metatable.(*glua.LTable); ok {
			describeValue(mt, path+".<metatable>", seen, out, sorted)
		}
	case *glua.LFunction:
		fmt.Fprintf(out, "%s = function G=%v go=%#x upvalues=%d\n", path, x.IsG,
			reflect.ValueOf(x.GFunction).Pointer(), len(x.Upvalues))
		for i, uv := range x.Upvalues {
			describeValue(uv.Value(), fmt.Sprintf("%s.<upvalue %d>", path, i), seen, out, sorted)
		}
	default:
		fmt.Fprintf(out, "%s = %s %s\n", path, v.Type(), v.String())
	}
}

func describeState(L *glua.LState, sorted bool) string {
	var b strings.Builder
	seen := map[*glua.LTable]string{}
	describeValue(L.G.Global, "_G", seen, &b, sorted)
	describeValue(L.G.Registry, "<registry>", seen, &b, sorted)
	describeValue(L.GetMetatable(glua.LString("")), "<string metatable>", seen, &b, sorted)
	return b.String()
}

func sameLines(t *testing.T, what, got, want string) {
	t.Helper()
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(gl), len(wl)) {
		if gl[i] != wl[i] {
			t.Fatalf("%s: line %d: %q, want %q", what, i+1, gl[i], wl[i])
		}
	}
	t.Fatalf("%s: %d lines, want %d", what, len(gl), len(wl))
}

// The copied libraries are what opening them afresh gives: same names,
// same builtins, same aliases (string.__index is string,
// package.loaded.os is os, _G._G is _G).
func TestStdLibsAsOpenedAfresh(t *testing.T) {
	fresh := glua.NewState(glua.Options{SkipOpenLibs: true})
	defer fresh.Close()
	openStdLibsFresh(fresh)
	wrapStdLibs(fresh)
	copied := glua.NewState(glua.Options{SkipOpenLibs: true})
	defer copied.Close()
	openStdLibs(copied)
	// gopher-lua fills a library from a Go map, so pairs order differs
	// from one fresh state to the next: the copy keeps the template's.
	sameLines(t, "copied vs fresh", describeState(copied, true), describeState(fresh, true))
	sameLines(t, "copied vs template", describeState(copied, false), describeState(stdTemplate().T, false))
	want, got := describeState(fresh, true), describeState(copied, true)
	for _, name := range []string{"string", "os", "math", "table", "coroutine", "package"} {
		if !strings.Contains(want, "_G["+name+"] = ") {
			t.Errorf("no %s library in\n%s", name, want)
		}
	}
	for _, gone := range []string{"_G[os][execute]", "_G[dofile]", "_G[loadfile]"} {
		if strings.Contains(got, gone+" =") {
			t.Errorf("%s is there", gone)
		}
	}
	// Each state has tables of its own: the template's are not handed out,
	// a shared library is read through a view of the state's own.
	if copied.GetGlobal("string") == stdTemplate().T.GetGlobal("string") ||
		copied.GetGlobal("string") == fresh.GetGlobal("string") {
		t.Error("the string library table is shared between states")
	}
	for _, name := range sharedLibs {
		if modules.Behind(copied.GetGlobal(name).(*glua.LTable)) != stdTemplate().T.GetGlobal(name) {
			t.Errorf("%s is not a view of the shared library", name)
		}
	}
}

// What one host's script does to the libraries stays on that host, and
// every library works as the standard one does in a real run.
func TestStdLibsPerHost(t *testing.T) {
	r, _ := one(t, `
		-- A shared library's view: its metatable cannot be read or changed.
		assert(getmetatable(string) == false and not pcall(setmetatable, math, {}))
		string.upper = function() return "mine" end
		assert(("x"):upper() == "mine" and rawget(string, "upper") and not rawget(string, "lower"))
		math.pi = 3
		table.insert = "gone"
		package.loaded.os.clock = nil
		coroutine.create = nil
		local mt = getmetatable("")
		mt.__index.lower = nil
		return "changed"`, Options{})
	if r.Status != StatusOK {
		t.Fatalf("first host: %+v", r)
	}
	r, _ = one(t, `
		local out = {}
		out[#out+1] = ("abc"):upper() .. string.format("%d", 7) .. ("ABC"):lower()
		out[#out+1] = math.pi > 3.14 and math.floor(2.5) == 2
		local t = {3, 1, 2}
		table.insert(t, 0)
		table.sort(t)
		out[#out+1] = table.concat(t, ",")
		out[#out+1] = type(os.clock()) == "number" and type(os.time()) == "number" and os.execute == nil
		local co = coroutine.create(function(a) local b = coroutine.yield(a + 1); return b * 2 end)
		local _, x = coroutine.resume(co, 1)
		local _, y = coroutine.resume(co, 5)
		local w = coroutine.wrap(function() coroutine.yield("w") end)
		out[#out+1] = x .. " " .. y .. " " .. w()
		package.preload.pre = function(name) return {name = name} end
		out[#out+1] = require("pre").name .. " " .. tostring(require("string") == string)
		out[#out+1] = tostring(getfenv(print) == _G and _G._G == _G and package.loaded._G == _G)
		out[#out+1] = tostring(pcall(setfenv, print, {}))
		local names = {}
		for k in pairs(_G) do names[#names+1] = k end
		out[#out+1] = #names > 40 and dofile == nil and loadfile == nil
		return out`, Options{})
	want := "[ABC7abc true 0,1,2,3 true 2 10 w pre true true false true]"
	if r.Status != StatusOK || fmt.Sprint(r.Value) != want {
		t.Fatalf("got %+v\nwant %s", r, want)
	}
}

// A state's globals are the template's, setGlobals' addedGlobals and the
// modules': what openStdLibs sizes _G for.
func TestGlobalsAsSized(t *testing.T) {
	r, _ := one(t, `local n = 0 for _ in pairs(_G) do n = n + 1 end return n`, Options{})
	want := stdTemplate().globals + addedGlobals + len(modules.All())
	if r.Status != StatusOK || r.Value != float64(want) {
		t.Fatalf("got %+v, want %d globals", r.Value, want)
	}
}

// pairs and next list a shared library's view as the library: the
// script's own fields, then each shared one it did not replace, once.
func TestPairsListViews(t *testing.T) {
	var want []string
	stdTemplate().T.GetGlobal("string").(*glua.LTable).ForEach(func(k, _ glua.LValue) { want = append(want, k.String()) })
	r, _ := one(t, `
		local function names(t)
			local seen, n = {}, 0
			for k, v in pairs(t) do
				assert(not seen[k], "twice: " .. tostring(k))
				assert(t[k] == v, "value of " .. tostring(k))
				seen[k], n = true, n + 1
			end
			return seen, n
		end
		local before, n0 = names(string)
		string.upper = function() return "mine" end
		string.mine = true
		local after, n1 = names(string)
		assert(after.upper and after.mine and n1 == n0 + 1, "after: " .. n1 .. " vs " .. n0)
		assert(next(string) ~= nil and select("#", next({})) == 1)
		-- a field the loop clears does not end the listing early
		local count = 0
		for k in pairs(string) do
			count = count + 1
			if k == "mine" then string.mine = nil end
		end
		assert(count == n1, "cleared in the loop: " .. count .. " of " .. n1)
		local _, nu = names(require("util"))
		local _, ng = names(gpu)
		local _, np = names({1, 2, x = 3})
		local list = {}
		for k in pairs(before) do list[#list + 1] = k end
		table.sort(list)
		return {n0 = n0, util = nu, gpu = ng, plain = np, names = table.concat(list, ",")}`, Options{})
	if r.Status != StatusOK {
		t.Fatalf("%+v", r)
	}
	m := r.Value.(map[string]any)
	slices.Sort(want)
	if fmt.Sprint(m["n0"]) != fmt.Sprint(len(want)) || m["names"] != strings.Join(want, ",") {
		t.Errorf("pairs(string) listed %v %v, want %d: %s", m["n0"], m["names"], len(want), strings.Join(want, ","))
	}
	if fmt.Sprint(m["plain"]) != "3" {
		t.Errorf("a plain table listed %v fields, want 3", m["plain"])
	}
	for _, k := range []string{"util", "gpu"} {
		if n, _ := m[k].(float64); n < 5 {
			t.Errorf("pairs(%s) listed %v fields", k, m[k])
		}
	}
}
