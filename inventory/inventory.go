package inventory

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind says what an inventory was made from.
type Kind string

const (
	// KindFile is a YAML or INI inventory file.
	KindFile Kind = "file"
	// KindHostList is a comma-separated list given on the command line ("a,b," like Ansible).
	KindHostList Kind = "host-list"
	// KindSingleHost is one host name, completed from ssh_config like `ssh NAME` would.
	KindSingleHost Kind = "single-host"
)

// Pos is where something was defined: a file and a 1-based line (0: unknown).
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	switch {
	case p.File == "":
		return "<command line>"
	case p.Line == 0:
		return p.File
	default:
		return p.File + ":" + strconv.Itoa(p.Line)
	}
}

// Inventory is a loaded inventory: groups, hosts and their resolved settings.
// It is read-only once loaded and safe for concurrent readers.
type Inventory struct {
	// Source is the file path, or the spec the inventory was made from.
	Source string
	// Kind says what Source is.
	Kind Kind
	// Warnings are problems Ansible would also only warn about (unknown keys).
	Warnings []string

	groups     map[string]*group
	groupOrder []string
	hosts      map[string]*hostDef
	hostOrder  []string
	// resolved holds the final Host of each name in hostOrder.
	resolved map[string]Host
	// hostErrs holds why a host cannot be reached (bad connection vars,
	// ssh_config completion failing); such a host is still listed.
	hostErrs map[string]error
	// sources counts the group_vars/ host_vars/ layers applied (one per
	// inventory source, in order): a later source's files win.
	sources int
	// loadErr is the first error setGroupVar could not return.
	loadErr error
	// maxInput caps each group_vars/host_vars file read (0: InputCap's default).
	maxInput int64
	// iniRefs are an INI source's references to groups it does not
	// declare, checked once earlier sources are merged (checkUndeclared).
	iniRefs *iniRefs
}

// varSet is the vars one source's group_vars/ or host_vars/ files give a
// group or host.
type varSet struct {
	src  int
	vars map[string]any
	pos  map[string]Pos
}

type group struct {
	name     string
	at       Pos
	vars     map[string]any
	varPos   map[string]Pos
	children []string
	childPos map[string]Pos
	parents  []string
	hosts    []string
	hostSet  map[string]bool // hosts as a set: groups of 100k hosts must load fast
	depth    int
	// plug are the group_vars/ files' vars, by source: they rank above
	// every inventory file's group vars.
	plug []varSet
	// priority is ansible_group_priority as the inventory source set it
	// (hasPriority false: Ansible's default, 1).
	priority    int
	hasPriority bool
}

type hostDef struct {
	name string
	at   Pos
	vars map[string]any
	// varPos holds the lines of vars set elsewhere than at (YAML's own
	// lines, a later source's); nil while every var is from at, as an INI
	// host line's are: two maps a host would double a large inventory's
	// memory.
	varPos map[string]Pos
	// groups are the groups the host is listed in directly.
	groups []string
	// plug are the host_vars/ files' vars, by source.
	plug []varSet
}

// posOf is where the host's var k was set.
func (h *hostDef) posOf(k string) Pos {
	if p, ok := h.varPos[k]; ok {
		return p
	}
	return h.at
}

// setPos records where k was set, keeping only what differs from at.
func (h *hostDef) setPos(k string, p Pos) {
	if p == h.at {
		delete(h.varPos, k)
		return
	}
	if h.varPos == nil {
		h.varPos = map[string]Pos{}
	}
	h.varPos[k] = p
}

func newInventory(source string, kind Kind) *Inventory {
	inv := &Inventory{
		Source: source,
		Kind:   kind,
		groups: map[string]*group{},
		hosts:  map[string]*hostDef{},
	}
	inv.group("all", Pos{})
	inv.group("ungrouped", Pos{})
	inv.addChild("all", "ungrouped", Pos{})
	return inv
}

func (inv *Inventory) warnf(at Pos, format string, args ...any) {
	inv.Warnings = append(inv.Warnings, at.String()+": "+fmt.Sprintf(format, args...))
}

// group returns the named group, creating it on first use.
func (inv *Inventory) group(name string, at Pos) *group {
	g := inv.groups[name]
	if g == nil {
		g = &group{name: name, at: at, vars: map[string]any{}, varPos: map[string]Pos{}, childPos: map[string]Pos{}, hostSet: map[string]bool{}, depth: -1}
		inv.groups[name] = g
		inv.groupOrder = append(inv.groupOrder, name)
	}
	return g
}

func (inv *Inventory) addChild(parent, child string, at Pos) {
	p, c := inv.group(parent, at), inv.group(child, at)
	if _, ok := p.childPos[child]; ok {
		return
	}
	p.childPos[child] = at
	p.children = append(p.children, child)
	c.parents = append(c.parents, parent)
}

// setGroupVar sets a group var from an inventory source; an error (a bad
// ansible_group_priority) is kept for the loader to return.
func (inv *Inventory) setGroupVar(name, key string, val any, at Pos) {
	if err := inv.setGroupVarChecked(name, key, val, at); err != nil && inv.loadErr == nil {
		inv.loadErr = err
	}
}

// setGroupVarChecked is Ansible's Group.set_variable: a later definition
// replaces an earlier one, and ansible_group_priority is not a var but the
// group's priority, int() of the value (Ansible fails the source when
// int() fails).
func (inv *Inventory) setGroupVarChecked(name, key string, val any, at Pos) error {
	g := inv.group(name, at)
	if key == "ansible_group_priority" {
		p, err := pyInt(val)
		if err != nil {
			return fmt.Errorf("%s: group %s: ansible_group_priority: %w (Ansible refuses this source too)", at, name, err)
		}
		g.priority, g.hasPriority = p, true
		return nil
	}
	g.vars[key] = val
	g.varPos[key] = at
	return nil
}

// pyInt is Python's int() on a value from an inventory source.
func pyInt(v any) (int, error) {
	switch t := v.(type) {
	case bool:
		if t {
			return 1, nil
		}
		return 0, nil
	case int:
		return t, nil
	case int64:
		return int(t), nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) || math.Abs(t) > 1<<62 {
			return 0, fmt.Errorf("%v is not an integer", t)
		}
		return int(t), nil
	case string:
		s := strings.TrimSpace(t)
		digits := strings.TrimLeft(s, "+-")
		if len(s)-len(digits) <= 1 && digits != "" && digits[0] != '_' && digits[len(digits)-1] != '_' && !strings.Contains(digits, "__") {
			if n, err := strconv.Atoi(s[:len(s)-len(digits)] + strings.ReplaceAll(digits, "_", "")); err == nil {
				return n, nil
			}
		}
		return 0, fmt.Errorf("%s is not an integer", strconv.Quote(t))
	}
	return 0, fmt.Errorf("%s is not an integer", showValue(v))
}

// addHost lists host in group (created as needed) and sets its host vars.
// A host var set twice to different values is an error naming both places:
// Ansible would silently keep the last one, which for ansible_host means
// dialling a different machine depending on file order.
// varAt, if not nil, gives a var's own line (YAML); otherwise at is used.
func (inv *Inventory) addHost(groupName, name string, vars map[string]any, at Pos, varAt map[string]Pos) error {
	if name == "" {
		return fmt.Errorf("%s: empty host name", at)
	}
	h := inv.hosts[name]
	if h == nil {
		h = &hostDef{name: name, at: at, vars: make(map[string]any, len(vars))}
		inv.hosts[name] = h
		inv.hostOrder = append(inv.hostOrder, name)
	}
	for _, k := range sortedKeys(vars) {
		v, vat := vars[k], at
		if p, ok := varAt[k]; ok {
			vat = p
		}
		if old, ok := h.vars[k]; ok && !reflect.DeepEqual(old, v) {
			return fmt.Errorf("%s: host %s: %s = %s conflicts with %s set at %s",
				vat, name, k, showValue(v), showValue(old), h.posOf(k))
		}
		h.vars[k] = v
		h.setPos(k, vat)
	}
	if groupName != "" {
		g := inv.group(groupName, at)
		if !g.hostSet[name] {
			g.hostSet[name] = true
			g.hosts = append(g.hosts, name)
			h.groups = append(h.groups, groupName)
		}
	}
	return nil
}

func showValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// finalize does what Ansible's reconcile step does (top-level groups become
// children of all, hosts in no group go to ungrouped), rejects child cycles,
// and computes every host's effective vars and connection settings.
func (inv *Inventory) finalize() error {
	for _, name := range inv.groupOrder {
		g := inv.groups[name]
		if name != "all" && len(g.parents) == 0 {
			inv.addChild("all", name, g.at)
		}
	}
	if err := inv.checkCycles(); err != nil {
		return err
	}
	inv.computeDepths()
	for _, name := range inv.hostOrder {
		if _, ok := inv.groups[name]; ok {
			// Patterns take the host (see matchTerm); say so, as Ansible does.
			inv.warnf(inv.hosts[name].at, "found both group and host with same name: %s (a --limit of %s selects the host)", name, name)
		}
	}
	ungrouped := inv.groups["ungrouped"]
	ungrouped.hosts, ungrouped.hostSet = nil, map[string]bool{}
	for _, name := range inv.hostOrder {
		h := inv.hosts[name]
		others := 0
		for _, g := range h.groups {
			if g != "all" && g != "ungrouped" {
				others++
			}
		}
		removeString(&h.groups, "ungrouped")
		if others == 0 {
			ungrouped.hosts = append(ungrouped.hosts, name)
			ungrouped.hostSet[name] = true
			h.groups = append(h.groups, "ungrouped")
		}
	}
	inv.resolved = map[string]Host{}
	for _, name := range inv.hostOrder {
		h, err := inv.buildHost(inv.hosts[name])
		if err != nil {
			// One host's bad connection settings must not stop the others
			// from being listed or reached: Select refuses it if picked.
			inv.setHostErr(name, err)
		}
		inv.resolved[name] = h
	}
	return nil
}

func removeString(list *[]string, s string) bool {
	for i, x := range *list {
		if x == s {
			*list = append((*list)[:i], (*list)[i+1:]...)
			return true
		}
	}
	return false
}

// checkCycles fails on a child group that is its own ancestor, naming the
// cycle and where its closing edge was written.
func (inv *Inventory) checkCycles() error {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(name string) error
	visit = func(name string) error {
		state[name] = active
		stack = append(stack, name)
		g := inv.groups[name]
		for _, c := range g.children {
			switch state[c] {
			case active:
				i := len(stack) - 1
				for stack[i] != c {
					i--
				}
				cycle := append(append([]string(nil), stack[i:]...), c)
				return fmt.Errorf("%s: child group cycle: %s", g.childPos[c], strings.Join(cycle, " -> "))
			case unseen:
				if err := visit(c); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[name] = done
		return nil
	}
	for _, name := range inv.groupOrder {
		if state[name] == unseen {
			if err := visit(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// computeDepths sets each group's depth to its longest distance from all,
// as Ansible does; deeper groups' vars win. Memoized on parents, so shared
// children (diamonds) cost nothing extra. Runs after checkCycles.
func (inv *Inventory) computeDepths() {
	var depth func(g *group) int
	depth = func(g *group) int {
		if g.depth >= 0 {
			return g.depth
		}
		d := 0
		for _, p := range g.parents {
			d = max(d, depth(inv.groups[p])+1)
		}
		g.depth = d
		return d
	}
	for _, name := range inv.groupOrder {
		depth(inv.groups[name])
	}
}

// ancestors returns every group the host is in, directly or through a
// child group, all included.
func (inv *Inventory) ancestors(h *hostDef) []*group {
	seen := map[string]bool{}
	var out []*group
	var up func(name string)
	up = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		g := inv.groups[name]
		out = append(out, g)
		for _, p := range g.parents {
			up(p)
		}
	}
	for _, g := range h.groups {
		up(g)
	}
	up("all")
	return out
}

// groupPriority is the group's ansible_group_priority as its inventory
// source set it. Like Ansible, a group_vars/ file cannot set it: there it
// is an ordinary var.
func groupPriority(g *group) int {
	if g.hasPriority {
		return g.priority
	}
	return 1
}

// effectiveVars merges a host's vars in Ansible's layers (VariableManager,
// default precedence), each later one winning:
//
//  1. the all group's vars from the inventory files
//  2. the other groups' vars from the inventory files
//  3. group_vars/all files (per source, in order)
//  4. the other groups' group_vars/ files (per source, then group order)
//  5. the host's vars from the inventory files
//  6. host_vars/ files (per source)
//
// Inside a layer groups go by (depth, ansible_group_priority, name).
// Top-level keys replace, as with Ansible's default hash_behaviour.
func (inv *Inventory) effectiveVars(h *hostDef) (map[string]any, map[string]Pos, []string) {
	groups := inv.ancestors(h)
	sort.Slice(groups, func(i, j int) bool {
		a, b := groups[i], groups[j]
		if a.depth != b.depth {
			return a.depth < b.depth
		}
		if pa, pb := groupPriority(a), groupPriority(b); pa != pb {
			return pa < pb
		}
		return a.name < b.name
	})
	vars, pos := map[string]any{}, map[string]Pos{}
	put := func(m map[string]any, p map[string]Pos) {
		for k, v := range m {
			vars[k], pos[k] = v, p[k]
		}
	}
	putHost := func() {
		for k, v := range h.vars {
			vars[k], pos[k] = v, h.posOf(k)
		}
	}
	all := inv.groups["all"]
	names := make([]string, 0, len(groups))
	others := make([]*group, 0, len(groups))
	for _, g := range groups {
		names = append(names, g.name)
		if g != all {
			others = append(others, g)
		}
	}
	put(all.vars, all.varPos)
	for _, g := range others {
		put(g.vars, g.varPos)
	}
	for _, vs := range all.plug {
		put(vs.vars, vs.pos)
	}
	for src := 0; src < inv.sources; src++ {
		for _, g := range others {
			for _, vs := range g.plug {
				if vs.src == src {
					put(vs.vars, vs.pos)
				}
			}
		}
	}
	putHost()
	for _, vs := range h.plug {
		put(vs.vars, vs.pos)
	}
	sort.Strings(names)
	return vars, pos, names
}

// buildHost turns a host definition into a Host with the connection
// settings its ansible_* vars give. ssh_config completion comes later. On
// an error the Host still has its name, groups and vars (for listings); the
// error is the host's own (see HostErr), never the inventory's.
func (inv *Inventory) buildHost(h *hostDef) (Host, error) {
	vars, pos, groups := inv.effectiveVars(h)
	out := Host{Name: h.name, Connection: "ssh", Groups: groups, Vars: vars}
	cv := connVars{host: h.name, vars: vars, pos: pos}
	bad := cv.bad
	var err error
	// Where both are set the ansible_ssh_* form wins: the ssh plugin lists
	// it last among each option's vars, and the last one found is used
	// (checked with ansible -vvv, Ansible 2.14).
	if out.Address, _, err = cv.str("ansible_ssh_host", "ansible_host"); err != nil {
		return out, err
	}
	port, key, err := cv.str("ansible_ssh_port", "ansible_port")
	if err != nil {
		return out, err
	}
	if port != "" {
		if out.Port, err = parsePort(port); err != nil {
			return out, bad(key, err)
		}
	}
	if out.User, _, err = cv.str("ansible_ssh_user", "ansible_user"); err != nil {
		return out, err
	}
	keyFile, _, err := cv.str("ansible_ssh_private_key_file", "ansible_private_key_file")
	if err != nil {
		return out, err
	}
	if keyFile != "" {
		out.IdentityFiles = []string{keyFile}
	}
	timeout, key, err := cv.str("ansible_ssh_timeout")
	if err != nil {
		return out, err
	}
	if timeout != "" {
		// Ansible passes it to ssh as -o ConnectTimeout: whole seconds.
		n, err := strconv.Atoi(strings.TrimSpace(timeout))
		if err != nil || n < 1 {
			return out, bad(key, fmt.Errorf("%q is not a number of seconds (1 or more)", timeout))
		}
		out.ConnectTimeout = time.Duration(n) * time.Second
	}
	conn, key, err := cv.str("ansible_connection")
	if err != nil {
		return out, err
	}
	plugin, err := connectionPlugin(conn)
	if err != nil {
		return out, bad(key, err)
	}
	out.Connection = plugin
	if _, ok := vars["ansible_become"]; ok {
		v, err := cv.resolved("ansible_become")
		if err != nil {
			return out, err
		}
		if out.Become, err = parseBool(v); err != nil {
			return out, bad("ansible_become", err)
		}
	}
	if out.Become {
		method, key, err := cv.str("ansible_become_method")
		if err != nil {
			return out, err
		}
		if method != "" && method != "sudo" && method != "ansible.builtin.sudo" {
			return out, bad(key, fmt.Errorf("become method %q is not supported (only sudo)", method))
		}
	}
	// ssh sees these lists on one command line, in this order (Ansible's
	// ssh plugin); an error is blamed on the first list that shows it.
	var argLists []string
	for _, k := range []string{"ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args"} {
		args, _, err := cv.str(k)
		if err != nil {
			return out, err
		}
		argLists = append(argLists, args)
		if out.ProxyJump, out.ProxyCommand, err = proxyFromArgs(argLists...); err != nil {
			return out, bad(k, err)
		}
		// -o IdentitiesOnly=yes, as Ansible users set it to keep an
		// agent's keys from crowding out the key named (MaxAuthTries).
		if v, err := sshOptionFromArgs("IdentitiesOnly", argLists...); err != nil {
			return out, bad(k, err)
		} else if strings.EqualFold(v, "yes") {
			out.IdentitiesOnly = true
		}
	}
	return out, nil
}

// sshOptionFromArgs is the value of the ssh option key given as -o in ssh
// arguments as Ansible passes them (see proxyFromArgs): the first one given
// wins, as with ssh; "" if none.
func sshOptionFromArgs(key string, argLists ...string) (string, error) {
	for _, args := range argLists {
		if strings.TrimSpace(args) == "" {
			continue
		}
		words, err := shlexSplit(args, false)
		if err != nil {
			return "", err
		}
		for i := 0; i < len(words); i++ {
			w := words[i]
			if len(w) < 2 || w[0] != '-' || w == "--" {
				continue
			}
			for j := 1; j < len(w); j++ {
				flag := w[j]
				if !strings.ContainsRune(sshArgOpts, rune(flag)) {
					continue
				}
				val := w[j+1:]
				if val == "" {
					if i+1 >= len(words) {
						return "", fmt.Errorf("-%c needs a value", flag)
					}
					i++
					val = words[i]
				}
				if flag == 'o' {
					if k, v := splitSSHOption(val); strings.EqualFold(k, key) {
						return v, nil
					}
				}
				break // the rest of w was the value
			}
		}
	}
	return "", nil
}

// connectionPlugin maps ansible_connection to gpush's two transports.
// Ansible resolves ansible.builtin.X and ansible.legacy.X to its own X; any
// other plugin (network_cli, docker, a collection's) speaks a protocol gpush
// does not, so the host cannot be reached rather than being dialled by ssh.
func connectionPlugin(name string) (string, error) {
	short := name
	for _, ns := range []string{"ansible.builtin.", "ansible.legacy."} {
		if rest, ok := strings.CutPrefix(name, ns); ok {
			short = rest
		}
	}
	switch short {
	case "":
		if name == "" {
			return "ssh", nil
		}
	case "ssh", "paramiko", "paramiko_ssh":
		return "ssh", nil
	case "smart":
		if short == name {
			return "ssh", nil
		}
	case "local":
		return "local", nil
	}
	// The command transports (remote/cmdtransport.go), by their Ansible
	// collection names and short ones.
	switch name {
	case "containers.podman.podman", "podman":
		return "podman", nil
	case "community.docker.docker", "docker":
		return "docker", nil
	case "kubernetes.core.kubectl", "community.kubernetes.kubectl", "kubectl":
		return "kubectl", nil
	case "gpush_command":
		return "gpush_command", nil
	case "slurm":
		return "slurm", nil
	}
	return "", fmt.Errorf("connection plugin %q is not supported: gpush speaks ssh and local (also as ansible.builtin.ssh, ansible.builtin.local), "+
		"containers.podman.podman, community.docker.docker, kubernetes.core.kubectl, slurm and gpush_command", name)
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", s)
	}
	return n, nil
}

// parseBool accepts what Ansible's boolean() accepts.
func parseBool(v any) (bool, error) {
	switch t := v.(type) {
	case bool:
		return t, nil
	case int:
		if t == 0 || t == 1 {
			return t == 1, nil
		}
	case float64:
		if t == 0 || t == 1 {
			return t == 1, nil
		}
	case string:
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "yes", "on", "1", "true", "t", "y":
			return true, nil
		case "no", "off", "0", "false", "f", "n", "":
			return false, nil
		}
	}
	return false, fmt.Errorf("%s is not a boolean", showValue(v))
}

// sshArgOpts are ssh(1)'s options that take an argument (its getopt
// string), to read bundled flags such as "-qoProxyCommand=..." as ssh does.
const sshArgOpts = "bceilmopBDEFIJLOPQRSWw"

// proxyFromArgs finds the route in ssh arguments as Ansible passes them to
// ssh (shlex-split; ssh_args, ssh_common_args, ssh_extra_args in order): "-J bastion",
// "-o ProxyJump=bastion", "-o 'ProxyCommand ssh -W %h:%p bastion'",
// "-oProxyCommand=none". As in OpenSSH 9.2 the first ProxyJump or
// ProxyCommand given wins ("none" included, which then keeps ssh_config's
// from applying), a second -J or a -J after a ProxyCommand is an error.
// jump and command are "" or as written (tokens unexpanded, "none" kept);
// at most one is set. Other options are ignored.
func proxyFromArgs(argLists ...string) (jump, command string, err error) {
	for _, args := range argLists {
		if strings.TrimSpace(args) == "" {
			continue
		}
		words, err := shlexSplit(args, false)
		if err != nil {
			return "", "", err
		}
		for i := 0; i < len(words); i++ {
			w := words[i]
			if len(w) < 2 || w[0] != '-' || w == "--" {
				continue
			}
			for j := 1; j < len(w); j++ {
				flag := w[j]
				if !strings.ContainsRune(sshArgOpts, rune(flag)) {
					continue
				}
				val := w[j+1:]
				if val == "" {
					if i+1 >= len(words) {
						return "", "", fmt.Errorf("-%c needs a value", flag)
					}
					i++
					val = words[i]
				}
				switch flag {
				case 'J':
					switch {
					case jump != "":
						return "", "", errors.New("only a single -J option is permitted (use commas to separate hops)")
					case command != "":
						return "", "", errors.New("cannot specify -J with ProxyCommand")
					}
					if jump = strings.TrimSpace(val); jump == "" {
						return "", "", errors.New("-J needs a value")
					}
					if err := checkProxyJump(jump); err != nil {
						return "", "", fmt.Errorf("-J: %w", err)
					}
				case 'o':
					k, v := splitSSHOption(val)
					isRoute := strings.EqualFold(k, "ProxyJump") || strings.EqualFold(k, "ProxyCommand")
					switch {
					case isRoute && v == "":
						return "", "", fmt.Errorf("-o %s needs a value", k)
					case jump != "" || command != "":
					case strings.EqualFold(k, "ProxyJump"):
						if err := checkProxyJump(v); err != nil {
							return "", "", fmt.Errorf("-o ProxyJump: %w", err)
						}
						jump = v
					case strings.EqualFold(k, "ProxyCommand"):
						command = v
					}
				}
				break // the rest of w was the value
			}
		}
	}
	return jump, command, nil
}

// splitSSHOption splits an ssh_config line as OpenSSH does: the keyword
// ends at whitespace or "=", and the value starts after any run of both.
func splitSSHOption(line string) (key, value string) {
	line = strings.TrimLeft(line, " \t")
	end := strings.IndexAny(line, " \t=")
	if end < 0 {
		return line, ""
	}
	rest := strings.TrimLeft(line[end:], " \t=")
	return line[:end], strings.TrimRight(rest, " \t\r\n")
}

// HostNames returns every host name in inventory order.
func (inv *Inventory) HostNames() []string {
	return append([]string(nil), inv.hostOrder...)
}

// Hosts returns every host in inventory order. The Hosts are copies: the
// caller may change them.
func (inv *Inventory) Hosts() []Host {
	out := make([]Host, 0, len(inv.hostOrder))
	for _, name := range inv.hostOrder {
		out = append(out, cloneHost(inv.resolved[name]))
	}
	return out
}

// Host returns one host by inventory name.
func (inv *Inventory) Host(name string) (Host, bool) {
	h, ok := inv.resolved[name]
	if !ok {
		return Host{}, false
	}
	return cloneHost(h), true
}

// GroupNames returns every group name, sorted.
func (inv *Inventory) GroupNames() []string {
	names := append([]string(nil), inv.groupOrder...)
	sort.Strings(names)
	return names
}

// GroupHosts returns the names of the hosts in a group, directly or through
// its children, in inventory order; false if there is no such group.
func (inv *Inventory) GroupHosts(name string) ([]string, bool) {
	g := inv.groups[name]
	if g == nil {
		return nil, false
	}
	if name == "all" {
		return inv.HostNames(), true
	}
	in, visited := map[string]bool{}, map[string]bool{}
	var walk func(g *group)
	walk = func(g *group) {
		if visited[g.name] {
			return
		}
		visited[g.name] = true
		for _, h := range g.hosts {
			in[h] = true
		}
		for _, c := range g.children {
			walk(inv.groups[c])
		}
	}
	walk(g)
	var out []string
	for _, h := range inv.hostOrder {
		if in[h] {
			out = append(out, h)
		}
	}
	return out, true
}

// GroupVars returns a copy of a group's own vars (not inherited ones).
func (inv *Inventory) GroupVars(name string) (map[string]any, bool) {
	g := inv.groups[name]
	if g == nil {
		return nil, false
	}
	return cloneValue(g.vars).(map[string]any), true
}

func cloneHost(h Host) Host {
	h.IdentityFiles = append([]string(nil), h.IdentityFiles...)
	h.Groups = append([]string(nil), h.Groups...)
	if h.Vars != nil {
		h.Vars = cloneValue(h.Vars).(map[string]any)
	}
	return h
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = cloneValue(x)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, x := range t {
			l[i] = cloneValue(x)
		}
		return l
	default:
		return v
	}
}
