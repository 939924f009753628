package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/sshd"

	"github.com/gpush/gpush/lab/labgpu"
	// What the gpush binary under test is made of: importing them makes
	// `go test`'s cache rerun these tests when they change.
	_ "github.com/gpush/gpush/helper"
	_ "github.com/gpush/gpush/lua"
	_ "github.com/gpush/gpush/remote"
	_ "github.com/gpush/gpush/report"
)

// replBins are the binaries the repl tests drive, built once per test
// binary: gpush (helper embedded, as make build does) and the lab's.
var replBins struct {
	once  sync.Once
	err   error
	dir   string
	gpush string
	lab   lab.Binaries
	// goCache is the Go build cache of this test run. Tests give gpush a
	// HOME and XDG_CACHE_HOME of their own, which would also give the
	// helper it builds from source (the architectures not embedded) an
	// empty cache: 16s (28 CPU-s) for arm64 on an idle 2-core machine,
	// over 40s under CI load, on every gpush started.
	goCache string
}

func buildReplBins(t *testing.T) {
	t.Helper()
	replBins.once.Do(func() {
		replBins.dir, replBins.err = os.MkdirTemp("", "gpush-repl-test-")
		if replBins.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		replBins.gpush = filepath.Join(replBins.dir, "gpush")
		if replBins.err = lab.BuildGpush(ctx, replBins.gpush); replBins.err != nil {
			return
		}
		if replBins.lab, replBins.err = lab.Build(ctx, replBins.dir, lab.Binaries{}); replBins.err != nil {
			return
		}
		out, err := exec.CommandContext(ctx, "go", "env", "GOCACHE").Output()
		if err != nil {
			replBins.err = fmt.Errorf("go env GOCACHE: %w", err)
			return
		}
		replBins.goCache = strings.TrimSpace(string(out))
	})
	if replBins.err != nil {
		t.Fatalf("build: %v", replBins.err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if replBins.dir != "" {
		os.RemoveAll(replBins.dir)
	}
	os.Exit(code)
}

// localGPUs lays out one simulated GPU host reached without SSH: fake
// device files and its own copy of the fake nvidia-smi, configured beside
// it. It returns the inventory vars that point the helper there.
func localGPUs(t *testing.T, dir string, gpus int) (devDir, smi string) {
	t.Helper()
	devDir, smi = filepath.Join(dir, "dev"), filepath.Join(dir, "smi", "nvidia-smi")
	for _, d := range []string{devDir, filepath.Dir(smi)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := labgpu.Config{DevDir: devDir}
	for _, n := range []string{"nvidiactl", "nvidia-uvm"} {
		if err := os.WriteFile(filepath.Join(devDir, n), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < gpus; i++ {
		if err := os.WriteFile(filepath.Join(devDir, fmt.Sprintf("nvidia%d", i)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
		cfg.GPUs = append(cfg.GPUs, labgpu.GPU{Index: i, Name: "NVIDIA H200", TotalMiB: 143771,
			UUID: fmt.Sprintf("GPU-00000000-0000-4000-8000-%012d", i), BusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10)})
	}
	b, err := os.ReadFile(replBins.lab.FakeSMI)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(smi, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Save(filepath.Join(filepath.Dir(smi), labgpu.ConfigName)); err != nil {
		t.Fatal(err)
	}
	return devDir, smi
}

// holdGPU starts a gpu-holder on dev (a fake /dev/nvidiaN) using mib, and
// kills it when the test ends.
func holdGPU(t *testing.T, dev string, mib int) {
	t.Helper()
	cmd := exec.Command(replBins.lab.Holder, "--dev", dev, "--dev", filepath.Join(filepath.Dir(dev), "nvidiactl"), "--mem-mib", fmt.Sprint(mib))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, ok := labgpu.ReadyPID(line); err != nil || !ok {
		t.Fatalf("gpu-holder: %q, %v", line, err)
	}
}

// localInventory: lab01 with a GPU 0 holder, lab[02-03] idle (sharing one
// simulated host), all reached without SSH; down01 over SSH to a closed port.
func localInventory(t *testing.T) string {
	t.Helper()
	buildReplBins(t)
	dir := t.TempDir()
	busyDev, busySMI := localGPUs(t, filepath.Join(dir, "busy"), 2)
	idleDev, idleSMI := localGPUs(t, filepath.Join(dir, "idle"), 2)
	holdGPU(t, filepath.Join(busyDev, "nvidia0"), 10240)
	inv := fmt.Sprintf(`all:
  vars:
    ansible_connection: local
    gpush_remote_dir: %[1]s/remote
  children:
    lab:
      hosts:
        lab01: {gpush_dev_dir: %[2]s, gpush_nvidia_smi: %[3]s}
        lab02: {gpush_dev_dir: %[4]s, gpush_nvidia_smi: %[5]s}
        lab03: {gpush_dev_dir: %[4]s, gpush_nvidia_smi: %[5]s}
    down:
      hosts:
        down01: {ansible_connection: ssh, ansible_host: 127.0.0.1, ansible_port: 1}
`, dir, busyDev, busySMI, idleDev, idleSMI)
	p := filepath.Join(dir, "inv.yaml")
	if err := os.WriteFile(p, []byte(inv), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// term is gpush running on a pseudo-terminal.
type term struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	buf  bytes.Buffer
	seen int // Expect searches after this offset
	done chan struct{}
}

func startTerm(t *testing.T, env []string, args ...string) *term {
	t.Helper()
	cmd := exec.Command(replBins.gpush, args...)
	// The last of a duplicate wins: a test's own GOCACHE stays its own.
	cmd.Env = append(append(os.Environ(), "GOCACHE="+replBins.goCache), env...)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatalf("start gpush on a pty: %v", err)
	}
	tm := &term{t: t, cmd: cmd, pty: f, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		b := make([]byte, 4096)
		for {
			n, err := f.Read(b)
			tm.mu.Lock()
			tm.buf.Write(b[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		f.Close()
		<-tm.done
		t.Logf("terminal output:\n%s", tm.output())
	})
	return tm
}

func (tm *term) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.buf.String()
}

// ansiSeq matches the terminal control sequences the line editor and the
// progress line write (CSI: cursor moves, erase, colours).
var ansiSeq = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// screen is the output as text, control sequences stripped.
func (tm *term) screen() string { return ansiSeq.ReplaceAllString(tm.output(), "") }

// expect waits for want to appear on the screen (control sequences
// stripped) after what earlier expects consumed. The deadline only guards
// against a hang; nothing here measures speed.
func (tm *term) expect(want string) {
	tm.t.Helper()
	tm.expectIn(want, tm.screen)
}

// expectRaw waits for want in the bytes as written (colours included),
// anywhere: offsets in them are not the screen's, so it leaves those alone.
func (tm *term) expectRaw(want string) {
	tm.t.Helper()
	seen := tm.seen
	tm.seen = 0
	tm.expectIn(want, tm.output)
	tm.seen = seen
}

func (tm *term) expectIn(want string, text func() string) {
	tm.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := text()
		if i := strings.Index(out[tm.seen:], want); i >= 0 {
			tm.seen += i + len(want)
			return
		}
		select {
		case <-tm.done:
			tm.t.Fatalf("gpush ended without printing %q; after the last match:\n%s", want, out[tm.seen:])
		default:
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("no %q in the output; after the last match:\n%s", want, out[tm.seen:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lacks says want does not appear between the last match and the next one
// of upTo (which it waits for).
func (tm *term) lacks(want, upTo string) {
	tm.t.Helper()
	from := tm.seen
	tm.expect(upTo)
	if seg := tm.screen()[from:tm.seen]; strings.Contains(seg, want) {
		tm.t.Errorf("unexpected %q in:\n%s", want, seg)
	}
}

func (tm *term) send(s string) {
	tm.t.Helper()
	if _, err := tm.pty.Write([]byte(s)); err != nil {
		tm.t.Fatalf("write to pty: %v", err)
	}
}

func (tm *term) wait() int {
	tm.t.Helper()
	err := tm.cmd.Wait()
	var x *exec.ExitError
	switch {
	case errors.As(err, &x):
		return x.ExitCode()
	case err != nil:
		tm.t.Fatalf("wait: %v", err)
	}
	return 0
}

func TestReplTerminal(t *testing.T) {
	inv := localInventory(t)
	cache := t.TempDir()
	tm := startTerm(t, []string{"NO_COLOR=1", "HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + cache, "TERM=xterm"},
		"repl", "-i", inv, "-e", "greeting=hi")
	tm.expect("down01: UNREACHABLE: ")
	tm.expect("3 hosts open (lab[01-03])")
	tm.expect("gpush lab[01-03]> ")

	// An expression shows its value, gathered over the hosts.
	tm.send("1 + 1\r")
	tm.expect("lab[01-03]: 2\r\n")
	// Real GPU data, different per host: lab01's holder.
	tm.send("#gpu.holders()\r")
	tm.expect("lab01: 1\r\n")
	tm.expect("lab[02-03]: 0\r\n")
	// Lists of records are one fleet table; Tab completes gpu.me -> gpu.mem.
	tm.send("gpu.me\t")
	tm.expect("gpu.mem")
	tm.send("()\r")
	tm.expect("HOST")
	tm.expect("USED_MIB")
	tm.expect("lab01       1  0      NVIDIA H200  10240")
	tm.expect("lab[02-03]  2  0      NVIDIA H200  0")
	tm.expect("gpush lab[01-03]> ")

	// A statement shows nothing, its globals persist; an open block continues.
	tm.send("n = 0\r")
	tm.expect("n = 0")
	tm.lacks("lab[01-03]:", "gpush lab[01-03]> ")
	tm.send("for i = 1, 3 do\r")
	tm.expect("gpush lab[01-03]>> ")
	tm.send("n = n + i\r")
	tm.expect("gpush lab[01-03]>> ")
	tm.send("end\r")
	tm.expect("gpush lab[01-03]> ")
	tm.send("n, vars.greeting\r")
	tm.expect("lab[01-03]: 6\thi\r\n")

	// Errors per host; log lines stream with the host in front.
	tm.send("print('from ' .. host.name)\r")
	tm.expect("lab01 | from lab01\r\n")
	tm.send("error('boom')\r")
	tm.expect("lab[01-03]: error: <string>:1: boom")

	// .limit narrows to open hosts, .all widens again.
	tm.send(".limit lab0[2-3]\r")
	tm.expect("gpush lab[02-03]> ")
	tm.send("host.name\r")
	tm.expect("lab02: lab02\r\nlab03: lab03\r\n")
	tm.send(".limit down\r")
	tm.expect("matches no open host")
	tm.expect("gpush lab[02-03]> ")
	tm.send(".hosts\r")
	tm.expect("open: lab[01-03] (3)")
	tm.expect("selected: lab[02-03] (2)")
	tm.expect("left out: down01 (1)")
	tm.send(".all\r")
	tm.expect("gpush lab[01-03]> ")
	tm.send(".frob\r")
	tm.expect("unknown command .frob")

	// Ctrl-C interrupts a running evaluation on every host, back to the prompt.
	tm.send("print('sleeping on ' .. host.name); sleep('1h')\r")
	tm.expect("| sleeping on lab0")
	tm.expect("| sleeping on lab0")
	tm.expect("| sleeping on lab0")
	tm.send("\x03")
	tm.expect("lab[01-03]: interrupted\r\n")
	tm.expect("gpush lab[01-03]> ")
	tm.send("'alive'\r")
	tm.expect("lab[01-03]: alive")

	// Ctrl-C with a half-typed chunk drops it; at an empty prompt it never
	// leaves, however often; Ctrl-D does.
	tm.send("for i = 1, 2 do\r")
	tm.expect(">> ")
	tm.send("\x03")
	tm.expect("gpush lab[01-03]> ")
	for i := 0; i < 3; i++ {
		tm.send("\x03")
		tm.expect("(Ctrl-D or .exit to leave)")
		tm.expect("gpush lab[01-03]> ")
	}
	tm.send("'still here'\r")
	tm.expect("lab[01-03]: still here")
	tm.expect("gpush lab[01-03]> ")
	tm.send("\x04")
	if code := tm.wait(); code != 0 {
		t.Errorf("exit %d after Ctrl-D, want 0", code)
	}
	// The block of three lines is one entry, joined; the file is 0600.
	histPath := filepath.Join(cache, "gpush", "repl_history")
	hist, err := os.ReadFile(histPath)
	if err != nil || !strings.Contains(string(hist), "1 + 1\n") || !strings.Contains(string(hist), "\nfor i = 1, 3 do n = n + i end\n") ||
		strings.Contains(string(hist), "\nn = n + i\n") {
		t.Errorf("history: %q, %v", hist, err)
	}
	if st, err := os.Stat(histPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("history file mode: %v, %v; want 0600", st.Mode(), err)
	}
}

// Ctrl-D and .exit leave with status 0.
func TestReplTerminalExit(t *testing.T) {
	inv := localInventory(t)
	env := []string{"NO_COLOR=1", "HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir()}
	for _, keys := range []string{"\x04", ".exit\r"} {
		tm := startTerm(t, env, "repl", "-i", inv, "--limit", "lab")
		tm.expect("gpush lab[01-03]> ")
		tm.send(keys)
		if code := tm.wait(); code != 0 {
			t.Errorf("%q: exit %d, want 0", keys, code)
		}
	}
}

// Colour on a terminal: errors red, unless NO_COLOR is set.
func TestReplTerminalColor(t *testing.T) {
	inv := localInventory(t)
	tm := startTerm(t, []string{"HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir()}, "repl", "-i", inv, "--limit", "lab01")
	tm.expect("gpush lab01> ")
	tm.send("error('red')\r")
	tm.expectRaw("\x1b[31merror: <string>:1: red\x1b[0m")
	tm.send(".exit\r")
	tm.wait()
}

// runPiped runs gpush repl with stdin from a pipe (not a terminal).
func runPiped(t *testing.T, input string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, replBins.gpush, append([]string{"repl"}, args...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "HOME="+t.TempDir(), "XDG_CACHE_HOME="+t.TempDir())
	cmd.Stdin = strings.NewReader(input)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var x *exec.ExitError
	switch {
	case errors.As(err, &x):
		code = x.ExitCode()
	case err != nil:
		t.Fatalf("gpush repl: %v", err)
	}
	t.Logf("gpush repl %s -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

func TestReplPiped(t *testing.T) {
	inv := localInventory(t)
	// No prompt, no banner: just the results, chunks spanning lines.
	code, out, _ := runPiped(t, "x = 40\nfunction f(a)\n  return a + 2\nend\nreturn f(x)\n#gpu.holders()\n", "-i", inv, "--limit", "lab")
	want := "lab[01-03]: 42\nlab01: 1\nlab[02-03]: 0\n"
	if code != 0 || out != want {
		t.Errorf("exit %d, stdout %q; want 0, %q", code, out, want)
	}
	// A host failing an evaluation: exit 2; an unfinished chunk at the end is
	// evaluated as it is (its syntax error shows).
	code, out, _ = runPiped(t, "if host.name == 'lab02' then error('no') end\nfor i = 1, 2 do\n", "-i", inv, "--limit", "lab")
	if code != 2 || !strings.Contains(out, "lab02: error: <string>:1: no\n") || !strings.Contains(out, "lab[01-03]: error: ") {
		t.Errorf("exit %d, stdout %q; want 2 with lab02's error and the syntax error", code, out)
	}
	// An unreachable host: reported on stderr, left out, exit 4.
	code, out, errOut := runPiped(t, "host.name\n", "-i", inv, "--limit", "lab01,down01")
	if code != 4 || out != "lab01: lab01\n" || !strings.Contains(errOut, "down01: UNREACHABLE: ") || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 4, lab01 only, down01 named", code, out, errOut)
	}
	// Nothing reachable: exit 4 before reading any input.
	code, _, errOut = runPiped(t, "1\n", "-i", inv, "--limit", "down")
	if code != 4 || !strings.Contains(errOut, "no host could be reached") {
		t.Errorf("exit %d, stderr %q; want 4", code, errOut)
	}
	// Dot commands work without a terminal too.
	code, out, _ = runPiped(t, ".limit lab01\nhost.name\n.all\nhost.name == 'lab01'\n", "-i", inv, "--limit", "lab")
	if code != 0 || out != "lab01: lab01\nlab01: true\nlab[02-03]: false\n" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	// --timeout bounds each input on each host; the sessions go on.
	code, out, _ = runPiped(t, "host.name == 'lab02' and sleep('1h')\n'next'\n", "-i", inv, "--limit", "lab", "--timeout", "300ms")
	if code != 2 || out != "lab[01,03]: false\nlab02: error: timed out after 300ms\nlab[01-03]: next\n" {
		t.Errorf("--timeout: exit %d, stdout %q", code, out)
	}
	// --check reaches the state.
	code, out, _ = runPiped(t, "check\n", "-i", inv, "--limit", "lab01", "--check")
	if code != 0 || out != "lab01: true\n" {
		t.Errorf("--check: exit %d, stdout %q", code, out)
	}
}

// SIGINT without a terminal ends the session: the running evaluation is
// interrupted and nothing after it runs.
func TestReplPipedInterrupt(t *testing.T) {
	inv := localInventory(t)
	cmd := exec.Command(replBins.gpush, "repl", "-i", inv, "--limit", "lab01")
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "HOME="+t.TempDir(), "XDG_CACHE_HOME="+t.TempDir())
	cmd.Stdin = strings.NewReader("print('sleeping'); sleep('1h')\n'after'\n")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, "lab01 | sleeping") {
		t.Fatalf("first line %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	var x *exec.ExitError
	if !errors.As(err, &x) || x.ExitCode() != 2 {
		t.Errorf("exit %v, want 2", err)
	}
	if !strings.Contains(string(rest), "lab01: interrupted\n") || strings.Contains(string(rest), "after") ||
		!strings.Contains(errb.String(), "gpush: interrupted") {
		t.Errorf("after SIGINT: stdout %q, stderr %q", rest, errb.String())
	}
}

func TestReplUsage(t *testing.T) {
	inv := writeInventory(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"repl"}, "--inventory"},
		{[]string{"repl", "-i", inv, "extra"}, "extra"},
		{[]string{"repl", "-i", inv, "--forks", "0"}, "--forks"},
		{[]string{"repl", "-i", inv, "--host-key-policy", "yolo"}, "--host-key-policy"},
		{[]string{"repl", "-i", inv, "--limit", "nomatch*"}, "--limit"},
		{[]string{"repl", "-i", inv, "-e", "oops"}, "-e"},
		{[]string{"repl", "-i", inv, "--timeout", "-1s"}, "--timeout"},
	} {
		code, _, stderr := gpush(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("gpush %q: exit %d, stderr %q; want 1 naming %q", c.args, code, stderr, c.want)
		}
	}
	code, out, _ := gpush(t, "repl", "--help")
	if code != 0 || !strings.Contains(out, ".limit PATTERN") || !strings.Contains(out, "Ctrl-C") {
		t.Errorf("repl --help: exit %d\n%s", code, out)
	}
}

// startReplLab starts two lab hosts with leftovers behind the lab's real
// sshd, stopped when the test ends. It skips without root or sshd, except
// in CI, where sshd must be there.
func startReplLab(t *testing.T) *lab.Lab {
	t.Helper()
	if _, err := sshd.FindBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs sshd: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	buildReplBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, lab.Options{Hosts: 2, Scenario: lab.ScenarioLeftovers, Dir: t.TempDir(), Bin: replBins.lab,
		SSHD: sshd.Options{LogLevel: os.Getenv("GPUSH_TEST_SSHD_LOGLEVEL")}})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatalf("start lab: %v", err)
	}
	// A failure shows what sshd did (GPUSH_TEST_SSHD_LOGLEVEL=DEBUG3 for more).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lab sshd log:\n%s", l.SSHD.Logs())
		}
		l.Stop()
	})
	return l
}

// Over SSH: lab hosts behind a real OpenSSH sshd on loopback.
func TestReplLabSSH(t *testing.T) {
	l := startReplLab(t)
	tm := startTerm(t, []string{"NO_COLOR=1", "SSH_AUTH_SOCK=", "HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir()},
		"repl", "-i", l.Inventory, "--known-hosts", l.KnownHosts)
	tm.expect("gpush lab[01-02]> ")
	tm.send("host.vars.lab_scenario, #gpu.mem()\r")
	tm.expect("lab[01-02]: leftovers\t4\r\n")
	// The same sessions answer again (one connection per host, reused).
	tm.send("gpu.mem()[1].used_mib > 0, gpu.mem()[1].total_mib\r")
	tm.expect("lab[01-02]: true\t")
	tm.send(".exit\r")
	if code := tm.wait(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// What an operator sees of the fleet: holders and kill results as tables,
// check mode in the prompt, .doc, forks, the progress line, Ctrl-C keeping
// the hosts that answered, a block recalled as one history entry, and a
// history file readable by others narrowed to 0600.
func TestReplTerminalFleetView(t *testing.T) {
	inv := localInventory(t)
	cache := t.TempDir()
	histPath := filepath.Join(cache, "gpush", "repl_history")
	if err := os.MkdirAll(filepath.Dir(histPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(histPath, []byte("old = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tm := startTerm(t, []string{"NO_COLOR=1", "HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + cache, "TERM=xterm"},
		"repl", "-i", inv, "--limit", "lab", "-f", "7")
	tm.expect("was mode 0644: narrowed to 0600")
	tm.expect("3 hosts open (lab[01-03]), 7 at once")
	tm.expect("gpush lab[01-03]> ")

	// Holders: one table (lists and maps of a holder as cells), no JSON.
	tm.send("gpu.holders()\r")
	tm.expect("HOST   PID")
	tm.expect("MEM_BY_GPU")
	tm.expect("lab01  ")
	tm.lacks(`{"`, "gpush lab[01-03]> ")
	tm.send("h = gpu.holders()[1]; return h.comm, h.gpus[1], h.mem_by_gpu[0]\r")
	tm.expect("lab01: gpu-holder\t0\t10240\r\n")

	// Check mode: in the prompt and in what gpu.kill does; its results are a
	// table under their field name (rows, and the plan as would), the counts inline.
	tm.send(".check on\r")
	tm.expect("check mode on")
	tm.expect("gpush[check] lab[01-03]> ")
	tm.send(".limit lab01\r")
	tm.expect("gpush[check] lab01> ")
	tm.send("gpu.kill(gpu.holders())\r")
	tm.expect("rows:\r\n")
	tm.expect("OUTCOME")
	tm.expect("would-kill")
	tm.expect("would:\r\n")
	tm.expect(`lab01: {"`)
	tm.expect(`"status":"would"`)
	tm.send("check, #gpu.holders()\r")
	tm.expect("lab01: true\t1\r\n")
	tm.send(".check off\r")
	tm.expect("check mode off")
	tm.expect("gpush lab01> ")
	tm.send("check\r")
	tm.expect("lab01: false\r\n")
	tm.send(".all\r")
	tm.expect("gpush lab[01-03]> ")

	// .doc: the module's reference; .hosts: forks and check mode.
	// print lines come untagged, log lines with their level.
	tm.send("print('plain ' .. host.name); log.warn('careful')\r")
	tm.expect("lab01 | plain lab01\r\n")
	tm.expect("lab01 | WARN careful\r\n")
	tm.send("print('again')\r")
	tm.lacks("INFO", "gpush lab[01-03]> ")

	tm.send(".doc gpu\r")
	tm.expect("## gpu.holders([filter]) -> list of holders")
	tm.send(".doc nosuch\r")
	tm.expect(`.doc "nosuch": no such module (modules: `)
	tm.send(".hosts\r")
	tm.expect("open: lab[01-03] (3), 7 at once (--forks)")
	tm.expect("check: off")

	// A call still running on some hosts: the progress line counts those
	// that answered and names the others; Ctrl-C keeps lab01's answer.
	tm.send("if host.name ~= 'lab01' then sleep('1h') end; return 'done on ' .. host.name\r")
	tm.expect("[1/3] answered, waiting: lab[02-03]")
	tm.send("\x03")
	tm.expect("lab01: done on lab01\r\n")
	tm.expect("lab[02-03]: interrupted\r\n")
	tm.lacks("context canceled", "gpush lab[01-03]> ")

	// A block is one history entry: Up brings it back on one line.
	tm.send("for i = 1, 2 do\r")
	tm.expect("gpush lab[01-03]>> ")
	tm.send("x = i\r")
	tm.expect("gpush lab[01-03]>> ")
	tm.send("end\r")
	tm.expect("gpush lab[01-03]> ")
	tm.send("x = 0\r")
	tm.expect("gpush lab[01-03]> ")
	tm.send("\x1b[A\x1b[A")
	tm.expect("> for i = 1, 2 do x = i end")
	tm.send("\r")
	tm.expect("gpush lab[01-03]> ")
	tm.send("x\r")
	tm.expect("lab[01-03]: 2\r\n")
	tm.send("\x04")
	if code := tm.wait(); code != 0 {
		t.Errorf("exit %d", code)
	}
	hist, err := os.ReadFile(histPath)
	if err != nil || !strings.HasPrefix(string(hist), "old = 1\n") || strings.Count(string(hist), "for i = 1, 2 do x = i end\n") != 2 ||
		strings.Contains(string(hist), "\nx = i\n") || !strings.Contains(string(hist), "\n.check on\n") {
		t.Errorf("history %q, %v", hist, err)
	}
	if st, err := os.Stat(histPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("history mode %v, %v", st.Mode(), err)
	}
}

// relay forwards TCP to addr while up; drop cuts the connections it carries.
type relay struct {
	t     *testing.T
	ln    net.Listener
	addr  string
	up    atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func startRelay(t *testing.T, addr string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{t: t, ln: ln, addr: addr}
	t.Cleanup(func() { ln.Close(); r.drop() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !r.up.Load() {
				c.Close() // as a host that is down: the SSH handshake fails
				continue
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, s)
			r.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return r
}

func (r *relay) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

func (r *relay) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// .reconnect over SSH: a host down at the start joins once it is up; a
// host whose connection is cut is left out as lost, and comes back.
func TestReplReconnect(t *testing.T) {
	l := startReplLab(t)
	rl := startRelay(t, fmt.Sprintf("127.0.0.1:%d", l.SSHD.Port))
	// lab01 straight to the sshd, lab02 through the relay.
	var inv strings.Builder
	fmt.Fprintf(&inv, "all:\n  vars:\n    ansible_host: 127.0.0.1\n    ansible_user: %s\n    ansible_ssh_private_key_file: %s\n    gpush_remote_dir: %s\n  hosts:\n",
		l.User, l.ClientKey, filepath.Join(l.Dir, "remote"))
	for i, h := range l.Hosts {
		port := l.SSHD.Port
		if i == 1 {
			port = rl.port()
		}
		fmt.Fprintf(&inv, "    %s: {ansible_port: %d, gpush_dev_dir: %s, gpush_nvidia_smi: %s, gpush_systemctl: %s}\n", h.Name, port, h.DevDir, h.SMI, h.Systemctl)
	}
	dir := t.TempDir()
	invPath, known := filepath.Join(dir, "inv.yaml"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(invPath, []byte(inv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.SSHD.WriteKnownHosts(known, fmt.Sprintf("[127.0.0.1]:%d", l.SSHD.Port), fmt.Sprintf("[127.0.0.1]:%d", rl.port())); err != nil {
		t.Fatal(err)
	}

	tm := startTerm(t, []string{"NO_COLOR=1", "SSH_AUTH_SOCK=", "HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir()},
		"repl", "-i", invPath, "--known-hosts", known)
	tm.expect("lab02: UNREACHABLE: ")
	tm.expect("gpush lab01> ")
	tm.send(".reconnect\r") // still down
	tm.expect("lab02: UNREACHABLE: ")
	tm.expect("gpush lab01> ")
	rl.up.Store(true)
	tm.send(".reconnect\r")
	tm.expect("lab02: reconnected (1; new Lua states)")
	tm.expect("gpush lab[01-02]> ")
	tm.send("x = host.name; return #gpu.mem()\r")
	tm.expect("lab[01-02]: 4\r\n")

	// Cut lab02's connection: it fails this call, is left out as lost.
	rl.up.Store(false)
	rl.drop()
	tm.send("#gpu.mem()\r")
	tm.expect("lab01: 4\r\n")
	tm.expect("lab02: UNREACHABLE: connection lost: ")
	tm.expect("(left out; .reconnect to try again)")
	tm.expect("gpush lab01> ")
	tm.send(".hosts\r")
	tm.expect("left out: lab02 (1)")
	rl.up.Store(true)
	tm.send(".reconnect\r")
	tm.expect("lab02: reconnected")
	tm.expect("gpush lab[01-02]> ")
	// lab02's state is new: its x is gone, lab01's stays.
	tm.send("x, #gpu.mem()\r")
	tm.expect("lab01: lab01\t4\r\n")
	tm.expect("lab02: nil\t4\r\n")
	tm.send(".exit\r")
	if code := tm.wait(); code != 0 {
		t.Errorf("exit %d", code)
	}
}
