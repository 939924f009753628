package inventory

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"os"
	"os/user"
	"strconv"
)

// Connection is the effective connection gpush dials for a host, as
// `gpush hosts --json` shows it under _meta.gpush.connections.
type Connection struct {
	Address string `json:"address"`
	// Port is the port dialled: 22 when neither the inventory nor
	// ssh_config set one; 0 (absent) for a local host.
	Port           int      `json:"port,omitempty"`
	User           string   `json:"user,omitempty"`
	IdentityFiles  []string `json:"identity_files"`
	IdentitiesOnly bool     `json:"identities_only"`
	ProxyJump      string   `json:"proxy_jump,omitempty"`
	ProxyCommand   string   `json:"proxy_command,omitempty"`
	Connection     string   `json:"connection"`
	Become         bool     `json:"become"`
	// ConnectTimeout is ansible_ssh_timeout or ssh_config ConnectTimeout,
	// in seconds; absent for gpush's default.
	ConnectTimeout float64 `json:"connect_timeout,omitempty"`
	// Dial is address:port as net.Dial takes it, IPv6 in brackets with its
	// zone ("[fe80::1%eth0]:22"): unambiguous where "fe80::1:22" is not.
	Dial string `json:"dial,omitempty"`
	// Error is why the host cannot be reached (HostErr), if it cannot.
	Error string `json:"error,omitempty"`
}

// ConnectionOf is h's effective connection: defaults filled in as the
// dialer fills them (port 22, the local user).
func (inv *Inventory) ConnectionOf(h Host) Connection {
	c := Connection{
		Address: h.Address, Port: h.Port, User: h.User,
		IdentityFiles: append([]string{}, h.IdentityFiles...), IdentitiesOnly: h.IdentitiesOnly,
		ProxyJump: h.ProxyJump, ProxyCommand: h.ProxyCommand, Connection: h.Connection, Become: h.Become,
		ConnectTimeout: h.ConnectTimeout.Seconds(),
	}
	if c.Address == "" {
		c.Address = h.Name
	}
	if c.User == "" {
		c.User = localUserName()
	}
	if h.IsSSH() {
		if c.Port == 0 {
			c.Port = 22
		}
		c.Dial = net.JoinHostPort(c.Address, strconv.Itoa(c.Port))
	}
	if err := inv.HostErr(h.Name); err != nil {
		c.Error = err.Error()
	}
	return c
}

func localUserName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// nonFinite stands for ±Inf and NaN while encoding/json (which refuses
// them) renders the rest; pythonFloats then writes them as Python's json
// module does, so the output matches ansible-inventory --list.
type nonFinite struct {
	nonce string
	seen  bool
}

func newNonFinite() (*nonFinite, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("nonce for non-finite floats: %w", err)
	}
	return &nonFinite{nonce: "gpush-nonfinite-" + hex.EncodeToString(b) + ":"}, nil
}

// replace returns v with every non-finite float a placeholder string (a
// copy where something changed; v itself is never modified).
func (nf *nonFinite) replace(v any) any {
	switch t := v.(type) {
	case float64:
		if math.IsInf(t, 1) {
			nf.seen = true
			return nf.nonce + "Infinity"
		} else if math.IsInf(t, -1) {
			nf.seen = true
			return nf.nonce + "-Infinity"
		} else if math.IsNaN(t) {
			nf.seen = true
			return nf.nonce + "NaN"
		}
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = nf.replace(x)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, x := range t {
			l[i] = nf.replace(x)
		}
		return l
	}
	return v
}

// pythonFloats swaps the placeholders in rendered JSON for Python's tokens.
func (nf *nonFinite) pythonFloats(data []byte) []byte {
	if !nf.seen {
		return data
	}
	for _, tok := range []string{"Infinity", "-Infinity", "NaN"} {
		data = bytes.ReplaceAll(data, []byte(`"`+nf.nonce+tok+`"`), []byte(tok))
	}
	return data
}
