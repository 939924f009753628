package helper

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// slurmKind: a Slurm job. Its batch script may run the worker again, and a
// job submitted with --requeue is started again after it ends.
type slurmKind struct{}

var slurmCgroupJob = regexp.MustCompile(`/job_([0-9]+)(?:/step_([a-z0-9_.]+))?`)

// slurmStepdTitle is a slurmstepd's process title: "slurmstepd: [42.batch]",
// "slurmstepd: [42.0]", "slurmstepd: [42.extern]".
var slurmStepdTitle = regexp.MustCompile(`^slurmstepd: \[([0-9]+(?:[_+][0-9]+)?)\.([A-Za-z0-9_]+)\]`)

// slurmJobID is what scontrol and scancel are given: a job id, an array
// task (42_3) or a heterogeneous component (42+1).
var slurmJobID = regexp.MustCompile(`^[0-9]+(?:[_+][0-9]+)?$`)

// slurmJobOf is the job id a slurm cgroup path names, or "".
func slurmJobOf(cgroup string) string {
	if !strings.Contains(cgroup, "slurm") {
		return ""
	}
	if mm := slurmCgroupJob.FindStringSubmatch(cgroup); mm != nil {
		return mm[1]
	}
	return ""
}

func (slurmKind) find(r *managerReader, p procInfo) (Manager, bool) {
	m := Manager{Kind: ManagerSlurm, Restarts: RestartsMaybe}
	if mm := slurmCgroupJob.FindStringSubmatch(p.cg.Path); mm != nil && strings.Contains(p.cg.Path, "slurm") {
		m.JobID, m.Step = mm[1], mm[2]
	}
	env := p.environ()
	if m.JobID == "" {
		m.JobID = env["SLURM_JOB_ID"]
	}
	if m.Step == "" {
		m.Step = env["SLURM_STEP_ID"]
	}
	if m.JobID == "" || m.Step == "" {
		// A batch script has no SLURM_STEP_ID, and proctrack/linuxproc no
		// cgroup: the slurmstepd above the process names its job and step.
		if job, step := r.slurmStepdAbove(p.st.PPID); job != "" && (m.JobID == "" || m.JobID == job) {
			m.JobID = job
			if m.Step == "" {
				m.Step = step
			}
		}
	}
	if m.JobID == "" {
		return Manager{}, false
	}
	m.JobUser = env["SLURM_JOB_USER"]
	m.Stop = []string{"scancel", m.JobID}
	return m, true
}

// slurmStepdAbove is the job and step of the nearest slurmstepd among pid
// and its ancestors, or "" when none is.
func (r *managerReader) slurmStepdAbove(pid int) (job, step string) {
	seen := map[int]bool{}
	for p := pid; p > 1 && !seen[p] && len(seen) < 64; {
		seen[p] = true
		st, err := r.s.proc.stat(p)
		if err != nil {
			return "", ""
		}
		if st.Comm == "slurmstepd" {
			if mm := slurmStepdTitle.FindStringSubmatch(strings.Join(r.s.proc.cmdline(p), " ")); mm != nil {
				return mm[1], mm[2]
			}
			return "", ""
		}
		p = st.PPID
	}
	return "", ""
}

// slurmJob is what `scontrol show job -o ID` said of one job.
type slurmJob struct {
	// gone: scontrol says the job id is invalid (it ended and was purged
	// after MinJobAge, or never was).
	gone bool
	// fields are the record's Key=Value pairs; err why there are none.
	fields map[string]string
	err    error
	// unreachable: scontrol could not be run or could not reach Slurm.
	unreachable bool
}

// slurmEnded are the job states after which Slurm runs nothing of the job
// again. NODE_FAIL and PREEMPTED are among them only for a job that is not
// requeued (a requeued one goes back to PENDING).
var slurmEnded = map[string]bool{"COMPLETED": true, "CANCELLED": true, "FAILED": true, "TIMEOUT": true,
	"BOOT_FAIL": true, "DEADLINE": true, "OUT_OF_MEMORY": true, "REVOKED": true}

func (slurmKind) read(r *managerReader, ms []*Manager) []managerState {
	out := make([]managerState, len(ms))
	for i, m := range ms {
		m.Stop = []string{"scancel", m.JobID}
		if !slurmJobID.MatchString(m.JobID) {
			m.Restarts = RestartsMaybe
			out[i] = managerState{alive: true, state: fmt.Sprintf("unknown: %q is not a Slurm job id", m.JobID)}
			continue
		}
		j := r.slurmJob(m.JobID)
		if j.gone {
			m.Restarts, m.JobState = RestartsNo, ""
			out[i] = managerState{alive: false, state: "gone (scontrol: invalid job id)"}
			continue
		}
		if j.err != nil {
			m.Restarts = RestartsMaybe
			out[i] = managerState{alive: true, state: "unknown: " + j.err.Error()}
			continue
		}
		f := j.fields
		m.JobState = f["JobState"]
		if u, _, ok := strings.Cut(f["UserId"], "("); ok && u != "" {
			m.JobUser = u
		}
		m.Requeue = f["Requeue"] == "1"
		if n, err := strconv.Atoi(f["Restarts"]); err == nil {
			m.RestartCount = n
		}
		ended := slurmEnded[m.JobState] || !m.Requeue && (m.JobState == "NODE_FAIL" || m.JobState == "PREEMPTED")
		switch {
		case ended:
			m.Restarts = RestartsNo
		case m.Requeue:
			m.Restarts = RestartsYes
		default:
			// Its batch script may start the worker again.
			m.Restarts = RestartsMaybe
		}
		state := m.JobState
		if reason := f["Reason"]; reason != "" && reason != "None" {
			state += " (" + reason + ")"
		}
		out[i] = managerState{alive: !ended, state: state}
	}
	return out
}

// slurmJob reads one job with scontrol, once per request. scontrol shows
// one job id at a time (a list reads as an invalid id), so each job is its
// own run; after a run that could not reach Slurm, the others of the
// request are not tried (each would wait out its own timeout).
func (r *managerReader) slurmJob(id string) slurmJob {
	key := "slurm:" + id
	if j, ok := r.cache[key].(slurmJob); ok {
		return j
	}
	if err, ok := r.cache["slurm:unreachable"].(error); ok {
		return slurmJob{err: err, unreachable: true}
	}
	j := readSlurmJob(r, id)
	if j.unreachable {
		r.cache["slurm:unreachable"] = j.err
	}
	r.cache[key] = j
	return j
}

func readSlurmJob(r *managerReader, id string) slurmJob {
	scontrol, err := slurmTool("scontrol")
	if err != nil {
		return slurmJob{err: err, unreachable: true}
	}
	out, errb, err := runBounded(r.ctx, managerReadTimeout, []string{scontrol, "show", "job", "-o", id})
	if err != nil {
		if strings.Contains(string(errb), "Invalid job id") {
			return slurmJob{gone: true}
		}
		return slurmJob{err: fmt.Errorf("scontrol show job %s: %w", id, withOutput(err, errb)), unreachable: true}
	}
	var rec map[string]string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f, err := parseSlurmRecord(line)
		if err != nil {
			return slurmJob{err: fmt.Errorf("scontrol show job %s: %w", id, err)}
		}
		// An array or heterogeneous job lists every task or component:
		// the one asked for, else the first.
		if rec == nil || f["JobId"] == id {
			rec = f
		}
		if f["JobId"] == id {
			break
		}
	}
	if rec == nil || rec["JobState"] == "" {
		return slurmJob{err: fmt.Errorf("scontrol show job %s: no JobState in %.200q", id, out)}
	}
	return slurmJob{fields: rec}
}

// slurmKey is where a Key= starts in an scontrol one-line record.
var slurmKey = regexp.MustCompile(`(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=`)

// slurmFieldsRead are the fields a read relies on: a record that names
// one of them twice with different values (a job name or comment holding
// " JobState=COMPLETED") cannot be trusted.
var slurmFieldsRead = []string{"JobId", "JobState", "UserId", "Requeue", "Restarts", "Reason"}

// parseSlurmRecord reads `scontrol show job -o`'s one line of Key=Value
// pairs; a value runs to the next key (a job name may hold spaces).
func parseSlurmRecord(line string) (map[string]string, error) {
	line = strings.TrimSpace(line)
	locs := slurmKey.FindAllStringSubmatchIndex(line, -1)
	f := map[string]string{}
	for i, loc := range locs {
		end := len(line)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		k, v := line[loc[2]:loc[3]], strings.TrimSpace(line[loc[1]:end])
		if old, ok := f[k]; ok && old != v {
			for _, w := range slurmFieldsRead {
				if k == w {
					return nil, fmt.Errorf("the record names %s twice (%q, %q): not trusted", k, old, v)
				}
			}
			continue
		}
		f[k] = v
	}
	return f, nil
}

// slurmTool finds a Slurm client: on PATH, then /usr/bin.
func slurmTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := "/usr/bin/" + name
	if _, err := exec.LookPath(p); err == nil {
		return p, nil
	}
	return "", errors.New(name + " not found on PATH or in /usr/bin")
}

// slurmStopSlack is how long past the grace a stop waits for the job to
// end: Slurm signals the job's steps, runs its epilog and only then says
// the job is no longer COMPLETING.
const slurmStopSlack = 5 * time.Second

// slurmPoll is how often a stop reads the job's state again.
const slurmPoll = 200 * time.Millisecond

// stop cancels the job (scancel: TERM to its steps, KILL after Slurm's
// KillWait) and waits, bounded by grace and a few seconds, until Slurm
// says it has ended.
func (k slurmKind) stop(r *managerReader, m Manager, grace time.Duration, dryRun bool) (string, string) {
	if dryRun {
		return StopWould, "would run scancel " + m.JobID
	}
	if !slurmJobID.MatchString(m.JobID) {
		return StopFailed, fmt.Sprintf("%q is not a Slurm job id", m.JobID)
	}
	scancel, err := slurmTool("scancel")
	if err != nil {
		return StopFailed, err.Error()
	}
	start := time.Now()
	_, errb, err := runBounded(r.ctx, managerReadTimeout, []string{scancel, m.JobID})
	if err != nil {
		if strings.Contains(string(errb), "Invalid job id") {
			return StopAlready, "scancel " + m.JobID + ": the job is gone"
		}
		// "already completing or completed": the poll tells which.
		if !strings.Contains(string(errb), "already completing or completed") {
			return StopFailed, "scancel " + m.JobID + ": " + withOutput(err, errb).Error()
		}
	}
	deadline := start.Add(grace + slurmStopSlack)
	for {
		c := m
		st := k.read(r.fresh(), []*Manager{&c})[0]
		if !st.alive {
			return StopStopped, fmt.Sprintf("scancel %s: the job is %s after %s", m.JobID, st.state, time.Since(start).Round(time.Millisecond))
		}
		if time.Now().After(deadline) {
			return StopFailed, fmt.Sprintf("scancel %s ran, but the job is still %s after %s", m.JobID, st.state, time.Since(start).Round(time.Millisecond))
		}
		select {
		case <-r.ctx.Done():
			return StopFailed, fmt.Sprintf("scancel %s ran; the job was still %s when the request ended: %v", m.JobID, st.state, r.ctx.Err())
		case <-time.After(slurmPoll):
		}
	}
}
