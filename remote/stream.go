package remote

import (
	"io"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Stream is a command a Transport started on a host, with its pipes: whatever the transport (an SSH channel, a local process, `podman
// exec -i`, `kubectl exec -i`, a site's own command), the serve client
// (serve.go) speaks `gpush-helper serve` over one of these and nothing
// else.
type Stream interface {
	// Read reads the command's stdout.
	io.Reader
	// Write writes to the command's stdin.
	io.Writer
	// Stderr is the command's stderr; the serve client reads it only
	// once the command failed or ended.
	Stderr() io.Reader
	// CloseWrite ends the command's stdin; the command runs on.
	CloseWrite() error
	// Close stops the command: its stdin ends and it is let go.
	Close() error
	// Exit waits up to wait for the command's end and returns its exit
	// status (-1: none) or the signal that ended it (its name without
	// SIG: "KILL"); exited is false when wait passed first.
	Exit(wait time.Duration) (status int, signal string, exited bool)
}

// serveOwner is the connection a serve session belongs to, for its errors.
type serveOwner interface {
	// Host is the host's name (Host.Name).
	Host() string
	// becomes reports whether the helper runs through sudo -n.
	becomes() bool
	// deadCause is non-nil when err means the connection itself is gone.
	deadCause(err error) error
	// lost is the error of a step the connection's loss cut off.
	lost(what string, err error) error
}

// sshStream is a bare SSH session channel running a command. Its requests
// (the exit status, sshd's keepalives) are taken by the poller.
type sshStream struct {
	ch   ssh.Channel
	reqs *unaskedWatch

	exitMu     sync.Mutex
	exitStatus int // -1 until sshd sends one
	exitSignal string
}

func (s *sshStream) Read(p []byte) (int, error)  { return s.ch.Read(p) }
func (s *sshStream) Write(p []byte) (int, error) { return s.ch.Write(p) }
func (s *sshStream) Stderr() io.Reader           { return s.ch.Stderr() }
func (s *sshStream) Close() error                { return s.ch.Close() }
func (s *sshStream) CloseWrite() error           { return s.ch.CloseWrite() }

func (s *sshStream) Exit(wait time.Duration) (int, string, bool) {
	exited := s.reqs.finish(wait)
	status, signal := s.exit()
	return status, signal, exited
}

func (c *sshConn) becomes() bool { return c.host.Become }

var (
	_ Stream     = (*sshStream)(nil)
	_ serveOwner = (*sshConn)(nil)
)
