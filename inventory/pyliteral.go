package inventory

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file reproduces the two Python pieces Ansible's INI inventory leans
// on: shlex.split(line, comments=True) for host lines, and ast.literal_eval
// for typing values (5 -> int, True -> bool, ['a'] -> list; anything that is
// not a Python literal stays a string, so "true" and "yes" stay strings
// exactly as in Ansible).

var errNoLiteral = errors.New("not a Python literal")

// shlexSplit splits like Python's shlex.split in POSIX mode. With comments,
// a '#' ends the line even inside a word, as shlex does.
func shlexSplit(s string, comments bool) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && comments:
			i = len(s)
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("no character after trailing backslash")
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("no closing quotation (')")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			i++
			closed := false
			for ; i < len(s); i++ {
				if s[i] == '"' {
					closed = true
					break
				}
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if !closed {
				return nil, errors.New(`no closing quotation (")`)
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// parseINIValue types a value like Ansible's _parse_value: a Python literal
// becomes its value, anything else is kept as the string it was.
func parseINIValue(s string) any {
	p := &pyParser{s: s}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return s
	}
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '#' {
		// A trailing comment is legal Python source, as literal_eval sees it.
		p.i = len(p.s)
	}
	if p.i != len(p.s) {
		return s
	}
	return v
}

type pyParser struct {
	s string
	i int
}

const maxPyDepth = 100

func (p *pyParser) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\r', '\n', '\f':
			p.i++
		default:
			return
		}
	}
}

func (p *pyParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *pyParser) value(depth int) (any, error) {
	if depth > maxPyDepth {
		return nil, errNoLiteral
	}
	p.skipSpace()
	c := p.peek()
	switch {
	case c == '[':
		p.i++
		items, _, err := p.items(']', depth)
		return items, err
	case c == '(':
		p.i++
		items, trailingComma, err := p.items(')', depth)
		if err != nil {
			return nil, err
		}
		if len(items) == 1 && !trailingComma {
			return items[0], nil // (x) is x, not a tuple
		}
		return items, nil
	case c == '{':
		p.i++
		return p.dictOrSet(depth)
	case c == '-' || c == '+':
		p.i++
		p.skipSpace()
		v, err := p.number()
		if err != nil {
			return nil, err
		}
		if c == '+' {
			return v, nil
		}
		switch n := v.(type) {
		case int:
			if n == math.MinInt {
				return nil, errNoLiteral
			}
			return -n, nil
		case float64:
			return -n, nil
		}
		return nil, errNoLiteral
	case c >= '0' && c <= '9' || c == '.':
		return p.number()
	case c == '\'' || c == '"':
		return p.strs()
	case isIdentStart(c):
		start := p.i
		for p.i < len(p.s) && isIdentChar(p.s[p.i]) {
			p.i++
		}
		word := p.s[start:p.i]
		if q := p.peek(); (q == '\'' || q == '"') && (word == "u" || word == "U" || word == "r" || word == "R") {
			p.i = start
			return p.strs()
		}
		switch word {
		case "True":
			return true, nil
		case "False":
			return false, nil
		case "None":
			return nil, nil
		}
	}
	return nil, errNoLiteral
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// items parses "a, b, c" up to close; it reports a trailing comma, which
// makes (x,) a tuple.
func (p *pyParser) items(close byte, depth int) ([]any, bool, error) {
	out := []any{}
	trailing := false
	for {
		p.skipSpace()
		if p.peek() == close {
			p.i++
			return out, trailing, nil
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, false, err
		}
		out = append(out, v)
		p.skipSpace()
		switch p.peek() {
		case ',':
			p.i++
			trailing = true
		case close:
			trailing = false
		default:
			return nil, false, errNoLiteral
		}
	}
}

// dictOrSet parses after '{': {k: v, ...} becomes a map with string keys
// (Python's str() of the key), {a, b} a list.
func (p *pyParser) dictOrSet(depth int) (any, error) {
	p.skipSpace()
	if p.peek() == '}' {
		p.i++
		return map[string]any{}, nil
	}
	first, err := p.value(depth + 1)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.peek() != ':' {
		rest := []any{first}
		for {
			switch p.peek() {
			case '}':
				p.i++
				return rest, nil
			case ',':
				p.i++
			default:
				return nil, errNoLiteral
			}
			p.skipSpace()
			if p.peek() == '}' {
				continue
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			rest = append(rest, v)
			p.skipSpace()
		}
	}
	m := map[string]any{}
	key := first
	for {
		p.i++ // ':'
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[pyStr(key)] = v
		p.skipSpace()
		switch p.peek() {
		case '}':
			p.i++
			return m, nil
		case ',':
			p.i++
		default:
			return nil, errNoLiteral
		}
		p.skipSpace()
		if p.peek() == '}' {
			p.i++
			return m, nil
		}
		if key, err = p.value(depth + 1); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.peek() != ':' {
			return nil, errNoLiteral
		}
	}
}

// pyStr renders a dict key the way Python's str() would.
func pyStr(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case bool:
		if t {
			return "True"
		}
		return "False"
	case nil:
		return "None"
	default:
		return fmt.Sprint(t)
	}
}

func (p *pyParser) number() (any, error) {
	start := p.i
	s := p.s
	if p.i+1 < len(s) && s[p.i] == '0' && strings.ContainsRune("xXoObB", rune(s[p.i+1])) {
		base := map[byte]int{'x': 16, 'X': 16, 'o': 8, 'O': 8, 'b': 2, 'B': 2}[s[p.i+1]]
		p.i += 2
		for p.i < len(s) && (isIdentChar(s[p.i])) {
			p.i++
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(s[start+2:p.i], "_", ""), base, 64)
		if err != nil || strings.HasPrefix(s[start+2:p.i], "__") || strings.HasSuffix(s[start:p.i], "_") {
			return nil, errNoLiteral
		}
		return int(n), nil
	}
	digits := func() {
		for p.i < len(s) && (s[p.i] >= '0' && s[p.i] <= '9' || s[p.i] == '_') {
			p.i++
		}
	}
	digits()
	isFloat := false
	if p.peek() == '.' {
		isFloat = true
		p.i++
		digits()
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		isFloat = true
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		digits()
	}
	if p.i < len(s) && isIdentChar(s[p.i]) {
		return nil, errNoLiteral // 12abc, 1j (complex): not something we type
	}
	text := s[start:p.i]
	if text == "." || strings.Contains(text, "__") || strings.HasSuffix(text, "_") || strings.HasPrefix(text, "_") {
		return nil, errNoLiteral
	}
	clean := strings.ReplaceAll(text, "_", "")
	if isFloat {
		// Out of range is Python's inf (1e309), not a syntax error.
		f, err := strconv.ParseFloat(clean, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, errNoLiteral
		}
		return f, nil
	}
	// Python 3 rejects 010 but accepts 0, 00 and 0_0.
	if len(clean) > 1 && clean[0] == '0' && strings.Trim(clean, "0") != "" {
		return nil, errNoLiteral
	}
	n, err := strconv.ParseInt(clean, 10, 64)
	if err != nil {
		return nil, errNoLiteral
	}
	return int(n), nil
}

// strs parses one or more adjacent string literals ('a' "b" == 'ab').
func (p *pyParser) strs() (any, error) {
	var b strings.Builder
	n := 0
	for {
		save := p.i
		p.skipSpace()
		raw := false
		if c := p.peek(); c == 'r' || c == 'R' || c == 'u' || c == 'U' {
			raw = c == 'r' || c == 'R'
			p.i++
		}
		q := p.peek()
		if q != '\'' && q != '"' {
			p.i = save
			break
		}
		s, err := p.quoted(raw)
		if err != nil {
			return nil, err
		}
		b.WriteString(s)
		n++
	}
	if n == 0 {
		return nil, errNoLiteral
	}
	return b.String(), nil
}

func (p *pyParser) quoted(raw bool) (string, error) {
	q := p.s[p.i]
	delim := string(q)
	if strings.HasPrefix(p.s[p.i:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	p.i += len(delim)
	var b strings.Builder
	for {
		if p.i >= len(p.s) {
			return "", errNoLiteral
		}
		if strings.HasPrefix(p.s[p.i:], delim) {
			p.i += len(delim)
			return b.String(), nil
		}
		c := p.s[p.i]
		if c == '\n' && len(delim) == 1 {
			return "", errNoLiteral
		}
		if c != '\\' {
			b.WriteByte(c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", errNoLiteral
		}
		e := p.s[p.i+1]
		if raw {
			b.WriteByte('\\')
			b.WriteByte(e)
			p.i += 2
			continue
		}
		p.i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if p.i+n > len(p.s) {
				return "", errNoLiteral
			}
			r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
			if err != nil || r > utf8.MaxRune {
				return "", errNoLiteral
			}
			b.WriteRune(rune(r))
			p.i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := p.i - 1
			for j < len(p.s) && j < p.i+2 && p.s[j] >= '0' && p.s[j] <= '7' {
				j++
			}
			r, _ := strconv.ParseUint(p.s[p.i-1:j], 8, 32)
			b.WriteRune(rune(r))
			p.i = j
		default:
			// Python keeps unknown escapes as written.
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
}
