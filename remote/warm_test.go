package remote

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
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
			host: inventory.Host{Name: "h1", Vars: map[string]any{VarRemoteDir: dir}}, fs: localFS{},
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
	out, late := warmDigests(context.Background(), stuckSource(t, "arm64"), 50*time.Millisecond)
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
	out, late = warmDigests(context.Background(), slowOwn, 10*time.Millisecond)
	if _, ok := out[runtime.GOARCH]; !ok || len(late) != 0 {
		t.Errorf("slow own architecture: digests %v, late %v; want %s, none late", out, late, runtime.GOARCH)
	}
	failing := func(arch string) ([]byte, error) { return nil, errors.New("no " + arch) }
	out, late = warmDigests(context.Background(), failing, time.Minute)
	if len(out) != 0 || len(late) != 0 {
		t.Errorf("failing source: digests %v, late %v; want none of either", out, late)
	}
}

// A session whose command prints no hello (here sshd runs another
// command; on a real host a login shell's startup file that waits on a
// lock, as pyenv rehash does) fails with what it printed and how long it
// was waited for, not a bare deadline.
func TestServeStartNamesAStalledStart(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{ExtraConfig: []string{"ForceCommand echo noisy; echo oops >&2; sleep 10"}})
	c := e.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := callWithin(t, c, ctx, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
	mustContain(t, err.Error(), "h1: helper snapshot: helper serve (warm check): no hello from the helper in ",
		"after helper digests ", `stdout ended "noisy\n"`, `stderr "oops\n"`)
}
