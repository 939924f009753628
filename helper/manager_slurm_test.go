package helper

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/slurmlab"
)

// slurmJobOn submits a batch job whose script runs a gpu-holder of dev
// (the script stays its parent) and returns the job id and the holder's
// machine pid.
func slurmJobOn(t *testing.T, c *slurmlab.Cluster, dev string, sbatchArgs ...string) (string, int) {
	t.Helper()
	return c.SbatchHolder(t, t.TempDir(), fmt.Sprintf("#!/bin/sh\n'%s' --dev '%s' --mem-mib 1024\necho holder exited $?\n", holderBin, dev), sbatchArgs...)
}

func slurmManagerOf(t *testing.T, h *Holder) Manager {
	t.Helper()
	for _, m := range h.Managers {
		if m.Kind == ManagerSlurm {
			return m
		}
	}
	t.Fatalf("holder %d: no slurm manager in %+v", h.PID, h.Managers)
	return Manager{}
}

func managers(t *testing.T, cfg Config, action string, dry bool, ms ...Manager) []ManagerResult {
	t.Helper()
	r, err := Managers(context.Background(), ManagersRequest{Config: cfg, Action: action, DryRun: dry, Grace: Duration(3 * time.Second), Managers: ms})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != len(ms) {
		t.Fatalf("%d results for %d managers", len(r.Results), len(ms))
	}
	return r.Results
}

// A real Slurm cluster: a batch job's holder names its job (id, user,
// step) after the script that runs it; the job reads alive and may restart
// its worker, a --requeue job restarts it; a stop cancels both jobs, after
// which they are not alive and their processes are gone.
func TestSlurmJobManager(t *testing.T) {
	c := slurmlab.Start(t, slurmlab.Options{})
	h := newHost(t, 2)
	plain, p1 := slurmJobOn(t, c, h.d("nvidia0"))
	requeued, p2 := slurmJobOn(t, c, h.d("nvidia1"), "--requeue")

	snap := snapshot(t, h.cfg)
	x1, x2 := findHolder(snap, p1), findHolder(snap, p2)
	if x1 == nil || x2 == nil {
		t.Fatalf("holders %d %d not in the snapshot: %+v", p1, p2, snap.Holders)
	}
	if len(x1.Managers) != 2 || x1.Managers[0].Kind != ManagerProcess || x1.Managers[0].Comm != "slurm_script" {
		t.Errorf("holder %d: chain %+v, want its script then its job", p1, x1.Managers)
	}
	m1 := slurmManagerOf(t, x1)
	if m1.JobID != plain || m1.JobUser != "root" || m1.Step != "batch" || m1.JobState != "RUNNING" || m1.Requeue || m1.Restarts != RestartsMaybe {
		t.Errorf("job %s: %+v", plain, m1)
	}
	if want := fmt.Sprintf("slurm job %s (user root, step batch) may restart its workers: scancel %s", plain, plain); m1.Why != want {
		t.Errorf("why %q, want %q", m1.Why, want)
	}
	m2 := slurmManagerOf(t, x2)
	if m2.JobID != requeued || !m2.Requeue || m2.Restarts != RestartsYes || m2.RestartCount != 0 || m2.JobState != "RUNNING" {
		t.Errorf("--requeue job %s: %+v", requeued, m2)
	}

	// Read again, as after a kill: alive; a job Slurm does not know is gone.
	gone := Manager{Kind: ManagerSlurm, JobID: "67000000"}
	st := managers(t, h.cfg, ManagersStatus, false, m1, m2, gone)
	if !st[0].Alive || st[0].State != "RUNNING" || st[0].Manager.Restarts != RestartsMaybe {
		t.Errorf("status of %s: %+v", plain, st[0])
	}
	if !st[1].Alive || !st[1].Manager.Requeue || st[1].Manager.Restarts != RestartsYes {
		t.Errorf("status of %s: %+v", requeued, st[1])
	}
	if st[2].Alive || st[2].Manager.Restarts != RestartsNo || !strings.Contains(st[2].State, "gone") {
		t.Errorf("status of a job Slurm does not know: %+v", st[2])
	}

	dry := managers(t, h.cfg, ManagersStop, true, m1)
	if dry[0].Outcome != StopWould || dry[0].Reason != "would run scancel "+plain || !dry[0].Alive {
		t.Errorf("dry-run stop: %+v", dry[0])
	}
	if s, _ := c.JobState(plain); s != "RUNNING" {
		t.Fatalf("job %s %s after a dry-run stop", plain, s)
	}

	stop := managers(t, h.cfg, ManagersStop, false, m1, m2, gone)
	for i, id := range []string{plain, requeued} {
		if r := stop[i]; r.Outcome != StopStopped || r.Alive || r.Manager.JobState != "CANCELLED" || !strings.HasPrefix(r.Reason, "scancel "+id+": the job is CANCELLED") {
			t.Errorf("stop %s: %+v", id, r)
		}
	}
	if stop[2].Outcome != StopAlready {
		t.Errorf("stop of a job Slurm does not know: %+v", stop[2])
	}
	for _, p := range []int{p1, p2} {
		if alive(p) {
			t.Errorf("holder %d alive after its job was cancelled", p)
		}
	}
	st = managers(t, h.cfg, ManagersStatus, false, m1, m2)
	for i, r := range st {
		if r.Alive || r.State != "CANCELLED" || r.Manager.Restarts != RestartsNo {
			t.Errorf("status %d after the stop: %+v", i, r)
		}
	}
	if after := snapshot(t, h.cfg); findHolder(after, p1) != nil || findHolder(after, p2) != nil {
		t.Errorf("holders left after the stop: %+v", after.Holders)
	}
	// Stopping a stopped job: nothing to do.
	if again := managers(t, h.cfg, ManagersStop, false, m1); again[0].Outcome != StopAlready {
		t.Errorf("second stop: %+v", again[0])
	}
}

// fakeScontrol puts an scontrol first on PATH that runs script (sh) and
// counts its runs in the returned file.
func fakeScontrol(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	body := fmt.Sprintf("#!/bin/sh\necho \"$@\" >> '%s'\n%s\n", runs, script)
	if err := os.WriteFile(filepath.Join(dir, "scontrol"), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return runs
}

func readSlurm(t *testing.T, ms ...*Manager) []managerState {
	t.Helper()
	s, err := newScanner(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s.managerReader(context.Background()).read(ms)
}

// What scontrol says, without a cluster: a controller that cannot be
// reached leaves the job alive (may restart) and is asked once per
// request; ended states are not alive; a record whose job name repeats a
// field is not trusted.
func TestSlurmReadStates(t *testing.T) {
	runs := fakeScontrol(t, `echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1`)
	a, b := &Manager{Kind: ManagerSlurm, JobID: "41"}, &Manager{Kind: ManagerSlurm, JobID: "42"}
	st := readSlurm(t, a, b)
	for i, m := range []*Manager{a, b} {
		if !st[i].alive || m.Restarts != RestartsMaybe || !strings.Contains(st[i].state, "Unable to contact slurm controller") || strings.Join(m.Stop, " ") != "scancel "+m.JobID {
			t.Errorf("unreachable controller: %+v %+v", st[i], m)
		}
	}
	if n, _ := os.ReadFile(runs); strings.Count(string(n), "\n") != 1 {
		t.Errorf("scontrol runs %q, want one for an unreachable controller", n)
	}

	rec := func(id, state, requeue, restarts string) string {
		return fmt.Sprintf("JobId=%s JobName=train run UserId=alice(1000) GroupId=alice(1000) JobState=%s Reason=None Requeue=%s Restarts=%s BatchFlag=1 Command=/home/alice/run.sh", id, state, requeue, restarts)
	}
	fakeScontrol(t, `case "$4" in
1) echo '`+rec("1", "RUNNING", "0", "0")+`' ;;
2) echo '`+rec("2", "PENDING", "1", "3")+`' ;;
3) echo '`+rec("3", "COMPLETED", "1", "0")+`' ;;
4) echo '`+rec("4", "NODE_FAIL", "1", "0")+`' ;;
5) echo '`+rec("5", "NODE_FAIL", "0", "0")+`' ;;
6) echo 'JobId=6 JobName=x JobState=COMPLETED UserId=bob(1001) JobState=RUNNING Requeue=0 Restarts=0' ;;
*) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;
esac`)
	want := []struct {
		id       string
		alive    bool
		restarts string
		state    string
	}{
		{"1", true, RestartsMaybe, "RUNNING"},
		{"2", true, RestartsYes, "PENDING"},
		{"3", false, RestartsNo, "COMPLETED"},
		{"4", true, RestartsYes, "NODE_FAIL"},
		{"5", false, RestartsNo, "NODE_FAIL"},
		{"6", true, RestartsMaybe, "unknown: scontrol show job 6: the record names JobState twice"},
		{"7", false, RestartsNo, "gone"},
		{"x; rm", true, RestartsMaybe, "unknown: \"x; rm\" is not a Slurm job id"},
	}
	var ms []*Manager
	for _, w := range want {
		ms = append(ms, &Manager{Kind: ManagerSlurm, JobID: w.id})
	}
	st = readSlurm(t, ms...)
	for i, w := range want {
		if st[i].alive != w.alive || ms[i].Restarts != w.restarts || !strings.HasPrefix(st[i].state, w.state) {
			t.Errorf("job %s: alive %v restarts %s state %q, want %v %s %q", w.id, st[i].alive, ms[i].Restarts, st[i].state, w.alive, w.restarts, w.state)
		}
	}
	if m := ms[1]; m.JobUser != "alice" || !m.Requeue || m.RestartCount != 3 || m.JobState != "PENDING" {
		t.Errorf("job 2: %+v", m)
	}
}
