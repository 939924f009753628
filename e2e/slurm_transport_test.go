package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/slurmlab"
)

// free_gpus.lua over the slurm transport, with no SSH: -i slurm:JOB makes
// one host per node of a real 2-node job, and each node's helper runs as
// a step of the job (srun --overlap -w NODE). The holder is an orphaned
// worker outside the job, so freeing it is a real "freed"; both nodes'
// rows are in the report. The lab's nodes share this machine's PID
// namespace, so the run is one host at a time (--forks 1): the first
// node frees the GPU, the second finds it free.
func TestSlurmTransportFreeGPUs(t *testing.T) {
	slurmlab.Need(t)
	dir, dev, smi := fakeGPUDir(t)
	c := slurmlab.Start(t, slurmlab.Options{Nodes: 2})
	job := c.Sbatch(t, "-N2", "-o", filepath.Join(dir, "job.out"), "--wrap", "sleep 300")
	c.WaitState(t, job, 20*time.Second, "RUNNING")

	// Orphaned: its shell exits at once, so no live parent can restart it.
	out := filepath.Join(dir, "holder.out")
	start := exec.Command("sh", "-c", `setsid "$1" --dev "$2" --mem-mib 4096 > "$3" 2>&1 &`, "sh",
		sdBins.holder, filepath.Join(dev, "nvidia0"), out)
	if b, err := start.CombinedOutput(); err != nil {
		t.Fatalf("start holder: %v: %s", err, b)
	}
	pid := 0
	for end := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		if ps := labgpu.ReadyPIDs(string(b)); len(ps) > 0 {
			pid = ps[0]
		} else if time.Now().After(end) {
			t.Fatalf("holder not ready: %s", b)
		}
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	h := &sdHost{t: t}
	vars := []string{"-i", "slurm:" + job, "-e", "gpush_dev_dir=" + dev, "-e", "gpush_nvidia_smi=" + smi}
	r := h.gpush(append([]string{"run", "free_gpus.lua", "--forks", "1", "-e", "grace=1s", "-e", "settle=1s"}, vars...)...)
	if r.code != 0 {
		t.Errorf("exit %d, want 0", r.code)
	}
	requireContains(t, r.stdout, "n1", "n2", "freed")
	if pidAlive(pid) {
		t.Errorf("holder %d alive after the free", pid)
	}
	r = h.gpush(append([]string{"run", "gpu_status.lua"}, vars...)...)
	if r.code != 0 {
		t.Errorf("gpu_status exit %d", r.code)
	}
	requireRow(t, r.stdout, "n[1-2] 2 0 NVIDIA H200 free 0 143771")
	if strings.Contains(r.stderr, "ssh") && strings.Contains(r.stderr, "dial") {
		t.Errorf("an SSH dial in a slurm run: %s", r.stderr)
	}

	// A holder that is a step of the job itself: the job is a live
	// restarter, so the GPU is not "freed" and the job is named.
	if _, err := c.Run(context.Background(), "scancel", job); err != nil {
		t.Fatal(err)
	}
	job2, worker := sbatchHolder(t, c, dir, filepath.Join(dev, "nvidia0"))
	r = h.gpush("run", "free_gpus.lua", "-i", "slurm:"+job2, "-e", "gpush_dev_dir="+dev, "-e", "gpush_nvidia_smi="+smi,
		"-e", "grace=1s", "-e", "settle=1s")
	if r.code != 2 {
		t.Errorf("job step holder: exit %d, want 2", r.code)
	}
	requireContains(t, r.stdout, "slurm job "+job2, "scancel "+job2)
	if pidAlive(worker) {
		t.Errorf("worker %d alive after the kill", worker)
	}

	r = h.gpush("run", "gpu_status.lua", "-i", "slurm:999999")
	if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "999999") {
		t.Errorf("unknown job: exit %d", r.code)
	}
}
