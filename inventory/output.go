package inventory

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// List renders hosts like `ansible-inventory --list`: every group with its
// direct hosts (the selected ones) and all its child groups, and each host's
// effective vars under _meta.hostvars. nil hosts means every host. The
// JSON has no trailing newline. It is a superset of Ansible's: each host's
// effective connection (ConnectionOf) is under _meta.gpush.connections.
// Non-finite floats are written Infinity, -Infinity and NaN, as Python's
// json module (so ansible-inventory) writes them. For every host, as in
// Ansible, a group with neither hosts nor children has no entry of its own
// but is still named among its parent's children (ungrouped in all's,
// always). For some hosts (a --limit, which ansible-inventory 2.14 does not
// have), only the groups that hold one of them are shown.
func (inv *Inventory) List(hosts []Host) ([]byte, error) {
	if hosts == nil {
		hosts = inv.Hosts()
	}
	nf, err := newNonFinite()
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", inv.Source, err)
	}
	selected := map[string]bool{}
	hostvars := map[string]any{}
	conns := map[string]Connection{}
	for _, h := range hosts {
		selected[h.Name] = true
		vars := h.Vars
		if vars == nil {
			vars = map[string]any{}
		}
		hostvars[h.Name] = nf.replace(vars)
		conns[h.Name] = inv.ConnectionOf(h)
	}
	var keep map[string]bool // nil: every group
	if len(selected) < len(inv.hostOrder) {
		keep = inv.groupsWith(selected)
	}
	out := map[string]any{"_meta": map[string]any{"hostvars": hostvars, "gpush": map[string]any{"connections": conns}}}
	for _, name := range inv.groupOrder {
		if keep != nil && !keep[name] {
			continue
		}
		g := inv.groups[name]
		entry := map[string]any{}
		var members, children []string
		for _, c := range g.children {
			if keep == nil || keep[c] {
				children = append(children, c)
			}
		}
		if name != "all" {
			for _, h := range g.hosts {
				if selected[h] {
					members = append(members, h)
				}
			}
		}
		if len(children) > 0 {
			entry["children"] = children
		}
		if len(members) > 0 {
			entry["hosts"] = members
		}
		if len(entry) > 0 || name == "all" {
			out[name] = entry
		}
	}
	data, err := json.MarshalIndent(out, "", "    ")
	if err != nil {
		return nil, fmt.Errorf("inventory %s: rendering the host list: %w", inv.Source, err)
	}
	return nf.pythonFloats(data), nil
}

// groupsWith returns the groups holding one of the selected hosts, directly
// or through a child, all always included.
func (inv *Inventory) groupsWith(selected map[string]bool) map[string]bool {
	keep := map[string]bool{"all": true}
	var up func(name string)
	up = func(name string) {
		if keep[name] && name != "all" {
			return
		}
		keep[name] = true
		for _, p := range inv.groups[name].parents {
			up(p)
		}
	}
	for name, h := range inv.hosts {
		if !selected[name] {
			continue
		}
		for _, g := range h.groups {
			up(g)
		}
	}
	return keep
}

// Graph writes the whole inventory as a tree like `ansible-inventory --graph`.
func (inv *Inventory) Graph(w io.Writer) error {
	return inv.graph(w, nil)
}

// GraphHosts writes the tree restricted to the given hosts and the groups
// that hold them.
func (inv *Inventory) GraphHosts(w io.Writer, hosts []Host) error {
	selected := map[string]bool{}
	for _, h := range hosts {
		selected[h.Name] = true
	}
	return inv.graph(w, selected)
}

func (inv *Inventory) graph(w io.Writer, selected map[string]bool) error {
	var keep map[string]bool
	if selected != nil {
		keep = inv.groupsWith(selected)
	}
	bw := bufio.NewWriter(w)
	line := func(depth int, s string) {
		if depth > 0 {
			bw.WriteString(strings.Repeat("  |", depth) + "--")
		}
		bw.WriteString(s)
		bw.WriteByte('\n')
	}
	var walk func(name string, depth int)
	walk = func(name string, depth int) {
		g := inv.groups[name]
		line(depth, "@"+name+":")
		children := append([]string(nil), g.children...)
		sort.Slice(children, func(i, j int) bool { return naturalLess(children[i], children[j]) })
		for _, c := range children {
			if keep == nil || keep[c] {
				walk(c, depth+1)
			}
		}
		if name == "all" {
			return // all's hosts are shown under their groups and ungrouped
		}
		// Natural order (w5 before w10) where Ansible sorts plainly.
		hosts := append([]string(nil), g.hosts...)
		sort.Slice(hosts, func(i, j int) bool { return naturalLess(hosts[i], hosts[j]) })
		for _, h := range hosts {
			if selected == nil || selected[h] {
				line(depth+1, h)
			}
		}
	}
	walk("all", 0)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("inventory %s: writing the graph: %w", inv.Source, err)
	}
	return nil
}
