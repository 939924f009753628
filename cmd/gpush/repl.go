package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/chzyer/readline"
	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/remote"
	"github.com/gpush/gpush/report"
	"github.com/gpush/gpush/termsafe"
)

const replHelp = `Opens one connection and one Lua state per selected host, then evaluates each
input on every host at once (at most --forks). State persists between inputs:
a global set by one line is there for the next, on each host.

An expression shows its value (the line is tried as "return <line>" first);
input that is not a complete chunk yet (an open "do", "function", "{" or
string) continues on the next line. Equal results are shown once, with the
hosts that gave them ("lab[01-04]: 4"); lists of records (gpu.mem()) as one
fleet table. print() and log.* lines stream as "host | LEVEL message".

Commands:
  .hosts            the open hosts, the current selection, the hosts left out
  .limit PATTERN    evaluate on the open hosts PATTERN selects (as --limit)
  .all              back to every open host
  .help             this list
  .exit             leave (also Ctrl-D, or Ctrl-C twice at an empty prompt)

Ctrl-C interrupts the running evaluation on every host and returns to the
prompt. History is kept in the user cache dir (gpush/repl_history). require
finds modules in the current directory and the built-in library.

When stdin is not a terminal, chunks are read from it without line editing
(echo 'return gpu.mem()' | gpush repl -i lab) and the exit status is as for
run: 0 all ok; 2 an evaluation failed on a host; 4 a host was unreachable
(wins over 2); 1 a usage or internal error. Interactively it is 0, or 4 when
no host could be reached.`

func replCommand() *cli.Command {
	return &cli.Command{
		Name:        "repl",
		Usage:       "evaluate Lua interactively on every selected host at once",
		Description: replHelp,
		Flags:       fleetFlags("hosts evaluated at once", "time limit of each input on each host (0: none; Ctrl-C always interrupts)"),
		Action:      runRepl,
	}
}

// repl is one `gpush repl` session.
type repl struct {
	inv      *inventory.Inventory
	fleet    *lua.Fleet
	all, cur []string // open hosts; the .limit selection
	left     []lua.HostResult
	// out and errw sanitize what they print (results and errors are the
	// hosts' data); rawOut is for the line editor's own prompt and keys.
	out, errw   *termsafe.Writer
	rawOut      io.Writer
	color       bool
	interactive bool
	timeout     time.Duration

	mu         sync.Mutex
	evalCancel context.CancelFunc // the running evaluation (or dial), if any
	failed     bool               // an evaluation failed on a host
}

func runRepl(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usagef("repl: unexpected argument %q (inputs are read from stdin)", c.Args().First())
	}
	f, err := parseFleet(c)
	if err != nil {
		return err
	}
	inv, hosts := f.inv, f.hosts
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("repl: current directory (for require): %w", err)
	}

	in := c.App.Reader
	if in == nil {
		in = os.Stdin
	}
	inF, _ := in.(*os.File)
	outF, _ := c.App.Writer.(*os.File)
	errF, _ := c.App.ErrWriter.(*os.File)
	r := &repl{
		inv: inv, rawOut: c.App.Writer,
		color:       outF != nil && report.UseColor(outF),
		interactive: inF != nil && report.IsTerminal(inF),
		timeout:     f.timeout,
	}
	r.out = termsafe.NewWriter(c.App.Writer, r.color)
	r.errw = termsafe.NewWriter(c.App.ErrWriter, errF != nil && report.UseColor(errF))
	p := report.New(report.Options{Out: r.out, Err: r.errw, Color: r.color, Verbose: c.Bool("verbose"), Fold: inventory.FoldNodeSet})

	// SIGINT cancels the running evaluation; at a readline prompt the
	// terminal is raw and Ctrl-C arrives as a key instead. Without a
	// terminal, and on SIGTERM, a signal ends the whole session.
	root, cancelRoot := context.WithCancel(c.Context)
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

	dctx, dcancel := r.track(root)
	fleet, left := lua.OpenFleet(dctx, hosts, cwd, lua.Options{
		Forks:     f.forks,
		Check:     f.check,
		ExtraVars: f.extra,
		Dial: func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
			return remote.Dial(ctx, h, f.remote)
		},
		OnEvent: func(e lua.Event) {
			if e.Kind == modules.EventStart || e.Kind == modules.EventDone {
				return
			}
			p.Event(report.Event{Host: e.Host, Time: e.Time, Kind: e.Kind, Level: e.Level, Message: e.Message})
		},
		Logger: f.logger,
	})
	interrupted := dctx.Err() != nil
	r.untrack(dcancel)
	defer fleet.Close()
	r.fleet, r.left = fleet, left
	r.all = fleet.Hosts()
	r.cur = r.all
	r.showLeftOut()
	if interrupted {
		fmt.Fprintln(r.errw, "gpush: interrupted")
		return exitError{report.ExitUnreachable}
	}
	if len(r.all) == 0 {
		fmt.Fprintln(r.errw, "gpush: no host could be reached")
		return exitError{report.ExitUnreachable}
	}

	var lr lineReader
	if r.interactive {
		rl, err := r.newReadline(inF, f.logger)
		if err != nil {
			return err
		}
		lr = rl
		fmt.Fprintf(r.out, "gpush repl: %d hosts open (%s); .help for commands, Ctrl-D to leave\n",
			len(r.all), inventory.FoldNodeSet(r.all))
	} else {
		lr = &pipeReader{r: bufio.NewReader(in)}
	}
	defer lr.Close()

	if err := r.loop(root, lr); err != nil {
		return err
	}
	if root.Err() != nil && c.Context.Err() == nil {
		fmt.Fprintln(r.errw, "gpush: interrupted")
	}
	if r.interactive {
		return nil
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
	if code != 0 {
		return exitError{code}
	}
	return nil
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

// errInterrupt is Ctrl-C at the prompt.
var errInterrupt = errors.New("interrupt")

// lineReader gives the input lines: io.EOF at the end, errInterrupt (with
// the line typed so far) on Ctrl-C.
type lineReader interface {
	ReadLine(prompt string) (string, error)
	Close() error
}

type pipeReader struct{ r *bufio.Reader }

func (p *pipeReader) ReadLine(string) (string, error) {
	line, err := p.r.ReadString('\n')
	if err == io.EOF && line != "" {
		err = nil // a last line without a newline
	}
	return strings.TrimRight(line, "\r\n"), err
}

func (p *pipeReader) Close() error { return nil }

type rlReader struct{ rl *readline.Instance }

func (r *rlReader) ReadLine(prompt string) (string, error) {
	r.rl.SetPrompt(prompt)
	line, err := r.rl.Readline()
	if errors.Is(err, readline.ErrInterrupt) {
		return line, errInterrupt
	}
	return line, err
}

func (r *rlReader) Close() error { return r.rl.Close() }

func (r *repl) newReadline(in *os.File, logger *slog.Logger) (*rlReader, error) {
	cfg := &readline.Config{
		Prompt:            r.prompt(false),
		HistoryLimit:      1000,
		HistorySearchFold: true,
		InterruptPrompt:   "^C",
		AutoComplete:      completer{r},
		Stdin:             in,
		Stdout:            r.rawOut,
		Stderr:            r.errw,
	}
	if path, err := historyPath(); err != nil {
		logger.Debug("repl history off", "err", err)
	} else {
		cfg.HistoryFile = path
	}
	rl, err := readline.NewEx(cfg)
	if err != nil {
		return nil, fmt.Errorf("repl: line editor: %w", err)
	}
	return &rlReader{rl}, nil
}

// historyPath is <user cache dir>/gpush/repl_history, its folder created.
func historyPath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "gpush")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("history dir: %w", err)
	}
	return filepath.Join(dir, "repl_history"), nil
}

// prompt names the selected hosts ("gpush lab[01-04]> "), or their count
// when the node set would not fit on a line.
func (r *repl) prompt(more bool) string {
	// The line editor writes the prompt raw: inventory names are sanitized.
	set := termsafe.String(inventory.FoldNodeSet(r.cur))
	if len(set) > 40 {
		set = fmt.Sprintf("%d hosts", len(r.cur))
	}
	if more {
		return "gpush " + set + ">> "
	}
	return "gpush " + set + "> "
}

// loop reads chunks until the end of input, .exit or a second Ctrl-C.
func (r *repl) loop(root context.Context, lr lineReader) error {
	var pending []string
	interrupts := 0
	for root.Err() == nil {
		line, err := lr.ReadLine(r.prompt(len(pending) > 0))
		if errors.Is(err, errInterrupt) {
			if len(pending) == 0 && strings.TrimSpace(line) == "" {
				if interrupts++; interrupts >= 2 {
					return nil
				}
				fmt.Fprintln(r.out, "(Ctrl-C again, Ctrl-D or .exit to leave)")
			} else {
				pending, interrupts = nil, 0
			}
			continue
		}
		interrupts = 0
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
				if r.dot(t) {
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
		pending = nil
		r.eval(root, code)
	}
	return nil
}

// isDotCommand: a dot and a letter; ".5" is a Lua number.
func isDotCommand(t string) bool {
	return len(t) > 1 && t[0] == '.' && unicode.IsLetter(rune(t[1]))
}

// dot runs a dot command; it returns true to leave.
func (r *repl) dot(t string) bool {
	name, arg, _ := strings.Cut(t, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case ".exit":
		return true
	case ".help":
		// One text for --help and .help: the "Commands:" block of replHelp.
		_, cmds, _ := strings.Cut(replHelp, "Commands:\n")
		cmds, _, _ = strings.Cut(cmds, "\n\n")
		fmt.Fprintln(r.out, cmds)
		fmt.Fprintln(r.out, "  An expression shows its value; Ctrl-C interrupts the evaluation.")
	case ".hosts":
		fmt.Fprintf(r.out, "open: %s (%d)\n", inventory.FoldNodeSet(r.all), len(r.all))
		if len(r.cur) != len(r.all) {
			fmt.Fprintf(r.out, "selected: %s (%d)\n", inventory.FoldNodeSet(r.cur), len(r.cur))
		}
		if len(r.left) > 0 {
			names := make([]string, len(r.left))
			for i, h := range r.left {
				names[i] = h.Host
			}
			fmt.Fprintf(r.out, "left out: %s (%d)\n", inventory.FoldNodeSet(names), len(names))
		}
	case ".all":
		r.cur = r.all
	case ".limit":
		if arg == "" {
			r.errorf(".limit: want a host pattern (groups, globs, node sets, !exclude, &intersect)")
			return false
		}
		sel, err := r.inv.Select(arg)
		if err != nil {
			r.errorf(".limit %q: %v", arg, err)
			return false
		}
		want := map[string]bool{}
		for _, h := range sel {
			want[h.Name] = true
		}
		var cur []string
		for _, n := range r.all {
			if want[n] {
				cur = append(cur, n)
			}
		}
		if len(cur) == 0 {
			r.errorf(".limit %q: matches no open host (open: %s)", arg, inventory.FoldNodeSet(r.all))
			return false
		}
		r.cur = cur
	default:
		r.errorf("unknown command %s (.help lists them)", name)
	}
	return false
}

func (r *repl) errorf(format string, args ...any) {
	r.out.Line(r.out.Paint("31", fmt.Sprintf(format, args...)))
}

// eval runs code on the selected hosts, Ctrl-C cancelling it, and shows
// the results.
func (r *repl) eval(root context.Context, code string) {
	ctx, cancel := r.track(root)
	if r.timeout > 0 {
		// One deadline for the input, set before any host starts.
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, r.timeout)
		defer stop()
	}
	rs := r.fleet.Eval(ctx, r.cur, code)
	r.untrack(cancel)
	if r.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		for i := range rs {
			if rs[i].Err != nil && errors.Is(rs[i].Err, context.DeadlineExceeded) {
				rs[i].Err = fmt.Errorf("timed out after %s", r.timeout)
			}
		}
	}
	r.show(rs)
}

// show prints one evaluation: lists of records as one fleet table, the
// rest gathered (equal outputs once, with their node set), errors in red.
func (r *repl) show(rs []lua.EvalResult) {
	var table []report.Result
	var rest []lua.EvalResult
	for _, x := range rs {
		if x.Err != nil {
			r.mu.Lock()
			r.failed = true
			r.mu.Unlock()
		}
		if x.Err == nil && len(x.Values) == 1 && report.IsRecords(x.Values[0]) {
			table = append(table, report.Result{Host: x.Host, Status: report.StatusOK, Value: x.Values[0]})
			continue
		}
		rest = append(rest, x)
	}
	if t := report.FleetTable(table, inventory.FoldNodeSet); t != nil {
		t.Write(r.out)
	}
	for _, g := range lua.Gather(rest) {
		hosts := termsafe.Join(r.out.Paint("1", inventory.FoldNodeSet(g.Hosts)), termsafe.Data(":"))
		// A value of several lines (a file, a tool's output) shows as lines
		// under its hosts; each line is sanitized on its own.
		lines := strings.Split(strings.TrimRight(g.Text, "\n"), "\n")
		text := func(l string) termsafe.Safe {
			if g.Err {
				return r.out.Paint("31", l)
			}
			return termsafe.Block(l) // tabs between values stay
		}
		if len(lines) == 1 {
			r.out.Line(hosts, termsafe.Data(" "), text(lines[0]))
			continue
		}
		r.out.Line(hosts)
		for _, l := range lines {
			r.out.Line(text(l))
		}
	}
}

// showLeftOut reports the hosts OpenFleet could not open, equal causes
// gathered.
func (r *repl) showLeftOut() {
	groups := map[string][]string{}
	var order []string
	for _, h := range r.left {
		k := strings.ToUpper(h.Status) + ": " + h.Error
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], h.Host)
	}
	for _, k := range order {
		r.errw.Line(r.errw.Paint("35", fmt.Sprintf("%s: %s (left out)", inventory.FoldNodeSet(groups[k]), k)))
	}
}

// completer completes dot commands and Lua names (globals, fields of
// global tables) from the first open host's state.
type completer struct{ r *repl }

func (c completer) Do(line []rune, pos int) ([][]rune, int) {
	start := pos
	for start > 0 {
		ch := line[start-1]
		if ch != '_' && ch != '.' && !unicode.IsLetter(ch) && !unicode.IsDigit(ch) {
			break
		}
		start--
	}
	word := string(line[start:pos])
	var cands []string
	if start == 0 && strings.HasPrefix(word, ".") {
		for _, d := range lua.DotCommands {
			if strings.HasPrefix(d, word) {
				cands = append(cands, d)
			}
		}
	} else if word != "" {
		cands = c.r.fleet.Complete(word)
	}
	out := make([][]rune, 0, len(cands))
	for _, s := range cands {
		// The line editor shows candidates raw: a global named with control
		// characters (set from a host's data) is not offered.
		if termsafe.String(s) == s {
			out = append(out, []rune(s[len(word):]))
		}
	}
	return out, len([]rune(word))
}
