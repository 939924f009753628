package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/slurmlab"
)

// free_gpus.lua over the slurm transport, with no SSH: -i slurm:JOB makes
// one host per node of a real 2-node job, and each node's helper runs as
// a step of the job (srun --overlap -w NODE), every node at once. Each lab
// node is a host of its own: its own process view (its slurmd, steps and
// workers, numbered as the node numbers them) and its own fake GPUs at the
// same path (n1 two, n2 one). The holders are orphaned workers outside the
// job, so freeing them is a real "freed": a node without holders has
// nothing to kill while its neighbour's holders live, each node's rows
// name its own holders only, and both nodes end freed.
func TestSlurmTransportFreeGPUs(t *testing.T) {
	slurmlab.Need(t)
	systemdBins(t)
	base := t.TempDir()
	gpus := filepath.Join(base, "gpu") // each node's own base/NODE there
	if err := os.Mkdir(gpus, 0o755); err != nil {
		t.Fatal(err)
	}
	dev, smi := filepath.Join(gpus, "dev"), filepath.Join(gpus, "smi", "nvidia-smi")
	for i, n := range []string{"n1", "n2"} {
		writeFakeGPUs(t, filepath.Join(base, n), dev, 2-i, i+1)
	}
	c := slurmlab.Start(t, slurmlab.Options{Nodes: 2, Init: sdBins.init,
		Binds: []slurmlab.Bind{{Source: filepath.Join(base, "%n"), Target: gpus}}})
	job := c.Sbatch(t, "-N2", "-o", filepath.Join(base, "job.out"), "--wrap", "sleep 300")
	c.WaitState(t, job, 20*time.Second, "RUNNING")
	h := &sdHost{t: t}
	vars := []string{"-i", "slurm:" + job, "-e", "gpush_dev_dir=" + dev, "-e", "gpush_nvidia_smi=" + smi}
	free := slices.Concat([]string{"run", "free_gpus.lua", "--json", "-e", "grace=1s", "-e", "settle=1s"}, vars)

	n1 := []nodeHolder{nodeHold(t, c, base, "n1", 0, 4096), nodeHold(t, c, base, "n1", 1, 2048)}
	// n2 holds nothing: it has nothing to kill, and n1's holders live on.
	r := h.gpush(slices.Concat(free, []string{"--limit", "n2"})...)
	if r.code != 0 {
		t.Errorf("n2 alone: exit %d, want 0", r.code)
	}
	if got := hostRows(t, r.stdout); len(got) != 1 || len(got["n2"]) != 1 || got["n2"][0]["step"] != "already-free" || got["n2"][0]["killed"] != "" {
		t.Errorf("n2 alone: rows %v, want one row of GPU 0, already free, nothing killed", got)
	}
	for _, x := range n1 {
		if !pidAlive(x.machine) {
			t.Errorf("n1's holder %d (machine pid %d) died when n2 was freed", x.pid, x.machine)
		}
	}

	// Holders on both: each node lists its own, by its own pids.
	n2 := []nodeHolder{nodeHold(t, c, base, "n2", 0, 8192)}
	r = h.gpush(append([]string{"run", "gpu_holders.lua", "--json", "-e", "shared=false"}, vars...)...)
	if r.code != 0 {
		t.Errorf("gpu_holders: exit %d, want 0", r.code)
	}
	got := hostRows(t, r.stdout)
	for node, want := range map[string][]nodeHolder{"n1": n1, "n2": n2} {
		var seen, wanted []string
		for _, row := range got[node] {
			seen = append(seen, fmt.Sprintf("GPU %v pid %v %v MiB", row["gpu"], row["pid"], row["mem_mib"]))
		}
		for _, x := range want {
			wanted = append(wanted, fmt.Sprintf("GPU %d pid %d %d MiB", x.gpu, x.pid, x.mib))
		}
		slices.Sort(seen)
		if !slices.Equal(seen, wanted) {
			t.Errorf("%s's holders: %q, want %q (its own only)", node, seen, wanted)
		}
	}

	// Both nodes at once: each frees its own GPUs, killing its own holders.
	r = h.gpush(free...)
	if r.code != 0 {
		t.Errorf("exit %d, want 0", r.code)
	}
	got = hostRows(t, r.stdout)
	for node, want := range map[string][]nodeHolder{"n1": n1, "n2": n2} {
		if len(got[node]) != len(want) {
			t.Errorf("%s: %d rows, want %d: %v", node, len(got[node]), len(want), got[node])
		}
		for _, x := range want {
			i := slices.IndexFunc(got[node], func(row map[string]any) bool { return row["gpu"] == float64(x.gpu) })
			if i < 0 || got[node][i]["freed"] != true || got[node][i]["killed"] != strconv.Itoa(x.pid) {
				t.Errorf("%s GPU %d: rows %v, want it freed by killing %d, its holder there", node, x.gpu, got[node], x.pid)
			}
			if pidAlive(x.machine) {
				t.Errorf("%s's holder %d (machine pid %d) alive after the free", node, x.pid, x.machine)
			}
		}
	}
	r = h.gpush(append([]string{"run", "gpu_status.lua"}, vars...)...)
	if r.code != 0 {
		t.Errorf("gpu_status exit %d", r.code)
	}
	requireRow(t, r.stdout, "n1 0 NVIDIA H200 free 0 143771")
	requireRow(t, r.stdout, "n1 1 NVIDIA H200 free 0 143771")
	requireRow(t, r.stdout, "n2 0 NVIDIA H200 free 0 143771")
	if strings.Contains(r.stderr, "ssh") && strings.Contains(r.stderr, "dial") {
		t.Errorf("an SSH dial in a slurm run: %s", r.stderr)
	}

	// A holder that is a step of the job itself: the job is a live
	// restarter, so the GPU is not "freed" and the job is named.
	if _, err := c.Run(context.Background(), "scancel", job); err != nil {
		t.Fatal(err)
	}
	job2, worker := sbatchHolder(t, c, base, filepath.Join(dev, "nvidia0"))
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

// nodeHolder is a worker holding one fake GPU of a lab node.
type nodeHolder struct {
	gpu, mib     int
	pid, machine int // its pid on its node, and on the machine
}

// nodeHold starts on node an orphaned gpu-holder of GPU gpu using mib MiB:
// its shell exits at once, so no live parent can restart it (it is the
// node's init's).
func nodeHold(t *testing.T, c *slurmlab.Cluster, base, node string, gpu, mib int) nodeHolder {
	t.Helper()
	out := filepath.Join(base, fmt.Sprintf("holder-%s-%d.out", node, gpu))
	cmd, err := c.Command(context.Background(), node, "sh", "-c", `setsid "$1" --dev "$2" --mem-mib "$3" > "$4" 2>&1 &`, "sh",
		sdBins.holder, filepath.Join(base, "gpu", "dev", fmt.Sprintf("nvidia%d", gpu)), strconv.Itoa(mib), out)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start a holder on %s: %v: %s", node, err, b)
	}
	x := nodeHolder{gpu: gpu, mib: mib}
	for end := time.Now().Add(10 * time.Second); x.pid == 0; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		if ps := labgpu.ReadyPIDs(string(b)); len(ps) > 0 {
			x.pid = ps[0]
		} else if time.Now().After(end) {
			t.Fatalf("holder on %s not ready: %s", node, b)
		}
	}
	if x.machine, err = c.MachinePID(node, x.pid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(x.machine, syscall.SIGKILL) })
	return x
}

// hostRows reads `gpush run --json`: each host's rows.
func hostRows(t *testing.T, stdout string) map[string][]map[string]any {
	t.Helper()
	got := map[string][]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var o struct {
			Type string           `json:"type"`
			Host string           `json:"host"`
			Rows []map[string]any `json:"rows"`
		}
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		if o.Type != "summary" {
			got[o.Host] = append(got[o.Host], o.Rows...)
		}
	}
	return got
}
