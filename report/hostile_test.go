package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// hostile is a process name as a host may report it: cursor up, erase line,
// green, a C1 CSI, a bidi override and a byte that is not UTF-8.
const hostile = "\x1b[1A\x1b[2K\x1b[32m\u009b2J\u202e\xff"

const hostileShown = `\x1b[1A\x1b[2K\x1b[32m\u009b2J\u202e\xff`

// onlyOwnEscapes fails when s holds a control byte other than newlines, tabs
// (kept in log lines) and the SGR colour sequences listed.
func onlyOwnEscapes(t *testing.T, s string, own ...string) {
	t.Helper()
	for _, o := range own {
		s = strings.ReplaceAll(s, o, "")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			t.Fatalf("control byte %#x at %d passed: %q", c, i, s)
		}
	}
	if strings.Contains(s, "\u009b") || strings.Contains(s, "\u202e") || strings.Contains(s, "\xff") {
		t.Fatalf("C1, bidi or invalid UTF-8 passed: %q", s)
	}
}

// own are the SGR sequences gpush itself writes when it colours.
func own(color bool) []string {
	if !color {
		return nil
	}
	return []string{"\x1b[0m", "\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[35m"}
}

func hostileRun(p *Printer) {
	p.Event(Event{Host: "gpu01", Level: "info", Message: "exited pid 42 (" + hostile + ")"})
	// A multi-line message cannot forge another host's line.
	p.Event(Event{Host: "gpu01", Level: "warn", Message: "line one\ngpu02 | INFO freed\t2 GPUs\n"})
	rs := []Result{
		{Host: "gpu01", Status: StatusFailed, Error: "GPU 0: holder pid 42 (" + hostile + ") survived KILL",
			Value: []any{map[string]any{"gpu": 0.0, "user": "bob", "comm": hostile, "state": "S"}}},
		{Host: "gpu02", Status: StatusOK, Value: []any{map[string]any{"gpu": 0.0, "user": "alice", "comm": "python3", "state": "R"}}},
	}
	p.Finish(rs)
}

func TestHumanOutputIsSanitized(t *testing.T) {
	for _, color := range []bool{false, true} {
		var out bytes.Buffer
		hostileRun(New(Options{Out: &out, Color: color, Now: clock()}))
		s := out.String()
		onlyOwnEscapes(t, s, own(color)...)
		plain := s
		for _, o := range []string{"\x1b[0m", "\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[35m"} {
			plain = strings.ReplaceAll(plain, o, "")
		}
		for _, want := range []string{
			"gpu01 | INFO exited pid 42 (" + hostileShown + ")\n",
			"gpu01 | WARN line one\ngpu01 | WARN gpu02 | INFO freed\t2 GPUs\n",
			"holder pid 42 (" + hostileShown + ") survived KILL",
		} {
			if !strings.Contains(plain, want) {
				t.Errorf("color=%v: output lacks %q:\n%s", color, want, plain)
			}
		}
		// The fleet table stays aligned: widths count the escapes shown.
		var header, row1, row2 string
		for _, l := range strings.Split(plain, "\n") {
			switch {
			case header == "" && strings.HasPrefix(l, "HOST"):
				header = l
			case row1 == "" && strings.HasPrefix(l, "gpu01  "):
				row1 = l
			case row2 == "" && strings.HasPrefix(l, "gpu02  "):
				row2 = l
			}
		}
		if i, j, k := strings.Index(header, "STATE"), strings.Index(row1, "  S")+2, strings.Index(row2, "  R")+2; i < 0 || i != j || i != k {
			t.Errorf("color=%v: table not aligned (STATE at %d, %d, %d):\n%s\n%s\n%s", color, i, j, k, header, row1, row2)
		}
		if color && !strings.Contains(s, "\x1b[31mfailed") {
			t.Errorf("gpush's own colours are gone:\n%q", s)
		}
	}
}

// --json keeps the exact text, JSON-escaped: nothing raw reaches the
// terminal, and decoding gives back what the host sent.
func TestJSONKeepsHostileTextEscaped(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, JSON: true, Now: clock()})
	p.Event(Event{Host: "gpu01", Time: time.Unix(0, 0).UTC(), Level: "info", Message: "exited (" + hostile + ")"})
	p.Finish([]Result{{Host: "gpu01", Status: StatusOK, Value: []any{map[string]any{"comm": hostile}}}})
	s := out.String()
	onlyOwnEscapes(t, s, "")
	if !strings.Contains(s, `\u001b[1A\u001b[2K\u001b[32m\u009b2J\u202e\ufffd`) {
		t.Errorf("escapes not JSON-escaped: %s", s)
	}
	var got struct {
		Rows []map[string]string `json:"rows"`
		Log  []struct{ Message string }
	}
	first, _, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	if err := json.Unmarshal(first, &got); err != nil {
		t.Fatal(err)
	}
	valid := strings.ToValidUTF8(hostile, "\ufffd")
	if got.Rows[0]["comm"] != valid || got.Log[0].Message != "exited ("+valid+")" {
		t.Errorf("decoded %q, %q; want %q", got.Rows[0]["comm"], got.Log[0].Message, valid)
	}
}

// Whatever the hosts send, human output holds no control byte but
// newlines, tabs and gpush's own colours, and JSON output decodes.
func FuzzPrinter(f *testing.F) {
	f.Add("gpu01", hostile, "python3", "GPU 0: "+hostile)
	f.Add("\x1b]0;title\x07", "a\nb\r\nc", "\u202e", "\xff")
	f.Fuzz(func(t *testing.T, host, msg, comm, errText string) {
		rs := []Result{{Host: host, Status: StatusFailed, Error: errText,
			Value: []any{map[string]any{"comm": comm, "pid": 1.0}}}, {Host: "h2", Status: StatusOK, Value: comm}}
		for _, color := range []bool{false, true} {
			var out bytes.Buffer
			p := New(Options{Out: &out, Color: color, FoldNumbers: color, Now: clock()})
			p.Event(Event{Host: host, Level: "warn", Message: msg})
			p.Finish(rs)
			onlyOwnEscapes(t, out.String(), own(color)...)
		}
		var out bytes.Buffer
		p := New(Options{Out: &out, JSON: true, Now: clock()})
		p.Event(Event{Host: host, Level: "warn", Message: msg})
		p.Finish(rs)
		onlyOwnEscapes(t, out.String())
		for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("JSON line %q: %v", line, err)
			}
		}
	})
}
