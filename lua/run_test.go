package lua

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/remote"
)

// fleet is a set of fake hosts and the Dial that reaches them.
type fleet struct {
	mu     sync.Mutex
	conns  map[string]*modulestest.Conn
	down   map[string]error
	dialed map[string]bool
}

func newFleet(names ...string) (*fleet, []inventory.Host) {
	f := &fleet{conns: map[string]*modulestest.Conn{}, down: map[string]error{}, dialed: map[string]bool{}}
	var hosts []inventory.Host
	for _, n := range names {
		f.conns[n] = modulestest.NewConn(n, modulestest.NewGPUHost(n, 2))
		hosts = append(hosts, inventory.Host{Name: n, Address: n + ".lab", Connection: "ssh",
			Groups: []string{"all", "gpu"}, Vars: map[string]any{}})
	}
	return f, hosts
}

func (f *fleet) dial(ctx context.Context, h inventory.Host) (remote.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.down[h.Name]; err != nil {
		return nil, err
	}
	f.dialed[h.Name] = true
	return f.conns[h.Name], nil
}

func script(src string) *Script { return &Script{Name: "t.lua", Path: "t.lua", Source: []byte(src)} }

func one(t *testing.T, src string, o Options) (HostResult, *modulestest.Conn) {
	t.Helper()
	f, hosts := newFleet("gpu01")
	if o.Dial == nil {
		o.Dial = f.dial
	}
	res := Run(t.Context(), script(src), hosts, o)
	if len(res) != 1 {
		t.Fatalf("want 1 result, got %d", len(res))
	}
	return res[0], f.conns["gpu01"]
}

func TestReturnValueConversion(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want string
	}{
		{`return {{gpu=0, used=10}, {gpu=1, used=0}}`, `[map[gpu:0 used:10] map[gpu:1 used:0]]`},
		{`return {ok=true, name="x", list={1,2}}`, `map[list:[1 2] name:x ok:true]`},
		{`return "done"`, `done`},
		{`return 1.5`, `1.5`},
		{`return false`, `false`},
		{`return nil`, `<nil>`},
		{`return {}`, `[]`},
		{``, `<nil>`},
	} {
		r, _ := one(t, tc.src, Options{})
		if r.Status != StatusOK || fmt.Sprint(r.Value) != tc.want {
			t.Errorf("%q: status %s err %q value %v, want %s", tc.src, r.Status, r.Error, r.Value, tc.want)
		}
	}
	r, _ := one(t, `return {f = print}`, Options{})
	if r.Status != StatusFailed || !strings.Contains(r.Error, "return value") {
		t.Errorf("function in result: %+v, want failed return value", r)
	}
	r, _ = one(t, `local t = {}; t.self = t; return t`, Options{})
	if r.Status != StatusFailed || !strings.Contains(r.Error, "contains itself") {
		t.Errorf("cyclic result: %+v", r)
	}
}

func TestFailAndErrors(t *testing.T) {
	r, _ := one(t, `fail("GPU %d still holds %d MiB", 0, 512)`, Options{})
	if r.Status != StatusFailed || r.Error != "GPU 0 still holds 512 MiB" {
		t.Errorf("fail: %+v", r)
	}
	// fail() cannot be swallowed by pcall.
	r, _ = one(t, `local ok = pcall(fail, "stop here"); return "went on"`, Options{})
	if r.Status != StatusFailed || r.Error != "stop here" {
		t.Errorf("fail in pcall: %+v", r)
	}
	r, _ = one(t, `local ok = pcall(function() local x = coroutine.create(function() fail("in co") end); coroutine.resume(x) end); return 1`, Options{})
	if r.Status != StatusFailed || r.Error != "in co" {
		t.Errorf("fail in coroutine: %+v", r)
	}
	// An ordinary error can be caught.
	r, _ = one(t, `local ok, err = pcall(error, "boom"); return {ok=ok, err=err}`, Options{})
	if r.Status != StatusOK || fmt.Sprint(r.Value) != "map[err:t.lua:1: boom ok:false]" {
		t.Errorf("pcall(error): %+v", r)
	}
	r, _ = one(t, `local x = nil; return x.y`, Options{})
	if r.Status != StatusFailed || !strings.Contains(r.Error, "t.lua:1") {
		t.Errorf("runtime error: %+v, want failed naming t.lua:1", r)
	}
	r, _ = one(t, `return (`, Options{})
	if r.Status != StatusFailed || !strings.Contains(r.Error, "t.lua") {
		t.Errorf("syntax error: %+v", r)
	}
	r, _ = one(t, `gpu.kill({pid=1})`, Options{})
	if r.Status != StatusFailed || !strings.Contains(r.Error, "start_time") {
		t.Errorf("bad argument: %+v", r)
	}
}

func TestUnreachable(t *testing.T) {
	f, hosts := newFleet("up", "down")
	f.down["down"] = fmt.Errorf("dial down.lab:22: %w", errors.New("connection refused"))
	res := Run(t.Context(), script(`return gpu.mem()[1].used_mib`), hosts, Options{Dial: f.dial})
	if res[0].Status != StatusOK || res[0].Value != float64(0) {
		t.Errorf("up: %+v", res[0])
	}
	if res[1].Status != StatusUnreachable || !strings.Contains(res[1].Error, "down.lab:22") {
		t.Errorf("down: %+v, want unreachable naming the address", res[1])
	}

	// The connection dies mid-script: unreachable, not failed.
	_, hosts = newFleet("gpu01")
	r := Run(t.Context(), script(`gpu.mem(); gpu.mem()`), hosts, Options{Dial: func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
		c := modulestest.NewConn(h.Name, modulestest.NewGPUHost(h.Name, 1))
		return &losingConn{Conn: c}, nil
	}})
	if r[0].Status != StatusUnreachable || !strings.Contains(r[0].Error, "connection lost") {
		t.Errorf("lost mid-script: %+v, want unreachable", r[0])
	}
	// A script that catches the loss and returns is ok: it decided.
	r = Run(t.Context(), script(`gpu.mem(); local ok = pcall(gpu.mem); return ok`), hosts,
		Options{Dial: func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
			return &losingConn{Conn: modulestest.NewConn(h.Name, modulestest.NewGPUHost(h.Name, 1))}, nil
		}})
	if r[0].Status != StatusOK || r[0].Value != false {
		t.Errorf("caught loss: %+v", r[0])
	}
}

// losingConn loses the connection after its first helper call.
type losingConn struct {
	*modulestest.Conn
	n atomic.Int32
}

func (c *losingConn) Helper(ctx context.Context, verb string, req, resp any) error {
	if c.n.Add(1) > 1 {
		c.Lose()
	}
	return c.Conn.Helper(ctx, verb, req, resp)
}

func TestForksLimit(t *testing.T) {
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("h%02d", i)
	}
	f, hosts := newFleet(names...)
	var active, maxActive atomic.Int32
	for _, c := range f.conns {
		c.RunFunc = func(argv []string, _ remote.RunOptions, _ string) (*remote.Result, error) {
			n := active.Add(1)
			defer active.Add(-1)
			for {
				m := maxActive.Load()
				if n <= m || maxActive.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond) // give other hosts the chance to overlap
			return &remote.Result{}, nil
		}
	}
	res := Run(t.Context(), script(`ssh.run({"work"}); return host.name`), hosts, Options{Dial: f.dial, Forks: 3})
	for i, r := range res {
		if r.Status != StatusOK || r.Value != names[i] {
			t.Errorf("result %d: %+v, want ok %s (results in host order)", i, r, names[i])
		}
	}
	if m := maxActive.Load(); m > 3 {
		t.Errorf("%d hosts ran at once, forks is 3", m)
	}
}

// TestForksParallel: with forks=3, three hosts are inside the script at the
// same time (a barrier that only opens when all three arrived).
func TestForksParallel(t *testing.T) {
	f, hosts := newFleet("a", "b", "c")
	var wg sync.WaitGroup
	wg.Add(3)
	for _, c := range f.conns {
		c.RunFunc = func([]string, remote.RunOptions, string) (*remote.Result, error) {
			wg.Done()
			wg.Wait()
			return &remote.Result{}, nil
		}
	}
	res := Run(t.Context(), script(`return ssh.run({"barrier"}).ok`), hosts, Options{Dial: f.dial, Forks: 3})
	for _, r := range res {
		if r.Status != StatusOK {
			t.Errorf("%+v", r)
		}
	}
}

func TestTimeoutPerHost(t *testing.T) {
	r, c := one(t, `sleep(60)`, Options{Timeout: 50 * time.Millisecond})
	if r.Status != StatusFailed || r.Error != "timed out after 50ms" {
		t.Errorf("sleep past timeout: %+v", r)
	}
	if !c.Closed() {
		t.Errorf("connection not closed at the end of the host")
	}
	// A helper call that takes too long is cut by the same deadline.
	f, hosts := newFleet("slow")
	f.conns["slow"].Latency = time.Minute
	res := Run(t.Context(), script(`gpu.mem()`), hosts, Options{Dial: f.dial, Timeout: 50 * time.Millisecond})
	if res[0].Status != StatusFailed || !strings.HasPrefix(res[0].Error, "timed out") {
		t.Errorf("slow helper: %+v", res[0])
	}
	// Even a busy loop is stopped (the VM checks the context).
	r, _ = one(t, `while true do end`, Options{Timeout: 50 * time.Millisecond})
	if r.Status != StatusFailed || !strings.HasPrefix(r.Error, "timed out") {
		t.Errorf("busy loop: %+v", r)
	}
}

func TestCancel(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	f, hosts := newFleet(names...)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var started atomic.Int32
	var mu sync.Mutex
	var done []string
	res := Run(ctx, script(`print("running"); sleep(60)`), hosts, Options{Dial: f.dial, Forks: 2, OnEvent: func(e Event) {
		switch e.Kind {
		case modules.EventLog:
			if started.Add(1) == 2 {
				cancel() // Ctrl-C once two hosts sleep; two more wait for a fork
			}
		case modules.EventDone:
			mu.Lock()
			done = append(done, e.Host)
			mu.Unlock()
		}
	}})
	for _, r := range res {
		if r.Status != StatusFailed || r.Error != "interrupted" {
			t.Errorf("%s: %+v, want failed interrupted", r.Host, r)
		}
	}
	if len(done) != 4 {
		t.Errorf("done events for %v, want all 4 hosts", done)
	}
	if len(f.dialed) != 2 {
		t.Errorf("hosts %v connected, want exactly the two that ran", f.dialed)
	}
	for _, n := range names {
		if f.dialed[n] && !f.conns[n].Closed() {
			t.Errorf("%s: connection left open", n)
		}
	}
}

func TestCheckModePassesDryRun(t *testing.T) {
	f, hosts := newFleet("gpu01")
	c := f.conns["gpu01"]
	p := c.Model.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{0: 1000}})
	res := Run(t.Context(), script(`
		assert(check == true)
		local r = gpu.kill(gpu.holders())
		return {would = #r.would, ssh = ssh.run("reboot").status}`), hosts, Options{Dial: f.dial, Check: true})
	if res[0].Status != StatusOK || fmt.Sprint(res[0].Value) != "map[ssh:would would:1]" {
		t.Fatalf("%+v", res[0])
	}
	kills := c.Calls(helper.VerbKill)
	if len(kills) != 1 || !kills[0].Request.(helper.KillRequest).DryRun {
		t.Errorf("kill calls %+v, want one with DryRun", kills)
	}
	if !c.Model.Alive(p.PID) || len(c.Calls("run")) != 0 {
		t.Errorf("check mode changed the host")
	}
}

func TestVarsAndHelperConfig(t *testing.T) {
	f, hosts := newFleet("gpu01")
	hosts[0].Vars = map[string]any{"a": 1, "b": "host", "services": []any{"sglang.service"},
		"gpush_dev_dir": "/lab/gpu01/dev", "gpush_protected": []any{"exporter"}, "gpush_smi_timeout": "3s"}
	// Declared: b and extra; a and services are undeclared host vars: in host.vars, as they are.
	res := Run(t.Context(), script(`-- @var b string a var the extra vars override
		-- @var extra bool a var only -e gives
		gpu.mem()
		assert(rawget(vars, "a") == nil and vars.gpush_dev_dir == "/x/dev")
		return {a = host.vars.a, b = vars.b, hb = host.vars.b, svc = host.vars.services[1], name = host.name,
		        addr = host.address, groups = host.groups, extra = vars.extra}`),
		hosts, Options{Dial: f.dial, ExtraVars: map[string]any{"b": "extra", "extra": true, "gpush_dev_dir": "/x/dev"}})
	want := "map[a:1 addr:gpu01.lab b:extra extra:true groups:[all gpu] hb:host name:gpu01 svc:sglang.service]"
	if res[0].Status != StatusOK || fmt.Sprint(res[0].Value) != want {
		t.Fatalf("got %+v\nwant %s", res[0], want)
	}
	req := f.conns["gpu01"].Calls(helper.VerbSnapshot)[0].Request.(helper.SnapshotRequest)
	if req.DevDir != "/x/dev" || len(req.Protected) != 1 || req.SMITimeout.D() != 3*time.Second {
		t.Errorf("helper config %+v: extra vars must win, gpush_* vars must reach the helper", req.Config)
	}
	hosts[0].Vars = map[string]any{"gpush_smi_timeout": []any{1}}
	res = Run(t.Context(), script(`return 1`), hosts, Options{Dial: f.dial})
	if res[0].Status != StatusFailed || !strings.Contains(res[0].Error, "gpush_smi_timeout") {
		t.Errorf("bad var: %+v", res[0])
	}
}

func TestRequire(t *testing.T) {
	dir, err := filepath.Abs("testdata/scriptdir")
	if err != nil {
		t.Fatal(err)
	}
	f, hosts := newFleet("gpu01")
	s := &Script{Name: "main.lua", Source: []byte(`
		local util = require("util")
		local helpers = require("helpers")
		local deep = require("sub.deep")
		assert(require("gpu") == gpu, "require of a module gives the global")
		return {sum = util.sum({1, 2, 3}), double = helpers.double(21), deep = deep.name, mib = util.mib(10850)}`),
		Dir: dir}
	res := Run(t.Context(), s, hosts, Options{Dial: f.dial})
	if res[0].Status != StatusOK || fmt.Sprint(res[0].Value) != "map[deep:sub.deep double:42 mib:10.6 GiB sum:6]" {
		t.Fatalf("%+v", res[0])
	}
	for _, bad := range []string{"../scriptdir/helpers", "/etc/passwd", "nope"} {
		s := &Script{Name: "main.lua", Source: []byte(fmt.Sprintf(`require(%q)`, bad)), Dir: dir}
		r := Run(t.Context(), s, hosts, Options{Dial: f.dial})[0]
		if r.Status != StatusFailed || !strings.Contains(r.Error, "not found") {
			t.Errorf("require(%q): %+v, want module not found", bad, r)
		}
	}
	// An embedded script requires its siblings from the embedded library.
	emb := fstestMap{"lib/main.lua": `return require("sib").v + require("util").sum({1})`, "lib/sib.lua": `return {v = 41}`}
	es, err := ResolveScript("lib/main", ResolveOptions{WorkDir: t.TempDir(), SearchPath: []string{}, ConfigDir: t.TempDir(), Embedded: emb})
	if err != nil {
		t.Fatal(err)
	}
	if r := Run(t.Context(), es, hosts, Options{Dial: f.dial})[0]; r.Status != StatusOK || r.Value != float64(42) {
		t.Errorf("embedded sibling require: %+v", r)
	}
	// An embedded script (no folder) still finds lib/.
	r := Run(t.Context(), script(`return require("util").contains({"a"}, "a")`), hosts, Options{Dial: f.dial})[0]
	if r.Status != StatusOK || r.Value != true {
		t.Errorf("embedded require: %+v", r)
	}
}

func TestSandbox(t *testing.T) {
	r, _ := one(t, `return {os.execute == nil, os.exit == nil, dofile == nil, loadfile == nil, io == nil, type(os.time())}`, Options{})
	if r.Status != StatusOK || fmt.Sprint(r.Value) != "[true true true true true number]" {
		t.Errorf("%+v", r)
	}
}

var clockRE = regexp.MustCompile(`\d\d:\d\d:\d\d\.\d\d\d`)

func TestEventsAndStats(t *testing.T) {
	f, hosts := newFleet("gpu01")
	c := f.conns["gpu01"]
	c.Model.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 4706}, IgnoreTerm: true})
	var mu sync.Mutex
	var events []Event
	res := Run(t.Context(), script(`
		log.info("before: %s", gpu.mem()[2].used_mib)
		gpu.kill(gpu.holders(), {grace = "1s"})
		local r = gpu.wait_free{timeout = "1s"}
		print("freed", r.ok)
		return r.ok`), hosts, Options{Dial: f.dial, OnEvent: func(e Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}})
	r := res[0]
	if r.Status != StatusOK || r.Value != true {
		t.Fatalf("%+v", r)
	}
	var got []string
	for _, e := range events {
		if e.Host != "gpu01" || e.Time.IsZero() {
			t.Errorf("event without host or time: %+v", e)
		}
		got = append(got, e.Kind+":"+clockRE.ReplaceAllString(e.Message, "T"))
	}
	// What gpu.kill did streams as it happens (kill, exit), and the step
	// the host is at (for the progress line).
	want := "start:t.lua|log:before: 4706|kill:signalled pid 1001 (python3) on GPU 1: TERM at T, KILL at T|" +
		"exit:pid 1001 (python3) killed by KILL|step:gpu.wait_free: waiting every GPU|log:freed\ttrue|done:ok"
	if strings.Join(got, "|") != want {
		t.Errorf("events %q, want %q", strings.Join(got, "|"), want)
	}
	st := r.Stats
	if len(st.GPUs) != 2 || st.GPUs[1].BeforeMiB != 4706 || st.GPUs[1].AfterMiB != 0 || fmt.Sprint(st.Freed) != "[1]" ||
		st.Kills.Killed != 1 {
		t.Errorf("stats %+v", st)
	}
	if r.Elapsed <= 0 {
		t.Errorf("elapsed %v", r.Elapsed)
	}
}

func TestJSON(t *testing.T) {
	r, _ := one(t, `
		local s = json.encode({b = 1, a = {1, 2, "x"}, c = {}})
		local v = json.decode('{"x": [1, null, 3], "y": {"z": true}}')
		local ok, err = pcall(json.decode, "{bad")
		return {s = s, x3 = v.x[3], z = v.y.z, ok = ok, err = string.find(err, "json.decode") ~= nil}`, Options{})
	if r.Status != StatusOK || fmt.Sprint(r.Value) != `map[err:true ok:false s:{"a":[1,2,"x"],"b":1,"c":[]} x3:3 z:true]` {
		t.Errorf("%+v", r)
	}
}

func TestSession(t *testing.T) {
	f, hosts := newFleet("gpu01")
	var events []Event
	s, err := NewSession(hosts[0], "", Options{Dial: f.dial, OnEvent: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := s.Eval(ctx, `x = 20`); err != nil {
		t.Fatal(err)
	}
	v, err := s.Eval(ctx, `x + 1, #gpu.mem()`)
	if err != nil || fmt.Sprint(v) != "[21 2]" {
		t.Fatalf("eval: %v %v", v, err)
	}
	if _, err := s.Eval(ctx, `fail("nope %d", 1)`); err == nil || !strings.Contains(err.Error(), "nope 1") {
		t.Errorf("fail in session: %v", err)
	}
	if v, err := s.Eval(ctx, `x`); err != nil || fmt.Sprint(v) != "[20]" {
		t.Errorf("session goes on after fail: %v %v", v, err)
	}
	// A typo'd module function is named, with the one meant.
	if _, err := s.Eval(ctx, `gpu.holder()`); err == nil || !strings.Contains(err.Error(), "gpu.holder is nil; did you mean gpu.holders?") {
		t.Errorf("nil call in session: %v", err)
	}
	if _, err := s.Eval(ctx, `)`); err == nil {
		t.Errorf("syntax error not reported")
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := s.Eval(cctx, `sleep(60)`); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("cancelled eval: %v", err)
	}
	if v, err := s.Eval(ctx, `print`); err != nil || !strings.HasPrefix(fmt.Sprint(v), "[function") {
		t.Errorf("function result: %v %v", v, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !f.conns["gpu01"].Closed() {
		t.Errorf("Close did not close the connection")
	}
	if _, err := s.Eval(ctx, `1`); err == nil {
		t.Errorf("eval after close")
	}
}

func TestResolveScript(t *testing.T) {
	wd := t.TempDir()
	gp1, gp2, cfg := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(p, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(wd, "local.lua"), "-- direct")
	write(filepath.Join(wd, "scripts", "free_gpus.lua"), "-- wd scripts")
	write(filepath.Join(gp1, "free_gpus.lua"), "-- gpush path 1")
	write(filepath.Join(gp2, "only_gp2.lua"), "-- gpush path 2")
	write(filepath.Join(cfg, "gpush", "scripts", "cfg.lua"), "-- config")
	emb := fstestMap{"gpu_status.lua": "-- embedded", "free_gpus.lua": "-- embedded free"}
	o := ResolveOptions{WorkDir: wd, SearchPath: []string{gp1, gp2}, ConfigDir: cfg, Embedded: emb}
	for name, want := range map[string]string{
		"local.lua":                    "-- direct",
		filepath.Join(wd, "local.lua"): "-- direct",
		"free_gpus":                    "-- wd scripts",
		"free_gpus.lua":                "-- wd scripts",
		"only_gp2":                     "-- gpush path 2",
		"cfg":                          "-- config",
		"gpu_status":                   "-- embedded",
	} {
		s, err := ResolveScript(name, o)
		if err != nil || string(s.Source) != want {
			t.Errorf("%s: %v %v, want %q", name, s, err, want)
		}
	}
	s, _ := ResolveScript("gpu_status", o)
	if s.Dir != "" || s.Path != "embedded:gpu_status.lua" || s.Name != "gpu_status.lua" {
		t.Errorf("embedded: %+v", s)
	}
	s, _ = ResolveScript("free_gpus", o)
	if s.Dir != filepath.Join(wd, "scripts") || s.Name != "free_gpus.lua" {
		t.Errorf("file: %+v", s)
	}
	_, err := ResolveScript("missing", o)
	if err == nil || !strings.Contains(err.Error(), gp2) || !strings.Contains(err.Error(), "embedded:missing.lua") ||
		!strings.Contains(err.Error(), filepath.Join(cfg, "gpush", "scripts")) {
		t.Errorf("not found error should list where it looked: %v", err)
	}
	if _, err := ResolveScript("../etc/passwd", o); err == nil {
		t.Errorf("a name climbing out resolved")
	}
	// GPUSH_PATH is the default search path.
	t.Setenv("GPUSH_PATH", gp1+":"+gp2)
	s, err = ResolveScript("only_gp2", ResolveOptions{WorkDir: wd, ConfigDir: cfg})
	if err != nil || string(s.Source) != "-- gpush path 2" {
		t.Errorf("GPUSH_PATH: %v %v", s, err)
	}
}
