package systemd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/nssystemd"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/gpu"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/modules/systemd"
	"github.com/gpush/gpush/remote"
)

// localHost is a modules.Host over the real local connection (the helper
// served in-process, as `gpush run -i localhost` does), with the test's
// host state from modulestest for everything else.
type localHost struct {
	*modulestest.Host
	conn remote.Conn
}

func (h *localHost) Conn(context.Context) (remote.Conn, error) { return h.conn, nil }

// realEnv is a real systemd in a private namespace, fake GPU devices and
// nvidia-smi, and the lab's gpu-holder, reached through a local Conn.
type realEnv struct {
	t    *testing.T
	sd   *nssystemd.Systemd
	host *localHost
	dir  string
	dev  string
}

var labBins struct{ dir, holder, smi string }

func buildLabBins(t *testing.T) {
	t.Helper()
	if labBins.dir != "" {
		return
	}
	dir, err := os.MkdirTemp("", "gpush-systemd-module-bin-")
	if err != nil {
		t.Fatal(err)
	}
	for out, pkg := range map[string]string{"gpu-holder": "../../lab/cmd/gpu-holder", "nvidia-smi": "../../lab/cmd/fake-nvidia-smi"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			t.Fatalf("build %s: %v\n%s", pkg, err, b)
		}
	}
	labBins.dir, labBins.holder, labBins.smi = dir, filepath.Join(dir, "gpu-holder"), filepath.Join(dir, "nvidia-smi")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if labBins.dir != "" {
		os.RemoveAll(labBins.dir)
	}
	os.Exit(code)
}

func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	if why := nssystemd.Available(); why != "" {
		if os.Getenv("CI") == "true" || os.Geteuid() == 0 {
			t.Fatalf("real systemd: %s", why)
		}
		t.Skip("skipping: " + why)
	}
	buildLabBins(t)
	e := &realEnv{t: t, dir: t.TempDir()}
	e.dev = filepath.Join(e.dir, "dev")
	if err := os.MkdirAll(e.dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia0"} {
		if err := os.WriteFile(filepath.Join(e.dev, n), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	smiDir := filepath.Join(e.dir, "smi")
	os.MkdirAll(smiDir, 0o755)
	smi := filepath.Join(smiDir, "nvidia-smi")
	if err := os.Symlink(labBins.smi, smi); err != nil {
		t.Fatal(err)
	}
	cfg := labgpu.Config{DevDir: e.dev, GPUs: []labgpu.GPU{{Index: 0, UUID: "GPU-d7f963c5-cdb5-ba9d-c562-000000000000", Name: "NVIDIA H200", BusID: "00000000:18:00.0", TotalMiB: 143771}}}
	if err := cfg.Save(filepath.Join(smiDir, labgpu.ConfigName)); err != nil {
		t.Fatal(err)
	}
	sd, err := nssystemd.Boot(context.Background(), nssystemd.Options{Dir: t.TempDir(), Share: []string{e.dir, labBins.dir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sd.Stop(); err != nil {
			t.Error(err)
		}
	})
	e.sd = sd
	conn, err := remote.Dial(context.Background(), remote.Host{Name: "localhost", Connection: "local"}, remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	mh := modulestest.NewHost("localhost", modulestest.NewGPUHost("localhost", 1))
	mh.Config = helper.Config{DevDir: e.dev, NvidiaSMI: smi, Systemctl: sd.Systemctl, SMITimeout: helper.Duration(5 * time.Second)}
	e.host = &localHost{Host: mh, conn: conn}
	return e
}

// unit writes a service running the lab's gpu-holder with args.
func (e *realEnv) unit(name string, args string, extra ...string) {
	e.t.Helper()
	body := fmt.Sprintf("[Service]\nExecStart=%s %s\nStandardOutput=append:%s\n%s\n",
		labBins.holder, args, filepath.Join(e.dir, name+".log"), strings.Join(extra, "\n"))
	if err := e.sd.WriteUnit(context.Background(), name, body); err != nil {
		e.t.Fatal(err)
	}
}

// ready waits for n ready lines of the unit's holders.
func (e *realEnv) ready(name string, n int) {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
		if len(labgpu.ReadyPIDs(string(b))) >= n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not %d ready lines after 30s:\n%s", name, n, b)
		}
	}
}

// lua runs src with the systemd and gpu modules over the host; src's
// assertions are Lua's assert (a failure is a Lua error).
func (e *realEnv) lua(src string) {
	e.t.Helper()
	L := glua.NewState()
	defer L.Close()
	L.SetContext(e.t.Context())
	for _, m := range []modules.Module{systemd.Module, gpu.Module} {
		m.Loader(L, e.host)
		L.SetGlobal(m.Name, L.Get(-1))
		L.Pop(1)
	}
	L.SetGlobal("dev", glua.LString(e.dev))
	if err := L.DoString(src); err != nil {
		e.t.Fatalf("lua: %v", err)
	}
}

func supervisorsJSON(h *localHost) string {
	b, _ := json.Marshal(h.Managers().List())
	return string(b)
}

// A unit that does not exist: systemd.stop is ok=false, "not found", for
// every action; nothing is recorded as a respawner.
func TestRealSystemdUnknownUnit(t *testing.T) {
	e := newRealEnv(t)
	e.lua(`
for _, act in ipairs({"stop", "start", "restart", "status"}) do
  local r = systemd[act]("vllm-embd.service")
  assert(r.ok == false, act .. ": ok")
  assert(r.systemd == true, act .. ": systemd")
  assert(r.load_state == "not-found", act .. ": load_state " .. tostring(r.load_state))
  assert(r.reason == "unit vllm-embd.service not found", act .. ": reason " .. tostring(r.reason))
end`)
	if got := e.host.Managers().List(); len(got) != 0 {
		t.Errorf("respawners: %+v", got)
	}
}

// KillMode=process: stop leaves the worker, whose holder table gpu.kill
// takes; after it, the GPU is free and the unit has nothing left.
func TestRealSystemdLeftoverKilled(t *testing.T) {
	e := newRealEnv(t)
	e.unit("sglang-qwen.service", "--dev "+filepath.Join(e.dev, "nvidia0")+" --mem-mib 2048 --child-mem-mib 8192", "KillMode=process")
	e.lua(`assert(systemd.start("sglang-qwen.service").ok)`)
	e.ready("sglang-qwen.service", 2)
	e.lua(`
local r = systemd.stop("sglang-qwen.service")
assert(r.ok == false and r.active_state == "inactive", "stop: " .. tostring(r.reason))
assert(r.load_state == "loaded" and r.restart == "no", "load_state/restart")
assert(#r.rows == 1 and #r.holders == 1, "leftovers")
local w = r.holders[1]
assert(w.pid == r.rows[1].pid and w.mem_mib == 8192 and w.unit == "sglang-qwen.service", "worker " .. w.pid)
local k = gpu.kill(r.holders, {grace = "2s"})
assert(k.exited == 1, "kill")
local s = systemd.status("sglang-qwen.service")
assert(s.ok and #s.rows == 0 and #s.holders == 0, "status after the kill")
`)
	// gpu.kill may record the worker's parent; a Restart=no unit is not recorded.
	for _, s := range e.host.Managers().List() {
		if s.Unit != "" {
			t.Errorf("a Restart=no unit was recorded: %+v", s)
		}
	}
}

// Restart=always: the stop records the unit as a respawner with its
// Restart= (once, however often it is stopped); under check nothing is
// stopped and nothing recorded.
func TestRealSystemdRestartRecorded(t *testing.T) {
	e := newRealEnv(t)
	e.unit("trainer.service", "--dev "+filepath.Join(e.dev, "nvidia0")+" --mem-mib 4096", "Restart=always", "RestartSec=100ms")
	e.lua(`assert(systemd.start("trainer.service").restart == "always")`)
	e.ready("trainer.service", 1)
	e.host.SetCheck(true)
	e.lua(`
local r = systemd.stop("trainer.service")
assert(r.would and r.active_state == "active", "check stop")`)
	if got := e.host.Managers().List(); len(got) != 0 {
		t.Fatalf("check mode recorded respawners: %+v", got)
	}
	e.host.SetCheck(false)
	e.lua(`
local r = systemd.stop("trainer.service")
assert(r.ok and r.restart == "always" and r.active_state == "inactive", "stop: " .. tostring(r.reason))
assert(systemd.stop("trainer.service").ok, "second stop")`)
	want := `[{"kind":"unit","pid":0,"start_time":0,"boot_id":"","unit":"trainer.service","restart":"always","active_state":"inactive","sub_state":"dead","restarts":"yes","stop":["systemctl","stop","trainer.service"],"why":"unit trainer.service has Restart=always: it may start again"}]`
	if got := supervisorsJSON(e.host); got != want {
		t.Errorf("respawners:\n got %s\nwant %s", got, want)
	}
}

// Several units in one call against the real systemd: a unit that does not
// exist stops none of the list; then each result is the unit's own (a
// worker left behind, a clean stop of a Restart=always unit, which alone is
// recorded as a respawner).
func TestRealSystemdStopList(t *testing.T) {
	e := newRealEnv(t)
	e.unit("sglang-qwen.service", "--dev "+filepath.Join(e.dev, "nvidia0")+" --mem-mib 2048 --child-mem-mib 8192", "KillMode=process")
	e.unit("trainer.service", "--dev "+filepath.Join(e.dev, "nvidia0")+" --mem-mib 4096", "Restart=always", "RestartSec=100ms")
	e.lua(`
local st = systemd.start{"sglang-qwen", "trainer.service"}
assert(#st == 2 and st[1].ok and st[2].ok, "start")`)
	e.ready("sglang-qwen.service", 2)
	e.ready("trainer.service", 1)
	// A typo in the list stops none of it: one show, no stop.
	e.lua(`
local rs = systemd.stop({"sglang-qwen", "vllm-embd.service", "trainer"}, {timeout = "30s"})
assert(#rs == 3, "results: " .. #rs)
local l, typo, tr = rs[1], rs[2], rs[3]
assert(typo.unit == "vllm-embd.service" and not typo.ok and typo.missing and typo.load_state == "not-found", "typo")
assert(typo.reason == "unit vllm-embd.service not found", "typo reason " .. tostring(typo.reason))
for _, r in ipairs{l, tr} do
  assert(not r.ok and not r.missing and r.active_state == "active", r.unit .. ": " .. tostring(r.reason))
  assert(r.reason == "no unit of the list was stopped: unit vllm-embd.service is not found", r.reason)
end
`)
	if got := e.host.Managers().List(); len(got) != 0 {
		t.Fatalf("a refused stop recorded respawners: %+v", got)
	}
	e.lua(`
local rs = systemd.stop({"sglang-qwen", "trainer"}, {timeout = "30s"})
assert(#rs == 2, "results: " .. #rs)
local l, tr = rs[1], rs[2]
assert(l.unit == "sglang-qwen.service" and not l.ok and l.active_state == "inactive", "leftover unit: " .. tostring(l.reason))
assert(#l.rows == 1 and #l.holders == 1 and l.holders[1].mem_mib == 8192, "leftover worker")
assert(tr.unit == "trainer.service" and tr.ok and tr.active_state == "inactive" and #tr.holders == 0, "trainer: " .. tostring(tr.reason))
assert(gpu.kill(l.holders, {grace = "2s"}).exited == 1, "kill the worker")
`)
	want := `[{"kind":"unit","pid":0,"start_time":0,"boot_id":"","unit":"trainer.service","restart":"always","active_state":"inactive","sub_state":"dead","restarts":"yes","stop":["systemctl","stop","trainer.service"],"why":"unit trainer.service has Restart=always: it may start again"}]`
	if got := supervisorsJSON(e.host); got != want {
		t.Errorf("respawners:\n got %s\nwant %s", got, want)
	}
}
