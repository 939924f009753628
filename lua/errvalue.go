package lua

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/modules/luaconv"
)

// A script may raise any value: error({code = 42}), error(nil), a
// userdata. Lua adds the position only to a string (and error(msg, 0)
// asks it not to), and tostring of a table is its address. What ends a
// host is therefore rendered here: the value as a Lua literal with its
// keys in a fixed order, at the position the value was raised, read from
// the error's traceback.

// errorValueMax bounds a rendered value: a table raised by mistake may be
// big (the whole gpu.snapshot()).
const errorValueMax = 400

// raisedValue is the host's error for a value that is not a message:
// "free.lua:3: error({code=42})". trace is the error's traceback; fn the
// builtin that raised it when the traceback names none.
func raisedValue(v glua.LValue, trace, fn string) string {
	at, by := raisedAt(trace)
	if by == "" {
		by = fn
	}
	text := by + "(" + Literal(v) + ")"
	if at == "" {
		return text
	}
	return at + ": " + text
}

// A traceback line of a Lua function: "\tfree.lua:3: in function 'f'".
var traceLuaFrame = regexp.MustCompile(`^\t(.+):(\d+): in `)

// A traceback line of a builtin: "\t[G]: in function 'error'".
var traceGoFrame = regexp.MustCompile(`^\t\[G\]: in function '([^']+)'`)

// raisedAt reads a traceback (gopher-lua's ApiError.StackTrace): the
// position ("free.lua:3") of the innermost Lua frame, and the builtin
// above it, if one raised the error ("error").
func raisedAt(trace string) (at, by string) {
	for _, line := range strings.Split(trace, "\n") {
		if m := traceGoFrame.FindStringSubmatch(line); m != nil {
			by = m[1]
			continue
		}
		if m := traceLuaFrame.FindStringSubmatch(line); m != nil {
			return m[1] + ":" + m[2], by
		}
	}
	return "", by
}

// isMessage: v is what Lua treats as an error message, a string (which
// carries its position, or not with error(msg, 0)).
func isMessage(v glua.LValue) bool {
	_, ok := v.(glua.LString)
	return ok
}

// Literal writes v as Lua source would: nil, true, 42, "text", {1, 2,
// code=42, ["a b"]={...}}; the list part first, then the other keys in
// order (numbers, then strings, then booleans), so the same value always
// reads the same. Functions and userdata, which have no literal, are named
// by what they are; a table met again (a cycle) or nested too deep is
// {...}; the whole is cut at errorValueMax bytes.
func Literal(v glua.LValue) string {
	var b strings.Builder
	writeLiteral(&b, v, 0, map[*glua.LTable]bool{})
	s := b.String()
	if len(s) > errorValueMax {
		s = s[:errorValueMax] + "..."
	}
	return s
}

var luaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var luaKeywords = map[string]bool{"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
	"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true, "goto": true}

func writeLiteral(b *strings.Builder, v glua.LValue, depth int, seen map[*glua.LTable]bool) {
	if b.Len() > errorValueMax {
		return
	}
	switch x := v.(type) {
	case *glua.LNilType:
		b.WriteString("nil")
	case glua.LBool:
		b.WriteString(strconv.FormatBool(bool(x)))
	case glua.LNumber:
		b.WriteString(luaconv.FormatNumber(float64(x)))
	case glua.LString:
		b.WriteString(strconv.Quote(string(x)))
	case *glua.LTable:
		if seen[x] || depth >= 4 {
			b.WriteString("{...}")
			return
		}
		seen[x] = true
		defer delete(seen, x)
		writeTable(b, x, depth, seen)
	case *glua.LFunction:
		if x.IsG || x.Proto == nil {
			b.WriteString("function<builtin>")
		} else {
			fmt.Fprintf(b, "function<%s:%d>", x.Proto.SourceName, x.Proto.LineDefined)
		}
	case *glua.LUserData:
		if x.Value == nil {
			b.WriteString("userdata")
		} else {
			fmt.Fprintf(b, "userdata<%T>", x.Value)
		}
	default:
		b.WriteString(v.Type().String())
	}
}

func writeTable(b *strings.Builder, t *glua.LTable, depth int, seen map[*glua.LTable]bool) {
	type entry struct{ k, v glua.LValue }
	var rest []entry
	n := 0
	for ; t.RawGetInt(n+1) != glua.LNil; n++ {
	}
	t.ForEach(func(k, v glua.LValue) {
		if f, ok := k.(glua.LNumber); ok && float64(f) >= 1 && float64(f) <= float64(n) && float64(f) == float64(int(f)) {
			return // in the list part
		}
		rest = append(rest, entry{k, v})
	})
	rank := func(k glua.LValue) int {
		switch k.(type) {
		case glua.LNumber:
			return 0
		case glua.LString:
			return 1
		case glua.LBool:
			return 2
		}
		return 3
	}
	sort.SliceStable(rest, func(i, j int) bool {
		a, c := rest[i].k, rest[j].k
		if ra, rc := rank(a), rank(c); ra != rc {
			return ra < rc
		}
		switch x := a.(type) {
		case glua.LNumber:
			return x < c.(glua.LNumber)
		case glua.LString:
			return x < c.(glua.LString)
		case glua.LBool:
			return !bool(x) && bool(c.(glua.LBool))
		}
		return false
	})
	b.WriteByte('{')
	first := true
	sep := func() bool {
		if b.Len() > errorValueMax {
			return false
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		return true
	}
	for i := 1; i <= n; i++ {
		if !sep() {
			return
		}
		writeLiteral(b, t.RawGetInt(i), depth+1, seen)
	}
	for _, e := range rest {
		if !sep() {
			return
		}
		if s, ok := e.k.(glua.LString); ok && luaName.MatchString(string(s)) && !luaKeywords[string(s)] {
			b.WriteString(string(s))
		} else {
			b.WriteByte('[')
			writeLiteral(b, e.k, depth+1, seen)
			b.WriteByte(']')
		}
		b.WriteByte('=')
		writeLiteral(b, e.v, depth+1, seen)
	}
	b.WriteByte('}')
}
