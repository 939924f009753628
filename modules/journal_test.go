package modules_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/modulestest"
)

// A signal the helper streamed is in the journal at once, as "signalled";
// the kill's answer then gives its outcome without recording it twice, and
// adds the signals that did not stream.
func TestJournalStreamedSignalsThenAnswer(t *testing.T) {
	h := modulestest.NewHost("gpu01", modulestest.NewGPUHost("gpu01", 2))
	j := h.Stats().Journal()
	id := helper.Identity{PID: 4410, StartTime: 99}
	term := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	kill := term.Add(5 * time.Second)
	j.Record(h, &helper.Snapshot{Holders: []helper.Holder{{Identity: id, Comm: "python3", GPUs: []int{1}}},
		GPUs: []helper.GPU{{Index: 1, MemUsedMiB: 4096}}})
	b, _ := json.Marshal(helper.Progress{Signal: &helper.SignalSent{Identity: id, Comm: "python3", Signal: "TERM", Time: term}})
	modules.FeedProgress(h, b)
	s := j.Snapshot()
	if len(s.Signals) != 1 || s.Signals[0].Outcome != "signalled" || s.Signals[0].GPUs[0] != 1 || !s.Signals[0].Time.Equal(term) {
		t.Fatalf("after the progress line: %+v", s.Signals)
	}
	j.Record(h, &helper.KillResponse{Results: []helper.KillResult{{Identity: id, Comm: "python3", Outcome: helper.OutcomeKilled,
		Signals: []string{"TERM", "KILL"}, SignalTimes: []time.Time{term, kill}}}})
	s = j.Snapshot()
	if len(s.Signals) != 2 || s.Signals[1].Signal != "KILL" || !s.Signals[1].Time.Equal(kill) ||
		s.Signals[0].Outcome != helper.OutcomeKilled || s.Signals[1].Outcome != helper.OutcomeKilled {
		t.Errorf("after the answer: %+v", s.Signals)
	}
	var kinds []string
	for _, e := range h.Events() {
		kinds = append(kinds, e.Kind+":"+e.Message)
	}
	want := []string{
		"kill:signalled pid 4410 (python3) on GPU 1: TERM at 16:00:00.000",
		"kill:signalled pid 4410 (python3) on GPU 1: KILL at 16:00:05.000",
		"exit:pid 4410 (python3) killed by KILL",
	}
	if len(kinds) != len(want) {
		t.Fatalf("events %q, want %q", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Errorf("event %d %q, want %q", i, kinds[i], want[i])
		}
	}
	if g := s.GPUs; len(g) != 1 || g[0].MiB != 4096 {
		t.Errorf("readings %+v", g)
	}
}
