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
	db, err := knownhosts.NewDB(k.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		db, err = nil, nil
	case err != nil:
		db, err = nil, fmt.Errorf("read known_hosts %s: %w", k.file, err)
	}
	k.loaded, k.cached, k.err = true, db, err
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
