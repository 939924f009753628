package inventory

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
)

// These tests hold ExpandNodeSet and FoldNodeSet against ClusterShell
// itself (Debian's clustershell package, which `make deps` installs): the
// table through the nodeset command, generated cases through its Python
// library in one process, since nodeset starts Python once per call.

// clusterShellEnv makes nodeset deterministic (its merge order can depend
// on Python's hash seed on ties) and keeps the operator's config out.
func clusterShellEnv() []string {
	return append(os.Environ(), "PYTHONHASHSEED=0", "HOME="+os.TempDir())
}

func needNodeset(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("nodeset")
	if err != nil {
		t.Skip("nodeset (Debian's clustershell) not on PATH; make deps installs it")
	}
	return path
}

// runNodeset runs `nodeset FLAG EXPR` and returns its output, or an error
// when nodeset refused the expression (or could not run, which fails t).
func runNodeset(t *testing.T, bin, flag, expr string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, flag, expr)
	cmd.Env = clusterShellEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if _, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("%s", strings.TrimSpace(stderr.String()))
		}
		t.Errorf("nodeset %s %q: %v", flag, expr, err) // Errorf: called from workers
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

func sortedCopy(names []string) []string {
	out := append([]string(nil), names...)
	sort.Strings(out)
	return out
}

// nodesetCases are expressions both sides must read alike: the set, and
// the fold of it.
var nodesetCases = []string{
	"node[1-9]!node6", "node[1-9]&node[5-12]", "node[1-9]^node[5-12]",
	"node[1-3],node[2-5]!node2", "node[1-9]!node[2-3]&node[1-5]", "a,b!a,c", "n[1-3]^n[2-5]^n1",
	"n[1-5] ! n3", "n[1-3]x!n[1-2]x", "node1!node1", "gpu[01-16]&gpu[10-20]!gpu12",
	"node[1-9/2]", "n[0-10/05]", "n[1-10/3],n[2-10/4]", "n[1-2/2]",
	"node[01-10]", "n[010-100]", "n[00-03]", "n[0-0]", "n[9-11]", "n[09-11]", "n[1,01,001]", "[7,07,007]",
	"n[2,01,10,002,1,9]", "n[8-11,08]", "n[08,10-100]", "n[08,99-100]", "n[07,10,12,99-100]", "n[1,3,5-6]",
	"n1[2-3]", "n[8-10]0", "n01[1-2]", "n1[01-02]", "n0[0-1]", "n[1-2]5-x", "n1[2-4/2]",
	"node[1-2]-ib[0-1]", "n[1-3]x[1-2],n4x1", "a[1-2]b[1-2],a3b1", "a1b1,a1b2,a2b1", "a1b1,a2b1,a2b2",
	"a1b[1-3],a[2-3]b1", "x1y3,x2y3,x3y4,x1y4", "a[1-2]b1c[1-2],a2b2c1", "n[1-2]-[3-4]", "n[1-2]a[3-4]b5",
	"rack[1-4]-gpu[01-08]!rack2-gpu[03-05]", "r[1-3]-n[1-3]^r2-n2", "dgx[01-04]-ib[0-7]&dgx[02-05]-ib[0-3]",
	"login,gpu[2,10,1]", "n[1-2].x,n2.y", "a.lab,b.lab", "10.0.0.[1-3]", "gpu-a[1-2]", "n-1,n[0-2]",
	// nodeset refuses these; so must we.
	"n[01-100]", "n[1-010]", "n[008-10]", "n0[8-10]", "n[3-1]", "n[]", "n[a-b]", "n[1-10/0]", "n[1/2]",
	"n[1-4/2]0", "n[1-2][3-4]", "n[1-2]0[3-4]", "n[1,,2]", "n[,1]", "n[1-3]!", "!n1", "n1!,n2", "n[1-2",
	"n]1", "n[1-2]]", "n[[1-2]", "n[1--2]", "n[1-3/a]", "n[0x1]",
}

// Intended differences, each with its reason, left out of the table:
//   - "a,", "a,,b", ",a": nodeset refuses an empty operand of ','; we skip
//     it, because Ansible's host-list form "-i 'a,'" needs the comma.
//   - "n[-1-2]": nodeset has negative numbers; a host name has none.
//   - "n[+1-2]", "n[1_0]": nodeset reads bounds with Python's int(); we
//     take digits only.
//   - "@group", "n*": nodeset resolves its own groups and wildcards; in
//     --limit those are Ansible's groups and globs.
//   - digit runs over 18 digits fold as text here, as numbers in nodeset.

func TestNodeSetMatchesNodesetCommand(t *testing.T) {
	bin := needNodeset(t)
	// nodeset starts Python per call: ask for every answer first, a few
	// calls at a time.
	type answer struct {
		out string
		err error
	}
	expand := make([]answer, len(nodesetCases))
	fold := make([]answer, len(nodesetCases))
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				expand[i].out, expand[i].err = runNodeset(t, bin, "-e", nodesetCases[i])
				fold[i].out, fold[i].err = runNodeset(t, bin, "-f", nodesetCases[i])
			}
		}()
	}
	for i := range nodesetCases {
		work <- i
	}
	close(work)
	wg.Wait()

	agree, refused := 0, 0
	for i, expr := range nodesetCases {
		got, err := ExpandNodeSet(expr)
		if expand[i].err != nil {
			refused++
			if err == nil {
				t.Errorf("ExpandNodeSet(%q) = %v; nodeset refuses it: %v", expr, got, expand[i].err)
			} else {
				agree++
			}
			continue
		}
		if err != nil {
			t.Errorf("ExpandNodeSet(%q): %v; nodeset -e gives %q", expr, err, expand[i].out)
			continue
		}
		want := strings.Fields(expand[i].out)
		if !reflect.DeepEqual(sortedCopy(got), sortedCopy(want)) {
			t.Errorf("ExpandNodeSet(%q) = %v; nodeset -e gives %v", expr, got, want)
			continue
		}
		if fold[i].err != nil {
			t.Fatalf("nodeset -f %q: %v", expr, fold[i].err)
		}
		if gotF := FoldNodeSet(got); gotF != fold[i].out {
			t.Errorf("FoldNodeSet(ExpandNodeSet(%q)) = %q; nodeset -f gives %q", expr, gotF, fold[i].out)
			continue
		}
		agree++
	}
	t.Logf("nodeset command: %d cases (%d that nodeset refuses), %d agree", len(nodesetCases), refused, agree)
}

// clusterShellDriver reads "e EXPR" or "f NAME..." lines and answers each
// with "ok RESULT" or "err MESSAGE", using the library nodeset is built on.
const clusterShellDriver = `
import sys
from ClusterShell.NodeSet import NodeSet
for line in sys.stdin:
    op, _, arg = line.rstrip("\n").partition(" ")
    try:
        if op == "e":
            out = " ".join(NodeSet(arg))
        else:
            out = str(NodeSet.fromlist(arg.split()))
        print("ok " + out)
    except Exception as exc:
        print("err " + str(exc).replace("\n", " "))
    sys.stdout.flush()
`

// genNames makes a random set of host names of one to three numeric axes:
// a dense random part of a grid (so rectangles exist to be found) with
// mixed zero padding, sometimes beside a second pattern.
func genNames(r *rand.Rand) []string {
	texts := [][]string{{"n", ""}, {"rack", "-gpu", ""}, {"dgx", "-ib", ""}, {"r", "n", ".lab"}, {"a", "b", "c", ""}}
	pads := []string{"%d", "%02d", "%03d"}
	var names []string
	for k := 1 + r.Intn(2); k > 0; k-- {
		tx := texts[r.Intn(len(texts))]
		axes := make([][]string, len(tx)-1)
		for a := range axes {
			p := pads[r.Intn(len(pads))]
			for v, n := r.Intn(9), 1+r.Intn(4); n > 0; n-- {
				if r.Intn(5) == 0 {
					p = pads[r.Intn(len(pads))]
				}
				axes[a] = append(axes[a], fmt.Sprintf(p, v))
				v += 1 + r.Intn(2)*r.Intn(3)
			}
		}
		keep := 50 + r.Intn(50)
		var walk func(a int, prefix string)
		walk = func(a int, prefix string) {
			if a == len(axes) {
				if r.Intn(100) < keep {
					names = append(names, prefix+tx[a])
				}
				return
			}
			for _, v := range axes[a] {
				walk(a+1, prefix+tx[a]+v)
			}
		}
		walk(0, "")
	}
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names
}

// genExpr makes a random node-set expression with operators.
func genExpr(r *rand.Rand) string {
	ops := []string{",", "!", "&", "^"}
	var b strings.Builder
	for k := 1 + r.Intn(4); k > 0; k-- {
		if b.Len() > 0 {
			b.WriteString(ops[r.Intn(len(ops))])
		}
		lo := r.Intn(12)
		hi := lo + r.Intn(10)
		switch r.Intn(4) {
		case 0:
			fmt.Fprintf(&b, "n%d", lo)
		case 1:
			fmt.Fprintf(&b, "n[%d-%d]", lo, hi)
		case 2:
			fmt.Fprintf(&b, "n[%02d-%02d/%d]", lo, hi, 1+r.Intn(3))
		default:
			fmt.Fprintf(&b, "r[%d-%d]-n[%d,%d]", lo%3, hi%3+lo%3, lo, hi)
		}
	}
	return b.String()
}

// nodesetPython is the interpreter nodeset runs under (its #! line), which
// is the one that has the ClusterShell library.
func nodesetPython(t *testing.T, bin string) string {
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(strings.TrimPrefix(first, "#!"))
	if !strings.HasPrefix(first, "#!") || len(fields) == 0 {
		t.Skipf("%s has no #! line to find its Python by", bin)
	}
	return fields[0]
}

func TestNodeSetMatchesClusterShellLibrary(t *testing.T) {
	bin := needNodeset(t)
	cmd := exec.Command(nodesetPython(t, bin), "-c", clusterShellDriver)
	cmd.Env = clusterShellEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 with ClusterShell: %v", err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("ClusterShell driver: %v", err)
		}
	}()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	ask := func(op, arg string) (string, bool) {
		if _, err := fmt.Fprintf(stdin, "%s %s\n", op, arg); err != nil {
			t.Fatalf("ClusterShell driver: %v", err)
		}
		if !lines.Scan() {
			t.Fatalf("ClusterShell driver stopped: %v", lines.Err())
		}
		kind, text, _ := strings.Cut(lines.Text(), " ")
		return text, kind == "ok"
	}
	r := rand.New(rand.NewSource(9))
	const folds, exprs = 2000, 1000
	agreeF, agreeE, multi := 0, 0, 0
	for i := 0; i < folds; i++ {
		names := genNames(r)
		want, ok := ask("f", strings.Join(names, " "))
		if !ok {
			t.Fatalf("ClusterShell cannot fold %v: %s", names, want)
		}
		for _, part := range splitOutsideBrackets(want, ',') {
			if strings.Count(part, "[") > 1 {
				multi++
				break
			}
		}
		if got := FoldNodeSet(names); got != want {
			t.Errorf("FoldNodeSet(%v) = %q; ClusterShell folds %q", names, got, want)
			continue
		}
		agreeF++
	}
	for i := 0; i < exprs; i++ {
		expr := genExpr(r)
		want, ok := ask("e", expr)
		got, err := ExpandNodeSet(expr)
		switch {
		case !ok && err == nil:
			t.Errorf("ExpandNodeSet(%q) = %v; ClusterShell refuses it: %s", expr, got, want)
		case ok && err != nil:
			t.Errorf("ExpandNodeSet(%q): %v; ClusterShell gives %q", expr, err, want)
		case ok && !reflect.DeepEqual(sortedCopy(got), sortedCopy(strings.Fields(want))):
			t.Errorf("ExpandNodeSet(%q) = %v; ClusterShell gives %q", expr, got, want)
		default:
			agreeE++
		}
	}
	t.Logf("ClusterShell library: %d folds (%d with a multi-axis part), %d agree; %d expressions, %d agree",
		folds, multi, agreeF, exprs, agreeE)
	if multi < folds/10 {
		t.Errorf("only %d of %d generated folds have a multi-axis part: the generator no longer tests that", multi, folds)
	}
}
