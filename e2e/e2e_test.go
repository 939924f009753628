// Package e2e runs the gpush binary against lab hosts over a real OpenSSH
// sshd on loopback: the whole path from the CLI through SSH and the helper to
// (fake) GPUs and real holder processes. It skips when sshd is not installed.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/report/jsoncheck"

	// Not used here, but what the gpush binary under test is made of: importing
	// them makes `go test`'s cache rerun these tests when they change.
	_ "github.com/gpush/gpush/helper"
	_ "github.com/gpush/gpush/lua"
	_ "github.com/gpush/gpush/remote"
	_ "github.com/gpush/gpush/report"
	_ "github.com/gpush/gpush/scripts"
)

var (
	gpushBin string
	labBin   lab.Binaries
	skipWhy  string
)

func TestMain(m *testing.M) {
	os.Exit(setup(m))
}

func setup(m *testing.M) int {
	if _, err := sshd.FindBinary(); err != nil {
		skipWhy = err.Error()
		return m.Run()
	}
	if os.Geteuid() != 0 {
		skipWhy = "the lab's sshd needs root"
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "gpush-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gpushBin = filepath.Join(dir, "gpush")
	if err := lab.BuildGpush(ctx, gpushBin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		return 1
	}
	if labBin, err = lab.Build(ctx, dir, lab.Binaries{}); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		return 1
	}
	return m.Run()
}

func startLab(t *testing.T, o lab.Options) *lab.Lab {
	t.Helper()
	if skipWhy != "" {
		t.Skip("skipping: " + skipWhy)
	}
	o.Dir = t.TempDir()
	o.Bin = labBin
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, o)
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatalf("start lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Stop(); err != nil {
			t.Logf("stop lab: %v", err)
		}
	})
	return l
}

type runResult struct {
	code           int
	stdout, stderr string
}

// gpush runs the gpush binary against the lab and returns its exit status
// and output.
func gpush(t *testing.T, l *lab.Lab, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(args, "-i", l.Inventory, "--known-hosts", l.KnownHosts)
	cmd := exec.CommandContext(ctx, gpushBin, argv...)
	// The lab's inventory names its key; no agent or ~/.ssh of the runner.
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=", "NO_COLOR=1", "HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := runResult{stdout: out.String(), stderr: errb.String()}
	var x *exec.ExitError
	switch {
	case errors.As(err, &x):
		r.code = x.ExitCode()
	case err != nil:
		t.Fatalf("gpush %v: %v", argv, err)
	}
	t.Logf("gpush %s -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func alive(l *lab.Lab, host, role string) (n, live int) {
	for _, p := range l.Find(host, role) {
		n++
		if lab.Alive(p) {
			live++
		}
	}
	return
}

// requireRow wants a line of out whose fields are those of row (table
// columns are padded to the widest cell).
func requireRow(t *testing.T, out, row string) {
	t.Helper()
	want := strings.Join(strings.Fields(row), " ")
	for _, line := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(line), " ") == want {
			return
		}
	}
	t.Errorf("output lacks the row %q", want)
}

func requireContains(t *testing.T, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

// systemctl runs a lab host's systemctl stand-in (what the helper runs).
func systemctl(t *testing.T, h lab.Host, args ...string) string {
	t.Helper()
	out, _ := exec.Command(h.Systemctl, args...).CombinedOutput()
	return string(out)
}

// rowOf returns the fleet table's line for host and GPU, fields joined by
// one space ("" when there is none). Rows equal on several hosts are folded
// under a node set ("lab[01-02]"), which counts for each of them.
func rowOf(out, host string, gpu int) string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && inSet(f[0], host) && f[1] == fmt.Sprint(gpu) {
			return strings.Join(f, " ")
		}
	}
	return ""
}

// inSet: host is set, or a member of the folded set "prefix[NN-MM]".
func inSet(set, host string) bool {
	if set == host {
		return true
	}
	prefix, rng, ok := strings.Cut(strings.TrimSuffix(set, "]"), "[")
	lo, hi, ok2 := strings.Cut(rng, "-")
	if !ok || !ok2 || !strings.HasPrefix(host, prefix) {
		return false
	}
	n := strings.TrimPrefix(host, prefix)
	return len(n) == len(lo) && n >= lo && n <= hi
}

// requireRowHas wants host's row for gpu to contain each of want.
func requireRowHas(t *testing.T, out, host string, gpu int, want ...string) {
	t.Helper()
	row := rowOf(out, host, gpu)
	if row == "" {
		t.Errorf("no row for %s GPU %d", host, gpu)
		return
	}
	for _, w := range want {
		if !strings.Contains(row, w) {
			t.Errorf("%s GPU %d row %q lacks %q", host, gpu, row, w)
		}
	}
}

// The main job: two hosts with GPU services, a stopped service's leftovers
// and a host that cannot be reached. --check first (stops and kills
// nothing), then the real run (exit 4 for the unreachable host; on the
// others the services are stopped, what sglang-qwen.service left behind is
// killed in stage 1 with the other owners; the NVML monitor, which owns no
// memory, survives), then a --json run of the reachable ones (already
// free, exit 0).
func TestFreeGPUs(t *testing.T) {
	l := startLab(t, lab.Options{Hosts: 2, Scenario: lab.ScenarioLeftovers, Unreachable: 1})
	victims := []string{lab.RoleOrphan, lab.RoleTermIgnorer, lab.RoleServiceMain, lab.RoleServiceChild}
	services := l.NoServices == ""
	if !services {
		t.Logf("the lab runs no services here (%s): the service steps are not checked", l.NoServices)
		victims = []string{lab.RoleWorker, lab.RoleOrphan, lab.RoleTermIgnorer}
	}
	bystanders := []string{lab.RolePersistenced, lab.RoleMonitor, lab.RoleUnrelated}

	t.Run("gpu_status fleet table", func(t *testing.T) {
		// By default the table fits 120 columns, its * explained.
		r := gpush(t, l, "run", "gpu_status.lua", "--limit", "lab")
		if r.code != 0 {
			t.Errorf("exit %d, want 0", r.code)
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if n := len([]rune(line)); n > 120 {
				t.Errorf("a line of %d columns: %q", n, line)
			}
		}
		requireContains(t, r.stdout, "HOLDERS *: owns GPU memory")
		// --wide: every cell whole.
		r = gpush(t, l, "run", "gpu_status.lua", "--limit", "lab", "--wide")
		if r.code != 0 {
			t.Errorf("exit %d, want 0", r.code)
		}
		requireRow(t, r.stdout, "HOST GPU NAME STATE USED_MIB TOTAL_MIB HOLDERS REASON")
		for _, h := range l.Hosts {
			mon := l.Find(h.Name, lab.RoleMonitor)[0]
			// Owners are starred; the monitor holds every GPU and owns nothing.
			requireRowHas(t, r.stdout, h.Name, 1, "NVIDIA H200 held 6144 143771", fmt.Sprintf("%d %s nvitop", mon.PID, l.User), "held by pid")
			if !services {
				continue
			}
			// Holders carry their unit, from their cgroup, and their own
			// memory on that GPU.
			m, c := l.Find(h.Name, lab.RoleServiceMain), l.Find(h.Name, lab.RoleServiceChild)
			requireRowHas(t, r.stdout, h.Name, 0, "NVIDIA H200 held 10240 143771", fmt.Sprintf("%d %s python3* 10.0 GiB (vllm-embed.service)", m[0].PID, l.User))
			requireRowHas(t, r.stdout, h.Name, 3, "NVIDIA H200 held 10240 143771",
				fmt.Sprintf("%d %s python3* 2.0 GiB (sglang-qwen.service)", m[1].PID, l.User), fmt.Sprintf("%d %s python3* 8.0 GiB (sglang-qwen.service)", c[0].PID, l.User))
		}
	})

	t.Run("check kills nothing", func(t *testing.T) {
		r := gpush(t, l, "run", "free_gpus.lua", "--check", "--limit", "lab", "-e", "grace=1s")
		if r.code != 0 {
			t.Errorf("exit %d, want 0", r.code)
		}
		for _, h := range l.Hosts {
			for _, role := range append(victims, bystanders...) {
				if n, live := alive(l, h.Name, role); n == 0 || live != n {
					t.Errorf("%s %s: %d of %d alive after --check", h.Name, role, live, n)
				}
			}
		}
		requireContains(t, r.stdout, "would-kill")
		for _, p := range l.Find("lab01", lab.RoleTermIgnorer) {
			requireContains(t, r.stdout, fmt.Sprintf("GPU 2 would kill %d: ", p.PID))
		}
		if services {
			requireContains(t, r.stdout, "would stop vllm-embed.service", "would stop sglang-qwen.service")
			for _, h := range l.Hosts {
				if got := systemctl(t, h, "is-active", lab.UnitVLLM, lab.UnitSGLang); got != "active\nactive\n" {
					t.Errorf("%s: units after --check: %q, want both active", h.Name, got)
				}
			}
		}
	})

	t.Run("run frees, unreachable exits 4", func(t *testing.T) {
		r := gpush(t, l, "run", "free_gpus.lua", "-e", "grace=1s")
		if r.code != 4 {
			t.Errorf("exit %d, want 4 (a host unreachable)", r.code)
		}
		for _, h := range l.Hosts {
			for _, role := range victims {
				if n, live := alive(l, h.Name, role); n == 0 || live != 0 {
					t.Errorf("%s %s: %d of %d still alive", h.Name, role, live, n)
				}
			}
			for _, role := range bystanders {
				if n, live := alive(l, h.Name, role); n == 0 || live != n {
					t.Errorf("%s %s: must be left alone, %d of %d alive", h.Name, role, live, n)
				}
			}
			// Each row says which stage freed its GPU and what it killed.
			orphan, ignorer := l.Find(h.Name, lab.RoleOrphan)[0], l.Find(h.Name, lab.RoleTermIgnorer)[0]
			requireRowHas(t, r.stdout, h.Name, 1, fmt.Sprintf("1 stage 1 true free 6144 0 %d", orphan.PID))
			requireRowHas(t, r.stdout, h.Name, 2, fmt.Sprintf("2 stage 1 true free 4096 0 %d", ignorer.PID))
		}
		requireContains(t, r.stdout, "ok=2 changed=2 failed=0 unreachable=1", "down01", "unreachable")
		if !services {
			requireContains(t, r.stdout, "already-free")
			return
		}
		for _, h := range l.Hosts {
			child := l.Find(h.Name, lab.RoleServiceChild)
			if len(child) != 1 {
				t.Fatalf("%s: sglang worker %v", h.Name, child)
			}
			// The stop is reported with what it left; the leftover goes in
			// stage 1; GPU 0 was freed by its unit's stop.
			requireContains(t, r.stdout,
				h.Name+" | INFO stopped vllm-embed.service\n",
				h.Name+" | WARN stopped sglang-qwen.service; it left 1 process(es) in its cgroup",
				fmt.Sprintf("%s | INFO GPU 3 freed (stage 1): ", h.Name))
			requireRowHas(t, r.stdout, h.Name, 0, "0 by-stop true free 10240 0")
			requireRowHas(t, r.stdout, h.Name, 3, "3 stage 1 true free", fmt.Sprintf(" %d", child[0].PID))
			if got := systemctl(t, h, "show", "-p", "ActiveState", "-p", "ControlGroup", "--value", lab.UnitVLLM, lab.UnitSGLang); got != "\ninactive\n\ninactive\n" {
				t.Errorf("%s: units after the run (ControlGroup, ActiveState): %q, want inactive with no cgroup left", h.Name, got)
			}
		}
	})

	t.Run("json", func(t *testing.T) {
		r := gpush(t, l, "run", "free_gpus.lua", "--json", "--limit", "lab")
		if r.code != 0 {
			t.Errorf("exit %d, want 0", r.code)
		}
		schema, err := jsoncheck.Load("../docs/json-schema.json")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(r.stdout))
		sc.Buffer(nil, 1<<20)
		seen := map[string]bool{}
		for sc.Scan() {
			// Every line fits the documented schema.
			if err := schema.ValidateJSON(sc.Bytes()); err != nil {
				t.Errorf("--json line does not fit docs/json-schema.json: %v\n%s", err, sc.Text())
			}
			var obj struct {
				Type   string           `json:"type"`
				Host   string           `json:"host"`
				Status string           `json:"status"`
				Value  any              `json:"value"`
				Rows   []map[string]any `json:"rows"`
			}
			if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
				t.Fatalf("--json line %q: %v", sc.Text(), err)
			}
			if obj.Type == "summary" {
				continue
			}
			seen[obj.Host] = true
			// The rows the script returned are in .rows, not .value.
			if obj.Status != "ok" || len(obj.Rows) != 4 || obj.Value != nil {
				t.Errorf("%s: status %s, %d rows, value %v; want ok, 4 rows and no value", obj.Host, obj.Status, len(obj.Rows), obj.Value)
			}
			for _, row := range obj.Rows {
				if row["step"] != "already-free" || row["freed"] != true || row["state"] != "free" {
					t.Errorf("%s: row %v, want already-free", obj.Host, row)
				}
			}
		}
		if !seen["lab01"] || !seen["lab02"] || len(seen) != 2 {
			t.Errorf("hosts in JSON: %v", seen)
		}
		// The rerun changed nothing: its units were stopped already.
		if services {
			requireContains(t, r.stdout, `"changed":0,`, `"units_stopped":0,`, `"units_unchanged":4,`)
		}
	})
}

// A worker that a supervisor restarts: the free is not verified (the
// worker comes back inside the settle) and the host fails naming the
// supervisor; asked to, gpush kills the supervisor's tree from the top and
// the GPU stays free. The monitor and the protected daemon live through both.
func TestRespawningSupervisor(t *testing.T) {
	l := startLab(t, lab.Options{Hosts: 1, Scenario: lab.ScenarioRespawn})
	sup := l.Find("lab01", lab.RoleSupervisor)[0]
	r := gpush(t, l, "run", "free_gpus.lua", "-e", "grace=1s", "-e", `{"settle": "3s", "timeout": "3s"}`)
	if r.code != 2 {
		t.Errorf("exit %d, want 2 (a host failed)", r.code)
	}
	requireContains(t, r.stdout, "failed=1", "ERROR GPU 3 not freed: ",
		fmt.Sprintf("pid %d (sh -c while", sup.PID), fmt.Sprintf("may restart its workers: kill %d", sup.PID))
	if old := l.Find("lab01", lab.RoleRespawner); len(old) < 2 {
		t.Errorf("respawners %v: the one killed should have come back", old)
	}
	if !lab.Alive(sup) {
		t.Fatal("the supervisor must not be killed unless asked")
	}

	r = gpush(t, l, "run", "free_gpus.lua", "-e", "grace=1s", "-e", `{"settle": "3s", "timeout": "3s", "stop_restarters": true}`)
	if r.code != 0 {
		t.Errorf("exit %d, want 0", r.code)
	}
	requireRowHas(t, r.stdout, "lab01", 3, "3 by-stop true free") // the supervisor's stop ended its worker
	if n, live := alive(l, "lab01", lab.RoleSupervisor); live != 0 {
		t.Errorf("supervisor: %d of %d alive after stop_restarters", live, n)
	}
	if n, live := alive(l, "lab01", lab.RoleRespawner); live != 0 {
		t.Errorf("respawner: %d of %d alive", live, n)
	}
	for _, role := range []string{lab.RolePersistenced, lab.RoleMonitor, lab.RoleUnrelated} {
		if n, live := alive(l, "lab01", role); n == 0 || live != n {
			t.Errorf("%s must be left alone", role)
		}
	}
}
