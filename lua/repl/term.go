package repl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/chzyer/readline"
	"golang.org/x/term"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/termsafe"
)

// screen serializes what the REPL prints (results, the hosts' lines from
// their goroutines) and keeps the progress line out of its way.
type screen struct {
	out, errw *termsafe.Writer
	// live: both ends are a terminal, so a progress line may be drawn.
	live bool

	mu     sync.Mutex
	status string // the progress line on screen, "" for none
}

func newScreen(out, errw *termsafe.Writer, live bool) *screen {
	return &screen{out: out, errw: errw, live: live}
}

func (s *screen) line(parts ...termsafe.Safe) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
	s.out.Line(parts...)
	s.drawLocked()
}

func (s *screen) errLine(parts ...termsafe.Safe) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
	s.errw.Line(parts...)
	s.drawLocked()
}

func (s *screen) clearLocked() {
	if s.status != "" {
		s.errw.Print(termsafe.EraseLine())
	}
}

func (s *screen) drawLocked() {
	if s.status != "" {
		s.errw.Print(termsafe.EraseLine(), termsafe.Data(s.status))
	}
}

func (s *screen) setStatus(st string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
	s.status = st
	s.drawLocked()
	if st == "" {
		s.errw.Print(termsafe.EraseLine())
	}
}

// progressAfter is how long an input runs before the progress line shows:
// quick inputs do not flicker, slow ones show within a second.
const progressAfter = 300 * time.Millisecond

// progress counts the hosts that answered; done is safe from any goroutine.
type progress struct {
	s       *screen
	hosts   []string
	mu      sync.Mutex
	pending map[string]bool
	start   time.Time
	quit    chan struct{}
	wg      sync.WaitGroup
}

// progress starts the progress line of an input on hosts; it shows only on
// a terminal and for more than one host.
func (s *screen) progress(hosts []string) *progress {
	p := &progress{s: s, hosts: hosts, pending: map[string]bool{}, start: time.Now(), quit: make(chan struct{})}
	for _, h := range hosts {
		p.pending[h] = true
	}
	if !s.live || len(hosts) < 2 {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		delay := time.NewTimer(progressAfter)
		defer delay.Stop()
		select {
		case <-p.quit:
			return
		case <-delay.C:
		}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			s.setStatus(p.text(i))
			select {
			case <-p.quit:
				s.setStatus("")
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

var spin = []string{"|", "/", "-", "\\"}

// text is "| [2/5] answered, waiting: lab[03-05] 1.2s" (the hosts still
// running folded; their count when that is too long).
func (p *progress) text(i int) string {
	p.mu.Lock()
	var waiting []string
	for _, h := range p.hosts {
		if p.pending[h] {
			waiting = append(waiting, h)
		}
	}
	p.mu.Unlock()
	set := termsafe.String(inventory.FoldNodeSet(waiting))
	if len(set) > 60 {
		set = fmt.Sprintf("%d hosts", len(waiting))
	}
	return fmt.Sprintf("%s [%d/%d] answered, waiting: %s %.1fs (Ctrl-C interrupts)", spin[i%len(spin)],
		len(p.hosts)-len(waiting), len(p.hosts), set, time.Since(p.start).Seconds())
}

func (p *progress) done(r lua.EvalResult) {
	p.mu.Lock()
	delete(p.pending, r.Host)
	p.mu.Unlock()
}

func (p *progress) stop() {
	close(p.quit)
	p.wg.Wait()
}

// termWidth is the terminal's width in columns, 0 when unknown.
func termWidth(f *os.File) int {
	w, _, err := term.GetSize(int(f.Fd()))
	if err != nil || w <= 0 {
		return 0
	}
	return w
}

// errInterrupt is Ctrl-C at the prompt.
var errInterrupt = errors.New("interrupt")

// lineReader gives the input lines: io.EOF at the end, errInterrupt (with
// the line typed so far) on Ctrl-C. Remember records a complete input (its
// lines) in the history.
type lineReader interface {
	ReadLine(prompt string) (string, error)
	Remember(lines []string)
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

func (p *pipeReader) Remember([]string) {}
func (p *pipeReader) Close() error      { return nil }

// editor is the line editor on a terminal, with the history in a file of
// our own format (see history.go): readline's own file keeps one line per
// entry and is created 0644.
type editor struct {
	rl   *readline.Instance
	hist *history
	r    *repl
}

func (r *repl) newEditor(in *os.File) (*editor, error) {
	cfg := &readline.Config{
		Prompt:                 r.prompt(false),
		HistoryLimit:           historyLimit,
		DisableAutoSaveHistory: true,
		HistorySearchFold:      true,
		InterruptPrompt:        "^C",
		AutoComplete:           completer{r},
		Stdin:                  in,
		Stdout:                 r.cfg.Out,
		Stderr:                 r.scr.errw,
	}
	rl, err := readline.NewEx(cfg)
	if err != nil {
		return nil, fmt.Errorf("repl: line editor: %w", err)
	}
	e := &editor{rl: rl, r: r}
	path := r.cfg.HistoryFile
	if path == "" {
		path, err = defaultHistoryPath()
	}
	if err == nil {
		var entries []string
		var note string
		e.hist, entries, note, err = openHistory(path)
		if note != "" {
			r.scr.errLine(r.scr.errw.Paint("33", "gpush: "+note))
		}
		for _, h := range entries {
			rl.SaveHistory(h)
		}
	}
	if err != nil {
		r.scr.errLine(r.scr.errw.Paint("33", fmt.Sprintf("gpush: repl history off: %v", err)))
	}
	return e, nil
}

func (e *editor) ReadLine(prompt string) (string, error) {
	e.rl.SetPrompt(prompt)
	line, err := e.rl.Readline()
	if errors.Is(err, readline.ErrInterrupt) {
		return line, errInterrupt
	}
	return line, err
}

func (e *editor) Remember(lines []string) {
	entry := historyEntry(lines)
	e.rl.SaveHistory(entry)
	if e.hist != nil {
		if err := e.hist.add(entry); err != nil {
			e.r.scr.errLine(e.r.scr.errw.Paint("33", fmt.Sprintf("gpush: repl history: %v (history off)", err)))
			e.hist.close()
			e.hist = nil
		}
	}
}

func (e *editor) Close() error {
	if e.hist != nil {
		e.hist.close()
	}
	return e.rl.Close()
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
