package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
)

// Each kind of restarter on its own host (a supervisor slower than the
// settle, a growing back-off, the kubelet stand-in, a shell loop): a free
// never says "freed" while one lives, and names each with the command that
// stops it; asked to, gpush stops what it may stop and the GPUs stay free,
// but never deletes a pod.
func TestRestartersFreeGPUs(t *testing.T) {
	l := startLab(t, lab.Options{Hosts: 4, Scenario: lab.ScenarioRestarters, RestartScale: 0.2})
	sup := map[string]lab.Proc{}
	for _, h := range []string{"lab01", "lab02", "lab03", "lab04"} {
		sup[h] = l.Find(h, lab.RoleSupervisor)[0]
	}
	// A settle shorter than the restart delay: free now, never "freed",
	// and the recap counts it apart.
	r := gpush(t, l, "run", "free_gpus.lua", "-l", "lab01", "-e", "grace=1s", "-e", "settle=500ms")
	if r.code != 2 {
		t.Errorf("exit %d, want 2", r.code)
	}
	requireContains(t, r.stdout, "free now, but pid", "freed 0/4 GPUs, 1 free with a restarter alive")
	waitAlive(t, l, "lab01", lab.RoleRespawner, 15*time.Second)

	r = gpush(t, l, "run", "free_gpus.lua", "-e", "grace=1s", "--json")
	if r.code != 2 {
		t.Errorf("exit %d, want 2: %s", r.code, r.stdout)
	}
	for _, h := range []string{"lab01", "lab02", "lab04"} {
		requireContains(t, hostLine(r.stdout, h), fmt.Sprintf("pid %d (", sup[h].PID), fmt.Sprintf("kill %d", sup[h].PID), `"status":"failed"`)
	}
	requireContains(t, hostLine(r.stdout, "lab03"), "pod ml/vllm-0", "kubectl delete pod -n ml vllm-0", `"status":"failed"`)
	if strings.Contains(r.stdout, `"freed":true,"gpu":0`) {
		t.Errorf("a GPU 0 was freed with its restarter alive: %s", r.stdout)
	}

	r = gpush(t, l, "run", "free_gpus.lua", "-e", "grace=1s", "-e", "stop_restarters=true", "--json")
	if r.code != 2 {
		t.Errorf("exit %d, want 2 (the pod is never deleted)", r.code)
	}
	requireContains(t, hostLine(r.stdout, "lab03"), `"status":"failed"`, "did not stop pod ml/vllm-0", "kubectl delete pod -n ml vllm-0")
	for _, h := range []string{"lab01", "lab02", "lab04"} {
		requireContains(t, hostLine(r.stdout, h), `"status":"ok"`, `"freed":true,"gpu":0`, fmt.Sprintf("stopped pid %d (", sup[h].PID))
		if lab.Alive(sup[h]) {
			t.Errorf("%s: the supervisor %d is alive after stop_restarters", h, sup[h].PID)
		}
	}
	if !lab.Alive(sup["lab03"]) {
		t.Error("the kubelet stand-in must be left alone")
	}
	// Still free 20 s later: nothing came back.
	time.Sleep(20 * time.Second)
	for _, h := range []string{"lab01", "lab02", "lab04"} {
		if n, live := alive(l, h, lab.RoleRespawner); live != 0 {
			t.Errorf("%s: %d of %d workers alive 20 s after the free", h, live, n)
		}
		for _, role := range []string{lab.RolePersistenced, lab.RoleUnrelated} {
			if n, live := alive(l, h, role); n == 0 || live != n {
				t.Errorf("%s: %s must be left alone", h, role)
			}
		}
	}

	// Accepted: the kubelet's worker is freed and the row says who may restart it.
	r = gpush(t, l, "run", "free_gpus.lua", "-l", "lab03", "-e", "grace=1s", "-e", "accept_restarters=true", "-e", "settle=1s")
	if r.code != 0 {
		t.Errorf("exit %d, want 0 with accept_restarters: %s", r.code, r.stdout)
	}
	requireContains(t, r.stdout, "may restart it (accepted)")
}

// hostLine is the JSON line of host in out.
func hostLine(out, host string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"host":"`+host+`"`) {
			return line
		}
	}
	return ""
}

// waitAlive waits until one of host's processes of role is alive.
func waitAlive(t *testing.T, l *lab.Lab, host, role string, timeout time.Duration) {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, live := alive(l, host, role); live > 0 {
			return
		}
	}
	t.Fatalf("%s: no %s alive after %s", host, role, timeout)
}
