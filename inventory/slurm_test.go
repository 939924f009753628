package inventory

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// slurm:JOB runs scontrol (here a stand-in on PATH printing a real
// 22.05 line) and gives one slurm host per node of the NodeList.
func TestSlurmJobInventory(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	bin := t.TempDir()
	script := `#!/bin/sh
[ "$4" = 42 ] || { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
echo "JobId=42 JobName=wrap UserId=root(0) JobState=RUNNING Partition=gpu NodeList=n[1-2],gpu07 BatchHost=n1 NumNodes=3"
`
	if err := os.WriteFile(filepath.Join(bin, "scontrol"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	inv, err := Resolve("slurm:42", Options{SSHConfigFiles: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range inv.hostOrder {
		h := inv.resolved[n]
		names = append(names, h.Name)
		if h.Connection != "slurm" || h.Vars["gpush_slurm_job"] != "42" {
			t.Errorf("%s: connection %q job %v", h.Name, h.Connection, h.Vars["gpush_slurm_job"])
		}
	}
	if strings.Join(names, " ") != "n1 n2 gpu07" {
		t.Errorf("hosts %q", names)
	}
	_, err = Resolve("slurm:43", Options{SSHConfigFiles: []string{}})
	if err == nil || !strings.Contains(err.Error(), "43") || !strings.Contains(err.Error(), "Invalid job id") {
		t.Errorf("unknown job: %v", err)
	}
	_, err = Resolve("slurm:1;rm", Options{SSHConfigFiles: []string{}})
	if err == nil || !strings.Contains(err.Error(), "not a Slurm job id") {
		t.Errorf("bad job id: %v", err)
	}
}
