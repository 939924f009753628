package modulestest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/remote"
)

// ErrConnLost is what a Conn wraps once Lose was called: the remote
// package's own sentinel, as a real connection that died wraps it.
var ErrConnLost = remote.ErrConnectionLost

// Call is one recorded call on a Conn.
type Call struct {
	// Method is "helper", "run", "put" or "get".
	Method string
	// Verb is the helper verb; Request the decoded helper request
	// (helper.KillRequest, ...).
	Verb    string
	Request any
	Argv    []string
	Opts    remote.RunOptions
	Stdin   string
	Path    string
	Data    string
	Mode    os.FileMode
}

// Conn is a fake remote.Conn. Helper requests go through JSON both ways, as
// on the wire, and are served by the GPU host model.
type Conn struct {
	Model *GPUHost
	// RunFunc answers Run; nil answers exit 0 with no output.
	RunFunc func(argv []string, opts remote.RunOptions, stdin string) (*remote.Result, error)
	// Latency is added to every call (honouring ctx), to test timeouts.
	Latency time.Duration
	// Setup is how long StartHelper takes the first time (a cold host's
	// warm check and upload), honouring ctx; later calls return at once.
	Setup time.Duration
	// SetupErr, when set, is what StartHelper fails with once Setup has
	// passed (a noexec folder, a refused one: a start that fails by itself).
	SetupErr error

	name    string
	mu      sync.Mutex
	calls   []Call
	files   map[string][]byte
	lost    bool
	closed  bool
	started bool
}

// NewConn returns a fake connection to the model under the host name name.
func NewConn(name string, model *GPUHost) *Conn {
	return &Conn{Model: model, name: name, files: map[string][]byte{}}
}

var (
	_ remote.Conn          = (*Conn)(nil)
	_ remote.HelperStarter = (*Conn)(nil)
)

// StartHelper takes Setup once, as a real Conn's first start does.
func (c *Conn) StartHelper(ctx context.Context, verb string) error {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if started || (c.Setup <= 0 && c.SetupErr == nil) {
		return ctx.Err()
	}
	t := time.NewTimer(c.Setup)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: helper %s: start: %w", c.name, verb, ctx.Err())
	case <-t.C:
	}
	if c.SetupErr != nil {
		return c.SetupErr
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	return nil
}

// Host returns the host name.
func (c *Conn) Host() string { return c.name }

// Lose makes every later call fail with ErrConnLost.
func (c *Conn) Lose() {
	c.mu.Lock()
	c.lost = true
	c.mu.Unlock()
}

// Closed reports whether Close was called.
func (c *Conn) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Calls returns the calls so far, optionally only those of one method or verb.
func (c *Conn) Calls(methodOrVerb string) []Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Call
	for _, call := range c.calls {
		if methodOrVerb == "" || call.Method == methodOrVerb || call.Verb == methodOrVerb {
			out = append(out, call)
		}
	}
	return out
}

// File returns what Put wrote at path.
func (c *Conn) File(path string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.files[path]
	return b, ok
}

// SetFile makes path readable by Get.
func (c *Conn) SetFile(path string, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.files[path] = data
}

func (c *Conn) begin(ctx context.Context, call Call) error {
	c.mu.Lock()
	c.calls = append(c.calls, call)
	lost, closed := c.lost, c.closed
	c.mu.Unlock()
	if closed {
		return errors.New("fake conn: use after Close")
	}
	if lost {
		return ErrConnLost
	}
	if c.Latency > 0 {
		t := time.NewTimer(c.Latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return ctx.Err()
}

// Helper serves one helper verb from the model. Its errors start
// "HOST: helper VERB: ", as remote's Conns' do.
func (c *Conn) Helper(ctx context.Context, verb string, req, resp any) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: helper %s: %w", c.name, verb, err)
		}
	}()
	raw, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", verb, err)
	}
	decoded, err := decodeRequest(verb, raw)
	if err != nil {
		return err
	}
	if err := c.begin(ctx, Call{Method: "helper", Verb: verb, Request: decoded}); err != nil {
		return err
	}
	out, err := c.Model.answer(ctx, decoded)
	if err != nil {
		return err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode %s response: %w", verb, err)
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return fmt.Errorf("decode %s response: %w", verb, err)
	}
	return nil
}

// Serve answers one helper request from the model, as a helper.Handler:
// body is the verb's JSON request, decoded strictly as the helper does.
// A serve loop (helper.ServeLoopOn) over it is the model on the wire.
func (g *GPUHost) Serve(ctx context.Context, verb string, body []byte) (any, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}") // the zero request, as empty stdin
	}
	decoded, err := decodeRequest(verb, body)
	if err != nil {
		return nil, err
	}
	return g.answer(ctx, decoded)
}

// decodeRequest decodes a verb's request strictly, into its wire type.
func decodeRequest(verb string, raw []byte) (any, error) {
	var err error
	var decoded any
	switch verb {
	case helper.VerbSnapshot:
		var r helper.SnapshotRequest
		err = decodeStrict(raw, &r)
		decoded = r
	case helper.VerbKill:
		var r helper.KillRequest
		err = decodeStrict(raw, &r)
		decoded = r
	case helper.VerbWaitFree:
		var r helper.WaitFreeRequest
		err = decodeStrict(raw, &r)
		decoded = r
	case helper.VerbUnit:
		var r helper.UnitRequest
		err = decodeStrict(raw, &r)
		decoded = r
	case helper.VerbManagers:
		var r helper.ManagersRequest
		err = decodeStrict(raw, &r)
		decoded = r
	default:
		err = fmt.Errorf("unknown verb %q", verb)
	}
	if err != nil {
		return nil, fmt.Errorf("gpush-helper %s: bad request: %w", verb, err)
	}
	return decoded, nil
}

// answer runs a decoded request on the model.
func (g *GPUHost) answer(ctx context.Context, decoded any) (any, error) {
	switch r := decoded.(type) {
	case helper.SnapshotRequest:
		return g.snapshot(), nil
	case helper.KillRequest:
		return g.kill(ctx, r)
	case helper.WaitFreeRequest:
		return g.waitFree(ctx, r)
	case helper.ManagersRequest:
		return g.managers(ctx, r), nil
	case helper.UnitRequest:
		if len(r.Units) > 0 {
			return g.unitBatch(r), nil
		}
		if r.Unit == "" || strings.HasPrefix(r.Unit, "-") {
			return nil, fmt.Errorf("gpush-helper unit: invalid unit name %q", r.Unit)
		}
		return g.unit(r), nil
	}
	return nil, fmt.Errorf("model: no answer for %T", decoded)
}

func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// Run records the command and answers through RunFunc. Its errors start
// "HOST: ARGV0: ", as remote's Conns' do.
func (c *Conn) Run(ctx context.Context, argv []string, opts remote.RunOptions) (*remote.Result, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: run: empty command", c.name)
	}
	var stdin string
	if opts.Stdin != nil {
		b, err := io.ReadAll(opts.Stdin)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: read stdin: %w", c.name, argv[0], err)
		}
		stdin = string(b)
	}
	if err := c.begin(ctx, Call{Method: "run", Argv: append([]string(nil), argv...), Opts: opts, Stdin: stdin}); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c.name, argv[0], err)
	}
	if c.RunFunc == nil {
		return &remote.Result{}, nil
	}
	return c.RunFunc(argv, opts, stdin)
}

// Put stores data in memory.
func (c *Conn) Put(ctx context.Context, path string, data io.Reader, mode os.FileMode) error {
	b, err := io.ReadAll(data)
	if err != nil {
		return fmt.Errorf("%s: put %s: %w", c.name, path, err)
	}
	if err := c.begin(ctx, Call{Method: "put", Path: path, Data: string(b), Mode: mode}); err != nil {
		return fmt.Errorf("%s: put %s: %w", c.name, path, err)
	}
	c.SetFile(path, b)
	return nil
}

// Get reads what Put or SetFile stored.
func (c *Conn) Get(ctx context.Context, path string) ([]byte, error) {
	if err := c.begin(ctx, Call{Method: "get", Path: path}); err != nil {
		return nil, fmt.Errorf("%s: get %s: %w", c.name, path, err)
	}
	b, ok := c.File(path)
	if !ok {
		return nil, fmt.Errorf("%s: get %s: %w", c.name, path, os.ErrNotExist)
	}
	return b, nil
}

// Close marks the connection closed.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}
