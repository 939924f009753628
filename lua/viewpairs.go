package lua

import (
	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules"
)

// A shared table's view (modules.SharedTable) holds only what its state
// set; the rest is read through its metatable. next and pairs list a view
// as the table it stands for: its own fields, then the shared ones it does
// not shadow, so `for k in pairs(string)` or over require("util") lists
// what a script can call, as in stock Lua.
func viewPairs(T *glua.LState) {
	next := T.NewFunction(viewNext)
	T.SetGlobal("next", next)
	T.SetGlobal("pairs", T.NewFunction(func(L *glua.LState) int {
		t := L.CheckTable(1)
		L.Push(next)
		L.Push(t)
		L.Push(glua.LNil)
		return 3
	}))
}

// viewNext is next(t, k) over a view and the table behind it (see
// viewPairs); over any other table it is Lua's next.
func viewNext(L *glua.LState) int {
	t := L.CheckTable(1)
	k := L.Get(2)
	key, v := nextInView(t, modules.Behind(t), k)
	if key == glua.LNil {
		L.Push(glua.LNil)
		return 1
	}
	L.Push(key)
	L.Push(v)
	return 2
}

// nextInView is the field after k in own (the view's fields), then in
// shared (nil: own has nothing behind it), skipping what own shadows.
func nextInView(own, shared *glua.LTable, k glua.LValue) (glua.LValue, glua.LValue) {
	if shared == nil {
		return own.Next(k)
	}
	// k is the view's own while the view holds it, or while neither
	// does (a field the loop cleared): else it is one of shared's.
	if k == glua.LNil || own.RawGet(k) != glua.LNil || shared.RawGet(k) == glua.LNil {
		if key, v := own.Next(k); key != glua.LNil {
			return key, v
		}
		k = glua.LNil
	}
	for {
		key, v := shared.Next(k)
		if key == glua.LNil || own.RawGet(key) == glua.LNil {
			return key, v
		}
		k = key
	}
}
