package gpu_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/gpu"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/remote"
)

// A helper that ignores the script's timeout (a host that never answers)
// is cut off at the request's budget plus the margin: gpu.wait_free with
// timeout 0.1s raises, naming the helper and the limit, instead of
// waiting for the host's deadline.
func TestWaitFreeCutOffAtBudget(t *testing.T) {
	old := modules.HelperMargin
	modules.HelperMargin = 200 * time.Millisecond
	t.Cleanup(func() { modules.HelperMargin = old })
	h := newHost(t)
	h.FakeConn.Latency = time.Hour
	L := modulestest.NewState(t, h, gpu.Module)
	defer L.Close()
	err := L.DoString(`gpu.wait_free{timeout="0.1s"}`)
	budget := helper.WaitFreeRequest{Timeout: helper.Duration(100 * time.Millisecond)}.Budget()
	want := "helper wait-free gave no answer within " + (budget + modules.HelperMargin).String()
	if err == nil || !strings.Contains(err.Error(), "gpu.wait_free: gpu01: "+want) {
		t.Fatalf("err %v, want %q", err, want)
	}
	calls := h.FakeConn.Calls(helper.VerbWaitFree)
	if len(calls) != 1 || calls[0].Request.(helper.WaitFreeRequest).Timeout.D() != 100*time.Millisecond {
		t.Errorf("calls %+v", calls)
	}
}

// Starting the helper (a cold host's warm check and upload, queued behind
// other hosts' uploads) is bounded apart from the request: a setup longer
// than the request's budget and margin does not fail the call, and a setup
// past HelperSetup fails it, saying so.
func TestHelperSetupIsNotTheRequestsTime(t *testing.T) {
	oldMargin, oldSetup := modules.HelperMargin, modules.HelperSetup
	modules.HelperMargin = 200 * time.Millisecond
	t.Cleanup(func() { modules.HelperMargin, modules.HelperSetup = oldMargin, oldSetup })

	h := newHost(t)
	h.FakeConn.Setup = 600 * time.Millisecond // > 0.1s + 0.2s
	L := modulestest.NewState(t, h, gpu.Module)
	defer L.Close()
	if err := L.DoString(`gpu.wait_free{timeout="0.1s"}`); err != nil {
		t.Fatalf("a slow setup failed the call: %v", err)
	}

	modules.HelperSetup = 100 * time.Millisecond
	h = newHost(t)
	h.FakeConn.Setup = time.Hour
	L2 := modulestest.NewState(t, h, gpu.Module)
	defer L2.Close()
	err := L2.DoString(`gpu.wait_free{timeout="0.1s"}`)
	want := "gpu01: helper wait-free: starting the helper (its warm check; on a cold host, the upload) took over 100ms"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want %q", err, want)
	}
	if strings.Count(err.Error(), "gpu01: helper wait-free") != 1 {
		t.Errorf("the host and verb are named more than once: %v", err)
	}
	if calls := h.FakeConn.Calls(helper.VerbWaitFree); len(calls) != 0 {
		t.Errorf("the request went out after its setup failed: %+v", calls)
	}
}

// A helper start that fails by itself, well within HelperSetup (a noexec
// folder, a folder the checks refuse), says only why: the start's own
// context ends as the call returns, which is no deadline passing.
func TestHelperStartFailureIsNotATimeout(t *testing.T) {
	h := newHost(t)
	h.FakeConn.Setup = 20 * time.Millisecond
	why := "gpu01: helper wait-free: cannot execute /root/.cache/gpush/gpush-helper-x although it is mode 0755: " +
		"its file system is probably mounted noexec; set gpush_remote_dir to a folder on a file system that allows execution"
	h.FakeConn.SetupErr = errors.New(why)
	L := modulestest.NewState(t, h, gpu.Module)
	defer L.Close()
	err := L.DoString(`gpu.wait_free{timeout="0.1s"}`)
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Fatalf("err %v, want %q", err, why)
	}
	if strings.Contains(err.Error(), "took over") || strings.Contains(err.Error(), "deadline") {
		t.Errorf("a start that failed at once reads as a timeout: %v", err)
	}
}

// A dial error names the host itself: the call's error does not name it twice.
func TestDialErrorNamesTheHostOnce(t *testing.T) {
	h := newHost(t)
	h.DialErr = &remote.DialError{Host: "gpu01", Addr: "10.0.0.1:22", Stage: remote.StageConnect, Err: errors.New("connection refused")}
	L := modulestest.NewState(t, h, gpu.Module)
	defer L.Close()
	err := L.DoString(`gpu.snapshot()`)
	if err == nil || !strings.Contains(err.Error(), "gpu.snapshot: gpu01 (10.0.0.1:22): cannot connect (TCP connect): connection refused") ||
		strings.Count(err.Error(), "gpu01") != 1 {
		t.Fatalf("err %v", err)
	}
}
