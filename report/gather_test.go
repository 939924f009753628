package report

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpush/gpush/inventory"
)

// showTemplate writes a template with its numbers in angle brackets.
func showTemplate(t template) string {
	var b strings.Builder
	for i, s := range t.text {
		b.WriteString(strings.ReplaceAll(s, hostMark, "{host}"))
		if i < len(t.nums) {
			b.WriteString("<" + t.nums[i].text + ">")
		}
	}
	return b.String()
}

func TestParseTemplate(t *testing.T) {
	for _, c := range []struct {
		host, msg, want string
	}{
		// Figures fold: a unit attached or as the next word, a thing counted.
		{"", "killed pid 4410 after 0.8 s", "killed pid 4410 after <0.8> s"},
		// Units stay in the text, attached as they were.
		{"", "freed 10240MiB in 1.25s (80%)", "freed <10240>MiB in <1.25>s (<80>%)"},
		{"", "delta -3 MiB, -0.5s", "delta <-3> MiB, <-0.5>s"},
		// A sentence's full stop and a label's colon are not the number's.
		{"", "GPU 1: freed 4 GPUs.", "GPU 1: freed <4> GPUs."},
		{"", "killed 2 processes, 3 left", "killed <2> processes, <3> left"},
		{"", "GPU 0 freed: 80000 -> 3 MiB", "GPU 0 freed: <80000> -> <3> MiB"},
		{"", "3/4 GPUs", "<3>/<4> GPUs"},
		// Identities never fold: pids, GPU indices, job ids, ports, lists.
		{"", "pid=4410,ppid=1 gpus=[0,2]", "pid=4410,ppid=1 gpus=[0,2]"},
		{"", "gpu=0 used_mib=512 age_s=30 n=2", "gpu=0 used_mib=<512> age_s=<30> n=2"},
		{"", "GPU 0 would kill 5, 12", "GPU 0 would kill 5, 12"},
		{"", "slurm job 4711 on port 22, unit sglang-7.service", "slurm job 4711 on port 22, unit sglang-7.service"},
		{"", "a 5x speedup, rank 3rd", "a 5x speedup, rank 3rd"},
		// Digits inside words are text: host names, devices, ids, versions,
		// times, ranges, hex.
		{"", "lab017 ct129-017 nvidia0 cuda:0 H200 x86_64", "lab017 ct129-017 nvidia0 cuda:0 H200 x86_64"},
		{"", "GPU-1ab00001-0000-4000-8000-000000000001 on 00000000:18:00.0", "GPU-1ab00001-0000-4000-8000-000000000001 on 00000000:18:00.0"},
		{"", "v1.2.3 at 10:30:00, GPUs 0-3, mask 0x1f, 5e3, 2xH200", "v1.2.3 at 10:30:00, GPUs 0-3, mask 0x1f, 5e3, 2xH200"},
		{"", "sglang-qwen.service stopped; 10.0.0.17 down", "sglang-qwen.service stopped; 10.0.0.17 down"},
		// The host's own name is a placeholder, wherever it is a whole word.
		{"gpu017", "gpu017: GPU 2 held by gpu017's pid 7", "{host}: GPU 2 held by {host}'s pid 7"},
		{"gpu017", "gpu0170 is not gpu017", "gpu0170 is not {host}"},
		{"node.example.com", "on node.example.com.", "on {host}."},
		{"", "", ""},
		{"", "12", "12"},
		{"", "12 MiB", "<12> MiB"},
		{"", "-", "-"},
		{"", "5.x 5.", "5.x 5."},
	} {
		got := showTemplate(parseTemplate(c.msg, c.host, true))
		if got != c.want {
			t.Errorf("parseTemplate(%q, host %q)\n got %q\nwant %q", c.msg, c.host, got, c.want)
		}
		// Rendering one line's own numbers gives the line back.
		tp := parseTemplate(c.msg, c.host, true)
		if back := tp.render([][]number{tp.nums}, c.host); back != c.msg {
			t.Errorf("render(parse(%q)) = %q", c.msg, back)
		}
	}
}

func TestParseTemplateKey(t *testing.T) {
	a := parseTemplate("killed pid 4410 after 0.8 s", "", true)
	b := parseTemplate("killed pid 4410 after 1.2 s", "", true)
	c := parseTemplate("killed pid 4410 after 1.2 ms", "", true)
	d := parseTemplate("killed pid 4433 after 0.8 s", "", true)
	if a.key() != b.key() {
		t.Error("lines that differ only in figures must share a key")
	}
	if a.key() == c.key() {
		t.Error("a different unit is a different line")
	}
	if a.key() == d.key() {
		t.Error("lines that differ in a pid must not share a key")
	}
	if parseTemplate("took 3 s", "", false).key() == parseTemplate("took 4 s", "", false).key() {
		t.Error("without folding, lines that differ at all must not share a key")
	}
	if parseTemplate("x\x00y", "", true).key() == parseTemplate("x"+hostMark+"y", "", true).key() {
		t.Error("a NUL in a message must not pass for the host mark")
	}
}

func nums(texts ...string) []number {
	var out []number
	for _, s := range texts {
		n, unit, ok := splitNumber(s)
		if !ok || unit != "" {
			panic("not a number: " + s)
		}
		out = append(out, n)
	}
	return out
}

func TestRenderSlot(t *testing.T) {
	seq := func(from, to, step int) []string {
		var s []string
		for i := from; i <= to; i += step {
			s = append(s, fmt.Sprint(i))
		}
		return s
	}
	for _, c := range []struct {
		vals []string
		want string
	}{
		{[]string{"7"}, "7"},
		{[]string{"7", "7", "7"}, "7"},
		{[]string{"1.0", "1.00"}, "1.0"}, // equal values: the first text
		{seq(4410, 4433, 1), "[4410-4433]"},
		{[]string{"3", "0", "2"}, "[0,2-3]"},
		{[]string{"0", "2", "4", "6"}, "[0..6]"}, // four runs: the span
		{[]string{"1", "2", "5", "6", "9", "10"}, "[1-2,5-6,9-10]"},
		{seq(4410, 4709, 3), "[4410..4707]"},
		{[]string{"1.2", "0.8"}, "[0.8,1.2]"},
		{[]string{"0.8", "0.9", "1.0", "1.2"}, "[0.8..1.2]"},
		{[]string{"-1", "-3"}, "[-3,-1]"},
		{[]string{"-3", "-2", "-1", "5"}, "[-3..5]"},
		{[]string{"007", "008", "009"}, "[007-009]"},
		{[]string{"2", "2.5"}, "[2,2.5]"},
	} {
		if got := renderSlot(nums(c.vals...)); got != c.want {
			t.Errorf("renderSlot(%v) = %q, want %q", c.vals, got, c.want)
		}
	}
}

// lines turns "host: a; b" specs into the hosts and their lines.
func lines(specs ...string) ([]string, [][]hostLine) {
	var hosts []string
	var seqs [][]hostLine
	for _, s := range specs {
		h, rest, _ := strings.Cut(s, ":")
		hosts = append(hosts, h)
		var seq []hostLine
		for _, m := range strings.Split(rest, ";") {
			if m = strings.TrimSpace(m); m != "" {
				seq = append(seq, newHostLine(h, "info", m, true))
			}
		}
		seqs = append(seqs, seq)
	}
	return hosts, seqs
}

func showGroups(gs []*lineGroup) string {
	var out []string
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%s %s", strings.Join(g.hosts, "+"), g.render()))
	}
	return strings.Join(out, "\n")
}

// keepsOrder checks that every host's lines appear in the groups in its
// own order, each once.
func keepsOrder(t *testing.T, hosts []string, seqs [][]hostLine, gs []*lineGroup) {
	t.Helper()
	for i, h := range hosts {
		var got []string
		for _, g := range gs {
			for j, gh := range g.hosts {
				if gh == h {
					got = append(got, g.t.render([][]number{g.vals[j]}, h))
				}
			}
		}
		var want []string
		for _, l := range seqs[i] {
			want = append(want, l.t.render([][]number{l.t.nums}, h))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s's lines through the groups:\n%s\nwant:\n%s", h, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestMergeLines(t *testing.T) {
	for _, c := range []struct {
		name  string
		specs []string
		want  string
	}{
		{"same steps, figures gather",
			[]string{"a: stop 1; freed 10 MiB after 0.8 s", "b: stop 1; freed 11 MiB after 1.2 s", "c: stop 1; freed 12 MiB after 0.8 s"},
			"a+b+c stop 1\na+b+c freed [10-12] MiB after [0.8,1.2] s"},
		{"pids and GPU indices never gather",
			[]string{"a: GPU 0 would kill 5; killed pid 5 after 1 s", "b: GPU 1 would kill 12; killed pid 12 after 2 s", "c: GPU 0 would kill 5; killed pid 5 after 3 s"},
			"a+c GPU 0 would kill 5\na+c killed pid 5 after [1,3] s\nb GPU 1 would kill 12\nb killed pid 12 after 2 s"},
		{"an extra line keeps its place",
			[]string{"a: x; y", "b: x; warn 3; y", "c: x; y"},
			"a+b+c x\nb warn 3\na+b+c y"},
		{"a repeated line gathers by its rank",
			[]string{"a: GPU 0 freed; GPU 1 freed; done", "b: GPU 0 freed; GPU 1 freed; done", "c: GPU 1 freed; done"},
			"a+b GPU 0 freed\na+b+c GPU 1 freed\na+b+c done"},
		{"crossed orders split a line rather than reorder a host",
			[]string{"a: x; y", "b: y; x"},
			"a x\na+b y\nb x"},
		{"different tails, first host's first",
			[]string{"b: x; v", "a: x; w"},
			"b+a x\nb v\na w"},
		{"levels apart", nil, ""},
		{"the host's own name folds",
			[]string{"gpu1: gpu1 up in 2 s", "gpu2: gpu2 up in 3 s"},
			"gpu1+gpu2 {host} up in [2-3] s"},
		{"alone, the host's own name is shown",
			[]string{"gpu1: gpu1 up", "gpu2: down"},
			"gpu1 gpu1 up\ngpu2 down"},
		{"a host with no lines", []string{"a:", "b: x"}, "b x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hosts, seqs := lines(c.specs...)
			gs := mergeLines(hosts, seqs)
			if got := showGroups(gs); got != c.want {
				t.Errorf("groups:\n%s\nwant:\n%s", got, c.want)
			}
			keepsOrder(t, hosts, seqs, gs)
		})
	}
	// Levels are part of what gathers.
	hosts := []string{"a", "b"}
	seqs := [][]hostLine{{newHostLine("a", "info", "x 1", true)}, {newHostLine("b", "warn", "x 1", true)}}
	if gs := mergeLines(hosts, seqs); len(gs) != 2 || gs[0].level != "info" || gs[1].level != "warn" {
		t.Errorf("levels gathered together: %s", showGroups(gs))
	}
}

// Many hosts, each with its own mix of a shared sequence, an optional
// line and a repeated line: every line is in exactly one group, in its
// host's order, and the shared lines gather into one group each.
func TestMergeLinesMany(t *testing.T) {
	var specs []string
	for i := 1; i <= 300; i++ {
		s := fmt.Sprintf("lab%03d: connected in %d ms; ", i, 10+i%7)
		if i%7 == 0 {
			s += fmt.Sprintf("GPU 0: %d MiB still used; ", 512*(i%3+1))
		}
		for g := 0; g < 1+i%3; g++ {
			s += fmt.Sprintf("GPU %d freed; ", g)
		}
		s += fmt.Sprintf("done in %d.%d s", i%3, i%10)
		specs = append(specs, s)
	}
	hosts, seqs := lines(specs...)
	gs := mergeLines(hosts, seqs)
	keepsOrder(t, hosts, seqs, gs)
	// connected, warning, three ranks of "freed", done.
	if len(gs) != 6 {
		t.Fatalf("%d groups, want 6:\n%s", len(gs), showGroups(gs))
	}
	want := []struct {
		hosts int
		text  string
	}{
		{300, "connected in [10-16] ms"},
		{42, "GPU 0: [512,1024,1536] MiB still used"},
		{300, "GPU 0 freed"},
		{200, "GPU 1 freed"},
		{100, "GPU 2 freed"},
		{300, "done in [0.0..2.9] s"},
	}
	for i, g := range gs {
		if len(g.hosts) != want[i].hosts || g.render() != want[i].text {
			t.Errorf("group %d: %d hosts %q, want %d hosts %q", i, len(g.hosts), g.render(), want[i].hosts, want[i].text)
		}
	}
}

func TestPrinterGather(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, FoldNumbers: true, Fold: inventory.FoldNodeSet, Now: clock()})
	// Interleaved as hosts run at once; lab03 prints an extra warning.
	for step := 0; step < 3; step++ {
		for h := 1; h <= 4; h++ {
			host := fmt.Sprintf("lab%02d", h)
			switch step {
			case 0:
				p.Event(Event{Host: host, Level: "info", Message: fmt.Sprintf("GPU 2: killed 1 process after %.1f s", 0.7+0.1*float64(h))})
			case 1:
				if h == 3 {
					p.Event(Event{Host: host, Level: "warn", Message: "GPU 2: 512 MiB still used"})
				}
			case 2:
				p.Event(Event{Host: host, Level: "info", Message: "GPU 2 freed"})
			}
		}
	}
	if out.Len() != 0 {
		t.Fatalf("gather mode printed before the end: %q", out.String())
	}
	p.Finish(nil)
	want := "lab[01-04] (4) | INFO GPU 2: killed 1 process after [0.8..1.1] s\n" +
		"lab03 | WARN GPU 2: 512 MiB still used\n" +
		"lab[01-04] (4) | INFO GPU 2 freed\n"
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("gathered:\n%s\nwant:\n%s", out.String(), want)
	}
}

// clush -b's layout (checked against clubak -b in TestByOutputMatchesClubak).
func TestPrinterByOutput(t *testing.T) {
	run := func(gather bool) string {
		var out bytes.Buffer
		p := New(Options{Out: &out, Gather: true, FoldNumbers: gather, Fold: inventory.FoldNodeSet, Now: clock()})
		for h := 1; h <= 5; h++ {
			host := fmt.Sprintf("n%d", h)
			p.Event(Event{Host: host, Level: "info", Message: "hello"})
			if h == 3 {
				p.Event(Event{Host: host, Level: "error", Message: "GPU 1 not freed"})
			}
			p.Event(Event{Host: host, Level: "info", Message: fmt.Sprintf("took %d ms", 100+h%2)})
		}
		p.Finish(nil)
		s := out.String()
		return s[:strings.Index(s, "\nRECAP")]
	}
	want := "---------------\nn[1,5] (2)\n---------------\nINFO hello\nINFO took 101 ms\n" +
		"---------------\nn[2,4] (2)\n---------------\nINFO hello\nINFO took 100 ms\n" +
		"---------------\nn3\n---------------\nINFO hello\nERROR GPU 1 not freed\nINFO took 101 ms\n"
	if got := run(false); got != want {
		t.Errorf("-B:\n%s\nwant:\n%s", got, want)
	}
	want = "---------------\nn[1-2,4-5] (4)\n---------------\nINFO hello\nINFO took [100-101] ms\n" +
		"---------------\nn3\n---------------\nINFO hello\nERROR GPU 1 not freed\nINFO took 101 ms\n"
	if got := run(true); got != want {
		t.Errorf("-bB:\n%s\nwant:\n%s", got, want)
	}
}

// The by-output layout is clush's: the same input given to ClusterShell's
// clubak -b (Debian's clustershell) prints the same text.
func TestByOutputMatchesClubak(t *testing.T) {
	bin, err := exec.LookPath("clubak")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("clubak (Debian's clustershell) is needed in CI: %v", err)
		}
		t.Skip("clubak not installed")
	}
	var out bytes.Buffer
	p := New(Options{Out: &out, Gather: true, Fold: inventory.FoldNodeSet, Now: clock()})
	var in strings.Builder
	emit := func(host, level, tag, msg string) {
		p.Event(Event{Host: host, Level: level, Message: msg})
		fmt.Fprintf(&in, "%s:%s %s\n", host, tag, msg)
	}
	// Names of one width: clush breaks ties between groups of one size by
	// their first names as strings, gpush in natural order.
	for i := 1; i <= 40; i++ {
		h := fmt.Sprintf("gpu%02d", i)
		emit(h, "info", "INFO", fmt.Sprintf("%d GPUs", 4+i%3))
		if i%7 == 0 {
			emit(h, "warn", "WARN", "GPU 2: 512 MiB still used")
		}
		emit(h, "info", "INFO", "done")
	}
	p.Finish(nil)
	got := out.String()
	got = got[:strings.Index(got, "\nRECAP")]
	cmd := exec.Command(bin, "-b")
	cmd.Stdin = strings.NewReader(in.String())
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("clubak -b: %v", err)
	}
	if got != string(want) {
		t.Errorf("gpush -B:\n%s\nclubak -b:\n%s", got, want)
	}
}

// A line cut at its numbers and put back with its own numbers is the line;
// lines of one key render alike (same count of numbers).
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"killed pid 4410 after 0.8 s", "gpu017: GPU 2: 10240MiB -3 0x1f 1.2.3", "5. -", "a:1:2 [0,2]"} {
		f.Add(s, "gpu017")
	}
	f.Fuzz(func(t *testing.T, msg, host string) {
		if strings.ContainsRune(msg, 0) || strings.ContainsRune(host, 0) {
			return
		}
		tp := parseTemplate(msg, host, true)
		if len(tp.text) != len(tp.nums)+1 {
			t.Fatalf("%q: %d texts for %d numbers", msg, len(tp.text), len(tp.nums))
		}
		if back := tp.render([][]number{tp.nums}, host); back != msg {
			t.Fatalf("render(parse(%q)) = %q", msg, back)
		}
		for _, n := range tp.nums {
			if _, unit, ok := splitNumber(n.text); !ok || unit != "" {
				t.Fatalf("%q: number %q does not read back", msg, n.text)
			}
		}
	})
}

// Gathering 10,000 hosts' lines (the merge is linear in the lines times
// the templates offered at each step).
func BenchmarkMergeLines(b *testing.B) {
	var specs []string
	for i := 1; i <= 10000; i++ {
		s := fmt.Sprintf("gpu%05d: connected in %d ms; ", i, 10+i%7)
		if i%7 == 0 {
			s += fmt.Sprintf("GPU 0: %d MiB still used; ", 512*(i%3+1))
		}
		for g := 0; g < 1+i%3; g++ {
			s += fmt.Sprintf("GPU %d: killed pid %d after 0.%d s; ", g, 4000+i, i%9)
		}
		specs = append(specs, s+"done")
	}
	hosts, seqs := lines(specs...)
	b.ResetTimer()
	for b.Loop() {
		mergeLines(hosts, seqs)
	}
}

// A message of several lines (a tool's output) gathers as one, each of
// its lines prefixed; the host's own name folds in -B too.
func TestGatherMultiLineAndHostName(t *testing.T) {
	var out bytes.Buffer
	p := New(Options{Out: &out, FoldNumbers: true, Fold: inventory.FoldNodeSet, Now: clock()})
	p.Event(Event{Host: "h1", Level: "info", Message: "nvidia-smi:\n0, 10240 MiB\n"})
	p.Event(Event{Host: "h2", Level: "info", Message: "nvidia-smi:\n0, 512 MiB\n"})
	p.Finish(nil)
	if want := "h[1-2] (2) | INFO nvidia-smi:\nh[1-2] (2) | INFO 0, [512,10240] MiB\n"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("gathered:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	p = New(Options{Out: &out, Gather: true, FoldNumbers: true, Fold: inventory.FoldNodeSet, Now: clock()})
	for _, h := range []string{"h1", "h2", "h3"} {
		p.Event(Event{Host: h, Level: "info", Message: h + ": up"})
	}
	p.Event(Event{Host: "h4", Level: "info", Message: "h4: down"})
	p.Finish(nil)
	if want := "---------------\nh[1-3] (3)\n---------------\nINFO {host}: up\n---------------\nh4\n---------------\nINFO h4: down\n"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("-B:\n%s\nwant:\n%s", out.String(), want)
	}
}

// Random hosts' outputs from a few templates, crossed orders included:
// every line lands in exactly one group, in its host's order, and a group
// holds at most one line of a host.
func TestMergeLinesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	steps := []string{"stop %d", "killed pid %d", "GPU %d freed", "warn %d MiB", "done"}
	for round := 0; round < 200; round++ {
		var specs []string
		for h := 0; h < 1+rng.IntN(12); h++ {
			var parts []string
			for k := 0; k < rng.IntN(8); k++ {
				s := steps[rng.IntN(len(steps))]
				if strings.Contains(s, "%d") {
					s = fmt.Sprintf(s, rng.IntN(5))
				}
				parts = append(parts, s)
			}
			specs = append(specs, fmt.Sprintf("h%d:%s", h, strings.Join(parts, ";")))
		}
		hosts, seqs := lines(specs...)
		gs := mergeLines(hosts, seqs)
		keepsOrder(t, hosts, seqs, gs)
		for _, g := range gs {
			seen := map[string]bool{}
			for _, h := range g.hosts {
				if seen[h] {
					t.Fatalf("round %d: %s twice in %q", round, h, g.render())
				}
				seen[h] = true
			}
		}
		if t.Failed() {
			t.Fatalf("round %d: %v", round, specs)
		}
	}
}
