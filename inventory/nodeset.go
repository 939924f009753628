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
// A variable so that tests can lower it.
var maxExpand = 100000

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
	if (e-b)/uint64(step) >= uint64(maxExpand) {
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
	out, err := evalSetSteps(steps, maxExpand, func(st setStep) ([]string, error) { return expandNodeElem(st.operand) })
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
// operand. The result is bounded by limit: maxExpand for names that text
// expands to, as a single range is; an inventory's size for a pattern
// that only selects the inventory's own hosts.
func evalSetSteps(steps []setStep, limit int, operand func(setStep) ([]string, error)) ([]string, error) {
	set := orderedSet{in: map[string]bool{}}
	for _, st := range steps {
		names, err := operand(st)
		if err != nil {
			return nil, err
		}
		set.apply(st.op, names)
		if len(set.list) > limit {
			return nil, fmt.Errorf("expands to more than %d names", limit)
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
		if (e-b)/step >= uint64(maxExpand) || len(out)+int((e-b)/step) >= maxExpand {
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

// foldName is a name cut as nodeset cuts it: every digit run is an axis.
// pattern is the text with "%s" for each axis and '%' doubled, which is
// what nodeset sorts patterns by. Digit runs too long to be numbers here
// stay text (nodeset would take them as numbers).
type foldName struct {
	pattern string
	texts   []string // len(nums)+1 pieces of text around the numbers
	nums    []string
}

func cutName(name string) foldName {
	var fn foldName
	var pat, text strings.Builder
	for i := 0; i < len(name); {
		if name[i] < '0' || name[i] > '9' {
			text.WriteByte(name[i])
			if name[i] == '%' {
				pat.WriteByte('%')
			}
			pat.WriteByte(name[i])
			i++
			continue
		}
		j := i
		for j < len(name) && name[j] >= '0' && name[j] <= '9' {
			j++
		}
		if j-i > maxDigits {
			text.WriteString(name[i:j])
			pat.WriteString(name[i:j])
		} else {
			fn.texts = append(fn.texts, text.String())
			fn.nums = append(fn.nums, name[i:j])
			text.Reset()
			pat.WriteString("%s")
		}
		i = j
	}
	fn.texts = append(fn.texts, text.String())
	fn.pattern = pat.String()
	return fn
}

// FoldNodeSet is the reverse of ExpandNodeSet and folds as `nodeset -f`
// does: names are grouped by pattern (text with each digit run an axis),
// patterns in nodeset's order; one varying axis folds into one range set
// ("gpu[01-03,07]"), several into rectangles merged as nodeset merges them
// ("node[1-2]-ib[0-1],node3-ib0"). Zero padding is kept and duplicates
// dropped. Names are expected to be host names (no '[', ']' or ',').
func FoldNodeSet(names []string) string {
	type group struct {
		texts []string
		vecs  [][][]string // vectors: per axis, a sorted set of numbers
	}
	groups := map[string]*group{}
	var patterns []string
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		fn := cutName(n)
		g := groups[fn.pattern]
		if g == nil {
			g = &group{texts: fn.texts}
			groups[fn.pattern] = g
			patterns = append(patterns, fn.pattern)
		}
		vec := make([][]string, len(fn.nums))
		for i, num := range fn.nums {
			vec[i] = []string{num}
		}
		g.vecs = append(g.vecs, vec)
	}
	sort.Strings(patterns)
	var out []string
	for _, p := range patterns {
		g := groups[p]
		for _, vec := range foldVectors(g.vecs) {
			var b strings.Builder
			for i, axis := range vec {
				b.WriteString(g.texts[i])
				if len(axis) == 1 {
					b.WriteString(axis[0])
				} else {
					b.WriteString("[" + foldNums(axis) + "]")
				}
			}
			b.WriteString(g.texts[len(g.texts)-1])
			out = append(out, b.String())
		}
	}
	return strings.Join(out, ",")
}

// foldVectors folds one pattern's distinct single-name vectors. With at
// most one axis varying they make one vector. Otherwise, as nodeset does:
// sort (see vecLess), then passes that merge two vectors equal on all axes
// but one; the first passes only try each vector's next neighbours and stop
// at the first that does not merge, then every pair is tried, until a pass
// changes nothing.
func foldVectors(vecs [][][]string) [][][]string {
	if len(vecs) == 0 {
		return nil
	}
	dims := len(vecs[0])
	varying := -1
	for d := 0; d < dims; d++ {
		for _, v := range vecs[1:] {
			if v[d][0] != vecs[0][d][0] {
				if varying >= 0 {
					return mergeVectors(vecs)
				}
				varying = d
				break
			}
		}
	}
	one := vecs[0]
	if varying >= 0 {
		var nums []string
		for _, v := range vecs {
			nums = append(nums, v[varying][0])
		}
		one = append([][]string(nil), vecs[0]...)
		one[varying] = sortedNums(nums)
	}
	return [][][]string{one}
}

func mergeVectors(vecs [][][]string) [][][]string {
	vecs = append([][][]string(nil), vecs...)
	full := false
	for changed := true; changed; {
		changed = false
		sort.SliceStable(vecs, func(i, j int) bool { return vecLess(vecs[i], vecs[j]) })
		// Merged-away vectors are marked, not cut out, so that a pass stays
		// linear in easy passes; the list is compacted after it.
		gone := make([]bool, len(vecs))
		for i := range vecs {
			if gone[i] {
				continue
			}
			for j := i + 1; j < len(vecs); j++ {
				if gone[j] {
					continue
				}
				if m, ok := mergeVec(vecs[i], vecs[j]); ok {
					vecs[i], gone[j], changed = m, true, true
					continue
				}
				if !full {
					break
				}
			}
		}
		kept := vecs[:0]
		for i, v := range vecs {
			if !gone[i] {
				kept = append(kept, v)
			}
		}
		vecs = kept
		if !changed && !full {
			changed, full = true, true
		}
	}
	return vecs
}

// mergeVec merges two disjoint vectors that are equal on every axis but one.
func mergeVec(a, b [][]string) ([][]string, bool) {
	diff := -1
	for d := range a {
		if !equalStrings(a[d], b[d]) {
			if diff >= 0 {
				return nil, false
			}
			diff = d
		}
	}
	if diff < 0 {
		return nil, false
	}
	m := append([][]string(nil), a...)
	m[diff] = unionNums(a[diff], b[diff])
	return m, true
}

// unionNums merges two lists sorted in numLess order.
func unionNums(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0] == b[0]:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		case numLess(a[0], b[0]):
			out, a = append(out, a[0]), a[1:]
		default:
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// vecLess is nodeset's order of vectors: more names first, then axis by
// axis more numbers first, lower first number, lower last number (numbers
// compared as strings, as nodeset does); the rest only makes ties stable.
func vecLess(a, b [][]string) bool {
	if pa, pb := vecSize(a), vecSize(b); pa != pb {
		return pa > pb
	}
	for d := range a {
		x, y := a[d], b[d]
		switch {
		case len(x) != len(y):
			return len(x) > len(y)
		case x[0] != y[0]:
			return x[0] < y[0]
		case x[len(x)-1] != y[len(y)-1]:
			return x[len(x)-1] < y[len(y)-1]
		}
	}
	for d := range a {
		for k := range a[d] {
			if a[d][k] != b[d][k] {
				return numLess(a[d][k], b[d][k])
			}
		}
	}
	return false
}

func vecSize(v [][]string) int {
	n := 1
	for _, axis := range v {
		n *= len(axis)
	}
	return n
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// numLess is nodeset's order of numbers: shorter strings first, then by
// text, so 9 < 01 < 10 < 001.
func numLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// sortedNums sorts numbers in numLess order and drops duplicates.
func sortedNums(nums []string) []string {
	out := append([]string(nil), nums...)
	sort.Slice(out, func(i, j int) bool { return numLess(out[i], out[j]) })
	k := 0
	for i, n := range out {
		if i == 0 || n != out[k-1] {
			out[k] = n
			k++
		}
	}
	return out[:k]
}

// foldNums turns distinct numbers into a range set body ("01-03,07") as
// nodeset prints one: in numLess order, a run grows while the step stays
// the same and the padding fits (a run begun zero-padded takes only
// numbers of its length, an unpadded one only unpadded numbers). Runs of
// step 1 print as first-last, others as single numbers; when the step
// changes inside a run of step 2 or more, its last number begins the next
// run with the padding rule it had. Expanding the result gives back
// exactly the same strings.
func foldNums(nums []string) string {
	idx := sortedNums(nums)
	if len(idx) == 0 {
		return ""
	}
	vals := make([]uint64, len(idx))
	for i, s := range idx {
		vals[i], _ = strconv.ParseUint(s, 10, 64)
	}
	var parts []string
	emit := func(from, to int, step uint64) {
		if step <= 1 {
			if from == to {
				parts = append(parts, idx[from])
			} else {
				parts = append(parts, idx[from]+"-"+idx[to])
			}
			return
		}
		parts = append(parts, idx[from:to+1]...)
	}
	start := 0
	padded, padLen := padWidth(idx[0]) > 0, len(idx[0])
	step := uint64(0) // 0: the run has one number so far
	for k := 1; k < len(idx); k++ {
		fits := padded && len(idx[k]) == padLen || !padded && padWidth(idx[k]) == 0
		gap := vals[k] - vals[k-1]
		if fits && (step == 0 || gap == step) {
			step = gap
			continue
		}
		switch {
		case step <= 1:
			emit(start, k-1, step)
			start, padded, padLen = k, padWidth(idx[k]) > 0, len(idx[k])
			step = 0
			if fits {
				// nodeset keeps the gap as the new run's step
				step = gap
			}
		case !fits:
			emit(start, k-1, step)
			start, padded, padLen, step = k, padWidth(idx[k]) > 0, len(idx[k]), 0
		default:
			if start <= k-2 {
				emit(start, k-2, step)
			}
			start, step = k-1, gap
		}
	}
	emit(start, len(idx)-1, step)
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
					return valueLess(da, db)
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

// valueLess orders number strings by value, then shorter (unpadded) first.
func valueLess(a, b string) bool {
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
