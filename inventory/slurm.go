package inventory

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// SlurmPrefix starts an --inventory value naming a Slurm job: slurm:JOBID
// is one host per node of the job's NodeList, reached through the job
// itself (ansible_connection slurm, gpush_slurm_job JOBID).
const SlurmPrefix = "slurm:"

// slurmJobRE is a job id as scontrol takes it: a job, an array task
// (123_4) or a heterogeneous component (123+1).
var slurmJobRE = regexp.MustCompile(`^[0-9]+([_+][0-9]+)?$`)

// slurmTimeout bounds scontrol.
const slurmTimeout = 30 * time.Second

// slurmJob runs `scontrol show job -o JOB` (an argv, never a shell) and
// makes one host per node of its NodeList.
func slurmJob(spec string) (*Inventory, error) {
	job := strings.TrimSpace(strings.TrimPrefix(spec, SlurmPrefix))
	if !slurmJobRE.MatchString(job) {
		return nil, fmt.Errorf("inventory %s: %q is not a Slurm job id (slurm:JOBID, e.g. slurm:1234)", spec, job)
	}
	ctx, cancel := context.WithTimeout(context.Background(), slurmTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "scontrol", "show", "job", "-o", job)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("inventory %s: scontrol show job %s: %w: %s", spec, job, err, strings.TrimSpace(errb.String()))
	}
	nodeList, state := "", ""
	for _, f := range strings.Fields(out.String()) {
		if v, ok := strings.CutPrefix(f, "NodeList="); ok && nodeList == "" {
			nodeList = v
		}
		if v, ok := strings.CutPrefix(f, "JobState="); ok && state == "" {
			state = v
		}
	}
	if nodeList == "" || nodeList == "(null)" {
		return nil, fmt.Errorf("inventory %s: Slurm job %s has no nodes (JobState=%s)", spec, job, state)
	}
	nodes, err := ExpandNodeSet(nodeList)
	if err != nil {
		return nil, fmt.Errorf("inventory %s: Slurm job %s: NodeList %q: %w", spec, job, nodeList, err)
	}
	inv := newInventory(spec, KindHostList)
	for _, n := range nodes {
		vars := map[string]any{"ansible_connection": "slurm", "gpush_slurm_job": job}
		if err := inv.addHost("", n, vars, Pos{}, nil); err != nil {
			return nil, fmt.Errorf("inventory %s: %w", spec, err)
		}
	}
	if err := inv.finalize(); err != nil {
		return nil, err
	}
	return inv, nil
}
