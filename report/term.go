package report

import (
	"os"

	"golang.org/x/term"

	"github.com/gpush/gpush/termsafe"
)

// UseColor says whether to colour output written to f: only on a terminal,
// and never with NO_COLOR set (https://no-color.org: any value disables).
func UseColor(f *os.File) bool {
	if _, set := os.LookupEnv("NO_COLOR"); set {
		return false
	}
	return IsTerminal(f)
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

const (
	colHost    = "1"  // bold
	colOK      = "32" // green
	colFail    = "31" // red
	colUnreach = "35" // magenta
	colWarn    = "33" // yellow
	colDebug   = "2"  // dim
)

func statusColor(s string) string {
	switch s {
	case StatusOK:
		return colOK
	case StatusUnreachable:
		return colUnreach
	default:
		return colFail
	}
}

func (p *Printer) level(l string) termsafe.Safe {
	switch l {
	case "warn":
		return p.out.Paint(colWarn, "WARN")
	case "error":
		return p.out.Paint(colFail, "ERROR")
	case "debug":
		return p.out.Paint(colDebug, "DEBUG")
	case "info", "":
		return termsafe.Data("INFO")
	default:
		return p.out.Paint(colWarn, l)
	}
}

// drawProgress rewrites the progress line on Err; callers hold p.mu.
func (p *Printer) drawProgress() { p.redraw(false) }

// redraw draws the progress line once the run has lasted ProgressAfter;
// force refolds the waiting hosts even within waitRefresh.
func (p *Printer) redraw(force bool) {
	if !p.o.Progress || p.o.Now().Sub(p.start) < p.o.ProgressAfter {
		return
	}
	p.errw.Print(termsafe.EraseLine(), termsafe.Data(p.progressLine(force)))
	p.progress = true
}

// clearProgress erases the progress line before other output; callers hold p.mu.
func (p *Printer) clearProgress() {
	if p.progress {
		p.errw.Print(termsafe.EraseLine())
		p.progress = false
	}
}

// Tick redraws the progress line: call it every ProgressTick so that the
// line shows within a second and its clock moves while no host finishes.
func (p *Printer) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.redraw(true)
}

// TermWidth returns a function reporting f's width in columns (0 when f is
// not a terminal), asked at each redraw so that a resize is followed.
func TermWidth(f *os.File) func() int {
	return func() int {
		if f == nil {
			return 0
		}
		w, _, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return 0
		}
		return w
	}
}
