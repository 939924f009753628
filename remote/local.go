package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpush/gpush/helper"
)

// localConn reaches the machine gpush runs on, without SSH.
type localConn struct {
	host Host
	o    Options
	log  *slog.Logger

	helper  helperCache
	uploads atomic.Int32
	// session is shared by the in-process calls, as a remote host's serve
	// session is by its calls (the memory stream, the last listing).
	session *helper.Session

	// become is the connection with become: the helper's serve session
	// under sudo -n, through the command connection over the local
	// transport (what any command transport does), started on first use.
	becomeMu sync.Mutex
	become   *cmdConn
}

// becomeConn is the command connection the become calls go through.
func (c *localConn) becomeConn() *cmdConn {
	c.becomeMu.Lock()
	defer c.becomeMu.Unlock()
	if c.become == nil {
		h := c.host
		h.Become = true
		c.become = newCmdConn(h.addressed(), localTransport{}, c.o)
		c.become.uploads = &c.uploads
	}
	return c.become
}

func newLocal(h Host, o Options) *localConn {
	return &localConn{host: h, o: o, log: o.Logger.With("host", h.Name), session: helper.NewSession()}
}

func (c *localConn) Host() string { return c.host.Name }

// Prestart starts the in-process session's memory stream for cfg (see
// helper.Session.Prestart); nothing with become, whose calls run in a
// serve session of their own.
func (c *localConn) Prestart(cfg helper.Config) {
	if !c.host.Become {
		c.session.Prestart(cfg)
	}
}

// Close stops what the session's calls left running (a paused stream).
func (c *localConn) Close() error {
	c.session.Close()
	c.becomeMu.Lock()
	b := c.become
	c.becomeMu.Unlock()
	if b != nil {
		b.Close()
	}
	return nil
}

// Run execs argv directly: no shell is involved.
func (c *localConn) Run(ctx context.Context, argv []string, opts RunOptions) (*Result, error) {
	return runArgv(ctx, c.host.Name, argv, opts, c.exec)
}

// runArgv runs argv with exec (with Sudo, through sudo -n), what the Run
// of every Conn that starts an argv itself does.
func runArgv(ctx context.Context, host string, argv []string, opts RunOptions,
	exec func(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration, maxOut int64) (*Result, error)) (*Result, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: run: empty command", host)
	}
	line := argv
	if opts.Sudo {
		line = sudoArgv(argv)
	}
	res, err := exec(ctx, line, opts.Stdin, opts.Timeout, maxOutput(opts))
	if err == nil && opts.Sudo {
		err = sudoRunError(host, argv, res)
	}
	return res, err
}

// exec runs argv, keeping at most maxOut bytes of each stream. Cancelling
// signals only the process it started, through its os.Process (a pidfd on
// Linux), never a pid number that may have been reused.
func (c *localConn) exec(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration, maxOut int64) (*Result, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	overflow := func(*capWriter) { stop(ErrOutputCap) }
	stdout, stderr := newCapWriter("stdout", maxOut, overflow), newCapWriter("stderr", maxOut, overflow)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// TERM first, as over SSH; KILL if it still runs (or holds the pipes) 3s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	start := time.Now()
	err := cmd.Run()
	if cerr := capErr(c.host.Name, argv[0], stdout, stderr); cerr != nil {
		return nil, cerr
	}
	res := &Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Elapsed: time.Since(start)}
	// A command that exited on its own just before ctx ended keeps its
	// result (err is nil then); a cancelled one always has err set.
	if err != nil && ctx.Err() != nil {
		return nil, endedError(c.host.Name, argv[0], timeout, time.Since(start), ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	default:
		return nil, fmt.Errorf("%s: run %s: %w", c.host.Name, argv[0], err)
	}
	return res, nil
}

func (c *localConn) Put(ctx context.Context, p string, data io.Reader, mode os.FileMode) error {
	if err := putAtomic(ctx, localFS{}, p, data, mode); err != nil {
		return fmt.Errorf("%s: put %s: %w", c.host.Name, p, err)
	}
	return nil
}

func (c *localConn) Get(ctx context.Context, p string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: get %s: %w", c.host.Name, p, err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%s: get %s: %w", c.host.Name, p, err)
	}
	return b, nil
}

// Helper serves the verb in-process; with become it runs the helper binary
// through sudo -n instead, since gpush itself is not root: one serve
// session, through the local transport, as every command transport does.
func (c *localConn) Helper(ctx context.Context, verb string, req, resp any) error {
	body, err := encodeRequest(c.host.Name, verb, req)
	if err != nil {
		return err
	}
	if !c.host.Become {
		// Shaped like a run of the binary so that errors read the same,
		// and capped the same.
		sctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		out := newCapWriter("stdout", HelperMaxOutput, func(*capWriter) { stop(ErrOutputCap) })
		res := &Result{}
		hctx := c.session.Bind(sctx)
		if fn := progressOf(ctx); fn != nil {
			hctx = helper.WithProgress(hctx, func(p helper.Progress) {
				if b, err := json.Marshal(p); err == nil {
					fn(b)
				}
			})
		}
		serr := helper.Serve(hctx, verb, bytes.NewReader(body), out)
		if cerr := capErr(c.host.Name, "helper "+verb, out); cerr != nil {
			return cerr
		}
		if serr != nil {
			res.Stderr, res.ExitCode = []byte(serr.Error()), 1
		}
		res.Stdout = out.Bytes()
		return decodeHelper(c.host.Name, verb, "(in-process)", false, res, resp)
	}
	// With become: the serve session under sudo -n, as on any host.
	return c.becomeConn().Helper(ctx, verb, req, resp)
}

// DeployHelper copies the helper binary into the local helper folder
// (gpush_remote_dir) and returns its path; see the SSH version.
func (c *localConn) DeployHelper(ctx context.Context) (string, error) {
	return c.helper.get(func() (string, error) { return c.deploy(ctx) })
}

func (c *localConn) deploy(ctx context.Context) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%s: home directory: %w", c.host.Name, err)
	}
	return deployHelper(ctx, deployTarget{
		host: c.host, fs: localFS{}, machine: unameMachine(), home: filepath.Clean(home), uid: os.Getuid(),
		source: c.o.HelperSource, sum: localSum, log: c.log, uploads: &c.uploads,
	})
}

func unameMachine() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return runtime.GOARCH
	}
	b := make([]byte, 0, len(u.Machine))
	for _, ch := range u.Machine {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}
