package lua

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
)

// TestMemoryLimitFailsOnlyItsHost: scripts that allocate without bound fail
// their own host with "memory limit", in one call or growing in a loop, in
// pcall or a coroutine; a host beside them finishes ok. The timeout only
// keeps a broken limit from hanging the test: it shows as "timed out".
func TestMemoryLimitFailsOnlyItsHost(t *testing.T) {
	cases := map[string]string{
		"rep":     `return #string.rep("x", 2^40)`,
		"method":  `local s = "xy"; return #s:rep(2^39)`,
		"concat":  `local t = {}; for i = 1, 5 do t[i] = string.rep("x", 1024*1024) end; return #table.concat(t, ",")`,
		"grow":    `local t = {}; local i = 0; while true do i = i + 1; t[i] = i end`,
		"strings": `local t = {}; while true do t[#t+1] = ("x"):rep(200) .. #t end`,
		"double":  `local s = "x"; while true do s = s .. s end`,
		"pcall":   `pcall(function() local t = {}; while true do t[#t+1] = {#t} end end); return "survived"`,
		"co":      `local f = coroutine.wrap(function() grown = {}; while true do grown[#grown+1] = #grown end end); pcall(f); return "survived"`,
		"ok":      `local t, s = {}, {}; for i = 1, 100000 do t[i] = i end; for i = 1, 1000 do s[i] = tostring(i) end; return #t + #table.concat(s)`,
	}
	names := []string{"rep", "method", "concat", "grow", "strings", "double", "pcall", "co", "ok"}
	f, hosts := newFleet(names...)
	var wg sync.WaitGroup
	results := make(map[string]HostResult)
	var mu sync.Mutex
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := Run(t.Context(), script(cases[n]), hosts[i:i+1], Options{Dial: f.dial, MemoryLimit: 8 << 20, Timeout: 2 * time.Minute})
			mu.Lock()
			results[n] = r[0]
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, n := range names[:len(names)-1] {
		r := results[n]
		t.Logf("%s: %s in %s", n, r.Error, r.Elapsed)
		if r.Status != StatusFailed || !strings.HasPrefix(r.Error, "memory limit") || !strings.Contains(r.Error, "8 MiB") {
			t.Errorf("%s: %s %q, want failed: memory limit ... 8 MiB", n, r.Status, r.Error)
		}
	}
	if r := results["ok"]; r.Status != StatusOK || r.Value != float64(102893) {
		t.Errorf("ok: %+v, want ok 102893", r)
	}
	if !strings.Contains(results["rep"].Error, "string.rep would make 1 TiB") {
		t.Errorf("rep: %q does not say what it refused", results["rep"].Error)
	}
	if !strings.Contains(results["concat"].Error, "table.concat with the script's data passed 8 MiB") {
		t.Errorf("concat: %q, want the refused table.concat named", results["concat"].Error)
	}
	for _, n := range names {
		if !f.conns[n].Closed() {
			t.Errorf("%s: connection left open", n)
		}
	}
}

// TestMemoryLimitVar: gpush_lua_memory sets a host's own limit; a bad one
// fails that host, naming the var.
func TestMemoryLimitVar(t *testing.T) {
	f, hosts := newFleet("small", "default", "bad")
	hosts[0].Vars["gpush_lua_memory"] = "1MiB"
	hosts[2].Vars["gpush_lua_memory"] = "lots"
	res := Run(t.Context(), script(`return #string.rep("x", 4*1024*1024)`), hosts, Options{Dial: f.dial})
	if res[0].Status != StatusFailed || !strings.Contains(res[0].Error, "over the limit of 1 MiB") {
		t.Errorf("small: %+v", res[0])
	}
	if res[1].Status != StatusOK || res[1].Value != float64(4<<20) {
		t.Errorf("default: %+v, want ok under 256 MiB", res[1])
	}
	if res[2].Status != StatusFailed || !strings.Contains(res[2].Error, `var gpush_lua_memory: "lots" is not a size`) {
		t.Errorf("bad: %+v", res[2])
	}
}

// TestMeasure checks the estimate the limit is judged by: what a state
// holds is counted, a string shared by many slots once.
func TestMeasure(t *testing.T) {
	L := glua.NewState()
	defer L.Close()
	size := func() int64 { return measure([]*glua.LState{L, L}, 1<<40) }
	empty := size()
	if err := L.DoString(`big = {}; for i = 1, 1000000 do big[i] = i end`); err != nil {
		t.Fatal(err)
	}
	// A million numbers in an array: 16 + 8 bytes each, counted; Go uses
	// about the same.
	if got := size() - empty; got < 20e6 || got > 40e6 {
		t.Errorf("a million numbers: %d bytes, want about 24 MB", got)
	}
	if err := L.DoString(`big = nil; local s = string.rep("x", 1000000); shared = {}; for i = 1, 1000 do shared[i] = s end`); err != nil {
		t.Fatal(err)
	}
	if got := size() - empty; got < 1e6 || got > 2e6 {
		t.Errorf("one 1 MB string in 1000 slots: %d bytes, want about 1 MB", got)
	}
	// Locals of a running function are counted too: measured from inside.
	var inside int64
	L.SetGlobal("probe", L.NewFunction(func(L *glua.LState) int {
		inside = measure([]*glua.LState{L, L}, 1<<40)
		return 0
	}))
	if err := L.DoString(`shared = nil; local t = {}; for i = 1, 100000 do t[i] = i end; probe()`); err != nil {
		t.Fatal(err)
	}
	if got := inside - empty; got < 2e6 {
		t.Errorf("a local table of 100000 numbers: %d bytes, want > 2 MB", got)
	}
	// The budget stops the walk.
	if got := measure([]*glua.LState{L, L}, 1000); got > 1000+1<<20 {
		t.Errorf("walk with a budget of 1000 went on to %d", got)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"268435456": 256 << 20, "256MiB": 256 << 20, "256M": 256 << 20,
		"1GiB": 1 << 30, "1g": 1 << 30, "512k": 512 << 10, " 2 TiB ": 2 << 40, "100b": 100} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1M", "0", "1.5G", "9999999999T", "lots"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	if s := FormatSize(1 << 40); s != "1 TiB" {
		t.Errorf("FormatSize(1 TiB) = %q", s)
	}
	if s := FormatSize(3 << 19); s != "1.5 MiB" {
		t.Errorf("FormatSize(1.5 MiB) = %q", s)
	}
}

// blocker is a module whose block() ignores its context until the test
// releases it: a builtin that cannot be interrupted, like a backtracking
// string.find, without burning a core of the test machine.
var blocker struct {
	mu       sync.Mutex
	release  chan struct{}
	entered  chan struct{}
	finished chan struct{}
}

func init() {
	modules.Register(modules.Module{Name: "testblock", Loader: func(L *glua.LState, h modules.Host) int {
		L.Push(modules.FuncTable(L, map[string]glua.LGFunction{
			"block": func(L *glua.LState) int {
				blocker.mu.Lock()
				entered, release := blocker.entered, blocker.release
				blocker.mu.Unlock()
				close(entered)
				<-release
				// What a module says after its host was given up.
				h.Emit(modules.Event{Kind: modules.EventLog, Level: modules.LevelInfo, Message: "after"})
				blocker.mu.Lock()
				close(blocker.finished)
				blocker.mu.Unlock()
				return 0
			},
		}))
		return 1
	}})
}

func armBlocker() (entered, release, finished chan struct{}) {
	blocker.mu.Lock()
	defer blocker.mu.Unlock()
	blocker.entered, blocker.release, blocker.finished = make(chan struct{}), make(chan struct{}), make(chan struct{})
	return blocker.entered, blocker.release, blocker.finished
}

// TestAbandonAfterTimeout: a host stuck in a builtin past --timeout is
// failed "did not stop" once the grace is over and the run ends, while the
// other host's result stands; what the stuck script does later is not
// reported.
func TestAbandonAfterTimeout(t *testing.T) {
	_, release, finished := armBlocker()
	f, hosts := newFleet("stuck", "fine")
	var mu sync.Mutex
	var late []string
	var results []HostResult
	src := `if host.name == "fine" then return "done" end
		testblock.block()`
	res := Run(t.Context(), script(src), hosts, Options{Dial: f.dial, Timeout: 50 * time.Millisecond, StopGrace: 50 * time.Millisecond,
		OnEvent: func(e Event) {
			if e.Kind == modules.EventLog {
				mu.Lock()
				late = append(late, e.Message)
				mu.Unlock()
			}
		},
		OnResult: func(r HostResult) {
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}})
	if res[0].Status != StatusFailed || res[0].Error != "did not stop: abandoned after --timeout 50ms" {
		t.Errorf("stuck: %+v", res[0])
	}
	if res[1].Status != StatusOK || res[1].Value != "done" {
		t.Errorf("fine: %+v", res[1])
	}
	if len(results) != 2 {
		t.Errorf("OnResult got %d results, want 2", len(results))
	}
	close(release)
	<-finished
	mu.Lock()
	defer mu.Unlock()
	if len(late) != 0 {
		t.Errorf("lines of an abandoned host reached OnEvent: %q", late)
	}
}

// TestAbandonAfterInterrupt: Ctrl-C ends a run whose host is stuck in a
// builtin.
func TestAbandonAfterInterrupt(t *testing.T) {
	entered, release, finished := armBlocker()
	defer func() { close(release); <-finished }()
	f, hosts := newFleet("stuck")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { <-entered; cancel() }()
	res := Run(ctx, script(`testblock.block()`), hosts, Options{Dial: f.dial, StopGrace: 50 * time.Millisecond})
	if res[0].Status != StatusFailed || res[0].Error != "interrupted; did not stop: abandoned" {
		t.Errorf("stuck: %+v", res[0])
	}
}

// TestSessionMemoryLimit: a REPL line that grows without bound gets
// "memory limit"; the session stays usable once the data is let go.
func TestSessionMemoryLimit(t *testing.T) {
	f, hosts := newFleet("gpu01")
	s, err := NewSession(hosts[0], "", Options{Dial: f.dial, MemoryLimit: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := s.Eval(ctx, `big = {}; for i = 1, 1e9 do big[i] = i end`); err == nil || !strings.Contains(err.Error(), "gpu01: memory limit: its Lua data passed 8 MiB") {
		t.Errorf("growing table: %v, want memory limit", err)
	}
	if _, err := s.Eval(ctx, `#string.rep("x", 2^40)`); err == nil || !strings.Contains(err.Error(), "memory limit: string.rep would make 1 TiB") {
		t.Errorf("string.rep: %v, want memory limit", err)
	}
	vs, err := s.Eval(ctx, `big = nil; collectgarbage(); return 1 + 1`)
	if err != nil || len(vs) != 1 || vs[0] != float64(2) {
		t.Errorf("after letting go: %v %v, want 2", vs, err)
	}
}

// BenchmarkGuardedLoop: what the measuring context costs the VM, which
// calls its Done before every instruction.
func BenchmarkGuardedLoop(b *testing.B) {
	const src = `local n = 0; for i = 1, 1000000 do n = n + i end`
	for _, guarded := range []bool{false, true} {
		name := "plain"
		if guarded {
			name = "guarded"
		}
		b.Run(name, func(b *testing.B) {
			L := glua.NewState()
			defer L.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			L.SetContext(ctx)
			if guarded {
				g := newMemGuard(L, DefaultMemoryLimit, func(string) {})
				defer g.release()
				L.SetContext(g.wrap(ctx))
			}
			for b.Loop() {
				if err := L.DoString(src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
