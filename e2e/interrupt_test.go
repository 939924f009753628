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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab"
)

// startCatcher starts, on lab host h, a worker holding GPU idx that catches
// SIGTERM and carries on: gpu.free's kill then waits out its grace, and a
// Ctrl-C comes while the kill is in flight.
func startCatcher(t *testing.T, h lab.Host, idx int, mib int) int {
	t.Helper()
	dev := func(n string) string { return filepath.Join(h.DevDir, n) }
	cmd := exec.Command(labBin.Holder, "--dev", dev(fmt.Sprintf("nvidia%d", idx)), "--dev", dev("nvidiactl"),
		"--dev", dev("nvidia-uvm"), "--mem-mib", fmt.Sprint(mib), "--catch-term")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("holder: %q %v", line, err)
	}
	return cmd.Process.Pid
}

// interruptedRun starts gpush with args, sends SIGINT once ready says so
// (it sees each stdout line) or, with after > 0, after that long, and
// returns what it printed, its status and when the interrupt went.
func interruptedRun(t *testing.T, l *lab.Lab, ready func(line string) bool, after time.Duration, args ...string) (runResult, time.Duration) {
	return interruptRun(t, l, ready, after, false, args...)
}

// interruptRun is interruptedRun; twice sends a second SIGINT 2 ms
// after the first (quit at once).
func interruptRun(t *testing.T, l *lab.Lab, ready func(line string) bool, after time.Duration, twice bool, args ...string) (runResult, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(args, "-i", l.Inventory, "--known-hosts", l.KnownHosts)
	cmd := exec.CommandContext(ctx, gpushBin, argv...)
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=", "NO_COLOR=1", "HOME="+t.TempDir())
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	start := time.Now()
	var out strings.Builder
	var sent atomic.Bool
	var at time.Duration
	interrupt := func() {
		sent.Store(true)
		cmd.Process.Signal(syscall.SIGINT)
		if twice {
			time.Sleep(2 * time.Millisecond)
			cmd.Process.Signal(syscall.SIGINT)
		}
	}
	if after > 0 {
		timer := time.AfterFunc(after, interrupt)
		defer timer.Stop()
		at = after
	}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if ready != nil && !sent.Load() && ready(sc.Text()) {
			at = time.Since(start)
			go interrupt()
		}
	}
	err = cmd.Wait()
	r := runResult{stdout: out.String(), stderr: errb.String()}
	var x *exec.ExitError
	switch {
	case errors.As(err, &x):
		r.code = x.ExitCode()
	case err != nil:
		t.Fatalf("gpush %v: %v", argv, err)
	}
	t.Logf("gpush %s (interrupted after %s) -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), at, r.code, r.stdout, r.stderr)
	if !sent.Load() {
		t.Fatal("the run ended before it could be interrupted")
	}
	return r, at
}

// Ctrl-C while gpu.free's kill waits out its grace: the signal the helper
// sent (its pid, signal and time), the unit stopped, each GPU's last
// reading survive into the fleet table and the JSON, though the script
// never returned its rows; the kill streamed as it happened.
func TestInterruptKeepsWhatWasDone(t *testing.T) {
	l := startLab(t, lab.Options{Scenario: lab.ScenarioIdle})
	h := l.Hosts[0]
	pid := startCatcher(t, h, 1, 4096)
	args := []string{"run", "free_gpus.lua", "-e", "grace=60s"}

	// Text: the kill's line streams before the end; after the interrupt
	// the table is there, with the pid and its TERM.
	r, at := interruptedRun(t, l, func(line string) bool {
		return strings.Contains(line, fmt.Sprintf("signalled pid %d", pid))
	}, 0, args...)
	if r.code != 99 {
		t.Errorf("exit %d, want 99", r.code)
	}
	requireContains(t, r.stdout, "INFO signalled pid", "TERM at ", "interrupted", "RECAP")
	var row string
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[0] == h.Name && f[1] == "failed" && f[2] == "1" {
			row = line
		}
	}
	if row == "" {
		t.Fatalf("no table row for GPU 1 after the interrupt")
	}
	for _, w := range []string{"interrupted", fmt.Sprint(pid), "TERM", "4096"} {
		if !strings.Contains(row, w) {
			t.Errorf("GPU 1's row %q lacks %q", row, w)
		}
	}

	// JSON: the same, in the host's object (the catcher is still there:
	// KILL never came). Nothing streams on stdout in JSON mode: interrupt
	// well after the time the text run's TERM took to go out.
	r, _ = interruptedRun(t, l, nil, 2*at+time.Second, append(args, "--json")...)
	if r.code != 99 {
		t.Errorf("exit %d, want 99", r.code)
	}
	var host struct {
		Status   string           `json:"status"`
		Error    string           `json:"error"`
		Rows     []map[string]any `json:"rows"`
		RowsFrom string           `json:"rows_from"`
		Log      []struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"log"`
		Journal struct {
			Signals []struct {
				PID       int       `json:"pid"`
				StartTime uint64    `json:"start_time"`
				Signal    string    `json:"signal"`
				Time      time.Time `json:"time"`
			} `json:"signals"`
			GPUs []struct {
				GPU int   `json:"gpu"`
				MiB int64 `json:"mib"`
			} `json:"gpus"`
		} `json:"journal"`
	}
	line, _, _ := strings.Cut(r.stdout, "\n")
	if err := json.Unmarshal([]byte(line), &host); err != nil {
		t.Fatalf("host line %q: %v", line, err)
	}
	if host.Status != "failed" || host.Error != "interrupted" || host.RowsFrom != "journal" {
		t.Errorf("host: status %q error %q rows_from %q, want failed, interrupted, journal", host.Status, host.Error, host.RowsFrom)
	}
	sig := false
	for _, s := range host.Journal.Signals {
		if s.PID == pid && s.Signal == "TERM" && s.StartTime > 0 && !s.Time.IsZero() {
			sig = true
		}
	}
	if !sig {
		t.Errorf("journal lacks pid %d's TERM with its start time and time: %+v", pid, host.Journal.Signals)
	}
	read := false
	for _, g := range host.Journal.GPUs {
		read = read || g.GPU == 1 && g.MiB == 4096
	}
	if !read || len(host.Journal.GPUs) != 4 {
		t.Errorf("journal's GPU readings %+v: want 4 GPUs, GPU 1 at 4096 MiB", host.Journal.GPUs)
	}
	rowed := false
	for _, row := range host.Rows {
		if row["gpu"] == float64(1) && strings.Contains(fmt.Sprint(row["signals"]), fmt.Sprintf("%d TERM", pid)) && row["step"] == "interrupted" {
			rowed = true
		}
	}
	if !rowed {
		t.Errorf("rows lack GPU 1 with pid %d's TERM, step interrupted: %v", pid, host.Rows)
	}
	streamed := false
	for _, e := range host.Log {
		streamed = streamed || e.Kind == "kill" && strings.Contains(e.Message, fmt.Sprint(pid))
	}
	if !streamed {
		t.Errorf("log lacks the kill event of pid %d: %+v", pid, host.Log)
	}
}

// Ctrl-C while gpu.free waits for a GPU a supervisor keeps taking back:
// the unit stopped, the kills of stage 1 and the GPUs freed so far are in
// the table; a second Ctrl-C (quit at once) keeps them too.
func TestInterruptDuringWaitKeepsUnitsAndFreed(t *testing.T) {
	l := startLab(t, lab.Options{Scenario: lab.ScenarioRespawn})
	if l.NoServices != "" {
		t.Skip("no services in this lab: " + l.NoServices)
	}
	h := l.Hosts[0]
	check := func(r runResult, code int, first bool) {
		t.Helper()
		if r.code != code {
			t.Errorf("exit %d, want %d", r.code, code)
		}
		var unit, gpu1, gpu3 string
		for _, line := range strings.Split(r.stdout, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 3 && f[0] == h.Name && strings.Contains(line, "vllm-embed.service"):
				unit = line
			case len(f) > 3 && f[0] == h.Name && f[1] == "failed" && f[2] == "1":
				gpu1 = line
			case len(f) > 3 && f[0] == h.Name && f[1] == "failed" && f[2] == "3":
				gpu3 = line
			}
		}
		if !strings.Contains(unit, "stop at ") {
			t.Errorf("no row of the unit stopped: %q", unit)
		}
		if first && (!strings.Contains(gpu1, "interrupted") || !strings.Contains(gpu1, "true") || !strings.Contains(gpu1, "TERM")) {
			t.Errorf("GPU 1's row %q: want it freed, its TERM, step interrupted", gpu1)
		}
		if !strings.Contains(gpu3, "TERM") {
			t.Errorf("GPU 3's row %q: want its worker's TERM", gpu3)
		}
	}
	freed := func(line string) bool { return strings.Contains(line, "GPU 1 free (stage 1)") }
	r, _ := interruptedRun(t, l, freed, 0, "run", "free_gpus.lua", "--wide")
	check(r, 99, true)
	requireContains(t, r.stdout, "INFO GPU 1 free (stage 1)")
	// Again (GPUs 0-2 are free now; the supervisor brought GPU 3's worker
	// back), quit at a second Ctrl-C once GPU 3's worker is signalled.
	r, _ = interruptRun(t, l, func(line string) bool { return strings.Contains(line, "INFO signalled pid") }, 0, true, "run", "free_gpus.lua", "--wide")
	check(r, 130, false)
}
