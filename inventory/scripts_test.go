package inventory

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// standIns puts stand-in commands first on PATH. Each logs its argv to the
// returned file and prints a fixture for the argv it expects (given as
// `case` patterns of "$*" and the shell code to run); any other argv fails,
// so a script calling the tool wrongly fails the test.
func standIns(t *testing.T, tools map[string]map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	log := filepath.Join(dir, "calls")
	for name, cases := range tools {
		var b strings.Builder
		b.WriteString("#!/bin/sh\necho \"" + name + " $*\" >> '" + log + "'\ncase \"$*\" in\n")
		for _, argv := range sortedKeys(cases) {
			b.WriteString("'" + argv + "') " + cases[argv] + " ;;\n")
		}
		b.WriteString("*) echo \"" + name + " stand-in: unexpected arguments: $*\" >&2; exit 64 ;;\nesac\n")
		writeScript(t, bin, name, b.String())
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

func fixture(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func slurmStandIns(t *testing.T) string {
	return standIns(t, map[string]map[string]string{
		"sinfo": {
			"-h -p gpu -o %N":               "cat '" + fixture(t, "slurm/sinfo-h-p-gpu-o-N.txt") + "'",
			"-h -p debug -o %N":             "cat '" + fixture(t, "slurm/sinfo-h-p-debug-o-N.txt") + "'",
			"-h -p gpu -t idle,mixed -o %N": "echo 'gpu[03-04]'",
			"-h -p gpux -o %N":              ":",
			"-h -p down -o %N":              "echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1",
		},
		"scontrol": {
			"show hostnames gpu[01-04,07],gpu[10-11]": "cat '" + fixture(t, "slurm/scontrol-show-hostnames-gpu.txt") + "'",
			"show hostnames dbg[1-2],gpu01":           "cat '" + fixture(t, "slurm/scontrol-show-hostnames-debug.txt") + "'",
			"show hostnames gpu[03-04]":               "printf 'gpu03\\ngpu04\\n'",
		},
	})
}

func TestSlurmScript(t *testing.T) {
	log := slurmStandIns(t)
	t.Setenv("SLURM_INVENTORY_PARTITIONS", "gpu,debug")
	inv := mustResolve(t, "scripts/slurm.sh", scriptOpts(t))
	if inv.Kind != KindScript {
		t.Errorf("kind %s", inv.Kind)
	}
	if got, _ := inv.GroupHosts("gpu"); !reflect.DeepEqual(got, []string{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "gpu10", "gpu11"}) {
		t.Errorf("gpu = %v", got)
	}
	if got, _ := inv.GroupHosts("debug"); !reflect.DeepEqual(got, []string{"gpu01", "dbg1", "dbg2"}) {
		t.Errorf("debug = %v", got)
	}
	if got, _ := inv.GroupHosts("slurm"); len(got) != 9 {
		t.Errorf("slurm = %v", got)
	}
	h, _ := inv.Host("gpu01")
	if !reflect.DeepEqual(h.Groups, []string{"all", "debug", "gpu", "slurm"}) || h.Address != "gpu01" {
		t.Errorf("gpu01 %+v", h)
	}
	if h, _ := inv.Host("dbg1"); h.Vars["slurm_partition"] != "debug" {
		t.Errorf("dbg1 vars %v", h.Vars)
	}
	b, _ := os.ReadFile(log)
	want := "sinfo -h -p gpu -o %N\nscontrol show hostnames gpu[01-04,07],gpu[10-11]\n" +
		"sinfo -h -p debug -o %N\nscontrol show hostnames dbg[1-2],gpu01\n"
	if string(b) != want {
		t.Errorf("calls:\n%s\nwant:\n%s", b, want)
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings %q", inv.Warnings)
	}
}

func TestSlurmScriptStatesAndErrors(t *testing.T) {
	slurmStandIns(t)
	t.Setenv("SLURM_INVENTORY_PARTITIONS", "gpu")
	t.Setenv("SLURM_INVENTORY_STATES", "idle,mixed")
	inv := mustResolve(t, "scripts/slurm.sh", scriptOpts(t))
	if got := inv.HostNames(); !reflect.DeepEqual(got, []string{"gpu03", "gpu04"}) {
		t.Errorf("idle,mixed hosts %v", got)
	}
	t.Setenv("SLURM_INVENTORY_STATES", "")
	for part, want := range map[string]string{
		"gpux":        "partition gpux has no nodes",
		"down":        "Unable to contact slurm controller",
		"gpu;rm -rf ": `partition name \"gpu;rm -rf \" has unexpected characters`,
	} {
		t.Setenv("SLURM_INVENTORY_PARTITIONS", part)
		_, err := Resolve("scripts/slurm.sh", scriptOpts(t))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "exited with status") {
			t.Errorf("partition %q: error %v, want %q", part, err, want)
		}
	}
}

func k8sStandIn(t *testing.T, nodesJSON string) string {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: k8s_gpu.py needs it")
	}
	return standIns(t, map[string]map[string]string{
		"kubectl": {
			"get nodes -l nvidia.com/gpu.present=true -o json":                       "cat '" + nodesJSON + "'",
			"--context prod get nodes -l nvidia.com/gpu.product=NVIDIA-H200 -o json": "cat '" + nodesJSON + "'",
			"get nodes -l nvidia.com/gpu.present=false -o json":                      "echo 'error: You must be logged in to the server (Unauthorized)' >&2; exit 1",
		},
	})
}

func TestK8sGPUScript(t *testing.T) {
	log := k8sStandIn(t, fixture(t, "k8s/get-nodes-gpu.json"))
	inv := mustResolve(t, "scripts/k8s_gpu.py", scriptOpts(t))
	if got := inv.HostNames(); !reflect.DeepEqual(got, []string{"dgx-h200-01", "dgx-h200-02", "hgx-h100-07"}) {
		t.Errorf("hosts %v", got)
	}
	if got, _ := inv.GroupHosts("gpu_NVIDIA_H200"); !reflect.DeepEqual(got, []string{"dgx-h200-01", "dgx-h200-02"}) {
		t.Errorf("gpu_NVIDIA_H200 = %v", got)
	}
	h, _ := inv.Host("dgx-h200-01")
	wantVars := map[string]any{"ansible_host": "10.20.0.11", "k8s_node": "dgx-h200-01", "k8s_gpu_count": 8,
		"k8s_gpu_product": "NVIDIA-H200", "k8s_ready": true, "k8s_unschedulable": false}
	if h.Address != "10.20.0.11" || !reflect.DeepEqual(h.Vars, wantVars) ||
		!reflect.DeepEqual(h.Groups, []string{"all", "gpu_NVIDIA_H200", "k8s_gpu"}) {
		t.Errorf("dgx-h200-01 %+v", h)
	}
	if h, _ := inv.Host("dgx-h200-02"); h.Address != "10.20.0.12" || h.Vars["k8s_ready"] != false || h.Vars["k8s_unschedulable"] != true {
		t.Errorf("dgx-h200-02 (cordoned, NotReady) %+v", h)
	}
	if h, _ := inv.Host("hgx-h100-07"); h.Address != "10.20.1.7" || h.Vars["k8s_gpu_product"] != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("hgx-h100-07 %+v", h)
	}
	if b, _ := os.ReadFile(log); string(b) != "kubectl get nodes -l nvidia.com/gpu.present=true -o json\n" {
		t.Errorf("calls %q", b)
	}

	// --host answers too, for tools that ask it whatever _meta says.
	out, err := exec.Command("scripts/k8s_gpu.py", "--host", "hgx-h100-07").Output()
	if err != nil || !strings.Contains(string(out), `"ansible_host": "10.20.1.7"`) {
		t.Errorf("--host: %s, %v", out, err)
	}

	t.Setenv("K8S_GPU_CONTEXT", "prod")
	t.Setenv("K8S_GPU_SELECTOR", "nvidia.com/gpu.product=NVIDIA-H200")
	if inv := mustResolve(t, "scripts/k8s_gpu.py", scriptOpts(t)); len(inv.HostNames()) != 3 {
		t.Errorf("with a context: hosts %v", inv.HostNames())
	}
}

func TestK8sGPUScriptErrors(t *testing.T) {
	dir := t.TempDir()
	noIP := filepath.Join(dir, "nodes.json")
	writeFile(t, noIP, `{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node", "metadata": {"name": "gpu-x"},
 "status": {"addresses": [{"address": "gpu-x", "type": "Hostname"}, {"address": "203.0.113.9", "type": "ExternalIP"}]}}]}`)
	k8sStandIn(t, noIP)
	_, err := Resolve("scripts/k8s_gpu.py", scriptOpts(t))
	if err == nil || !strings.Contains(err.Error(), "node gpu-x has no InternalIP address") {
		t.Errorf("no InternalIP: error %v", err)
	}
	t.Setenv("K8S_GPU_SELECTOR", "nvidia.com/gpu.present=false")
	_, err = Resolve("scripts/k8s_gpu.py", scriptOpts(t))
	if err == nil || !strings.Contains(err.Error(), "You must be logged in to the server (Unauthorized)") ||
		!strings.Contains(err.Error(), "exited with status 1") {
		t.Errorf("kubectl failing: error %v", err)
	}
}
