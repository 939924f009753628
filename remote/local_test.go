package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/remote/helperbin"
)

func localHost(t *testing.T) (*localConn, string) {
	t.Helper()
	dir := t.TempDir()
	log, _ := testLogger(t)
	h := Host{Name: "localhost", Connection: "local",
		Vars: map[string]any{VarRemoteDir: filepath.Join(dir, "helper")}}
	c, err := Dial(context.Background(), h, Options{HelperSource: helperbin.Source, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*localConn), dir
}

func TestLocalRunExecsWithoutShell(t *testing.T) {
	c, dir := localHost(t)
	marker := filepath.Join(dir, "pwned")
	res, err := c.Run(context.Background(), []string{"printf", "[%s]", "$HOME", "$(touch " + marker + ")"}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "[$HOME][$(touch "+marker+")]" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("an argument went through a shell")
	}
	res, err = c.Run(context.Background(), []string{"sh", "-c", "cat; echo e >&2; exit 4"}, RunOptions{Stdin: strings.NewReader("x")})
	if err != nil || res.ExitCode != 4 || string(res.Stdout) != "x" || string(res.Stderr) != "e\n" {
		t.Fatalf("got %v %+v", err, res)
	}
	if _, err := c.Run(context.Background(), []string{"/nonexistent/cmd"}, RunOptions{}); err == nil ||
		!strings.Contains(err.Error(), "/nonexistent/cmd") {
		t.Fatalf("missing command: %v", err)
	}
	_, err = c.Run(context.Background(), []string{"sleep", "60"}, RunOptions{Timeout: 200e6})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("want a timeout, got %v", err)
	}
}

func TestLocalPutGet(t *testing.T) {
	c, dir := localHost(t)
	p := filepath.Join(dir, "f")
	data := bytes.Repeat([]byte{7}, 3<<20)
	if err := c.Put(context.Background(), p, bytes.NewReader(data), 0o604); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(context.Background(), p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %v", err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o604 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// A cancelled put leaves the old content and no temp file.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Put(ctx, p, strings.NewReader("new"), 0o600); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled put: %v", err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("cancelled put changed the file")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
	if err := c.Put(context.Background(), filepath.Join(dir, "no", "such", "dir", "f"), strings.NewReader(""), 0o600); err == nil {
		t.Fatal("put into a missing folder succeeded")
	}
}

func TestLocalHelperInProcessAndBecome(t *testing.T) {
	c, _ := localHost(t)
	var snap helper.Snapshot
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: t.TempDir(), NvidiaSMI: "/nonexistent/nvidia-smi"}}
	if err := c.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Version == "" || snap.BootID == "" {
		t.Fatalf("snapshot %+v", snap)
	}
	if c.uploads.Load() != 0 {
		t.Fatal("the in-process helper deployed a binary")
	}
	err := c.Helper(context.Background(), "bogus", nil, nil)
	var he *HelperError
	if !errors.As(err, &he) || !strings.Contains(he.Message, "unknown verb") {
		t.Fatalf("want the helper's error, got %v", err)
	}

	if os.Getuid() != 0 {
		t.Skip("become: needs root for passwordless sudo -n")
	}
	if _, err := execOut("sudo", "-n", "true"); err != nil {
		t.Skipf("sudo -n not usable here: %v", err)
	}
	c.host.Become = true
	if err := c.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
		t.Fatalf("helper through sudo: %v", err)
	}
	if c.uploads.Load() != 1 {
		t.Fatal("become did not deploy the helper binary")
	}
	p, _ := c.DeployHelper(context.Background())
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("deployed helper %s: %v", p, err)
	}
}

// A local connection's in-process calls share one session, as a remote
// host's serve session does: two snapshots read one nvidia-smi stream
// (no --query-gpu one-shot), and Close stops and reaps it.
func TestLocalHelperCallsShareASession(t *testing.T) {
	c, _ := localHost(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "runs")
	smi := filepath.Join(dir, "nvidia-smi")
	script := "#!/bin/sh\necho \"$$ ${1%%=*}\" >> '" + log + "'\n" +
		"line='0, GPU-d7f963c5-cdb5-ba9d-c562-000000000000, NVIDIA H200, 00000000:18:00.0, 0, 143771'\n" +
		"case $1 in\n-lms) while :; do echo \"$line\"; sleep 0.002; done ;;\n--query-gpu*) echo \"$line\" ;;\nesac\n"
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: t.TempDir(), NvidiaSMI: smi, SMITimeout: helper.Duration(time.Minute)}}
	for i := 0; i < 2; i++ {
		var snap helper.Snapshot
		if err := c.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
			t.Fatal(err)
		}
		if len(snap.GPUs) != 1 || snap.GPUs[0].MemTotalMiB != 143771 {
			t.Fatalf("snapshot %d: GPUs %+v warnings %v", i+1, snap.GPUs, snap.Warnings)
		}
	}
	b, _ := os.ReadFile(log)
	var streams []int
	oneShots := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var pid int
		var form string
		fmt.Sscan(line, &pid, &form)
		switch form {
		case "-lms":
			streams = append(streams, pid)
		case "--query-gpu":
			oneShots++
		}
	}
	if len(streams) != 1 || oneShots != 0 {
		t.Fatalf("runs %q: want one stream and no --query-gpu one-shot", b)
	}
	c.Close()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", streams[0])); err == nil {
		t.Errorf("stream pid %d still there after Close", streams[0])
	}
}
