package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpush/gpush/lab/labns"
	"github.com/gpush/gpush/lab/labsystemd"
)

// Options.Isolate: each host's processes live in a PID namespace of their
// own (pid 1 there is a lab-init), and its SSH sessions enter that
// namespace with its mount namespace, whose /proc shows the namespace only.
// The lab itself stays in the machine's namespaces and tracks every process
// by its machine pid (Proc.PID); Proc.HostPID is what the host sees.
//
// Which host a session belongs to: every isolated host's proxy dials the
// sshd from a loopback address of its own (Host.ClientAddr), and the sshd's
// ForceCommand (the enter script below) looks that address up in Dir/ns/,
// where the host's init pid and namespace id are written.

// clientAddr is the loopback address host i (0-based) dials the sshd from:
// 127.1.X.Y, unique for up to 62,500 hosts.
func clientAddr(i int) string {
	n := i + 1
	return fmt.Sprintf("127.1.%d.%d", n/250, n%250+1)
}

// startInit starts host i's lab-init in a new PID and mount namespace,
// waits for its /proc, and publishes it for the enter script.
func (l *Lab) startInit(ctx context.Context, h *Host, i int) error {
	h.ClientAddr = clientAddr(i)
	in, err := labns.Start(ctx, l.bin.Init, labns.Options{Env: labEnv()})
	if err != nil {
		return fmt.Errorf("lab host %s: %w", h.Name, err)
	}
	l.inits[h.Name] = in
	h.InitPID = in.PID
	// Written whole, then renamed: the enter script never reads half.
	dir := filepath.Join(l.Dir, "ns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab host %s: %w", h.Name, err)
	}
	tmp := filepath.Join(dir, "."+h.ClientAddr)
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %s %s\n", in.PID, in.NSID, h.Name)), 0o644); err != nil {
		return fmt.Errorf("lab host %s: %w", h.Name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, h.ClientAddr)); err != nil {
		return fmt.Errorf("lab host %s: %w", h.Name, err)
	}
	return nil
}

// startIn starts cmd in h's PID namespace (labns.View.StartIn: its mount
// namespace stays the machine's), or in the machine's without isolation.
func (l *Lab) startIn(h Host, cmd *exec.Cmd) error {
	in := l.inits[h.Name]
	if in == nil {
		return cmd.Start()
	}
	return in.StartIn(cmd)
}

// machinePID turns the pid a unit's process said in h's namespace into its
// machine pid, found among the unit's cgroup members (read here, so in the
// machine's numbering). Without isolation both are the same.
func (l *Lab) machinePID(h Host, unit string, nsPID int) (int, error) {
	if l.inits[h.Name] == nil {
		return nsPID, nil
	}
	cfg := labsystemd.Config{CgroupBase: l.cgroupBase + "/" + h.Name}
	for _, hier := range l.cgroups {
		for _, pid := range labsystemd.Procs(filepath.Join(hier, cfg.UnitCgroup(unit))) {
			if labns.HostPID(pid) == nsPID {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("lab host %s: %s: no member of its cgroup is pid %d in the host's namespace", h.Name, unit, nsPID)
}

// writeEnter writes the sshd's ForceCommand: it runs the session's command
// (a shell when none) in the namespaces of the host whose client address
// the session comes from, and in the machine's for any other address (the
// sshd's own port). A host whose init is gone refuses the session rather
// than running it in the machine's view.
func (l *Lab) writeEnter() (string, error) {
	nsDir := filepath.Join(l.Dir, "ns")
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	script := `#!/bin/sh
# gpush lab (Options.Isolate): the sshd's ForceCommand. Generated.
set -f
ns=` + shellQuote(nsDir) + `
addr=${SSH_CONNECTION%% *}
set --
case $addr in
127.1.*)
	if [ -f "$ns/$addr" ]; then
		read -r pid nsid host < "$ns/$addr"
		if [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" != "$nsid" ]; then
			echo "gpush lab: lab host $host (client $addr) has no process view any more (its lab-init $pid is gone)" >&2
			exit 255
		fi
		set -- nsenter --target "$pid" --pid --mount --wd="$PWD" --
	fi
	;;
esac
if [ -z "$SSH_ORIGINAL_COMMAND" ]; then
	exec "$@" "$SHELL" -l
fi
exec "$@" "$SHELL" -c "$SSH_ORIGINAL_COMMAND"
`
	path := filepath.Join(l.Dir, "sshd-enter")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("lab: write %s: %w", path, err)
	}
	return path, nil
}

// shellQuote quotes s for sh: one word, nothing expanded.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
