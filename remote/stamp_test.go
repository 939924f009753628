package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/remote/helperbin"
)

// shimEnv is an env whose sshd sessions find, first on PATH, a sha256sum
// that logs each run to a file before running the real one: the count of
// hashes the host did.
type shimEnv struct {
	*env
	sumLog string
}

func newShimEnv(t *testing.T) *shimEnv {
	t.Helper()
	real, err := execOut("sh", "-c", "command -v sha256sum")
	if err != nil {
		t.Fatalf("no sha256sum here: %v", err)
	}
	shim := t.TempDir()
	os.Chmod(shim, 0o755)
	sumLog := filepath.Join(shim, "sha256sum.log")
	script := "#!/bin/sh\necho \"$*\" >>" + sumLog + "\nexec " + strings.TrimSpace(real) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(shim, "sha256sum"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// SetEnv overrides the PATH sshd gives sessions.
	e := newEnv(t, sshd.Options{ExtraConfig: []string{
		"SetEnv PATH=" + shim + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}})
	return &shimEnv{env: e, sumLog: sumLog}
}

// sums is how many times the host ran sha256sum so far.
func (e *shimEnv) sums() int {
	b, _ := os.ReadFile(e.sumLog)
	return strings.Count(string(b), "\n")
}

// snap makes one helper call on a new connection and returns its session
// and upload counts.
func (e *shimEnv) snap(t *testing.T) (sessions, uploads int32) {
	t.Helper()
	c := e.dial(t)
	defer c.Close()
	var s helper.Snapshot
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, &s); err != nil {
		t.Fatal(err)
	}
	if s.BootID == "" {
		t.Fatalf("empty snapshot %+v", s)
	}
	return c.sessions.Load(), c.uploads.Load()
}

// deployed uploads the helper (Go's deployment: SFTP and a sha256sum
// exec) and returns its path, once the kernel's clock has moved on from
// the file's ctime, so that the next warm check may stamp it.
func (e *shimEnv) deployed(t *testing.T) string {
	t.Helper()
	c := e.dial(t)
	p, err := c.DeployHelper(context.Background())
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitPastCtime(t, p)
	return p
}

// waitPastCtime waits until the clock is well past p's ctime: the stamp
// is refused for a file changed in the clock tick of the check's start.
func waitPastCtime(t *testing.T, p string) {
	t.Helper()
	st := statT(t, p)
	ct := time.Unix(st.Ctim.Unix())
	for time.Since(ct) < 50*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
}

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// stampLine is the stamp the warm check writes for the file at p
// holding the helper of sum.
func stampLine(t *testing.T, p, sum string) string {
	st := statT(t, p)
	return fmt.Sprintf("%d %d %d %d.%09d %d.%09d %s", st.Dev, st.Ino, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, sum)
}

func helperSum(t *testing.T) string {
	t.Helper()
	d := helperDigests(helperbin.Source)[mustGoArch(t)]
	if d.sum == "" {
		t.Fatal("no helper digest")
	}
	return d.sum
}

// plantInPlace rewrites the start of the helper at p, in place (same
// inode and size), with a script that leaves marker when run, then puts
// its mtime back as touch -d does: only ctime tells the change.
func plantInPlace(t *testing.T, p, marker string) {
	t.Helper()
	before := statT(t, p)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	// The last session's helper may still be exiting.
	for deadline := time.Now().Add(20 * time.Second); errors.Is(err, syscall.ETXTBSY) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		f, err = os.OpenFile(p, os.O_WRONLY, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("#!/bin/sh\ntouch "+marker+"\nexit 0\n"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mt := fmt.Sprintf("@%d.%09d", before.Mtim.Sec, before.Mtim.Nsec)
	if out, err := execOut("touch", "-m", "-d", mt, p); err != nil {
		t.Fatalf("touch -d: %v %s", err, out)
	}
	after := statT(t, p)
	if after.Ino != before.Ino || after.Size != before.Size || after.Mtim != before.Mtim || after.Ctim == before.Ctim {
		t.Fatalf("the rewrite changed more than ctime, or not ctime: before %+v after %+v", before, after)
	}
	if out, err := execOut(p); err != nil {
		t.Fatalf("planted script does not run: %v %s", err, out)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal("planted script left no marker")
	}
}

// The first warm check hashes the helper and stamps it; the next one
// finds the same file and hashes nothing, in one session.
func TestWarmStampSkipsTheHash(t *testing.T) {
	requireRoot(t)
	e := newShimEnv(t)
	p := e.deployed(t)
	if e.sums() != 1 {
		t.Fatalf("the deployment ran sha256sum %d times, want 1 (is the shim on PATH?)", e.sums())
	}
	if _, err := os.Stat(p + ".stamp"); err == nil {
		t.Fatal("stamp before any warm check")
	}
	if n, u := e.snap(t); n != 1 || u != 0 {
		t.Fatalf("first warm run: %d sessions, %d uploads; want 1 and 0", n, u)
	}
	if e.sums() != 2 {
		t.Fatalf("first warm run: %d sha256sum runs in all, want 2", e.sums())
	}
	got, err := os.ReadFile(p + ".stamp")
	if err != nil {
		t.Fatalf("no stamp after the first warm run: %v", err)
	}
	if want := stampLine(t, p, helperSum(t)) + "\n"; string(got) != want {
		t.Fatalf("stamp %q, want %q", got, want)
	}
	fi, _ := os.Stat(p + ".stamp")
	if fi.Mode().Perm()&0o022 != 0 {
		t.Fatalf("stamp mode %v", fi.Mode())
	}
	for range 2 {
		if n, u := e.snap(t); n != 1 || u != 0 {
			t.Fatalf("stamped warm run: %d sessions, %d uploads; want 1 and 0", n, u)
		}
	}
	if e.sums() != 2 {
		t.Fatalf("stamped warm runs hashed the helper: %d sha256sum runs, want 2", e.sums())
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	for _, en := range ents {
		if strings.Contains(en.Name(), tmpMarker) {
			t.Errorf("temp file %s left behind", en.Name())
		}
	}
}

// A cold host costs 3 sessions (the refused check, SFTP, serve) and one
// hash, done by the serve session's warm check; a warm one 1 session.
func TestColdHostThreeSessions(t *testing.T) {
	requireRoot(t)
	e := newShimEnv(t)
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	if n, u := c.sessions.Load(), c.uploads.Load(); n != 3 || u != 1 {
		t.Fatalf("cold host: %d sessions, %d uploads; want 3 and 1", n, u)
	}
	if e.sums() != 1 {
		t.Fatalf("cold host: %d sha256sum runs, want 1", e.sums())
	}
	p := c.serve.current().path
	c.Close()
	if n := sshdSessions(t, e.srv, clientPort(c)); n != 3 {
		t.Errorf("sshd logged %d sessions for the cold conn, want 3", n)
	}
	// The cold run stamps unless the upload and its check fell into one
	// clock tick; then the next run does.
	waitPastCtime(t, p)
	e.snap(t)
	base := e.sums()
	if n, u := e.snap(t); n != 1 || u != 0 || e.sums() != base {
		t.Fatalf("warm host: %d sessions, %d uploads, %d hashes; want 1, 0, 0", n, u, e.sums()-base)
	}
}

// A helper rewritten in place after it was stamped (same inode, size and
// mtime) is hashed again and refused; the cold path replaces it, and the
// planted content never runs.
func TestWarmStampChangedHelperHashedAndRefused(t *testing.T) {
	requireRoot(t)
	e := newShimEnv(t)
	p := e.deployed(t)
	e.snap(t)
	if _, err := os.Stat(p + ".stamp"); err != nil {
		t.Fatalf("no stamp: %v", err)
	}
	marker := filepath.Join(e.tdir, "planted-ran")
	plantInPlace(t, p, marker)
	base := e.sums()
	logStart := len(e.logs.String())
	if _, u := e.snap(t); u != 1 {
		t.Fatalf("%d uploads, want 1 (the changed file replaced)", u)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the changed helper ran")
	}
	if e.sums() == base {
		t.Fatal("the changed helper was not hashed")
	}
	logs := e.logs.String()[logStart:]
	mustContain(t, logs, "warm check refused", p+" has sha256 ", "want "+helperSum(t))
}

// A stamp is trusted only when it is a regular file of the login user that
// no one else can write: one that would otherwise vouch for a changed
// helper is ignored, the helper hashed and refused.
func TestWarmStampIgnoredUnlessPrivate(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		name  string
		fix   func(t *testing.T, stamp string)
		trust bool // the stamp vouches for the real helper: no hash
	}{
		{"private stamp, real helper", func(t *testing.T, stamp string) {}, true},
		{"stamp of another user", func(t *testing.T, stamp string) {
			if err := os.Chown(stamp, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"group-writable stamp", func(t *testing.T, stamp string) { os.Chmod(stamp, 0o664) }, false},
		{"world-writable stamp", func(t *testing.T, stamp string) { os.Chmod(stamp, 0o646) }, false},
		{"stamp a symlink", func(t *testing.T, stamp string) {
			real := stamp + ".real"
			if err := os.Rename(stamp, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, stamp); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			e := newShimEnv(t)
			p := e.deployed(t)
			marker := filepath.Join(e.tdir, "planted-ran")
			if !tc.trust {
				plantInPlace(t, p, marker)
			}
			// A stamp that matches the file as it is now.
			stamp := p + ".stamp"
			if err := os.WriteFile(stamp, []byte(stampLine(t, p, helperSum(t))+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			tc.fix(t, stamp)
			base := e.sums()
			logStart := len(e.logs.String())
			_, u := e.snap(t)
			if tc.trust {
				if e.sums() != base || u != 0 {
					t.Fatalf("a private stamp of the real helper: %d hashes, %d uploads; want 0 and 0", e.sums()-base, u)
				}
				return
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the changed helper ran on the word of the stamp")
			}
			if e.sums() == base || u != 1 {
				t.Fatalf("%d hashes, %d uploads; want the changed helper hashed and replaced", e.sums()-base, u)
			}
			mustContain(t, e.logs.String()[logStart:], "warm check refused", p+" has sha256 ")
		})
	}
}

// The upload is checked by the serve session's warm check: a file changed
// between the upload and that check is refused with the host, the path
// and what differed, and never runs.
func TestUploadChangedBeforeItsCheckRefused(t *testing.T) {
	requireRoot(t)
	e := newShimEnv(t)
	marker := filepath.Join(e.tdir, "planted-ran")
	testHookUploaded = func(p string) {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.WriteAt([]byte("#!/bin/sh\ntouch "+marker+"\nexit 0\n"), 0)
			f.Close()
		}
	}
	t.Cleanup(func() { testHookUploaded = nil })
	c := e.dial(t)
	err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil)
	if err == nil {
		t.Fatal("a helper changed after its upload ran")
	}
	want := helperSum(t)
	p := filepath.Join(e.dir, "gpush-helper-"+want[:32])
	mustContain(t, err.Error(), "h1: ", "uploaded helper "+p, "right after the upload", p+" has sha256 ", "want "+want)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the changed upload ran")
	}
	if _, err := os.Stat(p + ".stamp"); err == nil {
		t.Fatal("a refused upload was stamped")
	}
	if n := c.sessions.Load(); n != 3 {
		t.Errorf("%d sessions, want 3", n)
	}
	// The next call repairs it.
	testHookUploaded = nil
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatalf("the next call did not repair the helper: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the changed upload ran")
	}
}

// BenchmarkWarmCheckCPU is the CPU of the warm check on a host (sh
// running the script, its stat and sha256sum, and the helper it execs,
// which exits at once on a closed stdin): every run hashing (the stamp
// removed first, what every run cost before stamps, plus writing the
// stamp) against runs that find the stamp. Run here, not over sshd: the
// session's login shell would dominate and vary (a .bashrc).
func BenchmarkWarmCheckCPU(b *testing.B) {
	arch, err := GoArch(unameMachine())
	if err != nil {
		b.Skip(err)
	}
	d := helperDigests(helperbin.Source)[arch]
	bin, err := helperbin.Source(arch)
	if err != nil || d.sum == "" {
		b.Fatal("no helper", err)
	}
	dir := filepath.Join(b.TempDir(), "helper")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(dir, "gpush-helper-"+d.sum[:32])
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		b.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // past the clock tick of the write
	cmd := warmCommand(dir, "tok", false, helperDigests(helperbin.Source))
	for _, mode := range []string{"hash", "stamp"} {
		b.Run(mode, func(b *testing.B) {
			var cpu time.Duration
			n := 0
			for b.Loop() {
				if mode == "hash" {
					os.Remove(p + ".stamp")
				}
				c := exec.Command("sh", "-c", cmd)
				out, err := c.Output()
				if err != nil || !strings.Contains(string(out), `{"serve":`) {
					b.Fatalf("warm check: %v %s", err, out)
				}
				// wait4's rusage: the shell and every child it waited for.
				cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
				n++
			}
			if _, err := os.Stat(p + ".stamp"); err != nil {
				b.Fatalf("no stamp after the runs: %v", err)
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/op")
		})
	}
}

// A check of the upload that refuses for something else than its content
// (here: stat failing from the upload on) does not fail the call: the
// upload is checked the Go way (SFTP and sha256sum) and run.
func TestUploadCheckRefusedOtherwiseFallsBack(t *testing.T) {
	requireRoot(t)
	e := newShimEnv(t)
	realStat, err := execOut("sh", "-c", "command -v stat")
	if err != nil {
		t.Fatal(err)
	}
	flag := filepath.Join(e.tdir, "stat-broken")
	shim := "#!/bin/sh\n[ -e " + flag + " ] && exit 1\nexec " + strings.TrimSpace(realStat) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(filepath.Dir(e.sumLog), "stat"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	testHookUploaded = func(string) { os.WriteFile(flag, nil, 0o644) }
	t.Cleanup(func() { testHookUploaded = nil })
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatalf("the fallback did not run the helper: %v", err)
	}
	mustContain(t, e.logs.String(), "the warm check refused the uploaded helper", "cannot stat")
	// The refused check, SFTP, the check of the upload, sha256sum, serve.
	if n, u := c.sessions.Load(), c.uploads.Load(); n != 5 || u != 1 || e.sums() != 1 {
		t.Fatalf("%d sessions, %d uploads, %d hashes; want 5, 1, 1", n, u, e.sums())
	}
}
