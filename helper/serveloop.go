package helper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// VerbServe is the long-lived mode: `gpush-helper serve TOKEN` answers
// every request of a run on one SSH session, one JSON line each way, so
// that a helper call costs one round trip instead of a session.
const VerbServe = "serve"

// ServeProtocol is the version of the serve framing, sent in the hello.
const ServeProtocol = 1

// ServeHello is the first line serve writes. The controller skips what a
// shell startup file printed before it, and matches Token (its own random
// choice) so that such noise cannot pass for the hello.
type ServeHello struct {
	Serve   int    `json:"serve"`
	Version string `json:"version"`
	Token   string `json:"token"`
	PID     int    `json:"pid"`
}

// ServeRequest is one request line: a verb with its request, or a cancel
// of the request with that ID.
type ServeRequest struct {
	ID     uint64          `json:"id"`
	Verb   string          `json:"verb,omitempty"`
	Req    json.RawMessage `json:"req,omitempty"`
	Cancel bool            `json:"cancel,omitempty"`
}

// ServeReply is one response line: Resp is exactly what Serve writes for
// the verb (an ErrorResponse when it failed, with Failed set).
//
// A line with Progress instead is no reply: the request goes on (see
// Progress); any number of them may come before its reply.
type ServeReply struct {
	ID       uint64          `json:"id"`
	Resp     json.RawMessage `json:"resp,omitempty"`
	Failed   bool            `json:"failed,omitempty"`
	Progress json.RawMessage `json:"progress,omitempty"`
}

// ServeFatal is the last line of a serve loop whose input is out of step
// (a line that is no request): nothing after it can be matched to an id.
type ServeFatal struct {
	Fatal   string `json:"fatal"`
	Version string `json:"version"`
}

// parentPoll is how often the loop checks that its parent (sshd's session,
// or sudo) still lives: a killed sshd may leave stdin open in a grandchild.
var parentPoll = time.Second

// ServeLoop runs the serve mode on stdin/stdout until stdin ends (exit 0),
// the parent dies (exit 0), or a line is out of step (exit 2). Every
// request runs in its own goroutine under its own context; ending the loop
// cancels them all and waits for them, so their children are stopped.
func ServeLoop(ctx context.Context, token string, stdin io.Reader, stdout io.Writer) int {
	return serveLoop(ctx, token, stdin, stdout, serve, true)
}

// Handler answers one request of a serve loop as serve does for the real
// host: the verb's response value (written as Serve writes it, bounded by
// MaxResponse) or an error (an ErrorResponse with the reply's Failed set).
// body is the verb's JSON request.
type Handler func(ctx context.Context, verb string, body []byte) (any, error)

// ServeLoopOn is ServeLoop with every request answered by h instead of this
// host: a model of a host served in-process over pipes (the bench's
// simulated hosts), framed, matched, cancelled and ended exactly as the
// helper's own loop. It has no parent to watch: it ends with stdin or ctx.
func ServeLoopOn(ctx context.Context, token string, stdin io.Reader, stdout io.Writer, h Handler) int {
	return serveLoop(ctx, token, stdin, stdout, func(ctx context.Context, verb string, r io.Reader) (any, error) {
		body, err := io.ReadAll(io.LimitReader(r, maxRequest+1))
		if err != nil {
			return nil, fmt.Errorf("read request: %w", err)
		}
		if len(body) > maxRequest {
			return nil, fmt.Errorf("request larger than %d bytes", maxRequest)
		}
		return h(ctx, verb, body)
	}, false)
}

// answerFunc answers one verb's request read from r (serve, or a Handler).
type answerFunc func(ctx context.Context, verb string, r io.Reader) (any, error)

func serveLoop(ctx context.Context, token string, stdin io.Reader, stdout io.Writer, answer answerFunc, watchParent bool) int {
	ctx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	var wmu sync.Mutex
	write := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		wmu.Lock()
		defer wmu.Unlock()
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	if err := write(ServeHello{Serve: ServeProtocol, Version: Version, Token: token, PID: os.Getpid()}); err != nil {
		return 1
	}

	// The session outlives every request (deferred first, it runs last):
	// the stream a wait left lingering is stopped once all have returned.
	ss := newSession()
	ctx = withSession(ctx, ss)
	defer ss.close()

	var mu sync.Mutex
	running := map[uint64]context.CancelFunc{}
	var wg sync.WaitGroup
	defer wg.Wait() // after cancelAll (deferred later, runs first)
	defer cancelAll()

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(stdin, 4096)
		for {
			line, err := readLine(br, maxRequest)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case lines <- line:
			case <-ctx.Done():
				return
			}
		}
	}()
	ppid := os.Getppid()
	// Without a parent to watch, tick stays nil: its case never fires.
	var tick <-chan time.Time
	if watchParent {
		t := time.NewTicker(parentPoll)
		defer t.Stop()
		tick = t.C
	}
	for {
		var line []byte
		select {
		case line = <-lines:
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return 0 // the controller is gone: cancel, wait, done
			}
			_ = write(ServeFatal{Fatal: "read request: " + err.Error(), Version: Version})
			return 2
		case <-tick:
			if os.Getppid() != ppid {
				return 0
			}
			continue
		case <-ctx.Done():
			return 0
		}
		var req struct {
			ID *uint64 `json:"id"`
			ServeRequest
		}
		if err := json.Unmarshal(line, &req); err != nil || req.ID == nil {
			why := "line has no id"
			if err != nil {
				why = "line is not a JSON request: " + err.Error()
			}
			_ = write(ServeFatal{Fatal: cutText(why, maxErrorText), Version: Version})
			return 2
		}
		id := *req.ID
		mu.Lock()
		cancel, busy := running[id]
		mu.Unlock()
		if req.Cancel {
			if busy {
				cancel()
			}
			continue // a cancel for a finished request crossed its response
		}
		if busy {
			_ = write(errorReply(id, fmt.Sprintf("request id %d is already running", id)))
			continue
		}
		rctx, rcancel := context.WithCancel(ctx)
		rctx = WithProgress(rctx, func(p Progress) {
			if b, err := json.Marshal(p); err == nil {
				_ = write(ServeReply{ID: id, Progress: b})
			}
		})
		mu.Lock()
		running[id] = rcancel
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply := runRequest(rctx, id, req.Verb, req.Req, answer)
			mu.Lock()
			delete(running, id)
			mu.Unlock()
			rcancel()
			_ = write(reply)
		}()
	}
}

// runRequest answers one request the way the one-shot verb would.
func runRequest(ctx context.Context, id uint64, verb string, body json.RawMessage, answer answerFunc) ServeReply {
	if verb == VerbServe {
		return errorReply(id, "serve cannot be nested")
	}
	var out bytes.Buffer
	err := serveWith(ctx, verb, bytes.NewReader(body), &out, answer)
	return ServeReply{ID: id, Resp: bytes.TrimRight(out.Bytes(), "\n"), Failed: err != nil}
}

func errorReply(id uint64, msg string) ServeReply {
	b, _ := json.Marshal(ErrorResponse{Version: Version, Error: msg})
	return ServeReply{ID: id, Resp: b, Failed: true}
}

// errLineTooLong is a request line over the limit: the stream is out of step.
var errLineTooLong = errors.New("request line too long")

// readLine returns the next line without its newline, accumulating at most
// max bytes; an unterminated last line counts as EOF (it was cut off).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > max+1 {
			return nil, fmt.Errorf("%w: over %d bytes", errLineTooLong, max)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}
