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

// mountedSSHD starts a real sshd in a mount namespace of its own where dir
// is a tmpfs mounted with opts (noexec, ro): what the host's sessions see,
// the test's process does not (nothing is mounted on the machine itself).
func mountedSSHD(t *testing.T, dir, opts string) *env {
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
	inner := "mount -t tmpfs -o " + opts + ",mode=0755 gpush-test \"$0\" && exec " + ShellQuote(bin) + " \"$@\""
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
	e := mountedSSHD(t, mnt, "noexec")
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

// A helper folder the login user cannot create (a read-only file system):
// the call fails at once naming the folder, the var and the refusal, with
// no word of a timeout and no lost connection.
func TestHelperStartOnReadOnlyFolder(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "ro")
	e := mountedSSHD(t, mnt, "ro")
	e.host.Vars[VarRemoteDir] = filepath.Join(mnt, "gpush")
	c := e.dial(t)
	err := c.Helper(context.Background(), helper.VerbSnapshot, helper.SnapshotRequest{}, &helper.Snapshot{})
	if err == nil {
		t.Fatal("the helper was deployed to a read-only folder")
	}
	msg := err.Error()
	t.Logf("%s", msg)
	mustContain(t, msg, "create helper folder "+filepath.Join(mnt, "gpush"), "the login user cannot create it",
		"read-only file system", "set "+VarRemoteDir)
	for _, bad := range []string{"took over", "deadline", "after after", ErrConnectionLost.Error()} {
		if strings.Contains(msg, bad) {
			t.Errorf("%q in %q", bad, msg)
		}
	}
	if IsUnreachable(err) {
		t.Errorf("a refused folder is no lost connection: %v", err)
	}
}
