package gpu

import (
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
)

// A reason naming what brought a worker back ends with what stops it: the
// option when the run did not set it, what its stop did when it did.
func TestWithRestarterFix(t *testing.T) {
	sup := helper.Manager{Kind: helper.ManagerProcess, Identity: helper.Identity{PID: 633}, Comm: "python3", Restarts: helper.RestartsMaybe}
	pod := helper.Manager{Kind: helper.ManagerPod, Namespace: "ml", Pod: "vllm-0", PodUID: "u1", Restarts: helper.RestartsYes}
	unit := helper.Manager{Kind: helper.ManagerUnit, Unit: "trainer.service", Restart: "always", Restarts: helper.RestartsYes}
	const back = "taken again after the kill: held by pid 700"
	for _, tc := range []struct {
		name    string
		o       freeOpts
		stops   []helper.ManagerResult
		ms      []helper.Manager
		freeNow bool
		want    string
	}{
		{"not set", freeOpts{}, nil, []helper.Manager{sup}, false, back + " (stop_restarters=true stops it before the kill)"},
		{"not set, two", freeOpts{}, nil, []helper.Manager{sup, unit}, false, back + " (stop_restarters=true stops them before the kill)"},
		{"free now", freeOpts{}, nil, []helper.Manager{sup}, true,
			back + " (stop_restarters=true stops it before the kill; accept_restarters=true accepts it)"},
		{"set, pod refused", freeOpts{stopRestarters: true},
			[]helper.ManagerResult{{Manager: pod, Outcome: helper.StopRefused, Reason: "gpush never deletes Kubernetes objects"}},
			[]helper.Manager{pod}, false,
			back + " (stop_restarters=true did not stop " + helper.ManagerLabel(pod) + " (refused: gpush never deletes Kubernetes objects))"},
		{"set, found later", freeOpts{stopRestarters: true}, nil, []helper.Manager{unit}, false,
			back + " (stop_restarters=true did not reach " + helper.ManagerLabel(unit) + " (found only after the stops))"},
		{"set, stopped", freeOpts{stopRestarters: true}, []helper.ManagerResult{{Manager: sup, Outcome: helper.StopStopped}},
			[]helper.Manager{sup}, false, back},
		{"none named", freeOpts{}, nil, nil, false, back},
	} {
		r := &freeRun{o: tc.o, stops: tc.stops}
		got := r.withRestarterFix(back, tc.ms, tc.freeNow)
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
		if again := r.withRestarterFix(got, tc.ms, tc.freeNow); again != got {
			t.Errorf("%s: named twice: %q", tc.name, again)
		}
	}
	if !strings.Contains(helper.ManagerLabel(pod), "vllm-0") {
		t.Errorf("pod label %q", helper.ManagerLabel(pod))
	}
}
