package inventory

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// subscriptRE is Ansible's subscript (PATTERN_WITH_SUBSCRIPT, 2.14):
// gpus[0], gpus[-1], gpus[1:3], gpus[2:]. [:2] and [-1:] are not
// subscripts there, and [1-3] (removed from Ansible, a warning) is a node
// set here.
var subscriptRE = regexp.MustCompile(`^(.+)\[(?:(-?[0-9]+)|([0-9]+):([0-9]*))\]$`)

// Select returns the hosts a --limit pattern selects, in inventory order.
// It speaks Ansible's pattern language (group, host, globs gpu0*, ~regex,
// a:b union, a:!b exclusion, a:&b intersection, commas as separators too,
// all or *, group[0] / group[1:3] subscripts) plus ClusterShell node sets
// (gpu[01-08], gpu[01-03,07]) with their operators (node[1-9]!node6, &, ^;
// see parsePattern) and Ansible ranges (gpu[01:08]). A name that
// is neither a group nor a host, or a glob that matches nothing, is an
// error naming it: a typo must not silently select nothing (or everything
// but one host). "localhost" not in the inventory is the local machine.
// A selected host with a HostErr fails the whole selection, naming each.
func (inv *Inventory) Select(pattern string) ([]Host, error) {
	names, err := inv.SelectNames(pattern)
	if err != nil {
		return nil, err
	}
	if err := inv.selectedErr(pattern, names); err != nil {
		return nil, fmt.Errorf("host pattern %q: %w", pattern, err)
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
	terms, err := parsePattern(pattern)
	if err != nil {
		return nil, fmt.Errorf("host pattern %q: %w", pattern, err)
	}
	if len(terms) == 0 {
		return nil, fmt.Errorf("host pattern %q is empty", pattern)
	}
	hostFirst := false
	match := func(st setStep) ([]string, error) {
		m, err := inv.matchTerm(st.operand, hostFirst)
		if err != nil {
			return nil, err
		}
		return m.list, nil
	}
	// Ansible's order: the union of the plain terms (all when there is
	// none), then each &term, then each !term.
	var regular, intersect, exclude [][]string
	for _, t := range terms {
		// As in Ansible, a plain term that is a host's name is that host,
		// even where a group has the same name; &web and !web mean the group.
		hostFirst = t.prefix == 0
		// Every name a term selects is one of the inventory's hosts, so
		// the inventory's size bounds it, not the bound on text expansion.
		names, err := evalSetSteps(t.steps, max(maxExpand, len(inv.hostOrder)), match)
		if err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", pattern, err)
		}
		switch t.prefix {
		case '&':
			intersect = append(intersect, names)
		case '!':
			exclude = append(exclude, names)
		default:
			regular = append(regular, names)
		}
	}
	if len(regular) == 0 {
		names, err := match(setStep{op: ',', operand: "all"})
		if err != nil {
			return nil, err
		}
		regular = [][]string{names}
	}
	selected := map[string]bool{}
	for _, names := range regular {
		for _, n := range names {
			selected[n] = true
		}
	}
	for _, names := range intersect {
		in := map[string]bool{}
		for _, n := range names {
			in[n] = true
		}
		for n := range selected {
			if !in[n] {
				delete(selected, n)
			}
		}
	}
	for _, names := range exclude {
		for _, n := range names {
			delete(selected, n)
		}
	}
	// Ansible's order (order: inventory, the default): the plain terms'
	// hosts as each term gives them (a group's own hosts before its
	// children's), then filtered by the & and ! terms.
	var out []string
	for _, names := range regular {
		for _, n := range names {
			// The implicit localhost (not in the inventory) comes last.
			if selected[n] && (n != "localhost" || inv.resolved[n].Name != "") {
				out = append(out, n)
				delete(selected, n)
			}
		}
	}
	if selected["localhost"] && inv.resolved["localhost"].Name == "" {
		out = append(out, "localhost")
	}
	return out, nil
}

// patternTerm is one Ansible term of a pattern: its '&' or '!' prefix (0
// for none) and the ClusterShell expression it stands for.
type patternTerm struct {
	prefix byte
	steps  []setStep
}

// parsePattern cuts a pattern into Ansible terms on ',' and ':' outside
// brackets (an IPv6 address, two or more colons and hex digits only, stays
// whole). Inside a term ClusterShell's '!', '&' and '^' apply left to right,
// and a plain term written after a ',' continues the plain term before it,
// so "node[1-3],node[2-5]!node2" is the set nodeset gives. A term that
// begins with '!' or '&' is Ansible's and stands alone: "gpus,!h100" and
// "gpus:&serving" keep their meaning. ':' is never a ClusterShell operator,
// so it always begins a new term. A ~regex is one operand, whatever
// characters it holds.
func parsePattern(pattern string) ([]patternTerm, error) {
	var terms []patternTerm
	for _, part := range splitOutsideBrackets(pattern, ',') {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		toks := []string{part}
		body := strings.TrimLeft(part, "!&")
		if strings.Count(body, ":") < 2 || !bareIPv6RE.MatchString(body) && !isZonedIPv6(body) {
			toks = splitOutsideBrackets(part, ':')
		}
		for i, tok := range toks {
			if tok = strings.TrimSpace(tok); tok == "" || tok == "!" || tok == "&" {
				continue
			}
			prefix := byte(0)
			if tok[0] == '!' || tok[0] == '&' {
				prefix, tok = tok[0], tok[1:]
			}
			var steps []setStep
			if strings.HasPrefix(tok, "~") {
				steps = []setStep{{op: ',', operand: tok}}
			} else {
				var err error
				if steps, err = splitSetOps(tok); err != nil {
					return nil, err
				}
			}
			if last := len(terms) - 1; prefix == 0 && i == 0 && last >= 0 && terms[last].prefix == 0 {
				terms[last].steps = append(terms[last].steps, steps...)
				continue
			}
			terms = append(terms, patternTerm{prefix: prefix, steps: steps})
		}
	}
	return terms, nil
}

// matchTerm returns the host names one term (without its &/! prefix)
// selects. hostFirst: a host of that exact name wins over everything else.
func (inv *Inventory) matchTerm(t string, hostFirst bool) (*nameSet, error) {
	out := &nameSet{in: map[string]bool{}}
	if hostFirst && inv.hosts[t] != nil {
		out.add(t)
		return out, nil
	}
	addGroup := func(g string) {
		for _, n := range inv.ansibleGroupHosts(g) {
			out.add(n)
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
				out.add(h)
			}
		}
		if len(out.list) == 0 {
			return nil, fmt.Errorf("regex %q matches no host or group", t)
		}
		return out, nil
	}
	if m := subscriptRE.FindStringSubmatch(t); m != nil {
		if hosts := inv.ansibleMatches(m[1]); len(hosts) > 0 {
			in, err := subscript(t, hosts, m[2], m[3], m[4])
			if err != nil {
				return nil, err
			}
			for _, h := range hosts {
				if in[h] {
					out.add(h)
				}
			}
			return out, nil
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
				out.add(n)
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
				out.add(h)
			}
		}
		if len(out.list) == 0 {
			return nil, fmt.Errorf("%q matches no host or group", t)
		}
		return out, nil
	}
	switch {
	case inv.groups[t] != nil:
		addGroup(t)
	case inv.hosts[t] != nil:
		out.add(t)
	case t == "localhost":
		out.add(t)
	default:
		return nil, fmt.Errorf("no such host or group: %s", t)
	}
	return out, nil
}

// nameSet is host names in the order they were first added.
type nameSet struct {
	in   map[string]bool
	list []string
}

func (s *nameSet) add(n string) {
	if !s.in[n] {
		s.in[n] = true
		s.list = append(s.list, n)
	}
}

// ansibleMatches lists what Ansible's _enumerate_matches gives a pattern
// before its subscript is applied, duplicates and order included: the hosts
// of each group it matches (in inventory order of the groups, each group's
// hosts as Group.get_hosts orders them), then, if no group matched or the
// pattern has a glob or '.', the hosts it matches.
func (inv *Inventory) ansibleMatches(expr string) []string {
	var out []string
	matched := false
	for _, g := range inv.groupOrder {
		if ok, _ := path.Match(expr, g); ok {
			matched = true
			out = append(out, inv.ansibleGroupHosts(g)...)
		}
	}
	if !matched || strings.ContainsAny(expr, ".?*[") {
		for _, h := range inv.hostOrder {
			if ok, _ := path.Match(expr, h); ok {
				out = append(out, h)
			}
		}
	}
	return out
}

// ansibleGroupHosts is Ansible's Group.get_hosts order: the group's own
// hosts, then its children's, then theirs, breadth first, each host once.
// Ansible walks the levels below the children from a Python set, so there
// the order of sibling groups is not fixed; this takes them in the order
// they were found (parent by parent, children as written).
func (inv *Inventory) ansibleGroupHosts(name string) []string {
	g := inv.groups[name]
	order := []*group{g}
	seen := map[string]bool{name: true}
	for _, c := range g.children {
		if !seen[c] {
			seen[c] = true
			order = append(order, inv.groups[c])
		}
	}
	level := order[1:]
	for len(level) > 0 {
		var next []*group
		for _, p := range level {
			for _, c := range p.children {
				if !seen[c] {
					seen[c] = true
					next = append(next, inv.groups[c])
				}
			}
		}
		order = append(order, next...)
		level = next
	}
	var out []string
	in := map[string]bool{}
	for _, grp := range order {
		for _, h := range grp.hosts {
			if !in[h] {
				in[h] = true
				out = append(out, h)
			}
		}
	}
	return out
}

// subscript applies [idx] or [from:to] to hosts as Ansible's
// _apply_subscript does: Python indexing and slicing, to inclusive, an
// empty to meaning the last, and to of 0 meaning [from] alone. Where
// Ansible selects nothing (out of range, from after to) gpush fails
// instead, saying so: a typo must not silently select nothing.
func subscript(pattern string, hosts []string, idx, from, to string) (map[string]bool, error) {
	n := len(hosts)
	oob := func() error {
		return fmt.Errorf("%s: subscript out of range (the pattern matches %d hosts)", pattern, n)
	}
	atoi := func(s string) (int, error) {
		i, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("%s: subscript %q: %w", pattern, s, err)
		}
		return i, nil
	}
	var picked []string
	if to != "" && strings.Trim(to, "0") == "" {
		idx = from // Python's "if end:" is false for 0
	}
	if idx != "" {
		i, err := atoi(idx)
		if err != nil {
			return nil, err
		}
		if i < 0 {
			i += n
		}
		if i < 0 || i >= n {
			return nil, oob()
		}
		picked = hosts[i : i+1]
	} else {
		start, err := atoi(from)
		if err != nil {
			return nil, err
		}
		end := n - 1
		if to != "" {
			if end, err = atoi(to); err != nil {
				return nil, err
			}
		}
		end = min(end+1, n)
		if start >= end {
			return nil, oob()
		}
		picked = hosts[start:end]
	}
	out := map[string]bool{}
	for _, h := range picked {
		out[h] = true
	}
	return out, nil
}

// implicitLocalhost is Ansible's implicit localhost: the local machine with
// the all group's vars.
func (inv *Inventory) implicitLocalhost() (Host, error) {
	h, err := inv.buildHost(&hostDef{
		name: "localhost",
		vars: map[string]any{"ansible_connection": "local"},
	})
	if err != nil {
		return Host{}, fmt.Errorf("implicit localhost: %w", err)
	}
	h.Address = "localhost"
	return h, nil
}
