package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/report"
	"github.com/gpush/gpush/report/jsoncheck"
)

// needAnsible returns ansible-playbook's path: missing, the test fails in
// CI (CI=true) and is skipped elsewhere.
func needAnsible(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("ansible-playbook")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ansible-playbook (Debian's ansible-core) is needed in CI: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	return p
}

// TestExitCodesMatchAnsiblePlaybook runs the same outcomes through
// ansible-playbook and gpush run: ok, skipped, failed and unreachable hosts,
// alone and together, give the same exit status.
func TestExitCodesMatchAnsiblePlaybook(t *testing.T) {
	ansible := needAnsible(t)
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	files := map[string]string{
		// Port 1 on loopback refuses: unreachable for both.
		"inv.ini": "ok1 ansible_connection=local\nskip1 ansible_connection=local\nfail1 ansible_connection=local\n" +
			"down1 ansible_host=127.0.0.1 ansible_port=1\n",
		// A host whose every task is skipped is ok to Ansible: exit 0.
		"play.yml": `- hosts: all
  gather_facts: false
  tasks:
    - command: /bin/false
      when: inventory_hostname is match('fail')
    - command: /bin/true
      when: inventory_hostname is not match('skip')
`,
		"outcome.lua": `if host.name:match("^fail") then fail("failed on purpose") end
if host.name:match("^skip") then skip("left alone on purpose") end
return "ok"
`,
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inv, play, script := filepath.Join(dir, "inv.ini"), filepath.Join(dir, "play.yml"), filepath.Join(dir, "outcome.lua")
	for _, limit := range []string{"skip1", "ok1,skip1", "fail1,skip1", "fail1,down1", "ok1,skip1,down1"} {
		cmd := exec.Command(ansible, "-i", inv, play, "--limit", limit)
		cmd.Env = append(os.Environ(), "HOME="+dir, "ANSIBLE_HOST_KEY_CHECKING=False", "ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, "tmp"))
		out, err := cmd.CombinedOutput()
		if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
			t.Fatalf("ansible-playbook: %v\n%s", err, out)
		}
		want := cmd.ProcessState.ExitCode()
		code, stdout, stderr := gpush(t, "run", script, "-i", inv, "--limit", limit, "--known-hosts", filepath.Join(dir, "known_hosts"))
		if code != want {
			t.Errorf("--limit %s: gpush exits %d, ansible-playbook %d\ngpush:\n%s%s\nansible-playbook:\n%s", limit, code, want, stdout, stderr, out)
		}
	}
}

// An interrupted ansible-playbook exits 99, as gpush does (report.ExitInterrupted).
func TestAnsiblePlaybookInterruptedIs99(t *testing.T) {
	ansible := needAnsible(t)
	dir := t.TempDir()
	play := filepath.Join(dir, "play.yml")
	src := "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: sleep 60\n"
	if err := os.WriteFile(play, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ansible, "-i", "localhost,", "-c", "local", play)
	cmd.Env = append(os.Environ(), "HOME="+dir, "ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, "tmp"))
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The task has started once its header is out: interrupt it there.
	for !strings.Contains(out.String(), "TASK [command]") {
		if ctx.Err() != nil {
			t.Fatalf("ansible-playbook never started its task:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the task's worker is forked by now
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != report.ExitInterrupted {
		t.Errorf("interrupted ansible-playbook exits %d, gpush %d\n%s", code, report.ExitInterrupted, out.String())
	}
}

// syncBuffer is a bytes.Buffer the child's output and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A failed and a skipped host keep their rows, in the table (marked with
// their status) and in --json, whose host lines end with a summary.
func TestRunKeepsRowsOfEveryOutcome(t *testing.T) {
	dir := t.TempDir()
	inv, script := filepath.Join(dir, "inv.yaml"), filepath.Join(dir, "rows.lua")
	for p, src := range map[string]string{
		inv: "all:\n  vars: {ansible_connection: local}\n  hosts:\n    a1:\n    a2:\n    a3:\n    a4:\n",
		script: `report.columns{"step", "n"}
report.row{n = 1, step = "read"}
if host.name == "a2" then fail("not freed on %s", host.name, {{n = 2, step = "not-freed"}}) end
if host.name == "a3" then skip("busy: %s", host.name) end
return {{n = 3, step = "done"}, {n = 3, step = "done"}}
`,
	} {
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := gpush(t, "run", script, "-i", inv)
	for _, want := range []string{
		// The script's own n is not the count of hosts.
		"HOST    #  STATUS   STEP       N\n",
		"a[1,4]  2  ok       read       1\na[1,4]  2  ok       done       3\na[1,4]  2  ok       done       3\n",
		"a2      1  failed   read       1\na2      1  failed   not-freed  2\n",
		"a3      1  skipped  read       1\n",
		"9 rows of 4 hosts shown as 6",
		"RECAP ok=2 changed=0 skipped=1 failed=1 unreachable=0",
		"busy: a3", "not freed on a2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\nexit %d\n%s%s", want, code, out, errs)
		}
	}
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	code, out, _ = gpush(t, "run", script, "-i", inv, "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 2 || len(lines) != 5 || !strings.HasPrefix(lines[4], `{"type":"summary","hosts":4,"counts":{"failed":1,"ok":2,"skipped":1,"unreachable":0},"exit_code":2,`) {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		`"host":"a2","status":"failed","value":null,"error":"not freed on a2","address":"a2","rows":[{"n":1,"step":"read"},{"n":2,"step":"not-freed"}],"columns":["step","n"]`,
		`"host":"a3","status":"skipped","value":null,"error":"busy: a3","address":"a3","rows":[{"n":1,"step":"read"}]`,
		// Recorded and returned rows, in one place.
		`"host":"a1","status":"ok","value":null,"address":"a1","rows":[{"n":1,"step":"read"},{"n":3,"step":"done"},{"n":3,"step":"done"}]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--json lacks %s\n%s", want, out)
		}
	}
	schema, err := jsoncheck.Load("../../docs/json-schema.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if err := schema.ValidateJSON([]byte(l)); err != nil {
			t.Errorf("not docs/json-schema.json: %v\n%s", err, l)
		}
	}
}
