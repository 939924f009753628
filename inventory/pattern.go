package inventory

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// subscriptRE is Ansible's group subscript: group[0], group[-1], group[1:3], group[2:].
var subscriptRE = regexp.MustCompile(`^(.+)\[(-?[0-9]*)(?::(-?[0-9]*))?\]$`)

// Select returns the hosts a --limit pattern selects, in inventory order.
// It speaks Ansible's pattern language (group, host, globs gpu0*, ~regex,
// a:b union, a:!b exclusion, a:&b intersection, commas as separators too,
// all or *, group[0] / group[1:3] subscripts) plus ClusterShell node sets
// (gpu[01-08], gpu[01-03,07]) and Ansible ranges (gpu[01:08]). A name that
// is neither a group nor a host, or a glob that matches nothing, is an
// error naming it: a typo must not silently select nothing (or everything
// but one host). "localhost" not in the inventory is the local machine.
func (inv *Inventory) Select(pattern string) ([]Host, error) {
	names, err := inv.SelectNames(pattern)
	if err != nil {
		return nil, err
	}
	out := make([]Host, 0, len(names))
	for _, n := range names {
		if h, ok := inv.resolved[n]; ok {
			out = append(out, cloneHost(h))
			continue
		}
		h, err := inv.implicitLocalhost()
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// SelectNames is Select returning host names.
func (inv *Inventory) SelectNames(pattern string) ([]string, error) {
	terms := splitPattern(pattern)
	if len(terms) == 0 {
		return nil, fmt.Errorf("host pattern %q is empty", pattern)
	}
	var regular, intersect, exclude []string
	for _, t := range terms {
		switch t[0] {
		case '&':
			intersect = append(intersect, t[1:])
		case '!':
			exclude = append(exclude, t[1:])
		default:
			regular = append(regular, t)
		}
	}
	if len(regular) == 0 {
		regular = []string{"all"}
	}
	selected := map[string]bool{}
	for _, t := range regular {
		m, err := inv.matchTerm(t)
		if err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", pattern, err)
		}
		for n := range m {
			selected[n] = true
		}
	}
	for _, t := range intersect {
		m, err := inv.matchTerm(t)
		if err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", pattern, err)
		}
		for n := range selected {
			if !m[n] {
				delete(selected, n)
			}
		}
	}
	for _, t := range exclude {
		m, err := inv.matchTerm(t)
		if err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", pattern, err)
		}
		for n := range m {
			delete(selected, n)
		}
	}
	var out []string
	for _, n := range inv.hostOrder {
		if selected[n] {
			out = append(out, n)
		}
	}
	if selected["localhost"] && inv.resolved["localhost"].Name == "" {
		out = append(out, "localhost")
	}
	return out, nil
}

// splitPattern splits on ',' and ':' outside brackets; an IPv6 address
// (two or more colons, hex digits only) stays whole.
func splitPattern(pattern string) []string {
	var terms []string
	for _, part := range splitOutsideBrackets(pattern, ',') {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		body := strings.TrimLeft(part, "!&")
		if strings.Count(body, ":") >= 2 && bareIPv6RE.MatchString(body) {
			terms = append(terms, part)
			continue
		}
		for _, t := range splitOutsideBrackets(part, ':') {
			if t = strings.TrimSpace(t); t != "" && t != "!" && t != "&" {
				terms = append(terms, t)
			}
		}
	}
	return terms
}

// matchTerm returns the host names one term (without its &/! prefix) selects.
func (inv *Inventory) matchTerm(t string) (map[string]bool, error) {
	out := map[string]bool{}
	addGroup := func(g string) {
		names, _ := inv.GroupHosts(g)
		for _, n := range names {
			out[n] = true
		}
	}
	switch {
	case t == "all" || t == "*":
		addGroup("all")
		return out, nil
	case strings.HasPrefix(t, "~"):
		re, err := regexp.Compile(`^(?:` + t[1:] + `)`)
		if err != nil {
			return nil, fmt.Errorf("regex %q: %w", t[1:], err)
		}
		for _, g := range inv.groupOrder {
			if re.MatchString(g) {
				addGroup(g)
			}
		}
		for _, h := range inv.hostOrder {
			if re.MatchString(h) {
				out[h] = true
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("regex %q matches no host or group", t)
		}
		return out, nil
	}
	if m := subscriptRE.FindStringSubmatch(t); m != nil && inv.groups[m[1]] != nil {
		isRange := strings.Contains(t[len(m[1]):], ":")
		if m[2] != "" || isRange {
			return inv.subscript(m[1], m[2], m[3], isRange)
		}
	}
	if strings.ContainsAny(t, "[]") {
		var names []string
		var err error
		if isNodeSet(t) {
			names, err = ExpandNodeSet(t)
		} else {
			names, err = ExpandHostRange(t)
		}
		if err != nil {
			return nil, err
		}
		var unknown []string
		for _, n := range names {
			switch {
			case inv.groups[n] != nil:
				addGroup(n)
			case inv.hosts[n] != nil:
				out[n] = true
			default:
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 {
			return nil, fmt.Errorf("%s: no such host or group: %s", t, FoldNodeSet(unknown))
		}
		return out, nil
	}
	if strings.ContainsAny(t, "*?") {
		for _, g := range inv.groupOrder {
			if ok, _ := path.Match(t, g); ok {
				addGroup(g)
			}
		}
		for _, h := range inv.hostOrder {
			if ok, _ := path.Match(t, h); ok {
				out[h] = true
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%q matches no host or group", t)
		}
		return out, nil
	}
	switch {
	case inv.groups[t] != nil:
		addGroup(t)
	case inv.hosts[t] != nil:
		out[t] = true
	case t == "localhost":
		out[t] = true
	default:
		return nil, fmt.Errorf("no such host or group: %s", t)
	}
	return out, nil
}

// subscript applies group[i] or group[i:j] (inclusive, as Ansible's code
// does; negative indices count from the end) to a group's hosts.
func (inv *Inventory) subscript(groupName, from, to string, isRange bool) (map[string]bool, error) {
	hosts, _ := inv.GroupHosts(groupName)
	n := len(hosts)
	index := func(s string, def int) (int, error) {
		if s == "" {
			return def, nil
		}
		i, err := strconv.Atoi(s)
		if err != nil {
			return 0, err
		}
		if i < 0 {
			i += n
		}
		return i, nil
	}
	start, err := index(from, 0)
	if err != nil {
		return nil, fmt.Errorf("%s[%s]: %w", groupName, from, err)
	}
	end := start
	if isRange {
		if end, err = index(to, n-1); err != nil {
			return nil, fmt.Errorf("%s[%s:%s]: %w", groupName, from, to, err)
		}
	}
	if start < 0 || start >= n || end < start {
		return nil, fmt.Errorf("%s: subscript out of range (the group has %d hosts)", groupName, n)
	}
	if end >= n {
		end = n - 1
	}
	out := map[string]bool{}
	for _, h := range hosts[start : end+1] {
		out[h] = true
	}
	return out, nil
}

// implicitLocalhost is Ansible's implicit localhost: the local machine with
// the all group's vars.
func (inv *Inventory) implicitLocalhost() (Host, error) {
	h, err := inv.buildHost(&hostDef{
		name:   "localhost",
		vars:   map[string]any{"ansible_connection": "local"},
		varPos: map[string]Pos{},
	})
	if err != nil {
		return Host{}, fmt.Errorf("implicit localhost: %w", err)
	}
	h.Address = "localhost"
	return h, nil
}
