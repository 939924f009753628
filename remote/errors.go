package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Dial stages, as DialError.Stage names them.
const (
	StageConfig   = "configuration"
	StageConnect  = "TCP connect"
	StageBanner   = "SSH banner"
	StageKex      = "key exchange"
	StageHostKey  = "host key check"
	StageAuth     = "authentication"
	StageProxy    = "proxy jump"
	StageSession  = "session"
	StageCanceled = "canceled"
)

// DialError is why a host could not be reached: the CLI maps it to
// "unreachable". Err explains the stage in operator terms.
type DialError struct {
	Host  string // Host.Name
	Hop   string // the jump host that failed, as ProxyJump names it; "" for the host itself
	Addr  string // host:port dialed (the hop's, for a failed jump host)
	Via   string // the jump host this address was dialed through, if any
	Stage string
	Err   error
}

func (e *DialError) Error() string {
	via := ""
	if e.Via != "" {
		via = " via " + e.Via
	}
	who := e.Host
	if e.Hop != "" {
		who += " through jump host " + e.Hop
	}
	if who == "" || who == e.Addr {
		return fmt.Sprintf("%s%s: cannot connect (%s): %v", e.Addr, via, e.Stage, e.Err)
	}
	return fmt.Sprintf("%s (%s%s): cannot connect (%s): %v", who, e.Addr, via, e.Stage, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// IsUnreachable reports whether err means the host could not be reached
// or the connection to it was lost, wherever that happened (dial, helper
// upload, helper call, command), as opposed to a command or the helper
// failing on a working connection. It is the one rule for "unreachable": a
// *DialError, ErrConnectionLost, or a transport error in the chain (EOF,
// connection reset or refused, closed connection, SFTP connection lost,
// a network error); a context that ended is not one.
func IsUnreachable(err error) bool {
	var de *DialError
	return errors.As(err, &de) || errors.Is(err, ErrConnectionLost) || isTransportError(err)
}

// ErrConnectionLost is wrapped by every error of a call whose connection
// died (peer closed, keepalives unanswered).
var ErrConnectionLost = errors.New("connection lost")

// HostKeyError is a host key that known_hosts does not vouch for.
type HostKeyError struct {
	Addr string // as written in known_hosts: host, or [host]:port
	File string // the known_hosts file
	// Changed is true when known_hosts holds a different key for the host;
	// OldLine and OldKey say where and what.
	Changed     bool
	OldLine     int
	OldKey      string // type and SHA256 fingerprint
	OfferedKey  string // type and SHA256 fingerprint of what the server sent
	LookupError error  // set when known_hosts could not be read at all
}

func (e *HostKeyError) Error() string {
	switch {
	case e.LookupError != nil:
		return fmt.Sprintf("cannot check host key of %s: %v", e.Addr, e.LookupError)
	case e.Changed:
		return fmt.Sprintf("WARNING: HOST KEY CHANGED for %s: it now offers %s, but %s line %d holds %s. "+
			"Someone may be intercepting the connection, or the host was reinstalled. Nothing was changed; "+
			"if the new key is expected, remove the old one (ssh-keygen -R %q -f %s) and connect again",
			e.Addr, e.OfferedKey, e.File, e.OldLine, e.OldKey, e.Addr, e.File)
	default:
		return fmt.Sprintf("host %s is not in %s (it offers %s); add it (ssh-keyscan, or connect once with ssh) "+
			"or use host key policy %q to learn new hosts", e.Addr, e.File, e.OfferedKey, HostKeyAcceptNew)
	}
}

// ErrSudoPassword is wrapped when sudo -n wants a password.
var ErrSudoPassword = errors.New("sudo requires a password")

// HelperError is a helper call that failed on the host.
type HelperError struct {
	Host     string
	Verb     string
	ExitCode int
	// Message is the helper's own error (its ErrorResponse), if it wrote one.
	Message string
	Stderr  string
}

func (e *HelperError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = strings.TrimSpace(e.Stderr)
	}
	if msg == "" {
		msg = "no error message"
	}
	return fmt.Sprintf("%s: helper %s failed (exit %d): %s", e.Host, e.Verb, e.ExitCode, msg)
}

// endedError is a command that ctx ended after elapsed: "timed out after"
// its own timeout only when that much time passed, not when the caller's
// deadline (the host's --timeout, a helper call's budget) came first or the
// run was interrupted.
func endedError(host, what string, timeout, elapsed time.Duration, why error) error {
	if timeout > 0 && errors.Is(why, context.DeadlineExceeded) && elapsed >= timeout {
		return fmt.Errorf("%s: %s: timed out after %s: %w", host, what, timeout, why)
	}
	if errors.Is(why, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %s: cut off by the caller's deadline after %s: %w", host, what, elapsed.Round(time.Millisecond), why)
	}
	return fmt.Errorf("%s: %s: %w", host, what, why)
}
