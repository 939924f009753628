package inventory

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/BurntSushi/toml"
)

// parseTOMLInto reads a TOML inventory as Ansible's toml inventory plugin
// does (ansible/plugins/inventory/toml.py, ansible-core 2.14): each
// top-level table is a group with optional vars (a table), children (a
// list of group names) and hosts (a table of host patterns, each a table
// of host vars). A top-level key that is not a table is skipped with a
// warning; an empty file, or one with a plugin key, is refused.
func parseTOMLInto(inv *Inventory, file string, data []byte) error {
	var doc map[string]any
	md, err := toml.Decode(string(data), &doc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s:%d: TOML: %s", file, pe.Position.Line, pe.Message)
		}
		return fmt.Errorf("%s: TOML: %w", file, err)
	}
	if len(doc) == 0 {
		return fmt.Errorf("%s: an empty TOML inventory (Ansible refuses it too)", file)
	}
	if _, ok := doc["plugin"]; ok {
		return fmt.Errorf("%s: a plugin configuration, not a TOML inventory (gpush runs no inventory plugins)", file)
	}
	t := tomlLoader{inv: inv, at: Pos{File: file}, keys: md.Keys()}
	for _, name := range t.order(nil, doc) {
		if err := t.group(name, doc[name]); err != nil {
			return err
		}
	}
	return nil
}

type tomlLoader struct {
	inv  *Inventory
	at   Pos
	keys []toml.Key // every key in the order the file gives them
}

// order is the keys of table m (at path) in the order they appear in the
// file: Ansible walks the decoded dicts, which keep that order.
func (t tomlLoader) order(path []string, m map[string]any) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range t.keys {
		// A table defined only through its subtables ([a.b] with no [a])
		// is first seen in a longer key.
		if len(k) <= len(path) {
			continue
		}
		match := true
		for i := range path {
			if k[i] != path[i] {
				match = false
				break
			}
		}
		if name := k[len(path)]; match && !seen[name] {
			if _, ok := m[name]; ok {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}

func (t tomlLoader) group(name string, v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		t.inv.warnf(t.at, "skipping %s: not a valid group definition (want a table, got %s)", name, tomlKind(v))
		return nil
	}
	t.inv.group(name, t.at)
	for _, key := range t.order([]string{name}, m) {
		data := m[key]
		switch key {
		case "vars":
			vars, ok := data.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: group %s: vars must be a table, got %s", t.at, name, tomlKind(data))
			}
			for _, k := range t.order([]string{name, "vars"}, vars) {
				if err := t.inv.setGroupVarChecked(name, k, tomlValue(vars[k]), t.at); err != nil {
					return err
				}
			}
		case "children":
			list, ok := data.([]any)
			if !ok {
				return fmt.Errorf("%s: group %s: children must be a list of group names, got %s", t.at, name, tomlKind(data))
			}
			for _, c := range list {
				child, ok := c.(string)
				if !ok {
					return fmt.Errorf("%s: group %s: a child group name must be a string, got %s", t.at, name, tomlKind(c))
				}
				if child == name {
					return fmt.Errorf("%s: child group cycle: %s -> %s", t.at, name, child)
				}
				t.inv.group(child, t.at)
				t.inv.addChild(name, child, t.at)
			}
		case "hosts":
			hosts, ok := data.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: group %s: hosts must be a table, got %s", t.at, name, tomlKind(data))
			}
			for _, pat := range t.order([]string{name, "hosts"}, hosts) {
				if err := t.hosts(name, pat, hosts[pat]); err != nil {
					return err
				}
			}
		default:
			t.inv.warnf(t.at, "group %s: skipping unexpected key %q (only hosts, vars and children are valid)", name, key)
		}
	}
	return nil
}

func (t tomlLoader) hosts(group, pat string, v any) error {
	names, port, err := parseHostPattern(pat, false)
	if err != nil {
		return fmt.Errorf("%s: %w", t.at, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: host %s: its vars must be a table, got %s", t.at, pat, tomlKind(v))
	}
	vars := map[string]any{}
	for k, x := range m {
		vars[k] = tomlValue(x)
	}
	if port != "" {
		vars["ansible_port"] = parseINIValue(port)
	}
	for _, n := range names {
		if err := t.inv.addHost(group, n, vars, t.at, nil); err != nil {
			return err
		}
	}
	return nil
}

// tomlValue is a decoded TOML value as the rest of the package holds
// values: int for integers that fit, []any and map[string]any for arrays
// and tables, and a date or time as the text Python's str gives it.
func tomlValue(v any) any {
	switch x := v.(type) {
	case int64:
		if x >= math.MinInt && x <= math.MaxInt {
			return int(x)
		}
		return x
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tomlValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tomlValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = tomlValue(e)
		}
		return out
	case time.Time:
		// As Python's isoformat writes it (what ansible-inventory prints).
		layout := "2006-01-02T15:04:05"
		if x.Nanosecond() != 0 {
			layout += ".000000"
		}
		// The decoder marks TOML's local kinds by these zone names.
		switch x.Location().String() {
		case "date-local":
			return x.Format("2006-01-02")
		case "time-local":
			return x.Format(layout[len("2006-01-02T"):])
		case "datetime-local":
			return x.Format(layout)
		}
		return x.Format(layout + "-07:00")
	}
	return v
}

func tomlKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
