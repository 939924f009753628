package e2e

import (
	"testing"

	"github.com/gpush/gpush/lab"
)

// free_gpus.lua does what was asked and no more, on the leftovers lab
// (vllm-embed.service on GPU 0, sglang-qwen.service on GPU 3, both in the
// inventory's services): a unit list with a typo stops nothing, -e
// services=[] stops no unit, and -e gpus=0 stops only the unit on GPU 0.
func TestFreeGPUsWhatWasAsked(t *testing.T) {
	l := startLab(t, lab.Options{Hosts: 2, Scenario: lab.ScenarioLeftovers})
	if l.NoServices != "" {
		t.Skipf("the lab runs no services here: %s", l.NoServices)
	}
	h := l.Hosts[0]
	other := l.Hosts[1]
	units := func(t *testing.T, host lab.Host, want string) {
		t.Helper()
		if got := systemctl(t, host, "is-active", lab.UnitVLLM, lab.UnitSGLang); got != want {
			t.Errorf("%s: units %s %s are %q, want %q", host.Name, lab.UnitVLLM, lab.UnitSGLang, got, want)
		}
	}
	liveOf := func(role string) int {
		_, live := alive(l, h.Name, role)
		return live
	}

	t.Run("a typo in the list stops nothing", func(t *testing.T) {
		for _, check := range []bool{true, false} {
			args := []string{"run", "free_gpus.lua", "--limit", h.Name, "-e", "services=vllm-embed.service,vllm-embd.service,sglang-qwen.service"}
			if check {
				args = append(args, "--check")
			}
			r := gpush(t, l, args...)
			if r.code != 2 {
				t.Errorf("check %v: exit %d, want 2", check, r.code)
			}
			requireContains(t, r.stdout, "stop: unit vllm-embd.service not found; no unit was stopped")
			units(t, h, "active\nactive\n")
			if liveOf(lab.RoleOrphan) != 1 {
				t.Error("nothing may be killed after a failed stop")
			}
		}
	})

	t.Run("services=[] stops no unit", func(t *testing.T) {
		r := gpush(t, l, "run", "free_gpus.lua", "--limit", h.Name, "-e", "services=[]", "-e", "gpus=1", "-e", "grace=1s")
		if r.code != 0 {
			t.Errorf("exit %d, want 0", r.code)
		}
		units(t, h, "active\nactive\n")
		if liveOf(lab.RoleOrphan) != 0 {
			t.Error("GPU 1's orphan must be freed")
		}
		requireRowHas(t, r.stdout, h.Name, 1, "1 stage 1 true free 6144 0")
	})

	t.Run("gpus=0 stops only the unit on GPU 0", func(t *testing.T) {
		r := gpush(t, l, "run", "free_gpus.lua", "--limit", h.Name, "-e", "gpus=0", "-e", "grace=1s")
		if r.code != 0 {
			t.Errorf("exit %d, want 0", r.code)
		}
		units(t, h, "inactive\nactive\n")
		units(t, other, "active\nactive\n")
		requireContains(t, r.stdout, "stopped vllm-embed.service", "not stopping sglang-qwen.service: holds none of GPU 0")
		requireRowHas(t, r.stdout, h.Name, 0, "0 by-stop true free 10240 0")
		if n, live := alive(l, h.Name, lab.RoleServiceChild); n != 1 || live != 1 {
			t.Errorf("sglang-qwen.service's worker (GPU 3): %d of %d alive, want it left alone", live, n)
		}
		if liveOf(lab.RoleTermIgnorer) != 1 {
			t.Error("GPU 2's holder must be left alone")
		}
	})
}
