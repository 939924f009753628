package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/podmanlab"
)

// gpush run through the podman transport (ansible_connection:
// containers.podman.podman), against real podman: the helper runs in a
// privileged container sharing the host's PID namespace (the DaemonSet
// pattern), and reports a holder that runs on the host, outside it.
func TestRunThroughPodman(t *testing.T) {
	l := podmanlab.New(t)
	buildReplBins(t)
	dir := t.TempDir()
	dev, smi := localGPUs(t, dir, 2)
	holder := exec.Command(replBins.lab.Holder, "--dev", filepath.Join(dev, "nvidia0"), "--dev", filepath.Join(dev, "nvidiactl"), "--mem-mib", "4096")
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	ready, err := bufio.NewReader(stdout).ReadString('\n')
	if _, ok := labgpu.ReadyPID(ready); err != nil || !ok {
		t.Fatalf("holder: %q, %v", ready, err)
	}
	name := "gpush-run-agent"
	l.Run(name, podmanlab.Options{HostPID: true, Privileged: true, Binds: []string{dir}, Cmd: []string{"/bin/sleep", "600"}}).WaitReady(0, 20*time.Second)

	inv := filepath.Join(dir, "inv.yaml")
	src := fmt.Sprintf("all:\n  vars: {ansible_connection: containers.podman.podman}\n  hosts:\n    gpu01: {ansible_host: %s, gpush_dev_dir: %s, gpush_nvidia_smi: %s}\n",
		name, dev, smi)
	if err := os.WriteFile(inv, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := gpush(t, "run", "gpu_status.lua", "-i", inv)
	if code != 0 || !strings.Contains(out, "gpu01") {
		t.Fatalf("gpu_status.lua: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	script := filepath.Join(t.TempDir(), "holders.lua")
	if err := os.WriteFile(script, []byte(holdersScript), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = gpush(t, "run", script, "-i", inv)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("gpu01 | INFO holder pid %d ", holder.Process.Pid)) {
		t.Errorf("holders: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}
