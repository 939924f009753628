package lua

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/remote"
)

// hostState is the modules.Host of one host for one run or session.
type hostState struct {
	inv     inventory.Host
	vars    map[string]any // host vars with the extra vars on top
	script  string         // the script's name, for errors about its vars
	decls   VarDecls       // the script's declarations; none: vars is not strict
	from    map[string]string
	cfg     helper.Config
	check   bool
	dial    func(context.Context, inventory.Host) (remote.Conn, error)
	logger  *slog.Logger
	onEvent func(Event)
	stats   modules.Stats
	respawn modules.Managers

	mu      sync.Mutex
	dialed  bool
	conn    remote.Conn
	dialErr error
	connErr error
	// endStatus is how the script ended the host itself: StatusFailed
	// (fail(), the memory limit) or StatusSkipped (skip()); "" while it runs.
	endStatus string
	endMsg    string
	// rows the script recorded (report.row, fail/skip's rows) and its
	// column choice: kept whatever the host's outcome.
	rows    []any
	columns []string
}

// MaxRows bounds the rows one host may record, so that a loop calling
// report.row cannot grow the controller's memory without end.
const MaxRows = 100000

// newHostState merges h's vars with the extra vars and converts those decls
// declares (nil for a REPL: no script, vars as given); script names the
// script in errors.
func newHostState(h inventory.Host, o Options, script string, decls VarDecls) (*hostState, error) {
	vars := mergeVars(h.Vars, o.ExtraVars)
	if err := ApplyVars(script, decls, vars); err != nil {
		return nil, fmt.Errorf("host %s: %w", h.Name, err)
	}
	cfg, err := helperConfig(vars)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", h.Name, err)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &hostState{inv: h, vars: vars, script: script, decls: decls, from: VarSources(decls, h.Vars, o.ExtraVars),
		cfg: cfg, check: o.Check, dial: o.Dial,
		logger: logger.With("host", h.Name), onEvent: o.OnEvent}, nil
}

// mergeVars is the host's vars with the extra vars on top, in a new map.
func mergeVars(hostVars, extra map[string]any) map[string]any {
	vars := make(map[string]any, len(hostVars)+len(extra))
	for k, v := range hostVars {
		vars[k] = v
	}
	for k, v := range extra {
		vars[k] = v
	}
	return vars
}

// SetScriptVars sets L's vars and vars_from as a run of script (declaring
// decls) sets them on a host with hostVars given extra as -e: checked and
// converted the same way, strict the same way. For testing scripts on a
// model host without a run.
func SetScriptVars(L *glua.LState, script string, decls VarDecls, hostVars, extra map[string]any) error {
	extra, err := CheckExtraVars(script, decls, extra)
	if err != nil {
		return err
	}
	vars := mergeVars(hostVars, extra)
	if err := ApplyVars(script, decls, vars); err != nil {
		return err
	}
	h := &hostState{inv: inventory.Host{Vars: hostVars}, vars: vars, script: script, decls: decls,
		from: VarSources(decls, hostVars, extra)}
	L.SetGlobal("vars", scriptVars(L, h))
	L.SetGlobal("vars_from", varsFrom(L, h))
	return nil
}

// helperConfig reads the gpush_* vars that say where things are on the host.
func helperConfig(vars map[string]any) (helper.Config, error) {
	var c helper.Config
	str := func(key string) (string, error) {
		v, ok := vars[key]
		if !ok || v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("var %s: want a string, got %T %v", key, v, v)
		}
		return s, nil
	}
	var err error
	if c.DevDir, err = str("gpush_dev_dir"); err != nil {
		return c, err
	}
	if c.NvidiaSMI, err = str("gpush_nvidia_smi"); err != nil {
		return c, err
	}
	if c.Systemctl, err = str("gpush_systemctl"); err != nil {
		return c, err
	}
	if c.RootDir, err = str("gpush_root_dir"); err != nil {
		return c, err
	}
	switch v := vars["gpush_protected"].(type) {
	case nil:
	case string: // "a,b" as -e gives it
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.Protected = append(c.Protected, p)
			}
		}
	case []any:
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return c, fmt.Errorf("var gpush_protected[%d]: want a process name, got %T %v", i, e, e)
			}
			c.Protected = append(c.Protected, s)
		}
	case []string:
		c.Protected = append(c.Protected, v...)
	default:
		return c, fmt.Errorf("var gpush_protected: want a list of process names, got %T", v)
	}
	switch v := vars["gpush_smi_timeout"].(type) {
	case nil:
	case string:
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return c, fmt.Errorf("var gpush_smi_timeout: %q is not a duration like \"10s\"", v)
		}
		c.SMITimeout = helper.Duration(d)
	case int, int64, float64:
		f := toFloat(v)
		if f < 0 || math.IsNaN(f) {
			return c, fmt.Errorf("var gpush_smi_timeout: %v is negative", v)
		}
		c.SMITimeout = helper.Duration(f * float64(time.Second))
	default:
		return c, fmt.Errorf("var gpush_smi_timeout: want a duration like \"10s\", got %T", v)
	}
	return c, nil
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return math.NaN()
}

func (h *hostState) Name() string                { return h.inv.Name }
func (h *hostState) Address() string             { return h.inv.Address }
func (h *hostState) Groups() []string            { return h.inv.Groups }
func (h *hostState) Vars() map[string]any        { return h.vars }
func (h *hostState) HelperConfig() helper.Config { return h.cfg }
func (h *hostState) Check() bool                 { return h.check }
func (h *hostState) Logger() *slog.Logger        { return h.logger }
func (h *hostState) Stats() *modules.Stats       { return &h.stats }
func (h *hostState) Managers() *modules.Managers { return &h.respawn }

// Conn dials once; every later call gets the same connection or error.
func (h *hostState) Conn(ctx context.Context) (remote.Conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dialed {
		if h.dial == nil {
			return nil, errors.New("no way to connect: Options.Dial is nil")
		}
		h.dialed = true
		h.conn, h.dialErr = h.dial(ctx, h.inv)
		if h.dialErr == nil && h.conn == nil {
			h.dialErr = errors.New("dial returned no connection")
		}
	}
	return h.conn, h.dialErr
}

func (h *hostState) Emit(e Event) {
	if e.Host == "" {
		e.Host = h.inv.Name
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if h.onEvent != nil {
		h.onEvent(e)
		return
	}
	lvl := slog.LevelInfo
	switch e.Level {
	case modules.LevelDebug:
		lvl = slog.LevelDebug
	case modules.LevelWarn:
		lvl = slog.LevelWarn
	case modules.LevelError:
		lvl = slog.LevelError
	}
	h.logger.Log(context.Background(), lvl, e.Message, "kind", e.Kind)
}

func (h *hostState) ConnFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.connErr == nil {
		h.connErr = err
	}
}

func (h *hostState) connError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connErr
}

func (h *hostState) setFailed(msg string) { h.setEnd(StatusFailed, msg) }

// setEnd records that the script ended the host (fail, skip, the memory
// limit); the first end stands: a host cannot be un-failed by a later skip.
func (h *hostState) setEnd(status, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.endStatus == "" {
		h.endStatus, h.endMsg = status, msg
	}
}

// ending reports how the script ended the host ("" if it did not).
func (h *hostState) ending() (status, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.endStatus, h.endMsg
}

// failure reports whether the script ended the host (fail(), skip()) with
// its message and, for a REPL, clears it.
func (h *hostState) failure(clear bool) (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, m := h.endStatus != "", h.endMsg
	if clear {
		h.endStatus, h.endMsg = "", ""
	}
	return f, m
}

// addRows records rows for the fleet table, at most MaxRows in all.
func (h *hostState) addRows(rows ...any) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.rows)+len(rows) > MaxRows {
		return fmt.Errorf("more than %d rows recorded on host %s", MaxRows, h.inv.Name)
	}
	h.rows = append(h.rows, rows...)
	return nil
}

func (h *hostState) setColumns(cols []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.columns = cols
}

// takeRows returns the recorded rows and the column choice and forgets
// them: a REPL session shows each input's rows once.
func (h *hostState) takeRows() ([]any, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rows, cols := h.rows, h.columns
	h.rows, h.columns = nil, nil
	return rows, cols
}

// tableRows returns the recorded rows and the column choice.
func (h *hostState) tableRows() ([]any, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]any(nil), h.rows...), append([]string(nil), h.columns...)
}

// close closes the connection if one was made.
func (h *hostState) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil
	}
	err := h.conn.Close()
	h.conn, h.dialErr = nil, fmt.Errorf("connection to %s already closed", h.inv.Name)
	if err != nil {
		return fmt.Errorf("close connection to %s: %w", h.inv.Name, err)
	}
	return nil
}
