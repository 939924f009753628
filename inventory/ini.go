package inventory

import (
	"fmt"
	"regexp"
	"strings"
)

// sectionRE is Ansible's INI section header: [name] or [name:type].
var sectionRE = regexp.MustCompile(`^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?$`)

// ParseINI reads an Ansible INI inventory. file names the source in errors.
func ParseINI(file string, data []byte) (*Inventory, error) {
	inv := newInventory(file, KindFile)
	if err := parseINIInto(inv, file, data); err != nil {
		return nil, err
	}
	if err := inv.checkUndeclared(nil); err != nil {
		return nil, err
	}
	if err := inv.finalize(); err != nil {
		return nil, err
	}
	return inv, nil
}

type pendingDecl struct {
	at      Pos
	section string
	kind    string
	group   string // the group referred to
}

// iniRefs are the groups an INI file's [g:vars] and [g:children] sections
// refer to without declaring them. Ansible checks them against the whole
// inventory when the file ends, so a group an earlier -i declared counts:
// the check waits until the sources before this one are merged.
type iniRefs struct {
	pending  []pendingDecl
	declared map[string]bool
}

// checkUndeclared fails on the first group an INI file refers to that
// neither it nor an earlier source (known) declares.
func (inv *Inventory) checkUndeclared(known map[string]bool) error {
	if inv.iniRefs == nil {
		return nil
	}
	for _, d := range inv.iniRefs.pending {
		if inv.iniRefs.declared[d.group] || known[d.group] {
			continue
		}
		if d.kind == "vars" {
			return fmt.Errorf("%s: section [%s:vars] is for group %q, which is never declared", d.at, d.group, d.group)
		}
		return fmt.Errorf("%s: section [%s:children] names group %q, which is never declared (add a [%s] section)", d.at, d.section, d.group, d.group)
	}
	return nil
}

func parseINIInto(inv *Inventory, file string, data []byte) error {
	groupName, kind := "ungrouped", "hosts"
	// Like Ansible, [g:vars] and [g:children] entries must name groups that
	// are declared somewhere in the file; checked at the end.
	pending := map[string]pendingDecl{}
	var pendingOrder []string
	declared := map[string]bool{"all": true, "ungrouped": true}
	declare := func(name string) {
		declared[name] = true
		inv.group(name, Pos{})
	}
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		at := Pos{file, i + 1}
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if i == 0 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if m := sectionRE.FindStringSubmatch(line); m != nil {
			groupName, kind = m[1], m[2]
			switch kind {
			case "":
				kind = "hosts"
				declare(groupName)
				inv.group(groupName, at).at = at
			case "children":
				declare(groupName)
				inv.group(groupName, at)
			case "vars":
				if !declared[groupName] {
					if _, ok := pending[groupName]; !ok {
						pending[groupName] = pendingDecl{at: at, section: groupName, kind: "vars"}
						pendingOrder = append(pendingOrder, groupName)
					}
				}
			default:
				return fmt.Errorf("%s: section [%s:%s] has an invalid type %q (want hosts, vars or children)", at, groupName, kind, kind)
			}
			continue
		}
		if line[0] == '[' && line[len(line)-1] == ']' {
			return fmt.Errorf("%s: invalid section header %q (no spaces allowed; [name] or [name:vars|children])", at, line)
		}
		switch kind {
		case "hosts":
			if line == "---" {
				return fmt.Errorf("%s: invalid host pattern \"---\": a YAML document start; is this a YAML inventory with an INI name?", at)
			}
			if err := parseINIHostLine(inv, groupName, line, at); err != nil {
				return err
			}
		case "vars":
			k, v, ok := strings.Cut(line, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return fmt.Errorf("%s: [%s:vars]: expected key=value, got %q", at, groupName, line)
			}
			if err := inv.setGroupVarChecked(groupName, k, parseINIValue(strings.TrimSpace(v)), at); err != nil {
				return err
			}
		case "children":
			words, err := shlexSplit(line, true)
			if err != nil {
				return fmt.Errorf("%s: [%s:children]: %w", at, groupName, err)
			}
			if len(words) != 1 {
				return fmt.Errorf("%s: [%s:children]: expected one group name per line, got %q", at, groupName, line)
			}
			child := words[0]
			if child == groupName {
				return fmt.Errorf("%s: child group cycle: %s -> %s", at, groupName, child)
			}
			if !declared[child] {
				if _, ok := pending[child]; !ok {
					pending[child] = pendingDecl{at: at, section: groupName, kind: "children"}
					pendingOrder = append(pendingOrder, child)
				}
			}
			inv.addChild(groupName, child, at)
		}
	}
	refs := &iniRefs{declared: declared}
	for _, name := range pendingOrder {
		if !declared[name] {
			d := pending[name]
			d.group = name
			refs.pending = append(refs.pending, d)
		}
	}
	if len(refs.pending) > 0 {
		inv.iniRefs = refs
	}
	return nil
}

// parseINIHostLine reads "pattern [key=value ...]"; the pattern may carry a
// range and a :port.
func parseINIHostLine(inv *Inventory, groupName, line string, at Pos) error {
	words, err := shlexSplit(line, true)
	if err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	if len(words) == 0 {
		return nil
	}
	names, port, err := parseHostPattern(words[0], false)
	if err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	vars := map[string]any{}
	if port != "" {
		vars["ansible_port"] = parseINIValue(port)
	}
	for _, w := range words[1:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return fmt.Errorf("%s: host %s: expected key=value, got %q", at, words[0], w)
		}
		vars[k] = parseINIValue(v)
	}
	for _, n := range names {
		if err := inv.addHost(groupName, n, vars, at, nil); err != nil {
			return err
		}
	}
	return nil
}

var (
	bracketedIPv6RE = regexp.MustCompile(`^\[([0-9A-Fa-f:.]+)\](?::([0-9]+))?$`)
	bareIPv6RE      = regexp.MustCompile(`^[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*$`)
)

// parseHostPattern splits "name[:port]" and expands Ansible ranges in name
// (and ClusterShell node sets too where nodeSets is set: command-line host
// lists). "[2001:db8::1]:2222" and bare IPv6 addresses are single hosts,
// with a zone too ("fe80::1%eth0", "[fe80::1%eth0]:2222").
func parseHostPattern(pat string, nodeSets bool) ([]string, string, error) {
	if addr, port, ok := splitZonedIPv6(pat); ok {
		return []string{addr}, port, nil
	}
	if m := bracketedIPv6RE.FindStringSubmatch(pat); m != nil && strings.Count(m[1], ":") >= 2 &&
		(strings.Contains(m[1], "::") || strings.Count(m[1], ":") == 7) {
		return []string{m[1]}, m[2], nil
	}
	if bareIPv6RE.MatchString(pat) && strings.Count(pat, ":") >= 2 {
		return []string{pat}, "", nil
	}
	base, port, hasPort := pat, "", false
	depth := 0
	for i := len(pat) - 1; i >= 0 && !hasPort; i-- {
		switch pat[i] {
		case ']':
			depth++
		case '[':
			depth--
		case ':':
			if depth == 0 {
				base, port, hasPort = pat[:i], pat[i+1:], true
			}
		}
	}
	if hasPort {
		if _, err := parsePort(port); err != nil {
			return nil, "", fmt.Errorf("host %q: bad port: %w", pat, err)
		}
	}
	if nodeSets && isNodeSet(base) {
		names, err := ExpandNodeSet(base)
		return names, port, err
	}
	names, err := ExpandHostRange(base)
	if err != nil {
		return nil, "", err
	}
	return names, port, nil
}
