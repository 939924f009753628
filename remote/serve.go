package remote

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpush/gpush/helper"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// One SSH session per host per run: the first helper call of a Conn starts
// `gpush-helper serve` (behind the warm check, see warm.go) on one channel,
// and every call after it is one request line and one response line on
// that channel: one round trip. Calls run concurrently, matched by id.
//
// A call is never sent twice: when the session dies mid-call, that call
// fails (the helper may have acted on it: a kill must not run twice), and
// the next call starts a new session.

// serveStderrMax is how much of a serve session's stderr is kept (its tail):
// it explains a helper that died.
const serveStderrMax = 64 << 10

// serveExitWait bounds waiting for the exit status of an ended session.
const serveExitWait = 5 * time.Second

// serveStartupMax bounds what is read before the hello: a chatty shell
// startup file may print, nothing legitimate prints megabytes.
const serveStartupMax = probeMaxOutput

// serveSession is one running `gpush-helper serve` on its own channel.
//
// The channel is driven bare, without x/crypto's Session: that runs a
// goroutine for the channel's requests and one copying stderr, for the
// whole session, and each cost every concurrent host its stack
// (BenchmarkLabMemory). The poller takes the requests (the exit status,
// sshd's keepalives), and stderr is read when the session ends: the helper
// writes to it only as it fails, and sudo or a login shell a few lines
// before it starts, well within the channel's window (2 MiB), which stderr
// shares with stdout.
type serveSession struct {
	owner  serveOwner
	st     Stream
	log    *slog.Logger
	path   string // the helper's path on the host, for messages
	pid    int    // the helper's pid there (its hello), for tests
	stderr *tailBuffer
	// stderrOnce starts the reading of stderr, when it is first wanted;
	// stderrDone closes when stderr ended.
	stderrOnce sync.Once
	stderrDone chan struct{}

	wmu sync.Mutex // one line at a time on stdin

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan helper.ServeReply
	// progress: the progress function of each pending call that has one.
	progress map[uint64]func(json.RawMessage)
	ended    bool

	done     chan struct{} // closed when the session ended
	endErr   error         // why; set before done closes
	exitText string        // "exit status 2", "killed by signal KILL", ...
}

// Helper runs one helper request over the Conn's serve session, starting
// it on first use (and again after it died between calls).
func (c *sshConn) Helper(ctx context.Context, verb string, req, resp any) error {
	return callHelper(ctx, c.host.Name, verb, req, resp, c.serveSession)
}

// callHelper encodes req and runs it over the serve session session
// returns: what every Conn's Helper does.
func callHelper(ctx context.Context, host, verb string, req, resp any, session func(context.Context, string) (*serveSession, error)) error {
	body, err := encodeRequest(host, verb, req)
	if err != nil {
		return err
	}
	s, err := session(ctx, verb)
	if err != nil {
		return err
	}
	return s.call(ctx, verb, body, resp)
}

// StartHelper starts the serve session unless one runs (see HelperStarter).
func (c *sshConn) StartHelper(ctx context.Context, verb string) error {
	_, err := c.serveSession(ctx, verb)
	return err
}

// serveSession returns the running session or starts one; one start at a
// time, waiting callers honour their ctx.
func (c *sshConn) serveSession(ctx context.Context, verb string) (*serveSession, error) {
	return c.serve.get(ctx, c.host.Name, verb, c.startServe)
}

// serveSlot holds a connection's one serve session: started on first use,
// and again once it ended, under a lock (a channel: a waiting caller
// honours its ctx) that makes concurrent callers share one start.
type serveSlot struct {
	lock chan struct{}
	s    *serveSession
}

func newServeSlot() serveSlot { return serveSlot{lock: make(chan struct{}, 1)} }

// get returns the live session, or the one start(ctx, verb) begins.
func (sl *serveSlot) get(ctx context.Context, host, verb string, start func(context.Context, string) (*serveSession, error)) (*serveSession, error) {
	select {
	case sl.lock <- struct{}{}: // uncontended: no ctx race
	default:
		select {
		case sl.lock <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: helper %s: %w", host, verb, ctx.Err())
		}
	}
	defer func() { <-sl.lock }()
	if s := sl.s; s != nil && !s.isEnded() {
		return s, nil
	}
	sl.s = nil
	s, err := start(ctx, verb)
	if err != nil {
		return nil, err
	}
	sl.s = s
	return s, nil
}

// current is the session the slot holds (nil when none); take removes it.
func (sl *serveSlot) current() *serveSession {
	sl.lock <- struct{}{}
	defer func() { <-sl.lock }()
	return sl.s
}

func (sl *serveSlot) take() *serveSession {
	sl.lock <- struct{}{}
	defer func() { <-sl.lock }()
	s := sl.s
	sl.s = nil
	return s
}

// startServe runs the warm check and, when it refuses, deploys the Go way
// and starts the helper (see serveDeployed). Each step's time goes into the
// errors of the later ones: a call's deadline eaten by earlier steps must
// not read as the last step hanging.
func (c *sshConn) startServe(ctx context.Context, verb string) (*serveSession, error) {
	dir, err := remoteDirSetting(c.host)
	if err != nil {
		return nil, err
	}
	var steps stepLog
	start := time.Now()
	digests, late := warmDigests(ctx, warmDigest(c.o), warmDigestGrace)
	steps.add("helper digests", start)
	if len(late) > 0 {
		c.log.Debug("warm check without some helpers: their source has not answered (building them?)",
			"arches", late, "waited", time.Since(start).Round(time.Millisecond))
	}
	token := newCancelToken()
	cmd := warmCommand(dir, token, c.host.Become, digests)
	start = time.Now()
	s, refused, err := c.openServe(ctx, verb, "helper serve (warm check)", steps.String(), cmd, token, "", true)
	if err != nil || s != nil {
		return s, err
	}
	steps.add("warm check refused", start)
	c.log.Debug("warm check refused; deploying the helper", "why", refused.reason)
	c.helper.forget()
	return c.serveDeployed(ctx, verb, cmd, token, refused, &steps)
}

// stepLog lists the steps of a session start and their times, for errors.
type stepLog []string

func (l *stepLog) add(step string, since time.Time) {
	*l = append(*l, step+" "+time.Since(since).Round(time.Millisecond).String())
}

func (l stepLog) String() string {
	if len(l) == 0 {
		return "no step before"
	}
	return "after " + strings.Join(l, ", ")
}

// warmRefusal is why the warm check refused, and what it learnt of the
// host on the way (nil when it stopped before).
type warmRefusal struct {
	reason string
	probe  *probeResult
}

// openServe starts cmdline on a new session and reads up to the hello. With
// warm, a refusal line ends it early: no session, its reason, no error.
//
// what names the step in errors; before says what preceded it and how
// long each part took, for the error of a session that could not open.
func (c *sshConn) openServe(ctx context.Context, verb, what, before, cmdline, token, path string, warm bool) (*serveSession, warmRefusal, error) {
	sc, err := c.newChannelFor(ctx, what+"; "+before)
	if err != nil {
		return nil, warmRefusal{}, err
	}
	st := &sshStream{ch: sc.ch, exitStatus: -1}
	st.reqs = &unaskedWatch{reqs: sc.reqs, onReq: st.onRequest}
	pollUnasked(st.reqs)
	c.log.Debug("serve session", "warm", warm)
	started := time.Now()
	ok, err := sc.ch.SendRequest("exec", true, ssh.Marshal(&struct{ Command string }{cmdline}))
	if err == nil && !ok {
		err = errors.New("sshd refused to run the command")
	}
	if err != nil {
		sc.ch.Close()
		return nil, warmRefusal{}, c.lost("start "+what, err)
	}
	return handshake(ctx, c, st, c.log, verb, what, before, token, path, warm, started)
}

// handshake reads a started serve command's output up to the helper's
// hello (or, with warm, a refusal of the warm check) and returns the
// session speaking over st: the same for every transport.
func handshake(ctx context.Context, c serveOwner, st Stream, log *slog.Logger, verb, what, before, token, path string, warm bool, started time.Time) (*serveSession, warmRefusal, error) {
	s := &serveSession{owner: c, st: st, log: log, path: path, stderr: &tailBuffer{max: serveStderrMax},
		stderrDone: make(chan struct{}),
		pending:    map[uint64]chan helper.ServeReply{}, done: make(chan struct{})}
	host := c.Host()
	// readLine copies each line out anyway: the buffer only sets how much
	// one read takes, and every host keeps it for its whole run.
	br := bufio.NewReaderSize(st, 1024)
	type startup struct {
		hello  bool
		reason string
		probe  *probeResult
		out    []byte // what came before, for errors
		err    error
	}
	ch := make(chan startup, 1)
	// What came so far, for the error of a start that gave up waiting.
	seenOut := &tailBuffer{max: 200}
	go func() {
		var st startup
		seen := 0
		for {
			line, err := readLine(br, serveStartupMax)
			if err != nil {
				st.err = err
				break
			}
			if seen += len(line) + 1; seen > serveStartupMax {
				st.err = fmt.Errorf("over %s printed before the helper's hello: %w", sizeString(serveStartupMax), ErrOutputCap)
				break
			}
			if len(st.out)+len(line) < serveStartupMax {
				st.out = append(append(st.out, line...), '\n')
			}
			seenOut.Write(line)
			seenOut.Write([]byte{'\n'})
			text := string(line)
			if warm {
				if r, ok := warmReason(text); ok {
					st.reason = r
					break
				}
				if pr, ok := parseWarmProbe(host, text, token); ok {
					st.probe = &pr
					continue
				}
				if p, ok := strings.CutPrefix(text, warmExecPrefix); ok {
					s.path = p
					continue
				}
			}
			var h helper.ServeHello
			if strings.HasPrefix(text, `{"serve":`) && json.Unmarshal(line, &h) == nil && h.Token == token {
				if h.Serve != helper.ServeProtocol {
					st.err = fmt.Errorf("helper speaks serve protocol %d, want %d", h.Serve, helper.ServeProtocol)
					break
				}
				s.pid, st.hello = h.PID, true
				break
			}
		}
		ch <- st
	}()
	var up startup
	select {
	case up = <-ch:
	case <-ctx.Done():
		st.Close()
		// The login shell and its startup files run before the command:
		// a ~/.bashrc waiting on a lock (pyenv rehash) stalls every session.
		return nil, warmRefusal{}, fmt.Errorf("%s: helper %s: %s: no hello from the helper in %s (%s; the login shell's "+
			"startup files run first; stdout ended %.200q, stderr %.200q): %w", host, verb, what,
			time.Since(started).Round(time.Millisecond), before, seenOut.Bytes(), tail(s.stderrTail(serveStderrWait), 200), ctx.Err())
	}
	switch {
	case up.hello:
		go s.read(br)
		return s, warmRefusal{}, nil
	case up.reason != "":
		st.Close()
		return nil, warmRefusal{reason: up.reason, probe: up.probe}, nil
	}
	// Ended before its hello: sudo refused, a noexec mount, a missing
	// sudo... decodeHelper words these as for a one-shot call.
	status, signal, exited := st.Exit(serveExitWait)
	st.Close()
	res := &Result{Stdout: up.out, Stderr: s.stderrTail(serveStderrWait)}
	switch {
	case status >= 0:
		res.ExitCode = status
	case signal != "":
		// As a shell and x/crypto's Session report it: 128 + the number.
		res.ExitCode = 128 + int(unix.SignalNum("SIG"+signal))
	case !exited:
		return nil, warmRefusal{}, c.lost(what+" (ended before its hello)", errors.New("no exit status from sshd"))
	default:
		return nil, warmRefusal{}, c.lost(what+" (ended before its hello)", &ssh.ExitMissingError{})
	}
	if up.err != nil && !errors.Is(up.err, io.EOF) {
		return nil, warmRefusal{}, fmt.Errorf("%s: helper %s: %s: %w (stderr %.200q)", host, verb, what, up.err, res.Stderr)
	}
	if res.ExitCode == 0 {
		return nil, warmRefusal{}, fmt.Errorf("%s: helper %s: %s exited 0 without the helper's hello (stdout ends %.200q, stderr %.200q)",
			host, verb, what, tail(up.out, 200), res.Stderr)
	}
	return nil, warmRefusal{}, decodeHelper(host, verb, s.path, c.becomes(), res, nil)
}

// read delivers response lines to their callers until the session ends.
func (s *serveSession) read(br *bufio.Reader) {
	for {
		line, err := readLine(br, HelperMaxOutput)
		if err != nil {
			s.end(err)
			return
		}
		var r struct {
			ID *uint64 `json:"id"`
			helper.ServeReply
			Fatal string `json:"fatal"`
		}
		if err := json.Unmarshal(line, &r); err != nil || r.ID == nil {
			why := r.Fatal
			if why == "" {
				why = fmt.Sprintf("line %.120q is no response", line)
			}
			s.end(fmt.Errorf("helper out of step: %s", why))
			return
		}
		r.ServeReply.ID = *r.ID
		if r.Progress != nil {
			// Not the reply: what the request did so far.
			s.mu.Lock()
			fn := s.progress[r.ServeReply.ID]
			s.mu.Unlock()
			if fn != nil {
				fn(r.Progress)
			}
			continue
		}
		s.mu.Lock()
		ch := s.pending[r.ServeReply.ID]
		delete(s.pending, r.ServeReply.ID)
		delete(s.progress, r.ServeReply.ID)
		s.mu.Unlock()
		if ch != nil { // nil: its caller gave up (a late response)
			ch <- r.ServeReply
		}
	}
}

// end records why the session ended, stops it and wakes every caller.
func (s *serveSession) end(why error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.pending = nil
	s.mu.Unlock()
	// Closing the channel ends the helper's stdin; closing stdin here
	// would race with a writer blocked on the window.
	s.st.Close()
	// The exit status, when sshd sent one before the channel closed (a
	// peer that stopped answering sends nothing: do not wait for it).
	switch status, signal, _ := s.st.Exit(serveExitWait); {
	case signal != "":
		s.exitText = "killed by signal " + signal
	case status >= 0:
		s.exitText = fmt.Sprintf("exit status %d", status)
	}
	s.endErr = why
	close(s.done)
}

// onRequest takes a request sshd sent on the session's channel: its exit
// status or signal, or a keepalive (refused, as x/crypto's Session does).
func (s *sshStream) onRequest(r *ssh.Request) {
	switch r.Type {
	case "exit-status":
		if len(r.Payload) >= 4 {
			s.exitMu.Lock()
			s.exitStatus = int(binary.BigEndian.Uint32(r.Payload))
			s.exitMu.Unlock()
		}
	case "exit-signal":
		var sig struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}
		if ssh.Unmarshal(r.Payload, &sig) == nil {
			s.exitMu.Lock()
			s.exitSignal = sig.Signal
			s.exitMu.Unlock()
		}
	}
	refuse(r)
}

// exit is the exit status (-1: none) and signal sshd sent so far.
func (s *sshStream) exit() (int, string) {
	s.exitMu.Lock()
	defer s.exitMu.Unlock()
	return s.exitStatus, s.exitSignal
}

// serveStderrWait bounds reading stderr after the session: what sshd has
// sent is there at once; a channel closed by gpush ends when sshd answers.
const serveStderrWait = time.Second

// stderrTail reads the session's stderr (once, on a goroutine that ends
// with the channel) for up to wait, and returns what came so far.
func (s *serveSession) stderrTail(wait time.Duration) []byte {
	s.stderrOnce.Do(func() {
		go func() {
			defer close(s.stderrDone)
			io.Copy(s.stderr, s.st.Stderr())
		}()
	})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.stderrDone:
	case <-t.C:
	}
	return s.stderr.Bytes()
}

func (s *serveSession) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// call sends one request and waits for its response, ctx, or the end.
func (s *serveSession) call(ctx context.Context, verb string, body []byte, resp any) error {
	host := s.owner.Host()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		<-s.done
		return s.lostErr(verb)
	}
	s.nextID++
	id := s.nextID
	ch := make(chan helper.ServeReply, 1)
	s.pending[id] = ch
	if fn := progressOf(ctx); fn != nil {
		if s.progress == nil {
			s.progress = map[uint64]func(json.RawMessage){}
		}
		s.progress[id] = fn
	}
	s.mu.Unlock()
	line, err := json.Marshal(helper.ServeRequest{ID: id, Verb: verb, Req: body})
	if err != nil {
		s.forget(id)
		return fmt.Errorf("%s: helper %s: encode request: %w", host, verb, err)
	}
	// The write is cut off by ctx too: a helper that stopped reading
	// (SIGSTOP, a hung host) fills the channel's window.
	wrote := make(chan error, 1)
	go func() { wrote <- s.writeLine(line) }()
	var werr error
	select {
	case werr = <-wrote:
	case <-ctx.Done():
		select {
		case werr = <-wrote: // sent after all: cancel it below
		default:
			// Part of the line may be out: the stream is out of step.
			s.forget(id)
			s.end(fmt.Errorf("request write cut off: %w", ctx.Err()))
			return fmt.Errorf("%s: helper %s: %w", host, verb, ctx.Err())
		}
	}
	if werr != nil {
		// The session is broken; a line not wholly sent is never run
		// (the helper acts on whole lines only).
		s.end(werr)
		return s.lostErr(verb)
	}
	select {
	case r := <-ch:
		return s.decode(verb, r, resp)
	case <-s.done:
		select {
		case r := <-ch: // answered just before the end
			return s.decode(verb, r, resp)
		default:
		}
		return s.lostErr(verb)
	case <-ctx.Done():
		go func() {
			cancel, _ := json.Marshal(helper.ServeRequest{ID: id, Cancel: true})
			if err := s.writeLine(cancel); err != nil {
				s.log.Debug("serve: cancel frame not sent", "id", id, "err", err)
			}
		}()
		// The helper answers a cancelled request with what it did so far
		// (the signals a kill sent, a wait's last reading): read it for a
		// moment, so that the record of what was done survives Ctrl-C.
		t := time.NewTimer(CancelAnswerWait)
		defer t.Stop()
		select {
		case r := <-ch:
			if derr := s.decode(verb, r, resp); derr == nil {
				return fmt.Errorf("%s: helper %s: %w", host, verb, &AnsweredError{Err: ctx.Err()})
			}
		case <-s.done:
		case <-t.C:
		}
		s.forget(id)
		return fmt.Errorf("%s: helper %s: %w", host, verb, ctx.Err())
	}
}

type progressKey struct{}

// WithProgress makes the helper calls under ctx hand each progress report
// of their request (helper.Progress, as JSON) to fn, as it comes: from
// the connection's reader, so fn must not block for long.
func WithProgress(ctx context.Context, fn func(json.RawMessage)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

func progressOf(ctx context.Context) func(json.RawMessage) {
	fn, _ := ctx.Value(progressKey{}).(func(json.RawMessage))
	return fn
}

// CancelAnswerWait bounds how long a cancelled helper call waits for the
// helper's answer to the cancel (what it did before it stopped).
var CancelAnswerWait = 500 * time.Millisecond

// AnsweredError is a helper call cut off by its context whose response
// was still read (the helper's answer to the cancel): the response value
// holds what the helper did before it stopped. It unwraps to the
// context's error.
type AnsweredError struct{ Err error }

func (e *AnsweredError) Error() string {
	return e.Err.Error() + " (the helper's answer to the cancel was read)"
}

func (e *AnsweredError) Unwrap() error { return e.Err }

// Answered reports whether err is a cut-off call whose response was read.
func Answered(err error) bool {
	var a *AnsweredError
	return errors.As(err, &a)
}

func (s *serveSession) forget(id uint64) {
	s.mu.Lock()
	delete(s.pending, id)
	delete(s.progress, id)
	s.mu.Unlock()
}

func (s *serveSession) writeLine(line []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.st.Write(append(line, '\n'))
	return err
}

// decode turns a response into resp or the error a one-shot run with the
// same output would give.
func (s *serveSession) decode(verb string, r helper.ServeReply, resp any) error {
	res := &Result{Stdout: r.Resp}
	if r.Failed {
		res.ExitCode = 1
	}
	return decodeHelper(s.owner.Host(), verb, s.path, s.owner.becomes(), res, resp)
}

// lostErr is the error of a call the session's end cut off.
func (s *serveSession) lostErr(verb string) error {
	what := "helper " + verb + " (serve session ended mid-call; not retried: the helper may have acted on it)"
	if why := s.owner.deadCause(s.endErr); why != nil {
		return s.owner.lost(what, s.endErr)
	}
	exit := s.exitText
	if exit == "" {
		exit = "no exit status"
	}
	return fmt.Errorf("%s: %s: helper %s, %v; stderr: %s", s.owner.Host(), what, exit, s.endErr,
		strings.TrimSpace(string(s.stderrTail(serveStderrWait))))
}

// readLine returns the next line without its newline, holding at most max
// bytes, accumulated as they arrive; an unterminated last line is EOF.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > max+1 {
			return nil, fmt.Errorf("line over %s: %w", sizeString(int64(max)), ErrOutputCap)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			return nil, err
		}
	}
}

// tailBuffer keeps the last max bytes written to it, growing only as
// bytes arrive.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > t.max {
		p = p[len(p)-t.max:]
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}

// ReadFrom is what io.Copy into a tailBuffer calls (it prefers it): a small
// buffer instead of io.Copy's 32 KiB, for streams that are mostly silent.
func (t *tailBuffer) ReadFrom(r io.Reader) (int64, error) {
	return copySmall(t, r, 512)
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
