package lua

// Per-host memory limits for Lua states.
//
// gopher-lua allocates through the Go runtime and has no allocator hook, so
// a state's size cannot be counted as it grows. Two parts bound it instead:
//
//   - The builtins that make one large value in one call (string.rep,
//     table.concat) compute the size first and refuse what would pass the
//     limit: one call must not allocate 1 TiB before anyone can look.
//   - A watchdog reads how much the process has allocated (runtime/metrics).
//     A state whose last measured size plus all that was allocated since
//     could pass its limit is asked to measure itself (no state can grow
//     by more than the process allocates). It does so on its own goroutine
//     at its next VM instruction (the VM calls its context's Done before
//     every instruction), walking what it can reach with the limit as a
//     byte budget; over the limit, the host fails with "memory limit",
//     otherwise it goes on untouched.
//
// Limits: the size is an estimate of the values' bytes, not Go's
// footprint: with the GC's headroom and the copies of a growing array, the
// process holds up to about 3-4 times the limit for a host that grows
// without end before it is caught (measured: 128MiB, ~400 MB RSS); a state is
// stopped between instructions only, so one builtin that is not guarded
// (string.gsub, a huge string.format) can still allocate much in one call;
// a state is caught a little past the limit: what it allocates while the
// watchdog polls (10ms) and between two measurements (50ms, or 4 times the
// last measurement's length).

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	glua "github.com/yuin/gopher-lua"
)

// DefaultMemoryLimit bounds each host's Lua data when neither
// Options.MemoryLimit nor the host var gpush_lua_memory says otherwise.
const DefaultMemoryLimit = 256 << 20

// MemoryVar is the host var (inventory or -e) that sets a host's limit.
const MemoryVar = "gpush_lua_memory"

// ParseSize reads a byte count: "268435456", "256MiB", "256M", "1GiB", "1g",
// "512k". K, M, G, T are powers of 1024 with or without "iB"/"B".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	lower := strings.ToLower(t)
	for _, suf := range []struct {
		s string
		m int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"tb", 1 << 40},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1}} {
		if strings.HasSuffix(lower, suf.s) {
			lower, mult = strings.TrimSpace(strings.TrimSuffix(lower, suf.s)), suf.m
			break
		}
	}
	n, err := strconv.ParseInt(lower, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size like 256MiB", s)
	}
	return n * mult, nil
}

// FormatSize writes n bytes for people: 256 MiB, 1.0 TiB, 12 B.
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f, u = f/1024, u+1
	}
	if u == 0 || f == math.Trunc(f) {
		return fmt.Sprintf("%.0f %s", f, units[u])
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}

// hostMemoryLimit is the limit for a host with vars: gpush_lua_memory when
// set (a size or a number of bytes), else def (0: DefaultMemoryLimit).
func hostMemoryLimit(vars map[string]any, def int64) (int64, error) {
	if def <= 0 {
		def = DefaultMemoryLimit
	}
	switch v := vars[MemoryVar].(type) {
	case nil:
		return def, nil
	case string:
		n, err := ParseSize(v)
		if err != nil {
			return 0, fmt.Errorf("var %s: %w", MemoryVar, err)
		}
		return n, nil
	case int, int64, float64:
		f := toFloat(v)
		if !(f >= 1) || f > math.MaxInt64 {
			return 0, fmt.Errorf("var %s: %v is not a positive number of bytes", MemoryVar, v)
		}
		return int64(f), nil
	default:
		return 0, fmt.Errorf("var %s: want a size like \"256MiB\", got %T", MemoryVar, v)
	}
}

// memGuard bounds one host's Lua state.
type memGuard struct {
	limit   int64
	main    *glua.LState
	onTrip  func(msg string) // fails the host (hostState.setFailed)
	pending atomic.Bool      // the watchdog asks for a measurement
	tripped atomic.Bool
	gid     atomic.Uint64 // the goroutine running the state now
	// What the last measurement found, and the process's allocation count
	// when it began; the earliest time of the next one (Unix ns).
	lastSize, lastAllocs, nextAt atomic.Int64
}

// errMemory is the context error of a tripped state: it reads as a
// cancellation to the modules, so they stop like on Ctrl-C.
type errMemory struct{ msg string }

func (e errMemory) Error() string        { return e.msg }
func (e errMemory) Is(target error) bool { return target == context.Canceled }

var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// vmCtx is the context the VM of one Lua thread sees. Its Done runs before
// every instruction: it is where a state measures itself.
type vmCtx struct {
	context.Context
	g *memGuard
	L *glua.LState // the thread this context belongs to
}

func (c *vmCtx) Done() <-chan struct{} {
	g := c.g
	if g.pending.Load() && !g.tripped.Load() && curGoroutine() == g.gid.Load() {
		// Only on the state's own goroutine: modules hand this context to
		// goroutines of their own, which must not walk the state.
		g.pending.Store(false)
		g.check(c.L, 0, "its Lua data")
	}
	if g.tripped.Load() {
		return closedDone
	}
	return c.Context.Done()
}

func (c *vmCtx) Err() error {
	if c.g.tripped.Load() {
		return errMemory{"memory limit"}
	}
	return c.Context.Err()
}

// curGoroutine is the running goroutine's id, read from its stack header
// ("goroutine 12 [running]:"). Go offers no cheaper identity; it is only
// read while a measurement is pending.
func curGoroutine() uint64 {
	var buf [32]byte
	b := string(buf[:runtime.Stack(buf[:], false)])
	b, _ = strings.CutPrefix(b, "goroutine ")
	id, _, _ := strings.Cut(b, " ")
	n, _ := strconv.ParseUint(id, 10, 64)
	return n
}

// newMemGuard puts a limit on L: the guarded builtins, a context that can
// measure, and a place in the watchdog's list (until release).
func newMemGuard(L *glua.LState, limit int64, onTrip func(string)) *memGuard {
	g := &memGuard{limit: limit, main: L, onTrip: onTrip}
	g.lastAllocs.Store(allocated())
	g.enter()
	watchdog.add(g)
	return g
}

// enter marks the calling goroutine as the one that runs the state now.
func (g *memGuard) enter() { g.gid.Store(curGoroutine()) }

// wrap gives the VM ctx through the guard.
func (g *memGuard) wrap(ctx context.Context) context.Context {
	return &vmCtx{Context: ctx, g: g, L: g.main}
}

func (g *memGuard) release() { watchdog.remove(g) }

// forgive lets a REPL session go on after a trip: it is measured again once
// a limit's worth has been allocated, so its next line can free the data.
func (g *memGuard) forgive() {
	if !g.tripped.Load() {
		return
	}
	g.lastSize.Store(0)
	g.lastAllocs.Store(allocated())
	g.pending.Store(false)
	g.tripped.Store(false)
}

// check measures the state (from L, the running thread) plus extra bytes
// about to be allocated, and trips the guard when that passes the limit.
func (g *memGuard) check(L *glua.LState, extra int64, what string) bool {
	start := time.Now()
	g.lastAllocs.Store(allocated())
	used := measure([]*glua.LState{g.main, L}, g.limit-extra)
	g.lastSize.Store(used)
	// The next measurement waits for at least 4 times this one's length:
	// walking itself takes at most a fifth of a state's time.
	end := time.Now()
	g.nextAt.Store(end.Add(max(measureGap, 4*end.Sub(start))).UnixNano())
	if used+extra <= g.limit {
		return false
	}
	msg := fmt.Sprintf("memory limit: %s passed %s (the limit per host: --lua-memory or var %s)",
		what, FormatSize(g.limit), MemoryVar)
	g.tripped.Store(true)
	g.onTrip(msg)
	return true
}

// reserve is called by a guarded builtin before it makes n bytes: it raises
// "memory limit" when the state and n together would pass the limit. Small
// sizes are let through unmeasured, the watchdog covers them.
func (g *memGuard) reserve(L *glua.LState, n int64, what string) {
	if n < g.limit/8 {
		return
	}
	if n > g.limit {
		msg := fmt.Sprintf("memory limit: %s would make %s, over the limit of %s per host (--lua-memory or var %s)",
			what, FormatSize(n), FormatSize(g.limit), MemoryVar)
		g.tripped.Store(true)
		g.onTrip(msg)
		L.RaiseError("%s", msg)
	}
	if g.check(L, n, what+" with the script's data") {
		L.RaiseError("memory limit")
	}
}

// guardStdLibs puts guarded builtins into the template's libraries (every
// state shares them): string.rep and table.concat reserve what they are
// about to make, coroutine.create and coroutine.wrap give the new thread a
// measuring context too (a loop inside it would go unseen). Each finds
// the calling state's guard through its context; without one they are the
// builtins.
func guardStdLibs(T *glua.LState) {
	str := T.GetGlobal("string").(*glua.LTable)
	rep := str.RawGetString("rep").(*glua.LFunction)
	str.RawSetString("rep", T.NewFunction(func(L *glua.LState) int {
		if g := guardOf(L); g != nil {
			s, n := L.CheckString(1), L.CheckInt(2)
			if n > 0 && len(s) > 0 {
				size := int64(math.MaxInt64)
				if int64(n) <= math.MaxInt64/int64(len(s)) {
					size = int64(n) * int64(len(s))
				}
				g.reserve(L, size, "string.rep")
			}
		}
		return callOrig(L, rep)
	}))
	tbl := T.GetGlobal("table").(*glua.LTable)
	concat := tbl.RawGetString("concat").(*glua.LFunction)
	tbl.RawSetString("concat", T.NewFunction(func(L *glua.LState) int {
		if g := guardOf(L); g != nil {
			t := L.CheckTable(1)
			sep := int64(len(L.OptString(2, "")))
			i, j := L.OptInt(3, 1), L.OptInt(4, t.Len())
			i, j = max(i, 1), min(j, t.Len())
			var size int64
			for k := i; k <= j && size <= g.limit; k++ {
				switch v := t.RawGetInt(k).(type) {
				case glua.LString:
					size += int64(len(v)) + sep
				case glua.LNumber:
					size += 24 + sep
				}
			}
			g.reserve(L, size, "table.concat")
		}
		return callOrig(L, concat)
	}))
	co := T.GetGlobal("coroutine").(*glua.LTable)
	create := co.RawGetString("create").(*glua.LFunction)
	co.RawSetString("create", T.NewFunction(func(L *glua.LState) int {
		n := callOrig(L, create)
		if g := guardOf(L); g != nil {
			if th, ok := L.Get(-1).(*glua.LState); ok {
				g.measureThread(th)
			}
		}
		return n
	}))
	wrap := co.RawGetString("wrap").(*glua.LFunction)
	co.RawSetString("wrap", T.NewFunction(func(L *glua.LState) int {
		n := callOrig(L, wrap)
		if g := guardOf(L); g != nil {
			if fn, ok := L.Get(-1).(*glua.LFunction); ok {
				for _, uv := range fn.Upvalues {
					if th, ok := uv.Value().(*glua.LState); ok {
						g.measureThread(th)
					}
				}
			}
		}
		return n
	}))
}

// guardOf is the guard of the calling state (or thread), or nil.
func guardOf(L *glua.LState) *memGuard {
	if c, ok := L.Context().(*vmCtx); ok {
		return c.g
	}
	return nil
}

func (g *memGuard) measureThread(th *glua.LState) {
	if ctx := th.Context(); ctx != nil {
		th.SetContext(&vmCtx{Context: ctx, g: g, L: th})
	}
}

// callOrig calls the builtin fn with this call's arguments.
func callOrig(L *glua.LState, fn *glua.LFunction) int {
	return fn.GFunction(L)
}

// The sizes the walk counts: an estimate of Go's bytes for each value.
const (
	sizeSlot   = 16 // an LValue interface in an array or register
	sizeEntry  = 48 // a hash entry: key, value and map overhead
	sizeTable  = 96
	sizeFunc   = 128
	sizeObject = 64
	sizeNumber = 8
	sizeString = 16
	shareMin   = 1024 // strings this long are counted once per backing array (shorter ones per use: the set of seen strings stays small)
)

// measure estimates the bytes reachable from the states' globals, registry
// and stacks; it stops once budget is passed (returning more than budget).
func measure(roots []*glua.LState, budget int64) int64 {
	w := walker{budget: budget, seen: map[unsafe.Pointer]bool{}}
	w.push(roots[0].G.Global)
	w.push(roots[0].G.Registry)
	for _, L := range roots {
		w.push(L)
	}
	for len(w.todo) > 0 && w.total <= w.budget {
		v := w.todo[len(w.todo)-1]
		w.todo = w.todo[:len(w.todo)-1]
		w.visit(v)
	}
	return w.total
}

type walker struct {
	budget, total int64
	seen          map[unsafe.Pointer]bool
	todo          []glua.LValue
}

// size counts v's own bytes and queues what v refers to.
func (w *walker) size(v glua.LValue) int64 {
	switch x := v.(type) {
	case glua.LString:
		n := int64(len(x))
		if n >= shareMin {
			p := unsafe.Pointer(unsafe.StringData(string(x)))
			if w.seen[p] {
				return sizeString
			}
			w.seen[p] = true
		}
		return sizeString + n
	case glua.LNumber:
		return sizeNumber
	case *glua.LTable, *glua.LFunction, *glua.LUserData, *glua.LState:
		w.push(v)
	}
	return 0
}

func (w *walker) push(v glua.LValue) {
	var p unsafe.Pointer
	switch x := v.(type) {
	case *glua.LTable:
		p = unsafe.Pointer(x)
	case *glua.LFunction:
		p = unsafe.Pointer(x)
	case *glua.LUserData:
		p = unsafe.Pointer(x)
	case *glua.LState:
		p = unsafe.Pointer(x)
	default:
		return
	}
	if p == nil || w.seen[p] {
		return
	}
	w.seen[p] = true
	w.todo = append(w.todo, v)
}

func (w *walker) visit(v glua.LValue) {
	switch x := v.(type) {
	case *glua.LTable:
		n := int64(x.Len())
		// The array part grows by doubling: count its likely capacity.
		w.total += sizeTable + sizeSlot*(int64(nextPow2(n))-n)
		x.ForEach(func(k, val glua.LValue) {
			if w.total > w.budget {
				return
			}
			if kn, ok := k.(glua.LNumber); ok && float64(kn) >= 1 && int64(kn) <= n {
				w.total += sizeSlot + w.size(val)
			} else {
				w.total += sizeEntry + w.size(k) + w.size(val)
			}
		})
		w.push(x.Metatable)
	case *glua.LFunction:
		w.total += sizeFunc
		w.push(x.Env)
		for _, uv := range x.Upvalues {
			if uv != nil {
				w.total += sizeSlot + w.size(uv.Value())
			}
		}
	case *glua.LUserData:
		w.total += sizeObject
		w.push(x.Env)
		w.push(x.Metatable)
	case *glua.LState:
		w.total += sizeObject
		w.stack(x)
	}
}

// stack counts the named locals and temporaries of every frame of L.
func (w *walker) stack(L *glua.LState) {
	for level := 0; w.total <= w.budget; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			return
		}
		for no := 1; w.total <= w.budget; no++ {
			name, v := L.GetLocal(dbg, no)
			if name == "" {
				break
			}
			w.total += sizeSlot + w.size(v)
		}
	}
}

// allocated is the bytes the process has allocated since it started: it
// only grows, so no state can have grown by more since a measurement.
func allocated() int64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return math.MaxInt64 // unknown: measure every time
	}
	return int64(sample[0].Value.Uint64())
}

// memWatch is the one watchdog of the process: it runs while some state is
// guarded.
type memWatch struct {
	mu     sync.Mutex
	guards map[*memGuard]struct{}
	stop   chan struct{}
}

var watchdog = &memWatch{guards: map[*memGuard]struct{}{}}

const (
	// watchEvery is how often the watchdog reads the allocation count.
	watchEvery = 10 * time.Millisecond
	// measureGap is the least time between two measurements of one state,
	// so that a large innocent state in a busy process does not spend its
	// time walking itself.
	measureGap = 50 * time.Millisecond
)

func (w *memWatch) add(g *memGuard) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.guards[g] = struct{}{}
	if w.stop == nil {
		w.stop = make(chan struct{})
		go w.loop(w.stop)
	}
}

func (w *memWatch) remove(g *memGuard) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.guards, g)
	if len(w.guards) == 0 && w.stop != nil {
		close(w.stop)
		w.stop = nil
	}
}

// loop asks a state to measure itself when its last size plus everything
// the process allocated since could pass its limit: a state far below its
// limit is left alone until enough has been allocated.
func (w *memWatch) loop(stop chan struct{}) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now, a := time.Now().UnixNano(), allocated()
		w.mu.Lock()
		for g := range w.guards {
			if !g.pending.Load() && g.lastSize.Load()+(a-g.lastAllocs.Load()) > g.limit &&
				now >= g.nextAt.Load() {
				g.pending.Store(true)
			}
		}
		w.mu.Unlock()
	}
}

// nextPow2 is the least power of two >= n (0 for 0).
func nextPow2(n int64) int64 {
	if n <= 0 {
		return 0
	}
	p := int64(1)
	for p < n {
		p <<= 1
	}
	return p
}
