package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/pkg/sftp"
)

// staleTemp is how old an upload's temp file must be before a later
// deployment removes it: younger ones may belong to a concurrent upload.
const staleTemp = 10 * time.Minute

// uploadSlots bounds the helper uploads in flight in this process: each
// keeps up to 2 MiB of SFTP writes outstanding, so 1000 cold hosts at once
// held 1 GiB (measured: 1054 MiB RSS at --forks 1000). 32 uploads at once
// still fill the controller's link; the rest queue, within their ctx.
var uploadSlots = make(chan struct{}, 32)

// uploadSlot takes an upload slot, or fails when ctx ends first.
func uploadSlot(ctx context.Context) (release func(), err error) {
	select {
	case uploadSlots <- struct{}{}:
		return func() { <-uploadSlots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// GoArch maps `uname -m` to the GOARCH of the helper build for it.
func GoArch(machine string) (string, error) {
	switch strings.TrimSpace(machine) {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64":
		return "arm64", nil
	}
	return "", fmt.Errorf("architecture %q (uname -m) is not supported: gpush-helper is built for x86_64 and aarch64 only", machine)
}

func parseProbe(host string, out []byte) (probeResult, error) {
	// Take the last three lines: a noisy shell startup file may print first.
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) < 3 {
		return probeResult{}, fmt.Errorf("%s: probe printed %q, want three lines (uname -m, id -u, $HOME)", host, out)
	}
	lines = lines[len(lines)-3:]
	uid, err := strconv.Atoi(strings.TrimSpace(lines[1]))
	if err != nil {
		return probeResult{}, fmt.Errorf("%s: probe: id -u printed %q: %w", host, lines[1], err)
	}
	home := strings.TrimSpace(lines[2])
	if !strings.HasPrefix(home, "/") {
		return probeResult{}, fmt.Errorf("%s: probe: $HOME is %q, not an absolute path", host, home)
	}
	return probeResult{machine: strings.TrimSpace(lines[0]), uid: uid, home: home}, nil
}

// RemoteDir returns where the helper goes on h: the gpush_remote_dir var
// (default ~/.cache/gpush), with ~ and relative paths taken from home.
func RemoteDir(h Host, home string) (string, error) {
	dir, err := remoteDirSetting(h)
	if err != nil {
		return "", err
	}
	switch {
	case dir == "~":
		dir = home
	case strings.HasPrefix(dir, "~/"):
		dir = path.Join(home, dir[2:])
	case !strings.HasPrefix(dir, "/"):
		dir = path.Join(home, dir)
	}
	return path.Clean(dir), nil
}

// remoteDirSetting is the host's gpush_remote_dir as given (default
// ~/.cache/gpush), checked as far as it can be without the host's $HOME:
// the warm check resolves ~ and relative paths on the host.
func remoteDirSetting(h Host) (string, error) {
	dir := DefaultRemoteDir
	if v, ok := h.Vars[VarRemoteDir]; ok && v != nil {
		s, ok := v.(string)
		if !ok || strings.TrimSpace(s) == "" {
			return "", fmt.Errorf("%s: %s must be a non-empty path string, got %v", h.Name, VarRemoteDir, v)
		}
		dir = strings.TrimSpace(s)
	}
	if strings.HasPrefix(dir, "~") && dir != "~" && !strings.HasPrefix(dir, "~/") {
		return "", fmt.Errorf("%s: %s=%q: ~user is not supported, give an absolute path", h.Name, VarRemoteDir, dir)
	}
	return dir, nil
}

// helperCache is where a Conn's helper was deployed: found once, reused by
// every call, forgotten when a call finds the file gone.
type helperCache struct {
	mu   sync.Mutex
	path string
}

// get returns the cached path, or runs deploy (once at a time) and caches it.
func (hc *helperCache) get(deploy func() (string, error)) (string, error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.path != "" {
		return hc.path, nil
	}
	p, err := deploy()
	if err != nil {
		return "", err
	}
	hc.path = p
	return p, nil
}

// getUnhashed is get for a deploy that may leave the content check of a
// file it uploaded to the caller (hashed false): such a path is not cached,
// so that no other call runs it unchecked; the caller sets it once checked.
func (hc *helperCache) getUnhashed(deploy func() (p string, hashed bool, err error)) (string, bool, error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.path != "" {
		return hc.path, true, nil
	}
	p, hashed, err := deploy()
	if err != nil {
		return "", false, err
	}
	if hashed {
		hc.path = p
	}
	return p, hashed, nil
}

// set caches p, a path whose content was checked.
func (hc *helperCache) set(p string) {
	hc.mu.Lock()
	hc.path = p
	hc.mu.Unlock()
}

// forget drops the cached path: the warm check found the file unfit, so
// the next DeployHelper looks at the host again.
func (hc *helperCache) forget() {
	hc.mu.Lock()
	hc.path = ""
	hc.mu.Unlock()
}

// forgetIfMissing reports whether a run of the helper at p failed because
// the file is gone (someone cleaned the folder: the shell, or sudo, names p
// as "not found" or "No such file or directory"), and if so drops the
// cached path so that the next DeployHelper uploads it again. The helper
// did not run at all then, so the call may safely be made again.
func (hc *helperCache) forgetIfMissing(p string, res *Result) bool {
	stderr := string(res.Stderr)
	if res.ExitCode == 0 || !strings.Contains(stderr, p) ||
		!(strings.Contains(stderr, "not found") || strings.Contains(stderr, "No such file or directory")) {
		return false
	}
	hc.mu.Lock()
	if hc.path == p {
		hc.path = ""
	}
	hc.mu.Unlock()
	return true
}

// deployTarget is everything deployHelper needs about one host.
type deployTarget struct {
	host    Host
	fs      fileSys
	machine string // uname -m
	home    string
	uid     int
	source  func(goarch string) ([]byte, error)
	// sum returns the sha256 (hex) of the file at p as the host reads it;
	// size is what the file should hold (a bound for a read-back).
	sum func(ctx context.Context, p string, size int64) (string, error)
	log *slog.Logger
	// uploads counts uploads done.
	uploads *atomic.Int32
	// hashLater: the caller runs the warm check on an uploaded file before
	// anything runs it, and that check hashes it on the host, so the
	// upload is not hashed by a session of its own (a cold host: 3
	// sessions, not 4).
	hashLater bool
}

// testHookUploaded, when set, runs after an upload's rename (tests: a
// file changed between the upload and its check).
var testHookUploaded func(p string)

// deployHelper puts the helper for the host's architecture into its
// private remote dir under a name holding its sha256, unless a file of
// that name already holds exactly those bytes, and returns its path. It
// runs before the first helper call of every connection: the path and the
// content are checked each time (see verify.go), a bad file is replaced
// atomically and checked again.
func deployHelper(ctx context.Context, t deployTarget) (string, error) {
	p, _, err := deployHelperHashed(ctx, t)
	return p, err
}

// deployHelperHashed is deployHelper that also says whether the content
// of the file at the path was checked: with t.hashLater an upload is not,
// and the caller must have the warm check hash it before running it.
func deployHelperHashed(ctx context.Context, t deployTarget) (string, bool, error) {
	name := t.host.Name
	arch, err := GoArch(t.machine)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", name, err)
	}
	if t.source == nil {
		return "", false, fmt.Errorf("%s: no helper source configured (remote.Options.HelperSource; use helperbin.Source)", name)
	}
	if t.sum == nil {
		return "", false, fmt.Errorf("%s: no way to check the helper's content configured", name)
	}
	bin, err := sourceWithin(ctx, t.source, arch)
	if err != nil {
		return "", false, fmt.Errorf("%s: helper for linux/%s: %w", name, arch, err)
	}
	dir, err := RemoteDir(t.host, t.home)
	if err != nil {
		return "", false, err
	}
	want := binSum(bin)
	final := path.Join(dir, "gpush-helper-"+want[:32])

	// Both stats go out at once: over SFTP they share one round trip.
	var dfi, ffi fileInfo
	var derr, ferr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); dfi, derr = t.fs.Lstat(dir) }()
	go func() { defer wg.Done(); ffi, ferr = t.fs.Lstat(final) }()
	wg.Wait()
	if errors.Is(derr, fs.ErrNotExist) {
		// The folders that exist must be safe before gpush creates
		// anything below them.
		if err := checkExistingAncestors(t.fs, dir, t.uid); err != nil {
			return "", false, fmt.Errorf("%s: %w", name, err)
		}
		if err := t.fs.MkdirAll(dir); err != nil {
			return "", false, fmt.Errorf("%s: create helper folder %s (%s): %w%s", name, dir, VarRemoteDir, err, cannotWrite(err, "create it"))
		}
		if err := t.fs.Chmod(dir, 0o700); err != nil {
			return "", false, fmt.Errorf("%s: chmod 700 helper folder %s: %w", name, dir, err)
		}
		dfi, derr = t.fs.Lstat(dir)
		ffi, ferr = fileInfo{}, fs.ErrNotExist
	}
	if derr != nil {
		return "", false, fmt.Errorf("%s: helper folder %s (%s): %w", name, dir, VarRemoteDir, derr)
	}
	if err := checkPrivateDir(dir, dfi, t.uid); err != nil {
		return "", false, fmt.Errorf("%s: %w", name, err)
	}
	// Every folder above it too, on every connection.
	if err := checkHelperPath(t.fs, dir, t.uid); err != nil {
		return "", false, fmt.Errorf("%s: %w", name, err)
	}
	if ferr == nil {
		why := helperFileProblem(ffi, int64(len(bin)), t.uid)
		if why == "" {
			got, err := t.sum(ctx, final, int64(len(bin)))
			if err != nil {
				return "", false, fmt.Errorf("%s: check helper %s: %w", name, final, err)
			}
			if got == want {
				t.log.Debug("helper already deployed, content checked", "path", final)
				return final, true, nil
			}
			why = "content has sha256 " + got + ", want " + want + " (planted or corrupted)"
		}
		t.log.Warn("replacing helper file", "path", final, "why", why)
	} else if !errors.Is(ferr, fs.ErrNotExist) {
		return "", false, fmt.Errorf("%s: stat helper %s: %w", name, final, ferr)
	}
	removeStaleTemps(t.fs, dir, t.log)
	release, err := uploadSlot(ctx)
	if err != nil {
		return "", false, fmt.Errorf("%s: upload helper to %s: waiting for an upload slot (%d at once): %w", name, final, cap(uploadSlots), err)
	}
	start := time.Now()
	err = putAtomic(ctx, t.fs, final, bytes.NewReader(bin), 0o755)
	release()
	if err != nil {
		return "", false, fmt.Errorf("%s: upload helper to %s: %w%s", name, final, err, cannotWrite(err, "write the helper there"))
	}
	if t.uploads != nil {
		t.uploads.Add(1)
	}
	if testHookUploaded != nil {
		testHookUploaded(final)
	}
	t.log.Info("uploaded helper", "path", final, "bytes", len(bin), "arch", arch, "took", time.Since(start).Round(time.Millisecond))
	// What was written is checked like what was found: a full disk, a
	// concurrent writer or a failing medium must not get executed.
	if err := checkHelperPath(t.fs, dir, t.uid); err != nil {
		return "", false, fmt.Errorf("%s: after upload: %w", name, err)
	}
	fi, err := t.fs.Lstat(final)
	if err != nil {
		return "", false, fmt.Errorf("%s: stat uploaded helper %s: %w", name, final, err)
	}
	if why := helperFileProblem(fi, int64(len(bin)), t.uid); why != "" {
		return "", false, fmt.Errorf("%s: uploaded helper %s is %s right after the upload; refusing to run it", name, final, why)
	}
	if t.hashLater {
		return final, false, nil
	}
	got, err := t.sum(ctx, final, int64(len(bin)))
	if err != nil {
		return "", false, fmt.Errorf("%s: check uploaded helper %s: %w", name, final, err)
	}
	if got != want {
		return "", false, fmt.Errorf("%s: uploaded helper %s has sha256 %s right after the upload, want %s; refusing to run it "+
			"(is the disk full or failing, or is something rewriting %s?)", name, final, got, want, dir)
	}
	return final, true, nil
}

// serveDeployed deploys the helper the Go way once the warm check refused
// (its reason and probe in refused), then starts it. A file it uploads is
// not hashed by a session of its own: the warm check, run again as the
// serve session's command, hashes it on the host (and stamps it) right
// before it execs it, when the refused check got past its tools (the
// probe line comes after them). A cold host so costs 3 sessions: the
// refused check, SFTP, serve.
func (c *sshConn) serveDeployed(ctx context.Context, verb, warmCmd, token string, refused warmRefusal, steps *stepLog) (*serveSession, error) {
	// Both deployments below are over when it returns.
	defer c.closeIdleSFTP()
	hashLater := refused.probe != nil
	start := time.Now()
	p, hashed, err := c.helper.getUnhashed(func() (string, bool, error) {
		return c.deploy(ctx, refused.probe, hashLater)
	})
	if err != nil {
		return nil, withSteps(c.markLost(err), *steps)
	}
	steps.add("deploy", start)
	if hashed {
		s, _, err := c.openServe(ctx, verb, "helper serve", steps.String(), ShellJoin(serveArgv(p, token, c.host.Become)), token, p, false)
		return s, err
	}
	s, again, err := c.openServe(ctx, verb, "helper serve (warm check of the upload)", steps.String(), warmCmd, token, p, true)
	if err != nil {
		return nil, err
	}
	if s == nil {
		if strings.HasPrefix(again.reason, p+" has ") {
			// Its size or sha256 differ: the Go check after the upload
			// would refuse it too.
			return nil, fmt.Errorf("%s: uploaded helper %s failed the check right after the upload: %s; refusing to run it "+
				"(is the disk full or failing, or is something rewriting %s?)", c.host.Name, p, again.reason, path.Dir(p))
		}
		// Refused for something the Go checks did not see (a stat that
		// prints odd lines, say): check the file the Go way.
		c.log.Warn("the warm check refused the uploaded helper; checking it over SFTP and sha256sum", "path", p, "why", again.reason)
		p, err := c.helper.get(func() (string, error) {
			p, _, err := c.deploy(ctx, refused.probe, false)
			return p, err
		})
		if err != nil {
			return nil, withSteps(c.markLost(err), *steps)
		}
		s, _, err := c.openServe(ctx, verb, "helper serve", steps.String(), ShellJoin(serveArgv(p, token, c.host.Become)), token, p, false)
		return s, err
	}
	c.helper.set(p)
	return s, nil
}

// cannotWrite explains a refused write into the helper folder: SFTP says
// only "Failure" for a read-only file system (EROFS) or a full disk, and
// "permission denied" for a parent the login user cannot write.
func cannotWrite(err error, what string) string {
	var se *sftp.StatusError
	refused := errors.Is(err, fs.ErrPermission) || (errors.As(err, &se) &&
		(se.FxCode() == sftp.ErrSSHFxFailure || se.FxCode() == sftp.ErrSSHFxPermissionDenied))
	if !refused {
		return ""
	}
	return fmt.Sprintf(": the login user cannot %s (a read-only file system, a full disk, or a folder above it "+
		"the user cannot write); set %s to a folder it can create, on a file system that allows execution", what, VarRemoteDir)
}

// withSteps adds to err the steps of a session start before it and their
// times ("(after helper digests 2ms, warm check refused 40ms)"): the
// stepLog's text says "after" itself.
func withSteps(err error, steps stepLog) error {
	return fmt.Errorf("%w (%s)", err, steps.String())
}

// sourceWithin calls source for arch, giving up when ctx ends first: a
// source that builds the helper can take longer than the call (the source
// goes on in the background and keeps its result for the next caller).
func sourceWithin(ctx context.Context, source func(goarch string) ([]byte, error), arch string) ([]byte, error) {
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	start := time.Now()
	go func() {
		b, err := source(arch)
		ch <- res{b, err}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-ctx.Done():
		select {
		case r := <-ch: // answered meanwhile: take it
			return r.b, r.err
		default:
		}
		return nil, fmt.Errorf("not ready after %s (its source is still running: building it from source?): %w",
			time.Since(start).Round(time.Millisecond), ctx.Err())
	}
}

// checkExistingAncestors runs the ancestor checks on the folders above dir
// that exist, before the missing ones are created.
func checkExistingAncestors(fsys fileSys, dir string, uid int) error {
	comps := pathComponents(dir)
	for _, p := range comps[:len(comps)-1] {
		fi, err := fsys.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("helper folder %s: folder %s on its path: %w", dir, p, err)
		}
		if why := ancestorProblem(fi, uid); why != "" {
			return fmt.Errorf("helper folder %s: folder %s on its path %s; refusing to create the helper folder below it: "+
				"set %s to a path whose every folder is root's or the login user's", dir, p, why, VarRemoteDir)
		}
	}
	return nil
}

// checkPrivateDir refuses a helper folder that someone else could change:
// a binary there is executed, possibly as root.
func checkPrivateDir(dir string, fi fileInfo, uid int) error {
	switch {
	case fi.mode&fs.ModeSymlink != 0:
		return fmt.Errorf("helper folder %s is a symlink; refusing to deploy through it: set %s to a real directory", dir, VarRemoteDir)
	case !fi.mode.IsDir():
		return fmt.Errorf("helper folder %s is not a directory (%s); set %s elsewhere", dir, fi.mode.Type(), VarRemoteDir)
	case fi.uid != uid:
		return fmt.Errorf("helper folder %s is owned by uid %d, not by the login user (uid %d); refusing: set %s to a folder of your own",
			dir, fi.uid, uid, VarRemoteDir)
	case fi.mode.Perm()&0o022 != 0:
		return fmt.Errorf("helper folder %s is group- or world-writable (mode %04o), so others could replace the helper; "+
			"run chmod 700 on it or set %s elsewhere", dir, fi.mode.Perm(), VarRemoteDir)
	}
	return nil
}

// helperFileProblem says why an existing helper file must be replaced ("" if fine).
func helperFileProblem(fi fileInfo, size int64, uid int) string {
	switch {
	case !fi.mode.IsRegular():
		return "not a regular file (" + fi.mode.Type().String() + ")"
	case fi.uid != uid:
		return fmt.Sprintf("owned by uid %d", fi.uid)
	case fi.mode.Perm()&0o022 != 0:
		return fmt.Sprintf("group- or world-writable (mode %04o)", fi.mode.Perm())
	case fi.mode.Perm()&0o100 == 0:
		return fmt.Sprintf("not executable (mode %04o)", fi.mode.Perm())
	case fi.size != size:
		return fmt.Sprintf("size %d, want %d (a torn copy)", fi.size, size)
	}
	return ""
}

// removeStaleTemps removes upload temp files left by an interrupted
// deployment (a killed gpush, a dropped connection).
func removeStaleTemps(fsys fileSys, dir string, log *slog.Logger) {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".gpush-helper-") && strings.Contains(n, tmpMarker) &&
			time.Since(e.ModTime()) > staleTemp {
			p := path.Join(dir, n)
			if err := fsys.Remove(p); err == nil {
				log.Info("removed stale upload", "path", p)
			}
		}
	}
}

func encodeRequest(host, verb string, req any) ([]byte, error) {
	if req == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: helper %s: encode request: %w", host, verb, err)
	}
	return b, nil
}

// decodeHelper turns a helper run into resp or an error that names the
// host and the verb and says what to do.
func decodeHelper(host, verb, helperPath string, become bool, res *Result, resp any) error {
	stderr := strings.TrimSpace(string(res.Stderr))
	if res.ExitCode == 0 {
		if resp == nil {
			return nil
		}
		if err := json.Unmarshal(res.Stdout, resp); err != nil {
			return fmt.Errorf("%s: helper %s: decode response: %w (stdout starts %.120q, stderr %.200q)",
				host, verb, err, res.Stdout, stderr)
		}
		return nil
	}
	if become && sudoWantsPassword(stderr) {
		return fmt.Errorf("%s: helper %s: %w: the host needs passwordless sudo (NOPASSWD) for this user, "+
			"or set ansible_become=false (sudo said: %s)", host, verb, ErrSudoPassword, stderr)
	}
	if become && res.ExitCode == 127 && strings.Contains(stderr, "sudo") {
		return fmt.Errorf("%s: helper %s: sudo is not installed on the host (ansible_become is set): %s", host, verb, stderr)
	}
	if strings.Contains(stderr, "ermission denied") &&
		(res.ExitCode == 126 || (become && strings.Contains(stderr, "unable to execute"))) {
		return fmt.Errorf("%s: helper %s: cannot execute %s although it is mode 0755: its file system is probably "+
			"mounted noexec; set %s to a folder on a file system that allows execution (%s)",
			host, verb, helperPath, VarRemoteDir, stderr)
	}
	he := &HelperError{Host: host, Verb: verb, ExitCode: res.ExitCode, Stderr: stderr}
	var er helper.ErrorResponse
	if json.Unmarshal(bytes.TrimSpace(res.Stdout), &er) == nil && er.Error != "" {
		he.Message = er.Error
	}
	return he
}

// sudoRunError is the error for a Run through sudo -n that sudo itself
// refused for want of a password; nil otherwise.
func sudoRunError(host string, argv []string, res *Result) error {
	stderr := strings.TrimSpace(string(res.Stderr))
	if res.ExitCode != 1 || !strings.HasPrefix(stderr, "sudo:") || !sudoWantsPassword(stderr) {
		return nil
	}
	return fmt.Errorf("%s: sudo %s: %w: the host needs passwordless sudo (NOPASSWD) for this user, "+
		"or run without sudo (sudo said: %s)", host, argv[0], ErrSudoPassword, stderr)
}

func sudoWantsPassword(stderr string) bool {
	return strings.Contains(stderr, "a password is required") ||
		strings.Contains(stderr, "a terminal is required") ||
		strings.Contains(stderr, "no tty present")
}
