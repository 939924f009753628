package lua

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Script is a Lua script ready to run.
type Script struct {
	// Name is how errors name the script ("free_gpus.lua").
	Name string
	// Path is the file it was read from, or "embedded:NAME".
	Path   string
	Source []byte
	// Dir is the script's folder, searched by require; "" for an embedded script.
	Dir string
	// FS, for an embedded script, is its folder in the embedded library,
	// searched by require instead of Dir (so a library script can require
	// its siblings). Nil for a script read from disk.
	FS fs.FS
}

// ResolveOptions says where ResolveScript looks. Zero values mean the real
// defaults.
type ResolveOptions struct {
	// WorkDir is the working directory ("" = os.Getwd()).
	WorkDir string
	// SearchPath are extra script folders (nil = $GPUSH_PATH, colon-separated).
	SearchPath []string
	// ConfigDir is the user's config folder ("" = os.UserConfigDir()).
	ConfigDir string
	// Embedded is the script library built into the binary (may be nil).
	Embedded fs.FS
}

// ResolveScript finds a script by name, in this order: name as a path that
// exists; scripts/NAME[.lua] under the working dir; each GPUSH_PATH folder;
// the user's config dir gpush/scripts; the embedded library. The error
// lists every place it looked.
func ResolveScript(name string, o ResolveOptions) (*Script, error) {
	if name == "" {
		return nil, errors.New("resolve script: empty name")
	}
	wd := o.WorkDir
	if wd == "" {
		var err error
		if wd, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("resolve script %q: working dir: %w", name, err)
		}
	}
	var looked []string
	tryFile := func(p string) (*Script, error) {
		looked = append(looked, p)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return nil, nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read script %s: %w", p, err)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("script %s: %w", p, err)
		}
		return &Script{Name: filepath.Base(p), Path: abs, Source: src, Dir: filepath.Dir(abs)}, nil
	}
	// 1. A path that exists.
	direct := name
	if !filepath.IsAbs(direct) {
		direct = filepath.Join(wd, name)
	}
	if s, err := tryFile(direct); s != nil || err != nil {
		return s, err
	}
	// The other places take names, not paths out of their folder.
	clean := filepath.ToSlash(filepath.Clean(name))
	if filepath.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, fmt.Errorf("script %s not found (looked at %s)", name, strings.Join(looked, ", "))
	}
	candidates := []string{clean}
	if !strings.HasSuffix(clean, ".lua") {
		candidates = append(candidates, clean+".lua")
	}
	dirs := []string{filepath.Join(wd, "scripts")}
	search := o.SearchPath
	if search == nil {
		for _, d := range strings.Split(os.Getenv("GPUSH_PATH"), ":") {
			if d != "" {
				search = append(search, d)
			}
		}
	}
	dirs = append(dirs, search...)
	cfg := o.ConfigDir
	if cfg == "" {
		cfg, _ = os.UserConfigDir() // no config dir (no $HOME): skip it
	}
	if cfg != "" {
		dirs = append(dirs, filepath.Join(cfg, "gpush", "scripts"))
	}
	for _, d := range dirs {
		for _, c := range candidates {
			if s, err := tryFile(filepath.Join(d, filepath.FromSlash(c))); s != nil || err != nil {
				return s, err
			}
		}
	}
	if o.Embedded != nil {
		for _, c := range candidates {
			looked = append(looked, "embedded:"+c)
			if !fs.ValidPath(c) {
				continue
			}
			src, err := fs.ReadFile(o.Embedded, c)
			if err == nil {
				sub, err := fs.Sub(o.Embedded, path.Dir(c))
				if err != nil {
					return nil, fmt.Errorf("embedded script %s: %w", c, err)
				}
				return &Script{Name: path.Base(c), Path: "embedded:" + c, Source: src, FS: sub}, nil
			}
		}
	}
	return nil, fmt.Errorf("script %s not found; looked in: %s", name, strings.Join(looked, ", "))
}
