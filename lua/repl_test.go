package lua

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/modulestest"
)

func TestIncomplete(t *testing.T) {
	for _, tc := range []struct {
		code string
		want bool
	}{
		{"1 + 1", false},
		{"x = 1", false},
		{"gpu.mem()", false},
		{"", false},
		{"for i = 1, 3 do", true},
		{"for i = 1, 3 do\n  x = i", true},
		{"for i = 1, 3 do\n  x = i\nend", false},
		{"function f()", true},
		{"local t = {", true},
		{"local t = {\n a = 1,", true},
		{"local t = {\n a = 1,\n}", false},
		{"x = ", true},
		{"f(", true},
		{`s = "abc`, true},
		{"s = [[abc", true},
		{"--[[ a comment", true},
		{"if x then else", true},
		{"return", false},
		// Errors that more input cannot fix are complete: shown at once.
		{"end", false},
		{"x = = 1", false},
		{"1 +* 2", false},
		{"for i = 1, 3 do x = = 1", false},
	} {
		if got := Incomplete(tc.code); got != tc.want {
			t.Errorf("Incomplete(%q) = %v, want %v", tc.code, got, tc.want)
		}
	}
}

func TestFormatValues(t *testing.T) {
	for _, tc := range []struct {
		vs   []any
		want string
	}{
		{nil, ""},
		{[]any{nil}, "nil"},
		{[]any{float64(4)}, "4"},
		{[]any{float64(-3)}, "-3"},
		{[]any{1.5}, "1.5"},
		{[]any{1e300}, "1e+300"},
		{[]any{"a b"}, "a b"},
		{[]any{true, false}, "true\tfalse"},
		{[]any{map[string]any{"b": float64(1), "a": "x"}}, `{"a":"x","b":1}`},
		{[]any{[]any{float64(1), "two"}}, `[1,"two"]`},
		{[]any{float64(1), nil, "x"}, "1\tnil\tx"},
	} {
		if got := FormatValues(tc.vs); got != tc.want {
			t.Errorf("FormatValues(%#v) = %q, want %q", tc.vs, got, tc.want)
		}
	}
}

func TestGather(t *testing.T) {
	boom := errors.New("boom")
	rs := []EvalResult{
		{Host: "a", Values: []any{float64(4)}},
		{Host: "b", Err: boom},
		{Host: "c", Values: []any{float64(4)}},
		{Host: "d"}, // a statement: nothing to show
		{Host: "e", Values: []any{"error: boom"}},
		{Host: "f", Err: boom},
	}
	got := Gather(rs)
	want := []Group{
		{Hosts: []string{"a", "c"}, Text: "4"},
		{Hosts: []string{"b", "f"}, Text: "error: boom", Err: true},
		// A value that reads like an error is still a value.
		{Hosts: []string{"e"}, Text: "error: boom"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Gather:\n got %+v\nwant %+v", got, want)
	}
}

func TestFleet(t *testing.T) {
	f, hosts := newFleet("gpu01", "gpu02", "down01", "gpu03")
	f.down["down01"] = errors.New("dial down01.lab:22: connection refused")
	var events []Event
	fl, bad := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial, Forks: 2, OnEvent: func(e Event) {
		f.mu.Lock()
		defer f.mu.Unlock()
		events = append(events, e)
	}})
	defer fl.Close()
	if len(bad) != 1 || bad[0].Host != "down01" || bad[0].Status != StatusUnreachable || !strings.Contains(bad[0].Error, "connection refused") {
		t.Fatalf("unreachable: %+v, want down01 unreachable naming the cause", bad)
	}
	if got := fl.Hosts(); !reflect.DeepEqual(got, []string{"gpu01", "gpu02", "gpu03"}) {
		t.Fatalf("hosts %v", got)
	}
	// Dialled up front, before any evaluation.
	for _, h := range []string{"gpu01", "gpu02", "gpu03"} {
		if !f.dialed[h] {
			t.Errorf("%s not dialled by OpenFleet", h)
		}
	}

	texts := func(rs []EvalResult) string {
		var parts []string
		for _, r := range rs {
			parts = append(parts, r.Host+"="+r.Text())
		}
		return strings.Join(parts, " ")
	}
	// Expressions show their value, statements nothing, globals persist.
	for _, tc := range []struct{ code, want string }{
		{"1 + 1", "gpu01=2 gpu02=2 gpu03=2"},
		{"n = #gpu.mem()", "gpu01= gpu02= gpu03="},
		{"n, host.name", "gpu01=2\tgpu01 gpu02=2\tgpu02 gpu03=2\tgpu03"},
		{"for i = 1, 3 do\n  n = n + i\nend\nreturn n", "gpu01=8 gpu02=8 gpu03=8"},
		{"error('boom')", "gpu01=error: <string>:1: boom gpu02=error: <string>:1: boom gpu03=error: <string>:1: boom"},
		{"x = = 1", ""},
	} {
		rs := fl.Eval(t.Context(), nil, tc.code)
		got := texts(rs)
		if tc.want == "" {
			for _, r := range rs {
				if r.Err == nil || !strings.Contains(r.Err.Error(), "near '='") || strings.HasPrefix(r.Err.Error(), r.Host) {
					t.Errorf("%q on %s: %v, want a syntax error without the host in front", tc.code, r.Host, r.Err)
				}
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.code, got, tc.want)
		}
	}
	// A subset, in the order asked.
	rs := fl.Eval(t.Context(), []string{"gpu03", "gpu01"}, "host.name")
	if got := texts(rs); got != "gpu03=gpu03 gpu01=gpu01" {
		t.Errorf("subset: %s", got)
	}
	if rs := fl.Eval(t.Context(), []string{"down01"}, "1"); rs[0].Err == nil || !strings.Contains(rs[0].Err.Error(), "not open") {
		t.Errorf("unopened host: %+v", rs[0])
	}
	// Gathered: equal outputs fold, distinct ones stay apart.
	g := Gather(fl.Eval(t.Context(), nil, "host.name == 'gpu02' and 'odd' or 'even'"))
	if len(g) != 2 || !reflect.DeepEqual(g[0].Hosts, []string{"gpu01", "gpu03"}) || g[0].Text != "even" || g[1].Text != "odd" {
		t.Errorf("gather: %+v", g)
	}
	// print goes to OnEvent as a print line of the host (the REPL shows it
	// untagged), log.info as a log line.
	fl.Eval(t.Context(), []string{"gpu02"}, "print('hello', 42); log.info('noted')")
	f.mu.Lock()
	var logged []string
	for _, e := range events {
		if e.Kind == EventPrint || e.Kind == modules.EventLog {
			logged = append(logged, e.Kind+":"+e.Host+":"+e.Message)
		}
	}
	f.mu.Unlock()
	if !reflect.DeepEqual(logged, []string{"print:gpu02:hello\t42", "log:gpu02:noted"}) {
		t.Errorf("events %q", logged)
	}
}

// Cancelling the context interrupts every host, and the sessions stay
// usable for the next input.
func TestFleetInterrupt(t *testing.T) {
	f, hosts := newFleet("gpu01", "gpu02")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan string, 2)
	fl, bad := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial, OnEvent: func(e Event) {
		if e.Kind == EventPrint && e.Message == "sleeping" {
			started <- e.Host
		}
	}})
	defer fl.Close()
	if len(bad) != 0 {
		t.Fatalf("unreachable: %+v", bad)
	}
	go func() {
		<-started
		<-started
		cancel()
	}()
	rs := fl.Eval(ctx, nil, "print('sleeping'); sleep('1h'); return 1")
	for _, r := range rs {
		if r.Err == nil || !errors.Is(r.Err, context.Canceled) || r.Err.Error() != "interrupted" {
			t.Errorf("%s: %v, want interrupted (context.Canceled)", r.Host, r.Err)
		}
	}
	rs = fl.Eval(t.Context(), nil, "'still here'")
	for _, r := range rs {
		if r.Text() != "still here" {
			t.Errorf("%s after interrupt: %q", r.Host, r.Text())
		}
	}
	// An already cancelled context runs nothing.
	rs = fl.Eval(ctx, nil, "print('sleeping'); return 1")
	for _, r := range rs {
		if r.Err == nil {
			t.Errorf("%s: ran with a cancelled context", r.Host)
		}
	}
}

func TestOpenFleetBadVar(t *testing.T) {
	f, hosts := newFleet("gpu01", "gpu02")
	hosts[1].Vars["gpush_dev_dir"] = 7
	fl, bad := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial})
	defer fl.Close()
	if len(bad) != 1 || bad[0].Status != StatusFailed || !strings.Contains(bad[0].Error, "gpush_dev_dir") {
		t.Errorf("bad var: %+v", bad)
	}
	if f.dialed["gpu02"] {
		t.Error("a host with a bad var was dialled")
	}
}

func TestComplete(t *testing.T) {
	f, hosts := newFleet("gpu01")
	fl, _ := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial})
	defer fl.Close()
	fl.Eval(t.Context(), nil, "gpx_mine = 1")
	got := fl.Complete("gp")
	if !reflect.DeepEqual(got, []string{"gpu", "gpx_mine"}) {
		t.Errorf("Complete(gp) = %q", got)
	}
	got = fl.Complete("gpu.me")
	if !reflect.DeepEqual(got, []string{"gpu.mem"}) {
		t.Errorf("Complete(gpu.me) = %q", got)
	}
	if got := fl.Complete("nosuch.x"); got != nil {
		t.Errorf("Complete(nosuch.x) = %q", got)
	}
	if got := fmt.Sprint(fl.Complete("string.up")); got != "[string.upper]" {
		t.Errorf("Complete(string.up) = %s", got)
	}
}

// Ctrl-C keeps what finished: a host that answered before the cancel keeps
// its value, the one still running reads "interrupted".
func TestFleetInterruptKeepsFinished(t *testing.T) {
	f, hosts := newFleet("gpu01", "gpu02")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fl, _ := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial})
	defer fl.Close()
	var answered []string
	rs := fl.EvalEach(ctx, nil, "if host.name == 'gpu02' then sleep('1h') end; return #gpu.mem()", func(r EvalResult) {
		answered = append(answered, r.Host) // one host answers before the cancel
		cancel()
	})
	if rs[0].Err != nil || FormatValues(rs[0].Values) != "2" {
		t.Errorf("gpu01 finished before the interrupt: %+v, want its value 2", rs[0])
	}
	var intr *Interrupted
	if !errors.As(rs[1].Err, &intr) || rs[1].Err.Error() != "interrupted" || strings.Contains(rs[1].Err.Error(), "context") {
		t.Errorf("gpu02: %v, want exactly \"interrupted\"", rs[1].Err)
	}
	if !reflect.DeepEqual(answered, []string{"gpu01", "gpu02"}) {
		t.Errorf("EvalEach reported %v, want gpu01 then gpu02", answered)
	}
}

// .check on|off: the check global and what gpu.kill does follow the switch.
func TestFleetSetCheck(t *testing.T) {
	f, hosts := newFleet("gpu01")
	fl, _ := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial})
	defer fl.Close()
	kill := "local r = gpu.kill(gpu.holders()); return check, r.rows[1].outcome"
	f.conns["gpu01"].Model.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Comm: "python"}, MemByGPU: map[int]int64{0: 1024}})
	fl.SetCheck(true)
	if !fl.Check() {
		t.Error("Check() false after SetCheck(true)")
	}
	rs := fl.Eval(t.Context(), nil, kill)
	if got := rs[0].Text(); got != "true\twould-kill" {
		t.Errorf("check on: %q, want true and would-kill", got)
	}
	fl.SetCheck(false)
	rs = fl.Eval(t.Context(), nil, kill)
	if got := rs[0].Text(); got != "false\texited" {
		t.Errorf("check off: %q, want false and exited", got)
	}
}

// A host whose connection dies is dropped as lost; Reconnect opens it again
// (a fresh state) in its inventory place.
func TestFleetLostReconnect(t *testing.T) {
	f, hosts := newFleet("gpu01", "gpu02", "gpu03")
	fl, _ := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial})
	defer fl.Close()
	fl.Eval(t.Context(), nil, "x = 'kept'")
	f.conns["gpu02"].Lose()
	rs := fl.Eval(t.Context(), nil, "#gpu.mem()")
	if rs[1].Err == nil {
		t.Fatalf("gpu02 answered on a lost connection: %+v", rs[1])
	}
	lost := fl.DropLost()
	if len(lost) != 1 || lost[0].Host != "gpu02" || lost[0].Status != StatusUnreachable || !strings.Contains(lost[0].Error, "connection lost") {
		t.Fatalf("DropLost: %+v", lost)
	}
	if got := fl.Hosts(); !reflect.DeepEqual(got, []string{"gpu01", "gpu03"}) {
		t.Errorf("after the loss: %v", got)
	}
	if again := fl.DropLost(); len(again) != 0 {
		t.Errorf("DropLost twice: %+v", again)
	}
	// Still down: reported again, not added.
	f.down["gpu02"] = errors.New("connection refused")
	if still := fl.Reconnect(t.Context(), hosts); len(still) != 1 || still[0].Host != "gpu02" {
		t.Errorf("Reconnect while down: %+v", still)
	}
	delete(f.down, "gpu02")
	f.conns["gpu02"] = modulestest.NewConn("gpu02", modulestest.NewGPUHost("gpu02", 2))
	fl.SetCheck(true)
	if still := fl.Reconnect(t.Context(), hosts); len(still) != 0 {
		t.Fatalf("Reconnect: %+v", still)
	}
	if got := fl.Hosts(); !reflect.DeepEqual(got, []string{"gpu01", "gpu02", "gpu03"}) {
		t.Errorf("after Reconnect: %v, want inventory order", got)
	}
	got := Gather(fl.Eval(t.Context(), nil, "x, check, #gpu.mem()"))
	want := []Group{{Hosts: []string{"gpu01", "gpu03"}, Text: "kept\ttrue\t2"}, {Hosts: []string{"gpu02"}, Text: "nil\ttrue\t2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after Reconnect:\n got %+v\nwant %+v", got, want)
	}
}

// A host stuck in a builtin after Ctrl-C is abandoned once the grace is
// over: the others' results stand, the stuck session leaves the fleet and
// is closed when the builtin returns, and Reconnect brings the host back.
func TestFleetAbandonStuck(t *testing.T) {
	entered, release, finished := armBlocker()
	f, hosts := newFleet("fine", "stuck")
	fl, _ := OpenFleet(t.Context(), hosts, "", Options{Dial: f.dial, StopGrace: 50 * time.Millisecond})
	defer fl.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fineDone := make(chan struct{})
	go func() { <-entered; <-fineDone; cancel() }()
	rs := fl.EvalEach(ctx, nil, "if host.name == 'stuck' then testblock.block() end; return host.name", func(r EvalResult) {
		if r.Host == "fine" {
			close(fineDone)
		}
	})
	if rs[0].Err != nil || FormatValues(rs[0].Values) != "fine" {
		t.Errorf("fine: %+v", rs[0])
	}
	if rs[1].Err == nil || rs[1].Err.Error() != "interrupted; did not stop: abandoned" {
		t.Errorf("stuck: %+v", rs[1])
	}
	lost := fl.DropLost()
	if len(lost) != 1 || lost[0].Host != "stuck" || lost[0].Status != StatusFailed || !strings.Contains(lost[0].Error, "abandoned") {
		t.Errorf("DropLost: %+v", lost)
	}
	if got := fl.Hosts(); !reflect.DeepEqual(got, []string{"fine"}) {
		t.Errorf("hosts %v", got)
	}
	close(release)
	<-finished
	f.conns["stuck"] = modulestest.NewConn("stuck", modulestest.NewGPUHost("stuck", 2))
	if still := fl.Reconnect(t.Context(), hosts); len(still) != 0 {
		t.Fatalf("Reconnect: %+v", still)
	}
	if got := Gather(fl.Eval(t.Context(), nil, "host.name ~= nil")); len(got) != 1 || len(got[0].Hosts) != 2 || got[0].Text != "true" {
		t.Errorf("after Reconnect: %+v", got)
	}
}
