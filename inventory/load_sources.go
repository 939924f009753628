package inventory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ResolveAll is Resolve for several --inventory values, merged in order as
// Ansible merges several -i: groups and hosts from every source, a later
// source's value of the same var winning, and then each source's
// group_vars/ and host_vars/ applied in source order. Resolve(spec) is
// ResolveAll([]string{spec}).
func ResolveAll(specs []string, opts Options) (*Inventory, error) {
	switch len(specs) {
	case 0:
		return nil, errors.New("inventory: no --inventory value")
	case 1:
		return Resolve(specs[0], opts)
	}
	opts.specs = specs
	return Resolve(strings.Join(specs, " "), opts)
}

// loadAll loads every spec and merges them into one inventory. Each spec
// is one source to Ansible's vars plugin: the group_vars/ and host_vars/
// beside a file (in a folder given as the spec) apply once per spec, in
// spec order, after all of them are read.
func loadAll(specs []string, opts Options) (*Inventory, error) {
	var parts []*Inventory
	var varDirs []string
	for _, spec := range specs {
		p, varDir, err := loadSpec(spec, opts)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p...)
		varDirs = append(varDirs, varDir)
	}
	if len(parts) == 1 && parts[0].resolved != nil && len(specs) == 1 {
		return parts[0], nil // complete already: a script, a host list, one host
	}
	out := newInventory(strings.Join(specs, ","), mergedKind(parts))
	out.maxInput = opts.MaxInputSize
	if len(parts) == 1 && len(specs) == 1 {
		out.Source = parts[0].Source // the file a name was found as
	}
	for _, p := range parts {
		// An INI source may name groups an earlier source declared, as
		// in Ansible, where every source fills the one inventory.
		if err := p.checkUndeclared(out.groupSet()); err != nil {
			return nil, err
		}
		out.merge(p)
	}
	for _, d := range varDirs {
		if d == "" {
			continue
		}
		if err := loadVarDirs(out, d); err != nil {
			return nil, err
		}
	}
	if out.loadErr != nil {
		return nil, out.loadErr
	}
	if err := out.finalize(); err != nil {
		return nil, err
	}
	return out, nil
}

// groupSet is the names of the groups declared so far.
func (inv *Inventory) groupSet() map[string]bool {
	set := make(map[string]bool, len(inv.groups))
	for name := range inv.groups {
		set[name] = true
	}
	return set
}

func mergedKind(parts []*Inventory) Kind {
	k := parts[0].Kind
	for _, p := range parts[1:] {
		if p.Kind != k {
			return KindFile
		}
	}
	if k == KindSingleHost && len(parts) > 1 {
		return KindHostList
	}
	return k
}

// loadSpec loads one --inventory value into its parts (a folder gives one
// per file in it) and the folder whose group_vars/ and host_vars/ apply
// ("" for host lists and single hosts, as Ansible skips host lists).
func loadSpec(spec string, opts Options) ([]*Inventory, string, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, "", errors.New("inventory: empty --inventory value")
	}
	if strings.HasPrefix(spec, SlurmPrefix) {
		inv, err := slurmJob(spec)
		if err != nil {
			return nil, "", err
		}
		return []*Inventory{inv}, "", nil
	}
	st, err := os.Stat(spec)
	switch {
	case err == nil && st.IsDir():
		parts, err := loadDir(spec, opts, 0)
		if err != nil {
			return nil, "", err
		}
		if len(parts) == 0 {
			return nil, "", fmt.Errorf("inventory %s: the folder holds no inventory file (Ansible skips hidden files, .ini, .cfg, .md, .txt, ... in a folder)", spec)
		}
		// The folder is the source: its group_vars/ apply once, and those
		// of its subfolders not at all, as with Ansible.
		return parts, spec, nil
	case err == nil:
		p, err := loadFile(spec, opts)
		if err != nil {
			return nil, "", err
		}
		return []*Inventory{p}, filepath.Dir(spec), nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, "", fmt.Errorf("inventory %s: %w", spec, err)
	}
	return loadNamed(spec, opts)
}

// dirIgnored is Ansible's IGNORED for inventory folders: hidden entries,
// group_vars, host_vars, vars_plugins, and INVENTORY_IGNORE_EXTS's default
// (REJECT_EXTS plus .orig, .ini, .cfg, .retry: an .ini file in an
// inventory folder is skipped by Ansible, so by gpush).
var dirIgnored = regexp.MustCompile(`^\.|^host_vars$|^group_vars$|^vars_plugins$|(?:\.pyc|\.pyo|\.swp|\.bak|~|\.rpm|\.md|\.txt|\.rst|\.orig|\.ini|\.cfg|\.retry)$`)

func loadDir(dir string, opts Options, depth int) ([]*Inventory, error) {
	if depth > 40 {
		return nil, fmt.Errorf("inventory %s: folders nested too deep (a symlink loop?)", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []*Inventory
	notes := newInventory(dir, KindFile) // carries warnings only
	for _, n := range names {
		p := filepath.Join(dir, n)
		if dirIgnored.MatchString(n) {
			if strings.HasSuffix(n, ".ini") {
				// Surprising but Ansible's default: say it, since its hosts
				// are then missing.
				notes.warnf(Pos{File: p}, "skipped: Ansible ignores .ini files inside an inventory folder (INVENTORY_IGNORE_EXTS); rename it without the extension, or give it with its own -i")
			}
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			if _, lerr := os.Lstat(p); lerr == nil {
				return nil, fmt.Errorf("inventory %s: a broken symlink (Ansible cannot parse it either): %w", p, err)
			}
			return nil, fmt.Errorf("inventory %s: %w", dir, err)
		}
		if st.IsDir() {
			sub, err := loadDir(p, opts, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		}
		part, err := loadFile(p, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, part)
	}
	if len(notes.Warnings) > 0 && len(out) > 0 {
		out = append(out, notes)
	}
	return out, nil
}

// loadFile reads one file without its vars folders: a script through
// LoadScript (finalized; merge takes what it gave), else parseFile.
func loadFile(path string, opts Options) (*Inventory, error) {
	script, err := IsScript(path)
	if err != nil {
		return nil, err
	}
	if !script {
		return parseFile(path, opts.MaxInputSize)
	}
	opts.Script.maxInput = opts.MaxInputSize
	inv, err := LoadScript(context.Background(), path, opts.Script)
	if err != nil {
		return nil, err
	}
	if inv.loadErr != nil {
		return nil, inv.loadErr
	}
	return inv, nil
}

// parseFile reads an inventory file as Ansible's plugins would pick it:
// .yaml, .yml and .json are YAML, or INI when the YAML reading fails and
// the INI one does not (the ini plugin is tried next); a file with no
// extension is YAML when it is a YAML mapping (the yaml plugin accepts no
// extension and comes before ini), else INI; anything else is INI.
func parseFile(path string, max int64) (*Inventory, error) {
	data, err := ReadInput(path, max)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	if isVaultFile(data) {
		// Read as INI, each hex line of ciphertext would be a host.
		return nil, fmt.Errorf("inventory %w", vaultFileError(path))
	}
	inv := newInventory(path, KindFile)
	ext := strings.ToLower(filepath.Ext(path))
	asYAML := ext == ".yaml" || ext == ".yml" || ext == ".json"
	if ext == ".toml" {
		// Ansible tries its ini plugin before the toml one, but that fails
		// on TOML text (a "key = value" line is no host), so the file is
		// read as TOML first; one that is no TOML (an empty file) is
		// what the ini plugin makes of it.
		err := parseTOMLInto(inv, path, data)
		if err == nil {
			err = inv.loadErr
		}
		if err != nil {
			ini := newInventory(path, KindFile)
			if iniErr := parseINIInto(ini, path, data); iniErr == nil && ini.loadErr == nil {
				return ini, nil
			}
			return nil, err
		}
		return inv, nil
	}
	if filepath.Ext(path) == "" {
		root, err := yamlRoot(path, data)
		asYAML = err == nil && root != nil && root.Kind == yaml.MappingNode
	}
	if !asYAML {
		err = parseINIInto(inv, path, data)
	} else if err = parseYAMLInto(inv, path, data); err == nil {
		err = inv.loadErr
	}
	if err != nil && asYAML && filepath.Ext(path) != "" {
		// Ansible's ini plugin comes after the yaml one and reads what
		// it refused: INI text in a file named .yaml is common.
		ini := newInventory(path, KindFile)
		if iniErr := parseINIInto(ini, path, data); iniErr == nil && ini.loadErr == nil {
			return ini, nil
		}
	}
	if err != nil {
		return nil, err
	}
	if inv.loadErr != nil {
		return nil, inv.loadErr
	}
	return inv, nil
}

// merge adds another source's groups, hosts and inventory vars, as Ansible
// adds a later -i to the same inventory: a var set again takes the later
// value. Within one file gpush refuses a host var given two values (see
// addHost); across sources, overriding is what several -i are for, so the
// later wins, and a changed connection var (ansible_*) is warned about
// with both places, since it changes which machine gets dialled.
func (inv *Inventory) merge(part *Inventory) {
	inv.Warnings = append(inv.Warnings, part.Warnings...)
	finalized := part.resolved != nil
	for _, name := range part.groupOrder {
		pg := part.groups[name]
		g := inv.group(name, pg.at)
		if g.at == (Pos{}) {
			g.at = pg.at
		}
		for k, v := range pg.vars {
			g.vars[k], g.varPos[k] = v, pg.varPos[k]
		}
		if pg.hasPriority {
			g.priority, g.hasPriority = pg.priority, true
		}
		for _, c := range pg.children {
			// finalize made every parentless group a child of all; that is
			// decided again once all sources are in, as Ansible's
			// reconcile runs once at the end.
			if name == "all" && (c == "ungrouped" || finalized && len(part.groups[c].parents) == 1) {
				continue
			}
			inv.addChild(name, c, pg.childPos[c])
		}
	}
	for _, name := range part.hostOrder {
		ph := part.hosts[name]
		h := inv.hosts[name]
		if h == nil {
			h = &hostDef{name: name, at: ph.at, vars: make(map[string]any, len(ph.vars))}
			inv.hosts[name] = h
			inv.hostOrder = append(inv.hostOrder, name)
		}
		for _, k := range sortedKeys(ph.vars) {
			v := ph.vars[k]
			if old, ok := h.vars[k]; ok && strings.HasPrefix(k, "ansible_") && !reflect.DeepEqual(old, v) {
				inv.warnf(ph.posOf(k), "host %s: %s = %s overrides %s set at %s (the later inventory source wins, as in Ansible)",
					name, k, showValue(v), showValue(old), h.posOf(k))
			}
			h.vars[k] = v
			h.setPos(k, ph.posOf(k))
		}
	}
	for _, name := range part.groupOrder {
		g := inv.groups[name]
		for _, hn := range part.groups[name].hosts {
			if !g.hostSet[hn] {
				g.hostSet[hn] = true
				g.hosts = append(g.hosts, hn)
				h := inv.hosts[hn]
				h.groups = append(h.groups, name)
			}
		}
	}
}

// loadNamed resolves a value that is not a path: inventory/NAME.{yaml,yml,ini}
// under WorkDir then ConfigDir, a host list, or one host.
func loadNamed(spec string, opts Options) ([]*Inventory, string, error) {
	var tried []string
	if !strings.ContainsAny(spec, `/\,`) {
		for _, d := range inventoryDirs(opts) {
			tried = append(tried, filepath.Join(d, spec)+".{yaml,yml,ini}")
			for _, ext := range inventoryExts {
				p := filepath.Join(d, spec+ext)
				st, err := os.Stat(p)
				if err == nil && !st.IsDir() {
					inv, err := loadFile(p, opts)
					if err != nil {
						return nil, "", err
					}
					return []*Inventory{inv}, d, nil
				}
				if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
					return nil, "", fmt.Errorf("inventory %s: %w", spec, err)
				}
			}
		}
	}
	var inv *Inventory
	var err error
	switch {
	case strings.Contains(spec, ","):
		inv, err = hostList(spec)
	case strings.ContainsAny(spec, `/\`) || hasInventoryExt(spec):
		// Meant as a file: saying it is "not a host name" would mislead.
		err = fmt.Errorf("inventory %s: no such file", spec)
	default:
		inv, err = singleHost(spec, opts, tried)
	}
	if err != nil {
		return nil, "", err
	}
	return []*Inventory{inv}, "", nil
}

func inventoryDirs(opts Options) []string {
	var dirs []string
	wd := opts.WorkDir
	if wd == "" {
		wd, _ = os.Getwd()
	}
	if wd != "" {
		dirs = append(dirs, filepath.Join(wd, "inventory"))
	}
	cd := opts.ConfigDir
	if cd == "" {
		if ucd, err := os.UserConfigDir(); err == nil {
			cd = filepath.Join(ucd, "gpush")
		}
	}
	if cd != "" {
		dirs = append(dirs, filepath.Join(cd, "inventory"))
	}
	return dirs
}

// singleHost takes a bare word as one host, written as for ssh
// ([user@]host[:port]), only when it is plainly meant as one: localhost, an
// IP address, a name ssh_config gives a HostName or a proxy, or a name
// that resolves. Otherwise it is far more likely a misspelt inventory
// name, and the error says where inventories were looked for, instead of
// a DNS failure later on a "host" of that name.
func singleHost(spec string, opts Options, tried []string) (*Inventory, error) {
	vars := map[string]any{}
	name := spec
	if u, h, ok := strings.Cut(name, "@"); ok && u != "" && !strings.ContainsAny(u, ":@") {
		vars["ansible_user"], name = u, h
	}
	names, port, err := parseHostPattern(name, false)
	if isZonedIPv6(name) {
		// fe80::1%eth0: a link-local address with its interface.
		names, port, err = []string{name}, "", nil
	}
	if err != nil || len(names) != 1 || !hostNameRE.MatchString(names[0]) && !isZonedIPv6(names[0]) {
		return nil, fmt.Errorf("inventory %s: no such file, no inventory/%s.{yaml,yml,ini}, and not a host name", spec, spec)
	}
	name = names[0]
	if port != "" {
		vars["ansible_port"] = parseINIValue(port)
	}
	if name == "localhost" {
		vars["ansible_connection"] = "local"
	} else if known, err := knownHost(name, vars, opts); err != nil {
		return nil, fmt.Errorf("inventory %s: %w", spec, err)
	} else if !known {
		return nil, fmt.Errorf("inventory %s: no inventory found (tried ./%s, %s), and %s is no host that ssh_config names or DNS resolves (for a host anyway, write a host list: -i '%s,')",
			spec, spec, strings.Join(tried, ", "), name, spec)
	}
	inv := newInventory(spec, KindSingleHost)
	if err := inv.addHost("", name, vars, Pos{}, nil); err != nil {
		return nil, err
	}
	if err := inv.finalize(); err != nil {
		return nil, err
	}
	return inv, nil
}

// lookupTimeout bounds the DNS check of a bare --inventory word.
const lookupTimeout = 3 * time.Second

// knownHost tells whether a bare word names a host: an IP address, a name
// ssh_config gives a HostName, ProxyJump or ProxyCommand, or one the
// resolver knows.
func knownHost(name string, vars map[string]any, opts Options) (bool, error) {
	if net.ParseIP(strings.SplitN(name, "%", 2)[0]) != nil {
		return true, nil
	}
	home := opts.HomeDir
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	files, lenient := opts.SSHConfigFiles, map[string]bool{}
	if files == nil {
		files = []string{systemSSHConfig}
		lenient[systemSSHConfig] = true
		if home != "" {
			files = append([]string{filepath.Join(home, ".ssh", "config")}, files...)
		}
	}
	sc, _, err := loadSSHConfigCapped(files, lenient, home, opts.MaxInputSize)
	if err != nil {
		return false, err
	}
	seed := sshOptions{}
	if u, ok := vars["ansible_user"].(string); ok {
		seed.user = u
	}
	o, err := sc.evaluate(name, seed)
	if err != nil {
		return false, err
	}
	if o.host != name || o.proxyJump != "" && !strings.EqualFold(o.proxyJump, "none") ||
		o.proxyCommand != "" && !strings.EqualFold(o.proxyCommand, "none") {
		return true, nil
	}
	lookup := opts.LookupHost
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	addrs, err := lookup(ctx, name)
	return err == nil && len(addrs) > 0, nil
}
