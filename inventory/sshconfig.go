package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"
)

// sshConfig is the ssh_config files ssh would read, in order (the user's
// file first: for each keyword the first value found wins).
type sshConfig struct {
	files []sshConfigFile
	home  string
	local string // local user name, for %u
}

type sshConfigFile struct {
	path string
	cfg  *ssh_config.Config
}

// loadSSHConfig reads the given files; a missing file is skipped, an
// unreadable or malformed one is an error naming it, except for files in
// lenient (the system-wide file, which the operator may not control and
// which can hold directives the parser rejects, such as Fedora's
// "Match final"): those are skipped with a warning.
func loadSSHConfig(paths []string, lenient map[string]bool, home string) (*sshConfig, []string, error) {
	sc := &sshConfig{home: home}
	var warnings []string
	if u, err := user.Current(); err == nil {
		sc.local = u.Username
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var cfg *ssh_config.Config
		if err == nil {
			cfg, err = ssh_config.Decode(f)
			f.Close()
			if err != nil {
				err = fmt.Errorf("ssh config %s: %w", p, err)
			}
		} else {
			err = fmt.Errorf("ssh config: %w", err)
		}
		if err != nil {
			if lenient[p] {
				warnings = append(warnings, err.Error()+" (file ignored)")
				continue
			}
			return nil, nil, err
		}
		sc.files = append(sc.files, sshConfigFile{p, cfg})
	}
	return sc, warnings, nil
}

// SSHConfig is a set of ssh_config files, read once, completing hosts as
// `ssh` would. remote uses it for ProxyJump hops, so that a hop name is
// resolved exactly like an inventory host. Safe for concurrent use.
type SSHConfig struct{ sc *sshConfig }

// LoadSSHConfig reads files in order (for each keyword the first value
// found wins). A missing file is skipped; an unreadable or malformed one is
// an error naming it. home expands ~ ("" = os.UserHomeDir()).
func LoadSSHConfig(files []string, home string) (*SSHConfig, error) {
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	sc, _, err := loadSSHConfig(files, nil, home)
	if err != nil {
		return nil, err
	}
	return &SSHConfig{sc}, nil
}

// Complete fills what h leaves unsaid (Address, Port, User, IdentityFiles,
// ProxyJump) from the files; what h already says wins. h.Address, or else
// h.Name, is the name looked up.
func (c *SSHConfig) Complete(h *Host) error { return c.sc.complete(h) }

func (sc *sshConfig) get(alias, key string) (string, string, error) {
	for _, f := range sc.files {
		v, err := f.cfg.Get(alias, key)
		if err != nil {
			return "", f.path, fmt.Errorf("ssh config %s: host %s: %s: %w", f.path, alias, key, err)
		}
		if v != "" {
			return v, f.path, nil
		}
	}
	return "", "", nil
}

func (sc *sshConfig) getAll(alias, key string) ([]string, error) {
	var out []string
	for _, f := range sc.files {
		v, err := f.cfg.GetAll(alias, key)
		if err != nil {
			return nil, fmt.Errorf("ssh config %s: host %s: %s: %w", f.path, alias, key, err)
		}
		out = append(out, v...)
	}
	return out, nil
}

// complete fills what the inventory left unsaid from ssh_config, as
// `ssh <ansible_host or name>` would: HostName, Port, User, IdentityFile,
// IdentitiesOnly, ProxyJump. Inventory settings win over ssh_config.
func (sc *sshConfig) complete(h *Host) error {
	if h.IsLocal() {
		if h.Address == "" {
			h.Address = h.Name
		}
		return nil
	}
	alias := h.Address
	if alias == "" {
		alias = h.Name
	}
	hostName, _, err := sc.get(alias, "HostName")
	if err != nil {
		return err
	}
	if hostName != "" {
		h.Address = sc.expand(hostName, alias, alias, "", 0)
	} else {
		h.Address = alias
	}
	if h.Port == 0 {
		p, path, err := sc.get(alias, "Port")
		if err != nil {
			return err
		}
		if p != "" {
			if h.Port, err = parsePort(p); err != nil {
				return fmt.Errorf("ssh config %s: host %s: Port: %w", path, alias, err)
			}
		}
	}
	if h.User == "" {
		u, _, err := sc.get(alias, "User")
		if err != nil {
			return err
		}
		h.User = sc.expand(u, alias, h.Address, "", h.Port)
	}
	files, err := sc.getAll(alias, "IdentityFile")
	if err != nil {
		return err
	}
	for i, f := range h.IdentityFiles {
		h.IdentityFiles[i] = sc.expandPath(f)
	}
	for _, f := range files {
		if strings.EqualFold(f, "none") {
			continue
		}
		f = sc.expandPath(sc.expand(f, alias, h.Address, h.User, h.Port))
		if !contains(h.IdentityFiles, f) {
			h.IdentityFiles = append(h.IdentityFiles, f)
		}
	}
	if !h.IdentitiesOnly {
		v, _, err := sc.get(alias, "IdentitiesOnly")
		if err != nil {
			return err
		}
		h.IdentitiesOnly = strings.EqualFold(v, "yes")
	}
	if h.ProxyJump == "" {
		j, _, err := sc.get(alias, "ProxyJump")
		if err != nil {
			return err
		}
		if !strings.EqualFold(j, "none") {
			h.ProxyJump = j
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// expand replaces the ssh_config tokens gpush can know: %% %h %n %r %p %u %d.
func (sc *sshConfig) expand(s, alias, host, remoteUser string, port int) string {
	if !strings.Contains(s, "%") {
		return s
	}
	if port == 0 {
		port = 22
	}
	if remoteUser == "" {
		remoteUser = sc.local
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case '%':
			b.WriteByte('%')
		case 'h':
			b.WriteString(host)
		case 'n':
			b.WriteString(alias)
		case 'r':
			b.WriteString(remoteUser)
		case 'p':
			b.WriteString(strconv.Itoa(port))
		case 'u':
			b.WriteString(sc.local)
		case 'd':
			b.WriteString(sc.home)
		default:
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func (sc *sshConfig) expandPath(p string) string {
	if sc.home != "" && (p == "~" || strings.HasPrefix(p, "~/")) {
		return filepath.Join(sc.home, p[1:])
	}
	return p
}
