package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/podmanlab"
)

// free_gpus.lua over the podman transport, the DaemonSet pattern: the
// host is reached only by podman exec into a privileged container sharing
// the host's PID namespace with the fake GPU folder mounted, and frees a
// holder running on the host, outside any container.
func TestPodmanTransportFreeGPUs(t *testing.T) {
	pl := podmanlab.New(t)
	dir, dev, smi := fakeGPUDir(t)
	name := "gpush-e2e-agent"
	pl.Run(name, podmanlab.Options{HostPID: true, Privileged: true, Binds: []string{dir, sdBins.dir},
		Cmd: []string{"/bin/sleep", "600"}}).WaitReady(0, 20*time.Second)

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

	inv := filepath.Join(dir, "inventory.yaml")
	b, _ := json.Marshal(map[string]any{"all": map[string]any{"hosts": map[string]any{"gpu01": map[string]any{
		"ansible_connection": "podman", "ansible_host": name, "gpush_dev_dir": dev, "gpush_nvidia_smi": smi}}}})
	if err := os.WriteFile(inv, b, 0o644); err != nil {
		t.Fatal(err)
	}
	h := &sdHost{t: t}
	r := h.gpush("run", "free_gpus.lua", "-i", inv, "-e", "grace=1s", "-e", "settle=1s")
	if r.code != 0 {
		t.Errorf("exit %d, want 0", r.code)
	}
	requireContains(t, r.stdout, "gpu01", "GPU 0 freed")
	if pidAlive(pid) {
		t.Errorf("holder %d alive after the free", pid)
	}
	r = h.gpush("run", "gpu_status.lua", "-i", inv)
	requireRow(t, r.stdout, "gpu01 0 NVIDIA H200 free 0 143771")
}
