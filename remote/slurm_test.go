package remote

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/slurmlab"
	"github.com/gpush/gpush/remote/helperbin"
)

// The srun argv: job, node and the pipe options, then the command as
// separate arguments (no shell string); a missing job id is refused
// naming the host and the var.
func TestSlurmTransportArgv(t *testing.T) {
	tr, err := newSlurmTransport(Host{Name: "gpu01", Address: "n2", Vars: map[string]any{VarSlurmJob: 1234, VarSlurmSrun: "/opt/slurm/bin/srun"}})
	if err != nil {
		t.Fatal(err)
	}
	got := tr.(*commandTransport).Argv([]string{"sh", "-c", `echo "$1"`, "sh", "a b"})
	want := []string{"/opt/slurm/bin/srun", "--jobid=1234", "--overlap", "-w", "n2", "-N1", "-n1", "--input=all", "-u", "--quiet",
		"--kill-on-bad-exit=1", "--wait=0", "--", "sh", "-c", `echo "$1"`, "sh", "a b"}
	if !slices.Equal(got, want) {
		t.Errorf("argv\n got %q\nwant %q", got, want)
	}
	_, err = newSlurmTransport(Host{Name: "gpu01", Address: "n2"})
	if err == nil || !strings.Contains(err.Error(), "gpu01") || !strings.Contains(err.Error(), VarSlurmJob) {
		t.Errorf("no job id: %v", err)
	}
	_, err = newSlurmTransport(Host{Name: "gpu01", Address: "-n2", Vars: map[string]any{VarSlurmJob: "7"}})
	if err == nil {
		t.Error("a node name starting with '-' was taken")
	}
}

// Against a real cluster (slurmlab): the helper is placed through srun's
// stdin into a running job's node and answers a snapshot over one step.
func TestSlurmTransportRealJob(t *testing.T) {
	c := slurmlab.Start(t, slurmlab.Options{Nodes: 2})
	job := c.Sbatch(t, "-N2", "-o", "/dev/null", "--wrap", "sleep 300")
	c.WaitState(t, job, 20*time.Second, "RUNNING")
	log, _ := testLogger(t)
	h := Host{Name: "gpu02", Address: "n2", Connection: "slurm", Vars: map[string]any{
		VarSlurmJob: job, VarRemoteDir: t.TempDir()}}
	cn, err := Dial(context.Background(), h, Options{HelperSource: helperbin.Source, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cn.Run(ctx, []string{"sh", "-c", `echo "$SLURMD_NODENAME $1"`, "sh", "a b'c"}, RunOptions{})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "n2 a b'c" {
		t.Fatalf("run: %v %+v", err, res)
	}
	var snap helper.Snapshot
	if err := cn.Helper(ctx, helper.VerbSnapshot, helper.SnapshotRequest{Config: helper.Config{DevDir: t.TempDir()}}, &snap); err != nil {
		t.Fatal(err)
	}
	if n := cn.(*cmdConn).uploads.Load(); n != 1 {
		t.Errorf("%d uploads, want 1", n)
	}
}
