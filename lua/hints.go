package lua

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"

	"github.com/gpush/gpush/modules"
)

// This file turns gopher-lua's "attempt to call a non-function object" and
// "attempt to index a non-table object(nil) with key 'x'", which name no
// variable, into "gpu.holder is nil; did you mean gpu.holders?". The VM
// does not say which expression failed, so the expressions on the failing
// line are read from the source and looked up in the state the script
// stopped in. Only globals, module aliases (local util = require("util"))
// and their fields are looked up: any other name the script declares local
// anywhere is left alone, so a hint never describes a different variable
// than the one that failed.

var (
	callError  = regexp.MustCompile(`^attempt to call a non-function object$`)
	indexError = regexp.MustCompile(`^attempt to index a non-table object\((\w+)\) with key '(.*)'$`)
)

// ExplainError rewrites msg, a runtime error of the chunk named chunk
// (source src) raised in L, to name the nil (or non-function, non-table)
// value it is about, with the nearest existing name when one is close. The
// "chunk:line:" prefix is kept; a message it cannot explain for certain
// comes back unchanged.
func ExplainError(L *glua.LState, chunk string, src []byte, msg string) string {
	rest, ok := strings.CutPrefix(msg, chunk+":")
	if !ok {
		return msg
	}
	lineText, text, ok := strings.Cut(rest, ": ")
	if !ok {
		return msg
	}
	line, err := strconv.Atoi(lineText)
	if err != nil {
		return msg
	}
	var hint string
	if callError.MatchString(text) {
		hint = explainCall(L, src, line)
	} else if m := indexError.FindStringSubmatch(text); m != nil {
		hint = explainIndex(L, src, line, m[1], m[2])
	}
	if hint == "" {
		return msg
	}
	return fmt.Sprintf("%s:%d: %s", chunk, line, hint)
}

// chain is a global name and its fields (gpu.holders is ["gpu", "holders"]),
// as written on a source line.
type chain []string

func (c chain) String() string {
	var b strings.Builder
	for i, k := range c {
		switch {
		case i == 0:
			b.WriteString(k)
		case isName(k):
			b.WriteString("." + k)
		default:
			fmt.Fprintf(&b, "[%q]", k)
		}
	}
	return b.String()
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func isName(s string) bool { return nameRE.MatchString(s) }

func explainCall(L *glua.LState, src []byte, line int) string {
	sites := sitesOn(src, line)
	for _, s := range sites {
		if s.call == nil {
			continue
		}
		v, parent, ok := lookup(L, s, s.call)
		if !ok {
			continue
		}
		switch v.(type) {
		case *glua.LFunction:
			continue
		case *glua.LTable, *glua.LUserData:
			if L.GetMetaField(v, "__call") != glua.LNil {
				continue
			}
		}
		return describeNil(s.call, v, parent) + " (attempt to call it)"
	}
	return ""
}

func explainIndex(L *glua.LState, src []byte, line int, typ, key string) string {
	sites := sitesOn(src, line)
	for _, s := range sites {
		if s.indexed == nil || s.key != key {
			continue
		}
		v, parent, ok := lookup(L, s, s.indexed)
		if !ok || v.Type().String() != typ {
			continue
		}
		return describeNil(s.indexed, v, parent) + fmt.Sprintf(" (attempt to index it with '%s')", key)
	}
	return ""
}

// describeNil says what c holds, and for nil the nearest name beside it.
func describeNil(c chain, v, parent glua.LValue) string {
	if v != glua.LNil {
		return fmt.Sprintf("%s is a %s", c, v.Type())
	}
	out := c.String() + " is nil"
	var names []string
	if t, ok := parent.(*glua.LTable); ok {
		add := func(k, _ glua.LValue) {
			if s, ok := k.(glua.LString); ok {
				names = append(names, string(s))
			}
		}
		t.ForEach(add)
		if lib := modules.Behind(t); lib != nil {
			lib.ForEach(add)
		}
	}
	if near := Closest(c[len(c)-1], names); near != "" {
		out += fmt.Sprintf("; did you mean %s?", append(append(chain{}, c[:len(c)-1]...), near))
	}
	return out
}

// lookup reads c without running any Lua (no metamethods), from L's
// globals, or for a module alias (local util = require("util")) from the
// loaded module: ok is false where a step is not a plain table. parent is
// the table that holds the last name.
func lookup(L *glua.LState, s site, c chain) (v, parent glua.LValue, ok bool) {
	t := L.G.Global
	if s.module != "" {
		loaded, isTable := L.GetField(L.Get(glua.RegistryIndex), "_LOADED").(*glua.LTable)
		if !isTable {
			return nil, nil, false
		}
		if t, isTable = loaded.RawGetString(s.module).(*glua.LTable); !isTable {
			return nil, nil, false
		}
		if len(c) == 1 {
			return t, nil, true
		}
		c = c[1:]
	}
	for i, k := range c {
		shared := modules.Behind(t) != nil // a library's view reads the shared one: no Lua runs
		if mt, isTable := t.Metatable.(*glua.LTable); isTable && !shared && mt.RawGetString("__index") != glua.LNil {
			return nil, nil, false
		}
		v = rawOrShared(t, k)
		if i == len(c)-1 {
			return v, t, true
		}
		next, isTable := v.(*glua.LTable)
		if !isTable {
			return nil, nil, false
		}
		t = next
	}
	return nil, nil, false
}

// site is one expression on the failing line that can raise the error: a
// call of a chain, or the indexing of a chain with key. module is set when
// the chain starts with a local alias of a required module.
type site struct {
	call    chain
	indexed chain
	key     string
	module  string
}

// sitesOn parses src and returns, in source order, the calls and indexings
// of chains that start on line, less those whose first name is declared
// local anywhere in src; a local that is only ever a module's alias (a
// top-level local util = require("util") above the line, never assigned
// again) is kept, as that module.
func sitesOn(src []byte, line int) []site {
	stmts, err := parse.Parse(bytes.NewReader(src), "hint")
	if err != nil {
		return nil
	}
	w := &siteWalker{line: line, locals: map[string]int{}, assigned: map[string]bool{}}
	w.stmts(stmts)
	aliases := map[string]string{}
	if w.locals["require"] == 0 && !w.assigned["require"] {
		for _, st := range stmts {
			la, ok := st.(*ast.LocalAssignStmt)
			if !ok || la.Line() >= line {
				continue
			}
			for i, n := range la.Names {
				if m := requiredName(la.Exprs, i); m != "" && w.locals[n] == 1 && !w.assigned[n] {
					aliases[n] = m
				}
			}
		}
	}
	var out []site
	for _, s := range w.sites {
		head := s.call
		if head == nil {
			head = s.indexed
		}
		if m, ok := aliases[head[0]]; ok {
			s.module = m
			out = append(out, s)
		} else if w.locals[head[0]] == 0 {
			out = append(out, s)
		}
	}
	return out
}

// requiredName is "NAME" when exprs[i] is require("NAME").
func requiredName(exprs []ast.Expr, i int) string {
	if i >= len(exprs) {
		return ""
	}
	call, ok := exprs[i].(*ast.FuncCallExpr)
	if !ok || len(call.Args) != 1 {
		return ""
	}
	fn, ok := call.Func.(*ast.IdentExpr)
	arg, isString := call.Args[0].(*ast.StringExpr)
	if !ok || fn.Value != "require" || !isString {
		return ""
	}
	return arg.Value
}

type siteWalker struct {
	line int
	// locals counts the declarations of each local name; assigned are the
	// names assigned to (a = ...) anywhere.
	locals   map[string]int
	assigned map[string]bool
	sites    []site
}

func (w *siteWalker) names(ns []string) {
	for _, n := range ns {
		w.locals[n]++
	}
}

func (w *siteWalker) stmts(ss []ast.Stmt) {
	for _, s := range ss {
		w.stmt(s)
	}
}

func (w *siteWalker) stmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		for _, e := range s.Lhs {
			if id, ok := e.(*ast.IdentExpr); ok {
				w.assigned[id.Value] = true
			}
		}
		w.exprs(s.Lhs)
		w.exprs(s.Rhs)
	case *ast.LocalAssignStmt:
		w.names(s.Names)
		w.exprs(s.Exprs)
	case *ast.FuncCallStmt:
		w.expr(s.Expr)
	case *ast.DoBlockStmt:
		w.stmts(s.Stmts)
	case *ast.WhileStmt:
		w.expr(s.Condition)
		w.stmts(s.Stmts)
	case *ast.RepeatStmt:
		w.stmts(s.Stmts)
		w.expr(s.Condition)
	case *ast.IfStmt:
		w.expr(s.Condition)
		w.stmts(s.Then)
		w.stmts(s.Else)
	case *ast.NumberForStmt:
		w.names([]string{s.Name})
		w.exprs([]ast.Expr{s.Init, s.Limit, s.Step})
		w.stmts(s.Stmts)
	case *ast.GenericForStmt:
		w.names(s.Names)
		w.exprs(s.Exprs)
		w.stmts(s.Stmts)
	case *ast.FuncDefStmt:
		if s.Name != nil {
			if id, ok := s.Name.Func.(*ast.IdentExpr); ok {
				w.assigned[id.Value] = true // function util() ... replaces util
			}
			w.expr(s.Name.Func)
			w.expr(s.Name.Receiver)
		}
		w.expr(s.Func)
	case *ast.ReturnStmt:
		w.exprs(s.Exprs)
	}
}

func (w *siteWalker) exprs(es []ast.Expr) {
	for _, e := range es {
		w.expr(e)
	}
}

func (w *siteWalker) expr(e ast.Expr) {
	switch e := e.(type) {
	case nil:
	case *ast.AttrGetExpr:
		w.expr(e.Object)
		if e.Line() == w.line {
			if obj := chainOf(e.Object); obj != nil {
				if k, ok := keyText(e.Key); ok {
					w.sites = append(w.sites, site{indexed: obj, key: k})
				}
			}
		}
		w.expr(e.Key)
	case *ast.FuncCallExpr:
		if e.Func != nil {
			w.expr(e.Func)
			if c := chainOf(e.Func); c != nil && e.Line() == w.line {
				w.sites = append(w.sites, site{call: c})
			}
		} else {
			w.expr(e.Receiver)
			if r := chainOf(e.Receiver); r != nil && e.Line() == w.line {
				// obj:m() indexes obj with "m", then calls obj.m.
				w.sites = append(w.sites, site{indexed: r, key: e.Method}, site{call: append(append(chain{}, r...), e.Method)})
			}
		}
		w.exprs(e.Args)
	case *ast.TableExpr:
		for _, f := range e.Fields {
			w.expr(f.Key)
			w.expr(f.Value)
		}
	case *ast.LogicalOpExpr:
		w.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.RelationalOpExpr:
		w.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.StringConcatOpExpr:
		w.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.ArithmeticOpExpr:
		w.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.UnaryMinusOpExpr:
		w.expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		w.expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		w.expr(e.Expr)
	case *ast.FunctionExpr:
		if e.ParList != nil {
			w.names(e.ParList.Names)
		}
		w.stmts(e.Stmts)
	}
}

// chainOf is e as a chain of names, or nil for anything else (a call's
// result, a computed key).
func chainOf(e ast.Expr) chain {
	switch e := e.(type) {
	case *ast.IdentExpr:
		return chain{e.Value}
	case *ast.AttrGetExpr:
		obj := chainOf(e.Object)
		k, ok := e.Key.(*ast.StringExpr)
		if obj == nil || !ok {
			return nil
		}
		return append(obj, k.Value)
	}
	return nil
}

// keyText is a constant key as gopher-lua's index error prints it.
func keyText(e ast.Expr) (string, bool) {
	switch k := e.(type) {
	case *ast.StringExpr:
		return k.Value, true
	case *ast.NumberExpr:
		f, err := strconv.ParseFloat(k.Value, 64)
		if err != nil {
			return "", false
		}
		return glua.LNumber(f).String(), true
	}
	return "", false
}

// Closest is the name of names nearest to name by edit distance, or ""
// when none is near enough to be a likely typo (the rule of
// VarDecls.Closest: within max(2, len/3) edits, or one name the start or
// end of the other). Ties go to the name first in sorted order, so the
// answer does not depend on the order of names.
func Closest(name string, names []string) string {
	sorted := append([]string{}, names...)
	sort.Strings(sorted)
	best, bestD := "", math.MaxInt
	for _, n := range sorted {
		if n == name {
			continue
		}
		d := editDistance(name, n)
		short, long := name, n
		if len(short) > len(long) {
			short, long = long, short
		}
		if len(short) >= 3 && (strings.HasPrefix(long, short) || strings.HasSuffix(long, short)) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}
