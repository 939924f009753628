package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// learnMu serializes accept-new appends within this process; the flock
// serializes them with other processes (another gpush, ssh itself does not
// lock, but it appends whole lines).
var learnMu sync.Mutex

// hostKeys checks host keys against one known_hosts file. One is made per
// Dial and shared by its hops.
type hostKeys struct {
	file   string
	policy string
	log    *slog.Logger

	// The file as read by this dial: algorithms and check both need it.
	mu     sync.Mutex
	loaded bool
	cached *knownhosts.HostKeyDB
	err    error
}

// db returns known_hosts, read once per dial unless fresh (learn re-reads
// it under its lock); a missing file is an empty database (nil).
func (k *hostKeys) db(fresh bool) (*knownhosts.HostKeyDB, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.loaded && !fresh {
		return k.cached, k.err
	}
	db, err := parsedKnownHosts.get(k.file, fresh)
	k.loaded, k.cached, k.err = true, db, err
	return db, err
}

// parsedKnownHosts shares one parsed known_hosts among the dials of a
// process: each connection keeps its host key callback (x/crypto re-checks
// the key at every key exchange), so a parse per dial held the whole file
// once per host: O(hosts x lines) for a fleet's known_hosts.
var parsedKnownHosts = &knownHostsCache{files: map[string]*parsedFile{}}

type knownHostsCache struct {
	mu     sync.Mutex
	files  map[string]*parsedFile
	parses int // for tests
}

// parsedFile is one parse and the file it was read from: an edit (ours,
// ssh's, the operator's) changes size, mtime or inode, and the next get
// reads it again.
type parsedFile struct {
	id  fileID
	db  *knownhosts.HostKeyDB
	err error
}

type fileID struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id, nil
}

// get returns the parse of path, reading it again when it changed since, or
// always when fresh (learn, under its lock, must see every line).
func (c *knownHostsCache) get(path string, fresh bool) (*knownhosts.HostKeyDB, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, err := statID(path)
	if errors.Is(err, fs.ErrNotExist) {
		delete(c.files, path)
		return nil, nil
	}
	if p := c.files[path]; !fresh && err == nil && p != nil && p.id == id {
		return p.db, p.err
	}
	c.parses++
	db, err := knownhosts.NewDB(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		delete(c.files, path)
		return nil, nil
	case err != nil:
		db, err = nil, fmt.Errorf("read known_hosts %s: %w", path, err)
	}
	if sid, serr := statID(path); serr == nil && sid == id {
		c.files[path] = &parsedFile{id: id, db: db, err: err}
	} else {
		// Changed while read: use this parse once, keep none.
		delete(c.files, path)
	}
	return db, err
}

// algorithms orders host key algorithms after what known_hosts holds for
// hostport, so that a host known by its RSA key is not asked for ed25519
// first (which x/crypto would then report as a changed key).
func (k *hostKeys) algorithms(hostport string) []string {
	db, err := k.db(false)
	if err != nil || db == nil {
		return nil
	}
	return db.HostKeyAlgorithms(hostport)
}

func fingerprint(key ssh.PublicKey) string {
	return key.Type() + " " + ssh.FingerprintSHA256(key)
}

// check verifies key for hostport (as dialed) under the policy.
func (k *hostKeys) check(hostport string, remote net.Addr, key ssh.PublicKey) error {
	err := k.lookup(hostport, remote, key, false)
	var hke *HostKeyError
	if err == nil || !errors.As(err, &hke) || hke.Changed || hke.LookupError != nil {
		return err
	}
	if k.policy != HostKeyAcceptNew {
		return err
	}
	return k.learn(hostport, remote, key)
}

// lookup returns nil for a known key, else a *HostKeyError; fresh re-reads
// known_hosts first.
func (k *hostKeys) lookup(hostport string, remote net.Addr, key ssh.PublicKey, fresh bool) error {
	norm := knownhosts.Normalize(hostport)
	base := &HostKeyError{Addr: norm, File: k.file, OfferedKey: fingerprint(key)}
	db, err := k.db(fresh)
	if err != nil {
		base.LookupError = err
		return base
	}
	if db == nil {
		return base
	}
	err = db.HostKeyCallback()(hostport, remote, key)
	if err == nil {
		return nil
	}
	var ke *xknownhosts.KeyError
	if !errors.As(err, &ke) {
		base.LookupError = err
		return base
	}
	if len(ke.Want) == 0 {
		return base
	}
	// Prefer the entry of the same key type when reporting the old key.
	old := ke.Want[0]
	for _, w := range ke.Want {
		if w.Key.Type() == key.Type() {
			old = w
			break
		}
	}
	base.Changed = true
	base.OldLine = old.Line
	base.OldKey = fingerprint(old.Key)
	return base
}

// learn appends an unknown host's key under an exclusive lock, after
// checking again under that lock: a concurrent dial (here or in another
// process) may have learned it, or learned a different key, meanwhile.
func (k *hostKeys) learn(hostport string, remote net.Addr, key ssh.PublicKey) error {
	learnMu.Lock()
	defer learnMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(k.file), 0o700); err != nil {
		return &HostKeyError{Addr: knownhosts.Normalize(hostport), File: k.file, OfferedKey: fingerprint(key),
			LookupError: fmt.Errorf("create folder for known_hosts: %w", err)}
	}
	lock := flock.New(k.file, flock.SetPermissions(0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	locked, err := lock.TryLockContext(ctx, 20*time.Millisecond)
	if err != nil || !locked {
		return &HostKeyError{Addr: knownhosts.Normalize(hostport), File: k.file, OfferedKey: fingerprint(key),
			LookupError: fmt.Errorf("lock %s to add the host: %v", k.file, errOr(err, ctx.Err()))}
	}
	defer lock.Unlock()

	err = k.lookup(hostport, remote, key, true)
	var hke *HostKeyError
	if err == nil || !errors.As(err, &hke) || hke.Changed || hke.LookupError != nil {
		return err
	}
	if err := appendLine(k.file, knownhosts.Line([]string{hostport}, key)); err != nil {
		hke.LookupError = err
		return hke
	}
	k.log.Info("learned new host key", "host", hke.Addr, "key", hke.OfferedKey, "file", k.file)
	return nil
}

func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// appendLine appends line to path, starting a new line first if the file
// does not end with one, and syncs it.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open %s to add a host: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	prefix := ""
	if st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err != nil {
			return fmt.Errorf("read end of %s: %w", path, err)
		}
		if last[0] != '\n' {
			prefix = "\n"
		}
	}
	if _, err := f.WriteString(prefix + strings.TrimSpace(line) + "\n"); err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}
