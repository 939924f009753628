package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpush/gpush/inventory"
)

// manualClock moves only when told.
type manualClock struct{ t time.Time }

func (c *manualClock) now() time.Time      { return c.t }
func (c *manualClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
}
func lastDrawn(b *bytes.Buffer) (string, bool) { return lastSegment(b.String()) }

// lastSegment is what the last redraw left on the line ("" after an erase).
func lastSegment(s string) (string, bool) {
	i := strings.LastIndex(s, "\r\x1b[K")
	if i < 0 {
		return "", false
	}
	return s[i+len("\r\x1b[K"):], true
}

func labHosts(n int) []string {
	var hs []string
	for i := 1; i <= n; i++ {
		hs = append(hs, fmt.Sprintf("gpu%03d", i))
	}
	return hs
}

func TestProgressNamesWaitingHosts(t *testing.T) {
	clk := newManualClock()
	var errb bytes.Buffer
	width := 100
	hosts := labHosts(300)
	p := New(Options{Err: &errb, Progress: true, ProgressAfter: ProgressDelay, Total: len(hosts), Hosts: hosts,
		Width: func() int { return width }, Fold: inventory.FoldNodeSet, Now: clk.now})

	// Not before ProgressDelay, whatever ticks.
	clk.add(ProgressDelay / 2)
	p.Tick()
	if errb.Len() != 0 {
		t.Fatalf("progress before %v: %q", ProgressDelay, errb.String())
	}
	// On the first tick after it, without any host event.
	clk.add(ProgressDelay)
	p.Tick()
	if got, _ := lastDrawn(&errb); got != "[0/300] ok=0 750ms waiting: gpu[001-300]" {
		t.Errorf("first line %q", got)
	}
	left := map[string]bool{"gpu017": true, "gpu204": true, "gpu299": true}
	for i, h := range hosts {
		if left[h] {
			continue
		}
		st := StatusOK
		if i%100 == 5 {
			st = StatusFailed
		}
		p.Done(Result{Host: h, Status: st})
	}
	clk.add(time.Second)
	p.Tick()
	if got, _ := lastDrawn(&errb); got != "[297/300] ok=294 failed=3 1.8s waiting: gpu[017,204,299]" {
		t.Errorf("line %q", got)
	}
	// Redrawn on a tick alone: the clock moves.
	before := errb.Len()
	clk.add(ProgressTick)
	p.Tick()
	if got, _ := lastDrawn(&errb); errb.Len() == before || got != "[297/300] ok=294 failed=3 2.0s waiting: gpu[017,204,299]" {
		t.Errorf("tick did not redraw: %q", got)
	}
	// A status beyond the three is counted too.
	p.Done(Result{Host: "gpu204", Status: "skipped"})
	p.Tick()
	if got, _ := lastDrawn(&errb); got != "[298/300] ok=294 failed=3 skipped=1 2.0s waiting: gpu[017,299]" {
		t.Errorf("line %q", got)
	}
}

func TestProgressFitsTheWidth(t *testing.T) {
	clk := newManualClock()
	var errb bytes.Buffer
	width := 60
	hosts := labHosts(300)
	p := New(Options{Err: &errb, Progress: true, Total: len(hosts), Hosts: hosts,
		Width: func() int { return width }, Fold: inventory.FoldNodeSet, Now: clk.now})
	// Every third host done: the waiting set folds badly.
	for i, h := range hosts {
		if i%3 == 0 {
			p.Done(Result{Host: h, Status: StatusOK})
		}
	}
	for _, w := range []int{60, 80, 45, 35, 20} {
		width = w
		p.Tick()
		got, _ := lastDrawn(&errb)
		if n := utf8.RuneCountInString(got); n > w-1 {
			t.Errorf("width %d: %d columns: %q", w, n, got)
		}
		if w >= 60 && !strings.Contains(got, " more") {
			t.Errorf("width %d: no waiting hosts: %q", w, got)
		}
		// The count says how many are not shown: shown + more = 200.
		if _, rest, ok := strings.Cut(got, "waiting: "); ok && strings.Contains(rest, " more") {
			set, more, _ := strings.Cut(rest, " +")
			var n int
			fmt.Sscanf(more, "%d more", &n)
			shown, err := inventory.ExpandNodeSet(set)
			if err != nil {
				t.Fatalf("width %d: %q: %v", w, set, err)
			}
			if len(shown)+n != 200 {
				t.Errorf("width %d: %d shown + %d more, want 200 in all: %q", w, len(shown), n, got)
			}
		}
	}
	// At 20 columns the counts fill the line: no waiting part at all.
	if got, _ := lastDrawn(&errb); strings.Contains(got, "waiting") {
		t.Errorf("narrow: %q", got)
	}
}

func TestFitWaiting(t *testing.T) {
	fold := inventory.FoldNodeSet
	names := labHosts(300)
	var odd []string
	for i, n := range names {
		if i%2 == 0 {
			odd = append(odd, n)
		}
	}
	for _, c := range []struct {
		names []string
		width int
		want  string
	}{
		{names, 80, "waiting: gpu[001-300]"},
		{odd, 40, "waiting: gpu[001,003,005,007] +146 more"},
		{odd, 18, "waiting: 150 hosts"},
		{odd, 10, ""},
		{[]string{"a-very-long-host-name"}, 20, "waiting: 1 hosts"},
	} {
		if got := fitWaiting(c.names, c.width, fold); got != c.want {
			t.Errorf("fitWaiting(%d names, %d) = %q, want %q", len(c.names), c.width, got, c.want)
		}
	}
}

// Within waitRefresh, a burst of finished hosts folds the waiting set
// once; a tick always folds it again.
func TestProgressRefoldsOnTick(t *testing.T) {
	clk := newManualClock()
	var errb bytes.Buffer
	folds := 0
	fold := func(h []string) string { folds++; return inventory.FoldNodeSet(h) }
	p := New(Options{Out: &bytes.Buffer{}, Err: &errb, Progress: true, Total: 3, Hosts: []string{"a1", "a2", "a3"}, Fold: fold, Now: clk.now})
	p.Tick()
	n := folds
	p.Done(Result{Host: "a1", Status: StatusOK})
	p.Done(Result{Host: "a2", Status: StatusOK})
	if folds != n {
		t.Errorf("folded %d times within %v", folds-n, waitRefresh)
	}
	p.Tick()
	if got, _ := lastDrawn(&errb); !strings.HasSuffix(got, "waiting: a3") {
		t.Errorf("after the tick: %q", got)
	}
	p.Finish(nil)
	if got, ok := lastDrawn(&errb); !ok || got != "" {
		t.Errorf("the line is not erased at the end: %q", got)
	}
}
