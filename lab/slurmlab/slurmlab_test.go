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
// end, and Stop leaves no daemon or job process behind. A job's pid is its
// node's numbering; the machine sees the process under another.
func TestSlurmCluster(t *testing.T) {
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
		mp, err := c.MachinePID(c.Nodes[i], pids[id])
		if err != nil {
			t.Fatal(err)
		}
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(mp) + "/environ")
		if !strings.Contains(string(env), "SLURM_JOB_ID="+id+"\x00") {
			t.Errorf("job %s's process %d (%d on %s) has no SLURM_JOB_ID=%s", id, mp, pids[id], c.Nodes[i], id)
		}
		pids[id] = mp
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

// Two nodes, two process views: a step of a job on each node (what the
// slurm transport's helper is) lists the /proc it sees. Each sees its own
// slurmd and its own worker, none of its neighbour's, and its own file at
// the path Options.Binds gives every node; the machine sees both workers.
func TestSlurmNodesSeeOwnProcesses(t *testing.T) {
	Need(t)
	base := t.TempDir()
	view := filepath.Join(base, "view")
	for _, d := range []string{view, filepath.Join(base, "n1"), filepath.Join(base, "n2")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		if err := os.WriteFile(filepath.Join(base, n, "name"), []byte("I am "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := Start(t, Options{Nodes: 2, Binds: []Bind{{Source: filepath.Join(base, "%n"), Target: view}}})
	ctx := context.Background()
	// A worker outside Slurm on each node, told apart by its argument.
	workers := map[string]string{"n1": "301", "n2": "302"}
	for n, arg := range workers {
		cmd, err := c.Command(ctx, n, "sleep", arg)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
	}
	job := c.Sbatch(t, "-N2", "-o", filepath.Join(c.Dir, "job.out"), "--wrap", "sleep 300")
	c.WaitState(t, job, 20*time.Second, "RUNNING")
	list := `cat "$1"; echo; for p in /proc/[0-9]*; do printf '%s ' "${p#/proc/}"; tr '\0' ' ' < "$p/cmdline"; echo; done`
	for n, arg := range workers {
		var out string
		// A worker started just now may not be in the listing yet: nsenter
		// forks it.
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var err error
			out, err = c.Run(ctx, "srun", "--jobid="+job, "--overlap", "-w", n, "-N1", "-n1", "--quiet",
				"sh", "-c", list, "sh", filepath.Join(view, "name"))
			if err != nil {
				t.Fatalf("srun on %s: %v", n, err)
			}
			if strings.Contains(out, "sleep "+arg+" ") || time.Now().After(end) {
				break
			}
		}
		other := "n2"
		if n == "n2" {
			other = "n1"
		}
		lines := strings.Split(out, "\n")
		if lines[0] != "I am "+n {
			t.Errorf("%s reads %q at %s, want its own file", n, lines[0], view)
		}
		var own, ownSlurmd, foreign []string
		for _, l := range lines[1:] {
			switch {
			case strings.Contains(l, " sleep "+arg+" "):
				own = append(own, l)
			case strings.Contains(l, "slurmd -D") && strings.HasSuffix(l, "-N "+n+" "):
				ownSlurmd = append(ownSlurmd, l)
			case strings.Contains(l, " sleep "+workers[other]+" "), strings.Contains(l, "-N "+other+" "):
				foreign = append(foreign, l)
			}
		}
		if len(own) != 1 || len(ownSlurmd) != 1 || len(foreign) > 0 {
			t.Errorf("%s sees its worker %q, its slurmd %q, its neighbour's %q; want one each of its own, none of %s's:\n%s",
				n, own, ownSlurmd, foreign, other, out)
			continue
		}
		// The pid the node gives its worker is another on the machine,
		// where the worker is there too.
		var pid int
		fmt.Sscanf(own[0], "%d", &pid)
		mp, err := c.MachinePID(n, pid)
		if err != nil {
			t.Fatal(err)
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(mp) + "/cmdline")
		if string(cmdline) != "sleep\x00"+arg+"\x00" || mp == pid {
			t.Errorf("%s's worker %d is machine pid %d with %q", n, pid, mp, cmdline)
		}
	}
}
