package inventory

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// maxExpand bounds how many names one range or node set may produce, so a
// typo such as gpu[0:99999999] fails instead of eating the machine's memory.
const maxExpand = 100000

// maxDigits keeps every number within uint64 and within what a host name
// plausibly holds.
const maxDigits = 18

// asciiLetters is Ansible's string.ascii_letters: alphabetic ranges index
// into it, so [x:B] is legal there and here.
const asciiLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// ExpandHostRange expands an Ansible host range such as "gpu[01:16]",
// "node-[a:f]" or "w[0:20:5]" (begin:end[:step], inclusive, zero padding
// kept when begin has a leading zero). Several ranges in one name multiply.
// A name without '[' is returned as is.
func ExpandHostRange(name string) ([]string, error) {
	out, err := expandHostRange(name, nil)
	if err != nil {
		return nil, fmt.Errorf("host range %q: %w", name, err)
	}
	return out, nil
}

func expandHostRange(name string, acc []string) ([]string, error) {
	open := strings.IndexByte(name, '[')
	if open < 0 {
		if strings.IndexByte(name, ']') >= 0 {
			return nil, errors.New("']' without '['")
		}
		return append(acc, name), nil
	}
	closeRel := strings.IndexByte(name[open:], ']')
	if closeRel < 0 {
		return nil, errors.New("'[' without ']'")
	}
	head, body, tail := name[:open], name[open+1:open+closeRel], name[open+closeRel+1:]
	if strings.IndexByte(head, ']') >= 0 {
		return nil, errors.New("']' without '['")
	}
	items, err := rangeItems(body)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		acc, err = expandHostRange(head+it+tail, acc)
		if err != nil {
			return nil, err
		}
		if len(acc) > maxExpand {
			return nil, fmt.Errorf("expands to more than %d names", maxExpand)
		}
	}
	return acc, nil
}

// rangeItems expands the inside of one Ansible range: "01:16", "a:f", "0:20:5".
func rangeItems(body string) ([]string, error) {
	bounds := strings.Split(body, ":")
	if len(bounds) != 2 && len(bounds) != 3 {
		return nil, fmt.Errorf("range [%s] must be begin:end or begin:end:step", body)
	}
	beg, end := bounds[0], bounds[1]
	if beg == "" {
		beg = "0"
	}
	if end == "" {
		return nil, fmt.Errorf("range [%s] has no end", body)
	}
	step := 1
	if len(bounds) == 3 && bounds[2] != "" {
		s, err := strconv.Atoi(bounds[2])
		if err != nil || s <= 0 {
			return nil, fmt.Errorf("range [%s]: step %q is not a positive integer", body, bounds[2])
		}
		step = s
	}
	ib, ie := strings.Index(asciiLetters, beg), strings.Index(asciiLetters, end)
	if len(beg) == 1 && len(end) == 1 && ib >= 0 && ie >= 0 {
		if ib > ie {
			return nil, fmt.Errorf("range [%s]: begin is after end", body)
		}
		var out []string
		for i := ib; i <= ie; i += step {
			out = append(out, asciiLetters[i:i+1])
		}
		return out, nil
	}
	width := 0
	if len(beg) > 1 && beg[0] == '0' {
		if len(beg) != len(end) {
			return nil, fmt.Errorf("range [%s]: a zero-padded range needs begin and end of equal length", body)
		}
		width = len(beg)
	}
	b, err := parseDigits(beg)
	if err != nil {
		return nil, fmt.Errorf("range [%s]: begin: %w", body, err)
	}
	e, err := parseDigits(end)
	if err != nil {
		return nil, fmt.Errorf("range [%s]: end: %w", body, err)
	}
	if b > e {
		return nil, fmt.Errorf("range [%s]: begin is after end", body)
	}
	if (e-b)/uint64(step) >= maxExpand {
		return nil, fmt.Errorf("range [%s] expands to more than %d names", body, maxExpand)
	}
	var out []string
	for v := b; v <= e; v += uint64(step) {
		out = append(out, padNum(v, width))
	}
	return out, nil
}

func parseDigits(s string) (uint64, error) {
	if s == "" || len(s) > maxDigits {
		return 0, fmt.Errorf("%q is not a number of 1 to %d digits", s, maxDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	return strconv.ParseUint(s, 10, 64)
}

func padNum(v uint64, width int) string {
	s := strconv.FormatUint(v, 10)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}

// padWidth is the zero padding a node-set number implies: "07" pads to 2,
// "7" and "0" do not pad. Expand and Fold must agree on it exactly.
func padWidth(s string) int {
	if len(s) > 1 && s[0] == '0' {
		return len(s)
	}
	return 0
}

// ExpandNodeSet expands a ClusterShell node set as `nodeset -e` does:
// "gpu[01-03,07]", "gpu[1-9/2]", "rack[1-2]-gpu[01-04]", and the set
// operators ',' (union), '!' (difference), '&' (intersection) and '^'
// (symmetric difference), all of one precedence, applied left to right:
// "node[1-9]!node6", "a[1-3],a[2-5]!a2" is ((a[1-3] , a[2-5]) ! a2).
// Zero padding is kept; duplicates are dropped; names keep the order they
// were first written in (nodeset sorts; a host list's order is the user's).
// Unlike nodeset, an empty operand after ',' is skipped, so Ansible's
// trailing-comma list "a," reads.
func ExpandNodeSet(s string) ([]string, error) {
	var steps []setStep
	for _, tok := range splitOutsideBrackets(s, ',') {
		st, err := splitSetOps(tok)
		if err != nil {
			return nil, fmt.Errorf("node set %q: %w", s, err)
		}
		steps = append(steps, st...)
	}
	out, err := evalSetSteps(steps, func(st setStep) ([]string, error) { return expandNodeElem(st.operand) })
	if err != nil {
		return nil, fmt.Errorf("node set %q: %w", s, err)
	}
	return out, nil
}

// setStep is one operand of a node-set expression and the operator that
// joins it to the result so far (',' for the first).
type setStep struct {
	op      byte
	operand string
}

// isSetOp tells ClusterShell's operators other than ','.
func isSetOp(c byte) bool { return c == '!' || c == '&' || c == '^' }

// splitSetOps splits one comma-free token ("node[1-9]!node6&node[2-7]") on
// '!', '&' and '^' outside brackets. A blank token gives no step; a blank
// operand next to an operator is an error, as in nodeset.
func splitSetOps(tok string) ([]setStep, error) {
	if strings.TrimSpace(tok) == "" {
		return nil, nil
	}
	var steps []setStep
	op, depth, start := byte(','), 0, 0
	for i := 0; i <= len(tok); i++ {
		if i < len(tok) {
			switch c := tok[i]; {
			case c == '[':
				depth++
				continue
			case c == ']':
				if depth > 0 {
					depth--
				}
				continue
			case depth > 0 || !isSetOp(c):
				continue
			}
		}
		operand := strings.TrimSpace(tok[start:i])
		if operand == "" {
			where := "after"
			if op == ',' {
				where, op = "before", tok[i]
			}
			return nil, fmt.Errorf("%q: no operand %s '%c'", strings.TrimSpace(tok), where, op)
		}
		steps = append(steps, setStep{op: op, operand: operand})
		if i < len(tok) {
			op, start = tok[i], i+1
		}
	}
	return steps, nil
}

// orderedSet is a set of names that remembers the order they came in.
type orderedSet struct {
	list []string
	in   map[string]bool
}

func (s *orderedSet) add(n string) {
	if !s.in[n] {
		s.in[n] = true
		s.list = append(s.list, n)
	}
}

// keep drops the names for which keep is false.
func (s *orderedSet) keep(keep func(string) bool) {
	out := s.list[:0]
	for _, n := range s.list {
		if keep(n) {
			out = append(out, n)
		} else {
			delete(s.in, n)
		}
	}
	s.list = out
}

// apply combines names into the set with one ClusterShell operator.
func (s *orderedSet) apply(op byte, names []string) {
	if op == ',' {
		for _, n := range names {
			s.add(n)
		}
		return
	}
	other := make(map[string]bool, len(names))
	for _, n := range names {
		other[n] = true
	}
	switch op {
	case '!':
		s.keep(func(n string) bool { return !other[n] })
	case '&':
		s.keep(func(n string) bool { return other[n] })
	case '^':
		before := make(map[string]bool, len(s.in))
		for n := range s.in {
			before[n] = true
		}
		s.keep(func(n string) bool { return !other[n] })
		for _, n := range names {
			if !before[n] {
				s.add(n)
			}
		}
	}
}

// evalSetSteps applies steps left to right, each operand's names given by
// operand. The result is bounded by maxExpand as a single range is.
func evalSetSteps(steps []setStep, operand func(setStep) ([]string, error)) ([]string, error) {
	set := orderedSet{in: map[string]bool{}}
	for _, st := range steps {
		names, err := operand(st)
		if err != nil {
			return nil, err
		}
		set.apply(st.op, names)
		if len(set.list) > maxExpand {
			return nil, fmt.Errorf("expands to more than %d names", maxExpand)
		}
	}
	return set.list, nil
}

// expandNodeElem expands one operand: text and [rangeset] parts,
// multiplied out left to right. As in nodeset, digits touching a bracket
// belong to its numbers: "n0[8-10]" is "n[08-010]" (a padding mismatch),
// and two brackets must have more than digits between them.
func expandNodeElem(elem string) ([]string, error) {
	acc := []string{""}
	rest := elem
	afterRange, stepped := false, false
	for rest != "" {
		open := strings.IndexByte(rest, '[')
		text := rest
		if open >= 0 {
			text = rest[:open]
		}
		if strings.IndexByte(text, ']') >= 0 {
			return nil, fmt.Errorf("%q: ']' without '['", elem)
		}
		trailing := len(digitPrefix(text))
		if afterRange && stepped && trailing > 0 {
			return nil, fmt.Errorf("%q: digits after a range with a step", elem)
		}
		if afterRange && open >= 0 && trailing == len(text) {
			return nil, fmt.Errorf("%q: a range right after a range needs text between them", elem)
		}
		for i := range acc {
			acc[i] += text
		}
		if open < 0 {
			break
		}
		closeRel := strings.IndexByte(rest[open:], ']')
		if closeRel < 0 {
			return nil, fmt.Errorf("%q: '[' without ']'", elem)
		}
		lead := text[len(strings.TrimRight(text, "0123456789")):]
		items, hasStep, err := rangeSetItems(rest[open+1:open+closeRel], lead)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", elem, err)
		}
		if len(acc)*len(items) > maxExpand {
			return nil, fmt.Errorf("%q expands to more than %d names", elem, maxExpand)
		}
		next := make([]string, 0, len(acc)*len(items))
		for _, a := range acc {
			for _, it := range items {
				next = append(next, a+it)
			}
		}
		acc = next
		rest = rest[open+closeRel+1:]
		afterRange, stepped = true, hasStep
	}
	return acc, nil
}

// rangeSetItems expands a ClusterShell range set body: "01-03,07,10-20/5".
// lead is the digits written just before '[', which nodeset counts into
// each bound when it checks padding. hasStep says whether a /step was used.
func rangeSetItems(body, lead string) (items []string, hasStep bool, err error) {
	if strings.TrimSpace(body) == "" {
		return nil, false, errors.New("empty []")
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		step := uint64(1)
		spec := part
		slash := strings.IndexByte(spec, '/')
		if i := slash; i >= 0 {
			s, err := parseDigits(strings.TrimSpace(spec[i+1:]))
			if err != nil || s == 0 {
				return nil, false, fmt.Errorf("range %q: step %q is not a positive integer", part, spec[i+1:])
			}
			step, hasStep = s, true
			spec = spec[:i]
		}
		lo, hi, isRange := strings.Cut(spec, "-")
		lo, hi = strings.TrimSpace(lo), strings.TrimSpace(hi)
		if !isRange {
			if slash >= 0 {
				return nil, false, fmt.Errorf("range %q: a step needs begin-end", part)
			}
			hi = lo
		}
		b, err := parseDigits(lo)
		if err != nil {
			return nil, false, fmt.Errorf("range %q: %w", part, err)
		}
		e, err := parseDigits(hi)
		if err != nil {
			return nil, false, fmt.Errorf("range %q: %w", part, err)
		}
		if b > e {
			return nil, false, fmt.Errorf("range %q: begin is after end", part)
		}
		if pb, pe := padWidth(lead+lo), padWidth(lead+hi); (pb > 0 || pe > 0) && len(lo) != len(hi) {
			return nil, false, fmt.Errorf("range %q: zero padding needs begin and end of equal length", part)
		}
		if (e-b)/step >= maxExpand || len(out)+int((e-b)/step) >= maxExpand {
			return nil, false, fmt.Errorf("range %q expands to more than %d names", part, maxExpand)
		}
		w := padWidth(lo)
		for v := b; ; v += step {
			out = append(out, padNum(v, w))
			if e-v < step {
				break
			}
		}
	}
	return out, hasStep, nil
}

// splitOutsideBrackets splits s on sep where sep is not inside [...].
func splitOutsideBrackets(s string, sep byte) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			if depth > 0 {
				depth--
			}
		case sep:
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// nameShape splits a name into text and number runs: "rack1-gpu07" is
// texts ["rack", "-gpu", ""] and nums ["1", "07"]. Digit runs too long to be
// numbers stay text.
type nameShape struct {
	texts []string
	nums  []string
}

func splitName(name string) nameShape {
	var sh nameShape
	text := ""
	for i := 0; i < len(name); {
		if name[i] < '0' || name[i] > '9' {
			text += name[i : i+1]
			i++
			continue
		}
		j := i
		for j < len(name) && name[j] >= '0' && name[j] <= '9' {
			j++
		}
		if j-i > maxDigits {
			text += name[i:j]
		} else {
			sh.texts = append(sh.texts, text)
			sh.nums = append(sh.nums, name[i:j])
			text = ""
		}
		i = j
	}
	sh.texts = append(sh.texts, text)
	return sh
}

// FoldNodeSet is the reverse of ExpandNodeSet: it gathers names that differ
// in one number into ClusterShell ranges, keeping zero padding:
// ["gpu01","gpu02","gpu03","gpu07"] -> "gpu[01-03,07]". Duplicates are
// dropped and the result is sorted naturally (gpu2 before gpu10). Names are
// expected to be host names (no '[', ']' or ',').
func FoldNodeSet(names []string) string {
	type group struct {
		prefix, suffix string
		nums           []string
	}
	// Group by shape (the text runs and the number of numbers), then fold on
	// the last number that varies within the shape.
	shapes := map[string][]nameShape{}
	var shapeOrder []string
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		sh := splitName(n)
		key := shapeKey(sh.texts)
		if _, ok := shapes[key]; !ok {
			shapeOrder = append(shapeOrder, key)
		}
		shapes[key] = append(shapes[key], sh)
	}
	var groups []*group
	for _, key := range shapeOrder {
		list := shapes[key]
		pos := -1
		for p := len(list[0].nums) - 1; p >= 0 && pos < 0; p-- {
			for _, sh := range list[1:] {
				if sh.nums[p] != list[0].nums[p] {
					pos = p
					break
				}
			}
		}
		byRest := map[string]*group{}
		for _, sh := range list {
			if pos < 0 {
				groups = append(groups, &group{prefix: joinShape(sh, 0, len(sh.texts))})
				continue
			}
			prefix := joinShape(sh, 0, pos+1)
			suffix := joinShape(sh, pos+1, len(sh.texts))
			k := shapeKey([]string{prefix, suffix})
			g := byRest[k]
			if g == nil {
				g = &group{prefix: prefix, suffix: suffix}
				byRest[k] = g
				groups = append(groups, g)
			}
			g.nums = append(g.nums, sh.nums[pos])
		}
	}
	sort.SliceStable(groups, func(i, j int) bool {
		a, b := groups[i], groups[j]
		if a.prefix != b.prefix {
			return naturalLess(a.prefix, b.prefix)
		}
		if a.suffix != b.suffix {
			return naturalLess(a.suffix, b.suffix)
		}
		return naturalLess(firstNum(a.nums), firstNum(b.nums))
	})
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		switch len(g.nums) {
		case 0:
			out = append(out, g.prefix)
		case 1:
			out = append(out, g.prefix+g.nums[0]+g.suffix)
		default:
			out = append(out, g.prefix+"["+foldNums(g.nums)+"]"+g.suffix)
		}
	}
	return strings.Join(out, ",")
}

// shapeKey joins strings unambiguously (length-prefixed), whatever bytes
// they hold.
func shapeKey(parts []string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

func firstNum(nums []string) string {
	if len(nums) == 0 {
		return ""
	}
	best := nums[0]
	for _, n := range nums[1:] {
		if numLess(n, best) {
			best = n
		}
	}
	return best
}

// joinShape rebuilds texts[from:to] with the numbers between them: the
// prefix before nums[p] is (0, p+1), the suffix after it (p+1, len(texts)).
func joinShape(sh nameShape, from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(sh.texts[i])
		if i < to-1 {
			b.WriteString(sh.nums[i])
		}
	}
	return b.String()
}

// numLess orders number strings by value, then shorter (unpadded) first.
func numLess(a, b string) bool {
	va, _ := strconv.ParseUint(a, 10, 64)
	vb, _ := strconv.ParseUint(b, 10, 64)
	if va != vb {
		return va < vb
	}
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// foldNums turns number strings into a range set body: "01-03,07". A run
// grows while the next value is one more and prints the same way under the
// run's padding, so ExpandNodeSet gives back exactly the same strings.
func foldNums(nums []string) string {
	sorted := append([]string(nil), nums...)
	sort.Slice(sorted, func(i, j int) bool { return numLess(sorted[i], sorted[j]) })
	type run struct {
		first, last string
		lastV       uint64
		width       int
	}
	var runs []*run
	for _, s := range sorted {
		v, _ := strconv.ParseUint(s, 10, 64)
		var into *run
		for _, r := range runs {
			if r.lastV+1 == v && padNum(v, r.width) == s {
				into = r
				break
			}
		}
		if into != nil {
			into.last, into.lastV = s, v
			continue
		}
		runs = append(runs, &run{first: s, last: s, lastV: v, width: padWidth(s)})
	}
	parts := make([]string, len(runs))
	for i, r := range runs {
		if r.first == r.last {
			parts[i] = r.first
		} else {
			parts[i] = r.first + "-" + r.last
		}
	}
	return strings.Join(parts, ",")
}

// naturalLess compares strings with digit runs compared by value, so that
// gpu2 sorts before gpu10.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da != "" && db != "" {
			if da != db {
				if len(da) <= maxDigits && len(db) <= maxDigits {
					return numLess(da, db)
				}
				return da < db
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
