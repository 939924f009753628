package remote

import "time"

// Host is the target a connection is opened to: what Dial and the
// transports read of a host, and nothing of where it came from. The
// caller fills it from its own host description (package lua converts an
// inventory host).
type Host struct {
	// Name is the host's name in the caller's terms (the inventory name):
	// what messages and errors say, and OpenSSH's %n.
	Name string
	// Address is what to reach: the SSH address, or the container, pod or
	// node of a command transport; "" means Name.
	Address string
	// Port is the SSH port; 0 means 22.
	Port int
	// User is the login or transport user; "" means the default (the
	// local user for SSH, the transport's own for the others).
	User string
	// IdentityFiles are the private keys to offer, in order; empty means
	// Options.DefaultKeys.
	IdentityFiles []string
	// IdentitiesOnly offers only IdentityFiles, never the ssh-agent's
	// other keys.
	IdentitiesOnly bool
	// ProxyJump is "" (or "none") or a comma-separated list of
	// [user@]host[:port] hops, each completed by Options.CompleteHop.
	ProxyJump string
	// ProxyCommand is "" or a command whose stdin/stdout carry the SSH
	// connection, with OpenSSH's %h %p %r %n %% tokens still in it. At
	// most one of ProxyJump and ProxyCommand may be set.
	ProxyCommand string
	// Connection is the registered connection kind ("ssh", "local",
	// "podman", ...; see Connections); "" is "ssh".
	Connection string
	// ConnectTimeout bounds connecting (every hop); 0 means
	// Options.ConnectTimeout.
	ConnectTimeout time.Duration
	// Become runs the helper through sudo -n.
	Become bool
	// Vars are the host's settings read here and by the transports
	// (gpush_remote_dir, ansible_kubectl_namespace, gpush_command, ...).
	Vars map[string]any
}

// addressed is h with Address defaulted to Name: the form a command
// transport is given, so that it reads only Address.
func (h Host) addressed() Host {
	if h.Address == "" {
		h.Address = h.Name
	}
	return h
}
