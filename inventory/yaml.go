package inventory

import (
	"bytes"
	"encoding/json"
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
	root, err := yamlRoot(file, data)
	if err != nil || root == nil {
		return err
	}
	y := yamlLoader{inv: inv, file: file, d: newYAML11(file, json.Valid(data), inv.warnf)}
	if isNull(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return y.errf(root, "the top level must be a mapping of group names, got %s", kindName(root))
	}
	top, err := y.pairs(root)
	if err != nil {
		return err
	}
	for _, p := range top {
		name, err := y.name(p.k, "group")
		if err != nil {
			return err
		}
		if err := y.group(name, "", p.v, p.k, 0); err != nil {
			return err
		}
	}
	return nil
}

// yamlRoot parses one YAML document and returns its top node (nil for an
// empty file).
func yamlRoot(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file is an empty inventory
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := checkYAMLExpansion(file, &doc); err != nil {
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: more than one YAML document", file, extra.Line)
	}
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = deref(root.Content[0])
	}
	return root, nil
}

type yamlLoader struct {
	inv  *Inventory
	file string
	d    *yaml11
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

// isNull is true for an empty node or a scalar YAML 1.1 reads as null.
func isNull(n *yaml.Node) bool {
	if n.Kind == 0 {
		return true
	}
	if n.Kind != yaml.ScalarNode {
		return false
	}
	if n.Style&yaml.TaggedStyle != 0 {
		return n.Tag == tagNull
	}
	return isPlain(n) && y11Null.MatchString(n.Value)
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

// pair is one entry of a mapping: the key node (for its line and value)
// and the value node.
type pair struct {
	key  string
	keyV any
	k, v *yaml.Node
}

// pairs lists a mapping's entries as PyYAML builds the dict: a repeated
// key keeps its first place and its last value, with Ansible's warning.
func (y yamlLoader) pairs(n *yaml.Node) ([]pair, error) {
	var out []pair
	index := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn := n.Content[i]
		if dk := deref(kn); dk.Kind != yaml.ScalarNode {
			return nil, y.errf(kn, "expected a name, got %s", kindName(dk))
		}
		kv, err := y.d.value(kn, 0)
		if err != nil {
			return nil, err
		}
		name, id, err := y.d.keyString(kv, kn)
		if err != nil {
			return nil, err
		}
		if j, ok := index[id]; ok {
			y.inv.warnf(y.pos(kn), "found a duplicate mapping key (%s); using the last value only", name)
			out[j].v = deref(n.Content[i+1])
			continue
		}
		index[id] = len(out)
		out = append(out, pair{name, kv, deref(kn), deref(n.Content[i+1])})
	}
	return out, nil
}

// name is a group or host name key: Ansible wants a string, and says so
// for a key YAML 1.1 reads as a number, a boolean or null.
func (y yamlLoader) name(kn *yaml.Node, what string) (string, error) {
	v, err := y.d.value(kn, 0)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", y.errf(kn, "%s name %s must be a string (YAML 1.1 reads it as %s): quote it", what, kn.Value, yamlTypeName(v))
	}
	if s == "" {
		return "", y.errf(kn, "empty %s name", what)
	}
	return s, nil
}

func yamlTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case int, float64:
		return "a number"
	case VaultValue:
		return "a vault value"
	default:
		return fmt.Sprintf("%T", v)
	}
}

const maxYAMLDepth = 200

// section reads a group's hosts, vars or children entry as Ansible does: a
// single string s means {s: null}; anything but a mapping or null is an
// error. The returned node is nil for null.
func (y yamlLoader) section(group, key string, n *yaml.Node) ([]pair, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind == yaml.ScalarNode {
		v, err := y.d.value(n, 0)
		if err != nil {
			return nil, err
		}
		s, ok := v.(string)
		if !ok {
			return nil, y.errf(n, "group %s: %s must be a mapping, got %s", group, key, kindName(n))
		}
		return []pair{{key: s, keyV: s, k: n, v: &yaml.Node{}}}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, y.errf(n, "group %s: %s must be a mapping, got %s", group, key, kindName(n))
	}
	return y.pairs(n)
}

// group loads one group's mapping; parent is "" for top-level groups.
func (y yamlLoader) group(name, parent string, n, keyNode *yaml.Node, depth int) error {
	if depth > maxYAMLDepth {
		return y.errf(keyNode, "group %s: children nested deeper than %d levels", name, maxYAMLDepth)
	}
	at := y.pos(keyNode)
	n = deref(n)
	if !isNull(n) && n.Kind != yaml.MappingNode {
		if parent != "" {
			// Ansible then fails adding an unknown child: the file is refused.
			return y.errf(keyNode, "group %s: not a valid group definition (want a mapping with hosts, vars and children, got %s), so it cannot be a child of %s", name, kindName(n), parent)
		}
		// Ansible skips it with a warning, and then does not know the group.
		y.inv.warnf(at, "skipping group %s: expected a mapping with hosts, vars and children, got %s", name, kindName(n))
		return nil
	}
	y.inv.group(name, at)
	if parent != "" {
		if name == parent {
			return fmt.Errorf("%s: child group cycle: %s -> %s", at, parent, name)
		}
		y.inv.addChild(parent, name, at)
	}
	if isNull(n) {
		return nil
	}
	entries, err := y.pairs(n)
	if err != nil {
		return err
	}
	sections := map[string][]pair{}
	for _, e := range entries {
		switch e.key {
		case "hosts", "vars", "children":
			if sections[e.key], err = y.section(name, e.key, e.v); err != nil {
				return err
			}
		}
	}
	for _, e := range entries {
		switch e.key {
		case "hosts":
			if err := y.hosts(name, sections[e.key]); err != nil {
				return err
			}
		case "vars":
			for _, v := range sections[e.key] {
				val, err := y.d.value(v.v, 1)
				if err != nil {
					return err
				}
				if err := y.inv.setGroupVarChecked(name, v.key, val, y.pos(v.k)); err != nil {
					return err
				}
			}
		case "children":
			for _, c := range sections[e.key] {
				child, err := y.name(c.k, "group")
				if err != nil {
					return err
				}
				if err := y.group(child, name, c.v, c.k, depth+1); err != nil {
					return err
				}
			}
		default:
			// Ansible skips unknown keys with a warning; so do we (an empty
			// one too, which Ansible skips silently: a typo'd hostz: must
			// not drop hosts unsaid).
			y.inv.warnf(y.pos(e.k), "group %s: skipping unexpected key %q (only hosts, vars and children are valid)", name, e.key)
		}
	}
	return nil
}

func (y yamlLoader) hosts(groupName string, entries []pair) error {
	for _, e := range entries {
		pat, err := y.name(e.k, "host")
		if err != nil {
			return err
		}
		at := y.pos(e.k)
		names, port, err := parseHostPattern(pat, false)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		vars, varAt, err := y.vars(e.v, "host "+pat)
		if err != nil {
			return err
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

// vars builds a mapping of variables, with each one's line.
func (y yamlLoader) vars(n *yaml.Node, what string) (map[string]any, map[string]Pos, error) {
	if isNull(n) {
		return map[string]any{}, map[string]Pos{}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, nil, y.errf(n, "%s: expected a mapping of variables, got %s", what, kindName(n))
	}
	return y.d.mapping(n, 1)
}
