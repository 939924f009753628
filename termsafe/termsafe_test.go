package termsafe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"python3", "python3"},
		{"sglang::scheduler", "sglang::scheduler"},
		{"\x1b[1A\x1b[2K\x1b[32m", `\x1b[1A\x1b[2K\x1b[32m`},
		{"a\tb\nc\rd", `a\tb\nc\rd`},
		{"bell\x07 nul\x00 del\x7f", `bell\x07 nul\x00 del\x7f`},
		{"c1 \u009b31m csi", `c1 \u009b31m csi`},
		{"bidi \u202eevil\u202c", `bidi \u202eevil\u202c`},
		{"sep\u2028x", `sep\u2028x`},
		{"bad \xff\xfe utf8 \xe2\x82", `bad \xff\xfe utf8 \xe2\x82`},
		{"utf-8: Grüße 日本 \U0001F600 \ufffd", "utf-8: Grüße 日本 \U0001F600 \ufffd"},
		{`already \x1b`, `already \x1b`},
		{"private \U000F0000", `private \U000f0000`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := Block("a\tb\nc\r\n\x1b[2J"); got.String() != "a\tb\nc\\r\n\\x1b[2J" {
		t.Errorf("Block kept or escaped the wrong runes: %q", got)
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, true)
	if NewWriter(w, false) != w {
		t.Error("NewWriter wrapped a Writer again (its colours would be escaped)")
	}
	fmt.Fprintf(w, "exited pid %d (%s)\n", 42, "\x1b[1A\x1b[2K")
	w.Line(w.Paint("1", "gpu01\x1b[0m"), Data(" | "), w.Paint("31", "ERROR"), Data(" \x9b\n"))
	w.Print(w.Paint("x;rm", "code"), w.Paint("32", ""), EraseLine())
	want := "exited pid 42 (\\x1b[1A\\x1b[2K)\n" +
		"\x1b[1mgpu01\\x1b[0m\x1b[0m | \x1b[31mERROR\x1b[0m \\x9b\\n\n" +
		"code\r\x1b[K"
	if b.String() != want {
		t.Errorf("wrote %q\nwant  %q", b.String(), want)
	}
	b.Reset()
	NewWriter(&b, false).Line(NewWriter(&b, false).Paint("31", "plain"))
	if b.String() != "plain\n" {
		t.Errorf("without colour: %q", b.String())
	}
}

// check asserts what every sanitized text must be.
func check(t *testing.T, in, out string, keep bool) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("sanitize(%q) = %q: not valid UTF-8", in, out)
	}
	for _, r := range out {
		if keep && (r == '\t' || r == '\n') {
			continue
		}
		if !unicode.IsPrint(r) {
			t.Fatalf("sanitize(%q) = %q: passes %U", in, out, r)
		}
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && !(keep && (c == '\t' || c == '\n'))) || c == 0x7f {
			t.Fatalf("sanitize(%q) = %q: control byte %#x", in, out, c)
		}
	}
	if again := sanitize(out, keep); again != out {
		t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
	}
	// Nothing is lost: every printable rune of the input is in the output,
	// in order (escapes only add text around them).
	rest := out
	for _, r := range in {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			continue
		}
		i := strings.IndexRune(rest, r)
		if i < 0 {
			t.Fatalf("sanitize(%q) = %q: lost %q", in, out, r)
		}
		rest = rest[i+utf8.RuneLen(r):]
	}
}

func FuzzSanitize(f *testing.F) {
	for _, s := range []string{"", "python3", "\x1b[1A\x1b[2K\x1b[32m", "a\tb\nc\r", "\x9b\xc2\x9b", "\xff\xfe",
		"\u202e\u2028", `\x1b`, "日本\U0001F600", "\xe2\x82", "\x00\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		check(t, s, sanitize(s, false), false)
		check(t, s, sanitize(s, true), true)
		// Through the Writer, as fmt writes.
		var b bytes.Buffer
		w := NewWriter(&b, true)
		if n, err := fmt.Fprint(w, s); err != nil || n != len(s) {
			t.Fatalf("Fprint: %d, %v; want %d", n, err, len(s))
		}
		check(t, s, b.String(), true)
		b.Reset()
		w.Line(w.Paint("31", s), Data(s))
		// Paint adds exactly its two SGR sequences, nothing the data chose.
		d := String(s)
		want := d + "\n"
		if d != "" {
			want = "\x1b[31m" + d + "\x1b[0m" + want
		}
		if b.String() != want {
			t.Fatalf("Line(Paint(%q), Data(%q)) wrote %q, want %q", s, s, b.String(), want)
		}
	})
}

func TestJSON(t *testing.T) {
	in := []byte("{\"comm\":\"\\u001b[1A\u009b2J\u202e\x7f\U000F0000 Grüße\"}\n")
	want := "{\"comm\":\"\\u001b[1A\\u009b2J\\u202e\\u007f\\udb80\\udc00 Grüße\"}\n"
	if got := JSON(in); string(got) != want {
		t.Errorf("JSON = %s\nwant   %s", got, want)
	}
	plain := []byte(`{"a":"b"}`)
	if got := JSON(plain); &got[0] != &plain[0] {
		t.Error("ASCII input copied")
	}
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{"", "python3", "\x1b[1A\u009b\u202e\x7f", "\xff\xfe", "\U000F0000\U0001F600", "a\"b\\c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(map[string]any{s: []string{s, "x"}})
		if err != nil {
			t.Fatal(err)
		}
		got := JSON(raw)
		check(t, string(raw), string(got), false)
		// The same value decodes from both.
		var a, b any
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatalf("JSON(%s) = %s: %v", raw, got, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("JSON(%s) = %s decodes to %q, want %q", raw, got, b, a)
		}
	})
}
