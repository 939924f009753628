package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunCode: -c runs code given on the command line with what a file
// script gets (--check, declared -e, file:line errors named "-c").
func TestRunCode(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string // in stdout for exit 0, in stderr otherwise
	}{
		{[]string{"-c", "return {check = check, host = host.name}"}, 0, `"value":{"check":false,"host":"localhost"}`},
		{[]string{"-c", "return {check = check}", "--check"}, 0, `"value":{"check":true}`},
		{[]string{"-c", "-- @var n int a number\nreturn vars.n * 2", "-e", "n=21"}, 0, `"value":42`},
		{[]string{"-e", "n=21", "-c", "return vars.n"}, 1, "-c declares no vars, so it takes no -e n"},
		{[]string{"-c", "return ("}, 1, "gpush: run: -c:1: "},
		{[]string{"-c", "local a = 1\nreturn gpu.holder()"}, 2, `"error":"-c:2: gpu.holder is nil; did you mean gpu.holders? (attempt to call it)"`},
		{[]string{"-c", "return 1", "free_gpus.lua"}, 1, "give a SCRIPT or -c CODE, not both"},
		{[]string{"-c", " "}, 1, "-c: empty code"},
	} {
		args := append([]string{"run", "-i", "localhost", "--json"}, c.args...)
		code, stdout, stderr := gpush(t, args...)
		got := stderr
		if c.code == 0 || strings.Contains(c.want, `"error"`) {
			got = stdout
		}
		if code != c.code || !strings.Contains(got, c.want) {
			t.Errorf("gpush %q: exit %d (want %d)\nstdout %s\nstderr %s\nwant %q", args, code, c.code, stdout, stderr, c.want)
		}
	}
}

// TestRunCodeReadsGPUs runs `gpush run -c 'return gpu.mem()'` as a real
// process (helper embedded) on a simulated GPU host with a real holder.
func TestRunCodeReadsGPUs(t *testing.T) {
	inv := localInventory(t)
	cmd := exec.Command(replBins.gpush, "run", "-c", "return gpu.mem()", "-i", inv, "--limit", "lab01", "--json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpush run -c: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"host":"lab01","status":"ok"`) || !strings.Contains(string(out), `"used_mib":10240`) {
		t.Errorf("gpush run -c 'return gpu.mem()':\n%s", out)
	}
}

func TestDurationFlags(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.5": 500 * time.Millisecond, "1m30s": 90 * time.Second,
		"500ms": 500 * time.Millisecond, "0": 0, " 7 ": 7 * time.Second} {
		if got, err := parseSeconds(in); err != nil || got != want {
			t.Errorf("parseSeconds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"5x", "-1", "-1s", "NaN", "inf", "", "1e300"} {
		if d, err := parseSeconds(bad); err == nil {
			t.Errorf("parseSeconds(%q) = %v, want an error", bad, d)
		}
	}
	// A bare number reaches the runner as seconds: the host is timed out
	// "after 1s" (read as nanoseconds, it would say 1ns).
	code, stdout, stderr := gpush(t, "run", "-c", "sleep(30)", "-i", "localhost", "--json", "--timeout", "1")
	if code != 2 || !strings.Contains(stdout, `"error":"timed out after 1s"`) {
		t.Errorf("--timeout 1: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = gpush(t, "run", "-c", "return 1", "-i", "localhost", "--json", "--timeout", "1m30s")
	if code != 0 || !strings.Contains(stdout, `"value":1`) {
		t.Errorf("--timeout 1m30s: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = gpush(t, "run", "-c", "return 1", "-i", "localhost", "--timeout", "5x")
	if code != 1 || stdout != "" || !strings.Contains(stderr, `"5x" for flag --timeout`) || !strings.Contains(stderr, "seconds") {
		t.Errorf("--timeout 5x: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// An unknown flag is one line naming it and the nearest flag, not the
// whole help.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "free_gpus.lua", "-i", "localhost", "--forsk", "3"}, "gpush: flag provided but not defined: -forsk; did you mean --forks? (gpush run --help lists the flags)\n"},
		{[]string{"hosts", "--limt", "x"}, "gpush: flag provided but not defined: -limt; did you mean --limit? (gpush hosts --help lists the flags)\n"},
		{[]string{"run", "-c", "1", "--zzzzzz"}, "gpush: flag provided but not defined: -zzzzzz (gpush run --help lists the flags)\n"},
		{[]string{"--hepl"}, "gpush: flag provided but not defined: -hepl; did you mean --help? (gpush help lists the flags)\n"},
	} {
		code, stdout, stderr := gpush(t, c.args...)
		if code != 1 || stdout != "" || stderr != c.want {
			t.Errorf("gpush %q: exit %d\nstdout %q\nstderr %q\nwant exit 1, stderr %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

// gpush run SCRIPT --help is the script's help; without a SCRIPT, run's.
func TestRunScriptHelp(t *testing.T) {
	dir := t.TempDir()
	free := declaredScript(t, dir)
	for _, args := range [][]string{{"run", free, "--help"}, {"run", "-h", free}, {"run", "-e", "-h=1", free, "-h"}} {
		code, stdout, stderr := gpush(t, args...)
		for _, want := range []string{"free.lua (" + free + ")", "Free some GPUs (a test script).", "vars (gpush run free.lua -e NAME=VALUE):",
			"grace", "TERM -> KILL grace period", "gpush run --help lists every flag"} {
			if code != 0 || !strings.Contains(stdout, want) {
				t.Errorf("gpush %q: exit %d, stdout lacks %q\n%s%s", args, code, want, stdout, stderr)
			}
		}
		if strings.Contains(stdout, "--forks") {
			t.Errorf("gpush %q shows run's flags:\n%s", args, stdout)
		}
	}
	code, stdout, _ := gpush(t, "run", "--help")
	if code != 0 || !strings.Contains(stdout, "--forks") || !strings.Contains(stdout, "-c CODE") {
		t.Errorf("gpush run --help: exit %d\n%s", code, stdout)
	}
	code, _, stderr := gpush(t, "run", filepath.Join(dir, "nope.lua"), "--help")
	if code != 1 || !strings.Contains(stderr, "nope.lua") {
		t.Errorf("help of a missing script: exit %d, %s", code, stderr)
	}
	_ = os.Remove(free)
}
