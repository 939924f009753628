package remote

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Host key policies.
const (
	// HostKeyStrict refuses hosts missing from known_hosts (the default).
	HostKeyStrict = "strict"
	// HostKeyAcceptNew learns unknown hosts (appending to known_hosts) and
	// still refuses a changed key, like OpenSSH's StrictHostKeyChecking=accept-new.
	HostKeyAcceptNew = "accept-new"
)

// Inventory vars read by this package.
const (
	// VarRemoteDir is where the helper is deployed on a host (default ~/.cache/gpush).
	VarRemoteDir = "gpush_remote_dir"
	// DefaultRemoteDir is VarRemoteDir's default; ~ is the login user's home.
	DefaultRemoteDir = "~/.cache/gpush"
)

// Options tunes Dial. The zero value means the defaults documented per field.
type Options struct {
	// KnownHostsFile is the known_hosts to check host keys against
	// (default ~/.ssh/known_hosts). Hashed entries and [host]:port work.
	KnownHostsFile string
	// HostKeyPolicy is HostKeyStrict (default) or HostKeyAcceptNew.
	HostKeyPolicy string
	// ConnectTimeout bounds TCP connect, banner, key exchange and
	// authentication of each hop (default 10s); a host's own
	// Host.ConnectTimeout wins.
	ConnectTimeout time.Duration
	// KeepaliveInterval is how long the server may be silent before a
	// keepalive@openssh.com request is sent (default 15s; negative
	// disables). The keepalive has KeepaliveCountMax (default 3) deadlines
	// of one interval each to be answered; when none is met and nothing
	// else came, the connection is closed so that calls blocked on a stalled
	// server fail with ErrConnectionLost: (count+1) x interval after the
	// server last sent anything, as ssh's ServerAliveInterval/CountMax.
	KeepaliveInterval time.Duration
	KeepaliveCountMax int
	// AgentSocket is the ssh-agent socket (default $SSH_AUTH_SOCK; "none"
	// disables the agent).
	AgentSocket string
	// DefaultKeys are the identity files of a host that names none
	// (default ~/.ssh/id_ed25519, id_ecdsa, id_rsa), as for OpenSSH. Keys
	// are offered in this order: the host's IdentityFiles (or these), each
	// through the agent's copy if the file itself cannot be used; then the
	// agent's other keys unless the host has IdentitiesOnly. Set to an
	// empty non-nil slice to offer none.
	DefaultKeys []string
	// CompleteHop completes a ProxyJump hop from the caller's ssh_config,
	// as OpenSSH does for -J: it is given the hop as written (Name, and
	// Port and User where the spec has them) and returns it with what the
	// config says: Address (HostName), Port, User, IdentityFiles,
	// IdentitiesOnly and ProxyCommand (used for the first hop only). The
	// spec's own port and user win over what it returns. Called once per
	// hop per dial, from the dialling goroutines at once. Nil: hops are
	// dialled as written.
	CompleteHop func(hop Host) (Host, error)
	// HelperSource returns the gpush-helper binary for a GOARCH ("amd64",
	// "arm64"); see package helperbin. Needed for Helper on SSH hosts and
	// for Helper with become on the local host.
	HelperSource func(goarch string) ([]byte, error)
	// HelperDigest, when set, gives the hex sha256 and the size of the
	// helper HelperSource would give for a GOARCH, without its bytes: a
	// warm check needs only those, so a run whose hosts are all warm never
	// holds the binaries (both embedded ones are ~6 MiB of heap). Nil:
	// HelperSource's bytes are hashed. See helperbin.Digest.
	HelperDigest func(goarch string) (sum string, size int64, err error)
	// Logger receives debug and info lines (default: discard).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	home, _ := os.UserHomeDir()
	if o.KnownHostsFile == "" {
		o.KnownHostsFile = filepath.Join(home, ".ssh", "known_hosts")
	}
	if o.HostKeyPolicy == "" {
		o.HostKeyPolicy = HostKeyStrict
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.KeepaliveInterval == 0 {
		o.KeepaliveInterval = 15 * time.Second
	}
	if o.KeepaliveCountMax <= 0 {
		o.KeepaliveCountMax = 3
	}
	if o.AgentSocket == "" {
		o.AgentSocket = os.Getenv("SSH_AUTH_SOCK")
	}
	if o.DefaultKeys == nil {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			o.DefaultKeys = append(o.DefaultKeys, filepath.Join(home, ".ssh", n))
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
