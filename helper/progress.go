package helper

import (
	"context"
	"time"
)

// Progress is what a long request reports while it runs, before its
// response: in serve mode each is a line {"id":N,"progress":{...}} ahead
// of the reply, so that the controller knows what was done the moment it
// is done (a kill's TERM, 60 s before its grace ends), and keeps it when
// the request never answers (Ctrl-C, a connection lost).
type Progress struct {
	// Signal: a signal just sent to a process.
	Signal *SignalSent `json:"signal,omitempty"`
	// Reading: a wait-free poll's reading of the chosen GPUs (sent when
	// it changed, or at most once a second while it does not).
	Reading *Sample `json:"reading,omitempty"`
}

// SignalSent is one signal sent by a kill.
type SignalSent struct {
	Identity
	Comm   string    `json:"comm,omitempty"`
	Signal string    `json:"signal"`
	Time   time.Time `json:"time"`
	Via    string    `json:"via,omitempty"`
}

type progressKey struct{}

// WithProgress makes the requests run under ctx report their progress to
// fn (from the request's goroutine; fn must not block for long).
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// reportProgress hands p to ctx's progress function, if any.
func reportProgress(ctx context.Context, p Progress) {
	if fn, ok := ctx.Value(progressKey{}).(func(Progress)); ok && fn != nil {
		fn(p)
	}
}

// reportSignal reports the signal just sent to r (its last).
func reportSignal(ctx context.Context, r *KillResult) {
	n := len(r.Signals)
	if n == 0 || n != len(r.SignalTimes) {
		return
	}
	reportProgress(ctx, Progress{Signal: &SignalSent{Identity: r.Identity, Comm: r.Comm, Signal: r.Signals[n-1], Time: r.SignalTimes[n-1], Via: r.Via}})
}
