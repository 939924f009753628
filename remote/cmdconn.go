package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"
)

// cmdConn is the connection of a command transport (podman, docker,
// kubectl, gpush_command): every command and the helper's one serve
// session are argvs the transport starts; the helper is placed with the
// transport's file copy.
//
// The helper's checks are the warm check's (warm.go), run on the target
// as the serve session's own command (sh -c SCRIPT): every folder of the
// helper's path, the file, its size and its sha256, then exec. When it
// refuses, the helper is copied to a temp name in the helper folder
// (created 0700 if missing), made 0755 and renamed into place inside the
// target (mv, atomic), and the warm check runs again and hashes it before
// anything runs it. The target needs sh, uname, id, stat and sha256sum
// (busybox has them all).
type cmdConn struct {
	host Host
	t    Transport
	o    Options
	log  *slog.Logger

	uploads *atomic.Int32

	serve serveSlot
}

func newCmdConn(h Host, t Transport, o Options) *cmdConn {
	return &cmdConn{host: h, t: t, o: o, log: o.Logger.With("host", h.Name), serve: newServeSlot(), uploads: new(atomic.Int32)}
}

func (c *cmdConn) Host() string              { return c.host.Name }
func (c *cmdConn) becomes() bool             { return c.host.Become }
func (c *cmdConn) deadCause(err error) error { return nil }
func (c *cmdConn) lost(what string, err error) error {
	return fmt.Errorf("%s: %s: %w", c.host.Name, what, err)
}

// Close ends the serve session, if one runs.
func (c *cmdConn) Close() error {
	if s := c.serve.take(); s != nil {
		s.end(errors.New("connection closed by gpush"))
	}
	return nil
}

// Run starts argv through the transport (with Sudo, through sudo -n on
// the target), feeds it opts.Stdin and collects its output.
func (c *cmdConn) Run(ctx context.Context, argv []string, opts RunOptions) (*Result, error) {
	return runArgv(ctx, c.host.Name, argv, opts, c.run)
}

func (c *cmdConn) run(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration, maxOut int64) (*Result, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	st, err := c.t.Start(ctx, argv)
	if err != nil {
		return nil, fmt.Errorf("%s: run %s: %w", c.host.Name, argv[0], err)
	}
	defer st.Close()
	overflow := func(*capWriter) { stop(ErrOutputCap) }
	stdout, stderr := newCapWriter("stdout", maxOut, overflow), newCapWriter("stderr", maxOut, overflow)
	go func() {
		if stdin != nil {
			copyCtx(ctx, st, stdin)
		}
		st.CloseWrite()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(stdout, st) }()
	go func() { defer wg.Done(); io.Copy(stderr, st.Stderr()) }()
	copied := make(chan struct{})
	go func() { wg.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-ctx.Done():
		st.Close()
	}
	status, signal, exited := st.Exit(5 * time.Second)
	if cerr := capErr(c.host.Name, argv[0], stdout, stderr); cerr != nil {
		return nil, cerr
	}
	if ctx.Err() != nil && (status != 0 || signal != "") {
		return nil, endedError(c.host.Name, argv[0], timeout, time.Since(start), ctx.Err())
	}
	res := &Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Elapsed: time.Since(start), ExitCode: status}
	switch {
	case signal != "":
		res.ExitCode = 128 + signalNumber(signal)
	case !exited:
		return nil, fmt.Errorf("%s: run %s: no exit status after its output ended", c.host.Name, argv[0])
	}
	return res, nil
}

// Put writes data to a temp name beside p through the transport's copy,
// then chmods and renames it into place on the target (atomic).
func (c *cmdConn) Put(ctx context.Context, p string, data io.Reader, mode os.FileMode) error {
	if err := c.place(ctx, p, data, mode); err != nil {
		return fmt.Errorf("%s: put %s: %w", c.host.Name, p, err)
	}
	return nil
}

func (c *cmdConn) place(ctx context.Context, p string, data io.Reader, mode os.FileMode) error {
	f, err := os.CreateTemp("", "gpush-put-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := copyCtx(ctx, f, data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	tmp := tempName(p)
	if err := c.t.Put(ctx, f.Name(), tmp); err != nil {
		return fmt.Errorf("copy to %s: %w", tmp, err)
	}
	res, err := c.run(ctx, []string{"sh", "-c", `chmod "$1" -- "$2" && mv -f -- "$2" "$3" || { rm -f -- "$2"; exit 1; }`,
		"sh", fmt.Sprintf("%o", mode.Perm()), tmp, p}, nil, 0, DefaultMaxOutput)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("chmod and rename %s to %s: exit %d: %s", tmp, p, res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return nil
}

// Get reads a file on the target (cat).
func (c *cmdConn) Get(ctx context.Context, p string) ([]byte, error) {
	res, err := c.run(ctx, []string{"cat", "--", p}, nil, 0, HelperMaxOutput)
	if err != nil {
		return nil, fmt.Errorf("%s: get %s: %w", c.host.Name, p, err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("%s: get %s: cat exited %d: %s", c.host.Name, p, res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return res.Stdout, nil
}

// Helper runs one request over the serve session, started on first use.
func (c *cmdConn) Helper(ctx context.Context, verb string, req, resp any) error {
	return callHelper(ctx, c.host.Name, verb, req, resp, c.serveSession)
}

// StartHelper starts the serve session unless one runs.
func (c *cmdConn) StartHelper(ctx context.Context, verb string) error {
	_, err := c.serveSession(ctx, verb)
	return err
}

// DeployHelper starts the serve session (placing the helper if needed)
// and returns the helper's path on the target.
func (c *cmdConn) DeployHelper(ctx context.Context) (string, error) {
	s, err := c.serveSession(ctx, "deploy")
	if err != nil {
		return "", err
	}
	return s.path, nil
}

func (c *cmdConn) serveSession(ctx context.Context, verb string) (*serveSession, error) {
	return c.serve.get(ctx, c.host.Name, verb, c.startServe)
}

// startServe runs the warm check as the serve command; when it refuses,
// places the helper and runs the check again (which hashes the upload).
func (c *cmdConn) startServe(ctx context.Context, verb string) (*serveSession, error) {
	dir, err := remoteDirSetting(c.host)
	if err != nil {
		return nil, err
	}
	var steps stepLog
	start := time.Now()
	digests, _ := warmDigests(ctx, warmDigest(c.o), warmDigestGrace)
	steps.add("helper digests", start)
	token := newCancelToken()
	argv := warmArgv(dir, token, c.host.Become, digests)
	start = time.Now()
	s, refused, err := c.open(ctx, verb, "helper serve (warm check)", steps.String(), argv, token)
	if err != nil || s != nil {
		return s, err
	}
	steps.add("warm check refused", start)
	c.log.Debug("warm check refused; placing the helper", "why", refused.reason)
	if refused.probe == nil {
		return nil, fmt.Errorf("%s: helper %s: the warm check refused before it learnt the target (%s): the target needs sh, uname, id, stat and sha256sum",
			c.host.Name, verb, refused.reason)
	}
	start = time.Now()
	final, err := c.placeHelper(ctx, *refused.probe)
	if err != nil {
		return nil, withSteps(err, steps)
	}
	steps.add("upload", start)
	s, again, err := c.open(ctx, verb, "helper serve (warm check of the upload)", steps.String(), argv, token)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%s: uploaded helper %s failed the check right after the upload: %s; refusing to run it",
			c.host.Name, final, again.reason)
	}
	return s, nil
}

func (c *cmdConn) open(ctx context.Context, verb, what, before string, argv []string, token string) (*serveSession, warmRefusal, error) {
	started := time.Now()
	st, err := c.t.Start(ctx, argv)
	if err != nil {
		return nil, warmRefusal{}, fmt.Errorf("%s: helper %s: start %s: %w", c.host.Name, verb, what, err)
	}
	return handshake(ctx, c, st, c.log, verb, what, before, token, "", true, started)
}

// placeHelper puts the helper for the target's architecture at its name
// in the helper folder; the warm check that follows checks it.
func (c *cmdConn) placeHelper(ctx context.Context, pr probeResult) (string, error) {
	name := c.host.Name
	arch, err := GoArch(pr.machine)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if c.o.HelperSource == nil {
		return "", fmt.Errorf("%s: no helper source configured (remote.Options.HelperSource; use helperbin.Source)", name)
	}
	bin, err := sourceWithin(ctx, c.o.HelperSource, arch)
	if err != nil {
		return "", fmt.Errorf("%s: helper for linux/%s: %w", name, arch, err)
	}
	dir, err := RemoteDir(c.host, pr.home)
	if err != nil {
		return "", err
	}
	final := path.Join(dir, "gpush-helper-"+binSum(bin)[:32])
	res, err := c.run(ctx, []string{"sh", "-c", `[ -d "$1" ] || { umask 077 && mkdir -p -- "$1" && chmod 700 -- "$1"; }`, "sh", dir}, nil, 0, DefaultMaxOutput)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("%s: create helper folder %s (%s): exit %d: %s", name, dir, VarRemoteDir, res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	release, err := uploadSlot(ctx)
	if err != nil {
		return "", fmt.Errorf("%s: upload helper to %s: waiting for an upload slot: %w", name, final, err)
	}
	start := time.Now()
	err = c.place(ctx, final, bytes.NewReader(bin), 0o755)
	release()
	if err != nil {
		return "", fmt.Errorf("%s: upload helper to %s: %w", name, final, err)
	}
	c.uploads.Add(1)
	c.log.Info("uploaded helper", "path", final, "bytes", len(bin), "arch", arch, "took", time.Since(start).Round(time.Millisecond))
	return final, nil
}

var (
	_ Deployer      = (*cmdConn)(nil)
	_ HelperStarter = (*cmdConn)(nil)
	_ serveOwner    = (*cmdConn)(nil)
)
