package remote

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
)

// procStart is field 22 of /proc/PID/stat: the start time, the identity.
func procStart(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A kill over serve reports each signal as it is sent, before its answer;
// cancelled mid-grace, the call still reads the helper's answer to the
// cancel (what it sent) and says so: Answered.
func TestServeKillStreamsSignalsAndAnswersTheCancel(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	c := e.dial(t)
	if _, err := c.DeployHelper(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A handler, not SIG_IGN: TERM is taken and the process carries on,
	// so the kill waits out its grace.
	p := exec.Command("sh", "-c", `trap 'echo term' TERM; echo ready; while :; do sleep 0.05; done`)
	out, _ := p.StdoutPipe()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	id := helper.Identity{PID: p.Process.Pid, StartTime: procStart(t, p.Process.Pid)}
	var mu sync.Mutex
	var progress []helper.Progress
	got := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(WithProgress(context.Background(), func(b json.RawMessage) {
		var pr helper.Progress
		if json.Unmarshal(b, &pr) == nil {
			mu.Lock()
			progress = append(progress, pr)
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
		}
	}))
	defer cancel()
	errc := make(chan error, 1)
	var resp helper.KillResponse
	go func() {
		errc <- c.Helper(ctx, helper.VerbKill, helper.KillRequest{Targets: []helper.Identity{id}, Grace: helper.Duration(time.Minute)}, &resp)
	}()
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no progress line for the TERM")
	}
	mu.Lock()
	first := progress[0]
	mu.Unlock()
	if first.Signal == nil || first.Signal.PID != id.PID || first.Signal.Signal != "TERM" || first.Signal.Time.IsZero() {
		t.Fatalf("progress %+v: want pid %d's TERM with its time", first, id.PID)
	}
	cancel()
	err := <-errc
	if !Answered(err) {
		t.Fatalf("want the cancel's answer read, got %v", err)
	}
	if len(resp.Results) != 1 || strings.Join(resp.Results[0].Signals, ",") != "TERM" || len(resp.Results[0].SignalTimes) != 1 ||
		!resp.Results[0].SignalTimes[0].Equal(first.Signal.Time) {
		t.Errorf("answer %+v: want the TERM, at the time the progress said", resp.Results)
	}
}
