package remote

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// isTransportError reports whether err is the link itself failing (the
// peer closed or reset it, it timed out, a channel or SFTP session died
// with it), as opposed to a command, the helper or a remote file
// operation failing on a working connection.
func isTransportError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var oe *net.OpError
	var ne net.Error
	return errors.As(err, &oe) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, sftp.ErrSSHFxConnectionLost) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

// transportError is isTransportError, or a command's channel closing
// without an exit status (which only a dying connection does to sshd).
func transportError(err error) bool {
	var missing *ssh.ExitMissingError
	return isTransportError(err) || errors.As(err, &missing)
}

// deadCause returns why c died, waiting briefly when err looks like the
// link failing: a dropped link fails the channels first and ends the
// connection right after. nil when c is still alive.
func (c *sshConn) deadCause(err error) error {
	if transportError(err) {
		select {
		case <-c.dead:
		case <-time.After(2 * time.Second):
		}
	}
	select {
	case <-c.dead:
		c.deadMu.Lock()
		defer c.deadMu.Unlock()
		return c.deadWhy
	default:
		return nil
	}
}

// markLost makes err, returned by an operation on c, wrap ErrConnectionLost
// when the connection died under it, keeping err's own text (which says
// what was being done: "upload helper to ...").
func (c *sshConn) markLost(err error) error {
	if err == nil || errors.Is(err, ErrConnectionLost) {
		return err
	}
	if why := c.deadCause(err); why != nil {
		return &lostError{err: err, why: why}
	}
	return err
}

// lostError is an operation's error on a connection that died: it wraps
// both the error and ErrConnectionLost, and says why the connection died.
type lostError struct {
	err, why error
}

func (e *lostError) Error() string {
	s := e.err.Error()
	if !strings.HasSuffix(s, ErrConnectionLost.Error()) { // SFTP says it too
		s += ": " + ErrConnectionLost.Error()
	}
	return s + " (" + e.why.Error() + ")"
}

func (e *lostError) Unwrap() []error { return []error{e.err, ErrConnectionLost} }
