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
)

// ssh_config as OpenSSH 9.2's ssh(1) reads it. The files are parsed once
// (Include included); each host is then evaluated the way ssh evaluates its
// destination: Host and Match blocks in order, the first value obtained for
// a keyword wins, and a second pass when a block asks for "Match final".
// Only the keywords gpush uses are interpreted; others are kept as lines so
// that a block gpush cannot decide knows whether it would matter.

// maxIncludeDepth is OpenSSH's READCONF_MAX_DEPTH.
const maxIncludeDepth = 16

// sshConfig is the ssh_config files ssh would read, in order (the user's
// file first: for each keyword the first value found wins).
type sshConfig struct {
	files []*sshFile
	home  string
	local string // local user name, for %u and Match localuser
	uid   string // for %i
	// maxInput caps each file read, Include'd ones too.
	maxInput int64
}

type sshFile struct {
	path  string
	lines []sshLine
}

// sshLine is one directive. A line ssh could not parse keeps its error: it
// only matters (as an error) for a host whose settings it would decide.
type sshLine struct {
	file string
	num  int
	key  string   // keyword, lower case
	args []string // arguments, quotes removed
	raw  string   // the value as written (ProxyCommand takes it whole)
	err  error
	incl []*sshFile // Include: the files it names, in lexical order
}

func (l *sshLine) pos() string { return fmt.Sprintf("%s line %d", l.file, l.num) }

// loadSSHConfig reads the given files; a missing file is skipped, an
// unreadable one is an error naming it, except for files in lenient (the
// system-wide file, which the operator may not control): those are skipped
// with a warning. Directives gpush cannot evaluate are not load errors:
// they fail only the hosts whose settings they would decide.
func loadSSHConfig(paths []string, lenient map[string]bool, home string) (*sshConfig, []string, error) {
	return loadSSHConfigCapped(paths, lenient, home, 0)
}

// loadSSHConfigCapped is loadSSHConfig with each file capped at max bytes
// (0: InputCap's default).
func loadSSHConfigCapped(paths []string, lenient map[string]bool, home string, max int64) (*sshConfig, []string, error) {
	sc := &sshConfig{home: home, uid: strconv.Itoa(os.Getuid()), maxInput: max}
	var warnings []string
	if u, err := user.Current(); err == nil {
		sc.local = u.Username
	}
	for _, p := range paths {
		// Relative Include paths: ~/.ssh for the user's files (as ssh -F
		// files are), the system file's own folder (/etc/ssh) for it.
		inclDir := filepath.Join(home, ".ssh")
		system := lenient[p] || p == systemSSHConfig
		if system {
			inclDir = filepath.Dir(p)
		}
		f, err := sc.readFile(p, inclDir, system, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			if lenient[p] {
				warnings = append(warnings, err.Error()+" (file ignored)")
				continue
			}
			return nil, nil, err
		}
		sc.files = append(sc.files, f)
	}
	return sc, warnings, nil
}

func (sc *sshConfig) readFile(path, inclDir string, system bool, depth int) (*sshFile, error) {
	data, err := ReadInput(path, sc.maxInput)
	if err != nil {
		return nil, fmt.Errorf("ssh config: %w", err)
	}
	f := &sshFile{path: path}
	for i, text := range strings.Split(string(data), "\n") {
		l, ok := parseSSHLine(text)
		if !ok {
			continue
		}
		l.file, l.num = path, i+1
		if l.key == "proxyjump" && l.err == nil && len(l.args) > 0 {
			// ssh checks every hop as it reads the line, in a block that
			// applies or not, and refuses the whole configuration.
			if err := checkProxyJump(l.args[0]); err != nil {
				return nil, fmt.Errorf("ssh config %s: invalid ProxyJump: %w", l.pos(), err)
			}
		}
		if l.key == "include" && l.err == nil {
			if depth+1 >= maxIncludeDepth {
				return nil, fmt.Errorf("ssh config %s: too many nested Include (%d)", l.pos(), maxIncludeDepth)
			}
			for _, pat := range l.args {
				names, err := sc.includeGlob(pat, inclDir, system)
				if err != nil {
					return nil, fmt.Errorf("ssh config %s: Include %s: %w", l.pos(), pat, err)
				}
				for _, n := range names {
					sub, err := sc.readFile(n, inclDir, system, depth+1)
					if err != nil {
						return nil, err
					}
					l.incl = append(l.incl, sub)
				}
			}
		}
		f.lines = append(f.lines, l)
	}
	return f, nil
}

// includeGlob expands one Include argument as ssh does: ~ (user files
// only), then relative to inclDir, then glob(7) in lexical order; no match
// is no file, not an error.
func (sc *sshConfig) includeGlob(pat, inclDir string, system bool) ([]string, error) {
	if !system {
		var err error
		if pat, err = sc.tilde(pat); err != nil {
			return nil, err
		}
	}
	if !filepath.IsAbs(pat) {
		pat = filepath.Join(inclDir, pat)
	}
	names, err := filepath.Glob(pat)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		// glob(3) lists folders too; ssh then fails to read them as
		// configuration. Skip them rather than fail every host.
		if st, err := os.Stat(n); err == nil && !st.IsDir() {
			out = append(out, n)
		}
	}
	return out, nil
}

// parseSSHLine splits a line as readconf.c does: the keyword ends at white
// space or '=', one '=' may separate it from the arguments, which are split
// like argv_split (quotes, backslash escapes, '#' starting a comment).
func parseSSHLine(text string) (sshLine, bool) {
	text = strings.TrimRight(text, " \t\r\f\v")
	text = strings.TrimLeft(text, " \t\r\f\v")
	if text == "" || text[0] == '#' {
		return sshLine{}, false
	}
	end := strings.IndexAny(text, " \t=")
	if end < 0 {
		end = len(text)
	}
	l := sshLine{key: strings.ToLower(text[:end])}
	rest := strings.TrimLeft(text[end:], " \t")
	if strings.HasPrefix(rest, "=") {
		rest = strings.TrimLeft(rest[1:], " \t")
	}
	l.raw = rest
	l.args, l.err = splitSSHArgs(rest)
	if l.err != nil {
		l.err = fmt.Errorf("%s: %w", l.key, l.err)
	}
	return l, true
}

func splitSSHArgs(s string) ([]string, error) {
	var args []string
	for i := 0; i < len(s); {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) || s[i] == '#' {
			break
		}
		var b strings.Builder
		var quote byte
		for ; i < len(s); i++ {
			c := s[i]
			if quote == 0 && (c == ' ' || c == '\t') {
				break
			}
			switch {
			case c == '\\' && i+1 < len(s) && (s[i+1] == '\'' || s[i+1] == '"' || s[i+1] == '\\' || (quote == 0 && s[i+1] == ' ')):
				i++
				b.WriteByte(s[i])
			case quote == 0 && (c == '"' || c == '\''):
				quote = c
			case quote != 0 && c == quote:
				quote = 0
			default:
				b.WriteByte(c)
			}
		}
		if quote != 0 {
			return nil, errors.New("unterminated quote")
		}
		args = append(args, b.String())
	}
	return args, nil
}

// tilde expands ~ and ~user at the start of p, as tilde_expand_filename.
func (sc *sshConfig) tilde(p string) (string, error) {
	if !strings.HasPrefix(p, "~") {
		return p, nil
	}
	name, rest, _ := strings.Cut(p[1:], "/")
	dir := sc.home
	if name != "" {
		u, err := user.Lookup(name)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		dir = u.HomeDir
	} else if dir == "" {
		return "", fmt.Errorf("%s: no home directory", p)
	}
	return filepath.Join(dir, rest), nil
}

// SSHConfig is a set of ssh_config files, read once, completing hosts as
// `ssh` would. remote uses it for ProxyJump hops, so that a hop name is
// resolved exactly like an inventory host. Safe for concurrent use.
type SSHConfig struct{ sc *sshConfig }

// LoadSSHConfig reads files in order (for each keyword the first value
// found wins). A missing file is skipped; an unreadable one is an error
// naming it. home expands ~ ("" = os.UserHomeDir()).
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
// IdentitiesOnly, ProxyJump, ProxyCommand) from the files; what h already
// says wins, and is what Match user sees. h.Address, or else h.Name, is the
// name looked up.
func (c *SSHConfig) Complete(h *Host) error { return c.sc.complete(h) }

// complete fills what the inventory left unsaid from ssh_config, as
// `ssh -l USER -p PORT -i KEY <ansible_host or name>` would: the inventory's
// settings come first, as command-line options do for ssh, so they win and
// Match user sees the inventory's user.
func (sc *sshConfig) complete(h *Host) error {
	if !h.IsSSH() {
		if h.Address == "" {
			h.Address = h.Name
		}
		return nil
	}
	alias := h.Address
	if alias == "" {
		alias = h.Name
	}
	seed := sshOptions{user: h.User, port: h.Port, proxyJump: h.ProxyJump, proxyCommand: h.ProxyCommand}
	if h.IdentitiesOnly {
		seed.identitiesOnly = "yes"
	}
	if h.ConnectTimeout > 0 { // ansible_ssh_timeout: ssh -o ConnectTimeout
		seed.connectTimeout, seed.connectTimeoutSet = h.ConnectTimeout, true
	}
	o, err := sc.evaluate(alias, seed)
	if err != nil {
		return err
	}
	h.Address = o.host
	h.Port = o.port
	h.User = o.user
	for i, f := range h.IdentityFiles {
		if t, err := sc.tilde(f); err == nil {
			h.IdentityFiles[i] = t
		}
	}
	for _, f := range o.identityFiles {
		if strings.EqualFold(f.value, "none") {
			continue
		}
		p, ok, err := sc.expandIdentity(f.value, o)
		if err != nil {
			return fmt.Errorf("ssh config %s: IdentityFile %s: %w", f.pos, f.value, err)
		}
		if ok && !contains(h.IdentityFiles, p) {
			h.IdentityFiles = append(h.IdentityFiles, p)
		}
	}
	h.IdentitiesOnly = o.identitiesOnly == "yes"
	if h.ConnectTimeout == 0 {
		h.ConnectTimeout = o.connectTimeout
	}
	if h.ProxyJump == "" && h.ProxyCommand == "" {
		switch {
		case o.proxyCommand != "" && !strings.EqualFold(o.proxyCommand, "none"):
			h.ProxyCommand = o.proxyCommand
		case o.proxyJump != "" && !strings.EqualFold(o.proxyJump, "none") && o.proxyCommand == "":
			if h.ProxyJump, err = sc.expandProxyJump(o.proxyJump, o); err != nil {
				return fmt.Errorf("ssh config %s: ProxyJump %s: %w", o.proxyJumpPos, o.proxyJump, err)
			}
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
