package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Dial opens the connection to h through the transport registered for its
// connection (h.Connection; "" is ssh): see transport.go. The returned
// Conn is reused by every call of a run.
func Dial(ctx context.Context, h Host, opts Options) (Conn, error) {
	o := opts.withDefaults()
	if h.ConnectTimeout > 0 { // the host's own: ansible_ssh_timeout, ssh_config ConnectTimeout
		o.ConnectTimeout = h.ConnectTimeout
	}
	if o.HostKeyPolicy != HostKeyStrict && o.HostKeyPolicy != HostKeyAcceptNew {
		return nil, &DialError{Host: h.Name, Addr: h.Address, Stage: StageConfig,
			Err: fmt.Errorf("unknown host key policy %q (want %q or %q)", o.HostKeyPolicy, HostKeyStrict, HostKeyAcceptNew)}
	}
	name := h.Connection
	if name == "" {
		name = "ssh"
	}
	open, ok := opener(name)
	if !ok {
		return nil, &DialError{Host: h.Name, Addr: h.Address, Stage: StageConfig,
			Err: fmt.Errorf("unsupported connection %q (want one of %v)", h.Connection, Connections())}
	}
	return open(ctx, h, o)
}

// target is one SSH endpoint: a jump host or the final host.
type target struct {
	name string // for messages: Host.Name or the hop as written
	host string
	port int
	user string
	keys []string // identity files; the default keys when empty
	// identitiesOnly offers only keys, never the agent's others.
	identitiesOnly bool
	isHop          bool
	// proxyCommand carries the first connection (see proxycommand.go);
	// orig is the name it knows as %n.
	proxyCommand, orig string
}

func (t target) addr() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// localUser is the default login name; looked up once, not per dial.
var localUser = sync.OnceValue(func() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
})

func dialSSH(ctx context.Context, h Host, o Options) (*sshConn, error) {
	addr := h.Address
	if addr == "" {
		addr = h.Name
	}
	final := target{name: h.Name, host: addr, port: h.Port, user: h.User, keys: h.IdentityFiles,
		identitiesOnly: h.IdentitiesOnly}
	if final.port == 0 {
		final.port = 22
	}
	if final.user == "" {
		final.user = localUser()
	}
	final.proxyCommand, final.orig = proxyCommandOf(h.ProxyCommand), h.Name
	var hops []target
	if strings.TrimSpace(h.ProxyJump) != "" && !strings.EqualFold(strings.TrimSpace(h.ProxyJump), "none") {
		if final.proxyCommand != "" {
			return nil, &DialError{Host: h.Name, Addr: final.addr(), Stage: StageConfig,
				Err: errors.New("both ProxyJump and ProxyCommand are set; OpenSSH would use only the first given")}
		}
		for _, spec := range strings.Split(h.ProxyJump, ",") {
			t, err := parseHop(strings.TrimSpace(spec), o)
			if err != nil {
				return nil, &DialError{Host: h.Name, Addr: final.addr(), Stage: StageProxy, Err: err}
			}
			// Bastions often take the same key as the hosts behind them.
			t.keys = append(t.keys, h.IdentityFiles...)
			hops = append(hops, t)
		}
	}
	hk := &hostKeys{file: o.KnownHostsFile, policy: o.HostKeyPolicy, log: o.Logger}
	var clients []*ssh.Client
	var last *watchConn
	closeAll := func() {
		for i := len(clients) - 1; i >= 0; i-- {
			clients[i].Close()
		}
	}
	var via string
	var proxy *proxyConn // the ProxyCommand under the first hop
	var finalUnasked unasked
	for _, t := range append(hops, final) {
		var dialer func(ctx context.Context, addr string) (net.Conn, error)
		var pc *proxyConn
		if len(clients) == 0 && t.proxyCommand != "" {
			cmd, err := expandProxyCommand(t.proxyCommand, t.name, t.host, t.port, t.user, t.orig)
			if err != nil {
				de := &DialError{Host: h.Name, Addr: t.addr(), Stage: StageConfig, Err: err}
				if t.isHop {
					de.Hop = t.name
				}
				return nil, de
			}
			via = "ProxyCommand"
			o.Logger.Debug("running ProxyCommand", "host", t.name, "command", cmd)
			dialer = func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := startProxyCommand(ctx, t.name, cmd, t.host, t.port)
				pc = c
				return c, err
			}
		} else if len(clients) == 0 {
			var nd net.Dialer
			dialer = func(ctx context.Context, addr string) (net.Conn, error) {
				return nd.DialContext(ctx, "tcp", addr)
			}
		} else {
			prev := clients[len(clients)-1]
			dialer = func(ctx context.Context, addr string) (net.Conn, error) {
				return prev.DialContext(ctx, "tcp", addr)
			}
		}
		c, unasked, wc, err := dialOne(ctx, t, via, dialer, hk, o)
		if err != nil {
			if pc != nil && err.Stage != StageCanceled {
				if stage, why := pc.explain(err.Err); stage != "" {
					err.Stage, err.Err = stage, why
				} else {
					err.Err = why
				}
			}
			closeAll()
			err.Host = h.Name
			if t.isHop {
				err.Hop = t.name
			}
			return nil, err
		}
		clients = append(clients, c)
		if t.isHop {
			pollUnasked(&unaskedWatch{chans: unasked.chans, reqs: unasked.reqs})
		} else {
			finalUnasked = unasked
		}
		if pc != nil {
			proxy = pc
		}
		last = wc
		via = t.name
	}
	sc := newSSHConn(h, clients[len(clients)-1], finalUnasked, clients[:len(clients)-1], last.heard, proxy, o)
	return sc, nil
}

// parseHop reads one ProxyJump hop, [user@]host[:port], completed by
// o.CompleteHop when there is one (the caller's ssh_config: HostName,
// Port, User, IdentityFile, IdentitiesOnly, ProxyCommand).
func parseHop(spec string, o Options) (target, error) {
	if spec == "" {
		return target{}, errors.New("empty hop in ProxyJump")
	}
	t := target{name: spec, isHop: true}
	rest := spec
	if strings.Contains(spec, "://") {
		// The URI form is read where the host is converted (lua.RemoteHost):
		// taken here as user@host it would make "ssh://user" the user.
		return target{}, fmt.Errorf("bad ProxyJump hop %q: a URI hop must be written [user@]host[:port] before it is dialled", spec)
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		t.user, rest = rest[:i], rest[i+1:]
	}
	host, portStr, err := net.SplitHostPort(rest)
	if err != nil {
		// No port (or a bare IPv6 address in brackets).
		host, portStr = strings.Trim(rest, "[]"), ""
	}
	if host == "" || strings.ContainsAny(host, " \t/") || strings.HasPrefix(host, "-") {
		return target{}, fmt.Errorf("bad ProxyJump hop %q (want [user@]host[:port])", spec)
	}
	t.host = host
	if portStr != "" {
		p, err := strconv.Atoi(portStr)
		if err != nil || p <= 0 || p > 65535 {
			return target{}, fmt.Errorf("bad port in ProxyJump hop %q", spec)
		}
		t.port = p
	}
	if o.CompleteHop != nil {
		hop, err := o.CompleteHop(Host{Name: host, Port: t.port, User: t.user, Connection: "ssh"})
		if err != nil {
			return target{}, fmt.Errorf("ProxyJump hop %q: %w", spec, err)
		}
		if hop.Address != "" {
			t.host = hop.Address
		}
		// The spec's own port and user win over the completion's.
		if t.port == 0 {
			t.port = hop.Port
		}
		if t.user == "" {
			t.user = hop.User
		}
		t.keys = append(t.keys, hop.IdentityFiles...)
		t.identitiesOnly = hop.IdentitiesOnly
		// Used only for the first hop: later ones go through the one
		// before, as with OpenSSH's -J.
		t.proxyCommand, t.orig = proxyCommandOf(hop.ProxyCommand), host
	}
	if t.port == 0 {
		t.port = 22
	}
	if t.user == "" {
		t.user = localUser()
	}
	return t, nil
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// Handshake progress, for saying which stage failed.
const (
	progConnected int32 = iota + 1
	progHostKey
	progAuth
)

// watchConn records what the peer sent first, to tell "no banner" and
// "not SSH at all" apart from a stalled key exchange, and when it last sent
// anything, which proves it alive to the keepalive.
type watchConn struct {
	net.Conn
	mu    sync.Mutex
	first []byte
	n     int64
	last  atomic.Int64 // unix nanoseconds of the last read that returned data
}

func newWatchConn(c net.Conn) *watchConn {
	w := &watchConn{Conn: c}
	w.last.Store(time.Now().UnixNano())
	return w
}

// heard is when the peer last sent something (the dial, before that).
func (w *watchConn) heard() time.Time { return time.Unix(0, w.last.Load()) }

func (w *watchConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if n > 0 {
		w.last.Store(time.Now().UnixNano())
		w.mu.Lock()
		if len(w.first) < 80 {
			w.first = append(w.first, p[:min(n, 80-len(w.first))]...)
		}
		w.n += int64(n)
		w.mu.Unlock()
	}
	return n, err
}

func (w *watchConn) seen() ([]byte, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]byte(nil), w.first...), w.n
}

// dialOne connects, handshakes and authenticates to t within
// ConnectTimeout, over dial (TCP, or a channel through the previous hop).
//
// A server too busy to take the connection (sshd past MaxStartups answers
// "Exceeded MaxStartups" and hangs up, or hangs up before its banner: at
// --forks 100 behind one sshd or bastion most hosts met it) is dialled
// again after a jittered exponential back-off, as Ansible's ssh retries
// do, for as long as ConnectTimeout leaves time for it; what every try met
// is in the error of the last.
func dialOne(ctx context.Context, t target, via string, dial func(context.Context, string) (net.Conn, error),
	hk *hostKeys, o Options) (*ssh.Client, unasked, *watchConn, *DialError) {
	dctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	start := time.Now()
	var busy []string // what each busy try met
	for attempt := 1; ; attempt++ {
		c, u, wc, derr := dialAttempt(ctx, dctx, t, via, dial, hk, o)
		if derr == nil {
			if len(busy) > 0 {
				o.Logger.Debug("connected after the server was busy", "host", t.name, "tries", attempt,
					"took", time.Since(start).Round(time.Millisecond))
			}
			return c, u, wc, nil
		}
		var be *busyError
		if !errors.As(derr.Err, &be) {
			if len(busy) > 0 && derr.Stage != StageCanceled {
				derr.Err = &afterBusyError{err: derr.Err, busy: busy}
			}
			return nil, unasked{}, nil, derr
		}
		busy = append(busy, be.what)
		wait := busyBackoff(attempt)
		deadline, _ := dctx.Deadline()
		// A hang-up that says nothing is tried a few times only: a port
		// that always does it (no sshd behind a balancer) must not cost
		// every host its whole connect timeout.
		if time.Until(deadline) < wait+minBusyTry || (!be.said && attempt >= silentBusyTries) {
			be.tries, be.over, be.timeout = attempt, time.Since(start), o.ConnectTimeout
			return nil, unasked{}, nil, derr
		}
		o.Logger.Debug("server busy; dialling again", "host", t.name, "addr", t.addr(), "try", attempt,
			"answer", be.what, "wait", wait.Round(time.Millisecond))
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, unasked{}, nil, &DialError{Host: t.name, Addr: t.addr(), Via: via, Stage: StageCanceled, Err: ctx.Err()}
		}
	}
}

// Back-off of a busy server: the first wait is busyBackoffBase, each next
// one doubles, up to busyBackoffMax, each drawn from [d/2, d) so that the
// hosts a run dials at once do not come back at once. minBusyTry is the
// least time a try needs (a loopback login takes 20-50 ms): a wait that
// leaves less is not made.
var (
	// silentBusyTries bounds the tries of a server that hangs up before
	// its banner without a word (sshd's own line gets tries until the
	// connect timeout).
	silentBusyTries = 4
	busyBackoffBase = 100 * time.Millisecond
	busyBackoffMax  = 2 * time.Second
	minBusyTry      = 200 * time.Millisecond
)

func busyBackoff(attempt int) time.Duration {
	d := busyBackoffBase << min(attempt-1, 20)
	if d > busyBackoffMax || d <= 0 {
		d = busyBackoffMax
	}
	return d/2 + time.Duration(mathrand.Int64N(int64(d/2)+1))
}

// ErrServerBusy is in the chain of a dial error whose server kept refusing
// new connections (sshd MaxStartups) until ConnectTimeout left no time to
// try again.
var ErrServerBusy = errors.New("server busy")

// busyError is one try that met a busy server; the last one's also counts
// the tries.
type busyError struct {
	what string // what the server did
	// said: the server said it is busy (sshd's MaxStartups line); else
	// it only hung up before its banner, which a busy sshd also does.
	said    bool
	tries   int
	over    time.Duration
	timeout time.Duration
}

func (e *busyError) Error() string {
	msg := "the server " + e.what
	if e.said {
		msg = "the server is busy: it " + e.what
	}
	if e.tries > 0 {
		msg += fmt.Sprintf(" on each of %d tries over %s (jittered back-off, within the connect timeout %s)",
			e.tries, e.over.Round(time.Millisecond), e.timeout)
	}
	if !e.said {
		msg += "; a busy sshd does that too"
	}
	msg += "; sshd turns new connections away past MaxStartups (unauthenticated connections at once; default 10:30:100, " +
		"and a ProxyJump bastion counts every host behind it): lower --forks, raise MaxStartups in the server's sshd_config, " +
		"or give the hosts a longer connect timeout (ansible_ssh_timeout)"
	if !e.said {
		msg += "; else something on that port hangs up at once (a load balancer without a backend, a firewall's proxy)"
	}
	return msg
}

func (e *busyError) Is(target error) bool { return target == ErrServerBusy }

// afterBusyError is a try that failed otherwise after busy ones.
type afterBusyError struct {
	err  error
	busy []string
}

func (e *afterBusyError) Error() string {
	return fmt.Sprintf("%v (the %d tries before were turned away: the server %s, sshd MaxStartups)", e.err, len(e.busy), e.busy[len(e.busy)-1])
}

func (e *afterBusyError) Unwrap() error { return e.err }

// maxStartupsLine is what sshd writes, instead of its banner, to a
// connection it drops past MaxStartups.
const maxStartupsLine = "Exceeded MaxStartups"

// dialAttempt is one try of dialOne, bounded by dctx (the connect
// timeout of all tries).
func dialAttempt(ctx, dctx context.Context, t target, via string, dial func(context.Context, string) (net.Conn, error),
	hk *hostKeys, o Options) (*ssh.Client, unasked, *watchConn, *DialError) {
	addr := t.addr()
	fail := func(stage string, err error) *DialError {
		return &DialError{Host: t.name, Addr: addr, Via: via, Stage: stage, Err: err}
	}
	// The conn deadline and the context deadline are the same instant;
	// either may be noticed first.
	timedOut := func(err error) bool {
		return ctx.Err() == nil && (errors.Is(dctx.Err(), context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded))
	}

	raw, err := dial(dctx, addr)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, unasked{}, nil, fail(StageCanceled, ctx.Err())
		case timedOut(err):
			return nil, unasked{}, nil, fail(StageConnect, fmt.Errorf("no answer within %s", o.ConnectTimeout))
		}
		return nil, unasked{}, nil, fail(StageConnect, err)
	}
	// The deadline covers banner, key exchange and authentication: a
	// conn deadline where the conn has one (TCP), and closing the conn
	// when the context ends (a jump channel has no deadlines; ctx cancel).
	deadline, _ := dctx.Deadline()
	raw.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { raw.Close() })
	wc := newWatchConn(raw)
	var prog atomic.Int32
	prog.Store(progConnected)
	var hkMu sync.Mutex // the callback runs on x/crypto's handshake goroutine
	var hostKeyErr error

	plan := planAuth(t, o, deadline)
	defer plan.closeAgent()
	cfg := &ssh.ClientConfig{
		User: t.user,
		Auth: []ssh.AuthMethod{ssh.PublicKeysCallback(func() ([]ssh.Signer, error) {
			prog.Store(progAuth)
			return plan.signers(), nil
		})},
		HostKeyCallback: func(hostport string, remote net.Addr, key ssh.PublicKey) error {
			prog.Store(progHostKey)
			err := hk.check(hostport, remote, key)
			hkMu.Lock()
			hostKeyErr = err
			hkMu.Unlock()
			return err
		},
		HostKeyAlgorithms: hk.algorithms(addr),
		ClientVersion:     "SSH-2.0-gpush",
	}
	conn, chans, reqs, err := ssh.NewClientConn(wc, addr, cfg)
	if err == nil && !stop() {
		conn.Close()
		err = dctx.Err()
	}
	if err != nil {
		stop()
		raw.Close()
		hkMu.Lock()
		hkErr := hostKeyErr
		hkMu.Unlock()
		return nil, unasked{}, nil, fail(classify(err, wc, prog.Load(), hkErr, ctx, timedOut(err), t, plan, o))
	}
	raw.SetDeadline(time.Time{})
	o.Logger.Debug("connected", "host", t.name, "addr", addr, "via", via, "user", t.user,
		"server", string(conn.ServerVersion()))
	return &ssh.Client{Conn: conn}, unasked{chans, reqs}, wc, nil
}

// classify turns a handshake error into the stage that failed and an
// explanation an operator can act on.
func classify(err error, wc *watchConn, prog int32, hostKeyErr error, ctx context.Context, timedOut bool,
	t target, plan *authPlan, o Options) (string, error) {
	first, n := wc.seen()
	if ctx.Err() != nil {
		return StageCanceled, ctx.Err()
	}
	if hostKeyErr != nil {
		return StageHostKey, hostKeyErr
	}
	if n > 0 && bytes.HasPrefix(first, []byte(maxStartupsLine)) {
		return StageBanner, &busyError{what: fmt.Sprintf("answered %q instead of an SSH banner", maxStartupsLine), said: true}
	}
	if n > 0 && !bytes.HasPrefix(first, []byte("SSH-")) {
		line, _, _ := bytes.Cut(first, []byte("\n"))
		return StageBanner, fmt.Errorf("not an SSH server: it answered %q", strings.TrimSpace(string(line)))
	}
	switch {
	case n == 0 && timedOut:
		return StageBanner, fmt.Errorf("the server accepted the TCP connection but sent no SSH banner within %s", o.ConnectTimeout)
	case n == 0 && isClosed(err) && !isProxyCommand(wc):
		// What sshd does past MaxStartups when the line does not get out,
		// or past PerSourcePenalties: busy, tried again. (A ProxyCommand
		// that ends so says why itself: see proxyConn.explain.)
		return StageBanner, &busyError{what: "closed the connection before sending an SSH banner"}
	case n == 0:
		return StageBanner, fmt.Errorf("the server closed the connection before sending an SSH banner (%v)", err)
	case prog < progHostKey && timedOut:
		return StageKex, fmt.Errorf("the server sent its banner (%q) but the key exchange did not complete within %s",
			bannerOf(first), o.ConnectTimeout)
	case prog < progHostKey:
		return StageKex, fmt.Errorf("key exchange with %q failed: %v", bannerOf(first), err)
	case timedOut:
		return StageAuth, fmt.Errorf("authentication as %s did not complete within %s", t.user, o.ConnectTimeout)
	case prog >= progAuth || strings.Contains(err.Error(), "unable to authenticate"):
		return StageAuth, authError(err, t, plan)
	}
	if errors.Is(err, io.EOF) {
		return StageKex, fmt.Errorf("the server closed the connection during the handshake")
	}
	return StageKex, err
}

func isProxyCommand(wc *watchConn) bool {
	_, ok := wc.Conn.(*proxyConn)
	return ok
}

// isClosed: err is the peer hanging up (EOF, a reset), not a local error.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

func bannerOf(first []byte) string {
	line, _, _ := bytes.Cut(first, []byte("\n"))
	return strings.TrimSpace(string(line))
}

var errEncryptedKey = errors.New("key is encrypted and no passphrase can be asked for; load it into ssh-agent")

// encryptedKeyError is errEncryptedKey keeping x/crypto's error, which
// holds the key's public half when the file has it.
type encryptedKeyError struct{ pm *ssh.PassphraseMissingError }

func (e *encryptedKeyError) Error() string   { return errEncryptedKey.Error() }
func (e *encryptedKeyError) Unwrap() []error { return []error{errEncryptedKey, e.pm} }

func loadKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	var pm *ssh.PassphraseMissingError
	if errors.As(err, &pm) {
		return nil, &encryptedKeyError{pm}
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key %s: %w", path, err)
	}
	return s, nil
}
