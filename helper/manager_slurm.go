package helper

import (
	"regexp"
	"strings"
	"time"
)

// slurmKind: a Slurm job. Its batch script may run the worker again, and a
// job submitted with --requeue is started again after it ends.
type slurmKind struct{}

var slurmCgroupJob = regexp.MustCompile(`/job_([0-9]+)(?:/step_([a-z0-9_.]+))?`)

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
	if m.JobID == "" {
		return Manager{}, false
	}
	m.JobUser = env["SLURM_JOB_USER"]
	if m.Step == "" {
		m.Step = env["SLURM_STEP_ID"]
	}
	return m, true
}

func (slurmKind) read(r *managerReader, ms []*Manager) []managerState {
	out := make([]managerState, len(ms))
	for i, m := range ms {
		m.Stop = []string{"scancel", m.JobID}
		out[i] = managerState{alive: true, state: "unknown: the job's state was not read"}
	}
	return out
}

func (slurmKind) stop(r *managerReader, m Manager, grace time.Duration, dryRun bool) (string, string) {
	if dryRun {
		return StopWould, "would run scancel " + m.JobID
	}
	return StopFailed, "run scancel " + m.JobID
}
