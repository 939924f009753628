package slurmlab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/procstat"
)

// A cluster of three nodes runs a job on each; a cancelled job's processes
// end, and Stop leaves no daemon or job process behind.
func TestCluster(t *testing.T) {
	c := Start(t, Options{})
	if os.Getenv("SLURM_CONF") != c.Conf {
		t.Fatalf("SLURM_CONF %q, want %s", os.Getenv("SLURM_CONF"), c.Conf)
	}
	conf, err := os.ReadFile(c.Conf)
	if err != nil || !strings.Contains(string(conf), "AuthInfo=socket="+c.MungeSocket+"\n") {
		t.Fatalf("slurm.conf does not use the private munge socket %s: %v\n%s", c.MungeSocket, err, conf)
	}
	script := filepath.Join(c.Dir, "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho pid $$ node $SLURMD_NODENAME\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range c.Nodes {
		ids = append(ids, c.Sbatch(t, "-w", c.Nodes[i], "-o", filepath.Join(c.Dir, "job-%j.out"), script))
	}
	pids := map[string]int{}
	for i, id := range ids {
		c.WaitState(t, id, 20*time.Second, "RUNNING")
		out := filepath.Join(c.Dir, "job-"+id+".out")
		deadline := time.Now().Add(10 * time.Second)
		for pids[id] == 0 && time.Now().Before(deadline) {
			b, _ := os.ReadFile(out)
			var pid int
			var node string
			if n, _ := fmt.Sscanf(string(b), "pid %d node %s", &pid, &node); n == 2 && node == c.Nodes[i] {
				pids[id] = pid
			}
			time.Sleep(50 * time.Millisecond)
		}
		if pids[id] == 0 {
			t.Fatalf("job %s printed no pid on %s\n%s", id, c.Nodes[i], c.Logs())
		}
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pids[id]) + "/environ")
		if !strings.Contains(string(env), "SLURM_JOB_ID="+id+"\x00") {
			t.Errorf("job %s's process %d has no SLURM_JOB_ID=%s", id, pids[id], id)
		}
	}
	if _, err := c.Run(context.Background(), "scancel", ids[0]); err != nil {
		t.Fatal(err)
	}
	if st := c.WaitState(t, ids[0], 15*time.Second, "CANCELLED"); st != "CANCELLED" {
		t.Fatalf("state %s", st)
	}
	waitGone(t, pids[ids[0]])
	var daemons []int
	for _, d := range c.daemons {
		daemons = append(daemons, d.cmd.Process.Pid)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(daemons, pids[ids[1]], pids[ids[2]]) {
		waitGone(t, p)
	}
}

// waitGone waits (5s at most) until pid has ended (a zombie has).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, err := procstat.Read(pid)
		if err != nil || st.State == 'Z' || syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("pid %d still running", pid)
}
