package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// StageProxyCommand is a ProxyCommand that could not be started or that
// ended before the SSH handshake completed.
const StageProxyCommand = "proxy command"

const (
	// proxyStderrCap bounds what is kept of a ProxyCommand's stderr (the
	// latest bytes: the reason it failed is usually its last line).
	proxyStderrCap = 64 << 10
	// proxyStderrShown is how much of that an error message quotes.
	proxyStderrShown = 4 << 10
	// proxyExitGrace is how long a command that closed its output is given
	// to exit by itself (keeping its exit status) before it is signalled,
	// and how long a signalled one is given before SIGKILL.
	proxyExitGrace = time.Second
)

// ProxyCommandError is a ProxyCommand that exited by itself, during the
// handshake or later in the session: its exit status and what it wrote to
// stderr, which say why far better than the closed connection the SSH
// client saw (Err).
type ProxyCommandError struct {
	Host     string // Host.Name (or the jump host as written)
	ExitCode int    // -1 when a signal ended it
	Signal   string // the signal that ended it, if any
	Stderr   string // the latest proxyStderrCap bytes
	Err      error  // what the SSH handshake reported
}

func (e *ProxyCommandError) Error() string {
	how := "exited " + strconv.Itoa(e.ExitCode)
	if e.Signal != "" {
		how = "was killed by signal " + e.Signal
	}
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		return fmt.Sprintf("ProxyCommand for %s %s without writing to stderr (%v)", e.Host, how, e.Err)
	}
	return fmt.Sprintf("ProxyCommand for %s %s: %s", e.Host, how, quoteStderr(msg))
}

func (e *ProxyCommandError) Unwrap() error { return e.Err }

// quoteStderr shows the end of a command's stderr on one line, escaped.
func quoteStderr(s string) string {
	cut := ""
	if len(s) > proxyStderrShown {
		s, cut = s[len(s)-proxyStderrShown:], "..."
	}
	q := strconv.Quote(s)
	return q[:1] + cut + q[1:]
}

// proxySafe is what a token's value may hold once put into the command:
// host names, IPv4 and IPv6 addresses (zones included) and user names.
// Anything else could be read by the shell as syntax, and the values come
// from inventories (dynamic ones included), not from the operator's
// command text; OpenSSH 9.6 added the same refusal.
func proxySafe(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("._:%@+-[]", r):
		default:
			return false
		}
	}
	return true
}

// expandProxyCommand replaces OpenSSH's ProxyCommand tokens: %h the
// address dialled (HostName), %p the port, %r the login name, %n and %k the
// host's original name (gpush has no HostKeyAlias), %% a percent sign.
// name is the host for error messages.
func expandProxyCommand(command, name, host string, port int, user, orig string) (string, error) {
	vals := map[byte]string{'h': host, 'p': strconv.Itoa(port), 'r': user, 'n': orig, 'k': orig}
	var b strings.Builder
	for i := 0; i < len(command); i++ {
		c := command[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(command) {
			return "", fmt.Errorf("ProxyCommand for %s ends with a lone %%", name)
		}
		i++
		tok := command[i]
		if tok == '%' {
			b.WriteByte('%')
			continue
		}
		v, ok := vals[tok]
		if !ok {
			return "", fmt.Errorf("ProxyCommand for %s: unknown token %%%c (want %%h %%p %%r %%n %%k or %%%%)", name, tok)
		}
		if !proxySafe(v) {
			return "", fmt.Errorf("ProxyCommand for %s: %%%c would be %q, which the shell could read as more than a name; refused",
				name, tok, v)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// proxyConn is a net.Conn over a ProxyCommand's stdin and stdout. Closing
// it ends the command (its process group) and reaps it.
type proxyConn struct {
	name   string
	raddr  net.Addr
	r      *os.File // the command's stdout
	w      *os.File // the command's stdin
	proc   *os.Process
	pid    int
	stderr capTail

	// mu orders signalling the group against reaping its leader: while
	// the leader is unreaped (at worst a zombie) its pid, which is the
	// group's id, cannot name another process.
	mu     sync.Mutex
	reaped bool
	state  *os.ProcessState
	waitEr error
	exited chan struct{} // closed once reaped
	errEOF chan struct{} // closed once stderr is drained

	outEOF    atomic.Bool // the command closed its stdout
	closeOnce sync.Once
	killed    atomic.Bool // gpush signalled it
}

// startProxyCommand runs command (already expanded) as OpenSSH does:
// `/bin/sh -c "exec command"` in a process group of its own. The command is
// the operator's own configuration text (ssh_config or
// ansible_ssh_common_args), never assembled from host data; only the
// checked token values were put in.
func startProxyCommand(ctx context.Context, name, command, host string, port int) (*proxyConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("ProxyCommand for %s: stdin pipe: %w", name, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("ProxyCommand for %s: stdout pipe: %w", name, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		return nil, fmt.Errorf("ProxyCommand for %s: stderr pipe: %w", name, err)
	}
	cmd := exec.Command("/bin/sh", "-c", "exec "+command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	// The child has its ends now; ours would hide its EOF.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("ProxyCommand for %s: start /bin/sh: %w", name, err)
	}
	c := &proxyConn{
		name: name, r: outR, w: inW, proc: cmd.Process, pid: cmd.Process.Pid,
		raddr:  &net.TCPAddr{IP: net.ParseIP(strings.Trim(host, "[]")), Port: port},
		exited: make(chan struct{}), errEOF: make(chan struct{}),
	}
	c.stderr.limit = proxyStderrCap
	go func() {
		defer close(c.errEOF)
		defer errR.Close()
		buf := make([]byte, 4096)
		for {
			n, err := errR.Read(buf)
			c.stderr.add(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	go c.reap(cmd)
	return c, nil
}

// reap waits for the leader to exit without reaping it, then reaps it
// under mu so that Close never signals a recycled process group id.
func (c *proxyConn) reap(cmd *exec.Cmd) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, c.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	c.mu.Lock()
	c.waitEr = cmd.Wait()
	c.state = cmd.ProcessState
	c.reaped = true
	c.mu.Unlock()
	close(c.exited)
}

// signal sends sig to the command's process group, unless its leader is
// already reaped.
func (c *proxyConn) signal(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.reaped {
		c.killed.Store(true)
		syscall.Kill(-c.pid, sig)
	}
}

func (c *proxyConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, io.EOF) {
		c.outEOF.Store(true)
	}
	return n, err
}

func (c *proxyConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close gives the command EOF on stdin, then ends it: SIGHUP as OpenSSH
// sends, SIGKILL if it lingers, and reaps it.
func (c *proxyConn) Close() error {
	c.closeOnce.Do(func() {
		c.w.Close()
		c.r.Close()
		if c.outEOF.Load() {
			// It closed the connection itself: let it exit with its own
			// status, which explains the failure.
			select {
			case <-c.exited:
			case <-time.After(proxyExitGrace):
			}
		}
		c.signal(syscall.SIGHUP)
		select {
		case <-c.exited:
		case <-time.After(proxyExitGrace):
			c.signal(syscall.SIGKILL)
			<-c.exited
		}
	})
	return nil
}

func (c *proxyConn) LocalAddr() net.Addr  { return &net.TCPAddr{} }
func (c *proxyConn) RemoteAddr() net.Addr { return c.raddr }

func (c *proxyConn) SetDeadline(t time.Time) error {
	return errors.Join(c.r.SetReadDeadline(t), c.w.SetWriteDeadline(t))
}
func (c *proxyConn) SetReadDeadline(t time.Time) error  { return c.r.SetReadDeadline(t) }
func (c *proxyConn) SetWriteDeadline(t time.Time) error { return c.w.SetWriteDeadline(t) }

// explain turns a failed handshake over c (already closed) into the
// command's own account when it exited by itself; otherwise err, with
// whatever the command wrote to stderr.
func (c *proxyConn) explain(err error) (stage string, out error) {
	<-c.exited // Close reaped it
	select {
	case <-c.errEOF:
	case <-time.After(proxyExitGrace): // a child of it still holds stderr
	}
	stderr := c.stderr.String()
	if c.killed.Load() {
		if msg := strings.TrimSpace(stderr); msg != "" {
			return "", fmt.Errorf("%w (ProxyCommand stderr: %s)", err, quoteStderr(msg))
		}
		return "", err
	}
	pe := &ProxyCommandError{Host: c.name, ExitCode: -1, Stderr: stderr, Err: err}
	if c.state != nil {
		pe.ExitCode = c.state.ExitCode()
		if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			pe.Signal = ws.Signal().String()
		}
	} else if c.waitEr != nil {
		pe.Err = errors.Join(err, c.waitEr)
	}
	return StageProxyCommand, pe
}

// lostWhy says why a session carried by c ended while gpush still used it:
// the command's exit status and stderr when it failed by itself (a session
// manager's token expired, a bastion went down), or err with the stderr it
// wrote. An exit status of 0 is no failure of its own: err is the cause.
func (c *proxyConn) lostWhy(err error) error {
	c.Close()
	_, why := c.explain(err)
	var pe *ProxyCommandError
	if errors.As(why, &pe) && pe.ExitCode == 0 && pe.Signal == "" {
		if msg := strings.TrimSpace(pe.Stderr); msg != "" {
			return fmt.Errorf("%w (ProxyCommand stderr: %s)", err, quoteStderr(msg))
		}
		return err
	}
	return why
}

// capTail keeps the latest limit bytes written to it.
type capTail struct {
	mu    sync.Mutex
	limit int
	b     []byte
}

func (t *capTail) add(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.limit; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
}

func (t *capTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// proxyCommandOf is the command to run for a ProxyCommand setting; "" for
// none.
func proxyCommandOf(s string) string {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "none") {
		return ""
	}
	return s
}
