package inventory

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// yaml.v3 resolves plain scalars as YAML 1.2 does; Ansible reads inventories
// and vars files with PyYAML, which follows YAML 1.1 (yes/no are booleans,
// 0755 is octal, 1:20 is 80, 1e3 is a string). yaml11 builds Go values from
// yaml.v3's nodes with PyYAML's resolver and SafeConstructor rules, plus
// Ansible's !vault and !unsafe tags. The patterns below are PyYAML's
// implicit resolvers (resolver.py, PyYAML 6.0), written out here.
var (
	y11Bool  = regexp.MustCompile(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)
	y11Int   = regexp.MustCompile(`^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	y11Float = regexp.MustCompile(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	y11Null  = regexp.MustCompile(`^(?:~|null|Null|NULL|)$`)
	// The implicit form: a bare date, or a date with a time (then month and
	// day may have one digit).
	y11Stamp = regexp.MustCompile(`^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)$`)
	// The constructor's pattern, with the parts it reads.
	y11StampParts = regexp.MustCompile(`^([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:(?:[Tt]|[ \t]+)([0-9]{1,2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]*))?(?:[ \t]*(Z|([-+])([0-9]{1,2})(?::([0-9]{2}))?))?)?$`)
)

const (
	tagStr    = "!!str"
	tagBool   = "!!bool"
	tagInt    = "!!int"
	tagFloat  = "!!float"
	tagNull   = "!!null"
	tagStamp  = "!!timestamp"
	tagMerge  = "!!merge"
	tagValue  = "!!value"
	tagSeq    = "!!seq"
	tagMap    = "!!map"
	tagVault  = "!vault"
	tagUnsafe = "!unsafe"
)

// yaml11 turns nodes of one file into values. jsonMode is for files that
// are valid JSON: Ansible reads those with its JSON decoder first, so
// numbers are JSON numbers and there are no YAML 1.1 surprises.
type yaml11 struct {
	file     string
	jsonMode bool
	warn     func(at Pos, format string, args ...any)
	memo     map[*yaml.Node]any
	busy     map[*yaml.Node]bool
}

func newYAML11(file string, jsonMode bool, warn func(Pos, string, ...any)) *yaml11 {
	if warn == nil {
		warn = func(Pos, string, ...any) {}
	}
	return &yaml11{file: file, jsonMode: jsonMode, warn: warn, memo: map[*yaml.Node]any{}, busy: map[*yaml.Node]bool{}}
}

func (d *yaml11) errf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s: %s", Pos{d.file, n.Line}, fmt.Sprintf(format, args...))
}

// value builds the Go value of a node: nil, bool, int, float64, string,
// VaultValue, []any or map[string]any.
func (d *yaml11) value(n *yaml.Node, depth int) (any, error) {
	if depth > maxYAMLDepth {
		return nil, d.errf(n, "values nested deeper than %d levels", maxYAMLDepth)
	}
	if n.Kind == 0 {
		return nil, nil // an absent value
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil, d.errf(n, "unknown alias *%s", n.Value)
		}
		n = n.Alias
	}
	if v, ok := d.memo[n]; ok {
		return v, nil
	}
	if d.busy[n] {
		return nil, d.errf(n, "anchor &%s contains an alias of itself", n.Anchor)
	}
	d.busy[n] = true
	defer delete(d.busy, n)
	var v any
	var err error
	switch n.Kind {
	case yaml.ScalarNode:
		v, err = d.scalar(n)
	case yaml.SequenceNode:
		if t := d.explicitTag(n); t != "" && t != tagSeq && t != tagUnsafe {
			return nil, d.errf(n, "tag %s on a list is not supported", t)
		}
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			x, err := d.value(c, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, x)
		}
		v = l
	case yaml.MappingNode:
		if t := d.explicitTag(n); t != "" && t != tagMap && t != tagUnsafe {
			return nil, d.errf(n, "tag %s on a mapping is not supported", t)
		}
		var m map[string]any
		if m, _, err = d.mapping(n, depth); err == nil {
			v = d.jsonObject(m, n)
		}
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return d.value(n.Content[0], depth)
	default:
		return nil, d.errf(n, "unexpected YAML node")
	}
	if err != nil {
		return nil, err
	}
	if n.Anchor != "" {
		d.memo[n] = v
	}
	return v, nil
}

// jsonObject is what Ansible's JSON decoder makes of its two marker
// objects: {"__ansible_vault": s} is vault data, {"__ansible_unsafe": s}
// a string.
func (d *yaml11) jsonObject(m map[string]any, n *yaml.Node) any {
	if !d.jsonMode || len(m) != 1 {
		return m
	}
	if s, ok := m["__ansible_vault"].(string); ok {
		return VaultValue{Ciphertext: s, At: Pos{d.file, n.Line}}
	}
	if s, ok := m["__ansible_unsafe"].(string); ok {
		return s
	}
	return m
}

// explicitTag is the tag written in the file, "" if none.
func (d *yaml11) explicitTag(n *yaml.Node) string {
	if n.Style&yaml.TaggedStyle == 0 {
		return ""
	}
	return n.Tag
}

func isPlain(n *yaml.Node) bool {
	return n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0
}

// resolveTag is the tag PyYAML gives a scalar.
func (d *yaml11) resolveTag(n *yaml.Node) string {
	if t := d.explicitTag(n); t != "" && t != "!" {
		return t
	}
	if !isPlain(n) || n.Style&yaml.TaggedStyle != 0 {
		return tagStr
	}
	s := n.Value
	if d.jsonMode {
		switch {
		case s == "true" || s == "false":
			return tagBool
		case s == "null":
			return tagNull
		case jsonNumberRE.MatchString(s):
			if strings.ContainsAny(s, ".eE") {
				return tagFloat
			}
			return tagInt
		}
		return tagStr
	}
	// PyYAML picks resolvers by the first character; most names and
	// addresses need no pattern at all.
	if s != "" && !strings.ContainsRune("yYnNtTfFoO-+0123456789.~<=", rune(s[0])) {
		return tagStr
	}
	switch {
	case y11Bool.MatchString(s):
		return tagBool
	case y11Int.MatchString(s):
		return tagInt
	case y11Float.MatchString(s):
		return tagFloat
	case y11Null.MatchString(s):
		return tagNull
	case y11Stamp.MatchString(s):
		return tagStamp
	case s == "<<":
		return tagMerge
	case s == "=":
		return tagValue
	}
	return tagStr
}

var jsonNumberRE = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$`)

func (d *yaml11) scalar(n *yaml.Node) (any, error) {
	tag := d.resolveTag(n)
	s := n.Value
	switch tag {
	case tagStr, tagUnsafe:
		// !unsafe only stops Jinja templating, which gpush never does: the
		// value is the plain string, as Ansible's variables see it.
		return s, nil
	case tagVault:
		return VaultValue{Ciphertext: s, At: Pos{d.file, n.Line}}, nil
	case tagNull:
		return nil, nil
	case tagBool:
		switch strings.ToLower(s) {
		case "yes", "true", "on":
			return true, nil
		case "no", "false", "off":
			return false, nil
		}
		return nil, d.errf(n, "%q is not a YAML boolean", s)
	case tagInt:
		if d.jsonMode && d.explicitTag(n) == "" {
			return jsonInt(s), nil
		}
		v, ok := yaml11Int(s)
		if !ok {
			return nil, d.errf(n, "%q is not a YAML integer", s)
		}
		return v, nil
	case tagFloat:
		v, ok := yaml11Float(s)
		if !ok {
			return nil, d.errf(n, "%q is not a YAML float", s)
		}
		return v, nil
	case tagStamp:
		v, err := yaml11Timestamp(s)
		if err != nil {
			return nil, d.errf(n, "%q: %v", s, err)
		}
		return v, nil
	case tagMerge:
		return nil, d.errf(n, "a merge key (<<) is only valid as a mapping key")
	case tagValue:
		// PyYAML's SafeLoader has no constructor for "=": Ansible fails too.
		return nil, d.errf(n, "could not determine a constructor for the value %q (quote it)", s)
	}
	return nil, d.errf(n, "tag %s is not supported (Ansible's loader has no constructor for it)", tag)
}

func jsonInt(s string) any {
	if v, err := strconv.Atoi(s); err == nil {
		return v
	}
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// yaml11Int is SafeConstructor.construct_yaml_int.
func yaml11Int(s string) (any, bool) {
	s = strings.ReplaceAll(s, "_", "")
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	z := new(big.Int)
	ok := true
	switch {
	case s == "0":
	case strings.HasPrefix(s, "0b"):
		_, ok = z.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = z.SetString(s[2:], 16)
	case strings.HasPrefix(s, "0") && len(s) > 1:
		_, ok = z.SetString(s[1:], 8)
	case strings.Contains(s, ":"):
		for _, part := range strings.Split(s, ":") {
			p, err := strconv.ParseInt(part, 10, 64)
			if err != nil {
				return nil, false
			}
			z.Mul(z, big.NewInt(60)).Add(z, big.NewInt(p))
		}
	default:
		_, ok = z.SetString(s, 10)
	}
	if !ok {
		return nil, false
	}
	if neg {
		z.Neg(z)
	}
	if z.IsInt64() {
		return int(z.Int64()), true
	}
	f, _ := new(big.Float).SetInt(z).Float64()
	return f, true
}

// yaml11Float is SafeConstructor.construct_yaml_float.
func yaml11Float(s string) (float64, bool) {
	s = strings.ToLower(strings.ReplaceAll(s, "_", ""))
	sign := 1.0
	if s != "" && (s[0] == '-' || s[0] == '+') {
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
	}
	switch {
	case s == ".inf":
		return sign * math.Inf(1), true
	case s == ".nan":
		return math.NaN(), true
	case strings.Contains(s, ":"):
		v := 0.0
		for _, part := range strings.Split(s, ":") {
			p, err := strconv.ParseFloat(part, 64)
			if err != nil {
				return 0, false
			}
			v = v*60 + p
		}
		return sign * v, true
	}
	if strings.HasSuffix(s, ".") {
		s += "0"
	}
	if strings.HasPrefix(s, ".") {
		s = "0" + s
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return sign * v, true
}

// yaml11Timestamp builds what PyYAML builds (a date or a datetime) and
// returns it as ansible-inventory prints it: Python's isoformat().
func yaml11Timestamp(s string) (string, error) {
	m := y11StampParts.FindStringSubmatch(s)
	if m == nil {
		return "", fmt.Errorf("not a YAML timestamp")
	}
	num := func(i int) int { n, _ := strconv.Atoi(m[i]); return n }
	year, month, day := num(1), num(2), num(3)
	t := time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC)
	if month < 1 || month > 12 || t.Day() != day {
		return "", fmt.Errorf("day is out of range for month")
	}
	date := fmt.Sprintf("%04d-%02d-%02d", year, month, day)
	if m[4] == "" {
		return date, nil
	}
	hour, minute, second := num(4), num(5), num(6)
	if hour > 23 || minute > 59 || second > 59 {
		return "", fmt.Errorf("time is out of range")
	}
	out := fmt.Sprintf("%sT%02d:%02d:%02d", date, hour, minute, second)
	if frac := m[7]; frac != "" {
		if len(frac) > 6 {
			frac = frac[:6]
		}
		frac += strings.Repeat("0", 6-len(frac))
		if frac != "000000" {
			out += "." + frac
		}
	}
	switch {
	case m[8] == "Z":
		out += "+00:00"
	case m[8] != "":
		th, tm := num(10), 0
		if m[11] != "" {
			tm = num(11)
		}
		if th > 23 || tm > 59 {
			return "", fmt.Errorf("UTC offset is out of range")
		}
		out += fmt.Sprintf("%s%02d:%02d", m[9], th, tm)
	}
	return out, nil
}

// mapping builds a mapping, with each key's line. Keys are typed like
// values and then written as JSON writes Python keys (True -> "true");
// keys equal in Python (True and 1) are one key, and a repeated key keeps
// its last value with a warning, as Ansible does. "<<" merges mappings in
// below the keys written beside it.
func (d *yaml11) mapping(n *yaml.Node, depth int) (map[string]any, map[string]Pos, error) {
	out, pos := map[string]any{}, map[string]Pos{}
	ident := map[string]string{} // Python identity of a key -> its printed form
	fromMerge := map[string]bool{}
	set := func(k any, kn *yaml.Node, v any, merged bool) error {
		name, id, err := d.keyString(k, kn)
		if err != nil {
			return err
		}
		at := Pos{d.file, kn.Line}
		if first, ok := ident[id]; ok {
			if merged {
				return nil // among merged mappings the first listed wins
			}
			if !fromMerge[id] {
				d.warn(at, "found a duplicate mapping key (%s); using the last value only", name)
			}
			name = first
		}
		ident[id], fromMerge[id] = name, merged
		out[name], pos[name] = v, at
		return nil
	}
	var merges []*yaml.Node
	type kv struct {
		k  any
		kn *yaml.Node
		v  any
	}
	var own []kv
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		dk := kn
		if dk.Kind == yaml.AliasNode && dk.Alias != nil {
			dk = dk.Alias
		}
		if dk.Kind == yaml.ScalarNode && !d.jsonMode && d.resolveTag(dk) == tagMerge {
			merges = append(merges, vn)
			continue
		}
		if dk.Kind != yaml.ScalarNode {
			return nil, nil, d.errf(kn, "a mapping key must be a scalar, got %s", kindName(dk))
		}
		k, err := d.value(kn, depth+1)
		if err != nil {
			return nil, nil, err
		}
		v, err := d.value(vn, depth+1)
		if err != nil {
			return nil, nil, err
		}
		own = append(own, kv{k, kn, v})
	}
	// Merged keys first (the first mapping listed wins among them), then
	// the mapping's own keys over them.
	for _, mn := range merges {
		src := mn
		if src.Kind == yaml.AliasNode && src.Alias != nil {
			src = src.Alias
		}
		var maps []*yaml.Node
		switch src.Kind {
		case yaml.MappingNode:
			maps = []*yaml.Node{mn}
		case yaml.SequenceNode:
			maps = src.Content
		default:
			return nil, nil, d.errf(mn, "a merge key (<<) needs a mapping or a list of mappings, got %s", kindName(src))
		}
		for _, m := range maps {
			mv, err := d.value(m, depth+1)
			if err != nil {
				return nil, nil, err
			}
			mm, ok := mv.(map[string]any)
			if !ok {
				return nil, nil, d.errf(m, "a merge key (<<) needs mappings, got %s", kindName(m))
			}
			for _, k := range sortedKeys(mm) {
				if err := set(k, mn, mm[k], true); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	for _, e := range own {
		if err := set(e.k, e.kn, e.v, false); err != nil {
			return nil, nil, err
		}
	}
	return out, pos, nil
}

// keyString is how Ansible's JSON output writes a Python key, and the key's
// identity (Python's ==: True == 1 == 1.0).
func (d *yaml11) keyString(k any, kn *yaml.Node) (name, id string, err error) {
	switch t := k.(type) {
	case string:
		return t, "s" + t, nil
	case nil:
		return "null", "null", nil
	case bool:
		if t {
			return "true", "n1", nil
		}
		return "false", "n0", nil
	case int:
		return strconv.Itoa(t), "n" + strconv.Itoa(t), nil
	case float64:
		if t == math.Trunc(t) && !math.IsInf(t, 0) && math.Abs(t) < 1<<62 {
			return pyFloatRepr(t), "n" + strconv.Itoa(int(t)), nil
		}
		return pyFloatRepr(t), "f" + pyFloatRepr(t), nil
	}
	return "", "", d.errf(kn, "a mapping key must be a string, number, boolean or null, got %s", kindName(kn))
}

// pyFloatRepr writes a float as Python's json module does (repr, with
// Infinity and NaN).
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
