// Package slurmlab runs a real multi-node Slurm cluster on this machine for
// tests: a private munged (its own key and socket), one slurmctld and N
// slurmd processes (Debian's slurmd runs several nodes on one host, each
// on its own port), every file under the test's temp dir and every port
// picked free, so clusters of parallel test runs never meet. Jobs run for
// real: sbatch, srun, scontrol and scancel talk to the cluster through
// SLURM_CONF, which Start sets for the test (and what it runs).
//
// Each node is a host of its own: its slurmd runs in a process view of its
// own (lab/labns: a PID and mount namespace whose pid 1 is the lab's
// lab-init, with that namespace's /proc), so the node's job steps, and
// what they run (a helper that srun --overlap -w NODE starts), see that
// node's processes only, numbered as the node numbers them. Options.Binds
// gives every node its own files at one path (its fake GPUs, say), as the
// nodes of a real cluster have their own /dev. Command runs a program on a
// node outside Slurm (a worker that is no job's); MachinePID turns a pid a
// node printed into the machine's.
//
// Everything is stopped by pid at cleanup: munged and slurmctld are
// children of the test; a node goes with its view (its init is KILLed
// through a pidfd, and the kernel kills its slurmd, slurmstepd and job
// processes with it); what is left on the machine (an srun client) is
// found by the SLURM_CONF in its environment, in the machine's /proc, so
// by machine pid, and KILLed. Nothing is stopped by name: the machine may
// run other clusters.
package slurmlab

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/labbuild"
	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/labns"
)

// RequireEnv, when set, makes a machine without Slurm a failure, not a skip
// (CI sets it).
const RequireEnv = "GPUSH_REQUIRE_SLURM"

// Daemons and clients a cluster needs (Debian: slurmctld, slurmd,
// slurm-client, munge).
var (
	daemons = []string{"slurmctld", "slurmd", "munged"}
	clients = []string{"sbatch", "srun", "scontrol", "scancel", "sinfo", "squeue", "nsenter", "mount"}
)

// Missing says why a cluster cannot start here ("" when it can).
func Missing() string {
	var gone []string
	for _, n := range append(slices.Clone(daemons), clients...) {
		if _, err := lookup(n); err != nil {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		return "no Slurm on this machine (" + strings.Join(gone, ", ") + " not found; apt-get install slurmd slurmctld slurm-client munge)"
	}
	if os.Geteuid() != 0 {
		return "slurmd runs jobs as their users: it needs root"
	}
	return ""
}

// Need skips t when a cluster cannot start here, or fails it when
// GPUSH_REQUIRE_SLURM is set.
func Need(t testing.TB) {
	t.Helper()
	why := Missing()
	if why == "" {
		return
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s is set, but %s", RequireEnv, why)
	}
	t.Skipf("skipping: %s (set %s=1 to make this a failure)", why, RequireEnv)
}

// lookup finds a Slurm or munge program on PATH or in the sbin folders
// (root's PATH may lack them).
func lookup(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// Options shape a cluster.
type Options struct {
	// Nodes is the number of slurmd nodes, n1..nN (default 3).
	Nodes int
	// CPUs each node offers (default 2).
	CPUs int
	// KillWait is Slurm's KillWait: how long after TERM a cancelled job's
	// processes are KILLed (default 2s; Slurm's own is 30s).
	KillWait time.Duration
	// Init is the lab-init the nodes' views run (lab.Binaries.Init);
	// empty: Start builds the Go one into the cluster's folder.
	Init string
	// Binds are mounted in every node's view before its slurmd starts.
	Binds []Bind
}

// Bind shows Source at Target in a node's view only: "%n" in Source is the
// node's name (Slurm's own spelling), so {Source: "/x/%n/dev", Target:
// "/x/dev"} gives every node its own /x/dev. Both must exist; Target's own
// content is what the machine sees.
type Bind struct {
	Source, Target string
}

// Cluster is a running cluster.
type Cluster struct {
	// Dir holds everything: slurm.conf, munge's key and socket, state,
	// spool, pid and log files.
	Dir string
	// Conf is slurm.conf; SLURM_CONF names it.
	Conf string
	// Nodes are the node names, n1..nN.
	Nodes []string
	// MungeSocket is the private munged's socket (AuthInfo=socket=...).
	MungeSocket string

	t       testing.TB
	daemons []*daemon
	views   map[string]*labns.View // by node
	stopped bool
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	// view is a node's: its slurmd runs there, under cmd's nsenter.
	view *labns.View
}

// Start starts a cluster for t, stopped at its cleanup, and sets
// SLURM_CONF for the rest of the test (so t may not be parallel). It
// returns once sinfo shows every node idle.
func Start(t testing.TB, opt Options) *Cluster {
	t.Helper()
	Need(t)
	if opt.Nodes <= 0 {
		opt.Nodes = 3
	}
	if opt.CPUs <= 0 {
		opt.CPUs = 2
	}
	if opt.KillWait <= 0 {
		opt.KillWait = 2 * time.Second
	}
	c := &Cluster{Dir: t.TempDir(), t: t, views: map[string]*labns.View{}}
	c.Conf = filepath.Join(c.Dir, "slurm.conf")
	for i := 1; i <= opt.Nodes; i++ {
		c.Nodes = append(c.Nodes, "n"+strconv.Itoa(i))
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := c.start(opt); err != nil {
		t.Fatalf("slurmlab: %v\n%s", err, c.Logs())
	}
	t.Setenv("SLURM_CONF", c.Conf)
	return c
}

func (c *Cluster) start(opt Options) error {
	// munged wants every folder above its socket searchable by all.
	tmp := filepath.Clean(os.TempDir())
	for d := c.Dir; strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
	}
	for _, d := range []string{"munge", "munge/key", "state", "run", "log"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(c.Dir, "munge"), 0o711); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := os.MkdirAll(filepath.Join(c.Dir, "spool", n), 0o700); err != nil {
			return err
		}
	}
	c.MungeSocket = filepath.Join(c.Dir, "munge", "sock")
	if len(c.MungeSocket) > 100 {
		return fmt.Errorf("munge socket path %s is too long for a unix socket", c.MungeSocket)
	}
	if err := c.startMunge(); err != nil {
		return err
	}
	ports, err := freePorts(2 + len(c.Nodes))
	if err != nil {
		return err
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	host, _, _ = strings.Cut(host, ".")
	if err := os.WriteFile(c.Conf, []byte(c.config(opt, host, ports)), 0o644); err != nil {
		return err
	}
	slurmctld, err := lookup("slurmctld")
	if err != nil {
		return err
	}
	if err := c.spawn("slurmctld", exec.Command(slurmctld, "-D", "-f", c.Conf), nil); err != nil {
		return err
	}
	if err := c.until(20*time.Second, "slurmctld to answer", func() (bool, string) {
		out, err := c.Run(context.Background(), "scontrol", "ping")
		return err == nil && strings.Contains(out, "UP"), out
	}); err != nil {
		return err
	}
	slurmd, err := lookup("slurmd")
	if err != nil {
		return err
	}
	initBin := opt.Init
	if initBin == "" {
		initBin = filepath.Join(c.Dir, "lab-init")
		if err := labbuild.Go(context.Background(), initBin, "github.com/gpush/gpush/lab/cmd/lab-init"); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.startNode(n, initBin, slurmd, opt.Binds); err != nil {
			return err
		}
	}
	return c.until(30*time.Second, "every node idle", func() (bool, string) {
		out, err := c.Run(context.Background(), "sinfo", "-h", "-N", "-o", "%N %t")
		if err != nil {
			return false, out
		}
		idle := 0
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && slices.Contains(c.Nodes, f[0]) && f[1] == "idle" {
				idle++
			}
		}
		return idle == len(c.Nodes), out
	})
}

// startMunge starts a munged of the cluster's own: its key, socket, pid,
// log and seed files in Dir/munge.
func (c *Cluster) startMunge() error {
	key := filepath.Join(c.Dir, "munge", "key", "munge.key")
	b := make([]byte, 1024)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	if err := os.WriteFile(key, b, 0o400); err != nil {
		return err
	}
	munged, err := lookup("munged")
	if err != nil {
		return err
	}
	m := filepath.Join(c.Dir, "munge")
	if err := c.spawn("munged", exec.Command(munged, "--foreground", "--socket="+c.MungeSocket, "--key-file="+key,
		"--pid-file="+filepath.Join(m, "munged.pid"), "--log-file="+filepath.Join(c.Dir, "log", "munged.log"),
		"--seed-file="+filepath.Join(m, "munged.seed")), nil); err != nil {
		return err
	}
	return c.until(10*time.Second, "munged's socket", func() (bool, string) {
		_, err := os.Stat(c.MungeSocket)
		return err == nil, ""
	})
}

// config is slurm.conf: ports[0] slurmctld's, ports[1] the default slurmd
// port (unused: each node has its own), then one per node.
func (c *Cluster) config(opt Options, host string, ports []int) string {
	d := c.Dir
	var b strings.Builder
	fmt.Fprintf(&b, `ClusterName=lab
SlurmctldHost=%s(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%s
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool/%%n
SlurmctldPidFile=%s/run/slurmctld.pid
SlurmdPidFile=%s/run/slurmd-%%n.pid
SlurmctldLogFile=%s/log/slurmctld.log
SlurmdLogFile=%s/log/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
ReturnToService=2
SlurmUser=root
SlurmdUser=root
MpiDefault=none
JobRequeue=0
KillWait=%d
MinJobAge=600
FirstJobId=%d
`, host, ports[0], ports[1], c.MungeSocket, d, d, d, d, d, d, int(opt.KillWait.Round(time.Second)/time.Second), 1000+int(ports[0]%9000)*100)
	for i, n := range c.Nodes {
		fmt.Fprintf(&b, "NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=2000 State=UNKNOWN\n", n, host, ports[2+i], opt.CPUs)
	}
	fmt.Fprintf(&b, "PartitionName=gpu Nodes=%s Default=YES MaxTime=INFINITE State=UP\n", strings.Join(c.Nodes, ","))
	return b.String()
}

// freePorts returns n distinct loopback ports free right now.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startNode starts node n's view, mounts its binds there and starts its
// slurmd in it.
func (c *Cluster) startNode(n, initBin, slurmd string, binds []Bind) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := labns.Start(ctx, initBin, labns.Options{Env: c.Env(), KillWithParent: true})
	if err != nil {
		return fmt.Errorf("node %s: %w", n, err)
	}
	c.views[n] = v
	for _, b := range binds {
		if err := v.Bind(ctx, strings.ReplaceAll(b.Source, "%n", n), b.Target); err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
	}
	cmd := v.Command(context.Background(), c.Dir, slurmd, "-D", "-f", c.Conf, "-N", n)
	return c.spawn("slurmd-"+n, cmd, v)
}

// spawn starts a daemon in the foreground, a child of the test in its own
// process group, KILLed if the test process dies first; view is the node's
// whose slurmd cmd starts, nil for the others.
func (c *Cluster) spawn(name string, cmd *exec.Cmd, view *labns.View) error {
	cmd.Env = c.Env()
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	f, err := os.Create(filepath.Join(c.Dir, "log", name+".out"))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{}), view: view}
	go func() {
		cmd.Wait()
		close(d.done)
	}()
	c.daemons = append(c.daemons, d)
	return nil
}

// until polls ok every 100ms for at most d.
func (c *Cluster) until(d time.Duration, what string, ok func() (bool, string)) error {
	deadline := time.Now().Add(d)
	for {
		done, last := ok()
		if done {
			return nil
		}
		for _, dm := range c.daemons {
			select {
			case <-dm.done:
				return fmt.Errorf("waiting for %s: %s exited (%v)", what, dm.name, dm.cmd.ProcessState)
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s after %s; last: %s", what, d, strings.TrimSpace(last))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Env is the test's environment with SLURM_CONF naming the cluster.
func (c *Cluster) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_CONF=") {
			env = append(env, kv)
		}
	}
	return append(env, "SLURM_CONF="+c.Conf)
}

// Command runs name with args on node, in its view, outside Slurm (no job
// owns it), with the cluster's environment. Its process is nsenter's
// (labns.View.Command); the program ends with the node at Stop.
func (c *Cluster) Command(ctx context.Context, node, name string, args ...string) (*exec.Cmd, error) {
	v := c.views[node]
	if v == nil {
		return nil, fmt.Errorf("slurmlab: no node %q (have %s)", node, strings.Join(c.Nodes, ", "))
	}
	cmd := v.Command(ctx, c.Dir, name, args...)
	cmd.Env = c.Env()
	return cmd, nil
}

// MachinePID is the machine pid of the process that is pid on node (what
// $$ or a holder's ready line says there).
func (c *Cluster) MachinePID(node string, pid int) (int, error) {
	v := c.views[node]
	if v == nil {
		return 0, fmt.Errorf("slurmlab: no node %q (have %s)", node, strings.Join(c.Nodes, ", "))
	}
	mp, err := v.MachinePID(pid)
	if err != nil {
		return 0, fmt.Errorf("slurmlab: node %s: %w", node, err)
	}
	return mp, nil
}

// Run runs a Slurm client against the cluster (10s at most) and returns
// its stdout; an error carries its stderr.
func (c *Cluster) Run(ctx context.Context, name string, args ...string) (string, error) {
	path, err := lookup(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = c.Env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Sbatch submits a batch job (sbatch --parsable ARGS) and returns its id.
func (c *Cluster) Sbatch(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Run(context.Background(), "sbatch", append([]string{"--parsable"}, args...)...)
	if err != nil {
		t.Fatalf("slurmlab: %v", err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if id == "" {
		t.Fatalf("slurmlab: sbatch printed no job id: %q", out)
	}
	return id
}

// SbatchHolder submits a batch job running script (the body of a shell
// script, written into dir) with sbatch args, and waits up to 20 s for
// the first ready line of a gpu-holder it starts: the job id and that
// holder's machine pid (its node's process view numbers it otherwise).
func (c *Cluster) SbatchHolder(t testing.TB, dir, script string, args ...string) (id string, pid int) {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("job-%d.sh", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out := path + ".out"
	id = c.Sbatch(t, append(args, "-o", out, path)...)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		if pids := labgpu.ReadyPIDs(string(b)); len(pids) > 0 {
			node, err := c.BatchHost(id)
			if err != nil {
				t.Fatal(err)
			}
			if pid, err = c.MachinePID(node, pids[0]); err != nil {
				t.Fatal(err)
			}
			return id, pid
		}
	}
	st, _ := c.JobState(id)
	b, _ := os.ReadFile(out)
	t.Fatalf("slurmlab: job %s (%s) started no holder: %q\n%s", id, st, b, c.Logs())
	return "", 0
}

// JobState is the job's JobState as scontrol shows it, "" when scontrol
// no longer knows the job.
func (c *Cluster) JobState(id string) (string, error) { return c.jobField(id, "JobState") }

// BatchHost is the node that runs the job's batch script.
func (c *Cluster) BatchHost(id string) (string, error) { return c.jobField(id, "BatchHost") }

// jobField is a field of `scontrol show job -o ID`, "" when scontrol no
// longer knows the job.
func (c *Cluster) jobField(id, key string) (string, error) {
	out, err := c.Run(context.Background(), "scontrol", "show", "job", "-o", id)
	if err != nil {
		if strings.Contains(err.Error(), "Invalid job id") {
			return "", nil
		}
		return "", err
	}
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("scontrol show job %s: no %s in %q", id, key, out)
}

// WaitState waits until the job is in one of states (at most d).
func (c *Cluster) WaitState(t testing.TB, id string, d time.Duration, states ...string) string {
	t.Helper()
	var st string
	err := c.until(d, "job "+id+" in "+strings.Join(states, "/"), func() (bool, string) {
		var err error
		st, err = c.JobState(id)
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(states, st), st
	})
	if err != nil {
		t.Fatalf("slurmlab: %v\n%s", err, c.Logs())
	}
	return st
}

// Logs is the tail of every log file, for a failure's message.
func (c *Cluster) Logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(c.Dir, "log", "*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(f), strings.Join(lines, "\n"))
	}
	return b.String()
}

// Stop cancels what runs on the cluster, stops its daemons by pid (TERM,
// then KILL after 5s) and kills by pid whatever the cluster left running.
// Start registers it as t's cleanup; it is safe to call twice.
func (c *Cluster) Stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	if len(c.daemons) > 0 {
		c.cancelAll()
	}
	// Nodes first, then the controller, then munge.
	for i := len(c.daemons) - 1; i >= 0; i-- {
		if err := c.daemons[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	// A view whose slurmd never started.
	for _, v := range c.views {
		v.Stop()
	}
	if n, err := killLeftovers("SLURM_CONF=" + c.Conf); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		c.t.Logf("slurmlab: killed %d processes the cluster left", n)
	}
	return errors.Join(errs...)
}

// cancelAll cancels every job of the cluster and waits (10s at most) until
// none runs.
func (c *Cluster) cancelAll() {
	ids := func() []string {
		out, err := c.Run(context.Background(), "squeue", "-h", "-o", "%A")
		if err != nil {
			return nil
		}
		return strings.Fields(out)
	}
	jobs := ids()
	if len(jobs) == 0 {
		return
	}
	c.Run(context.Background(), "scancel", jobs...)
	c.until(10*time.Second, "no job left", func() (bool, string) { return len(ids()) == 0, "" })
}

// stop ends a daemon: TERM, then KILL after 5s; a node's by KILLing its
// view's init, which takes its slurmd and everything the node runs along
// (nsenter, the daemon's process, then exits with the slurmd).
func (d *daemon) stop() error {
	if d.view != nil {
		d.view.Stop()
		select {
		case <-d.done:
			return nil
		case <-time.After(5 * time.Second):
			return fmt.Errorf("slurmlab: %s: nsenter (pid %d) still there after its view ended", d.name, d.cmd.Process.Pid)
		}
	}
	select {
	case <-d.done:
		return nil
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	d.cmd.Process.Kill()
	select {
	case <-d.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("slurmlab: %s (pid %d) still there after KILL", d.name, d.cmd.Process.Pid)
	}
}

// killLeftovers KILLs every process (not this one) whose environment holds
// marker exactly: what the cluster's clients left on the machine (an srun
// whose step ended with its node) and anything a node's view did not take
// along. It reads the machine's /proc, so its pids are the machine's,
// whichever PID namespace a process lives in. It returns how many it
// signalled.
func killLeftovers(marker string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(b), "\x00"), marker) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n, nil
}
