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
	"github.com/gpush/gpush/lab/podmanlab"
	"github.com/gpush/gpush/remote/helperbin"
)

// The podman transport against real podman (a private one: podmanlab),
// the DaemonSet pattern: a privileged container sharing the host's PID
// namespace, with the device folder bind-mounted, sees a holder that runs
// on the host, outside it. The helper is placed with podman cp and a rename
// inside, then checked by the warm check; a second connection finds it
// warm (no upload); a planted file is replaced.
func TestPodmanTransportSeesHostHolders(t *testing.T) {
	l := podmanlab.New(t)
	dev := t.TempDir()
	nv := filepath.Join(dev, "nvidia0")
	if err := os.WriteFile(nv, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	name := "gpush-transport-agent"
	l.Run(name, podmanlab.Options{HostPID: true, Privileged: true, Binds: []string{dev}, Cmd: []string{"/bin/sleep", "600"}}).WaitReady(0, 20*time.Second)

	f, err := os.Open(nv)
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "600")
	holder.ExtraFiles = []*os.File{f}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })

	log, _ := testLogger(t)
	h := Host{Name: "gpu01", Address: name, Connection: "podman"}
	dial := func() *cmdConn {
		c, err := Dial(context.Background(), h, Options{HelperSource: helperbin.Source, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*cmdConn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dial()
	var snap helper.Snapshot
	if err := c.Helper(ctx, helper.VerbSnapshot, helper.SnapshotRequest{Config: helper.Config{DevDir: dev}}, &snap); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, hd := range snap.Holders {
		found = found || hd.PID == holder.Process.Pid
	}
	if !found {
		t.Fatalf("holder %d on the host not seen from the container: %+v", holder.Process.Pid, snap.Holders)
	}
	if n := c.uploads.Load(); n != 1 {
		t.Errorf("cold container: %d uploads, want 1", n)
	}
	p := c.serve.current().path
	// HOME is / in the busybox container (no passwd file).
	if !strings.HasPrefix(p, "/.cache/gpush/gpush-helper-") {
		t.Errorf("helper path %q", p)
	}
	// Its calls share the one session.
	pid := c.serve.current().pid
	if err := c.Helper(ctx, helper.VerbSnapshot, helper.SnapshotRequest{Config: helper.Config{DevDir: dev}}, &snap); err != nil {
		t.Fatal(err)
	}
	if c.serve.current().pid != pid {
		t.Errorf("second call on a new session")
	}
	res, err := c.Run(ctx, []string{"sh", "-c", `echo "$1"`, "sh", "a b'c"}, RunOptions{})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "a b'c" {
		t.Errorf("run: %v %+v", err, res)
	}

	// Warm: a new connection runs the same file, with no upload.
	c2 := dial()
	if err := c2.Helper(ctx, helper.VerbSnapshot, helper.SnapshotRequest{Config: helper.Config{DevDir: dev}}, &snap); err != nil {
		t.Fatal(err)
	}
	if n := c2.uploads.Load(); n != 0 || c2.serve.current().path != p {
		t.Errorf("warm container: %d uploads, path %q (want %q)", n, c2.serve.current().path, p)
	}

	// A planted file of the same size is refused by the warm check and
	// replaced through podman cp.
	if _, err := c2.Run(ctx, []string{"sh", "-c", `sz=$(stat -c %s "$1"); head -c "$sz" /dev/zero > "$1.x" && chmod 755 "$1.x" && mv -f "$1.x" "$1"`, "sh", p}, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	c3 := dial()
	if err := c3.Helper(ctx, helper.VerbSnapshot, helper.SnapshotRequest{Config: helper.Config{DevDir: dev}}, &snap); err != nil {
		t.Fatal(err)
	}
	if n := c3.uploads.Load(); n != 1 {
		t.Errorf("planted helper: %d uploads, want 1", n)
	}
}
