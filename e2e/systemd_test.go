package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/nssystemd"

	"github.com/gpush/gpush/lab/procstat"
)

// These tests run `gpush run free_gpus.lua` on the local host (no SSH)
// against the machine's real systemd, booted as PID 1 of a private
// PID+mount namespace (lab/nssystemd), with fake GPU devices, the lab's
// fake nvidia-smi and real gpu-holder processes as the units' workers.

var sdBins struct {
	once          sync.Once
	err           error
	dir           string
	gpush, holder string
	smi           string
	init          string // lab-init (the Slurm lab's node views)
}

// systemdBins returns the gpush and lab binaries, reusing TestMain's when it
// built them (it does only where sshd is installed).
func systemdBins(t *testing.T) {
	t.Helper()
	sdBins.once.Do(func() {
		if gpushBin != "" && labBin.Holder != "" {
			sdBins.dir, sdBins.gpush, sdBins.holder, sdBins.smi, sdBins.init = filepath.Dir(labBin.Holder), gpushBin, labBin.Holder, labBin.FakeSMI, labBin.Init
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		dir, err := os.MkdirTemp("", "gpush-e2e-systemd-bin-")
		if err != nil {
			sdBins.err = err
			return
		}
		sdBins.dir = dir
		sdBins.gpush = filepath.Join(dir, "gpush")
		if sdBins.err = lab.BuildGpush(ctx, sdBins.gpush); sdBins.err != nil {
			return
		}
		b, err := lab.Build(ctx, dir, lab.Binaries{})
		sdBins.err, sdBins.holder, sdBins.smi, sdBins.init = err, b.Holder, b.FakeSMI, b.Init
	})
	if sdBins.err != nil {
		t.Fatalf("build: %v", sdBins.err)
	}
}

// fakeGPUDir builds the lab binaries and a folder with one fake H200's
// device files (dev/) and the lab's fake nvidia-smi (smi/) for it.
func fakeGPUDir(t *testing.T) (dir, dev, smi string) {
	t.Helper()
	systemdBins(t)
	dir = t.TempDir()
	dev, smi = writeFakeGPUs(t, dir, filepath.Join(dir, "dev"), 1, 0)
	return dir, dev, smi
}

// writeFakeGPUs writes n fake H200s into dir: their device files in
// dir/dev, the fake nvidia-smi and its config in dir/smi. devDir is where
// the config says the devices are, as the processes that read it see the
// folder (dir/dev, unless dir is mounted elsewhere). uuid tells apart the
// GPUs of different folders. It returns dir/dev and dir/smi/nvidia-smi.
func writeFakeGPUs(t *testing.T, dir, devDir string, n, uuid int) (dev, smi string) {
	t.Helper()
	dev = filepath.Join(dir, "dev")
	smiDir := filepath.Join(dir, "smi")
	for _, d := range []string{dev, smiDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := labgpu.Config{DevDir: devDir}
	files := []string{"nvidiactl", "nvidia-uvm"}
	for i := range n {
		files = append(files, fmt.Sprintf("nvidia%d", i))
		cfg.GPUs = append(cfg.GPUs, labgpu.GPU{Index: i, UUID: fmt.Sprintf("GPU-d7f963c5-cdb5-ba9d-c562-%06d%06d", uuid, i),
			Name: "NVIDIA H200", BusID: fmt.Sprintf("00000000:%X8:00.0", i+1), TotalMiB: 143771})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dev, f), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	smi = filepath.Join(smiDir, "nvidia-smi")
	if err := os.Symlink(sdBins.smi, smi); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Save(filepath.Join(smiDir, labgpu.ConfigName)); err != nil {
		t.Fatal(err)
	}
	return dev, smi
}

// sdHost is the local host with one fake GPU and a real systemd.
type sdHost struct {
	t   *testing.T
	sd  *nssystemd.Systemd
	dir string
	dev string
	smi string
}

func newSDHost(t *testing.T) *sdHost {
	t.Helper()
	if why := nssystemd.Available(); why != "" {
		if os.Getenv("CI") == "true" || os.Geteuid() == 0 {
			t.Fatalf("real systemd: %s", why)
		}
		t.Skip("skipping: " + why)
	}
	h := &sdHost{t: t}
	h.dir, h.dev, h.smi = fakeGPUDir(t)
	sd, err := nssystemd.Boot(context.Background(), nssystemd.Options{Dir: t.TempDir(), Share: []string{h.dir, sdBins.dir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sd.Stop(); err != nil {
			t.Error(err)
		}
	})
	h.sd = sd
	return h
}

// unit writes and starts a service whose worker is a gpu-holder of GPU 0,
// and returns the host pids of its n holders once they are ready.
func (h *sdHost) unit(name, args string, n int, extra ...string) []int {
	h.t.Helper()
	ctx := context.Background()
	log := filepath.Join(h.dir, name+".log")
	body := fmt.Sprintf("[Service]\nExecStart=%s --dev %s %s\nStandardOutput=append:%s\n%s\n",
		sdBins.holder, filepath.Join(h.dev, "nvidia0"), args, log, strings.Join(extra, "\n"))
	if err := h.sd.WriteUnit(ctx, name, body); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.sd.Run(ctx, "start", name); err != nil {
		h.t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(log)
		if ns := labgpu.ReadyPIDs(string(b)); len(ns) >= n {
			var out []int
			for _, p := range ns[:n] {
				out = append(out, h.sd.HostPID(p))
			}
			return out
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not %d ready lines after 30s:\n%s", name, n, b)
		}
	}
}

// inventory writes an inventory of the local host with the gpush_* vars
// and services as host vars (no -e parsing involved).
func (h *sdHost) inventory(services ...string) string {
	h.t.Helper()
	vars := map[string]any{
		"ansible_connection": "local",
		"gpush_dev_dir":      h.dev,
		"gpush_nvidia_smi":   h.smi,
		"gpush_systemctl":    h.sd.Systemctl,
	}
	if len(services) > 0 {
		vars["services"] = services
	}
	inv := map[string]any{"all": map[string]any{"hosts": map[string]any{"localhost": vars}}}
	b, err := json.Marshal(inv) // JSON is YAML
	if err != nil {
		h.t.Fatal(err)
	}
	p := filepath.Join(h.dir, "inventory.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *sdHost) gpush(args ...string) runResult {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sdBins.gpush, args...)
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=", "NO_COLOR=1", "HOME="+h.t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := runResult{stdout: out.String(), stderr: errb.String()}
	var x *exec.ExitError
	switch {
	case errors.As(err, &x):
		r.code = x.ExitCode()
	case err != nil:
		h.t.Fatalf("gpush %v: %v", args, err)
	}
	h.t.Logf("gpush %s -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func (h *sdHost) active(unit string) string {
	p, err := h.sd.Show(context.Background(), unit, "ActiveState")
	if err != nil {
		h.t.Fatal(err)
	}
	return p["ActiveState"]
}

func pidAlive(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.State != 'Z'
}

// A typo in a unit name fails the host, saying the unit was not found;
// it is never "stopped".
func TestSystemdFreeGPUsUnknownUnit(t *testing.T) {
	h := newSDHost(t)
	h.unit("vllm-embed.service", "--mem-mib 10240", 1)
	r := h.gpush("run", "free_gpus.lua", "-i", h.inventory("vllm-embd.service"))
	if r.code != 2 {
		t.Errorf("exit %d, want 2 (host failed)", r.code)
	}
	requireContains(t, r.stdout+r.stderr, "unit vllm-embd.service not found")
	if strings.Contains(r.stdout+r.stderr, "stopped vllm-embd.service") {
		t.Error("the unknown unit was reported stopped")
	}
}

// KillMode=process: the stop leaves the unit's worker holding GPU 0; it is
// found in the unit's cgroup, killed, and the GPU is verified free.
func TestSystemdFreeGPUsKillModeProcess(t *testing.T) {
	h := newSDHost(t)
	pids := h.unit("sglang-qwen.service", "--mem-mib 2048 --child-mem-mib 8192", 2, "KillMode=process")
	r := h.gpush("run", "free_gpus.lua", "-i", h.inventory("sglang-qwen.service"))
	if r.code != 0 {
		t.Errorf("exit %d, want 0", r.code)
	}
	for _, p := range pids {
		if pidAlive(p) {
			t.Errorf("holder %d alive after free_gpus", p)
		}
	}
	if st := h.active("sglang-qwen.service"); st != "inactive" {
		t.Errorf("sglang-qwen.service %s after free_gpus", st)
	}
	requireContains(t, r.stdout+r.stderr, "sglang-qwen.service", fmt.Sprint(pids[1]))
	h.requireFree()
}

// Restart=always: the unit is stopped and stays stopped (systemd does not
// restart a unit that was stopped); its worker is gone and the GPU free.
func TestSystemdFreeGPUsRestartAlways(t *testing.T) {
	h := newSDHost(t)
	pids := h.unit("trainer.service", "--mem-mib 4096", 1, "Restart=always", "RestartSec=100ms")
	r := h.gpush("run", "free_gpus.lua", "-i", h.inventory("trainer.service"))
	if r.code != 0 {
		t.Errorf("exit %d, want 0", r.code)
	}
	if pidAlive(pids[0]) {
		t.Errorf("worker %d alive after free_gpus", pids[0])
	}
	if st := h.active("trainer.service"); st != "inactive" {
		t.Errorf("trainer.service %s after free_gpus", st)
	}
	// The stop freed it; Restart= made gpush watch it for the settle time.
	requireRow(t, r.stdout, "localhost 0 by-stop true free 4096 0")
	h.requireFree()
}

// requireFree wants no process of the namespaced systemd's units left and
// a gpu_status run that shows GPU 0 with no holder.
func (h *sdHost) requireFree() {
	h.t.Helper()
	for _, p := range h.sd.Procs() {
		if p == h.sd.PID {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); err == nil && strings.Contains(string(b), "gpu-holder") {
			h.t.Errorf("holder %d left: %q", p, b)
		}
	}
	r := h.gpush("run", "gpu_status.lua", "-i", filepath.Join(h.dir, "inventory.yaml"))
	if r.code != 0 {
		h.t.Errorf("gpu_status: exit %d", r.code)
	}
	requireRow(h.t, r.stdout, "localhost 0 NVIDIA H200 free 0 143771")
}

// A unit that restarts its worker 15 s after each death (Restart=always,
// RestartSec=15s), not named in services: killing its worker frees the GPU
// for 15 s only, so the free fails naming the unit and systemctl stop; with
// stop_restarters the unit is stopped first and the GPU stays free.
func TestSystemdFreeGPUsSlowRestart(t *testing.T) {
	h := newSDHost(t)
	pids := h.unit("trainer.service", "--mem-mib 4096", 1, "Restart=always", "RestartSec=15s")
	inv := h.inventory()
	r := h.gpush("run", "free_gpus.lua", "-i", inv, "-e", "grace=1s")
	if r.code != 2 {
		t.Errorf("exit %d, want 2", r.code)
	}
	requireContains(t, r.stdout, "unit trainer.service", "Restart=always", "systemctl stop trainer.service")
	if strings.Contains(r.stdout, "GPU 0 freed") {
		t.Errorf("GPU 0 said freed while trainer.service restarts its worker")
	}
	if pidAlive(pids[0]) {
		t.Errorf("worker %d alive after the kill", pids[0])
	}
	r = h.gpush("run", "free_gpus.lua", "-i", inv, "-e", "grace=1s", "-e", "stop_restarters=true")
	if r.code != 0 {
		t.Errorf("exit %d, want 0 with stop_restarters", r.code)
	}
	requireContains(t, r.stdout, "stopped unit trainer.service")
	if st := h.active("trainer.service"); st != "inactive" && st != "failed" {
		t.Errorf("trainer.service %s after stop_restarters", st)
	}
	time.Sleep(20 * time.Second)
	h.requireFree()
}
