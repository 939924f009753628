// Package remote reaches a host: the Conn interface, SSH connections
// (x/crypto/ssh with known_hosts, agent, ProxyJump, ProxyCommand,
// keepalives), the local connection, the command transports, and
// deployment of the helper. It is given a Host and Options and reads no
// inventory or ssh_config itself: the caller converts its hosts and
// completes ProxyJump hops through Options.CompleteHop.
package remote

import (
	"context"
	"io"
	"os"
	"time"
)

// RunOptions tunes one command.
type RunOptions struct {
	// Stdin is fed to the command; nil means empty.
	Stdin io.Reader
	// Sudo runs the command through `sudo -n` (become).
	Sudo bool
	// Timeout bounds the command (0: only ctx bounds it).
	Timeout time.Duration
	// MaxOutput caps what is kept of stdout and of stderr, each (0:
	// DefaultMaxOutput). A command printing more is stopped and the call
	// fails with an *OutputCapError (wrapping ErrOutputCap).
	MaxOutput int64
}

// Result is what a command did. A non-zero exit is a Result, not an error.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
	Elapsed  time.Duration
}

// Conn is one open connection to one host, reused by every call of a run.
// Implementations are safe for concurrent use.
type Conn interface {
	// Host is the host's name (Host.Name).
	Host() string
	// Run runs an argument vector. Nothing is ever built into a shell
	// string from user input: over SSH every element is quoted for the
	// remote POSIX shell; locally argv is exec'd directly. With Sudo, sudo
	// refusing for want of a password is an error wrapping ErrSudoPassword
	// (returned with the Result).
	Run(ctx context.Context, argv []string, opts RunOptions) (*Result, error)
	// Helper runs `gpush-helper <verb>` on the host (deploying it on first
	// use), writes req as JSON to its stdin and decodes its stdout into resp.
	Helper(ctx context.Context, verb string, req, resp any) error
	// Put writes data to path atomically (temp file in the same folder, then rename).
	Put(ctx context.Context, path string, data io.Reader, mode os.FileMode) error
	// Get reads a remote file.
	Get(ctx context.Context, path string) ([]byte, error)
	// Close ends the connection.
	Close() error
}

// Deployer is implemented by the Conns of this package: DeployHelper puts
// the helper on the host if needed (a no-op after the first call) and
// returns its path there. `gpush hosts` and the lab use it to warm hosts.
type Deployer interface {
	DeployHelper(ctx context.Context) (string, error)
}

// HelperStarter is implemented by Conns whose helper runs in a session of
// its own (over SSH: the serve session behind the warm check). StartHelper
// starts it now, so that a caller can bound that setup (on a cold host, the
// upload) apart from the time it gives a request; verb names the call it is
// for in errors.
type HelperStarter interface {
	StartHelper(ctx context.Context, verb string) error
}

var (
	_ Deployer      = (*sshConn)(nil)
	_ Deployer      = (*localConn)(nil)
	_ HelperStarter = (*sshConn)(nil)
)
