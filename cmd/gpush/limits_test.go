package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stuckScript writes an inventory of two local hosts and a script that
// returns at once on "fine" and, on "stuck", says "started" and then runs a
// backtracking string.find that would take years: one builtin call the Lua
// VM cannot interrupt.
func stuckScript(t *testing.T) (inv, script string) {
	t.Helper()
	dir := t.TempDir()
	inv, script = filepath.Join(dir, "inv.yaml"), filepath.Join(dir, "stuck.lua")
	for p, src := range map[string]string{
		inv: "all:\n  vars: {ansible_connection: local}\n  hosts:\n    stuck:\n    fine:\n",
		script: `if host.name == "fine" then return "done" end
print("started")
return string.find(string.rep("a", 3000), string.rep("a*", 4) .. "b")
`,
	} {
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return inv, script
}

// gpushProc is the real gpush binary running, its output being collected.
type gpushProc struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	mu     sync.Mutex
	stderr bytes.Buffer
}

func startGpush(t *testing.T, args ...string) *gpushProc {
	t.Helper()
	buildReplBins(t)
	p := &gpushProc{cmd: exec.Command(replBins.gpush, args...)}
	p.cmd.Env = append(os.Environ(), "NO_COLOR=1", "HOME="+t.TempDir(), "XDG_CACHE_HOME="+t.TempDir())
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(out)
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed by its own pid if the test ends early; a no-op once waited.
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *gpushProc) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLine reads stdout up to a line containing s.
func (p *gpushProc) waitLine(t *testing.T, s string) {
	t.Helper()
	for {
		line, err := p.out.ReadString('\n')
		if strings.Contains(line, s) {
			return
		}
		if err != nil {
			t.Fatalf("no line with %q on stdout (%v); stderr %q", s, err, p.errText())
		}
	}
}

// waitBusy waits until the process has spent 0.3 s of CPU time more: the
// only thing in it that can is the stuck string.find, so the script is
// inside it (the "started" line alone races with the signal).
func (p *gpushProc) waitBusy(t *testing.T) {
	t.Helper()
	cpu := func() int {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			t.Fatalf("gpush's CPU time: %v", err)
		}
		// Fields after the command name (in parentheses): state is 3rd,
		// utime and stime the 14th and 15th.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		u, _ := strconv.Atoi(f[11])
		s, _ := strconv.Atoi(f[12])
		return u + s
	}
	start := cpu()
	for cpu()-start < 30 {
		time.Sleep(20 * time.Millisecond)
	}
}

// wait reads the rest of stdout and returns it with the exit status.
func (p *gpushProc) wait(t *testing.T) (int, string) {
	t.Helper()
	rest, _ := io.ReadAll(p.out)
	err := p.cmd.Wait()
	var x *exec.ExitError
	if err != nil && !errors.As(err, &x) {
		t.Fatalf("wait: %v", err)
	}
	return p.cmd.ProcessState.ExitCode(), string(rest)
}

// TestRunTimeoutEndsStuckBuiltin: --timeout ends the run although a host is
// inside a builtin that never returns; the other host's result stands.
func TestRunTimeoutEndsStuckBuiltin(t *testing.T) {
	inv, script := stuckScript(t)
	p := startGpush(t, "run", script, "-i", inv, "--timeout", "1s", "--json")
	code, out := p.wait(t)
	if code != 2 || !strings.Contains(out, `"type":"host","host":"stuck","status":"failed","value":null,"error":"did not stop: abandoned after --timeout 1s"`) ||
		!strings.Contains(out, `"type":"host","host":"fine","status":"ok","value":"done"`) ||
		!strings.Contains(out, `{"type":"summary","hosts":2,"counts":{"failed":1,"ok":1,"skipped":0,"unreachable":0},"exit_code":2,"interrupted":false`) {
		t.Errorf("exit %d (want 2)\nstdout %s\nstderr %s", code, out, p.errText())
	}
}

// TestRunInterruptEndsStuckBuiltin: one Ctrl-C ends the run after the grace;
// the stuck host is failed "did not stop", and the run exits 99 as an
// interrupted ansible-playbook does.
func TestRunInterruptEndsStuckBuiltin(t *testing.T) {
	inv, script := stuckScript(t)
	p := startGpush(t, "run", script, "-i", inv)
	p.waitLine(t, "stuck | INFO started")
	p.waitBusy(t)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait(t)
	if code != 99 || !strings.Contains(out, "interrupted; did not stop: abandoned") || !strings.Contains(p.errText(), "interrupt again to quit now") ||
		!strings.Contains(out, "  interrupted\n") {
		t.Errorf("exit %d (want 99)\nstdout %s\nstderr %s", code, out, p.errText())
	}
}

// TestRunSecondInterruptQuits: a second Ctrl-C quits at once with 130,
// naming the unfinished host; the finished one is still reported.
func TestRunSecondInterruptQuits(t *testing.T) {
	inv, script := stuckScript(t)
	p := startGpush(t, "run", script, "-i", inv)
	p.waitLine(t, "stuck | INFO started")
	p.waitBusy(t)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// Two signals sent at once may arrive as one: wait for the first to be
	// taken before the second.
	for !strings.Contains(p.errText(), "interrupt again to quit now") {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait(t)
	if code != 130 || !strings.Contains(p.errText(), "gpush: quit at the second interrupt; unfinished: stuck\n") ||
		!strings.Contains(out, "unfinished: quit at the second interrupt") {
		t.Errorf("exit %d (want 130)\nstdout %s\nstderr %s", code, out, p.errText())
	}
	t.Logf("stdout:\n%s", out)
}

// TestRunMemoryLimit: --lua-memory bounds each host's Lua data; the hosts
// that pass it fail "memory limit", the other finishes ok.
func TestRunMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	inv, script := filepath.Join(dir, "inv.yaml"), filepath.Join(dir, "greedy.lua")
	for p, src := range map[string]string{
		inv: "all:\n  vars: {ansible_connection: local}\n  hosts:\n    rep:\n    grow:\n    fine:\n",
		script: `if host.name == "rep" then return #string.rep("x", 2^40) end
if host.name == "grow" then local t = {}; while true do t[#t+1] = #t end end
return "done"
`,
	} {
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := gpush(t, "run", script, "-i", inv, "--json", "--lua-memory", "16MiB", "--timeout", "2m")
	if code != 2 || !strings.Contains(out, `"host":"rep","status":"failed","value":null,"error":"memory limit: string.rep would make 1 TiB, over the limit of 16 MiB per host`) ||
		!strings.Contains(out, `"host":"grow","status":"failed","value":null,"error":"memory limit: its Lua data passed 16 MiB`) ||
		!strings.Contains(out, `"host":"fine","status":"ok","value":"done"`) {
		t.Errorf("exit %d (want 2)\nstdout %s\nstderr %s", code, out, errs)
	}
	code, _, errs = gpush(t, "run", script, "-i", inv, "--lua-memory", "lots")
	if code != 1 || !strings.Contains(errs, `--lua-memory: "lots" is not a size like 256MiB`) {
		t.Errorf("--lua-memory lots: exit %d, stderr %q; want 1 naming the flag", code, errs)
	}
}

// memCgroup makes a memory cgroup (v1) of limit bytes below the test's own
// and returns its folder; it is removed when the test ends (its processes
// must have ended by then).
func memCgroup(t *testing.T, limit int64) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	var own string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[1] == "memory" {
			own = f[2]
		}
	}
	base := filepath.Join("/sys/fs/cgroup/memory", own)
	if own == "" {
		t.Skip("no cgroup v1 memory controller")
	}
	dir, err := os.MkdirTemp(base, "gpush-limits-test-")
	if err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return dir
}

// TestRunMemoryLimitInCgroup: in a 768 MiB memory cgroup, a host growing a
// table without end fails "memory limit" and the run reports the other
// host; with the limit raised past the cgroup, the same run is OOM-killed,
// which shows the cgroup bites.
func TestRunMemoryLimitInCgroup(t *testing.T) {
	buildReplBins(t)
	cg := memCgroup(t, 768<<20)
	dir := t.TempDir()
	inv, script := filepath.Join(dir, "inv.yaml"), filepath.Join(dir, "grow.lua")
	for p, src := range map[string]string{
		inv:    "all:\n  vars: {ansible_connection: local}\n  hosts:\n    grow:\n    fine:\n",
		script: "if host.name == \"fine\" then return \"done\" end\nlocal t = {}; while true do t[#t+1] = #t end\n",
	} {
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(limit string) (int, string, string, error) {
		// The shell joins the cgroup, then becomes gpush.
		cmd := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
			replBins.gpush, "run", script, "-i", inv, "--json", "--lua-memory", limit, "--timeout", "5m")
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CACHE_HOME="+t.TempDir())
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return cmd.ProcessState.ExitCode(), out.String(), errb.String(), err
	}
	code, out, errs, _ := run("128MiB")
	if code != 2 || !strings.Contains(out, `"host":"grow","status":"failed","value":null,"error":"memory limit: its Lua data passed 128 MiB`) ||
		!strings.Contains(out, `"host":"fine","status":"ok","value":"done"`) {
		t.Errorf("--lua-memory 128MiB in 768 MiB: exit %d (want 2)\nstdout %s\nstderr %s", code, out, errs)
	}
	code, out, errs, err := run("64GiB")
	var x *exec.ExitError
	if !errors.As(err, &x) || x.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("--lua-memory 64GiB in 768 MiB: exit %d, %v; want killed by the OOM killer\nstdout %s\nstderr %s", code, err, out, errs)
	}
}
