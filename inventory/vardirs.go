package inventory

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// varFileExts are the extensions Ansible's vars plugin tries, in its order
// (DataLoader.find_vars_files with YAML_FILENAME_EXTENSIONS): no extension
// first, so that a folder group_vars/NAME/ is found before NAME.yml.
var varFileExts = []string{"", ".yml", ".yaml", ".json"}

// loadVarDirs applies the group_vars/ and host_vars/ folders in dir, as
// Ansible's host_group_vars plugin does for one inventory source, as the
// next source layer: they rank above the vars written in inventory files
// (see effectiveVars), and a later source's files above an earlier one's.
func loadVarDirs(inv *Inventory, dir string) error {
	src := inv.sources
	inv.sources++
	for _, kind := range []string{"group_vars", "host_vars"} {
		base, err := filepath.EvalSymlinks(filepath.Join(dir, kind))
		if err != nil {
			continue // absent, or a broken symlink: Ansible's os.path.exists is false too
		}
		st, err := os.Stat(base)
		if err != nil {
			return fmt.Errorf("inventory vars: %w", err)
		}
		if !st.IsDir() {
			inv.warnf(Pos{File: filepath.Join(dir, kind)}, "found %s that is not a directory, skipping", kind)
			continue
		}
		names := inv.groupOrder
		if kind == "host_vars" {
			names = inv.hostOrder
		}
		for _, name := range names {
			files, err := varFiles(base, name)
			if err != nil {
				return err
			}
			vs := varSet{src: src, vars: map[string]any{}, pos: map[string]Pos{}}
			for _, f := range files {
				vars, pos, err := readVarFile(f, inv.maxInput, inv.warnf)
				if err != nil {
					return err
				}
				for k, v := range vars {
					vs.vars[k], vs.pos[k] = v, pos[k]
				}
			}
			if len(vs.vars) == 0 {
				continue
			}
			if kind == "group_vars" {
				g := inv.groups[name]
				g.plug = append(g.plug, vs)
			} else {
				h := inv.hosts[name]
				h.plug = append(h.plug, vs)
			}
		}
	}
	return nil
}

// varFiles lists the vars files for one group or host name, in the order
// they are applied: the first of NAME, NAME.yml, NAME.yaml, NAME.json that
// exists is used alone (Ansible stops there: with a/ and a.yml both
// present, only a/ is read; with a.yml and a.yaml, only a.yml); a folder is
// walked in sorted order, skipping hidden files, backups (~) and files
// whose extension is not one of them, and descending into subfolders that
// have no extension. Broken symlinks are skipped, as Ansible skips them.
func varFiles(base, name string) ([]string, error) {
	// Ansible also skips names that start with a path separator; names
	// with one inside would read outside the folder: refused the same way.
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return nil, nil
	}
	for _, ext := range varFileExts {
		p := filepath.Join(base, name+ext)
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("inventory vars: %w", err)
		}
		if !st.IsDir() {
			return []string{p}, nil
		}
		return dirVarFiles(p, 0)
	}
	return nil, nil
}

func dirVarFiles(dir string, depth int) ([]string, error) {
	if depth > 40 {
		return nil, fmt.Errorf("inventory vars: %s: folders nested too deep (a symlink loop?)", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("inventory vars: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, ".") || strings.HasSuffix(n, "~") {
			continue
		}
		full := filepath.Join(dir, n)
		st, err := os.Stat(full)
		if err != nil {
			continue // a broken symlink: neither a file nor a folder to Ansible
		}
		ext := filepath.Ext(n)
		switch {
		case st.IsDir() && ext == "":
			sub, err := dirVarFiles(full, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		case st.Mode().IsRegular() && contains(varFileExts, ext):
			out = append(out, full)
		}
	}
	return out, nil
}

// readVarFile reads one vars file as Ansible's loader does: JSON if it is
// JSON, else one YAML 1.1 document; an empty file gives nothing. warn gets
// duplicate keys.
func readVarFile(path string, max int64, warn func(Pos, string, ...any)) (map[string]any, map[string]Pos, error) {
	data, err := ReadInput(path, max)
	if err != nil {
		return nil, nil, fmt.Errorf("inventory vars: %w", err)
	}
	if isVaultFile(data) {
		return nil, nil, vaultFileError(path)
	}
	n, err := yamlRoot(path, data)
	if err != nil || n == nil || isNull(n) {
		return nil, nil, err
	}
	y := yamlLoader{file: path, d: newYAML11(path, json.Valid(data), warn)}
	if n.Kind != yaml.MappingNode {
		if n.Kind == yaml.ScalarNode && !isPlain(n) && n.Value == "" {
			return nil, nil, nil // "" is empty too, to Ansible
		}
		return nil, nil, y.errf(n, "a vars file must be a mapping of variables, got %s", kindName(n))
	}
	return y.d.mapping(n, 1)
}
