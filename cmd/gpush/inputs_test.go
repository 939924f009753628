package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpush/gpush/lab/labgpu"
)

// countingListener accepts TCP connections on loopback and closes them,
// counting how many hosts were dialled.
func countingListener(t *testing.T) (addr *net.TCPAddr, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr), accepted
}

// A syntax error is reported once, naming file:line, before any host is
// dialled, and exits 1.
func TestRunSyntaxErrorBeforeDialling(t *testing.T) {
	addr, accepted := countingListener(t)
	dir := t.TempDir()
	inv := filepath.Join(dir, "inv.yaml")
	src := fmt.Sprintf("all:\n  vars: {ansible_host: 127.0.0.1, ansible_port: %d}\n  hosts:\n    gpu[01:04]:\n", addr.Port)
	if err := os.WriteFile(inv, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.lua")
	good := filepath.Join(dir, "good.lua")
	for p, s := range map[string]string{
		broken: "-- frees nothing\nlocal h = gpu.holders()\nfor _, x in ipairs(h) do\n  log.info(x.comm))\nend\n",
		good:   "return 1\n",
	} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := gpush(t, "run", broken, "-i", inv, "--known-hosts", filepath.Join(dir, "known_hosts"))
	if code != 1 || stdout != "" || stderr != "gpush: run: broken.lua:4: syntax error near ')'\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and one line naming broken.lua:4", code, stdout, stderr)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d hosts dialled for a script that does not compile", n)
	}
	// The same inventory is dialled by a script that compiles (and is
	// unreachable: the listener hangs up, and each host tries a few times,
	// as a busy sshd does that too), so the count above can fail.
	code, _, stderr = gpush(t, "run", good, "-i", inv, "--known-hosts", filepath.Join(dir, "known_hosts"), "--timeout", "30s")
	if code != 4 || accepted.Load() < 4 {
		t.Errorf("good script: exit %d, %d dials, stderr %q; want 4 and a dial of each host", code, accepted.Load(), stderr)
	}
	if strings.Contains(stderr, "syntax") {
		t.Errorf("good script: stderr %q", stderr)
	}
}

// hostileComm is a hostile process name: cursor up, erase the line,
// green. A copy of gpu-holder under that file name gets it as its comm.
const hostileComm = "\x1b[1A\x1b[2K\x1b[32m"

const hostileShown = `\x1b[1A\x1b[2K\x1b[32m`

// hostileHost lays out one local GPU host whose GPU 0 is held by a real
// process named hostileComm, and returns its inventory and the holder.
func hostileHost(t *testing.T) (inv string, holder *exec.Cmd) {
	t.Helper()
	buildReplBins(t)
	dir := t.TempDir()
	dev, smi := localGPUs(t, dir, 2)
	b, err := os.ReadFile(replBins.lab.Holder)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, hostileComm)
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	holder = exec.Command(bin, "--dev", filepath.Join(dev, "nvidia0"), "--dev", filepath.Join(dev, "nvidiactl"), "--mem-mib", "4096")
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	ready, err := bufio.NewReader(stdout).ReadString('\n')
	if _, ok := labgpu.ReadyPID(ready); err != nil || !ok {
		t.Fatalf("holder: %q, %v", ready, err)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", holder.Process.Pid))
	if err != nil || strings.TrimSuffix(string(comm), "\n") != hostileComm {
		t.Fatalf("holder's comm is %q (%v), want %q", comm, err, hostileComm)
	}
	inv = filepath.Join(dir, "inv.yaml")
	src := fmt.Sprintf("all:\n  vars: {ansible_connection: local, gpush_remote_dir: %s/remote}\n  hosts:\n    lab01: {gpush_dev_dir: %s, gpush_nvidia_smi: %s}\n",
		dir, dev, smi)
	if err := os.WriteFile(inv, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return inv, holder
}

// noControl fails when s holds a control byte other than newline (and the
// tabs log lines keep), or a raw C1 control.
func noControl(t *testing.T, what, s string) {
	t.Helper()
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			t.Errorf("%s: control byte %#x passed at %d:\n%q", what, c, i, s)
			return
		}
	}
	if strings.ContainsAny(s, "\u009b\u0085") {
		t.Errorf("%s: C1 control passed:\n%q", what, s)
	}
}

const holdersScript = `-- lists the holders
local rows = {}
for _, h in ipairs(gpu.holders{shared = false}) do
  log.info("holder pid %d (%s) %s", h.pid, h.comm, h.cmdline)
  rows[#rows + 1] = {pid = h.pid, comm = h.comm, gpu = h.gpus[1], user = h.user}
end
return rows
`

// A real process named with escape sequences: the human output shows them
// as visible escapes everywhere (log line, table, REPL); --json keeps the
// exact name, escaped; free_gpus.lua kills it and says so, safely.
func TestHostileProcessName(t *testing.T) {
	inv, holder := hostileHost(t)
	pid := holder.Process.Pid
	script := filepath.Join(t.TempDir(), "holders.lua")
	if err := os.WriteFile(script, []byte(holdersScript), 0o644); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := gpush(t, "run", script, "-i", inv)
	noControl(t, "run", stdout+stderr)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("lab01 | INFO holder pid %d (%s) ", pid, hostileShown)) ||
		!regexp.MustCompile(fmt.Sprintf(`\nlab01 +0 +%d +\w+ +%s\n`, pid, regexp.QuoteMeta(hostileShown))).MatchString(stdout) {
		t.Errorf("run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}

	code, stdout, _ = gpush(t, "run", script, "-i", inv, "--json")
	noControl(t, "run --json", stdout)
	var res struct {
		Rows []struct {
			Comm string  `json:"comm"`
			PID  float64 `json:"pid"`
		} `json:"rows"`
		Log []struct{ Message string } `json:"log"`
	}
	// The host's line; the summary line follows it.
	first, _, _ := strings.Cut(stdout, "\n")
	if err := json.Unmarshal([]byte(first), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if code != 0 || len(res.Rows) != 1 || res.Rows[0].Comm != hostileComm || int(res.Rows[0].PID) != pid ||
		len(res.Log) != 1 || !strings.Contains(res.Log[0].Message, "("+hostileComm+")") ||
		!strings.Contains(stdout, `"comm":"\u001b[1A\u001b[2K\u001b[32m"`) {
		t.Errorf("--json: exit %d, decoded %+v\n%s", code, res, stdout)
	}

	// The REPL, piped: the value line is sanitized too.
	code, stdout, stderr = runPiped(t, "gpu.holders{shared=false}[1].comm\n", "-i", inv)
	noControl(t, "repl", stdout+stderr)
	if code != 0 || stdout != "lab01: "+hostileShown+"\n" {
		t.Errorf("repl: exit %d, stdout %q", code, stdout)
	}

	// On a terminal, with colour: gpush's own colours stay, the name's do not.
	tm := startTerm(t, []string{"HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir()}, "run", script, "-i", inv)
	if code := tm.wait(); code != 0 {
		t.Errorf("on a terminal: exit %d", code)
	}
	<-tm.done
	out := tm.output()
	if !strings.Contains(out, "\x1b[32mok\x1b[0m") || !strings.Contains(out, "\x1b[1mlab01\x1b[0m | INFO holder pid") ||
		!strings.Contains(out, "("+hostileShown+")") {
		t.Errorf("on a terminal: no colour or no escaped name:\n%q", out)
	}
	own := regexp.MustCompile(`\x1b\[[0-9;]*m`)
	noControl(t, "on a terminal", strings.ReplaceAll(own.ReplaceAllString(out, ""), "\r\n", "\n"))

	// free_gpus.lua frees GPU 0 by killing it, its report clean.
	code, stdout, stderr = gpush(t, "run", "free_gpus.lua", "-i", inv, "-e", "gpus=0", "-e", "grace=1s")
	noControl(t, "free_gpus.lua", stdout+stderr)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("GPU 0 freed (stage 1): 4096 -> 0 MiB, killed %d", pid)) {
		t.Errorf("free_gpus.lua: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// Inventory text is shown sanitized by gpush hosts; --json keeps it exact.
func TestHostsSanitized(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inv.yaml")
	if err := os.WriteFile(inv, []byte("all:\n  hosts:\n    gpu01: {ansible_user: \"ops\\e[2J\\u009b\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := gpush(t, "hosts", "-i", inv)
	noControl(t, "hosts", out)
	if code != 0 || !strings.Contains(out, `ops\x1b[2J\u009b`) {
		t.Errorf("hosts: exit %d\n%s", code, out)
	}
	code, out, _ = gpush(t, "hosts", "-i", inv, "--json")
	noControl(t, "hosts --json", out)
	if code != 0 || !strings.Contains(out, `ops\u001b[2J\u009b`) {
		t.Errorf("hosts --json: exit %d\n%s", code, out)
	}
}

// --max-input-size caps the inventory and -e @file; over it, the error
// names the file, its size and the cap.
func TestMaxInputSize(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "hosts.ini")
	pad := "# " + strings.Repeat("x", 2000) + "\n"
	if err := os.WriteFile(inv, []byte(pad+"h1 ansible_connection=local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(dir, "extra.yaml")
	if err := os.WriteFile(extra, []byte(pad+"a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := gpush(t, "hosts", "-i", inv, "--max-input-size", "1K")
	if code != 1 || !strings.Contains(stderr, inv+": 2031 bytes") || !strings.Contains(stderr, "1024 bytes") || !strings.Contains(stderr, "--max-input-size") {
		t.Errorf("hosts, 1K: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := gpush(t, "hosts", "-i", inv, "--max-input-size", "4K"); code != 0 {
		t.Errorf("hosts, 4K: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = gpush(t, "run", "-i", inv, "--max-input-size", "1K", "-e", "@"+extra, "-c", "return 1")
	if code != 1 || !strings.Contains(stderr, extra+": 2008 bytes") {
		t.Errorf("run -e @file, 1K: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := gpush(t, "hosts", "-i", inv, "--max-input-size", "lots"); code != 1 || !strings.Contains(stderr, "--max-input-size") {
		t.Errorf("hosts, lots: exit %d\n%s%s", code, out, stderr)
	}
}
