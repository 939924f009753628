package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/pkg/sftp"
)

// fileInfo is what deployment needs to know about a path.
type fileInfo struct {
	mode    os.FileMode
	uid     int
	size    int64
	modTime time.Time
}

// fileSys is the file system of a host: SFTP for SSH hosts, the os package
// for the local one. Paths are absolute, slash-separated. Errors for a
// missing path satisfy errors.Is(err, fs.ErrNotExist).
type fileSys interface {
	Lstat(p string) (fileInfo, error)
	MkdirAll(p string) error
	Chmod(p string, mode os.FileMode) error
	// CreateExcl creates a new file; it fails if p exists.
	CreateExcl(p string) (io.WriteCloser, error)
	// Rename replaces newp with oldp atomically.
	Rename(oldp, newp string) error
	Remove(p string) error
	ReadDir(p string) ([]os.FileInfo, error)
}

type sftpFS struct{ c *sftp.Client }

func (s sftpFS) Lstat(p string) (fileInfo, error) {
	fi, err := s.c.Lstat(p)
	if err != nil {
		return fileInfo{}, err
	}
	out := fileInfo{mode: fi.Mode(), size: fi.Size(), modTime: fi.ModTime(), uid: -1}
	if st, ok := fi.Sys().(*sftp.FileStat); ok {
		out.uid = int(st.UID)
	}
	return out, nil
}

func (s sftpFS) MkdirAll(p string) error                 { return s.c.MkdirAll(p) }
func (s sftpFS) Chmod(p string, m os.FileMode) error     { return s.c.Chmod(p, m) }
func (s sftpFS) Remove(p string) error                   { return s.c.Remove(p) }
func (s sftpFS) ReadDir(p string) ([]os.FileInfo, error) { return s.c.ReadDir(p) }

func (s sftpFS) CreateExcl(p string) (io.WriteCloser, error) {
	return s.c.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
}

// Rename uses OpenSSH's posix-rename, which replaces the target like
// rename(2); plain SFTP rename refuses an existing target.
func (s sftpFS) Rename(oldp, newp string) error {
	if err := s.c.PosixRename(oldp, newp); err != nil {
		var se *sftp.StatusError
		if errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxOpUnsupported {
			return s.c.Rename(oldp, newp)
		}
		return err
	}
	return nil
}

type localFS struct{}

func (localFS) Lstat(p string) (fileInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return fileInfo{}, err
	}
	out := fileInfo{mode: fi.Mode(), size: fi.Size(), modTime: fi.ModTime(), uid: -1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		out.uid = int(st.Uid)
	}
	return out, nil
}

func (localFS) MkdirAll(p string) error                 { return os.MkdirAll(p, 0o700) }
func (localFS) Chmod(p string, m os.FileMode) error     { return os.Chmod(p, m) }
func (localFS) Remove(p string) error                   { return os.Remove(p) }
func (localFS) Rename(oldp, newp string) error          { return os.Rename(oldp, newp) }
func (localFS) ReadDir(p string) ([]os.FileInfo, error) { return readDirInfo(p) }

func (localFS) CreateExcl(p string) (io.WriteCloser, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return &syncFile{f}, nil
}

func readDirInfo(p string) ([]os.FileInfo, error) {
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []os.FileInfo
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			out = append(out, fi)
		}
	}
	return out, nil
}

// syncFile flushes to disk on Close, so a rename after it never exposes
// an empty file after a crash.
type syncFile struct{ *os.File }

func (f *syncFile) Close() error {
	if err := f.File.Sync(); err != nil {
		f.File.Close()
		return err
	}
	return f.File.Close()
}

// testHookChunkWritten, when set (tests only), is called after each chunk
// an upload writes.
var testHookChunkWritten func(written int64)

// chunkSize is the most one write hands w. An SFTP file sends a write's
// 32 KiB packets at once and waits for them all, so it is also what an
// upload has in flight: 256 KiB still fill a 100 ms link at 2.5 MB/s per
// host, 32 hosts at once.
const chunkSize = 256 << 10

// copyCtx copies r to w in chunks, stopping when ctx ends. A *bytes.Reader
// (the helper's bytes, shared by every upload) is written from its own
// bytes: a buffer of each upload's own would be 32 copies in flight at
// once. A reader that knows its length (strings.Reader: an ssh.put's
// content) gets a buffer no larger than that.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	if br, ok := r.(*bytes.Reader); ok {
		cw := &chunkWriter{ctx: ctx, w: w}
		n, err := br.WriteTo(cw)
		if err == nil {
			err = ctx.Err()
		}
		return n, err
	}
	size := chunkSize
	if l, ok := r.(interface{ Len() int }); ok {
		size = max(1, min(size, l.Len()))
	}
	buf := make([]byte, size)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return total, err
			}
			total += int64(n)
			if testHookChunkWritten != nil {
				testHookChunkWritten(total)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return total, ctx.Err()
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// chunkWriter hands w what it is given in pieces of chunkSize at most,
// stopping when ctx ends.
type chunkWriter struct {
	ctx   context.Context
	w     io.Writer
	total int64
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		if err := c.ctx.Err(); err != nil {
			return done, err
		}
		n, err := c.w.Write(p[done:min(len(p), done+chunkSize)])
		done += n
		c.total += int64(n)
		if err != nil {
			return done, err
		}
		if testHookChunkWritten != nil {
			testHookChunkWritten(c.total)
		}
	}
	return done, nil
}

func randSuffix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tempName is the temporary name for an upload to final: hidden, in the
// same folder (so the rename is atomic), recognisable for cleanup.
func tempName(final string) string {
	return path.Join(path.Dir(final), "."+path.Base(final)+tmpMarker+randSuffix())
}

const tmpMarker = ".gpush-tmp-"

// putAtomic writes data to a temp file next to p and renames it over p;
// on any failure (ctx included) the temp file is removed.
func putAtomic(ctx context.Context, fsys fileSys, p string, data io.Reader, mode os.FileMode) (err error) {
	tmp := tempName(p)
	w, err := fsys.CreateExcl(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			fsys.Remove(tmp)
		}
	}()
	_, err = copyCtx(ctx, w, data)
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := fsys.Chmod(tmp, mode.Perm()); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := fsys.Rename(tmp, p); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, p, err)
	}
	return nil
}
