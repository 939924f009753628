package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/podmanlab"
)

// A real Podman container with --restart=always whose process holds the
// fake GPU: killing it frees the GPU for well under a second, so the free
// fails naming the container and podman stop; with stop_restarters the
// container is stopped with its runtime and the GPU stays free.
func TestPodmanFreeGPUsRestartAlways(t *testing.T) {
	pl := podmanlab.New(t)
	dir, dev, smi := fakeGPUDir(t)
	c := pl.Run("trainer", podmanlab.Options{Restart: "always", Binds: []string{dir, sdBins.dir},
		Cmd: []string{sdBins.holder, "--dev", filepath.Join(dev, "nvidia0"), "--mem-mib", "4096"}})
	c.WaitReady(0, 20*time.Second)
	inv := filepath.Join(dir, "inventory.yaml")
	b, _ := json.Marshal(map[string]any{"all": map[string]any{"hosts": map[string]any{"localhost": map[string]any{
		"ansible_connection": "local", "gpush_dev_dir": dev, "gpush_nvidia_smi": smi}}}})
	if err := os.WriteFile(inv, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) runResult {
		h := &sdHost{t: t}
		return h.gpush(append([]string{"run", "free_gpus.lua", "-i", inv, "-e", "grace=1s"}, args...)...)
	}
	r := run()
	if r.code != 2 {
		t.Errorf("exit %d, want 2", r.code)
	}
	requireContains(t, r.stdout, "podman container trainer", "podman stop trainer")
	if strings.Contains(r.stdout, "GPU 0 freed") {
		t.Error("GPU 0 said freed while podman restarts its worker")
	}
	// A fresh container for the stop: podman's restart after a kill runs
	// in conmon's cleanup, whose timing is podman's (helper tests cover it).
	c.Remove()
	c = pl.Run("trainer2", podmanlab.Options{Restart: "always", Binds: []string{dir, sdBins.dir},
		Cmd: []string{sdBins.holder, "--dev", filepath.Join(dev, "nvidia0"), "--mem-mib", "4096"}})
	worker := c.WaitReady(0, 20*time.Second)
	r = run("-e", "stop_restarters=true")
	if r.code != 0 {
		t.Errorf("exit %d, want 0 with stop_restarters", r.code)
	}
	requireContains(t, r.stdout, "stopped podman container trainer2", "GPU 0 freed")
	time.Sleep(20 * time.Second)
	if st, _ := c.State(); st.Status == "running" || pidAlive(worker) {
		t.Errorf("20 s after the free the container is %+v (worker %d alive %v)", st, worker, pidAlive(worker))
	}
}
