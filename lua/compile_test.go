package lua

import (
	"strings"
	"testing"
)

func TestCompileNamesFileAndLine(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"local a = 1\nlocal b = = 2\n", "t.lua:2: syntax error near '='"},
		{"-- header\n\nreturn 'x\n", "t.lua:3: "},
		{"for i = 1, 2 do\n  print(i)\n", "t.lua:2: syntax error at the end of the script"},
		{"return {\n", "t.lua:1: syntax error at the end of the script"},
		{"goto nowhere\n", "t.lua:"},
	} {
		_, err := script(c.src).Compile()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Compile(%q) = %v, want an error starting %q", c.src, err, c.want)
		}
	}
	for _, ok := range []string{"", "-- only a comment\n", "return gpu.holders()\n", "local t = {1, 2}\nreturn #t"} {
		if p, err := script(ok).Compile(); err != nil || p == nil {
			t.Errorf("Compile(%q) = %v, %v; want a proto", ok, p, err)
		}
	}
}

// A script that does not compile fails every host without dialling any.
func TestRunDoesNotDialABrokenScript(t *testing.T) {
	f, hosts := newFleet("gpu01", "gpu02")
	res := Run(t.Context(), script("return (\n"), hosts, Options{Dial: f.dial})
	for _, r := range res {
		if r.Status != StatusFailed || !strings.HasPrefix(r.Error, "t.lua:1: ") {
			t.Errorf("%s: %+v, want failed naming t.lua:1", r.Host, r)
		}
	}
	if len(f.dialed) != 0 {
		t.Errorf("dialled %v for a script that does not compile", f.dialed)
	}
	// The same fleet is dialled for a good script: the check above can fail.
	Run(t.Context(), script("return 1"), hosts, Options{Dial: f.dial})
	if len(f.dialed) != 2 {
		t.Errorf("dialled %v, want both hosts", f.dialed)
	}
}
