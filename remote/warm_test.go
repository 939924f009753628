package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/remote/helperbin"
)

// stuckSource is a helper source whose listed architectures answer only
// once the test ends: a helper being built from source (16s with a cold Go
// build cache, over 40s under CI load) as seen by a call.
func stuckSource(t *testing.T, stuck ...string) func(string) ([]byte, error) {
	t.Helper()
	// The local architecture answers at once when not stuck: built before
	// the test needs it (test binaries build it on first use).
	if !slices.Contains(stuck, "amd64") {
		if _, err := helperbin.Source("amd64"); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return func(arch string) ([]byte, error) {
		if slices.Contains(stuck, arch) {
			<-release
			return nil, errors.New("released by the test's end")
		}
		return helperbin.Source(arch)
	}
}

// callWithin runs a helper call and fails the test when it has not
// returned after limit: a call that ignores its ctx would hang the test.
func callWithin(t *testing.T, c *sshConn, ctx context.Context, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Helper(ctx, helper.VerbSnapshot, snapReq, nil) }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("the helper call had not returned after %s: it waits on a helper source", limit)
		return nil
	}
}

// The helper of an architecture the host does not have is not waited for:
// cold and warm hosts get their helper while the arm64 source still runs.
// (TestReplLabSSH failed so: every first call waited for an arm64 build and
// ran out of time at the next step, "open session".)
func TestWarmCheckDoesNotWaitForOtherArchitectures(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	e.opts.HelperSource = stuckSource(t, "arm64")
	cold := e.dial(t)
	if err := callWithin(t, cold, context.Background(), time.Minute); err != nil {
		t.Fatalf("cold host: %v", err)
	}
	if cold.uploads.Load() != 1 {
		t.Errorf("cold host: %d uploads, want 1", cold.uploads.Load())
	}
	warm := e.dial(t)
	if err := callWithin(t, warm, context.Background(), time.Minute); err != nil {
		t.Fatalf("warm host: %v", err)
	}
	if n := warm.sessions.Load(); n != 1 || warm.uploads.Load() != 0 {
		t.Errorf("warm host: %d sessions and %d uploads, want 1 and 0 (the warm check had the amd64 digest)",
			n, warm.uploads.Load())
	}
	mustContain(t, e.logs.String(), "warm check without some helpers", "arches=[arm64]")
}

// A call whose time a slow helper source ate says so: the step that found
// no time left, and what took it, instead of "open session: context
// deadline exceeded".
func TestServeStartNamesWhatAteTheTime(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})

	// Both sources stuck: the call's second goes in waiting for the
	// digests, and the warm check's session is never asked for.
	e.opts.HelperSource = stuckSource(t, "amd64", "arm64")
	c := e.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := callWithin(t, c, ctx, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	mustContain(t, err.Error(), "h1: open session (helper serve (warm check); after helper digests ",
		"not asked, the call had already ended")
	if n := c.sessions.Load(); n != 0 {
		t.Errorf("%d sessions opened, want 0", n)
	}
}

// The cold path's own source wait is bounded by the call and named.
func TestDeployNamesAStuckSource(t *testing.T) {
	log, _ := testLogger(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	dir := t.TempDir()
	source := stuckSource(t, "amd64")
	done := make(chan error, 1)
	go func() {
		_, err := deployHelper(ctx, deployTarget{
			host: Host{Name: "h1", Vars: map[string]any{VarRemoteDir: dir}}, fs: localFS{},
			machine: "x86_64", home: dir, uid: os.Getuid(), source: source, sum: localSum, log: log,
		})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("deployHelper had not returned after 1m0s: it waits on a helper source past its ctx")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	mustContain(t, err.Error(), "h1: helper for linux/amd64: not ready after ", "its source is still running")
}

// warmDigests leaves out what has not answered within its grace, and
// names it.
func TestWarmDigestsLeavesOutLateSources(t *testing.T) {
	out, late := warmDigests(context.Background(), sourceDigest(stuckSource(t, "arm64")), 50*time.Millisecond)
	if _, ok := out["amd64"]; !ok || len(out) != 1 || !slices.Equal(late, []string{"arm64"}) {
		t.Fatalf("digests %v, late %v; want amd64 only, late [arm64]", out, late)
	}
	want := helperDigests(helperbin.Source)["amd64"]
	if out["amd64"] != want {
		t.Errorf("amd64 digest %v, want %v", out["amd64"], want)
	}
	// The controller's own architecture is waited for past the grace.
	slowOwn := func(arch string) ([]byte, error) {
		if arch == runtime.GOARCH {
			time.Sleep(300 * time.Millisecond)
			return []byte("own helper"), nil
		}
		return nil, errors.New("no " + arch)
	}
	out, late = warmDigests(context.Background(), sourceDigest(slowOwn), 10*time.Millisecond)
	if _, ok := out[runtime.GOARCH]; !ok || len(late) != 0 {
		t.Errorf("slow own architecture: digests %v, late %v; want %s, none late", out, late, runtime.GOARCH)
	}
	failing := func(arch string) ([]byte, error) { return nil, errors.New("no " + arch) }
	out, late = warmDigests(context.Background(), sourceDigest(failing), time.Minute)
	if len(out) != 0 || len(late) != 0 {
		t.Errorf("failing source: digests %v, late %v; want none of either", out, late)
	}
}

// A session whose command prints no hello (here sshd runs another
// command; on a real host a login shell's startup file that waits on a
// lock, as pyenv rehash does) fails with what it printed and how long it
// was waited for, not a bare deadline. The deadline leaves a loaded
// machine's sshd time to start the command and its output time to arrive.
func TestServeStartNamesAStalledStart(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{ExtraConfig: []string{"ForceCommand echo noisy; echo oops >&2; sleep 60"}})
	c := e.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := callWithin(t, c, ctx, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	mustContain(t, err.Error(), "h1: helper snapshot: helper serve (warm check): no hello from the helper in ",
		"after helper digests ", `stdout ended "noisy\n"`, `stderr "oops\n"`)
}

// shimTools puts into dir, for each tool, a script that logs its name and
// operands to log and runs the real tool; filter, when set, is shell code
// run first with the operands (exit 1 there fails the call).
func shimTools(t *testing.T, dir, log string, filter map[string]string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		real, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("no %s here: %v", tool, err)
		}
		script := "#!/bin/sh\necho " + tool + " \"$*\" >>" + log + "\n" + filter[tool] + "\nexec " + real + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// toolCalls counts the log's lines by tool.
func toolCalls(t *testing.T, log string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if tool, _, _ := strings.Cut(l, " "); tool != "" {
			out[tool]++
		}
	}
	return out
}

// A warm, stamped host's serve session starts uname and one stat for every
// folder, the helper and its stamp, then the helper: no id, no sha256sum,
// no stat per folder (the lab's helper folder is several folders deep).
func TestWarmSessionProcesses(t *testing.T) {
	requireRoot(t)
	e := newShimEnv(t)
	log := filepath.Join(e.tdir, "tools.log")
	shimTools(t, filepath.Dir(e.sumLog), log, nil, "stat", "id", "uname")
	e.deployed(t)
	e.snap(t) // hashes and stamps
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	if n, u := e.snap(t); n != 1 || u != 0 {
		t.Fatalf("%d sessions, %d uploads on a warm host, want 1, 0", n, u)
	}
	// Only the warm check's own calls: a login shell's rc files may run
	// tools too (pyenv's init runs stat -L -c %Y on a dev machine).
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		for _, call := range []string{"stat -c %u ", "id -u", "uname -m"} {
			if strings.HasPrefix(l, call) {
				tool, _, _ := strings.Cut(call, " ")
				got[tool]++
			}
		}
	}
	want := map[string]int{"uname": 1, "stat": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("a warm session ran %v, want %v:\n%s", got, want, b)
	}
	if e.sums() != 2 {
		t.Fatalf("%d hashes, want 2 (the deployment's, the first warm check's)", e.sums())
	}
}

// The warm check's one stat of all paths and its per-path route (taken
// when that stat fails: a path missing, or a stat that refuses several
// operands) refuse alike, with the same words, and both run a good helper.
func TestWarmCheckOneStatRefusesAsPerPath(t *testing.T) {
	requireRoot(t) // chown to another uid
	body := []byte("#!/bin/sh\necho RAN \"$@\"\n")
	s := sha256.Sum256(body)
	sum := hex.EncodeToString(s[:])
	d := helperDigest{sum: sum, size: int64(len(body))}
	digests := map[string]helperDigest{"amd64": d, "arm64": d}
	name := "gpush-helper-" + sum[:32]
	base := t.TempDir()
	os.Chmod(base, 0o755)
	shim := filepath.Join(base, "shim")
	os.Mkdir(shim, 0o755)
	log := filepath.Join(base, "tools.log")
	// The per-path route stats at most two paths at once.
	many := "n=0 s=\nfor a; do [ -n \"$s\" ] && n=$((n+1)); [ \"$a\" = -- ] && s=1; done\n[ $n -le 2 ] || exit 1"
	shimTools(t, shim, log, map[string]string{"stat": many}, "stat")

	type layout func(root string) string // builds a helper folder, returns it
	mk := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	helperIn := func(dir string, mode os.FileMode, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, mode); err != nil {
			t.Fatal(err)
		}
	}
	good := func(r string) string {
		p := filepath.Join(r, "a", "b")
		mk(p, 0o700)
		helperIn(p, 0o755, body)
		// Past the kernel's coarse clock tick: the check (rightly) writes
		// no stamp for a file whose ctime is in its temp stamp's tick, and
		// a fast machine runs it within the tick of the write.
		time.Sleep(20 * time.Millisecond)
		return p
	}
	cases := []struct {
		name   string
		dir    layout
		reason string // "" runs the helper
	}{
		{"good", good, ""},
		{"stamped", func(r string) string {
			p := good(r)
			// A stamp (wrong here, so hashed again) makes the one stat's
			// third operand exist.
			os.WriteFile(filepath.Join(p, name+".stamp"), []byte("0 0 0 0 0 "+sum+"\n"), 0o600)
			return p
		}, ""},
		{"stamp a folder", func(r string) string {
			p := good(r)
			mk(filepath.Join(p, name+".stamp"), 0o700)
			return p
		}, ""},
		{"missing folder", func(r string) string { mk(filepath.Join(r, "a"), 0o755); return filepath.Join(r, "a", "gone", "b") },
			"cannot stat ROOT/a/gone"},
		{"file for a folder", func(r string) string {
			mk(r, 0o755)
			os.WriteFile(filepath.Join(r, "f"), nil, 0o644)
			return filepath.Join(r, "f", "b")
		}, "ROOT/f is not a directory"},
		{"symlinked folder", func(r string) string {
			mk(filepath.Join(r, "real", "b"), 0o700)
			os.Symlink(filepath.Join(r, "real"), filepath.Join(r, "link"))
			return filepath.Join(r, "link", "b")
		}, "folder ROOT/link is a symlink"},
		{"ancestor of another uid", func(r string) string {
			p := good(r)
			os.Chown(filepath.Join(r, "a"), 4242, 0)
			return p
		}, "folder ROOT/a is owned by uid 4242"},
		{"world-writable ancestor", func(r string) string {
			p := good(r)
			os.Chmod(filepath.Join(r, "a"), 0o777)
			return p
		}, "folder ROOT/a is group- or world-writable and not a sticky root folder"},
		{"helper folder of another uid", func(r string) string {
			p := good(r)
			os.Chown(p, 4242, 0)
			return p
		}, "helper folder ROOT/a/b is owned by uid 4242"},
		{"group-writable helper folder", func(r string) string {
			p := good(r)
			os.Chmod(p, 0o770)
			return p
		}, "helper folder ROOT/a/b is group- or world-writable"},
		{"no helper", func(r string) string { p := filepath.Join(r, "a", "b"); mk(p, 0o700); return p },
			"cannot stat ROOT/a/b/" + name},
		{"helper a folder", func(r string) string {
			p := filepath.Join(r, "a", "b")
			mk(filepath.Join(p, name), 0o700)
			return p
		}, "ROOT/a/b/" + name + " is not a regular file"},
		{"helper not executable", func(r string) string {
			p := good(r)
			os.Chmod(filepath.Join(p, name), 0o644)
			return p
		}, "ROOT/a/b/" + name + " is not executable"},
		{"helper of another size", func(r string) string {
			p := filepath.Join(r, "a", "b")
			mk(p, 0o700)
			helperIn(p, 0o755, append(body, '#'))
			return p
		}, "ROOT/a/b/" + name + " has size " + strconv.Itoa(len(body)+1) + ", want " + strconv.Itoa(len(body))},
		{"helper of another content", func(r string) string {
			p := filepath.Join(r, "a", "b")
			mk(p, 0o700)
			helperIn(p, 0o755, []byte("#!/bin/sh\necho BAD \"$@\"\n"))
			return p
		}, "ROOT/a/b/" + name + " has sha256 "},
	}
	sh, err := exec.LookPath("dash")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("dash missing in CI")
		}
		sh = "sh"
	}
	run := func(dir string, perPath bool) (string, map[string]int) {
		t.Helper()
		os.Remove(log)
		c := exec.Command(sh, "-c", warmCommand(dir, "tok", false, digests))
		c.Env = append(os.Environ(), "HOME=/")
		if perPath {
			c.Env = append(c.Env, "PATH="+shim+":"+os.Getenv("PATH"))
		}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("warm check in %s: %v %s", dir, err, out)
		}
		return string(out), toolCalls(t, log)
	}
	for i, tc := range cases {
		var outs [2]string
		for j, perPath := range []bool{false, true} {
			// A fresh layout each time: the first run may stamp.
			root := filepath.Join(base, "c"+strconv.Itoa(i)+"-"+strconv.Itoa(j))
			dir := tc.dir(root)
			out, calls := run(dir, perPath)
			outs[j] = strings.ReplaceAll(out, root, "ROOT")
			if perPath && calls["stat"] < 2 {
				t.Errorf("%s: the per-path route was not taken: %v", tc.name, calls)
			}
			if tc.reason == "" {
				mustContain(t, outs[j], "gpush-warm-exec: ROOT/a/b/"+name, "RAN serve tok")
				if _, err := os.Stat(filepath.Join(dir, name+".stamp")); err != nil && tc.name != "stamp a folder" {
					t.Errorf("%s: no stamp: %v", tc.name, err)
				}
			} else {
				mustContain(t, outs[j], "gpush-probe: tok ", "gpush-warm: "+tc.reason)
				if strings.Contains(outs[j], "RAN") || strings.Contains(outs[j], "BAD") {
					t.Errorf("%s: a refused helper ran: %s", tc.name, outs[j])
				}
			}
		}
		if outs[0] != outs[1] {
			t.Errorf("%s: one stat printed\n%s\nthe per-path route\n%s", tc.name, outs[0], outs[1])
		}
	}
}
