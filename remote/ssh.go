package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// sshConn is one SSH connection; every call is a new channel on it.
type sshConn struct {
	host   Host
	client *ssh.Client
	hops   []*ssh.Client
	// proxy is the ProxyCommand carrying the connection, if any: when it
	// dies, its exit status and stderr say why the session was lost.
	proxy *proxyConn
	o     Options
	log   *slog.Logger

	sftpMu sync.Mutex
	sftp   *sftp.Client
	// sftpUsers counts the calls using sftp now (closeIdleSFTP).
	sftpUsers int

	helper  helperCache
	uploads atomic.Int32

	// serve holds the helper's serve session (serve.go).
	serve serveSlot
	// sessions counts the sessions opened on the connection (exec, SFTP,
	// serve): what a run costs in round trips, for tests and benches.
	sessions atomic.Int32

	keepalive *keepalive // nil without KeepaliveInterval; set before anything can end the connection
	deadOnce  sync.Once
	dead      chan struct{}
	deadMu    sync.Mutex
	deadWhy   error
	closeOnce sync.Once
}

// newSSHConn wraps a logged-in client; u is what its server sends unasked,
// heard says when the server last sent anything (for the keepalive).
func newSSHConn(h Host, client *ssh.Client, u unasked, hops []*ssh.Client, heard func() time.Time, proxy *proxyConn, o Options) *sshConn {
	c := &sshConn{host: h, client: client, hops: hops, proxy: proxy, o: o, log: o.Logger.With("host", h.Name),
		dead: make(chan struct{}), serve: newServeSlot()}
	if o.KeepaliveInterval > 0 {
		c.keepalive = startKeepalive(c, o.KeepaliveInterval, o.KeepaliveCountMax, heard)
	}
	// The poller answers the server and notes the end: when x/crypto
	// closes u's channels, as the connection ends.
	pollUnasked(&unaskedWatch{chans: u.chans, reqs: u.reqs, onEnd: func() {
		err := client.Wait()
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		select {
		case <-c.dead: // gpush closed it: nothing to explain
		default:
			if proxy != nil {
				err = proxy.lostWhy(err)
			}
		}
		c.markDead(err)
		// The jump connections only served this one.
		for i := len(hops) - 1; i >= 0; i-- {
			hops[i].Close()
		}
	}})
	return c
}

func (c *sshConn) Host() string { return c.host.Name }

func (c *sshConn) markDead(why error) {
	c.deadOnce.Do(func() {
		if c.keepalive != nil {
			c.keepalive.stop()
		}
		c.deadMu.Lock()
		c.deadWhy = why
		c.deadMu.Unlock()
		close(c.dead)
	})
}

// lost wraps err as a lost connection when the connection is dead,
// naming why it died.
func (c *sshConn) lost(what string, err error) error {
	if why := c.deadCause(err); why != nil {
		return fmt.Errorf("%s: %s: %w (%v)", c.host.Name, what, ErrConnectionLost, why)
	}
	return fmt.Errorf("%s: %s: %w", c.host.Name, what, err)
}

func (c *sshConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.markDead(errors.New("connection closed by gpush"))
		// The client first: it unblocks an SFTP setup holding sftpMu.
		err = c.client.Close()
		c.sftpMu.Lock()
		if c.sftp != nil {
			c.sftp.Close()
		}
		c.sftpMu.Unlock()
		for i := len(c.hops) - 1; i >= 0; i-- {
			c.hops[i].Close()
		}
		if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) || (err != nil && strings.Contains(err.Error(), "use of closed")) {
			err = nil
		}
	})
	return err
}

// newSession opens a channel, giving up when ctx ends (a dead peer would
// otherwise block until keepalives close the connection).
func (c *sshConn) newSession(ctx context.Context) (*ssh.Session, error) {
	return c.newSessionFor(ctx, "")
}

// newSessionFor is newSession for the step what (the warm check, a probe,
// ...): an error names the step and how long sshd was waited for, and
// whether ctx was spent before asking, so that a hung open and a budget
// eaten by earlier steps read differently.
func (c *sshConn) newSessionFor(ctx context.Context, what string) (*ssh.Session, error) {
	return openFor(c, ctx, what, c.client.NewSession, func(s *ssh.Session) { s.Close() })
}

// sessionChannel is a session channel without x/crypto's Session around
// it: the serve session drives its own (serve.go).
type sessionChannel struct {
	ch   ssh.Channel
	reqs <-chan *ssh.Request
}

// newChannelFor is newSessionFor for a bare session channel.
func (c *sshConn) newChannelFor(ctx context.Context, what string) (sessionChannel, error) {
	return openFor(c, ctx, what, func() (sessionChannel, error) {
		ch, reqs, err := c.client.OpenChannel("session", nil)
		return sessionChannel{ch, reqs}, err
	}, func(sc sessionChannel) {
		if sc.ch != nil {
			sc.ch.Close()
			go ssh.DiscardRequests(sc.reqs)
		}
	})
}

// openFor runs open (a session's or channel's open) for the step what,
// giving up when ctx ends; discard closes what an abandoned open returns.
func openFor[T any](c *sshConn, ctx context.Context, what string, open func() (T, error), discard func(T)) (T, error) {
	var zero T
	step := "open session"
	if what != "" {
		step += " (" + what + ")"
	}
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: %s: not asked, the call had already ended: %w", c.host.Name, step, err)
	}
	type res struct {
		s   T
		err error
	}
	ch := make(chan res, 1)
	c.sessions.Add(1)
	start := time.Now()
	go func() {
		s, err := open()
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return zero, c.lost(step, r.err)
		}
		return r.s, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				discard(r.s)
			}
		}()
		return zero, fmt.Errorf("%s: %s: no answer from sshd in %s: %w", c.host.Name, step,
			time.Since(start).Round(time.Millisecond), ctx.Err())
	}
}

func (c *sshConn) Run(ctx context.Context, argv []string, opts RunOptions) (*Result, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: run: empty command", c.host.Name)
	}
	line := argv
	if opts.Sudo {
		line = sudoArgv(argv)
	}
	res, err := c.exec(ctx, argv[0], ShellJoin(line), opts.Stdin, opts.Timeout, maxOutput(opts))
	if err == nil && opts.Sudo {
		err = sudoRunError(c.host.Name, argv, res)
	}
	return res, err
}

func sudoArgv(argv []string) []string {
	return append([]string{"sudo", "-n", "--"}, argv...)
}

// exec runs one command line on a new session, keeping at most maxOut
// bytes of each stream. what names the command in errors. When ctx or
// timeout ends first, or a stream goes over maxOut, the command is stopped
// (see cancel.go) and the session closed.
func (c *sshConn) exec(ctx context.Context, what, cmdline string, stdin io.Reader, timeout time.Duration, maxOut int64) (*Result, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	sess, err := c.newSessionFor(ctx, what)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	overflow := func(*capWriter) { stop(ErrOutputCap) }
	stdout, stderr := newCapWriter("stdout", maxOut, overflow), newCapWriter("stderr", maxOut, overflow)
	sess.Stdout, sess.Stderr = stdout, stderr
	if stdin != nil {
		sess.Stdin = stdin
	}
	token := newCancelToken()
	c.log.Debug("exec", "cmd", cmdline)
	if err := sess.Start(wrapCommand(cmdline, token)); err != nil {
		return nil, c.lost("start "+what, err)
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done: // finished meanwhile: take the result
		default:
			sess.Signal(ssh.SIGTERM)
			c.cancelRemote(token)
			sess.Close()
			if cerr := capErr(c.host.Name, what, stdout, stderr); cerr != nil {
				return nil, cerr
			}
			return nil, endedError(c.host.Name, what, timeout, time.Since(start), ctx.Err())
		}
	}
	// A command that ended by itself still loses its result when a stream
	// went over: what is kept is not all it printed.
	if cerr := capErr(c.host.Name, what, stdout, stderr); cerr != nil {
		return nil, cerr
	}
	res := &Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Elapsed: time.Since(start)}
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitStatus()
	case errors.As(err, &missing):
		return nil, c.lost(what+" (no exit status: the connection dropped while it ran)", err)
	default:
		return nil, c.lost(what, err)
	}
	return res, nil
}

// sftpClient opens the SFTP subsystem once and reuses it; the caller calls
// done when it is through with it.
func (c *sshConn) sftpClient(ctx context.Context) (s *sftp.Client, done func(), err error) {
	c.sftpMu.Lock()
	defer c.sftpMu.Unlock()
	if c.sftp == nil {
		if err := c.openSFTP(ctx); err != nil {
			return nil, nil, err
		}
	}
	c.sftpUsers++
	return c.sftp, func() {
		c.sftpMu.Lock()
		c.sftpUsers--
		c.sftpMu.Unlock()
	}, nil
}

// closeIdleSFTP closes the SFTP session unless a call uses it: a finished
// deployment does, since the session holds 3 goroutines and, once it has
// written, a 40 KiB packet buffer, for the connection's life otherwise.
// Put and Get open it again.
func (c *sshConn) closeIdleSFTP() {
	c.sftpMu.Lock()
	defer c.sftpMu.Unlock()
	if c.sftp != nil && c.sftpUsers == 0 {
		c.sftp.Close()
		c.sftp = nil
	}
}

// openSFTP opens c.sftp; sftpMu is held.
func (c *sshConn) openSFTP(ctx context.Context) error {
	type res struct {
		s   *sftp.Client
		err error
	}
	ch := make(chan res, 1)
	c.sessions.Add(1)
	start := time.Now()
	go func() {
		s, err := sftp.NewClient(c.client, sftp.UseConcurrentWrites(true), sftp.MaxPacketChecked(sftpPacket))
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return c.lost("open SFTP (is the sftp subsystem enabled in sshd_config?)", r.err)
		}
		c.sftp = r.s
		return nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.s != nil {
				r.s.Close()
			}
		}()
		return fmt.Errorf("%s: open SFTP: no answer from sshd in %s: %w", c.host.Name,
			time.Since(start).Round(time.Millisecond), ctx.Err())
	}
}

func (c *sshConn) Put(ctx context.Context, path string, data io.Reader, mode os.FileMode) error {
	s, done, err := c.sftpClient(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := putAtomic(ctx, sftpFS{s}, path, data, mode); err != nil {
		return c.lost("put "+path, err)
	}
	return nil
}

func (c *sshConn) Get(ctx context.Context, path string) ([]byte, error) {
	s, done, err := c.sftpClient(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	f, err := s.Open(path)
	if err != nil {
		return nil, c.lost("get "+path, err)
	}
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	b, err := io.ReadAll(f)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: get %s: %w", c.host.Name, path, ctx.Err())
		}
		return nil, c.lost("get "+path, err)
	}
	return b, nil
}

// helperExec is a helper call on a session of its own (`<path> <verb>`,
// the request on stdin): what every call cost before serve. It stays for
// the benchmark that compares the two.
func (c *sshConn) helperExec(ctx context.Context, verb string, req, resp any) error {
	body, err := encodeRequest(c.host.Name, verb, req)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		p, err := c.DeployHelper(ctx)
		if err != nil {
			return err
		}
		argv := []string{p, verb}
		if c.host.Become {
			argv = sudoArgv(argv)
		}
		res, err := c.exec(ctx, "helper "+verb, ShellJoin(argv), bytes.NewReader(body), 0, HelperMaxOutput)
		if err != nil {
			return err
		}
		if attempt == 1 && c.helper.forgetIfMissing(p, res) {
			c.log.Info("helper file gone from the host; deploying it again", "path", p)
			continue
		}
		return decodeHelper(c.host.Name, verb, p, c.host.Become, res, resp)
	}
}

// DeployHelper makes sure the helper is on the host and returns its path;
// the first call probes the host and uploads if needed, later calls return
// the cached path.
func (c *sshConn) DeployHelper(ctx context.Context) (string, error) {
	p, err := c.helper.get(func() (string, error) {
		p, _, err := c.deploy(ctx, nil, false)
		return p, err
	})
	c.closeIdleSFTP()
	if err != nil {
		// The SFTP steps of a deployment do not pass through lost: a link
		// dropped mid-upload is still a lost connection.
		return "", c.markLost(err)
	}
	return p, nil
}

// deploy probes the host (unless known already: the warm check's answer)
// and deploys the helper; with hashLater, see deployTarget.
func (c *sshConn) deploy(ctx context.Context, known *probeResult, hashLater bool) (string, bool, error) {
	// SFTP setup and the probe are independent round trips: overlap them.
	type sres struct {
		s    *sftp.Client
		done func()
		err  error
	}
	sch := make(chan sres, 1)
	go func() {
		s, done, err := c.sftpClient(ctx)
		sch <- sres{s, done, err}
	}()
	var pr probeResult
	var perr error
	if known != nil {
		pr = *known
	} else {
		pr, perr = c.probe(ctx)
	}
	sr := <-sch
	if sr.err != nil {
		if perr != nil {
			return "", false, perr
		}
		return "", false, sr.err
	}
	defer sr.done()
	if perr != nil {
		return "", false, perr
	}
	fsys := sftpFS{sr.s}
	return deployHelperHashed(ctx, deployTarget{
		host: c.host, fs: fsys, machine: pr.machine, home: pr.home, uid: pr.uid,
		source: c.o.HelperSource, sum: c.sshSum(fsys), log: c.log, uploads: &c.uploads,
		hashLater: hashLater,
	})
}

// probeMaxOutput caps the probe's streams: a chatty shell startup file
// may print before it, nothing legitimate prints megabytes.
const probeMaxOutput = 1 << 20

// probeCmd is fixed text: nothing from the inventory goes into it.
const probeCmd = `uname -m; id -u; printf '%s\n' "$HOME"`

type probeResult struct {
	machine string
	uid     int
	home    string
}

func (c *sshConn) probe(ctx context.Context) (probeResult, error) {
	res, err := c.exec(ctx, "probe (uname -m; id -u; $HOME)", probeCmd, nil, 0, probeMaxOutput)
	if err != nil {
		return probeResult{}, err
	}
	if res.ExitCode != 0 {
		return probeResult{}, fmt.Errorf("%s: probe %q exited %d: %s", c.host.Name, probeCmd, res.ExitCode,
			strings.TrimSpace(string(res.Stderr)))
	}
	return parseProbe(c.host.Name, res.Stdout)
}

// sftpPacket is the most data one SFTP write carries. The connection keeps
// a cipher buffer of its largest packet for its life, 40 KiB at SFTP's
// usual 32 KiB; at 16 KiB an upload has 2x the requests (192 for the
// helper) and the buffer is 18 KiB.
const sftpPacket = 16 << 10
