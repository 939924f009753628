package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/slurmlab"
)

// A real Slurm job (sbatch on a real slurmctld and slurmd) whose worker
// holds the fake GPU: killing the worker leaves the job running, so the
// free fails naming the job and scancel; with stop_restarters the job is
// cancelled and the GPU stays free. A --requeue job is a restarter too.
func TestSlurmFreeGPUsJob(t *testing.T) {
	slurmlab.Need(t)
	dir, dev, smi := fakeGPUDir(t)
	c := slurmlab.Start(t, slurmlab.Options{Nodes: 2})
	inv := filepath.Join(dir, "inventory.yaml")
	b, _ := json.Marshal(map[string]any{"all": map[string]any{"hosts": map[string]any{"localhost": map[string]any{
		"ansible_connection": "local", "gpush_dev_dir": dev, "gpush_nvidia_smi": smi}}}})
	if err := os.WriteFile(inv, b, 0o644); err != nil {
		t.Fatal(err)
	}
	h := &sdHost{t: t}
	job, worker := sbatchHolder(t, c, dir, filepath.Join(dev, "nvidia0"))

	r := h.gpush("run", "gpu_holders.lua", "-i", inv, "-e", "shared=false")
	requireContains(t, r.stdout, "slurm job "+job)
	r = h.gpush("run", "free_gpus.lua", "-i", inv, "-e", "grace=1s", "-e", "settle=1s")
	if r.code != 2 {
		t.Errorf("exit %d, want 2", r.code)
	}
	requireContains(t, r.stdout, "slurm job "+job, "scancel "+job, "free with a restarter alive")
	if pidAlive(worker) {
		t.Errorf("worker %d alive after the kill", worker)
	}
	if st, _ := c.JobState(job); st != "RUNNING" {
		t.Errorf("job %s is %s: gpush must not cancel it unasked", job, st)
	}

	job2, _ := sbatchHolder(t, c, dir, filepath.Join(dev, "nvidia0"))
	r = h.gpush("run", "free_gpus.lua", "-i", inv, "-e", "grace=1s", "-e", "stop_restarters=true")
	if r.code != 0 {
		t.Errorf("exit %d, want 0 with stop_restarters", r.code)
	}
	requireContains(t, r.stdout, "stopped slurm job "+job2, "GPU 0 freed")
	if st := c.WaitState(t, job2, 10*time.Second, "CANCELLED"); st != "CANCELLED" {
		t.Errorf("job %s is %s after stop_restarters", job2, st)
	}
	time.Sleep(20 * time.Second)
	r = h.gpush("run", "gpu_status.lua", "-i", inv)
	requireRow(t, r.stdout, "localhost 0 NVIDIA H200 free 0 143771")

	// A requeued job: under --check, stop_restarters says it would cancel it.
	job3, _ := sbatchHolder(t, c, dir, filepath.Join(dev, "nvidia0"), "--requeue")
	r = h.gpush("run", "free_gpus.lua", "-i", inv, "--check", "-e", "stop_restarters=true")
	requireContains(t, r.stdout, "would stop slurm job "+job3, "scancel "+job3)
	if st, _ := c.JobState(job3); st != "RUNNING" {
		t.Errorf("job %s is %s after --check", job3, st)
	}
}

// sbatchHolder submits a job whose script runs a gpu-holder of dev (4 GiB)
// and then sleeps, and returns the job id and the holder's machine pid
// (its node, a process view of its own, numbers it differently).
func sbatchHolder(t *testing.T, c *slurmlab.Cluster, dir, dev string, args ...string) (string, int) {
	t.Helper()
	return c.SbatchHolder(t, dir, fmt.Sprintf("#!/bin/sh\n'%s' --dev '%s' --mem-mib 4096\nsleep 300\n", sdBins.holder, dev), args...)
}
