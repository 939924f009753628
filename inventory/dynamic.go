package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// KindScript is an inventory printed by an executable (Ansible's inventory
// script protocol: --list, then --host NAME when _meta.hostvars is absent).
const KindScript Kind = "script"

// ScriptOptions bounds the runs of an inventory script.
type ScriptOptions struct {
	// Timeout bounds the whole load: the --list run and every --host run
	// together, so that many slow --host runs cannot take many times it.
	// 0 means $GPUSH_INVENTORY_TIMEOUT (a Go duration or seconds), else 30s.
	Timeout time.Duration
	// MaxOutput caps the stdout read from one run; 0 means the input cap
	// (Options.MaxInputSize, see InputCap).
	MaxOutput int64

	// maxInput is Options.MaxInputSize, for the script's vars files.
	maxInput int64
}

const (
	defaultScriptTimeout = 30 * time.Second
	// scriptStderrKeep is how much of a script's stderr is kept for errors:
	// the end, where the reason usually is.
	scriptStderrKeep = 16 << 10
	scriptStderrShow = 2 << 10
	// scriptPipeGrace is how long stdout/stderr are still read after the
	// script exited or was killed, when a process it left behind holds them.
	scriptPipeGrace = 2 * time.Second
	// TimeoutEnv names the environment variable that sets the default timeout.
	TimeoutEnv = "GPUSH_INVENTORY_TIMEOUT"
)

var (
	errScriptTimeout  = errors.New("timed out")
	errScriptTooLarge = errors.New("too much output")
)

func (o ScriptOptions) withDefaults() (ScriptOptions, error) {
	if o.Timeout == 0 {
		o.Timeout = defaultScriptTimeout
		if s := strings.TrimSpace(os.Getenv(TimeoutEnv)); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				n, nerr := strconv.ParseFloat(s, 64)
				if nerr != nil {
					return o, fmt.Errorf("$%s=%q: want a duration (45s, 2m) or seconds", TimeoutEnv, s)
				}
				d = time.Duration(n * float64(time.Second))
			}
			if d <= 0 {
				return o, fmt.Errorf("$%s=%q: must be positive", TimeoutEnv, s)
			}
			o.Timeout = d
		}
	}
	if o.Timeout < 0 {
		return o, fmt.Errorf("inventory script timeout %s: must be positive", o.Timeout)
	}
	if o.MaxOutput <= 0 {
		max, err := InputCap(o.maxInput)
		if err != nil {
			return o, err
		}
		o.MaxOutput = max
	}
	return o, nil
}

// IsScript reports whether path is an inventory script: a regular file we
// may execute that starts with "#!" or is an ELF binary. An executable
// file without either is read as YAML/INI: Ansible tries to run it, gets
// ENOEXEC and falls back to those parsers, and a file copied from a
// filesystem that marks everything executable must still load.
func IsScript(path string) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("inventory %s: %w", path, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 || unix.Access(path, unix.X_OK) != nil {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("inventory %s: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, 4)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("inventory %s: %w", path, err)
	}
	head = head[:n]
	return bytes.HasPrefix(head, []byte("#!")) || bytes.Equal(head, []byte("\x7fELF")), nil
}

// LoadScript runs an inventory script as Ansible's script plugin does:
// `PATH --list` prints a JSON object of groups (each with hosts, vars and
// children, or just a list of hosts) and optionally _meta.hostvars; without
// _meta.hostvars, `PATH --host NAME` is run for each host. group_vars/ and
// host_vars/ beside the script apply as for a file. The script runs as an
// argv (no shell), in its own process group, stdin from /dev/null; each run
// is bounded in time and output. Canceling ctx, or SIGINT/SIGTERM/SIGHUP to
// gpush while a run is under way, stops it (the signal is passed on to the
// script's group first; a second one kills the group).
func LoadScript(ctx context.Context, path string, opts ScriptOptions) (*Inventory, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: %w", path, err)
	}
	// One deadline for every run of this load.
	ctx, cancel := context.WithTimeoutCause(ctx, opts.Timeout, errScriptTimeout)
	defer cancel()
	listWhat := path + " --list"
	out, err := runScript(ctx, abs, []string{"--list"}, opts)
	if err != nil {
		return nil, fmt.Errorf("inventory script %s: %w", listWhat, err)
	}
	inv := newInventory(path, KindScript)
	inv.maxInput = opts.maxInput
	hostvars, err := parseScriptList(inv, listWhat, out)
	if err != nil {
		return nil, err
	}
	for _, name := range inv.hostOrder {
		var vars map[string]any
		at := Pos{File: listWhat + " _meta.hostvars"}
		if hostvars == nil {
			at = Pos{File: path + " --host " + name}
			out, err := runScript(ctx, abs, []string{"--host", name}, opts)
			if err != nil {
				return nil, fmt.Errorf("inventory script %s: %w", at.File, err)
			}
			if vars, err = parseScriptHost(at.File, out); err != nil {
				return nil, err
			}
		} else if raw, ok := hostvars[name]; ok {
			if vars, ok = raw.(map[string]any); !ok {
				return nil, fmt.Errorf("inventory script %s: _meta.hostvars[%q]: want an object of vars, got %s", listWhat, name, jsonKind(raw))
			}
		}
		if err := inv.addHost("", name, vars, at, nil); err != nil {
			return nil, err
		}
	}
	var stray []string
	for name := range hostvars {
		if inv.hosts[name] == nil {
			stray = append(stray, name)
		}
	}
	if len(stray) > 0 {
		// Ansible drops these silently; a host the operator expected to
		// see is then missing without a word.
		inv.warnf(Pos{File: listWhat}, "_meta.hostvars has vars for %d host(s) in no group, ignored: %s",
			len(stray), FoldNodeSet(stray))
	}
	if err := loadVarDirs(inv, filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := inv.finalize(); err != nil {
		return nil, err
	}
	return inv, nil
}

// jsonDoc locates offsets in a script's output for error messages and
// positions; lines are counted incrementally as offsets grow.
type jsonDoc struct {
	what     string
	data     []byte
	off      int
	line     int
	lineFrom int
}

func newJSONDoc(what string, data []byte) *jsonDoc {
	return &jsonDoc{what: what, data: data, line: 1}
}

// lineCol returns the 1-based line and column of a byte offset.
func (d *jsonDoc) lineCol(off int64) (int, int) {
	o := int(min(max(off, 0), int64(len(d.data))))
	if o < d.off {
		d.off, d.line, d.lineFrom = 0, 1, 0
	}
	for i := d.off; i < o; i++ {
		if d.data[i] == '\n' {
			d.line++
			d.lineFrom = i + 1
		}
	}
	d.off = o
	return d.line, o - d.lineFrom + 1
}

func (d *jsonDoc) pos(off int64) Pos {
	line, _ := d.lineCol(off)
	return Pos{File: d.what, Line: line}
}

// errAt names the script run and where in its output things went wrong.
func (d *jsonDoc) errAt(off int64, format string, args ...any) error {
	line, col := d.lineCol(off)
	return fmt.Errorf("inventory script %s: output line %d, column %d (byte %d): %s",
		d.what, line, col, off, fmt.Sprintf(format, args...))
}

// validate checks the whole output is one JSON value first: encoding/json
// then gives the exact offset of a syntax error (a Decoder's are relative
// to the value it was reading).
func (d *jsonDoc) validate() error {
	err := json.Unmarshal(d.data, new(json.RawMessage))
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		return fmt.Errorf("inventory script %s: invalid JSON: %w", d.what, err)
	}
	if syn.Offset >= int64(len(d.data)) {
		return d.errAt(int64(len(d.data)), "invalid JSON: the output ends inside a value (truncated?)")
	}
	off := max(syn.Offset-1, 0) // Offset counts the bad byte
	return d.errAt(off, "invalid JSON: %v%s", syn, d.near(off))
}

// decodeErr reports an error of the Decoder once validate passed (which
// leaves little to go wrong).
func (d *jsonDoc) decodeErr(dec *json.Decoder, err error) error {
	return d.errAt(dec.InputOffset(), "invalid JSON: %v", err)
}

// near quotes a little of the output around off, so the operator sees what
// the script printed without opening it.
func (d *jsonDoc) near(off int64) string {
	o := int(min(max(off, 0), int64(len(d.data))))
	from, to := max(o-30, 0), min(o+10, len(d.data))
	if from == to {
		return ""
	}
	return " near " + strconv.Quote(string(d.data[from:to]))
}

type jsonEntry struct {
	key string
	off int64
	val any
}

// parseScriptList reads --list output into inv, in the order the groups
// are printed (Ansible keeps the document order), and returns
// _meta.hostvars (nil when the script left it out: --host is then asked).
func parseScriptList(inv *Inventory, what string, out []byte) (map[string]any, error) {
	doc := newJSONDoc(what, out)
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, fmt.Errorf("inventory script %s: printed nothing (want a JSON object of groups)", what)
	}
	if err := doc.validate(); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, doc.decodeErr(dec, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, doc.errAt(dec.InputOffset(), "want a JSON object of groups, got %s", tokenKind(tok))
	}
	// Like Python's json, a key given twice keeps its first place and its
	// last value.
	var entries []*jsonEntry
	byKey := map[string]*jsonEntry{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, doc.decodeErr(dec, err)
		}
		key, _ := tok.(string)
		off := dec.InputOffset()
		var val any
		if err := dec.Decode(&val); err != nil {
			return nil, doc.decodeErr(dec, err)
		}
		if e := byKey[key]; e != nil {
			inv.warnf(doc.pos(off), "group %q printed twice; the last one is used", key)
			e.val = val
			continue
		}
		e := &jsonEntry{key: key, off: off, val: val}
		entries = append(entries, e)
		byKey[key] = e
	}
	if _, err := dec.Token(); err != nil {
		return nil, doc.decodeErr(dec, err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, doc.decodeErr(dec, err)
		}
		return nil, doc.errAt(dec.InputOffset(), "unexpected %s after the JSON object", tokenKind(tok))
	}
	var hostvars map[string]any
	for _, e := range entries {
		val := normalizeJSON(e.val)
		if e.key == "_meta" {
			meta, ok := val.(map[string]any)
			if !ok {
				return nil, doc.errAt(e.off, "_meta: want an object, got %s", jsonKind(val))
			}
			hv, ok := meta["hostvars"]
			if !ok || hv == nil {
				continue // as Ansible: no hostvars, so --host per host
			}
			if hostvars, ok = hv.(map[string]any); !ok {
				return nil, doc.errAt(e.off, "_meta.hostvars: want an object of hosts, got %s", jsonKind(hv))
			}
			continue
		}
		if err := scriptGroup(inv, doc, e.key, e.off, val); err != nil {
			return nil, err
		}
	}
	return hostvars, nil
}

// scriptGroup adds one group as Ansible's script plugin reads it: a list
// is the group's hosts; an object without hosts, vars or children is the
// old shorthand for a host of the group's name with those vars as group vars.
func scriptGroup(inv *Inventory, doc *jsonDoc, name string, off int64, val any) error {
	if name == "" {
		return doc.errAt(off, "a group with an empty name")
	}
	at := doc.pos(off)
	obj, isObj := val.(map[string]any)
	if !isObj {
		obj = map[string]any{"hosts": val}
	} else if _, h := obj["hosts"]; !h {
		if _, v := obj["vars"]; !v {
			if _, c := obj["children"]; !c {
				obj = map[string]any{"hosts": []any{name}, "vars": obj}
			}
		}
	}
	inv.group(name, at)
	for _, k := range sortedKeys(obj) {
		switch k {
		case "hosts", "vars", "children":
		default:
			inv.warnf(at, "group %s: skipping unexpected key %q (only hosts, vars and children are valid)", name, k)
		}
	}
	if hv, ok := obj["hosts"]; ok {
		list, ok := hv.([]any)
		if !ok {
			return doc.errAt(off, "group %s: hosts: want a list of host names, got %s", name, jsonKind(hv))
		}
		for i, h := range list {
			hn, ok := h.(string)
			if !ok || hn == "" {
				return doc.errAt(off, "group %s: hosts[%d]: want a host name, got %s", name, i, jsonKind(h))
			}
			if err := inv.addHost(name, hn, nil, at, nil); err != nil {
				return err
			}
		}
	}
	if vv, ok := obj["vars"]; ok {
		vars, ok := vv.(map[string]any)
		if !ok {
			return doc.errAt(off, "group %s: vars: want an object, got %s", name, jsonKind(vv))
		}
		for _, k := range sortedKeys(vars) {
			inv.setGroupVar(name, k, vars[k], at)
		}
	}
	if cv, ok := obj["children"]; ok {
		list, ok := cv.([]any)
		if !ok {
			return doc.errAt(off, "group %s: children: want a list of group names, got %s", name, jsonKind(cv))
		}
		for i, c := range list {
			cn, ok := c.(string)
			if !ok || cn == "" {
				return doc.errAt(off, "group %s: children[%d]: want a group name, got %s", name, i, jsonKind(c))
			}
			if cn == name {
				return fmt.Errorf("%s: child group cycle: %s -> %s", at, name, name)
			}
			inv.addChild(name, cn, at)
		}
	}
	return nil
}

// parseScriptHost reads --host output: an object of vars; an empty output
// means none (as Ansible takes it).
func parseScriptHost(what string, out []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		return map[string]any{}, nil
	}
	doc := newJSONDoc(what, out)
	if err := doc.validate(); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var val any
	if err := dec.Decode(&val); err != nil {
		return nil, doc.decodeErr(dec, err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, doc.decodeErr(dec, err)
		}
		return nil, doc.errAt(dec.InputOffset(), "unexpected %s after the JSON object", tokenKind(tok))
	}
	vars, ok := normalizeJSON(val).(map[string]any)
	if !ok {
		return nil, doc.errAt(0, "want a JSON object of vars, got %s", jsonKind(val))
	}
	return vars, nil
}

// normalizeJSON turns json.Numbers into the types the YAML loader gives
// (int, uint64 past int's range, float64), so vars behave the same
// whichever loader read them.
func normalizeJSON(v any) any {
	switch t := v.(type) {
	case json.Number:
		s := t.String()
		if n, err := strconv.ParseInt(s, 10, 0); err == nil {
			return int(n)
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(s, 64) // ±Inf past float64's range, as Python reads 1e999
		return f
	case map[string]any:
		for k, x := range t {
			t[k] = normalizeJSON(x)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = normalizeJSON(x)
		}
		return t
	default:
		return v
	}
}

func jsonKind(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "the string " + strconv.Quote(t)
	case bool:
		return strconv.FormatBool(t)
	default:
		return fmt.Sprintf("the number %v", t)
	}
}

func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			return "a list"
		case '{':
			return "an object"
		}
		return strconv.Quote(t.String())
	case json.Number:
		return "the number " + t.String()
	default:
		return jsonKind(t)
	}
}

// runScript runs one script call and returns its stdout; ctx carries the
// load's deadline. The error quotes
// the end of its stderr.
func runScript(ctx context.Context, abs string, args []string, opts ScriptOptions) ([]byte, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	cmd := exec.CommandContext(ctx, abs, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	cmd.WaitDelay = scriptPipeGrace
	stdout := &capWriter{max: opts.MaxOutput, over: func() { cancel(errScriptTooLarge) }}
	stderr := &tailWriter{keep: scriptStderrKeep}
	cmd.Stdout, cmd.Stderr = stdout, stderr

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot run it: %w", err)
	}
	var (
		mu  sync.Mutex
		got os.Signal
	)
	done := make(chan struct{})
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		for {
			select {
			case s := <-sigs:
				mu.Lock()
				first := got == nil
				got = s
				mu.Unlock()
				if first {
					_ = unix.Kill(-cmd.Process.Pid, s.(syscall.Signal))
				} else {
					_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
				}
			case <-done:
				return
			}
		}
	}()
	werr := cmd.Wait()
	close(done)
	<-relayed

	mu.Lock()
	sig := got
	mu.Unlock()
	var reason error
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errScriptTooLarge):
		reason = fmt.Errorf("printed more than %d bytes (the cap); stopped it", opts.MaxOutput)
	case errors.Is(cause, errScriptTimeout):
		reason = fmt.Errorf("still running after %s; stopped it (the limit bounds the whole load, --list and every --host run together; --inventory-timeout or $%s give it longer)", opts.Timeout, TimeoutEnv)
	case cause != nil:
		reason = fmt.Errorf("stopped: %w", cause)
	case sig != nil:
		reason = fmt.Errorf("stopped by %v sent to gpush", sig)
	case werr != nil && !errors.Is(werr, exec.ErrWaitDelay):
		var ee *exec.ExitError
		if errors.As(werr, &ee) && ee.Exited() {
			reason = fmt.Errorf("exited with status %d", ee.ExitCode())
		} else {
			reason = werr
		}
	}
	if reason != nil {
		return nil, withStderr(reason, stderr.String())
	}
	return stdout.buf.Bytes(), nil
}

func withStderr(err error, stderr string) error {
	s := strings.TrimSpace(stderr)
	if s == "" {
		return err
	}
	if len(s) > scriptStderrShow {
		s = "..." + s[len(s)-scriptStderrShow:]
	}
	return fmt.Errorf("%w; stderr: %s", err, strconv.Quote(s))
}

// capWriter keeps up to max bytes and calls over once when more arrive;
// the rest is dropped (the script is being stopped).
type capWriter struct {
	buf    bytes.Buffer
	max    int64
	over   func()
	tooBig bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	if w.tooBig {
		return len(p), nil
	}
	if int64(w.buf.Len())+int64(len(p)) > w.max {
		w.tooBig = true
		w.over()
		return len(p), nil
	}
	return w.buf.Write(p)
}

// tailWriter keeps the last keep bytes written.
type tailWriter struct {
	buf  []byte
	keep int
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*w.keep {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.keep:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	b := w.buf
	if len(b) > w.keep {
		b = b[len(b)-w.keep:]
	}
	return string(b)
}
