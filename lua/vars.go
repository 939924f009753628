package lua

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpush/gpush/inventory"
)

// VarType is the type of a declared script var.
type VarType string

// The types a script var can be declared with.
const (
	VarString   VarType = "string"
	VarInt      VarType = "int"
	VarNumber   VarType = "number"
	VarBool     VarType = "bool"
	VarDuration VarType = "duration"
	VarList     VarType = "list"    // of strings
	VarIntList  VarType = "intlist" // of integers
)

// VarTypes lists every VarType, in the order docs show them.
var VarTypes = []VarType{VarString, VarInt, VarNumber, VarBool, VarDuration, VarList, VarIntList}

// ReservedVarPrefix names gpush's own host vars (gpush_dev_dir, ...): they
// configure the helper, not the script, so -e may set them whatever the
// script declares.
const ReservedVarPrefix = "gpush_"

// VarDecl is one `-- @var NAME TYPE[?] HELP [(empty: MEANING)] [(default: VALUE)]`
// line of a script's leading comment block.
type VarDecl struct {
	Name string
	Type VarType
	Help string
	// Optional ("TYPE?") says the var may be given nowhere: it is then nil
	// in Lua. A var with neither a default nor Optional is required.
	Optional bool
	// EmptyOK (a list type's "(empty: MEANING)") says an empty list is a
	// value of its own, EmptyText what it means, and not a mistake.
	EmptyOK   bool
	EmptyText string
	// HasDefault says whether the line had a "(default: VALUE)" suffix;
	// Default is then VALUE converted to Type, DefaultText VALUE as written.
	HasDefault  bool
	Default     any
	DefaultText string
	// Line is the line number in the script, for error messages.
	Line int
}

// VarDecls are a script's declarations, in the order they were written.
type VarDecls []VarDecl

var (
	varName       = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	defaultSuffix = regexp.MustCompile(`\s*\(default:\s*(.*)\)\s*$`)
	emptySuffix   = regexp.MustCompile(`\s*\(empty:\s*([^()]*)\)\s*$`)
)

// DeclareHint says how a script declares a var, for error messages.
const DeclareHint = "-- @var NAME TYPE HELP TEXT (default: VALUE) in the script's leading comment block"

// Required says whether the var must be given (-e or the inventory).
func (d VarDecl) Required() bool { return !d.HasDefault && !d.Optional }

// Vars parses the script's var declarations (see ParseVarDecls).
func (s *Script) Vars() (VarDecls, error) { return ParseVarDecls(s.Name, s.Source) }

// ParseVarDecls reads the @var lines of src's leading comment block (the
// "--" lines before the first other line; a "#!" first line is skipped).
// file names the script in errors, which are "file:line: ...". The script
// is not run.
func ParseVarDecls(file string, src []byte) (VarDecls, error) {
	var out VarDecls
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 && strings.HasPrefix(line, "#!") {
			continue
		}
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "--") {
			break
		}
		if strings.HasPrefix(t, "--[[") || strings.HasPrefix(t, "--[=") {
			break // a block comment ends the line-comment header
		}
		body := strings.TrimSpace(strings.TrimPrefix(t, "--"))
		first, _, _ := strings.Cut(body, " ")
		first, _, _ = strings.Cut(first, "\t")
		if !strings.HasPrefix(first, "@var") {
			continue
		}
		if first != "@var" {
			return nil, fmt.Errorf("%s:%d: %q: a declaration starts with @var (%s)", file, n, first, DeclareHint)
		}
		d, err := parseVarLine(strings.TrimSpace(body[len("@var"):]))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		d.Line = n
		if prev, dup := seen[d.Name]; dup {
			return nil, fmt.Errorf("%s:%d: var %s already declared on line %d", file, n, d.Name, prev)
		}
		seen[d.Name] = n
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: read var declarations: %w", file, err)
	}
	return out, nil
}

// parseVarLine parses what follows "@var".
func parseVarLine(s string) (VarDecl, error) {
	var d VarDecl
	f := strings.Fields(s)
	if len(f) < 3 {
		return d, fmt.Errorf("@var %s: want NAME TYPE HELP TEXT [(default: VALUE)]", s)
	}
	d.Name, d.Type = f[0], VarType(f[1])
	if t, ok := strings.CutSuffix(f[1], "?"); ok {
		d.Type, d.Optional = VarType(t), true
	}
	if !varName.MatchString(d.Name) {
		return d, fmt.Errorf("@var %q: a name is lower-case letters, digits and _, not starting with a digit", d.Name)
	}
	if !d.Type.valid() {
		return d, fmt.Errorf("@var %s: unknown type %q (types: %s, each with ? for optional)", d.Name, f[1], typeNames())
	}
	// The help is the rest of the line as written, spacing kept.
	rest := strings.TrimSpace(s)
	rest = strings.TrimSpace(rest[len(f[0]):])
	rest = strings.TrimSpace(rest[len(f[1]):])
	// "(empty: ...)" and "(default: ...)" end the line, in either order.
	var defaultText *string
	for done := false; !done; {
		done = true
		if m := emptySuffix.FindStringSubmatchIndex(rest); m != nil && !d.EmptyOK {
			d.EmptyOK, d.EmptyText = true, strings.TrimSpace(rest[m[2]:m[3]])
			rest, done = strings.TrimSpace(rest[:m[0]]), false
		}
		if m := defaultSuffix.FindStringSubmatchIndex(rest); m != nil && defaultText == nil {
			t := strings.TrimSpace(rest[m[2]:m[3]])
			defaultText = &t
			rest, done = strings.TrimSpace(rest[:m[0]]), false
		}
	}
	if d.EmptyOK && d.Type != VarList && d.Type != VarIntList {
		return d, fmt.Errorf("@var %s: (empty: ...) is for a list or intlist, not %s", d.Name, d.Type)
	}
	if d.EmptyOK && d.EmptyText == "" {
		return d, fmt.Errorf("@var %s: (empty: MEANING) says what an empty list means; it says nothing", d.Name)
	}
	if defaultText != nil {
		if d.Optional {
			return d, fmt.Errorf("@var %s: %s and a default: a var with a default is never nil, so drop the ?", d.Name, f[1])
		}
		d.HasDefault = true
		d.DefaultText = *defaultText
		text := d.DefaultText
		if d.Type != VarList && d.Type != VarIntList && len(text) >= 2 && text[0] == '"' && text[len(text)-1] == '"' {
			text = text[1 : len(text)-1]
		}
		v, err := d.convert(text)
		if err != nil {
			return d, fmt.Errorf("@var %s: default %q: %w", d.Name, d.DefaultText, err)
		}
		d.Default = v
	}
	if rest == "" {
		return d, fmt.Errorf("@var %s: no help text (one line saying what it does)", d.Name)
	}
	d.Help = rest
	return d, nil
}

func (t VarType) valid() bool {
	for _, x := range VarTypes {
		if t == x {
			return true
		}
	}
	return false
}

func typeNames() string {
	s := make([]string, len(VarTypes))
	for i, t := range VarTypes {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// Lookup finds a declaration by name.
func (ds VarDecls) Lookup(name string) (VarDecl, bool) {
	for _, d := range ds {
		if d.Name == name {
			return d, true
		}
	}
	return VarDecl{}, false
}

// Names are the declared names, in declaration order.
func (ds VarDecls) Names() []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

// Closest is the declared name nearest to name by edit distance, or ""
// when none is near enough to be a likely typo.
func (ds VarDecls) Closest(name string) string {
	best, bestD := "", math.MaxInt
	for _, d := range ds {
		dist := editDistance(name, d.Name)
		// gpu -> gpus, service -> services, verify_timeout -> timeout.
		short, long := name, d.Name
		if len(short) > len(long) {
			short, long = long, short
		}
		if len(short) >= 3 && (strings.HasPrefix(long, short) || strings.HasSuffix(long, short)) {
			dist = min(dist, 1)
		}
		if dist < bestD {
			best, bestD = d.Name, dist
		}
	}
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes
// (names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// UnknownVarError is an extra var the script does not declare.
type UnknownVarError struct {
	Script  string
	Name    string
	Closest string   // "" when no declared name is close
	Names   []string // every declared name
}

func (e *UnknownVarError) Error() string {
	switch {
	case len(e.Names) == 0:
		return fmt.Sprintf("%s declares no vars, so it takes no -e %s; to give it one, declare it with %s",
			e.Script, e.Name, DeclareHint)
	case e.Closest != "":
		return fmt.Sprintf("%s: no var %s; did you mean %s?", e.Script, e.Name, e.Closest)
	}
	return fmt.Sprintf("%s: no var %s (its vars: %s)", e.Script, e.Name, strings.Join(e.Names, ", "))
}

// CheckExtraVars checks extra vars (-e) against the script's declarations
// and returns them converted: an undeclared key is an *UnknownVarError
// (keys starting with ReservedVarPrefix excepted, and passed as given), a
// value that does not convert an error naming the var. Keys are checked in
// sorted order, so the error is the same from run to run.
func CheckExtraVars(script string, decls VarDecls, extra map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(extra))
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := extra[k]
		if strings.HasPrefix(k, ReservedVarPrefix) {
			out[k] = v
			continue
		}
		d, ok := decls.Lookup(k)
		if !ok {
			return nil, &UnknownVarError{Script: script, Name: k, Closest: decls.Closest(k), Names: decls.Names()}
		}
		c, err := d.Convert(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = c
	}
	return out, nil
}

// MissingVarError is a required var (no default, not optional) that
// neither -e nor the inventory gives.
type MissingVarError struct {
	Script string
	Decl   VarDecl
	// Hosts lacking it; nil when every host does (or none is known).
	Hosts []string
}

func (e *MissingVarError) Error() string {
	where := ""
	switch hs := e.Hosts; {
	case len(hs) == 1:
		where = " on host " + hs[0]
	case len(hs) > 10:
		where = fmt.Sprintf(" on %d hosts: %s, ...", len(hs), strings.Join(hs[:10], ", "))
	case len(hs) > 1:
		where = " on hosts " + strings.Join(hs, ", ")
	}
	return fmt.Sprintf("%s: var %s is required and not given%s (%s: %s); give it with -e %s=VALUE or as a host var, or declare it %s? if the script does without it",
		e.Script, e.Decl.Name, where, e.Decl.Type, e.Decl.Help, e.Decl.Name, e.Decl.Type)
}

// Var sources, as the script sees them in vars_from.
const (
	FromExtra     = "-e"
	FromInventory = "inventory"
	FromDefault   = "default"
)

// ApplyVars converts, in vars, every declared var that is there, and sets
// the converted default of every declared var that is not; a required var
// that is not there is a *MissingVarError, an optional one stays absent
// (nil in Lua). Undeclared vars are left as they are. The error names the
// var. script names the script in errors.
func ApplyVars(script string, decls VarDecls, vars map[string]any) error {
	for _, d := range decls {
		v, ok := vars[d.Name]
		if !ok {
			switch {
			case d.HasDefault:
				vars[d.Name] = d.Default
			case d.Required():
				return &MissingVarError{Script: script, Decl: d}
			}
			continue
		}
		c, err := d.Convert(v)
		if err != nil {
			return fmt.Errorf("var %s: %w", d.Name, err)
		}
		vars[d.Name] = c
	}
	return nil
}

// CheckRequired finds the first required var that neither extra (-e) nor a
// host's vars give, on any of hostVars (each host's inventory vars, by host
// name), so that a run is refused before any host is dialled. The error is
// a *MissingVarError naming the hosts lacking it, all of them when it is
// every host's.
func CheckRequired(script string, decls VarDecls, extra map[string]any, hostVars map[string]map[string]any) error {
	names := make([]string, 0, len(hostVars))
	for n := range hostVars {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, d := range decls {
		if !d.Required() {
			continue
		}
		if _, ok := extra[d.Name]; ok {
			continue
		}
		var lacking []string
		for _, n := range names {
			if _, ok := hostVars[n][d.Name]; !ok {
				lacking = append(lacking, n)
			}
		}
		if len(lacking) == 0 && len(names) > 0 {
			continue
		}
		if len(lacking) == len(names) {
			lacking = nil // every host: the host list says nothing
		}
		return &MissingVarError{Script: script, Decl: d, Hosts: lacking}
	}
	return nil
}

// VarSources says where each declared var of a host came from: FromExtra,
// FromInventory or FromDefault; a var given nowhere is not in the map.
func VarSources(decls VarDecls, hostVars, extra map[string]any) map[string]string {
	out := make(map[string]string, len(decls))
	for _, d := range decls {
		if _, ok := extra[d.Name]; ok {
			out[d.Name] = FromExtra
		} else if _, ok := hostVars[d.Name]; ok {
			out[d.Name] = FromInventory
		} else if d.HasDefault {
			out[d.Name] = FromDefault
		}
	}
	return out
}

// Convert turns a value as -e or an inventory gives it (a string, or YAML
// data: bool, int, float64, []any) into the declared type, as Lua gets it:
// string; int and number as int64 and float64; bool; duration as a
// normalized string ("1m30s"); list as []any of strings; intlist as []any
// of int64. Converting a converted value gives it back unchanged. An empty
// value (nil, "", an empty list) is an error: leaving a var out is how to
// get its default, and an empty filter must not come to mean "all". A list
// declared with "(empty: MEANING)" takes an empty value as the empty list.
func (d VarDecl) Convert(v any) (any, error) {
	out, err := d.convert(v)
	if errors.Is(err, errEmpty) {
		return nil, fmt.Errorf("%w; %s", err, d.leaveOut())
	}
	return out, err
}

// leaveOut says what leaving the var out means, for an empty value: its
// default, or what its help says of that ("...; every GPU when left out",
// "...; leave it out for every GPU"), or the help itself.
func (d VarDecl) leaveOut() string {
	if d.HasDefault {
		return "leave it out for its default, " + d.DefaultText
	}
	for _, clause := range strings.Split(d.Help, ";") {
		c := strings.TrimSpace(clause)
		if strings.HasPrefix(strings.ToLower(c), "leave it out") {
			return c
		}
		if what, ok := strings.CutSuffix(c, " when left out"); ok && what != "" {
			return "leave it out to mean " + what
		}
	}
	if d.Help == "" {
		return "leave it out instead"
	}
	return "leave it out instead (" + d.Help + ")"
}

// errEmpty marks an empty value; Convert adds what to do instead.
var errEmpty = errors.New("empty value")

type emptyErr string

func (e emptyErr) Error() string        { return string(e) }
func (e emptyErr) Is(target error) bool { return target == errEmpty }

func (d VarDecl) convert(v any) (any, error) {
	out, err := d.convertValue(v)
	if errors.Is(err, errEmpty) && d.EmptyOK {
		return []any{}, nil // "(empty: ...)": an empty list is meant, not a mistake
	}
	return out, err
}

func (d VarDecl) convertValue(v any) (any, error) {
	if v == nil {
		return nil, emptyErr("no value")
	}
	if s, ok := v.(string); ok && strings.TrimSpace(s) == "" {
		if d.Type == VarList || d.Type == VarIntList {
			return nil, emptyErr("empty list")
		}
		return nil, emptyErr("empty value")
	}
	switch d.Type {
	case VarString:
		return toString(v)
	case VarInt:
		return toInt(v)
	case VarNumber:
		return toNumber(v)
	case VarBool:
		return toBool(v)
	case VarDuration:
		return toDuration(v)
	case VarList, VarIntList:
		items, err := toItems(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return nil, emptyErr("empty list")
		}
		out := make([]any, len(items))
		for i, it := range items {
			var c any
			if d.Type == VarList {
				c, err = toString(it)
			} else {
				c, err = toInt(it)
			}
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i+1, err)
			}
			if s, ok := c.(string); ok && s == "" {
				return nil, fmt.Errorf("item %d is empty", i+1)
			}
			out[i] = c
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown type %q", d.Type)
}

// toString takes scalars: YAML may read a unit name or a version as a number.
func toString(v any) (any, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int, int64, float64, uint64:
		return fmt.Sprint(x), nil
	}
	return nil, fmt.Errorf("want a string, got %s", describe(v))
}

func toInt(v any) (any, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("%d is too large", x)
		}
		return int64(x), nil
	case float64:
		if x != math.Trunc(x) || math.Abs(x) >= 1<<53 {
			return nil, fmt.Errorf("want an integer, got %v", x)
		}
		return int64(x), nil
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want an integer, got %q", x)
		}
		return n, nil
	}
	return nil, fmt.Errorf("want an integer, got %s", describe(v))
}

func toNumber(v any) (any, error) {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint64:
		f = float64(x)
	case float64:
		f = x
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
			return nil, fmt.Errorf("want a number, got %q", x)
		}
	default:
		return nil, fmt.Errorf("want a number, got %s", describe(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("want a finite number, got %v", f)
	}
	return f, nil
}

// toBool reads the words operators type; "no" must not be a truthy string.
func toBool(v any) (any, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case int, int64, float64:
		switch fmt.Sprint(x) {
		case "1":
			return true, nil
		case "0":
			return false, nil
		}
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "yes", "on", "1":
			return true, nil
		case "false", "no", "off", "0":
			return false, nil
		}
		return nil, fmt.Errorf("want true/false, yes/no, on/off or 1/0, got %q", x)
	}
	return nil, fmt.Errorf("want true/false, yes/no, on/off or 1/0, got %s", describe(v))
}

// toDuration gives Lua the string form of docs/lua-api.md ("5s", "1m30s").
func toDuration(v any) (any, error) {
	var d time.Duration
	secs := func(f float64) error {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
			return fmt.Errorf("%v seconds is not a usable duration", f)
		}
		d = time.Duration(f * float64(time.Second))
		return nil
	}
	var err error
	switch x := v.(type) {
	case int:
		err = secs(float64(x))
	case int64:
		err = secs(float64(x))
	case float64:
		err = secs(x)
	case string:
		s := strings.TrimSpace(x)
		if f, perr := strconv.ParseFloat(s, 64); perr == nil {
			err = secs(f)
		} else if d, perr = time.ParseDuration(s); perr != nil {
			return nil, fmt.Errorf("want a duration like \"5s\" or \"1m30s\" or a number of seconds, got %q", x)
		}
	default:
		return nil, fmt.Errorf("want a duration like \"5s\", got %s", describe(v))
	}
	if err != nil {
		return nil, err
	}
	if d < 0 {
		return nil, fmt.Errorf("duration %s is negative", d)
	}
	return d.String(), nil
}

// toItems reads a list: YAML/JSON data, a "[...]" YAML/JSON list in a
// string, or "a,b" (commas separate; spaces around items are dropped).
func toItems(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out, nil
	case []int: // Go callers (tests, a library user) give plain slices
		out := make([]any, len(x))
		for i, n := range x {
			out[i] = n
		}
		return out, nil
	case string:
		s := strings.TrimSpace(x)
		if strings.HasPrefix(s, "[") {
			var items []any
			// The inventory package's reader bounds what aliases expand to.
			if err := inventory.DecodeYAML("value", []byte(s), &items); err != nil {
				return nil, fmt.Errorf("%q is not a YAML/JSON list: %w", x, err)
			}
			return items, nil
		}
		parts := strings.Split(s, ",")
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = strings.TrimSpace(p)
		}
		return out, nil
	case bool, int, int64, float64:
		return []any{x}, nil
	}
	return nil, fmt.Errorf("want a list (\"a,b\" or [a, b]), got %s", describe(v))
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nothing (null)"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T %v", v, v)
}
