package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAnsibleCompare holds gpush's inventory reading against Debian's
// ansible-core (ansible-inventory --list, and InventoryManager for host
// patterns through testdata/ansible-compare/patterns.py) on the inputs that
// testdata/ansible-compare/CASES names. Every difference must be listed in
// testdata/ansible-compare/DIFFERENCES with its reason, and every listed one
// must still differ.

const ansibleCompareDir = "testdata/ansible-compare"

// debCollections is where Debian's ansible package (7.7.0 in Debian 12)
// installs the collections whose shipped inventories are the public
// inputs: a source "deb:PATH" in CASES is PATH below it, read at test
// time from the package rather than copied into this repository.
const debCollections = "/usr/lib/python3/dist-packages/ansible_collections"

// ignoredGpushMeta are keys gpush's List adds under _meta that
// ansible-inventory does not have (the effective connection, i9-hosts).
var ignoredGpushMeta = map[string]bool{"gpush": true}

// ansibleCase is one line of CASES: a name, its -i sources (relative to
// ansibleCompareDir) and extra --limit patterns beyond the ones every case
// gets (all, ungrouped, each group, each host).
type ansibleCase struct {
	name    string
	line    int
	sources []string
	limits  []string
}

// readAnsibleCases reads CASES. A case whose deb: source is missing fails
// the test in CI (make deps installs the package); elsewhere it is left
// out, and counted in missing.
func readAnsibleCases(t *testing.T) (out []ansibleCase, missing []string) {
	file := filepath.Join(ansibleCompareDir, "CASES")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		c := ansibleCase{name: f[0], line: i + 1}
		absent := ""
		for j := 1; j < len(f); j += 2 {
			if j+1 >= len(f) || (f[j] != "-i" && f[j] != "--limit") {
				t.Fatalf("%s:%d: want NAME (-i SOURCE | --limit PATTERN)..., got %q", file, i+1, line)
			}
			if f[j] == "--limit" {
				c.limits = append(c.limits, f[j+1])
				continue
			}
			src, deb, err := caseSource(f[j+1])
			if err != nil {
				t.Fatalf("%s:%d: %v", file, i+1, err)
			}
			if _, err := os.Lstat(src); err != nil {
				if !deb {
					t.Fatalf("%s:%d: %v", file, i+1, err)
				}
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s:%d: CI: %v (Debian's ansible package must be installed: make deps)", file, i+1, err)
				}
				absent = src
			}
			c.sources = append(c.sources, src)
		}
		if len(c.sources) == 0 || seen[c.name] {
			t.Fatalf("%s:%d: case %q needs a unique name and at least one -i", file, i+1, c.name)
		}
		seen[c.name] = true
		if absent != "" {
			missing = append(missing, c.name+" ("+absent+")")
			continue
		}
		out = append(out, c)
	}
	return out, missing
}

// caseSource is the path of a CASES source: "deb:PATH" below
// debCollections, anything else relative to ansibleCompareDir. deb says
// which.
func caseSource(s string) (p string, deb bool, err error) {
	rest, deb := strings.CutPrefix(s, "deb:")
	if !deb {
		return filepath.Join(ansibleCompareDir, s), false, nil
	}
	if rest == "" || filepath.IsAbs(rest) || !filepath.IsLocal(rest) {
		return "", true, fmt.Errorf("source %q: want deb:PATH, PATH relative to %s and inside it", s, debCollections)
	}
	return filepath.Join(debCollections, rest), true, nil
}

// intendedDiff is one line of DIFFERENCES: "CASE WHAT REASON". WHAT is
// load, hosts, warnings, group:G, var:HOST:VAR or pattern:P, and may be a
// path.Match glob (var:*:docker_install), as may CASE. Every reason is
// one gpush differs for on purpose: a "pending:" or "open:" reason (work
// not done yet) fails the test.
type intendedDiff struct {
	line        int
	input, what string
	reason      string
	used        int
}

func readIntendedDiffs(t *testing.T) []*intendedDiff {
	file := filepath.Join(ansibleCompareDir, "DIFFERENCES")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []*intendedDiff
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 3 {
			t.Fatalf("%s:%d: want CASE WHAT REASON, got %q", file, i+1, line)
		}
		reason := strings.Join(f[2:], " ")
		out = append(out, &intendedDiff{line: i + 1, input: f[0], what: f[1], reason: reason})
	}
	return out
}

func (d *intendedDiff) matches(input, what string) bool {
	if ok, err := path.Match(d.input, input); err != nil || !ok {
		return false
	}
	if d.what == what {
		return true
	}
	ok, err := path.Match(d.what, what)
	return err == nil && ok
}

// ansibleEnv keeps the operator's config and home out, makes an inventory
// no plugin can parse an error rather than a warning (a file of a folder
// too: gpush refuses a file it cannot read), and turns colour off.
func ansibleEnv(tmp string) []string {
	env := []string{
		"HOME=" + tmp, "ANSIBLE_LOCAL_TEMP=" + filepath.Join(tmp, "local"),
		"ANSIBLE_REMOTE_TEMP=" + filepath.Join(tmp, "remote"), "ANSIBLE_CONFIG=" + filepath.Join(tmp, "none.cfg"),
		"ANSIBLE_INVENTORY_UNPARSED_FAILED=True", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED=True", "ANSIBLE_NOCOLOR=True", "ANSIBLE_FORCE_COLOR=False",
		"ANSIBLE_DEPRECATION_WARNINGS=False", "LC_ALL=C.UTF-8", "PYTHONHASHSEED=0",
	}
	for _, k := range []string{"PATH"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// ansibleList is ansible-inventory's answer for one case.
type ansibleList struct {
	out      []byte
	warnings []string
	err      string
}

func runAnsibleInventory(t *testing.T, env []string, c ansibleCase) ansibleList {
	args := []string{}
	for _, s := range c.sources {
		args = append(args, "-i", s)
	}
	cmd := exec.Command("ansible-inventory", append(args, "--list")...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	res := ansibleList{out: out, warnings: ansibleWarnings(stderr.String())}
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Errorf("%s: ansible-inventory: %v", c.name, err)
		}
		res.err = strings.Join(strings.Fields(stderr.String()), " ")
		if res.err == "" {
			res.err = err.Error()
		}
	}
	return res
}

// ansibleWarnings joins ansible's wrapped "[WARNING]: ..." lines back into
// one message each.
func ansibleWarnings(stderr string) []string {
	var out []string
	for _, line := range strings.Split(stderr, "\n") {
		switch {
		case strings.HasPrefix(line, "[WARNING]:"):
			out = append(out, strings.TrimSpace(strings.TrimPrefix(line, "[WARNING]:")))
		case len(out) > 0 && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "["):
			out[len(out)-1] += " " + strings.TrimSpace(line)
		}
	}
	return out
}

// patternAnswer is one pattern's result from patterns.py.
type patternAnswer struct {
	Hosts    []string `json:"hosts"`
	Error    *string  `json:"error"`
	Warnings []string `json:"warnings"`
}

type patternCase struct {
	List        listAnswer                       `json:"list"`
	Error       *string                          `json:"error"`
	Warnings    []string                         `json:"warnings"`
	Patterns    map[string]patternAnswer         `json:"patterns"`
	Connections map[string]map[string]connAnswer `json:"connections"`
}

// listAnswer is ansible-inventory --list, run in patterns.py's process.
type listAnswer struct {
	Out      *string  `json:"out"`
	Error    *string  `json:"error"`
	Warnings []string `json:"warnings"`
}

// connAnswer is one connection field of a host as a play would use it.
type connAnswer struct {
	Value any     `json:"value"`
	Error *string `json:"error"`
}

// runAnsiblePatterns asks patterns.py, in one process, for every case's
// --list and patterns.
func runAnsiblePatterns(t *testing.T, env []string, cases []ansibleCase) map[string]patternCase {
	type reqCase struct {
		Name    string   `json:"name"`
		Sources []string `json:"sources"`
		Limits  []string `json:"limits"`
	}
	var req struct {
		Cases []reqCase `json:"cases"`
	}
	for _, c := range cases {
		req.Cases = append(req.Cases, reqCase{c.name, c.sources, append([]string{}, c.limits...)})
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("ansible-inventory")
	if err != nil {
		t.Fatal(err)
	}
	// The interpreter ansible-inventory runs under has the ansible library.
	cmd := exec.Command(nodesetPython(t, bin), filepath.Join(ansibleCompareDir, "patterns.py"))
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("patterns.py: %v\n%s", err, stderr.String())
	}
	var res map[string]patternCase
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("patterns.py: bad JSON: %v", err)
	}
	return res
}

// listing is an ansible-inventory --list document, read into what is
// compared.
type listing struct {
	hosts    map[string]bool
	groups   map[string]listGroup
	hostvars map[string]map[string]any
	meta     []string // _meta keys other than hostvars
}

type listGroup struct {
	hosts, children []string
}

// pyJSONSpecials: Python's json writes Infinity, -Infinity and NaN
// bare; encoding/json refuses them, so they become tagged strings here
// (outside string literals only), on both sides alike.
func pyJSONSpecials(data []byte) []byte {
	var b bytes.Buffer
	inStr := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inStr {
			b.WriteByte(c)
			switch c {
			case '\\':
				if i+1 < len(data) {
					i++
					b.WriteByte(data[i])
				}
			case '"':
				inStr = false
			}
			continue
		}
		if c == '"' {
			inStr = true
			b.WriteByte(c)
			continue
		}
		rest := data[i:]
		replaced := false
		for _, w := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(rest, []byte(w)) {
				b.WriteString(`"\u0000float:` + w + `"`)
				i += len(w) - 1
				replaced = true
				break
			}
		}
		if !replaced {
			b.WriteByte(c)
		}
	}
	return b.Bytes()
}

func parseListing(data []byte) (listing, error) {
	dec := json.NewDecoder(bytes.NewReader(pyJSONSpecials(data)))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return listing{}, err
	}
	l := listing{hosts: map[string]bool{}, groups: map[string]listGroup{}, hostvars: map[string]map[string]any{}}
	strs := func(v any) []string {
		var out []string
		list, _ := v.([]any)
		for _, x := range list {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	for k, v := range doc {
		m, _ := v.(map[string]any)
		if k == "_meta" {
			for mk, mv := range m {
				if mk != "hostvars" {
					l.meta = append(l.meta, mk)
					continue
				}
				hv, _ := mv.(map[string]any)
				for h, vars := range hv {
					vm, _ := vars.(map[string]any)
					l.hostvars[h] = vm
				}
			}
			continue
		}
		g := listGroup{hosts: strs(m["hosts"]), children: strs(m["children"])}
		sort.Strings(g.children)
		l.groups[k] = g
		for _, h := range g.hosts {
			l.hosts[h] = true
		}
	}
	return l, nil
}

// sameValue compares two decoded JSON values by type: 1 and "1" and true
// differ, 1 and 1.0 do not.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, okx := new(big.Float).SetString(x.String())
		fy, oky := new(big.Float).SetString(y.String())
		return okx && oky && fx.Cmp(fy) == 0
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func showJSON(v any) string {
	if v == nil {
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// resolveForCompare reads a case's sources as gpush does, without any
// ssh_config.
func resolveForCompare(sources []string, tmp string) (*Inventory, error) {
	opts := Options{WorkDir: tmp, ConfigDir: tmp, HomeDir: tmp, SSHConfigFiles: []string{}}
	return ResolveAll(sources, opts)
}

// compareTally counts checks and keeps the differences seen.
type compareTally struct {
	checks, agree int
	diffs         []string // "CASE WHAT: detail", unlisted ones
	intended      map[string]int
	listed        []*intendedDiff
}

func (ct *compareTally) check(c, what string, same bool, detail func() string) {
	ct.checks++
	if same {
		ct.agree++
		return
	}
	for _, d := range ct.listed {
		if d.matches(c, what) {
			d.used++
			ct.intended[d.reason]++
			if strings.HasPrefix(d.reason, "pending:") || strings.HasPrefix(d.reason, "open:") {
				ct.diffs = append(ct.diffs, fmt.Sprintf("%s %s: listed as not done (%s): %s", c, what, d.reason, detail()))
			}
			return
		}
	}
	ct.diffs = append(ct.diffs, fmt.Sprintf("%s %s: %s", c, what, detail()))
}

func TestAnsibleCompare(t *testing.T) {
	if _, err := exec.LookPath("ansible-inventory"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI: ansible-inventory (Debian's ansible-core) must be installed for this comparison: %v", err)
		}
		t.Skipf("no ansible-inventory: %v", err)
	}
	tmp := t.TempDir()
	env := ansibleEnv(tmp)
	ver, _ := exec.Command("ansible-inventory", "--version").Output()
	first, _, _ := strings.Cut(string(ver), "\n")
	t.Logf("reference: %s", strings.TrimSpace(first))

	cases, missing := readAnsibleCases(t)
	if len(missing) > 0 {
		t.Logf("%d cases left out, their source not installed (Debian's ansible package): %s",
			len(missing), strings.Join(missing, ", "))
	}
	ct := &compareTally{intended: map[string]int{}, listed: readIntendedDiffs(t)}

	start := time.Now()
	answers := runAnsiblePatterns(t, env, cases)
	tPy := time.Since(start)
	refs := make([]ansibleList, len(cases))
	for i, c := range cases {
		l := answers[c.name].List
		refs[i] = ansibleList{warnings: l.Warnings}
		switch {
		case l.Error != nil:
			refs[i].err = *l.Error
		case l.Out == nil:
			t.Fatalf("%s: patterns.py gave no --list", c.name)
		default:
			refs[i].out = []byte(*l.Out)
		}
	}
	// patterns.py runs ansible-inventory's own code in one process, for
	// speed; the command itself must print the same, which a sample of
	// the cases checks (each start costs about a second of CPU).
	checked := checkAgainstCommand(t, env, cases, refs)
	tCmd := time.Since(start) - tPy

	// gpush's side.
	type gside struct {
		inv  *Inventory
		err  error
		list listing
		ref  listing
	}
	gs := make([]gside, len(cases))
	for i, c := range cases {
		g := &gs[i]
		g.inv, g.err = resolveForCompare(c.sources, tmp)
		if refs[i].err == "" {
			var err error
			if g.ref, err = parseListing(refs[i].out); err != nil {
				t.Fatalf("%s: ansible-inventory --list: bad JSON: %v", c.name, err)
			}
		}
		if g.err == nil {
			out, err := g.inv.List(g.inv.Hosts())
			if err != nil {
				g.err = err
			} else if g.list, err = parseListing(out); err != nil {
				t.Fatalf("%s: gpush List: bad JSON: %v", c.name, err)
			}
		}
	}
	tGpush := time.Since(start) - tPy - tCmd
	// Where the time goes, for keeping the suite short (not asserted).
	t.Logf("time: patterns.py %v, %d cases through the ansible-inventory command %v, gpush %v",
		tPy.Round(time.Millisecond), checked, tCmd.Round(time.Millisecond), tGpush.Round(time.Millisecond))

	files := map[string]bool{}
	for i, c := range cases {
		ref, g := refs[i], gs[i]
		for _, s := range c.sources {
			addInputFiles(files, s)
		}
		// Loading: both refuse (Ansible may only warn) is agreement.
		switch {
		case ref.err != "" || g.err != nil:
			refuses := ref.err != "" || len(ref.warnings) > 0
			if g.err != nil && refuses {
				t.Logf("%s: both refuse: ansible: %s %q; gpush: %v", c.name, orNone(ref.err), ref.warnings, g.err)
			}
			ct.check(c.name, "load", g.err != nil && refuses, func() string {
				return fmt.Sprintf("ansible: %s (warnings %q); gpush: %v", orNone(ref.err), ref.warnings, g.err)
			})
			continue
		}
		// Warnings: Ansible warns about an input exactly when gpush does.
		ct.check(c.name, "warnings", (len(ref.warnings) > 0) == (len(g.inv.Warnings) > 0), func() string {
			return fmt.Sprintf("ansible warns %q; gpush warns %q", ref.warnings, g.inv.Warnings)
		})
		for _, k := range g.list.meta {
			if !ignoredGpushMeta[k] {
				ct.check(c.name, "meta:"+k, false, func() string { return "gpush adds _meta." + k })
			}
		}
		ct.check(c.name, "hosts", slices.Equal(sortedKeys(g.ref.hosts), sortedKeys(g.list.hosts)), func() string {
			return fmt.Sprintf("ansible %v; gpush %v", sortedKeys(g.ref.hosts), sortedKeys(g.list.hosts))
		})
		compareGroups(ct, c.name, g.ref, g.list)
		compareHostVars(ct, c.name, g.ref, g.list)
		comparePatterns(ct, c, g.inv, answers[c.name])
		compareConnections(ct, c.name, g.inv, answers[c.name], tmp)
	}

	for _, d := range ct.listed {
		if d.used == 0 && !matchesMissing(d, missing) {
			t.Errorf("%s/DIFFERENCES:%d: %s %s: no such difference seen (stale: delete the line)",
				ansibleCompareDir, d.line, d.input, d.what)
		}
	}
	for _, d := range ct.diffs {
		t.Errorf("differs from ansible, not in DIFFERENCES: %s", d)
	}
	reasons := sortedKeys(ct.intended)
	sort.SliceStable(reasons, func(i, j int) bool { return ct.intended[reasons[i]] > ct.intended[reasons[j]] })
	var lines []string
	for _, r := range reasons {
		lines = append(lines, fmt.Sprintf("%4d x %s", ct.intended[r], r))
	}
	differ := ct.checks - ct.agree
	debFiles, debCases := 0, 0
	for f := range files {
		if strings.HasPrefix(f, debCollections+"/") {
			debFiles++
		}
	}
	for _, c := range cases {
		if strings.HasPrefix(c.sources[0], debCollections+"/") {
			debCases++
		}
	}
	t.Logf("of them from Debian's ansible package: %d files, %d cases", debFiles, debCases)
	t.Logf("inventories vs ansible-inventory: %d files, %d cases, %d checks, %d agree, %d differ "+
		"(%d intended, %d not; %d reasons):\n  %s",
		len(files), len(cases), ct.checks, ct.agree, differ, differ-len(ct.diffs),
		len(ct.diffs), len(ct.intended), strings.Join(lines, "\n  "))
}

// matchesMissing says whether a DIFFERENCES line may be about a case left
// out for a missing source (not stale then: only not seen here).
func matchesMissing(d *intendedDiff, missing []string) bool {
	for _, m := range missing {
		name, _, _ := strings.Cut(m, " ")
		if ok, err := path.Match(d.input, name); err == nil && ok {
			return true
		}
	}
	return false
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func orNone(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}

// addInputFiles adds the regular files a source reads (the file, or every
// file below a folder, plus group_vars/ and host_vars/ beside it) to set,
// by their real paths: a group_vars/ shared through a symlink counts once.
func addInputFiles(set map[string]bool, src string) {
	add := func(root string) {
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if real, err := filepath.EvalSymlinks(p); err == nil {
					set[real] = true
				}
			}
			return nil
		})
	}
	add(src)
	if fi, err := os.Stat(src); err == nil && !fi.IsDir() {
		for _, sub := range []string{"group_vars", "host_vars"} {
			// The trailing slash makes Walk enter a symlinked folder.
			add(filepath.Join(filepath.Dir(src), sub) + "/")
		}
	}
}

func compareGroups(ct *compareTally, name string, ref, got listing) {
	all := map[string]bool{}
	for g := range ref.groups {
		all[g] = true
	}
	for g := range got.groups {
		all[g] = true
	}
	for _, g := range sortedKeys(all) {
		r, rok := ref.groups[g]
		o, ook := got.groups[g]
		ct.check(name, "group:"+g, rok == ook && slices.Equal(r.hosts, o.hosts) && slices.Equal(r.children, o.children),
			func() string {
				show := func(ok bool, lg listGroup) string {
					if !ok {
						return "absent"
					}
					return fmt.Sprintf("hosts %v children %v", lg.hosts, lg.children)
				}
				return fmt.Sprintf("ansible %s; gpush %s", show(rok, r), show(ook, o))
			})
	}
}

func compareHostVars(ct *compareTally, name string, ref, got listing) {
	for _, h := range sortedKeys(ref.hosts) {
		if !got.hosts[h] {
			continue // counted under hosts
		}
		rv, gv := ref.hostvars[h], got.hostvars[h]
		keys := map[string]bool{}
		for k := range rv {
			keys[k] = true
		}
		for k := range gv {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			a, aok := rv[k]
			b, bok := gv[k]
			ct.check(name, "var:"+h+":"+k, aok == bok && sameValue(a, b), func() string {
				show := func(ok bool, v any) string {
					if !ok {
						return "unset"
					}
					return fmt.Sprintf("%s (%T)", showJSON(v), v)
				}
				return fmt.Sprintf("ansible %s; gpush %s", show(aok, a), show(bok, b))
			})
		}
	}
}

func comparePatterns(ct *compareTally, c ansibleCase, inv *Inventory, ans patternCase) {
	if ans.Error != nil {
		ct.check(c.name, "patterns", false, func() string { return "patterns.py could not load it: " + *ans.Error })
		return
	}
	for _, p := range sortedKeys(ans.Patterns) {
		a := ans.Patterns[p]
		got, err := inv.SelectNames(p)
		// Ansible refuses with an error, or warns and selects nothing.
		refused := a.Error != nil || (len(a.Hosts) == 0 && len(a.Warnings) > 0)
		same := false
		switch {
		case refused || err != nil:
			same = refused && err != nil
		default:
			// Order too: hosts run and are listed in it.
			same = slices.Equal(a.Hosts, got)
		}
		ct.check(c.name, "pattern:"+p, same, func() string {
			ansible := fmt.Sprintf("%v", a.Hosts)
			if a.Error != nil {
				ansible = "error: " + *a.Error
			} else if len(a.Warnings) > 0 {
				ansible += fmt.Sprintf(" warnings %q", a.Warnings)
			}
			gp := fmt.Sprintf("%v", got)
			if err != nil {
				gp = "error: " + err.Error()
			}
			return fmt.Sprintf("ansible %s; gpush %s", ansible, gp)
		})
	}
}

// gpushHostErr is the error gpush keeps for one host whose connection it
// cannot make.
func gpushHostErr(inv *Inventory, name string) error { return inv.HostErr(name) }

// compareConnections holds each host's effective address, port, user, key
// and connection against what a play would use. Where a play would fail
// (a template Ansible cannot render) or gpush refuses the host, that is
// one check, conn:HOST: both must refuse.
func compareConnections(ct *compareTally, name string, inv *Inventory, ans patternCase, home string) {
	for _, hn := range sortedKeys(ans.Connections) {
		fields := ans.Connections[hn]
		h, ok := inv.Host(hn)
		if !ok {
			ct.check(name, "conn:"+hn, false, func() string { return "gpush has no such host" })
			continue
		}
		var ansErr []string
		for _, f := range sortedKeys(fields) {
			if e := fields[f].Error; e != nil {
				ansErr = append(ansErr, f+": "+*e)
			}
		}
		if herr := gpushHostErr(inv, hn); herr != nil || len(ansErr) > 0 {
			ct.check(name, "conn:"+hn, herr != nil && len(ansErr) > 0, func() string {
				return fmt.Sprintf("ansible %s; gpush %s", orNone(strings.Join(ansErr, "; ")), orNone(errText(herr)))
			})
			continue
		}
		for _, f := range []string{"address", "port", "user", "key", "connection"} {
			a, set := fields[f]
			var want, got string
			switch f {
			case "address":
				want, got = hn, h.Address
			case "port":
				if h.Port != 0 {
					got = strconv.Itoa(h.Port)
				}
			case "user":
				got = h.User
			case "key":
				if len(h.IdentityFiles) > 0 {
					got = h.IdentityFiles[0]
					if rest, ok := strings.CutPrefix(got, home+"/"); ok {
						got = "~/" + rest
					}
				}
			case "connection":
				want, got = "ssh", h.Connection
			}
			if set {
				want = fmt.Sprint(a.Value)
				if f == "connection" {
					want = gpushConnName(want)
				}
			}
			ct.check(name, "conn:"+hn+":"+f, want == got, func() string {
				return fmt.Sprintf("ansible %q; gpush %q", want, got)
			})
		}
	}
}

// gpushConnName is the connection gpush makes for an ansible_connection
// value it supports (the value itself for others).
func gpushConnName(conn string) string {
	switch conn {
	case "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh", "ansible.legacy.ssh", "ansible.builtin.paramiko_ssh":
		return "ssh"
	case "ansible.builtin.local", "ansible.legacy.local":
		return "local"
	}
	return conn
}

// checkAgainstCommand runs the real ansible-inventory for every eighth case
// (and the first), two at a time, and fails where it prints other than
// what patterns.py gave. It returns how many cases it ran.
func checkAgainstCommand(t *testing.T, env []string, cases []ansibleCase, refs []ansibleList) int {
	var idx []int
	for i := range cases {
		if i%8 == 0 {
			idx = append(idx, i)
		}
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				got := runAnsibleInventory(t, env, cases[i])
				want := refs[i]
				switch {
				case (got.err != "") != (want.err != ""):
					t.Errorf("%s: ansible-inventory: %s; in patterns.py: %s", cases[i].name, orNone(got.err), orNone(want.err))
				case got.err == "" && strings.TrimSpace(string(got.out)) != strings.TrimSpace(string(want.out)):
					t.Errorf("%s: ansible-inventory --list prints other than patterns.py:\n%s\n---\n%s", cases[i].name, got.out, want.out)
				case len(got.warnings) != len(want.warnings):
					// Only counted: ansible wraps its warnings at hyphens too.
					t.Errorf("%s: ansible-inventory warns %q; in patterns.py %q", cases[i].name, got.warnings, want.warnings)
				}
			}
		}()
	}
	for _, i := range idx {
		work <- i
	}
	close(work)
	wg.Wait()
	return len(idx)
}
