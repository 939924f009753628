package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Options tunes Resolve. The zero value means "as on the operator's machine".
type Options struct {
	// WorkDir is where inventory/NAME.yaml is looked up first ("" = current directory).
	WorkDir string
	// ConfigDir is gpush's config dir; inventories are looked up in
	// ConfigDir/inventory/ ("" = os.UserConfigDir()/gpush).
	ConfigDir string
	// SSHConfigFiles are the ssh_config files to read, in order. nil means
	// ~/.ssh/config then /etc/ssh/ssh_config; an empty non-nil slice reads none.
	SSHConfigFiles []string
	// HomeDir expands ~ in key paths ("" = os.UserHomeDir()).
	HomeDir string
	// Script bounds an inventory script's runs (see LoadScript).
	Script ScriptOptions
	// LookupHost checks that a bare --inventory word resolves before it is
	// taken as one host (nil: net.DefaultResolver.LookupHost).
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// MaxInputSize caps each file read (inventory, vars and ssh_config
	// files) and an inventory script's output, in bytes; 0 means
	// $GPUSH_MAX_INPUT_SIZE, else DefaultMaxInputSize (see InputCap).
	MaxInputSize int64

	// specs, set by ResolveAll, are all the --inventory values to merge.
	specs []string
}

const systemSSHConfig = "/etc/ssh/ssh_config"

var inventoryExts = []string{".yaml", ".yml", ".ini"}

// hostNameRE is what a bare --inventory value must look like to be taken as
// one host name rather than a misspelt inventory name or path.
var hostNameRE = regexp.MustCompile(`^(?:[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)$`)

// Resolve turns an --inventory value into an Inventory, trying in order:
// a file path (run as an inventory script if IsScript); inventory/SPEC.{yaml,yml,ini} under WorkDir, then under
// ConfigDir; a comma-separated host list ("a,b" or "a,"); a single host
// ([user@]name[:port]), resolved through ssh_config as `ssh SPEC` would ("localhost" not in
// any inventory is the local machine). Hosts are completed from ssh_config
// where the inventory leaves HostName, Port, User, IdentityFile or
// ProxyJump unsaid.
func Resolve(spec string, opts Options) (*Inventory, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("inventory: empty --inventory value")
	}
	max, err := InputCap(opts.MaxInputSize)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", spec, err)
	}
	opts.MaxInputSize = max
	home := opts.HomeDir
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	sshFiles, lenient := opts.SSHConfigFiles, map[string]bool{}
	if sshFiles == nil {
		sshFiles = []string{systemSSHConfig}
		lenient[systemSSHConfig] = true
		if home != "" {
			sshFiles = append([]string{filepath.Join(home, ".ssh", "config")}, sshFiles...)
		}
	}
	inv, err := resolveSpec(spec, opts)
	if err != nil {
		return nil, err
	}
	sc, warnings, err := loadSSHConfigCapped(sshFiles, lenient, home, opts.MaxInputSize)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", spec, err)
	}
	inv.Warnings = append(inv.Warnings, warnings...)
	for _, name := range inv.hostOrder {
		if inv.hostErrs[name] != nil {
			continue // its own settings are already bad: ssh_config cannot fix them
		}
		h := inv.resolved[name]
		if err := sc.complete(&h); err != nil {
			// This host only: Select refuses it if the pattern picks it.
			inv.setHostErr(name, fmt.Errorf("inventory %s: host %s: %w", inv.Source, name, err))
			continue
		}
		inv.resolved[name] = h
	}
	return inv, nil
}

// resolveSpec loads what Resolve was given (every spec, for ResolveAll).
func resolveSpec(spec string, opts Options) (*Inventory, error) {
	specs := opts.specs
	if specs == nil {
		specs = []string{spec}
	}
	return loadAll(specs, opts)
}

// Load reads an inventory file (see parseFile for how its format is
// picked), plus group_vars/ and host_vars/
// beside it. No ssh_config completion (Resolve does that).
func Load(path string) (*Inventory, error) {
	inv, err := parseFile(path, 0)
	if err != nil {
		return nil, err
	}
	if err := loadVarDirs(inv, filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := inv.finalize(); err != nil {
		return nil, err
	}
	return inv, nil
}

func hasInventoryExt(spec string) bool {
	ext := strings.ToLower(filepath.Ext(spec))
	return ext == ".json" || contains(inventoryExts, ext)
}

// hostList reads "a,b,c" or "a," (Ansible's host list). Elements may carry a
// :port, an Ansible range (gpu[01:04]) or a node set (gpu[01-04,07]), and
// ClusterShell's operators work across them as in nodeset, left to right:
// "node[1-9]!node6," is eight hosts, not one named "node1!node6".
func hostList(spec string) (*Inventory, error) {
	inv := newInventory(spec, KindHostList)
	var steps []setStep
	for _, tok := range splitOutsideBrackets(spec, ',') {
		st, err := splitSetOps(tok)
		if err != nil {
			return nil, fmt.Errorf("inventory %q: %w", spec, err)
		}
		steps = append(steps, st...)
	}
	// A port counts where it adds names (',' and '^'), the last one written
	// winning as with Ansible's add_host; "!a:22" removes a at any port.
	ports := map[string]int{}
	names, err := evalSetSteps(steps, maxExpand, func(st setStep) ([]string, error) {
		names, port, err := parseListElem(st.operand)
		if err == nil && port != 0 && (st.op == ',' || st.op == '^') {
			for _, n := range names {
				ports[n] = port
			}
		}
		return names, err
	})
	if err != nil {
		return nil, fmt.Errorf("inventory %q: %w", spec, err)
	}
	for _, n := range names {
		vars := map[string]any{}
		if p := ports[n]; p != 0 {
			vars["ansible_port"] = p
		}
		if n == "localhost" {
			vars["ansible_connection"] = "local"
		}
		if err := inv.addHost("", n, vars, Pos{}, nil); err != nil {
			return nil, fmt.Errorf("inventory %q: %w", spec, err)
		}
	}
	if len(inv.hostOrder) == 0 {
		return nil, fmt.Errorf("inventory %q: no hosts in the list", spec)
	}
	if err := inv.finalize(); err != nil {
		return nil, err
	}
	return inv, nil
}

func parseListElem(elem string) ([]string, int, error) {
	if addr, port, ok := splitZonedIPv6(elem); ok {
		p := 0
		if port != "" {
			var err error
			if p, err = parsePort(port); err != nil {
				return nil, 0, fmt.Errorf("host %q: bad port: %w", elem, err)
			}
		}
		return []string{addr}, p, nil
	}
	names, port, err := parseHostPattern(elem, true)
	if err != nil {
		return nil, 0, err
	}
	p := 0
	if port != "" {
		p, _ = parsePort(port)
	}
	return names, p, nil
}

// isNodeSet tells a ClusterShell node set (gpu[01-04,07]) from an Ansible
// range (gpu[01:04]): brackets without a colon inside.
func isNodeSet(s string) bool {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		return false
	}
	inside := false
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '[':
			inside = true
		case ']':
			inside = false
		case ':':
			if inside {
				return false
			}
		}
	}
	return true
}
