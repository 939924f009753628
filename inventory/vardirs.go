package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// varFileExts are the extensions Ansible's vars plugin reads in group_vars/
// and host_vars/ (a file with no extension too).
var varFileExts = []string{"", ".yml", ".yaml", ".json"}

// loadVarDirs reads group_vars/ and host_vars/ beside an inventory file, as
// Ansible does: group_vars/NAME(.yml|.yaml|.json) or a folder group_vars/NAME/
// of such files (read in sorted order). They override the vars written in
// the inventory file for the same group or host.
func loadVarDirs(inv *Inventory, dir string) error {
	for _, kind := range []string{"group_vars", "host_vars"} {
		base := filepath.Join(dir, kind)
		if st, err := os.Stat(base); err != nil || !st.IsDir() {
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
			for _, f := range files {
				vars, pos, err := readVarFile(f)
				if err != nil {
					return err
				}
				for _, k := range sortedKeys(vars) {
					if kind == "group_vars" {
						inv.setGroupVar(name, k, vars[k], pos[k])
						continue
					}
					h := inv.hosts[name]
					h.vars[k], h.varPos[k] = vars[k], pos[k]
				}
			}
		}
	}
	return nil
}

// varFiles lists the vars files for one group or host name.
func varFiles(base, name string) ([]string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return nil, nil
	}
	var out []string
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
			out = append(out, p)
			continue
		}
		if ext != "" {
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && !strings.HasPrefix(d.Name(), ".") && contains(varFileExts[1:], strings.ToLower(filepath.Ext(path))) {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("inventory vars: %w", err)
		}
	}
	sort.Strings(out)
	return out, nil
}

// readVarFile reads one YAML (or JSON) mapping of variables.
func readVarFile(path string) (map[string]any, map[string]Pos, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("inventory vars: %w", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	n := deref(&doc)
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, nil, nil
		}
		n = deref(n.Content[0])
	}
	y := yamlLoader{file: path}
	vars, err := y.vars(n, "vars file")
	if err != nil {
		return nil, nil, err
	}
	pos := map[string]Pos{}
	for k := range vars {
		pos[k] = y.pos(varLine(n, k))
	}
	return vars, pos, nil
}
