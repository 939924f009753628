package report

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpush/gpush/termsafe"
)

// Progress timing, for callers that drive Tick: the line shows once a run
// has lasted ProgressDelay and is redrawn every ProgressTick, so that it is
// on screen within a second and its clock moves while no host finishes.
const (
	ProgressDelay = 500 * time.Millisecond
	ProgressTick  = 250 * time.Millisecond
)

// waitRefresh bounds how often the waiting hosts are folded again while
// hosts finish in a burst (Tick always refolds): folding is linear in the
// fleet, and a 10,000-host run would otherwise fold on every host's end.
const waitRefresh = 100 * time.Millisecond

// waiting tracks the hosts not done yet, for the progress line.
type waiting struct {
	order []string        // every host, natural order
	left  map[string]bool // not done yet
	n     int             // len of left
	// The folded text, kept until a host finishes or the width changes.
	text   string
	width  int
	dirty  bool
	folded time.Time
}

func newWaiting(hosts []string) waiting {
	w := waiting{left: make(map[string]bool, len(hosts)), dirty: true}
	for _, h := range hosts {
		if !w.left[h] {
			w.left[h] = true
			w.order = append(w.order, h)
		}
	}
	sort.SliceStable(w.order, func(i, j int) bool { return naturalLess(w.order[i], w.order[j]) })
	w.n = len(w.order)
	return w
}

func (w *waiting) finish(host string) {
	if w.left[host] {
		delete(w.left, host)
		w.n--
		w.dirty = true
	}
}

// names are the hosts not done yet, in natural order.
func (w *waiting) names() []string {
	out := make([]string, 0, w.n)
	for _, h := range w.order {
		if w.left[h] {
			out = append(out, h)
		}
	}
	return out
}

// render is "waiting: gpu[017,204,299]" in at most width columns: when the
// whole set does not fit, the first hosts that fit and how many more
// ("waiting: gpu[001-040] +260 more"), or only the count.
func (w *waiting) render(width int, fold func([]string) string, now time.Time, force bool) string {
	if w.n == 0 || len(w.order) == 0 {
		return ""
	}
	stale := w.dirty && (force || now.Sub(w.folded) >= waitRefresh)
	if !stale && width == w.width && w.text != "" {
		return w.text
	}
	w.text, w.width, w.dirty, w.folded = fitWaiting(w.names(), width, fold), width, false, now
	return w.text
}

// fitWaiting folds names into "waiting: SET", cut to width columns.
func fitWaiting(names []string, width int, fold func([]string) string) string {
	const label = "waiting: "
	fits := func(s string) bool { return utf8.RuneCountInString(s) <= width }
	if s := label + fold(names); fits(s) {
		return s
	}
	more := func(k int) string {
		return fmt.Sprintf("%s%s +%d more", label, fold(names[:k]), len(names)-k)
	}
	// The longest prefix that fits: a fold's length grows with its hosts
	// but not strictly (gpu[1-3] is as long as gpu[1,3]), so search, then
	// check the answer.
	lo, hi := 0, len(names)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(more(mid)) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo > 0 && fits(more(lo)) {
		return more(lo)
	}
	if s := fmt.Sprintf("waiting: %d hosts", len(names)); fits(s) {
		return s
	}
	return ""
}

// progressLine is the whole progress line for the terminal's width.
// Callers hold p.mu.
func (p *Printer) progressLine(force bool) string {
	now := p.o.Now()
	var b strings.Builder
	// ok always, other statuses (failed, unreachable, skipped, ...) once
	// there are some: the room is for the waiting hosts.
	fmt.Fprintf(&b, "[%d/%d] ok=%d", p.done, p.o.Total, p.counts[StatusOK])
	other := []string{StatusFailed, StatusUnreachable}
	var more []string
	for s := range p.counts {
		if s != StatusOK && s != StatusFailed && s != StatusUnreachable {
			more = append(more, s)
		}
	}
	sort.Strings(more)
	for _, s := range append(other, more...) {
		if n := p.counts[s]; n > 0 {
			fmt.Fprintf(&b, " %s=%d", s, n)
		}
	}
	fmt.Fprintf(&b, " %s", fmtDur(now.Sub(p.start)))
	width := 80
	if p.o.Width != nil {
		if w := p.o.Width(); w > 0 {
			width = w
		}
	}
	if host, st, ok := p.slowestStep(); ok {
		// Sanitized: the host's name and the step are the hosts' data.
		// The step is cut to the width, its time kept.
		head := " " + termsafe.String(host) + " "
		tail := " (" + fmtDur(now.Sub(st.since)) + ")"
		msg := []rune(termsafe.String(st.msg))
		room := width - 1 - utf8.RuneCountInString(b.String()) - utf8.RuneCountInString(head+tail)
		if room > 1 && len(msg) > room {
			msg = append([]rune(strings.TrimRight(string(msg[:room-1]), " ")), '…')
		}
		if room > 1 {
			b.WriteString(head + string(msg) + tail)
		}
	}
	// One column short of the width: a line that fills the last column
	// wraps on some terminals, and the erase would then miss its top.
	room := width - 1 - utf8.RuneCountInString(b.String()) - 1
	if room > 0 {
		// Sanitized before measuring: an escape is wider than its byte.
		fold := func(h []string) string { return termsafe.String(p.o.Fold(h)) }
		if wt := p.wait.render(room, fold, now, force); wt != "" {
			b.WriteString(" " + wt)
		}
	}
	s := b.String()
	if n := utf8.RuneCountInString(s); n > width-1 && width > 1 {
		s = string([]rune(s)[:width-1])
	}
	return s
}

// hostStep is what a running host is doing, since when.
type hostStep struct {
	msg   string
	since time.Time
}

// Step records what a running host is doing now (gpu.free's stage, what it
// waits for): the progress line shows the step that has lasted longest
// among the hosts not done, with its time ("[0/2] ok=0 3.4s lab01 gpu.free
// stage 1: killed 2, waiting GPU 0,3 (3.2s)").
func (p *Printer) Step(host, msg string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished || !p.wait.left[host] && len(p.wait.order) > 0 {
		return
	}
	if p.steps == nil {
		p.steps = map[string]hostStep{}
	}
	if t.IsZero() {
		t = p.o.Now()
	}
	p.steps[host] = hostStep{msg: msg, since: t}
	p.drawProgress()
}

// slowestStep is the step of a running host that began first; callers
// hold p.mu.
func (p *Printer) slowestStep() (string, hostStep, bool) {
	var host string
	var best hostStep
	for h, st := range p.steps {
		if host == "" || st.since.Before(best.since) || st.since.Equal(best.since) && h < host {
			host, best = h, st
		}
	}
	return host, best, host != ""
}
