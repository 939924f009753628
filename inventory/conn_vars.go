package inventory

import (
	"fmt"
	"net"
	"regexp"
	"strings"
)

// HostErr says why a host cannot be reached: its connection settings are
// bad (an unsupported ansible_connection, a bad port, an unresolvable
// template or a vault in a connection var) or ssh_config could not complete
// them. nil for a good host or an unknown name. Such a host is still in
// Hosts and listings; Select refuses it when the pattern picks it.
func (inv *Inventory) HostErr(name string) error {
	return inv.hostErrs[name]
}

func (inv *Inventory) setHostErr(name string, err error) {
	if inv.hostErrs == nil {
		inv.hostErrs = map[string]error{}
	}
	inv.hostErrs[name] = err
}

// maxHostErrs is how many bad hosts a Select error spells out.
const maxHostErrs = 5

// selectedErr fails when one of the selected hosts has a HostErr, naming
// the first few and counting the rest.
func (inv *Inventory) selectedErr(pattern string, names []string) error {
	var msgs, hosts []string
	bad := 0
	for _, n := range names {
		err := inv.hostErrs[n]
		if err == nil {
			continue
		}
		bad++
		if len(msgs) < maxHostErrs {
			msgs = append(msgs, err.Error())
			hosts = append(hosts, n)
		}
	}
	switch {
	case bad == 0:
		return nil
	case bad == 1:
		return fmt.Errorf("a selected host cannot be reached: %s (to leave it out: --limit '%s,!%s')", msgs[0], pattern, hosts[0])
	}
	more := ""
	if bad > len(msgs) {
		more = fmt.Sprintf("; and %d more", bad-len(msgs))
	}
	return fmt.Errorf("%d selected hosts cannot be reached: %s%s", bad, strings.Join(msgs, "; "), more)
}

// connVars reads one host's connection vars, resolving plain Jinja
// variable references the way Ansible's templating would.
type connVars struct {
	host string
	vars map[string]any
	pos  map[string]Pos
}

func (cv connVars) bad(key string, err error) error {
	return fmt.Errorf("%s: host %s: %s: %w", cv.pos[key], cv.host, key, err)
}

// str returns the first of keys that is set (not null) as text, with the
// key it came from.
func (cv connVars) str(keys ...string) (string, string, error) {
	for _, k := range keys {
		if v, ok := cv.vars[k]; !ok || v == nil {
			continue
		}
		v, err := cv.resolved(k)
		if err != nil {
			return "", k, err
		}
		s, err := scalarText(v)
		if err != nil {
			return "", k, cv.bad(k, err)
		}
		return s, k, nil
	}
	return "", "", nil
}

// resolved returns key's value with its templates resolved.
func (cv connVars) resolved(key string) (any, error) {
	v, err := cv.expand(key, cv.vars[key], []string{key})
	if err != nil {
		return nil, cv.bad(key, err)
	}
	return v, nil
}

// scalarText is a resolved connection value as the text ssh would get.
func scalarText(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case int, int64, uint64, float64:
		return fmt.Sprint(t), nil
	}
	if isVault(v) {
		return "", errVault
	}
	return "", fmt.Errorf("want a string, got %s", showValue(v))
}

var errVault = fmt.Errorf("encrypted with ansible-vault; gpush does not decrypt vaults: put the plain value in host_vars or ssh_config")

// isVault tells an ansible-vault value in any of the forms it reaches us:
// the ciphertext as text (a !vault tag read as a plain scalar), the
// {"__ansible_vault": ...} that ansible-inventory --list and inventory
// scripts print, or the YAML loader's VaultValue.
func isVault(v any) bool {
	switch t := v.(type) {
	case string:
		return strings.HasPrefix(strings.TrimSpace(t), "$ANSIBLE_VAULT;")
	case map[string]any:
		_, ok := t["__ansible_vault"]
		return ok
	case VaultValue, *VaultValue:
		return true
	}
	return false
}

// jinjaRefRE is a plain variable reference, the only template gpush
// resolves: {{ name }}, spaces optional. {{- name -}} trims the text
// around it, so it is refused rather than half done.
var jinjaRefRE = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// maxTemplateDepth bounds chains of references (a -> b -> c ...).
const maxTemplateDepth = 32

// expand resolves the templates in v, the value of the var at the end of
// chain. Plain references are replaced by the referenced var's value,
// recursively; a value that is only one reference keeps that value's type,
// as Ansible's native rendering of an int port does. Anything else Jinja
// would compute (filters, expressions, lookups, {% %}) is an error: gpush
// must never dial the template's literal text.
func (cv connVars) expand(key string, v any, chain []string) (any, error) {
	if isVault(v) {
		return nil, errVault
	}
	s, ok := v.(string)
	if !ok || !strings.Contains(s, "{") {
		return v, nil
	}
	if len(chain) > maxTemplateDepth {
		return nil, fmt.Errorf("template references nest deeper than %d: %s", maxTemplateDepth, strings.Join(chain, " -> "))
	}
	locs := jinjaRefRE.FindAllStringSubmatchIndex(s, -1)
	if len(locs) == 1 && locs[0][0] == 0 && locs[0][1] == len(s) {
		return cv.lookup(s[locs[0][2]:locs[0][3]], chain)
	}
	var b strings.Builder
	last := 0
	for _, l := range locs {
		if err := noTemplate(s[last:l[0]], s); err != nil {
			return nil, err
		}
		b.WriteString(s[last:l[0]])
		r, err := cv.lookup(s[l[2]:l[3]], chain)
		if err != nil {
			return nil, err
		}
		text, err := scalarText(r)
		if err != nil {
			return nil, fmt.Errorf("%s in %q: %w", s[l[2]:l[3]], s, err)
		}
		b.WriteString(text)
		last = l[1]
	}
	if err := noTemplate(s[last:], s); err != nil {
		return nil, err
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// noTemplate fails on Jinja syntax other than a plain reference.
func noTemplate(part, whole string) error {
	for _, open := range []string{"{{", "{%", "{#"} {
		if strings.Contains(part, open) {
			return fmt.Errorf("template %q: gpush resolves only plain variable references ({{ name }}), not filters, expressions, lookups or {%% %%} blocks: put the resulting value in the inventory", whole)
		}
	}
	return nil
}

// lookup is one referenced name: the host's vars, then the magic vars
// Ansible defines from the inventory.
func (cv connVars) lookup(name string, chain []string) (any, error) {
	for _, c := range chain {
		if c == name {
			return nil, fmt.Errorf("template reference cycle: %s -> %s", strings.Join(chain, " -> "), name)
		}
	}
	if v, ok := cv.vars[name]; ok {
		if v == nil {
			return nil, fmt.Errorf("template variable %s is null", name)
		}
		r, err := cv.expand(name, v, append(chain, name))
		if err != nil {
			return nil, err
		}
		if _, isList := r.([]any); isList {
			return nil, fmt.Errorf("template variable %s is a list, not a single value", name)
		}
		return r, nil
	}
	switch name {
	case "inventory_hostname":
		return cv.host, nil
	case "inventory_hostname_short":
		return shortHostname(cv.host), nil
	case "group_names":
		return nil, fmt.Errorf("template variable group_names is a list, not a single value")
	}
	return nil, fmt.Errorf("template variable %s is not defined for host %s", name, cv.host)
}

// shortHostname is Ansible's inventory_hostname_short: the name up to its
// first dot, an IP address whole.
func shortHostname(name string) string {
	if net.ParseIP(name) != nil {
		return name
	}
	if h, _, ok := strings.Cut(name, "%"); ok && net.ParseIP(h) != nil {
		return name
	}
	short, _, _ := strings.Cut(name, ".")
	return short
}
