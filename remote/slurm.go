package remote

import "fmt"

// Slurm transport settings (host vars).
const (
	// VarSlurmJob is the job or allocation whose step runs the helper.
	VarSlurmJob = "gpush_slurm_job"
	// VarSlurmSrun is the srun program (default "srun" on PATH).
	VarSlurmSrun = "gpush_slurm_srun"
)

// newSlurmTransport is the "slurm" connection's: every argv runs as a step
// of the job gpush_slurm_job on the node ansible_host (else the inventory
// name), through srun on this machine. --overlap shares the job's
// resources with its running steps instead of waiting for them; -N1 -n1
// one task on that one node; --input=all with -u (unbuffered) and no
// --pty make the task's stdin and stdout a plain byte pipe; --quiet keeps
// srun's own progress lines off stderr; --kill-on-bad-exit and --wait=0
// leave nothing behind when the task ends. The helper goes in through
// stdin (sh -c 'cat > "$1"' on the node), as srun has no copy of its own
// to a chosen path apart from sbcast, which needs the same step set-up.
func newSlurmTransport(t Host) (Transport, error) {
	job, err := varSlurmString(t, VarSlurmJob)
	if err != nil {
		return nil, err
	}
	if job == "" {
		return nil, fmt.Errorf("%s: ansible_connection=slurm needs %s, the job or allocation id whose node %s runs the helper", t.Name, VarSlurmJob, t.Address)
	}
	if err := optionSafe(t, VarSlurmJob, job); err != nil {
		return nil, err
	}
	srun, err := varString(t, VarSlurmSrun)
	if err != nil {
		return nil, err
	}
	if srun == "" {
		srun = "srun"
	}
	node := t.Address
	if err := optionSafe(t, "node name", node); err != nil {
		return nil, err
	}
	return &commandTransport{wrap: func(argv []string) []string {
		out := []string{srun, "--jobid=" + job, "--overlap", "-w", node, "-N1", "-n1",
			"--input=all", "-u", "--quiet", "--kill-on-bad-exit=1", "--wait=0", "--"}
		return append(out, argv...)
	}}, nil
}

// varSlurmString is a var that may be written as a number (a job id in
// YAML is an int) or a string.
func varSlurmString(t Host, key string) (string, error) {
	switch v := t.Vars[key].(type) {
	case int:
		return fmt.Sprint(v), nil
	case int64:
		return fmt.Sprint(v), nil
	case uint64:
		return fmt.Sprint(v), nil
	}
	return varString(t, key)
}
