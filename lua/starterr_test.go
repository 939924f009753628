package lua

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/remote"
	"github.com/gpush/gpush/remote/helperbin"
)

// The whole chain, script to host: a helper folder on a noexec mount
// behind a real sshd fails the host at once with the cause and the var to
// set, never "took over" (the helper start's own deadline) nor a doubled
// word.
func TestScriptOnNoexecHelperFolder(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (sshd switches users; CI runs as root)")
	}
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
	tdir := t.TempDir()
	mnt := filepath.Join(tdir, "noexec")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// sshd in a mount namespace of its own where mnt is a noexec tmpfs.
	inner := "mount -t tmpfs -o noexec,mode=0755 gpush-test \"$0\" && exec " + remote.ShellQuote(bin) + " \"$@\""
	wrapper := filepath.Join(tdir, "sshd-noexec")
	script := "#!/bin/sh\nexec " + remote.ShellJoin([]string{unshare, "-m", "--propagation", "private", "/bin/sh", "-c", inner, mnt}) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := sshd.StartT(t, sshd.Options{Binary: wrapper})
	kh := filepath.Join(tdir, "known_hosts")
	if err := srv.WriteKnownHosts(kh); err != nil {
		t.Fatal(err)
	}
	opts := remote.Options{KnownHostsFile: kh, ConnectTimeout: 10 * time.Second, AgentSocket: "none",
		DefaultKeys: []string{}, HelperSource: helperbin.Source}
	h := inventory.Host{Name: "h1", Address: srv.Host, Port: srv.Port, User: "root", Connection: "ssh",
		IdentityFiles: []string{srv.ClientKeyPath}, Vars: map[string]any{remote.VarRemoteDir: filepath.Join(mnt, "gpush")}}
	start := time.Now()
	res := Run(t.Context(), script0(`return gpu.snapshot()`), []inventory.Host{h}, Options{
		Dial: Dialer(opts)})
	took := time.Since(start)
	r := res[0]
	t.Logf("%s in %s: %s", r.Status, took.Round(time.Millisecond), r.Error)
	if r.Status != StatusFailed || !strings.Contains(r.Error, "mounted noexec") || !strings.Contains(r.Error, remote.VarRemoteDir) {
		t.Errorf("%+v", r)
	}
	for _, bad := range []string{"took over", "deadline", "after after", "h1: h1"} {
		if strings.Contains(r.Error, bad) {
			t.Errorf("%q in %q", bad, r.Error)
		}
	}
}

func script0(src string) *Script { return &Script{Name: "t.lua", Path: "t.lua", Source: []byte(src)} }
