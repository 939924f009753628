package lua

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/remote"
)

// The runtime is where inventory hosts meet package remote, which knows
// nothing of inventories: RemoteHost is the one conversion, and
// SSHConfigHops gives remote the ssh_config it no longer reads itself.

// RemoteHost is h as package remote dials it.
func RemoteHost(h inventory.Host) remote.Host {
	return remote.Host{
		Name:           h.Name,
		Address:        h.Address,
		Port:           h.Port,
		User:           h.User,
		IdentityFiles:  h.IdentityFiles,
		IdentitiesOnly: h.IdentitiesOnly,
		ProxyJump:      jumpHops(h.ProxyJump),
		ProxyCommand:   h.ProxyCommand,
		Connection:     h.Connection,
		ConnectTimeout: h.ConnectTimeout,
		Become:         h.Become,
		Vars:           h.Vars,
	}
}

// jumpHops writes each ProxyJump hop as [user@]host[:port], the one form
// remote reads: OpenSSH's URI form (ssh://user@host:port) is read here, by
// inventory's parser, so that remote never takes "ssh://user" for a user.
// A hop that does not parse is kept as written, for remote to refuse.
func jumpHops(list string) string {
	if !strings.Contains(list, "://") {
		return list
	}
	hops := strings.Split(list, ",")
	for i, spec := range hops {
		if hop, err := inventory.ParseJumpHop(spec); err == nil {
			hops[i] = hop.String()
		}
	}
	return strings.Join(hops, ",")
}

// Dialer is an Options.Dial that opens each host with remote.Dial and o.
func Dialer(o remote.Options) func(context.Context, inventory.Host) (remote.Conn, error) {
	return func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
		return remote.Dial(ctx, RemoteHost(h), o)
	}
}

// SSHConfigHops is a remote.Options.CompleteHop that completes ProxyJump
// hops from the ssh_config file as the inventory completes a host:
// HostName (with its % tokens), Port, User, IdentityFile, IdentitiesOnly
// and ProxyCommand, the hop's own port and user winning. file "" is
// ~/.ssh/config; "none" gives nil (hops are dialled as written). The file
// is read at the first hop and kept for the process; while it cannot be
// read, log is warned and hops are dialled as written.
func SSHConfigHops(file string, log *slog.Logger) func(remote.Host) (remote.Host, error) {
	if file == "none" {
		return nil
	}
	if file == "" {
		home, _ := os.UserHomeDir()
		file = filepath.Join(home, ".ssh", "config")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(hop remote.Host) (remote.Host, error) {
		cfg := hopConfig(file, log)
		if cfg == nil {
			return hop, nil
		}
		h := inventory.Host{Name: hop.Name, Port: hop.Port, User: hop.User, Connection: "ssh"}
		// Its errors name the file and line; remote adds the hop.
		if err := cfg.Complete(&h); err != nil {
			return remote.Host{}, err
		}
		return RemoteHost(h), nil
	}
}

// hopConfigs holds the ssh_config files read for hops: path ->
// *inventory.SSHConfig. A file that failed to load is not kept, so that a
// later dial tries it again.
var hopConfigs sync.Map

func hopConfig(file string, log *slog.Logger) *inventory.SSHConfig {
	if c, ok := hopConfigs.Load(file); ok {
		return c.(*inventory.SSHConfig)
	}
	cfg, err := inventory.LoadSSHConfig([]string{file}, "")
	if err != nil {
		log.Warn("ignoring unreadable ssh config for ProxyJump hops", "file", file, "err", err)
		return nil
	}
	c, _ := hopConfigs.LoadOrStore(file, cfg)
	return c.(*inventory.SSHConfig)
}
