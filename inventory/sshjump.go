package inventory

import (
	"fmt"
	"strconv"
	"strings"
)

// JumpHop is one ProxyJump hop as OpenSSH 9.2 reads it (parse_jump in
// readconf.c): [user@]host[:port], or the URI form ssh://[user@]host[:port].
// Port is 0 when not given.
type JumpHop struct {
	User string
	Host string
	Port int
}

// String writes the hop as ssh -G prints the last one: user@, the host
// (in brackets when it is numeric, as dump_client_config does), :port.
func (h JumpHop) String() string {
	var b strings.Builder
	if h.User != "" {
		b.WriteString(h.User + "@")
	}
	if strings.Contains(h.Host, ":") || strings.Trim(h.Host, "0123456789.") == "" {
		b.WriteString("[" + h.Host + "]")
	} else {
		b.WriteString(h.Host)
	}
	if h.Port > 0 {
		b.WriteString(":" + strconv.Itoa(h.Port))
	}
	return b.String()
}

// ParseJumpHop reads one hop of a ProxyJump or -J list. A hop starting
// with "ssh://" (lower case: ssh compares it so) is parse_ssh_uri's URI:
// the user ends at the first '@' and loses any ";parameters", is
// percent-decoded ('+' is a space there), the host must be a valid domain
// name (so no IPv6 literal), and nothing may follow the port but "/".
// Anything else is parse_user_host_port's [user@]host[:port], the user
// ending at the last '@' and an IPv6 address in brackets.
func ParseJumpHop(spec string) (JumpHop, error) {
	bad := func(why string) (JumpHop, error) {
		return JumpHop{}, fmt.Errorf("bad ProxyJump hop %q: %s (want [user@]host[:port] or ssh://[user@]host[:port])", spec, why)
	}
	if rest, ok := strings.CutPrefix(spec, "ssh://"); ok {
		var h JumpHop
		if at := strings.IndexByte(rest, '@'); at >= 0 {
			user, _, _ := strings.Cut(rest[:at], ";")
			if user == "" {
				return bad("empty user")
			}
			u, ok := urlDecode(user)
			if !ok {
				return bad("bad %-escape in the user")
			}
			h.User, rest = u, rest[at+1:]
		}
		host, port, _ := strings.Cut(rest, ":")
		path := ""
		if i := strings.IndexByte(host, '/'); i >= 0 {
			host, path, port = host[:i], host[i+1:], ""
		} else if i := strings.IndexByte(port, '/'); i >= 0 {
			port, path = port[:i], port[i+1:]
		}
		if path != "" {
			return bad("a path after the host")
		}
		if strings.HasPrefix(host, "[") {
			return bad("an address in brackets (the URI form takes host names only)")
		}
		if why := validDomain(host); why != "" {
			return bad(why)
		}
		h.Host = strings.TrimSuffix(host, ".")
		if port != "" {
			p, err := strconv.Atoi(port)
			if err != nil || p < 1 || p > 65535 {
				return bad("bad port")
			}
			h.Port = p
		}
		return h, nil
	}
	var h JumpHop
	rest := spec
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if at == 0 {
			return bad("empty user")
		}
		h.User, rest = rest[:at], rest[at+1:]
	}
	if strings.Contains(rest, "/") {
		return bad("a '/' in the host outside the URI form")
	}
	host, port := rest, ""
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return bad("no closing ]")
		}
		host, rest = rest[1:end], rest[end+1:]
		switch {
		case rest == "":
		case rest[0] == ':':
			port = rest[1:]
		default:
			return bad("text after ]")
		}
	} else if i := strings.IndexByte(rest, ':'); i >= 0 {
		host, port = rest[:i], rest[i+1:]
	}
	if host == "" {
		return bad("no host")
	}
	h.Host = host
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return bad("bad port")
		}
		h.Port = p
	}
	return h, nil
}

// checkProxyJump checks every hop of a ProxyJump value as ssh does when it
// reads the line, whether or not its block applies: "none" alone, or hops
// separated by commas.
func checkProxyJump(v string) error {
	if strings.EqualFold(v, "none") {
		return nil
	}
	for _, hop := range strings.Split(v, ",") {
		if _, err := ParseJumpHop(hop); err != nil {
			return err
		}
	}
	return nil
}

// showProxyJump is a ProxyJump as ssh -G prints it: the hops before the
// last as written, the last one parsed.
func showProxyJump(v string) string {
	i := strings.LastIndexByte(v, ',')
	last, err := ParseJumpHop(v[i+1:])
	if err != nil {
		return v
	}
	return v[:i+1] + last.String()
}

// validDomain is OpenSSH's valid_domain: a letter or digit first, then
// letters, digits, '-', '_' and '.', no two dots in a row.
func validDomain(s string) string {
	if s == "" {
		return "no host"
	}
	if c := s[0]; !isAlnum(c) {
		return "the host starts with an invalid character"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '.' && i > 0 && s[i-1] == '.' {
			return "two dots in a row in the host"
		}
		if c != '.' && c != '-' && c != '_' && !isAlnum(c) {
			return "an invalid character in the host"
		}
	}
	return ""
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// urlDecode is OpenSSH's urldecode: %XX, and '+' for a space.
func urlDecode(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b.WriteByte(' ')
		case '%':
			if i+2 >= len(s) {
				return "", false
			}
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(n))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
