package inventory

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

//lint:file-ignore ST1005 these errors start with ssh_config's keywords (Match, Host), spelled as ssh_config spells them, and are always shown after the line they come from (file:line: Match ...).

// sshOptions are the values ssh obtained for the keywords gpush uses; ""
// and 0 mean not obtained yet (the first value obtained wins).
type sshOptions struct {
	hostName          string
	hostNamePos       string
	user              string
	port              int
	identityFiles     []sshValue // raw, as ssh -G prints them
	identitiesOnly    string     // "", "yes" or "no"
	proxyJump         string     // raw; "none" counts as obtained
	proxyJumpPos      string
	proxyCommand      string // raw; "none" counts as obtained
	hostKeyAlias      string
	connectTimeout    time.Duration // 0 with connectTimeoutSet: "none"
	connectTimeoutSet bool
	canonicalize      string
	ignoreUnknown     string // IgnoreUnknown's pattern list, as obtained

	alias string // the name ssh was given (%n, Match originalhost)
	host  string // what ssh dials once done: HostName with %h expanded, lower case
}

type sshValue struct{ value, pos string }

// blockState is whether the lines under a Host or Match apply: a block gpush
// cannot decide (Match exec, a criterion OpenSSH 9.2 lacks) is undecided,
// and an error for a host only when one of its lines would set a value.
type blockState struct {
	active bool
	why    error // non-nil: undecided, and why
}

type sshEval struct {
	sc    *sshConfig
	o     *sshOptions
	host  string // what Host lines match: the name given, then (final pass) the hostname
	final bool
	// wantFinal: a Match final was seen, so ssh parses everything again.
	wantFinal bool
}

// evaluate is ssh's process_config_files: a first pass, then a final pass
// when a Match final was seen or CanonicalizeHostname is on. gpush does not
// canonicalize through DNS: in the final pass the hostname is the one the
// files gave, so "Match canonical" matches there just as "final" does.
func (sc *sshConfig) evaluate(alias string, seed sshOptions) (*sshOptions, error) {
	o := seed
	o.alias = alias
	e := &sshEval{sc: sc, o: &o, host: alias}
	for _, f := range sc.files {
		if err := e.walk(f, blockState{active: true}); err != nil {
			return nil, err
		}
	}
	host, err := e.hostName()
	if err != nil {
		return nil, err
	}
	host = lowerHost(host)
	if c := strings.ToLower(o.canonicalize); e.wantFinal || c == "yes" || c == "always" {
		o.hostName = host
		e.host, e.final = host, true
		for _, f := range sc.files {
			if err := e.walk(f, blockState{active: true}); err != nil {
				return nil, err
			}
		}
	}
	o.host = host
	return &o, nil
}

// lowerHost lower-cases a name as ssh does, but not an address (ssh leaves
// those to canonicalisation; an IPv6 zone such as %eth0 is case-sensitive).
func lowerHost(h string) string {
	if _, err := netip.ParseAddr(h); err == nil {
		return h
	}
	return strings.ToLower(h)
}

// hostName is HostName with its %h expanded (the name given), else the name
// given: what Match host tests in the first pass.
func (e *sshEval) hostName() (string, error) {
	if e.o.hostName == "" {
		return e.o.alias, nil
	}
	if e.final {
		return e.o.hostName, nil
	}
	h, err := expandTokens(e.o.hostName, map[byte]string{'h': e.o.alias})
	if err != nil {
		return "", fmt.Errorf("ssh config %s: HostName %s: %w", e.o.hostNamePos, e.o.hostName, err)
	}
	return h, nil
}

// walk reads one file's lines in the state the including line left; an
// Include restores that state after it, as readconf.c does.
func (e *sshEval) walk(f *sshFile, st blockState) error {
	outer := st
	for i := range f.lines {
		l := &f.lines[i]
		switch l.key {
		case "host", "match":
			if outer.why != nil {
				// Under an undecided Include, nothing inside can be decided.
				continue
			}
			if !outer.active {
				// ssh reads a file included from an inactive block with
				// nothing in it matching, but still notes Match final.
				if l.key == "match" && hasFinal(l.args) {
					e.wantFinal = true
				}
				continue
			}
			if l.key == "host" {
				st = e.hostLine(l)
			} else {
				st = e.matchLine(l)
			}
			if st.why != nil {
				st.why = fmt.Errorf("%s: %w", l.pos(), st.why)
			}
		case "include":
			for _, sub := range l.incl {
				if err := e.walk(sub, st); err != nil {
					return err
				}
			}
		default:
			if !sshKeywords[l.key] {
				if err := e.unknownKeyword(l); err != nil {
					return err
				}
				continue
			}
			if l.key == "ignoreunknown" && st.active && st.why == nil && e.o.ignoreUnknown == "" && l.err == nil && len(l.args) > 0 {
				// The first obtained wins, as for other keywords; it
				// applies to the lines read after it.
				e.o.ignoreUnknown = l.args[0]
			}
			if st.why != nil {
				if e.wouldSet(l) {
					return fmt.Errorf("ssh config %s: %s for host %s: set in a block gpush cannot decide (%w)",
						l.pos(), keywordName[l.key], e.o.alias, st.why)
				}
				continue
			}
			if st.active {
				if err := e.set(l); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func hasFinal(args []string) bool {
	for _, a := range args {
		if strings.EqualFold(strings.TrimPrefix(a, "!"), "final") {
			return true
		}
	}
	return false
}

// hostLine: a Host line applies when the name matches one of its patterns
// and none of its negated ones. Host patterns are case-sensitive in ssh.
func (e *sshEval) hostLine(l *sshLine) blockState {
	if l.err != nil {
		return blockState{why: l.err}
	}
	if len(l.args) == 0 {
		return blockState{why: fmt.Errorf("Host without a pattern")}
	}
	matched := false
	for _, p := range l.args {
		if neg, ok := strings.CutPrefix(p, "!"); ok {
			if matchGlob(e.host, neg) {
				return blockState{}
			}
		} else if matchGlob(e.host, p) {
			matched = true
		}
	}
	return blockState{active: matched}
}

// matchLine evaluates a Match line as match_cfg_line in OpenSSH 9.2: every
// criterion must hold; "!" negates one. A criterion gpush cannot evaluate
// makes the block undecided unless another one already rules it out.
func (e *sshEval) matchLine(l *sshLine) blockState {
	if l.err != nil {
		return blockState{why: l.err}
	}
	if len(l.args) == 0 {
		return blockState{why: fmt.Errorf("Match without criteria")}
	}
	args := matchArgs(l.args)
	result := true
	var why error
	for i := 0; i < len(args); i++ {
		attr, negate := strings.CutPrefix(args[i], "!")
		la := strings.ToLower(attr)
		var r bool
		switch la {
		case "all":
			// Only alone, or after canonical/final, and last.
			if i != len(args)-1 || !onlyCanonFinal(args[:i]) {
				return blockState{why: fmt.Errorf("Match all cannot be combined with other criteria")}
			}
			r = true
		case "canonical", "final":
			if la == "final" {
				e.wantFinal = true
			}
			r = e.final
		case "host", "originalhost", "user", "localuser", "exec":
			if i+1 >= len(args) {
				return blockState{why: fmt.Errorf("Match %s without an argument", attr)}
			}
			i++
			arg := args[i]
			switch la {
			case "host":
				h, err := e.hostName()
				if err != nil {
					return blockState{why: err}
				}
				r = matchPatternList(strings.ToLower(h), arg, true) == 1
			case "originalhost":
				r = matchPatternList(strings.ToLower(e.o.alias), arg, true) == 1
			case "user":
				u := e.o.user
				if u == "" {
					u = e.sc.local
				}
				r = matchPatternList(u, arg, false) == 1
			case "localuser":
				r = matchPatternList(e.sc.local, arg, false) == 1
			case "exec":
				if why == nil {
					why = fmt.Errorf("Match exec %q: gpush does not run commands from ssh_config (put what this block sets in the inventory, or in a Host block)", arg)
				}
				continue
			}
		default:
			// OpenSSH 9.2 rejects it (localnetwork and tagged came later):
			// what follows cannot be parsed, so stop here.
			if why == nil {
				why = fmt.Errorf("Match %s: not a criterion OpenSSH 9.2 knows", attr)
			}
			i = len(args)
			continue
		}
		if r == negate {
			result = false
		}
	}
	if !result {
		return blockState{}
	}
	if why != nil {
		return blockState{why: why}
	}
	return blockState{active: true}
}

// matchArgs splits a Match line's words as match_cfg_line reads them with
// strdelim, which ends a word at white space or at one '=': "host=b",
// "host= b", "host =b" and "host = b" are all the criterion host with the
// argument b. Only criteria are split, so an argument keeps its '='s
// (exec "test a=b"); a second '=' ("host==b") stays in the argument,
// where ssh refuses it too.
func matchArgs(words []string) []string {
	out := make([]string, 0, len(words))
	for i := 0; i < len(words); i++ {
		w := words[i]
		crit, val, split := strings.Cut(w, "=")
		la := strings.ToLower(strings.TrimPrefix(crit, "!"))
		takesArg := la != "all" && la != "canonical" && la != "final"
		if !split {
			out = append(out, w)
			if takesArg && i+1 < len(words) {
				// "host = b" and "host =b": the '=' is the delimiter.
				next := words[i+1]
				if next == "=" && i+2 < len(words) {
					i++
					next = words[i+1]
				} else if len(next) > 1 && next[0] == '=' {
					next = next[1:]
				}
				out = append(out, next)
				i++
			}
			continue
		}
		out = append(out, crit)
		switch {
		case val != "":
			out = append(out, val)
		case takesArg && i+1 < len(words):
			out = append(out, words[i+1])
			i++
		}
	}
	return out
}

func onlyCanonFinal(args []string) bool {
	for _, a := range args {
		a = strings.ToLower(strings.TrimPrefix(a, "!"))
		if a != "canonical" && a != "final" {
			return false
		}
	}
	return true
}

// keywordName spells the keywords gpush uses as ssh_config(5) does.
var keywordName = map[string]string{
	"hostname": "HostName", "user": "User", "port": "Port", "identityfile": "IdentityFile",
	"identitiesonly": "IdentitiesOnly", "proxyjump": "ProxyJump", "proxycommand": "ProxyCommand",
	"hostkeyalias": "HostKeyAlias", "canonicalizehostname": "CanonicalizeHostname", "connecttimeout": "ConnectTimeout",
}

// wouldSet: whether line l, were it active, would change what gpush uses.
func (e *sshEval) wouldSet(l *sshLine) bool {
	o := e.o
	switch l.key {
	case "hostname":
		return o.hostName == ""
	case "user":
		return o.user == ""
	case "port":
		return o.port == 0
	case "identityfile":
		return true
	case "identitiesonly":
		return o.identitiesOnly == ""
	case "proxyjump":
		return o.proxyJump == "" && o.proxyCommand == ""
	case "proxycommand":
		return o.proxyCommand == "" && (o.proxyJump == "" || strings.EqualFold(o.proxyJump, "none"))
	case "hostkeyalias":
		return o.hostKeyAlias == ""
	case "connecttimeout":
		return !o.connectTimeoutSet
	case "canonicalizehostname":
		return !e.final && o.canonicalize == ""
	}
	return false
}

// set applies an active line: the first value obtained wins, IdentityFile
// accumulates (without duplicates). Keywords gpush does not use are ignored.
func (e *sshEval) set(l *sshLine) error {
	if !e.wouldSet(l) {
		return nil
	}
	if l.err != nil {
		return fmt.Errorf("ssh config %s: %w", l.pos(), l.err)
	}
	first := func() (string, error) {
		if len(l.args) == 0 {
			return "", fmt.Errorf("ssh config %s: %s without a value", l.pos(), l.key)
		}
		return l.args[0], nil
	}
	o := e.o
	if l.key == "proxycommand" {
		// The rest of the line, as written: it is a shell command.
		if l.raw == "" {
			return fmt.Errorf("ssh config %s: ProxyCommand without a value", l.pos())
		}
		o.proxyCommand = l.raw
		return nil
	}
	v, err := first()
	if err != nil {
		return err
	}
	switch l.key {
	case "hostname":
		o.hostName, o.hostNamePos = v, l.pos()
	case "user":
		o.user = v
	case "port":
		if o.port, err = parsePort(v); err != nil {
			return fmt.Errorf("ssh config %s: Port: %w", l.pos(), err)
		}
	case "identityfile":
		for _, f := range o.identityFiles {
			if f.value == v {
				return nil
			}
		}
		o.identityFiles = append(o.identityFiles, sshValue{v, l.pos()})
	case "identitiesonly":
		switch strings.ToLower(v) {
		case "yes", "true":
			o.identitiesOnly = "yes"
		case "no", "false":
			o.identitiesOnly = "no"
		default:
			return fmt.Errorf("ssh config %s: IdentitiesOnly %q: want yes or no", l.pos(), v)
		}
	case "proxyjump":
		o.proxyJump, o.proxyJumpPos = v, l.pos()
	case "hostkeyalias":
		o.hostKeyAlias = v
	case "connecttimeout":
		if o.connectTimeout, err = parseSSHTime(v); err != nil {
			return fmt.Errorf("ssh config %s: ConnectTimeout: %w", l.pos(), err)
		}
		o.connectTimeoutSet = true
	case "canonicalizehostname":
		o.canonicalize = v
	}
	return nil
}

// matchPatternList is OpenSSH's match_pattern_list: a comma-separated list
// of patterns, "!" negating one; 1 if a pattern matches and no negated one
// does, -1 if a negated one matches, 0 otherwise.
func matchPatternList(s, list string, lower bool) int {
	got := 0
	for _, p := range strings.Split(list, ",") {
		neg := strings.HasPrefix(p, "!")
		if neg {
			p = p[1:]
		}
		if lower {
			p = strings.ToLower(p)
		}
		if matchGlob(s, p) {
			if neg {
				return -1
			}
			got = 1
		}
	}
	return got
}

// matchGlob is OpenSSH's match_pattern: '*' any run, '?' one byte, nothing
// else special, case-sensitive. Backtracking only to the last '*' keeps it
// linear in practice, whatever the pattern.
func matchGlob(s, p string) bool {
	si, pi := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			si++
			pi++
		case star >= 0:
			mark++
			si, pi = mark, star+1
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// parseSSHTime reads a time as OpenSSH's convtime does: "none", or seconds
// with optional s/m/h/d/w units, concatenated ("90", "1m30s", "2M").
func parseSSHTime(v string) (time.Duration, error) {
	if strings.EqualFold(v, "none") {
		return 0, nil
	}
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
	var total time.Duration
	rest := v
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i > 9 {
			return 0, fmt.Errorf("%q is not a time (seconds, or 1m30s; s m h d w units)", v)
		}
		n, _ := strconv.Atoi(rest[:i])
		unit := time.Second
		if i < len(rest) {
			u, ok := units[rest[i]|0x20]
			if !ok {
				return 0, fmt.Errorf("%q is not a time (seconds, or 1m30s; s m h d w units)", v)
			}
			unit = u
			i++
		}
		total += time.Duration(n) * unit
		rest = rest[i:]
	}
	return total, nil
}
