// Package repl is `gpush repl`: the read-eval-print loop over a lua.Fleet,
// its dot commands, the display of results gathered across hosts, the line
// editor's history and the progress line. The CLI only parses flags and
// hands a Config to Run.
package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/report"
	"github.com/gpush/gpush/termsafe"
)

// Help is the REPL's description, for `gpush repl --help`; its "Commands:"
// block is also what .help prints.
const Help = `Opens one connection and one Lua state per selected host, then evaluates each
input on every host at once (at most --forks). State persists between inputs:
a global set by one line is there for the next, on each host.

An expression shows its value (the line is tried as "return <line>" first);
input that is not a complete chunk yet (an open "do", "function", "{" or
string) continues on the next line. Equal results are shown once, with the
hosts that gave them ("lab[01-04]: 4"; errors that differ only by the
host's own name too, shown as <host>); lists of records (gpu.mem(),
gpu.holders()) and the record lists inside a result (gpu.kill's results) as
fleet tables, one row per record, gathered across hosts. print() lines stream
as "host | text", log.* lines as "host | LEVEL text".

Commands:
  .hosts            the open hosts, the selection, the hosts left out, forks
  .limit PATTERN    evaluate on the open hosts PATTERN selects (as --limit)
  .all              back to every open host
  .check [on|off]   show or switch check mode (the prompt says [check])
  .doc [MODULE]     a module's reference, as gpush doc MODULE prints it
  .reconnect        try again the hosts left out (unreachable or lost)
  .help             this list
  .exit             leave (also Ctrl-D at an empty prompt)

Ctrl-C interrupts the running evaluation: hosts that finished show their
results, the others "interrupted". At the prompt Ctrl-C drops the line being
typed and never leaves. While an input runs on several hosts a progress line
counts the hosts that answered and names those still running.

History is kept in the user cache dir (gpush/repl_history, mode 0600; a wider
mode is narrowed); a block of several lines is one entry. require finds
modules in the current directory and the built-in library.

When stdin is not a terminal, chunks are read from it without line editing
(echo 'return gpu.mem()' | gpush repl -i lab) and the exit status is as for
run: 0 all ok; 2 an evaluation failed or was interrupted on a host; 4 a host
was unreachable (wins over 2); 1 a usage or internal error. Interactively it
is 0, or 4 when no host could be reached.`

// Config is what the CLI resolved from its flags.
type Config struct {
	Inventory *inventory.Inventory
	// Hosts are the selected hosts (--limit applied), in inventory order.
	Hosts []inventory.Host
	// Dir is the folder require searches besides the built-in library.
	Dir string
	// Lua are the sessions' options: Forks, Check, ExtraVars, Dial,
	// MemoryLimit, Logger. OnEvent is set by Run.
	Lua lua.Options
	// Timeout bounds each input on each host (0: none).
	Timeout time.Duration
	// Verbose shows debug log lines.
	Verbose bool
	In      io.Reader
	Out     io.Writer
	Err     io.Writer
	// HistoryFile overrides the history's path ("" for the default).
	HistoryFile string
}

// repl is one session.
type repl struct {
	cfg      Config
	fleet    *lua.Fleet
	byName   map[string]inventory.Host
	all, cur []string // open hosts; the selection
	limit    string   // the .limit pattern, "" for all
	left     []lua.HostResult
	// badVars are the hosts left out because their vars are wrong (not
	// because of the network): .reconnect cannot help them.
	badVars map[string]bool
	scr     *screen
	color   bool
	// interactive: stdin is a terminal (line editor, prompt, progress).
	interactive bool
	width       int // terminal columns for tables; 0: no limit

	mu         sync.Mutex
	evalCancel context.CancelFunc // the running evaluation (or dial), if any
	failed     bool               // an evaluation failed on a host
}

// Run runs the REPL until the end of input, .exit or Ctrl-D. It returns the
// exit status; an error only for what stops it from running at all.
func Run(ctx context.Context, c Config) (int, error) {
	in := c.In
	if in == nil {
		in = os.Stdin
	}
	inF, _ := in.(*os.File)
	outF, _ := c.Out.(*os.File)
	errF, _ := c.Err.(*os.File)
	r := &repl{cfg: c, byName: map[string]inventory.Host{}, badVars: map[string]bool{},
		color:       outF != nil && report.UseColor(outF),
		interactive: inF != nil && report.IsTerminal(inF),
	}
	for _, h := range c.Hosts {
		r.byName[h.Name] = h
	}
	errTerm := errF != nil && report.IsTerminal(errF)
	r.scr = newScreen(termsafe.NewWriter(c.Out, r.color), termsafe.NewWriter(c.Err, errF != nil && report.UseColor(errF)),
		r.interactive && errTerm)
	if r.interactive && outF != nil {
		r.width = termWidth(outF)
	}

	// SIGINT cancels the running evaluation; at a readline prompt the
	// terminal is raw and Ctrl-C arrives as a key instead. Without a
	// terminal, and on SIGTERM, a signal ends the whole session.
	root, cancelRoot := context.WithCancel(ctx)
	defer cancelRoot()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case <-root.Done():
				return
			case sig := <-sigs:
				r.mu.Lock()
				switch {
				case sig == syscall.SIGTERM || !r.interactive:
					cancelRoot()
				case r.evalCancel != nil:
					r.evalCancel()
				}
				r.mu.Unlock()
			}
		}
	}()

	o := c.Lua
	o.OnEvent = r.event
	dctx, dcancel := r.track(root)
	fleet, left := lua.OpenFleet(dctx, c.Hosts, c.Dir, o)
	interrupted := dctx.Err() != nil
	r.untrack(dcancel)
	defer fleet.Close()
	r.fleet, r.left = fleet, left
	r.noteBadVars(left)
	r.all = fleet.Hosts()
	r.cur = r.all
	r.showLeftOut(left, "")
	if interrupted {
		r.scr.errLine(termsafe.Data("gpush: interrupted"))
		return report.ExitUnreachable, nil
	}
	if len(r.all) == 0 {
		r.scr.errLine(termsafe.Data("gpush: no host could be reached"))
		return report.ExitUnreachable, nil
	}

	var lr lineReader
	if r.interactive {
		ed, err := r.newEditor(inF)
		if err != nil {
			return report.ExitError, err
		}
		lr = ed
		r.scr.line(termsafe.Dataf("gpush repl: %d hosts open (%s), %d at once; .help for commands, Ctrl-D to leave",
			len(r.all), inventory.FoldNodeSet(r.all), fleet.Forks()))
	} else {
		lr = &pipeReader{r: bufio.NewReader(in)}
	}
	defer lr.Close()

	if err := r.loop(root, lr); err != nil {
		return report.ExitError, err
	}
	if root.Err() != nil && ctx.Err() == nil {
		r.scr.errLine(termsafe.Data("gpush: interrupted"))
	}
	if r.interactive {
		return 0, nil
	}
	code := 0
	if r.failed || root.Err() != nil {
		code = report.ExitFailed
	}
	for _, h := range r.left {
		if h.Status == lua.StatusUnreachable {
			code = report.ExitUnreachable
		} else if code == 0 {
			code = report.ExitFailed
		}
	}
	return code, nil
}

// track makes ctx's cancel the one a Ctrl-C calls.
func (r *repl) track(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	r.mu.Lock()
	r.evalCancel = cancel
	r.mu.Unlock()
	return ctx, cancel
}

func (r *repl) untrack(cancel context.CancelFunc) {
	r.mu.Lock()
	r.evalCancel = nil
	r.mu.Unlock()
	cancel()
}

// event prints a host's print() and log lines as they come, from the
// hosts' goroutines.
func (r *repl) event(e lua.Event) {
	switch {
	case e.Kind == modules.EventStart || e.Kind == modules.EventDone || e.Kind == modules.EventStep:
		return // a step is for a progress line, which the REPL has not
	case e.Level == modules.LevelDebug && !r.cfg.Verbose:
		return
	}
	var tag termsafe.Safe
	if e.Kind != lua.EventPrint {
		tag = termsafe.Join(r.scr.out.Paint(levelColor(e.Level), strings.ToUpper(e.Level)), termsafe.Data(" "))
	}
	prefix := termsafe.Join(r.scr.out.Paint("1", e.Host), termsafe.Data(" | "), tag)
	// A message of several lines keeps the host in front of each line, so
	// no line of it passes for another host's.
	for _, l := range strings.Split(strings.TrimRight(e.Message, "\n"), "\n") {
		r.scr.line(prefix, termsafe.Block(l))
	}
}

func levelColor(level string) string {
	switch level {
	case modules.LevelWarn:
		return "33"
	case modules.LevelError:
		return "31"
	case modules.LevelDebug:
		return "2"
	}
	return ""
}

// prompt names the selected hosts ("gpush lab[01-04]> "), or their count
// when the node set would not fit on a line; "[check]" in check mode.
func (r *repl) prompt(more bool) string {
	// The line editor writes the prompt raw: inventory names are sanitized.
	set := termsafe.String(inventory.FoldNodeSet(r.cur))
	switch {
	case len(r.cur) == 0:
		set = "(no host)"
	case len(set) > 40:
		set = fmt.Sprintf("%d hosts", len(r.cur))
	}
	p := "gpush "
	if r.fleet.Check() {
		p = "gpush[check] "
	}
	if more {
		return p + set + ">> "
	}
	return p + set + "> "
}

// loop reads chunks until the end of input or .exit.
func (r *repl) loop(root context.Context, lr lineReader) error {
	var pending []string
	for root.Err() == nil {
		line, err := lr.ReadLine(r.prompt(len(pending) > 0))
		if errors.Is(err, errInterrupt) {
			// Ctrl-C drops what is typed; at an empty prompt it only says
			// how to leave (a stray Ctrl-C must not close 300 sessions).
			if len(pending) == 0 && strings.TrimSpace(line) == "" {
				r.scr.line(termsafe.Data("(Ctrl-D or .exit to leave)"))
			}
			pending = nil
			continue
		}
		if errors.Is(err, io.EOF) {
			// Piped input ends with what is left (its syntax error shows);
			// Ctrl-D on a terminal just leaves.
			if len(pending) > 0 && !r.interactive {
				r.eval(root, strings.Join(pending, "\n"))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("repl: read input: %w", err)
		}
		if len(pending) == 0 {
			t := strings.TrimSpace(line)
			if t == "" {
				continue
			}
			if isDotCommand(t) {
				lr.Remember([]string{t})
				if r.dot(root, t) {
					return nil
				}
				continue
			}
		}
		pending = append(pending, line)
		code := strings.Join(pending, "\n")
		if lua.Incomplete(code) {
			continue
		}
		lr.Remember(pending)
		pending = nil
		r.eval(root, code)
	}
	return nil
}

// isDotCommand: a dot and a letter; ".5" is a Lua number.
func isDotCommand(t string) bool {
	return len(t) > 1 && t[0] == '.' && unicode.IsLetter(rune(t[1]))
}

func (r *repl) errorf(format string, args ...any) {
	r.scr.line(r.scr.out.Paint("31", fmt.Sprintf(format, args...)))
}

// eval runs code on the selected hosts, Ctrl-C cancelling it, and shows
// the results.
func (r *repl) eval(root context.Context, code string) {
	if len(r.cur) == 0 {
		r.errorf("no host selected: .all, or .reconnect the hosts left out")
		return
	}
	ctx, cancel := r.track(root)
	if t := r.cfg.Timeout; t > 0 {
		// One deadline for the input, set before any host starts.
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, t)
		defer stop()
	}
	prog := r.scr.progress(r.cur)
	rs := r.fleet.EvalEach(ctx, r.cur, code, prog.done)
	prog.stop()
	r.untrack(cancel)
	r.show(rs)
	if lost := r.fleet.DropLost(); len(lost) > 0 {
		r.left = append(r.left, lost...)
		r.setOpen(r.fleet.Hosts())
		r.showLeftOut(lost, "; .reconnect to try again")
	}
}

func (r *repl) noteBadVars(rs []lua.HostResult) {
	for _, h := range rs {
		if h.Status == lua.StatusFailed {
			r.badVars[h.Host] = true
		}
	}
}

// setOpen updates the open hosts and recomputes the selection from the
// .limit pattern.
func (r *repl) setOpen(all []string) {
	r.all = all
	if r.limit == "" {
		r.cur = all
		return
	}
	cur, _ := r.selectOpen(r.limit)
	r.cur = cur
}

// showLeftOut reports hosts that could not be opened or were lost, equal
// causes gathered.
func (r *repl) showLeftOut(left []lua.HostResult, hint string) {
	groups := map[string][]string{}
	var order []string
	for _, h := range left {
		k := strings.ToUpper(h.Status) + ": " + h.Error
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], h.Host)
	}
	for _, k := range order {
		r.scr.errLine(r.scr.errw.Paint("35", fmt.Sprintf("%s: %s (left out%s)", inventory.FoldNodeSet(groups[k]), k, hint)))
	}
}
