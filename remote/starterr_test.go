package remote

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
)

// noexecSSHD starts a real sshd in a mount namespace of its own where dir
// is a tmpfs mounted noexec: what the host's sessions see, the test's
// process does not (nothing is mounted on the machine itself).
func noexecSSHD(t *testing.T, dir string) *env {
	t.Helper()
	requireRoot(t)
	bin, err := sshd.FindBinary()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("skipping: no unshare (util-linux)")
	}
	if out, err := exec.Command(unshare, "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		t.Skipf("skipping: no mount namespace here: %v %s", err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// sshd re-executes itself by the absolute path it was started as: the
	// wrapper's exec keeps that the real binary's.
	wrapper := filepath.Join(t.TempDir(), "sshd-noexec")
	inner := "mount -t tmpfs -o noexec,mode=0755 gpush-noexec \"$0\" && exec " + ShellQuote(bin) + " \"$@\""
	script := "#!/bin/sh\nexec " + ShellJoin([]string{unshare, "-m", "--propagation", "private", "/bin/sh", "-c", inner, dir}) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return newEnv(t, sshd.Options{Binary: wrapper})
}

// A helper folder on a noexec mount: the first helper call fails at once,
// saying the folder is mounted noexec and which var picks another folder,
// with no word of a timeout.
func TestHelperStartOnNoexecFolder(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "noexec")
	e := noexecSSHD(t, mnt)
	e.host.Vars[VarRemoteDir] = filepath.Join(mnt, "gpush")
	c := e.dial(t)
	start := time.Now()
	err := c.Helper(context.Background(), helper.VerbSnapshot, helper.SnapshotRequest{}, &helper.Snapshot{})
	took := time.Since(start)
	if err == nil {
		t.Fatal("the helper ran from a noexec folder")
	}
	msg := err.Error()
	t.Logf("took %s: %s", took.Round(time.Millisecond), msg)
	mustContain(t, msg, "mounted noexec", VarRemoteDir, filepath.Join(mnt, "gpush"))
	for _, bad := range []string{"took over", "deadline", "after after"} {
		if strings.Contains(msg, bad) {
			t.Errorf("%q in %q", bad, msg)
		}
	}
	if IsUnreachable(err) {
		t.Errorf("a noexec folder is no lost connection: %v", err)
	}
	if took > 20*time.Second {
		t.Errorf("took %s", took)
	}
}
