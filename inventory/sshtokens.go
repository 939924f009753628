package inventory

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// expandTokens replaces %x tokens from vals; %% is '%'. A token the keyword
// does not take is an error, as in OpenSSH's percent_expand.
func expandTokens(s string, vals map[byte]string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", errors.New("'%' at the end")
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
			continue
		}
		v, ok := vals[s[i]]
		if !ok {
			return "", fmt.Errorf("unknown token %%%c", s[i])
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// expandEnv replaces ${NAME} with the environment's value; ok is false when
// one is unset (ssh then ignores the setting).
func expandEnv(s string) (string, bool, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), true, nil
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return "", false, errors.New("'${' without '}'")
		}
		v, set := os.LookupEnv(s[i+2 : i+j])
		if !set {
			return "", false, nil
		}
		b.WriteString(s[:i])
		b.WriteString(v)
		s = s[i+j+1:]
	}
}

// remoteTokens are what ssh knows about the connection once configured.
func (sc *sshConfig) remoteTokens(o *sshOptions) map[byte]string {
	port := o.port
	if port == 0 {
		port = 22
	}
	ruser := o.user
	if ruser == "" {
		ruser = sc.local
	}
	return map[byte]string{'h': o.host, 'n': o.alias, 'p': strconv.Itoa(port), 'r': ruser}
}

// expandIdentity expands an IdentityFile as ssh 9.2 does when it loads
// keys: ~ first, then ${ENV}, then %% %C %d %h %i %k %L %l %n %p %r %u.
// ok is false when it names an unset environment variable.
func (sc *sshConfig) expandIdentity(p string, o *sshOptions) (string, bool, error) {
	p, err := sc.tilde(p)
	if err != nil {
		return "", false, err
	}
	p, ok, err := expandEnv(p)
	if err != nil || !ok {
		return "", false, err
	}
	if !strings.Contains(p, "%") {
		return p, true, nil
	}
	vals := sc.remoteTokens(o)
	long, _ := os.Hostname()
	short, _, _ := strings.Cut(long, ".")
	sum := sha1.Sum([]byte(long + vals['h'] + vals['p'] + vals['r']))
	vals['C'] = hex.EncodeToString(sum[:])
	vals['d'] = sc.home
	vals['i'] = sc.uid
	vals['k'] = o.alias
	if o.hostKeyAlias != "" {
		vals['k'] = o.hostKeyAlias
	}
	vals['L'] = short
	vals['l'] = long
	vals['u'] = sc.local
	p, err = expandTokens(p, vals)
	return p, err == nil, err
}

// expandProxyJump expands %% %h %n %p %r in a ProxyJump (ssh expands them
// in the command it builds from the hops: %h is the destination).
func (sc *sshConfig) expandProxyJump(j string, o *sshOptions) (string, error) {
	return expandTokens(j, sc.remoteTokens(o))
}
