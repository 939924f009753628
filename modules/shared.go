package modules

import (
	"fmt"
	"sync"

	glua "github.com/yuin/gopher-lua"
)

// A shared table is one Lua table for the whole process, which every state
// reads through a view of its own: an empty table whose protected
// metatable indexes the shared one. A module's functions as closures over
// its host cost every concurrent host ~300 B each (BenchmarkFakeMemory);
// shared, they find their host through HostOf and keep what they need of
// it through Value. A state may set a field of its view (it shadows the
// shared one, for that state only); a Lua state's pairs and next list its
// fields, then the shared ones it does not shadow.
//
// Every state reads the shared table at once, which Go maps allow: it must
// not change once built, and nothing hands it out (its views' metatable
// answers getmetatable with false and refuses setmetatable).
type SharedTable struct {
	t  *glua.LTable
	mt *glua.LTable
}

var (
	sharedMu sync.Mutex
	// behind maps a views' metatable to its shared table.
	behind = map[*glua.LTable]*glua.LTable{}
)

// ShareTable makes t a shared table. t must not change afterwards.
func ShareTable(t *glua.LTable) *SharedTable {
	mt := &glua.LTable{Metatable: glua.LNil}
	mt.RawSetString("__index", t)
	mt.RawSetString("__metatable", glua.LFalse)
	sharedMu.Lock()
	behind[mt] = t
	sharedMu.Unlock()
	return &SharedTable{t: t, mt: mt}
}

// SharedFuncs is a shared table of fns, built once on first use: a module's
// functions, which take their host from the calling state (HostOf, Value).
func SharedFuncs(fns map[string]glua.LGFunction) func() *SharedTable {
	return sync.OnceValue(func() *SharedTable {
		T := glua.NewState(glua.Options{SkipOpenLibs: true})
		return ShareTable(FuncTable(T, fns))
	})
}

// Table is the shared table itself, for what reads it without a state.
func (s *SharedTable) Table() *glua.LTable { return s.t }

// View is a new view of s for L.
func (s *SharedTable) View(L *glua.LState) *glua.LTable {
	v := L.CreateTable(0, 0)
	v.Metatable = s.mt
	return v
}

// ViewSized is View with room for n fields of the state's own.
func (s *SharedTable) ViewSized(L *glua.LState, n int) *glua.LTable {
	v := L.CreateTable(0, n)
	v.Metatable = s.mt
	return v
}

// Behind is the shared table t is a view of, or nil: for what lists or
// reads tables without running Lua (hints, completion).
func Behind(t *glua.LTable) *glua.LTable {
	mt, ok := t.Metatable.(*glua.LTable)
	if !ok {
		return nil
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return behind[mt]
}

// hostSlot is what a state knows of its host: the host, and each
// module's per-host value.
type hostSlot struct {
	h    Host
	vals map[string]any
}

// hostSlotKey is the registry key of a state's hostSlot.
const hostSlotKey = "gpush.host"

// Bind makes h the host L serves, for HostOf and Value; a module's
// Loader (FuncsLoader) calls it. A state serves one host: binding
// another is a programming error.
func Bind(L *glua.LState, h Host) {
	reg := L.G.Registry
	if ud, ok := reg.RawGetString(hostSlotKey).(*glua.LUserData); ok {
		if ud.Value.(*hostSlot).h != h {
			panic(fmt.Sprintf("modules.Bind: this Lua state serves host %s, not %s", ud.Value.(*hostSlot).h.Name(), h.Name()))
		}
		return
	}
	ud := L.NewUserData()
	ud.Value = &hostSlot{h: h}
	reg.RawSetString(hostSlotKey, ud)
}

func slotOf(L *glua.LState) *hostSlot {
	ud, ok := L.G.Registry.RawGetString(hostSlotKey).(*glua.LUserData)
	if !ok {
		L.RaiseError("gpush: this Lua state serves no host")
	}
	return ud.Value.(*hostSlot)
}

// HostOf is the host L serves (see Bind).
func HostOf(L *glua.LState) Host { return slotOf(L).h }

// BoundHost is the host L serves, if one was bound: for shared functions
// that also run in states without a host.
func BoundHost(L *glua.LState) (Host, bool) {
	ud, ok := L.G.Registry.RawGetString(hostSlotKey).(*glua.LUserData)
	if !ok {
		return nil, false
	}
	return ud.Value.(*hostSlot).h, true
}

// Value is the per-host value a module keeps under key, made by mk on
// first use. A state runs on one goroutine at a time, which is the only
// one that reaches its slot.
func Value[T any](L *glua.LState, key string, mk func(Host) T) T {
	s := slotOf(L)
	if v, ok := s.vals[key]; ok {
		return v.(T)
	}
	v := mk(s.h)
	if s.vals == nil {
		s.vals = map[string]any{}
	}
	s.vals[key] = v
	return v
}
