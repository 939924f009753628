package termsafe

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// JSON makes the output of encoding/json safe for a terminal without
// changing what it decodes to: encoding/json escapes C0 but writes C1
// controls (U+009B is a CSI), DEL, bidi overrides and other non-printing
// runes raw. Each of them becomes a \uXXXX escape (a surrogate pair above
// U+FFFF). Outside strings JSON is ASCII, so every rune changed is inside a
// string, where the escape means the same rune; raw C0 bytes are left, as
// JSON has them only as whitespace between tokens (\n ending a line). Invalid UTF-8 (which
// encoding/json never writes) becomes \ufffd, as encoding/json does.
func JSON(b []byte) []byte {
	i := 0
	for i < len(b) && b[i] < utf8.RuneSelf && b[i] != 0x7f {
		i++
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = append(out, `\ufffd`...)
		case r < 0x7f || r >= utf8.RuneSelf && printable(r):
			// ASCII as it is: a raw C0 byte in JSON is whitespace between
			// tokens (encoding/json escapes them in strings).
			out = append(out, b[i:i+n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}
