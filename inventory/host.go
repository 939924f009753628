// Package inventory reads Ansible-compatible inventories (YAML and INI),
// expands host ranges and node sets, and selects hosts with patterns.
package inventory

import "time"

// Host is one resolved host with its effective connection settings and vars.
type Host struct {
	// Name is the inventory name ("gpu01").
	Name string `json:"name"`
	// Address is what to dial: ansible_host, ssh_config HostName, or Name.
	Address string `json:"address"`
	// Port is 0 for the default (22, or ssh_config's Port).
	Port int `json:"port,omitempty"`
	// User is "" for the default (ssh_config's User, then the local user).
	User string `json:"user,omitempty"`
	// IdentityFiles are private keys to offer (ansible_ssh_private_key_file, IdentityFile).
	IdentityFiles []string `json:"identity_files,omitempty"`
	// IdentitiesOnly offers only IdentityFiles (ssh_config IdentitiesOnly),
	// never the ssh-agent's other keys.
	IdentitiesOnly bool `json:"identities_only,omitempty"`
	// ProxyJump is "" or a comma-separated list of [user@]host[:port] hops.
	ProxyJump string `json:"proxy_jump,omitempty"`
	// ProxyCommand is "" or a command (ssh_config ProxyCommand, or -o
	// ProxyCommand in ansible_ssh_common_args) whose stdin/stdout carry the
	// SSH connection, with OpenSSH's %h %p %r %n %% tokens still in it: the
	// dialer expands them. ProxyJump and ProxyCommand exclude each other:
	// as in OpenSSH, whichever is given first wins, so at most one is set.
	ProxyCommand string `json:"proxy_command,omitempty"`
	// Connection is "ssh", "local", or a command transport: "podman",
	// "docker", "kubectl", "slurm", "gpush_command" (see remote's registry).
	Connection string `json:"connection"`
	// ConnectTimeout bounds connecting to the host (TCP, banner, key
	// exchange, login; every hop): ansible_ssh_timeout, else ssh_config
	// ConnectTimeout; 0 is gpush's default (10s).
	ConnectTimeout time.Duration `json:"connect_timeout,omitempty"`
	// Become runs the helper through sudo -n.
	Become bool `json:"become,omitempty"`
	// Groups the host belongs to, "all" included, sorted.
	Groups []string `json:"groups"`
	// Vars are the effective host vars (group vars merged, host vars win).
	Vars map[string]any `json:"vars"`
}

// IsLocal reports whether the host is the machine gpush runs on.
func (h Host) IsLocal() bool { return h.Connection == "local" }

// IsSSH reports whether the host is reached over SSH (ssh_config applies).
func (h Host) IsSSH() bool { return h.Connection == "ssh" || h.Connection == "" }
