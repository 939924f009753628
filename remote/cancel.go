package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Cancelling a remote command signals only what gpush started, without a
// pid: a pid read back from the host may belong to another process by the
// time it is used.
//
// The SSH "signal" request comes first: sshd signals the process group of
// the session it forked itself. OpenSSH refuses it for root logins ("session
// signalling requires privilege separation"), and closing the channel does
// not stop a command that has no pty, so every command also runs under a
// small POSIX sh wrapper that can stop its own process group: it makes a
// private folder /tmp/.gpush-run-<token> (the token is random per command,
// chosen by gpush) holding a FIFO, keeps the FIFO open for writing, and a
// watcher reads it. To cancel, gpush writes a line into the FIFO from a new
// session; the watcher then sends TERM to its own process group (kill 0:
// sshd made the wrapper a session and group leader), then KILL 3s later. A
// group cannot be reused while a member of it lives, and the watcher is
// one. If the wrapper dies without cleaning up (SIGKILL, the OOM killer),
// its end of the FIFO closes and the watcher, reading EOF, stops the group
// the same way and removes the folder: nothing is left waiting forever.
//
// If the folder cannot be made (a read-only /tmp, a name taken), the command
// still runs, cancellable only by the SSH signal and the channel close.

// cancelDirPrefix names the control folder of a command; the token follows.
// A variable only so that tests can watch a private folder.
var cancelDirPrefix = "/tmp/.gpush-run-"

// cancelGrace is how long the watcher waits after TERM before KILL.
const cancelGrace = "3"

func newCancelToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// wrapCommand returns the script the remote login shell runs for cmdline.
// The wrapper stays the parent of cmdline (no exec) so that its watcher
// outlives a stopped command and the exit status passes through. Its own
// stderr goes to /dev/null (the command's is kept on fd 3 and restored in
// the subshell): a shell reports a child killed by a signal ("Killed") on
// its own stderr, which must not read as the command's.
func wrapCommand(cmdline, token string) string {
	d := ShellQuote(cancelDirPrefix + token)
	return `exec 3>&2 2>/dev/null; d=` + d + `; w=
if mkdir -m 700 "$d"; then
  if mkfifo -m 600 "$d/c" && command exec 4<>"$d/c"; then
    (trap '' TERM INT HUP; read _ <"$d/c"; kill -TERM 0; sleep ` + cancelGrace + `; rm -rf "$d"; kill -KILL 0) </dev/null >/dev/null 2>&1 3>&- 4>&- &
    w=$!
    trap 'echo x >&4; exit 143' TERM
  else
    rm -rf "$d"
  fi
fi
( ` + cmdline + `
) 2>&3 3>&- 4>&-
s=$?
if [ -n "$w" ]; then { kill -KILL "$w"; wait "$w"; } 2>/dev/null; rm -rf "$d"; fi
exit $s`
}

// cancelCommand is what a second session runs to stop the command wrapped
// with token. The token is no secret (it shows in ps), so the folder is
// entered first and judged as "." (owned by the login user, a real folder):
// nobody else can then swap what "c" names before it is opened, even if
// the path is removed and made again meanwhile. Opening the FIFO read-write
// never blocks, even with the watcher gone.
func cancelCommand(token string) string {
	d := ShellQuote(cancelDirPrefix + token)
	return `d=` + d + `; [ -d "$d" ] && [ ! -h "$d" ] && cd -P -- "$d" 2>/dev/null && [ -O . ] && [ ! -h c ] && [ -p c ] && { echo x 1<>c; } 2>/dev/null; exit 0`
}

// cancelRemote asks the wrapper of token to stop its process group, over a
// new session, giving up after a few seconds (a dead peer).
func (c *sshConn) cancelRemote(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sess, err := c.newSession(ctx)
	if err != nil {
		c.log.Debug("cancel: no session", "err", err)
		return
	}
	defer sess.Close()
	if err := sess.Start(cancelCommand(token)); err != nil {
		return
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
