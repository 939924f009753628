// Package scripts is gpush's shared Lua script library, embedded in the binary
// so that `gpush run free_gpus.lua` works on a machine with nothing installed.
package scripts

import (
	"bufio"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
)

// FS holds every script of the library (the *.lua files of this folder).
//
//go:embed *.lua
var FS embed.FS

// Header is what a script says about itself in its leading comment block.
type Header struct {
	// Summary is the first line: the one-line description.
	Summary string
	// Text is the whole comment block, comment markers removed.
	Text string
	// Module is true for a library meant for require(), not for `gpush run`.
	Module bool
}

// ParseHeader reads the leading "--" comment block of a Lua script. The first
// non-empty comment line is the summary; a summary starting with "module:"
// marks a require()-able library.
func ParseHeader(r io.Reader) (Header, error) {
	var h Header
	var lines []string
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			if strings.HasPrefix(line, "#!") {
				continue
			}
		}
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "--") {
			break
		}
		t = strings.TrimPrefix(t, "--")
		t = strings.TrimPrefix(t, " ")
		lines = append(lines, t)
		if h.Summary == "" && strings.TrimSpace(t) != "" {
			h.Summary = strings.TrimSpace(t)
		}
	}
	if err := sc.Err(); err != nil {
		return h, fmt.Errorf("read script header: %w", err)
	}
	h.Text = strings.TrimSpace(strings.Join(lines, "\n"))
	if rest, ok := strings.CutPrefix(h.Summary, "module:"); ok {
		h.Module = true
		h.Summary = strings.TrimSpace(rest)
	}
	return h, nil
}

// Entry is one script of a folder or of the embedded library.
type Entry struct {
	Name string // file name, "free_gpus.lua"
	Header
}

// List reads the headers of every *.lua file at the top of fsys, by name.
func List(fsys fs.FS) ([]Entry, error) {
	names, err := fs.Glob(fsys, "*.lua")
	if err != nil {
		return nil, fmt.Errorf("list scripts: %w", err)
	}
	sort.Strings(names)
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		f, err := fsys.Open(n)
		if err != nil {
			return nil, fmt.Errorf("open script %s: %w", n, err)
		}
		h, err := ParseHeader(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("script %s: %w", n, err)
		}
		out = append(out, Entry{Name: n, Header: h})
	}
	return out, nil
}
