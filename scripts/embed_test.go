package scripts

import (
	"io/fs"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Every embedded script must compile and carry the header `gpush scripts`
// prints: a summary, its vars and an example command.
func TestLibraryHeadersAndSyntax(t *testing.T) {
	entries, err := List(FS)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"free_gpus.lua": false, "gpu_status.lua": false, "gpu_holders.lua": false, "restart_service.lua": false}
	for _, e := range entries {
		if _, ok := want[e.Name]; ok {
			want[e.Name] = true
		}
		if e.Summary == "" {
			t.Errorf("%s: no one-line description", e.Name)
		}
		if !e.Module {
			if !strings.Contains(e.Text, "vars:") {
				t.Errorf("%s: header does not document its vars", e.Name)
			}
			if !strings.Contains(e.Text, "example: gpush run "+e.Name) {
				t.Errorf("%s: header has no example command", e.Name)
			}
		}
		src, err := fs.ReadFile(FS, e.Name)
		if err != nil {
			t.Fatal(err)
		}
		chunk, err := parse.Parse(strings.NewReader(string(src)), e.Name)
		if err != nil {
			t.Errorf("%s: %v", e.Name, err)
			continue
		}
		if _, err := lua.Compile(chunk, e.Name); err != nil {
			t.Errorf("%s: %v", e.Name, err)
		}
	}
	for n, seen := range want {
		if !seen {
			t.Errorf("%s missing from the library", n)
		}
	}
}

func TestParseHeader(t *testing.T) {
	h, err := ParseHeader(strings.NewReader("#!/usr/bin/env gpush\n-- module: helpers\n--\n-- more\nlocal x = 1\n-- not header\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Module || h.Summary != "helpers" || h.Text != "module: helpers\n\nmore" {
		t.Fatalf("got %+v", h)
	}
	h, _ = ParseHeader(strings.NewReader("print(1)\n"))
	if h.Summary != "" {
		t.Fatalf("script without header got summary %q", h.Summary)
	}
}
