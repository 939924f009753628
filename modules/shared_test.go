package modules_test

import (
	"strings"
	"sync"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/modulestest"
)

// counter is a module of shared functions that keeps a count per host.
var counter = modules.SharedFuncs(map[string]glua.LGFunction{
	"bump": func(L *glua.LState) int {
		n := modules.Value(L, "counter", func(modules.Host) *int { return new(int) })
		*n++
		L.Push(glua.LString(modules.HostOf(L).Name()))
		L.Push(glua.LNumber(*n))
		return 2
	},
})

func counterState(t *testing.T, h modules.Host) *glua.LState {
	L := glua.NewState()
	t.Cleanup(L.Close)
	modules.Bind(L, h)
	L.SetGlobal("counter", counter().View(L))
	return L
}

// Every state calls the same functions, each for its own host and with
// its own values; what a state sets on its view stays in that state, and
// the shared table behind the view cannot be reached or changed.
func TestSharedFuncsServeEachStatesHost(t *testing.T) {
	a := counterState(t, modulestest.NewHost("a", modulestest.NewGPUHost("a", 1)))
	b := counterState(t, modulestest.NewHost("b", modulestest.NewGPUHost("b", 1)))
	run := func(L *glua.LState, src string) string {
		t.Helper()
		if err := L.DoString(src); err != nil {
			t.Fatal(err)
		}
		return L.Get(-1).String()
	}
	run(a, `counter.bump()`)
	if got := run(a, `local h, n = counter.bump(); return h .. n`); got != "a2" {
		t.Errorf("a: %s, want a2", got)
	}
	if got := run(b, `local h, n = counter.bump(); return h .. n`); got != "b1" {
		t.Errorf("b: %s, want b1", got)
	}
	run(a, `counter.bump = function() return "mine" end`)
	if got := run(b, `return (counter.bump())`); got != "b" {
		t.Errorf("b after a set its view's field: %s", got)
	}
	if got := run(b, `return tostring(getmetatable(counter)) .. tostring(pcall(setmetatable, counter, {}))`); got != "falsefalse" {
		t.Errorf("the view's metatable: %s, want it protected", got)
	}
	if modules.Behind(b.GetGlobal("counter").(*glua.LTable)) != counter().Table() {
		t.Error("Behind does not find the shared table")
	}
}

// Many states call one shared function at once (go test -race).
func TestSharedFuncsConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('a' + i))
			L := counterState(t, modulestest.NewHost(name, modulestest.NewGPUHost(name, 1)))
			if err := L.DoString(`for i = 1, 200 do counter.bump() end`); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// A state serves one host: binding another is refused loudly.
func TestBindRefusesASecondHost(t *testing.T) {
	L := counterState(t, modulestest.NewHost("a", modulestest.NewGPUHost("a", 1)))
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "serves host a, not b") {
			t.Errorf("panic %v, want a refusal naming both hosts", r)
		}
	}()
	modules.Bind(L, modulestest.NewHost("b", modulestest.NewGPUHost("b", 1)))
}
