// Package termsafe makes text for humans safe to print on a terminal.
//
// Process names, command lines, tool output and error messages are the
// hosts' data: a process named "\x1b[1A\x1b[2K" would move the cursor and
// erase gpush's own lines. Every human writer of gpush goes through a
// Writer, whose Write shows control characters (C0, DEL, C1, and so every
// ESC sequence), other non-printing runes (bidi overrides, line separators)
// and invalid UTF-8 as visible escapes such as \x1b, \u202e or \xff. Only
// the colours gpush itself chooses (Writer.Paint) and EraseLine reach the
// terminal as control sequences.
//
// The escapes are printable, so sanitizing is idempotent. A backslash is
// left as it is: a literal "\x1b" and an escaped ESC read the same, which
// is the price of stable output; machine output (--json) keeps the bytes.
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Safe is text ready for a terminal: sanitized data, or gpush's own
// styles. Only this package makes one, so a Safe cannot carry raw data.
type Safe struct{ s string }

// String returns the text, escape sequences of Paint included.
func (s Safe) String() string { return s.s }

// String returns s for one line of a terminal: every control character,
// tabs and newlines included, and every invalid byte become escapes.
func String(s string) string { return sanitize(s, false) }

// Data is s sanitized for one line (as String).
func Data(s string) Safe { return Safe{sanitize(s, false)} }

// Dataf formats, then sanitizes the result for one line: the format is
// sanitized too, so a newline in it is shown as \n.
func Dataf(format string, args ...any) Safe { return Data(fmt.Sprintf(format, args...)) }

// Block is s sanitized as lines of text: tabs and newlines are kept (they
// move the cursor only forward), everything else is escaped as by String.
func Block(s string) Safe { return Safe{sanitize(s, true)} }

// EraseLine returns to the start of the line and clears it (a progress line).
func EraseLine() Safe { return Safe{"\r\x1b[K"} }

// Join concatenates safe parts.
func Join(parts ...Safe) Safe {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.s)
	}
	return Safe{b.String()}
}

// sanitize escapes what a terminal would interpret; keep says whether tabs
// and newlines stay as they are.
func sanitize(s string, keep bool) string {
	if clean(s, keep) {
		return s // the common case: no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			// An invalid byte: shown as its value, which says more than U+FFFD.
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keep && (r == '\t' || r == '\n'):
			b.WriteRune(r)
		case printable(r):
			b.WriteString(s[i : i+n])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// clean reports whether s needs no escape.
func clean(s string, keep bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return cleanSlow(s[i:], keep)
		}
		if (c < 0x20 || c == 0x7f) && !(keep && (c == '\t' || c == '\n')) {
			return false
		}
	}
	return true
}

func cleanSlow(s string, keep bool) bool {
	for _, r := range s {
		// RuneError from an invalid byte; a real U+FFFD is printable and
		// checked again by sanitize, which tells the two apart.
		if r == utf8.RuneError || (!printable(r) && !(keep && (r == '\t' || r == '\n'))) {
			return false
		}
	}
	return true
}

// printable: letters, marks, numbers, punctuation, symbols and the ASCII
// space. Not C0/C1/DEL (Cc), format characters (bidi overrides, zero-width
// joiners: Cf), private use, unassigned, or other spaces and separators
// (U+2028 ends a line in some terminals).
func printable(r rune) bool { return unicode.IsPrint(r) }

// Writer writes human output. Everything given to Write is data and is
// sanitized as by Block (tabs and newlines kept); Print and Line write Safe
// parts as they are, in one Write each so that concurrent lines do not mix.
type Writer struct {
	w     io.Writer
	color bool
}

// NewWriter returns a Writer on w; color says whether Paint colours. A
// Writer given to NewWriter is returned as it is (its styles would
// otherwise be escaped).
func NewWriter(w io.Writer, color bool) *Writer {
	if tw, ok := w.(*Writer); ok {
		return tw
	}
	return &Writer{w: w, color: color}
}

// Color reports whether Paint colours.
func (w *Writer) Color() bool { return w.color }

// Write writes p sanitized as by Block. Each call stands alone: a rune
// split across two calls shows as invalid bytes (fmt writes whole strings).
// It reports len(p) written when the sanitized text was written whole.
func (w *Writer) Write(p []byte) (int, error) {
	s := sanitize(string(p), true)
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Print writes parts in one Write.
func (w *Writer) Print(parts ...Safe) error {
	_, err := io.WriteString(w.w, Join(parts...).s)
	return err
}

// Line writes parts and a newline in one Write.
func (w *Writer) Line(parts ...Safe) error {
	return w.Print(append(parts, Safe{"\n"})...)
}

// Paint is s sanitized for one line, in the SGR colour code (such as "31"
// or "1;32") when the Writer colours. A code that is not digits and
// semicolons is ignored.
func (w *Writer) Paint(code, s string) Safe {
	return paint(w.color, code, s)
}

func paint(color bool, code, s string) Safe {
	d := Data(s)
	if !color || code == "" || strings.Trim(code, "0123456789;") != "" || d.s == "" {
		return d
	}
	return Safe{"\x1b[" + code + "m" + d.s + "\x1b[0m"}
}
