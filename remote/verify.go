package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
)

// The helper runs as root: before its first run on each connection (and
// after every upload) gpush checks the path it runs it from, and that the
// file holds exactly the bytes it uploads. Checked on each connection, not
// once at deploy: a folder that turned unsafe since is caught on the next
// run. Together the two checks leave no gap until the exec: nobody but
// root and the login user can change a folder the path check accepted.

// checkHelperPath checks every folder from / down to dir, the helper
// folder: each must be a real directory (no symlink), owned by root or the
// login user, and writable by nobody else. An ancestor may be world-
// writable only when it is sticky and root-owned (as /tmp): others cannot
// rename or remove what they do not own there. dir itself is held to
// checkPrivateDir's stricter rule.
func checkHelperPath(fsys fileSys, dir string, uid int) error {
	comps := pathComponents(dir)
	infos := make([]fileInfo, len(comps))
	errs := make([]error, len(comps))
	// All at once: over SFTP the requests share round trips.
	var wg sync.WaitGroup
	for i, p := range comps {
		wg.Add(1)
		go func() { defer wg.Done(); infos[i], errs[i] = fsys.Lstat(p) }()
	}
	wg.Wait()
	for i, p := range comps {
		if errs[i] != nil {
			return fmt.Errorf("helper folder %s: folder %s on its path: %w", dir, p, errs[i])
		}
		if i == len(comps)-1 {
			return checkPrivateDir(dir, infos[i], uid)
		}
		if why := ancestorProblem(infos[i], uid); why != "" {
			return fmt.Errorf("helper folder %s: folder %s on its path %s, so another user could swap the helper "+
				"before it runs as root; refusing: set %s to a path whose every folder is root's or the login user's",
				dir, p, why, VarRemoteDir)
		}
	}
	return nil
}

// ancestorProblem says what is wrong with a folder above the helper
// folder ("" if fine).
func ancestorProblem(fi fileInfo, uid int) string {
	switch {
	case fi.mode&fs.ModeSymlink != 0:
		return "is a symlink"
	case !fi.mode.IsDir():
		return "is not a directory (" + fi.mode.Type().String() + ")"
	case fi.uid != 0 && fi.uid != uid:
		return fmt.Sprintf("is owned by uid %d, not by root or the login user (uid %d)", fi.uid, uid)
	case fi.mode.Perm()&0o022 != 0 && !(fi.mode&fs.ModeSticky != 0 && fi.uid == 0 && fi.mode.Perm()&0o002 != 0):
		return fmt.Sprintf("is group- or world-writable (mode %04o) without being a sticky root folder like /tmp", fi.mode.Perm())
	}
	return ""
}

// pathComponents lists "/", "/a", "/a/b" for "/a/b".
func pathComponents(p string) []string {
	p = path.Clean(p)
	out := []string{"/"}
	if p == "/" {
		return out
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i := range parts {
		out = append(out, "/"+strings.Join(parts[:i+1], "/"))
	}
	return out
}

// fileOpener reads a file of a host's file system (fileSys does not).
type fileOpener interface {
	Open(p string) (io.ReadCloser, error)
}

func (s sftpFS) Open(p string) (io.ReadCloser, error) { return s.c.Open(p) }
func (localFS) Open(p string) (io.ReadCloser, error)  { return os.Open(p) }

// readBackSum hashes the file at p as read from the host, reading at most
// size+1 bytes: a file that grew is a mismatch, not a long read.
func readBackSum(ctx context.Context, o fileOpener, p string, size int64) (string, error) {
	f, err := o.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	h := sha256.New()
	// io.Copy into a bounded writer (not from a LimitReader) lets an SFTP
	// file use its pipelined WriteTo: one round trip per 32 KiB would
	// make a read-back over a long link take seconds.
	if _, err := io.Copy(&boundedWriter{w: h, left: size + 1}, f); err != nil && !errors.Is(err, errTooLong) {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var errTooLong = errors.New("file longer than expected")

// boundedWriter passes on at most left bytes, then fails the copy.
type boundedWriter struct {
	w    io.Writer
	left int64
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		n, _ := b.w.Write(p[:b.left])
		b.left = 0
		return n, errTooLong
	}
	b.left -= int64(len(p))
	return b.w.Write(p)
}

// sumCommand is the host's tool that hashes the helper (a variable so that
// a test can name a missing one and exercise the read-back).
var sumCommand = "sha256sum"

// errNoSumTool is returned by hostSum when the host lacks sumCommand.
var errNoSumTool = errors.New("no sha256sum on the host")

// hostSum hashes p with the host's sha256sum: a separate program, so a
// planted helper cannot answer for itself, and only 64 hex digits cross
// the link instead of the whole file.
func (c *sshConn) hostSum(ctx context.Context, p string) (string, error) {
	res, err := c.exec(ctx, sumCommand, ShellJoin([]string{sumCommand, "--", p}), nil, 0, 64<<10)
	if err != nil {
		return "", err
	}
	if res.ExitCode == 127 {
		return "", errNoSumTool
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("%s %s exited %d: %s", sumCommand, p, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return parseSumLine(res.Stdout)
}

// parseSumLine takes the digest from sha256sum's "<64 hex>  <name>" line,
// the last one printed: a chatty shell startup file may print before it.
func parseSumLine(out []byte) (string, error) {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) == 0 || len(f[0]) != 64 {
		return "", fmt.Errorf("%s printed %.100q, not a sha256 line", sumCommand, out)
	}
	if _, err := hex.DecodeString(f[0]); err != nil {
		return "", fmt.Errorf("%s printed %.100q, not a sha256 line", sumCommand, out)
	}
	return strings.ToLower(f[0]), nil
}

// sshSum is the SSH hosts' deployTarget.sum: the host's sha256sum, else
// the file read back over SFTP and hashed here.
func (c *sshConn) sshSum(fsys sftpFS) func(ctx context.Context, p string, size int64) (string, error) {
	return func(ctx context.Context, p string, size int64) (string, error) {
		sum, err := c.hostSum(ctx, p)
		if !errors.Is(err, errNoSumTool) {
			return sum, err
		}
		c.log.Debug("no sha256sum on the host: reading the helper back over SFTP", "path", p)
		return readBackSum(ctx, fsys, p, size)
	}
}

// localSum is the local host's deployTarget.sum.
func localSum(ctx context.Context, p string, size int64) (string, error) {
	return readBackSum(ctx, localFS{}, p, size)
}
