package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
)

// ParseYAML reads an Ansible YAML inventory: top-level keys are groups
// (usually just all), each with optional hosts, vars and children.
func ParseYAML(file string, data []byte) (*Inventory, error) {
	inv := newInventory(file, KindFile)
	if err := parseYAMLInto(inv, file, data); err != nil {
		return nil, err
	}
	if err := inv.finalize(); err != nil {
		return nil, err
	}
	return inv, nil
}

func parseYAMLInto(inv *Inventory, file string, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file is an empty inventory
		}
		return fmt.Errorf("%s: %w", file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s:%d: more than one YAML document", file, extra.Line)
	}
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = deref(root.Content[0])
	}
	y := yamlLoader{inv: inv, file: file}
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return y.errf(root, "the top level must be a mapping of group names, got %s", kindName(root))
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		name, err := y.key(root.Content[i])
		if err != nil {
			return err
		}
		if err := y.group(name, "", root.Content[i+1], root.Content[i], 0); err != nil {
			return err
		}
	}
	return nil
}

type yamlLoader struct {
	inv  *Inventory
	file string
}

func (y yamlLoader) pos(n *yaml.Node) Pos { return Pos{y.file, n.Line} }

func (y yamlLoader) errf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s: %s", y.pos(n), fmt.Sprintf(format, args...))
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	default:
		return "something else"
	}
}

// key returns a mapping key as a string; group and host names must be scalars.
func (y yamlLoader) key(n *yaml.Node) (string, error) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode || n.Value == "" {
		return "", y.errf(n, "expected a name, got %s", kindName(n))
	}
	return n.Value, nil
}

const maxYAMLDepth = 200

// group loads one group's mapping; parent is "" for top-level groups.
func (y yamlLoader) group(name, parent string, n, keyNode *yaml.Node, depth int) error {
	if depth > maxYAMLDepth {
		return y.errf(keyNode, "group %s: children nested deeper than %d levels", name, maxYAMLDepth)
	}
	at := y.pos(keyNode)
	y.inv.group(name, at)
	if parent != "" {
		if name == parent {
			return fmt.Errorf("%s: child group cycle: %s -> %s", at, parent, name)
		}
		y.inv.addChild(parent, name, at)
	}
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return y.errf(n, "group %s: expected a mapping with hosts, vars and children, got %s", name, kindName(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := y.key(n.Content[i])
		if err != nil {
			return err
		}
		v := deref(n.Content[i+1])
		switch k {
		case "hosts":
			if err := y.hosts(name, v); err != nil {
				return err
			}
		case "vars":
			vars, err := y.vars(v, "group "+name+" vars")
			if err != nil {
				return err
			}
			for _, vk := range sortedKeys(vars) {
				y.inv.setGroupVar(name, vk, vars[vk], y.pos(varLine(v, vk)))
			}
		case "children":
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.MappingNode {
				return y.errf(v, "group %s: children must be a mapping of group names, got %s", name, kindName(v))
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				child, err := y.key(v.Content[j])
				if err != nil {
					return err
				}
				if err := y.group(child, name, v.Content[j+1], v.Content[j], depth+1); err != nil {
					return err
				}
			}
		default:
			// Ansible skips unknown keys with a warning; so do we.
			y.inv.warnf(y.pos(n.Content[i]), "group %s: skipping unexpected key %q (only hosts, vars and children are valid)", name, k)
		}
	}
	return nil
}

func (y yamlLoader) hosts(groupName string, n *yaml.Node) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return y.errf(n, "group %s: hosts must be a mapping of host names, got %s", groupName, kindName(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		pat, err := y.key(n.Content[i])
		if err != nil {
			return err
		}
		at := y.pos(n.Content[i])
		names, port, err := parseHostPattern(pat, false)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		vn := deref(n.Content[i+1])
		vars, err := y.vars(vn, "host "+pat)
		if err != nil {
			return err
		}
		varAt := map[string]Pos{}
		for k := range vars {
			varAt[k] = y.pos(varLine(vn, k))
		}
		if port != "" {
			vars["ansible_port"] = parseINIValue(port)
		}
		for _, name := range names {
			if err := y.inv.addHost(groupName, name, vars, at, varAt); err != nil {
				return err
			}
		}
	}
	return nil
}

// vars decodes a mapping of variables into plain Go values.
func (y yamlLoader) vars(n *yaml.Node, what string) (map[string]any, error) {
	if isNull(n) {
		return map[string]any{}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, y.errf(n, "%s: expected a mapping of variables, got %s", what, kindName(n))
	}
	var raw any
	if err := n.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", y.pos(n), what, err)
	}
	m, ok := normalizeYAML(raw).(map[string]any)
	if !ok {
		return nil, y.errf(n, "%s: expected a mapping of variables", what)
	}
	return m, nil
}

// varLine finds the key node of a variable, for its line number.
func varLine(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if deref(m.Content[i]).Value == key {
			return m.Content[i]
		}
	}
	return m
}

// normalizeYAML turns map[any]any (non-string keys) into map[string]any so
// that every value can be rendered as JSON and handed to Lua.
func normalizeYAML(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = normalizeYAML(x)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[pyStrYAML(k)] = normalizeYAML(x)
		}
		return m
	case []any:
		for i, x := range t {
			t[i] = normalizeYAML(x)
		}
		return t
	default:
		return v
	}
}

func pyStrYAML(k any) string {
	if k == nil {
		return "null"
	}
	return fmt.Sprint(k)
}
