package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// authKey is one key gpush will offer, and where it came from.
type authKey struct {
	signer ssh.Signer
	// from names the key for messages: the configured file, or
	// "ssh-agent" with the agent's comment.
	from string
	// agent: one of the agent's own keys, not a configured file's.
	agent bool
}

func (k authKey) String() string {
	return k.from + " (" + fingerprint(k.signer.PublicKey()) + ")"
}

// authPlan is the keys of one login, in the order they are offered, and
// which of them x/crypto actually put on the wire: the server may close the
// connection (MaxAuthTries) before the last is tried.
type authPlan struct {
	keys       []authKey
	closeAgent func()
	// agentKeys is how many keys the agent listed (offered or not).
	agentKeys      int
	identitiesOnly bool
	// files are the identity files read (the host's, or the defaults).
	files []string

	mu      sync.Mutex
	offered []bool
}

// signers wraps each key so that the plan learns when x/crypto offers it.
func (p *authPlan) signers() []ssh.Signer {
	p.mu.Lock()
	p.offered = make([]bool, len(p.keys))
	p.mu.Unlock()
	out := make([]ssh.Signer, len(p.keys))
	for i, k := range p.keys {
		mark := func() {
			p.mu.Lock()
			p.offered[i] = true
			p.mu.Unlock()
		}
		// The wrapper must keep the signer's algorithm interfaces: without
		// them x/crypto signs RSA keys with SHA-1 only, which OpenSSH refuses.
		switch s := k.signer.(type) {
		case ssh.MultiAlgorithmSigner:
			out[i] = &markMultiSigner{s, mark}
		case ssh.AlgorithmSigner:
			out[i] = &markAlgSigner{s, mark}
		default:
			out[i] = &markSigner{s, mark}
		}
	}
	return out
}

// split returns the keys offered and those never reached.
func (p *authPlan) split() (offered, notOffered []authKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range p.keys {
		if i < len(p.offered) && p.offered[i] {
			offered = append(offered, k)
		} else {
			notOffered = append(notOffered, k)
		}
	}
	return offered, notOffered
}

// x/crypto asks a signer for its public key right before it sends the
// query for that key; that call is the mark.
type markSigner struct {
	ssh.Signer
	mark func()
}

func (m *markSigner) PublicKey() ssh.PublicKey { m.mark(); return m.Signer.PublicKey() }

type markAlgSigner struct {
	ssh.AlgorithmSigner
	mark func()
}

func (m *markAlgSigner) PublicKey() ssh.PublicKey { m.mark(); return m.AlgorithmSigner.PublicKey() }

type markMultiSigner struct {
	ssh.MultiAlgorithmSigner
	mark func()
}

func (m *markMultiSigner) PublicKey() ssh.PublicKey {
	m.mark()
	return m.MultiAlgorithmSigner.PublicKey()
}

// planAuth gathers the keys to offer the way OpenSSH orders them: the
// configured identity files first, in order (the host's IdentityFiles, or
// the default keys when it names none), each through the agent's copy when
// the file cannot be used itself (encrypted, or only its .pub is there);
// then the agent's other keys, unless IdentitiesOnly. A server with
// MaxAuthTries 6 thus sees the configured key first even when the agent
// holds many. Duplicates are dropped. All keys go in one publickey method
// because x/crypto does not retry a method name that failed.
//
// The agent connection lives until deadline (the end of the login): an
// agent that hangs while signing must not hang the dial.
func planAuth(t target, o Options, deadline time.Time) *authPlan {
	p := &authPlan{closeAgent: func() {}, identitiesOnly: t.identitiesOnly}
	var agentKeys []*agent.Key
	var agentSigners []ssh.Signer
	if o.AgentSocket != "" && o.AgentSocket != "none" {
		ac, err := net.DialTimeout("unix", o.AgentSocket, 2*time.Second)
		if err != nil {
			o.Logger.Debug("ssh-agent not reachable", "socket", o.AgentSocket, "err", err)
		} else {
			p.closeAgent = func() { ac.Close() }
			ac.SetDeadline(deadline)
			client := agent.NewClient(ac)
			agentKeys, err = client.List()
			if err == nil {
				agentSigners, err = client.Signers()
			}
			if err != nil {
				o.Logger.Debug("ssh-agent listing failed", "socket", o.AgentSocket, "err", err)
				agentKeys, agentSigners = nil, nil
			}
			if len(agentKeys) != len(agentSigners) {
				agentKeys = nil // the agent changed between the two listings: use no comments
			}
		}
	}
	p.agentKeys = len(agentSigners)
	inAgent := func(pub ssh.PublicKey) int {
		blob := string(pub.Marshal())
		for i, s := range agentSigners {
			if string(s.PublicKey().Marshal()) == blob {
				return i
			}
		}
		return -1
	}
	agentName := func(i int) string {
		if i < len(agentKeys) && agentKeys[i].Comment != "" {
			return "ssh-agent key " + strconv.Quote(agentKeys[i].Comment)
		}
		return "ssh-agent key"
	}
	seen := map[string]bool{}
	add := func(k authKey) {
		blob := string(k.signer.PublicKey().Marshal())
		if !seen[blob] {
			seen[blob] = true
			p.keys = append(p.keys, k)
		}
	}

	files, explicit := t.keys, true
	if len(files) == 0 {
		files, explicit = o.DefaultKeys, false
	}
	p.files = files
	for _, f := range files {
		path := expandHome(f)
		s, err := loadKey(path)
		if err == nil {
			add(authKey{signer: s, from: f})
			continue
		}
		// The agent may hold the key of a file gpush cannot use itself (an
		// encrypted key, or only key.pub beside the path): OpenSSH then
		// signs with the agent's copy.
		if pub := publicKeyOf(path, err); pub != nil {
			if i := inAgent(pub); i >= 0 {
				add(authKey{signer: agentSigners[i], from: f + " via " + agentName(i)})
				continue
			}
		}
		level := slog.LevelDebug
		if explicit && !errors.Is(err, os.ErrNotExist) {
			level = slog.LevelWarn
		}
		o.Logger.Log(context.Background(), level, "skipping key", "host", t.name, "file", f, "err", err)
	}
	if !t.identitiesOnly {
		for i, s := range agentSigners {
			add(authKey{signer: s, from: agentName(i), agent: true})
		}
	} else if len(agentSigners) > 0 {
		o.Logger.Debug("IdentitiesOnly: not offering the agent's other keys", "host", t.name, "agent_keys", len(agentSigners))
	}
	return p
}

// publicKeyOf is the public half of an identity file loadKey could not
// use (loadErr): from an encrypted OpenSSH key itself, which stores it in
// the clear, or from path.pub; nil if neither has it.
func publicKeyOf(path string, loadErr error) ssh.PublicKey {
	var pm *ssh.PassphraseMissingError
	if errors.As(loadErr, &pm) && pm.PublicKey != nil {
		return pm.PublicKey
	}
	b, err := os.ReadFile(path + ".pub")
	if err != nil {
		return nil
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil
	}
	return pub
}

// authError explains a failed publickey login: what was offered, what the
// server did, and what to change.
func authError(err error, t target, p *authPlan) error {
	if len(p.keys) == 0 {
		files := strings.Join(p.files, ", ")
		if files == "" {
			files = "(no key files configured)"
		}
		agentSays := "no ssh-agent keys"
		if p.identitiesOnly && p.agentKeys > 0 {
			agentSays = fmt.Sprintf("IdentitiesOnly excludes the ssh-agent's %d keys", p.agentKeys)
		}
		return fmt.Errorf("no usable key for %s: %s, and none of these could be read: %s: %v",
			t.user, agentSays, files, err)
	}
	offered, rest := p.split()
	closedBy := serverDisconnect(err)
	closed := closedBy != "" || errors.Is(err, io.EOF)
	if !closed {
		msg := fmt.Sprintf("the server refused all %d keys offered for user %s (%s)", len(offered), t.user, keyList(offered))
		if len(rest) > 0 { // no signature algorithm in common with the server
			msg += fmt.Sprintf("; %d could not be offered (%s)", len(rest), keyList(rest))
		}
		return fmt.Errorf("%s: %v", msg, err)
	}
	why := "closed the connection"
	if closedBy != "" {
		why += " (" + strconv.Quote(closedBy) + ")"
	}
	if len(offered) == 0 {
		return fmt.Errorf("the server %s before any of the %d keys for user %s was offered (%s)",
			why, len(rest), t.user, keyList(rest))
	}
	if strings.Contains(closedBy, tooManyAuthFailures) {
		return maxAuthTriesError(t, p, offered, rest, why, true)
	}
	if len(rest) > 0 {
		// Hung up with keys left, saying nothing: most likely the same
		// limit, its goodbye lost.
		return maxAuthTriesError(t, p, offered, rest, why, false)
	}
	return fmt.Errorf("the server refused %d keys offered for user %s (%s) and %s", len(offered), t.user,
		keyList(offered), why)
}

// tooManyAuthFailures is how sshd says goodbye at MaxAuthTries refusals.
const tooManyAuthFailures = "Too many authentication failures"

// maxAuthTriesError: sshd hung up after MaxAuthTries refused keys. It
// counts every key offered and disconnects at the limit, so the limit is
// how many were offered; the agent's keys are what usually crowd it.
func maxAuthTriesError(t target, p *authPlan, offered, rest []authKey, why string, said bool) error {
	fromAgent := 0
	for _, k := range offered {
		if k.agent {
			fromAgent++
		}
	}
	agentKeys := fromAgent
	for _, k := range rest {
		if k.agent {
			agentKeys++
		}
	}
	limit := fmt.Sprintf("it allows MaxAuthTries %d", len(offered))
	if !said {
		limit = fmt.Sprintf("most likely it allows MaxAuthTries %d", len(offered))
	}
	msg := fmt.Sprintf("the server refused %d keys for user %s (%s) and %s: %s",
		len(offered), t.user, keyList(offered), why, limit)
	if len(rest) == 0 {
		// Every key was tried: none is authorized, the limit hid nothing.
		return errors.New(msg + "; every key gpush had was tried, and none is in the user's authorized_keys")
	}
	if agentKeys > 0 {
		msg += fmt.Sprintf(", and the ssh-agent offered %d of its %d keys", fromAgent, agentKeys)
	}
	msg += fmt.Sprintf("; the other %d were never tried (%s). ", len(rest), keyList(rest))
	fix := "Name the key to use (ansible_ssh_private_key_file, or IdentityFile in ~/.ssh/config): it is offered first"
	if p.identitiesOnly {
		fix += "; IdentitiesOnly is already set, so the configured files alone are more than the server allows: name fewer"
	} else {
		fix += "; with IdentitiesOnly yes (in ~/.ssh/config for these hosts, or ansible_ssh_common_args: -o IdentitiesOnly=yes) " +
			"only it is offered, not the agent's others"
	}
	fix += "; or remove keys from the agent (ssh-add -d), or raise MaxAuthTries in the server's sshd_config"
	return errors.New(msg + fix)
}

func keyList(keys []authKey) string {
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}

// serverDisconnect returns the reason of an SSH disconnect message in err
// ("" if none). x/crypto's disconnect type is unexported; its text is
// `ssh: disconnect, reason N: "message"`.
func serverDisconnect(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	i := strings.Index(s, "ssh: disconnect, reason ")
	if i < 0 {
		return ""
	}
	rest := s[i+len("ssh: disconnect, reason "):]
	if _, q, ok := strings.Cut(rest, ": "); ok {
		if u, err := strconv.Unquote(q); err == nil {
			return u
		}
		return q
	}
	return rest
}
