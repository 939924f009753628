//go:build scale

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lab"
)

// scaleHosts is the fleet of the output test: 300 hosts, the size the
// output must stay readable at.
const scaleHosts = 300

// scaleScript prints per-host lines with numbers after one real command
// over each host's SSH connection (a helper call would scan /proc, where
// 300 lab hosts share one machine: 300 scans of every lab process). What
// varies is chosen from the host's number so that the test knows every
// line: 1 to 3 kill lines (n % 3), a pid and a time from n % 6 and n % 2,
// a warning on every 7th host, and a line naming the host itself.
//
// With probe=false no host is dialled: 300 SSH sessions cost about a
// minute of CPU on the 2-core CI machine (sshd's side: ~0.25 s a session,
// bench/README.md), so only the first run pays them; the later runs test
// the output modes at 300 hosts through the same CLI and runner.
const scaleScript = `-- 300-host output test (e2e/scale_output_test.go)
-- @var probe bool run one command over SSH first (default: true)
local n = tonumber(host.name:match("%d+$"))
local code = 3
if vars.probe then code = ssh.run({"sh", "-c", "exit 3"}).code end
log.info("probe exited %d on %d GPUs", code, 4)
for k = 0, n % 3 do
  log.info("GPU %d: killed pid %d after %.1f s", k, 4000 + (n % 6) * 4 + k, 0.5 + (n % 2) * 0.3)
end
if n % 7 == 0 then log.warn("GPU %d: %d MiB still used", n % 4, 512 * (n % 3 + 1)) end
log.info("%s: freed %d MiB", host.name, 10240 * (n % 3 + 1))
`

// scaleLine is one line a host prints: its level and text; key is the
// text as --fold-numbers gathers it: its figures (counts, MiB, seconds)
// as # and the host's name as {host}, its identities (GPU indices, pids,
// the exit code) as they are.
type scaleLine struct{ level, text, key string }

// expectedScale is what scaleScript prints on host n.
func expectedScale(host string, n int) []scaleLine {
	out := []scaleLine{{"INFO", "probe exited 3 on 4 GPUs", "probe exited 3 on # GPUs"}}
	for k := 0; k <= n%3; k++ {
		pid := 4000 + (n%6)*4 + k
		out = append(out, scaleLine{"INFO", fmt.Sprintf("GPU %d: killed pid %d after %.1f s", k, pid, 0.5+float64(n%2)*0.3),
			fmt.Sprintf("GPU %d: killed pid %d after # s", k, pid)})
	}
	if n%7 == 0 {
		out = append(out, scaleLine{"WARN", fmt.Sprintf("GPU %d: %d MiB still used", n%4, 512*(n%3+1)), fmt.Sprintf("GPU %d: # MiB still used", n%4)})
	}
	return append(out, scaleLine{"INFO", fmt.Sprintf("%s: freed %d MiB", host, 10240*(n%3+1)), "{host}: freed # MiB"})
}

// numberRE finds what -b prints for a number: a value or a bracketed set
// or span ("[0,2-3]", "[4000..4020]").
var numberRE = regexp.MustCompile(`\[[0-9.,\-]+\]|\b[0-9]+(\.[0-9]+)?\b`)

// shape is a line with its numbers blanked.
func shape(s string) string { return numberRE.ReplaceAllString(s, "#") }

// slotValues expands what -b printed for one number. exact is false for a
// span "[lo..hi]": then only its ends are known.
func slotValues(t *testing.T, s string) (vals []float64, exact bool) {
	t.Helper()
	if !strings.HasPrefix(s, "[") {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("number %q: %v", s, err)
		}
		return []float64{v}, true
	}
	body := strings.Trim(s, "[]")
	if lo, hi, ok := strings.Cut(body, ".."); ok {
		a, _ := strconv.ParseFloat(lo, 64)
		b, _ := strconv.ParseFloat(hi, 64)
		return []float64{a, b}, false
	}
	for _, part := range strings.Split(body, ",") {
		lo, hi, ok := strings.Cut(part, "-")
		if !ok || lo == "" {
			v, _ := strconv.ParseFloat(part, 64)
			vals = append(vals, v)
			continue
		}
		a, _ := strconv.Atoi(lo)
		b, _ := strconv.Atoi(hi)
		for v := a; v <= b; v++ {
			vals = append(vals, float64(v))
		}
	}
	return vals, true
}

// checkNumbers wants printed (a gathered line) to show, slot by slot, the
// numbers of lines (the hosts' own lines it stands for).
func checkNumbers(t *testing.T, printed string, lines []string) {
	t.Helper()
	got := numberRE.FindAllString(printed, -1)
	per := make([][]float64, len(got))
	for _, l := range lines {
		nums := numberRE.FindAllString(l, -1)
		if len(nums) != len(got) {
			t.Errorf("%q stands for %q: %d numbers, want %d", printed, l, len(got), len(nums))
			return
		}
		for i, n := range nums {
			v, _ := strconv.ParseFloat(n, 64)
			per[i] = append(per[i], v)
		}
	}
	for i, s := range got {
		want := slices.Compact(slices.Sorted(slices.Values(per[i])))
		vals, exact := slotValues(t, s)
		slices.Sort(vals)
		switch {
		case exact && !slices.Equal(vals, want):
			t.Errorf("%q: number %d is %s, the hosts printed %v", printed, i+1, s, want)
		case !exact && (vals[0] != want[0] || vals[1] != want[len(want)-1] || len(want) <= 3):
			t.Errorf("%q: number %d is the span %s, the hosts printed %v", printed, i+1, s, want)
		}
	}
}

func writeScaleScript(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "scale_lines.lua")
	if err := os.WriteFile(p, []byte(scaleScript), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// keepOutput saves a run's stdout for the record (GPUSH_E2E_OUT names the
// folder, to show what a fleet's output looks like).
func keepOutput(t *testing.T, name string, r runResult) {
	dir := os.Getenv("GPUSH_E2E_OUT")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("keep output: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(r.stdout), 0o644); err != nil {
		t.Errorf("keep output: %v", err)
	}
}

// 300 lab hosts print lines with numbers; --fold-numbers gathers lines
// that differ only in figures (never in a pid or a GPU index), -b (clush
// -b's layout) gathers whole outputs, exactly or with --fold-numbers.
// Nothing is lost, the counts are right and every host's lines keep their
// order.
func TestScaleOutput(t *testing.T) {
	start := time.Now()
	l := startLab(t, lab.Options{Hosts: scaleHosts, Scenario: lab.ScenarioIdle})
	t.Logf("%d lab hosts up in %v", len(l.Hosts), time.Since(start).Round(time.Millisecond))
	script := writeScaleScript(t)
	want := map[string][]scaleLine{}
	var hosts []string
	for i, h := range l.Hosts {
		hosts = append(hosts, h.Name)
		want[h.Name] = expectedScale(h.Name, i+1)
	}

	t.Run("fold numbers", func(t *testing.T) {
		start := time.Now()
		r, progress := gpushScale(t, l, true, "run", script, "--fold-numbers", "--forks", "100")
		t.Logf("--fold-numbers run: %v", time.Since(start).Round(time.Millisecond))
		checkProgress(t, progress)
		keepOutput(t, "scale-fold.txt", r)
		if r.code != 0 {
			t.Fatalf("exit %d, want 0", r.code)
		}
		gathered, _, _ := strings.Cut(r.stdout, "\nRECAP")
		// Each host's lines, as the gathered lines say them, in order.
		got := map[string][]scaleLine{}
		stands := map[string][]string{} // gathered line -> hosts' own lines
		var order []string
		lineRE := regexp.MustCompile(`^(\S+)(?: \((\d+)\))? \| (INFO|WARN|ERROR) (.*)$`)
		for _, line := range strings.Split(strings.TrimRight(gathered, "\n"), "\n") {
			m := lineRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("not a gathered line: %q", line)
				continue
			}
			set, err := inventory.ExpandNodeSet(m[1])
			if err != nil {
				t.Fatalf("node set %q: %v", m[1], err)
			}
			n := 1
			if m[2] != "" {
				n, _ = strconv.Atoi(m[2])
			}
			if n != len(set) || (len(set) > 1) != (m[2] != "") {
				t.Errorf("%q: count %s for %d hosts", line, m[2], len(set))
			}
			order = append(order, line)
			for _, h := range set {
				w := want[h]
				k := len(got[h])
				got[h] = append(got[h], scaleLine{level: m[3], text: m[4]})
				if k < len(w) {
					stands[line] = append(stands[line], strings.ReplaceAll(w[k].text, h, "{host}"))
				}
			}
		}
		total := 0
		for _, h := range hosts {
			w := want[h]
			total += len(w)
			var gs, ws []string
			for _, x := range got[h] {
				gs = append(gs, x.level+" "+shape(strings.ReplaceAll(x.text, "{host}", h)))
			}
			for _, x := range w {
				ws = append(ws, x.level+" "+shape(x.text))
			}
			if !slices.Equal(gs, ws) {
				t.Errorf("%s's lines through --fold-numbers:\n%s\nwant (numbers as #):\n%s", h, strings.Join(gs, "\n"), strings.Join(ws, "\n"))
			}
		}
		for _, line := range order {
			_, text, _ := strings.Cut(line, " | ")
			_, text, _ = strings.Cut(text, " ")
			checkNumbers(t, text, stands[line])
		}
		// Lines gather where only figures differ: one line for each
		// distinct key (the probe, each GPU's kill of each pid, each GPU's
		// warning, the host's own line); a pid or a GPU index never folds.
		keys := map[string]bool{}
		for _, h := range hosts {
			for _, x := range want[h] {
				keys[x.level+" "+x.key] = true
			}
		}
		if len(order) != len(keys) {
			t.Errorf("%d gathered lines, want %d", len(order), len(keys))
		}
		for _, line := range order {
			if regexp.MustCompile(`GPU \[|pid \[`).MatchString(line) {
				t.Errorf("an identity folded: %q", line)
			}
		}
		t.Logf("%d host lines in %d gathered lines", total, len(order))
		requireContains(t, r.stdout, "RECAP ok=300 changed=0 failed=0 unreachable=0")
	})

	for _, mode := range []struct {
		name, file string
		flags      []string
		numbers    bool
	}{
		{"by output -b", "scale-b.txt", []string{"-b"}, false},
		{"by output with figures folded -b --fold-numbers", "scale-b-fold.txt", []string{"-b", "--fold-numbers"}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			start := time.Now()
			args := append([]string{"run", script, "--forks", "100", "-e", "probe=false"}, mode.flags...)
			r, _ := gpushScale(t, l, false, args...)
			t.Logf("%v run: %v", mode.flags, time.Since(start).Round(time.Millisecond))
			keepOutput(t, mode.file, r)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0", r.code)
			}
			checkBlocks(t, r.stdout, hosts, want, mode.numbers)
		})
	}
}

// checkBlocks checks clush -b's layout: a header (node set, count) over
// each distinct whole output, the most hosts first, every host in exactly
// one block whose body is its own output; with numbers, outputs that
// differ only in numbers are one block, each number showing its hosts'
// values.
func checkBlocks(t *testing.T, stdout string, hosts []string, want map[string][]scaleLine, numbers bool) {
	t.Helper()
	// The host's own lines as a block shows them: exact, or with figures
	// folded its name as {host}.
	own := func(h string, numbered bool) []string {
		var b []string
		for _, x := range want[h] {
			text := x.text
			if numbers {
				text = strings.ReplaceAll(text, h, "{host}")
			}
			if numbered {
				text = shape(text)
			}
			b = append(b, x.level+" "+text)
		}
		return b
	}
	// What tells blocks apart: the whole text, or with --fold-numbers the
	// text but its figures.
	wantBlocks := map[string][]string{}
	for _, h := range hosts {
		var k []string
		for _, x := range want[h] {
			if numbers {
				k = append(k, x.level+" "+x.key)
			} else {
				k = append(k, x.level+" "+x.text)
			}
		}
		wantBlocks[strings.Join(k, "\n")] = append(wantBlocks[strings.Join(k, "\n")], h)
	}
	gathered, _, _ := strings.Cut(stdout, "\nRECAP")
	blocks := strings.Split(gathered, "---------------\n")
	if blocks[0] != "" {
		t.Fatalf("output does not start with a header:\n%s", gathered)
	}
	blocks = blocks[1:]
	if len(blocks)%2 != 0 {
		t.Fatalf("headers and bodies do not pair (%d parts)", len(blocks))
	}
	seen, prev := map[string]bool{}, math.MaxInt
	for i := 0; i < len(blocks); i += 2 {
		head := strings.TrimSuffix(blocks[i], "\n")
		setText, count, _ := strings.Cut(head, " (")
		set, err := inventory.ExpandNodeSet(setText)
		if err != nil {
			t.Fatalf("header %q: %v", head, err)
		}
		if count != "" && count != fmt.Sprintf("%d)", len(set)) || count == "" && len(set) != 1 {
			t.Errorf("header %q: %d hosts", head, len(set))
		}
		if len(set) > prev {
			t.Errorf("header %q: %d hosts after a block of %d (clush: the most hosts first)", head, len(set), prev)
		}
		prev = len(set)
		body := strings.Split(strings.TrimSuffix(blocks[i+1], "\n"), "\n")
		if len(set) == 1 && numbers {
			for j := range body {
				body[j] = strings.ReplaceAll(body[j], set[0], "{host}")
			}
		}
		for _, h := range set {
			if seen[h] {
				t.Errorf("%s in two blocks", h)
			}
			seen[h] = true
			mine := own(h, false)
			if !numbers {
				if !slices.Equal(body, mine) {
					t.Errorf("%s in block %q:\n%s\nwant:\n%s", h, head, strings.Join(body, "\n"), strings.Join(mine, "\n"))
				}
				continue
			}
			var shapes []string
			for _, b := range body {
				shapes = append(shapes, shape(b))
			}
			if m := own(h, true); !slices.Equal(shapes, m) {
				t.Errorf("%s in block %q:\n%s\nwant (numbers as #):\n%s", h, head, strings.Join(body, "\n"), strings.Join(m, "\n"))
			}
		}
		if numbers {
			// Line j of the body stands for line j of each host's output.
			for j, b := range body {
				var theirs []string
				for _, h := range set {
					if o := own(h, false); j < len(o) {
						theirs = append(theirs, o[j])
					}
				}
				checkNumbers(t, b, theirs)
			}
		}
	}
	if len(seen) != len(hosts) {
		t.Errorf("%d hosts in the blocks, want %d", len(seen), len(hosts))
	}
	if n := len(blocks) / 2; n != len(wantBlocks) {
		t.Errorf("%d blocks, want %d distinct outputs", n, len(wantBlocks))
	}
	t.Logf("%d hosts in %d blocks", len(seen), len(blocks)/2)
}

// gpushScale runs gpush as gpush() does, with a bound fit for 300 hosts on
// a loaded machine, and with stderr on a terminal (a pty of 120 columns)
// when tty is set: then it also returns what was drawn there.
func gpushScale(t *testing.T, l *lab.Lab, tty bool, args ...string) (runResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	argv := append(args, "-i", l.Inventory, "--known-hosts", l.KnownHosts)
	cmd := exec.CommandContext(ctx, gpushBin, argv...)
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=", "NO_COLOR=1", "HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	var term bytes.Buffer
	var copied chan struct{}
	if tty {
		ptmx, tt, err := pty.Open()
		if err != nil {
			t.Fatalf("open a pty: %v", err)
		}
		defer ptmx.Close()
		if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
			t.Fatalf("pty size: %v", err)
		}
		cmd.Stderr = tt
		copied = make(chan struct{})
		go func() { io.Copy(&term, ptmx); close(copied) }()
		defer func() { tt.Close() }()
		err = cmd.Start()
		tt.Close() // the child has its copy: EOF on the master when it exits
		if err != nil {
			t.Fatalf("start gpush: %v", err)
		}
		err = cmd.Wait()
		<-copied
		return scaleResult(t, argv, err, out.String(), term.String()), term.String()
	}
	err := cmd.Run()
	return scaleResult(t, argv, err, out.String(), errb.String()), ""
}

func scaleResult(t *testing.T, argv []string, err error, stdout, stderr string) runResult {
	t.Helper()
	r := runResult{stdout: stdout, stderr: stderr}
	var x *exec.ExitError
	switch {
	case errors.As(err, &x):
		r.code = x.ExitCode()
	case err != nil:
		t.Fatalf("gpush %v: %v", argv, err)
	}
	if r.code != 0 {
		t.Logf("gpush %s -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// checkProgress wants the progress line drawn on the terminal: counts of
// the 300, the waiting hosts folded, within the pty's 120 columns, and
// erased at the end.
func checkProgress(t *testing.T, term string) {
	t.Helper()
	draws := strings.Split(term, "\r\x1b[K")
	if len(draws) < 3 {
		t.Fatalf("progress drawn %d times, want several:\n%q", len(draws)-1, term)
	}
	var first, last, lastNamed string
	named := 0
	for _, d := range draws[1:] {
		if d == "" {
			continue
		}
		if first == "" {
			first = d
		}
		last = d
		if !strings.HasPrefix(d, "[") || !strings.Contains(d, "/300] ok=") {
			t.Errorf("not a progress line: %q", d)
		}
		if n := len([]rune(d)); n > 119 {
			t.Errorf("progress line of %d columns on a 120-column terminal: %q", n, d)
		}
		if strings.Contains(d, " waiting: lab") {
			named++
			lastNamed = d
		}
	}
	if named == 0 {
		t.Errorf("no progress line named the waiting hosts:\n%q", term)
	}
	if draws[len(draws)-1] != "" {
		t.Errorf("the progress line is left on the terminal: %q", draws[len(draws)-1])
	}
	t.Logf("progress: %d draws, %d naming waiting hosts; first %q, last naming hosts %q, last %q", len(draws)-1, named, first, lastNamed, last)
}
