package modules_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/pkg/sftp"
	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/remote"
)

type marked struct{ u bool }

func (m marked) Error() string     { return "marked" }
func (m marked) Unreachable() bool { return m.u }

func TestIsConnError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("helper exited 1"), false},
		{fmt.Errorf("snapshot: %w", remote.ErrConnectionLost), true},
		{&remote.DialError{Host: "h", Addr: "h:22", Stage: remote.StageConnect, Err: syscall.ECONNREFUSED}, true},
		{&remote.HelperError{Host: "h", Verb: "kill", ExitCode: 2, Message: "bad request"}, false},
		{fmt.Errorf("x: %w", io.EOF), true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		// The SFTP client's word for a link that died mid-upload.
		{fmt.Errorf("h: upload helper to /x: write /x.tmp: %w", sftp.ErrSSHFxConnectionLost), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{fmt.Errorf("h: helper snapshot: decode response: %w", errors.New("unexpected end of JSON input")), false},
		{fmt.Errorf("x: %w", marked{true}), true},
		{marked{false}, false},
		{fmt.Errorf("call: %w", context.Canceled), false},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), false},
	} {
		if got := modules.IsConnError(tc.err); got != tc.want {
			t.Errorf("IsConnError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestStats(t *testing.T) {
	var s modules.Stats
	if snap := s.Snapshot(); len(snap.GPUs) != 0 || snap.Freed != nil {
		t.Fatalf("zero stats: %+v", snap)
	}
	s.ObserveGPUs([]helper.GPU{{Index: 0, MemUsedMiB: 26018, MemTotalMiB: 143771}, {Index: 1, MemUsedMiB: 4},
		{Index: 2, MemUsedMiB: -1}}, nil)
	s.ObserveGPUs([]helper.GPU{{Index: 1, MemUsedMiB: 4}}, map[int]int64{1: 4})
	s.ObserveGPUs([]helper.GPU{{Index: 0, MemUsedMiB: 0, MemTotalMiB: 143771}, {Index: 2, MemUsedMiB: 7}}, nil)
	s.AddKills([]helper.KillResult{{Outcome: helper.OutcomeKilled}, {Outcome: helper.OutcomeExited},
		{Outcome: helper.OutcomeExited}, {Outcome: helper.OutcomeSurvived}, {Outcome: helper.OutcomeWould},
		{Outcome: helper.OutcomeSkipped}})
	snap := s.Snapshot()
	if got := fmt.Sprint(snap.Freed); got != "[0]" {
		t.Errorf("freed %s, want [0] (GPU 1 was idle at its baseline, GPU 2 unknown at first)", got)
	}
	g := snap.GPUs
	if len(g) != 3 || g[0].BeforeMiB != 26018 || g[0].AfterMiB != 0 || g[1].ThresholdMiB != 4 || g[2].BeforeMiB != 7 {
		t.Errorf("gpus %+v", g)
	}
	if snap.Kills != (modules.KillStats{Exited: 2, Killed: 1, Survived: 1, Skipped: 1, Would: 1}) {
		t.Errorf("kills %+v", snap.Kills)
	}
}

func TestRegistry(t *testing.T) {
	m := modules.Module{Name: "test_only", Loader: func(L *glua.LState, h modules.Host) int { return 0 }}
	modules.Register(m)
	// The registry is process-wide: leave it as found, so -count=N reruns.
	t.Cleanup(func() { delete(modules.Registry, m.Name) })
	if _, ok := modules.Lookup("test_only"); !ok {
		t.Fatal("registered module not found")
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a name twice did not panic")
		}
	}()
	modules.Register(m)
}
