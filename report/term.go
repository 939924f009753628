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
func (p *Printer) drawProgress() {
	if !p.o.Progress || p.o.Now().Sub(p.start) < p.o.ProgressAfter {
		return
	}
	p.errw.Print(termsafe.EraseLine(), termsafe.Dataf("[%d/%d] ok=%d failed=%d unreachable=%d %s",
		p.done, p.o.Total, p.counts[StatusOK], p.counts[StatusFailed], p.counts[StatusUnreachable],
		fmtDur(p.o.Now().Sub(p.start))))
	p.progress = true
}

// clearProgress erases the progress line before other output; callers hold p.mu.
func (p *Printer) clearProgress() {
	if p.progress {
		p.errw.Print(termsafe.EraseLine())
		p.progress = false
	}
}

// Tick redraws the progress line (call it periodically during long runs so
// the elapsed time moves while no host finishes).
func (p *Printer) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawProgress()
}
