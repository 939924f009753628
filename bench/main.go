// Command bench measures gpush against its peers doing the same job on the
// same lab hosts, each host behind a latency proxy of its own (lab/latency):
//
//   - gpush run free_gpus.lua, warm (the helper deployed by a gpu_status.lua
//     run first), on hosts with leftovers;
//   - the seeds' one-liner over one ssh per host, all in parallel, on fresh
//     hosts with the same leftovers: `systemctl stop UNITS; fuser -k
//     /dev/nvidia*; sleep 5; nvidia-smi --query-gpu=...`, with the lab
//     host's own systemctl, device folder and nvidia-smi;
//   - pdsh -R ssh running a read-only status (the host's nvidia-smi).
//
// For each it reports wall time, controller CPU (user+sys of the command and
// every descendant it reaped), controller RSS (the sum of the peak RSS,
// VmHWM, of every process of the command's tree seen by a /proc poll every
// 50 ms; for gpush that is its one process), SSH connections and sessions
// per host from the sshd log, host-side CPU per host (the whole machine's
// busy CPU less the command's and this process's, which runs the proxies),
// GPUs still held after the job and protected processes killed.
//
//	go run ./bench [-n 50] [-rtt 0,20ms] [-gpush bin/gpush]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab"
)

type sample struct {
	wall, cpu       time.Duration
	machine, self   time.Duration // whole machine busy CPU; this process's CPU (proxies, poller)
	treeRSS, maxRSS int64         // KiB: sum of peak RSS over the tree; rusage's largest one
	procs           int           // processes of the tree seen
	conns, sessions int
	code            int
	stdout, stderr  string
	held, collat    int  // GPUs with memory used after the job; protected processes killed
	checked         bool // held and collat were counted (not for the read-only status)
}

func main() {
	n := flag.Int("n", 50, "lab hosts (300 and 1000 work, given time and memory)")
	rtts := flag.String("rtt", "20ms", "round trips to measure, comma-separated (e.g. 0,20ms,100ms)")
	gpushBin := flag.String("gpush", "", "gpush binary (default: build one)")
	dir := flag.String("dir", "", "lab folder (default: a temporary one, removed)")
	sleep := flag.String("sleep", "5", "the one-liner's sleep between fuser -k and nvidia-smi (seconds)")
	peers = flag.Bool("peers", true, "also measure pdsh and the one-liner (-peers=false: gpush alone, e.g. for its memory at 1000 hosts)")
	userHome = flag.Bool("user-home", false, "sessions keep the login user's own HOME and shell startup files (default: an empty home of the lab's)")
	isolate = flag.Bool("isolate", true, "each lab host gets a process view of its own (lab.Options.Isolate), as a real host has; -isolate=false: every host's scans read every lab host's processes")
	flag.Parse()
	var list []time.Duration
	for _, s := range strings.Split(*rtts, ",") {
		if s == "0" {
			s = "0s"
		}
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "bench: -rtt %q: %q is not a duration >= 0 (e.g. 20ms)\n", *rtts, s)
			os.Exit(2)
		}
		list = append(list, d)
	}
	if _, err := strconv.ParseFloat(*sleep, 64); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -sleep %q: not a number of seconds\n", *sleep)
		os.Exit(2)
	}
	if err := bench(*n, list, *gpushBin, *dir, *sleep); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// userHome is -user-home; peers is -peers; isolate is -isolate.
var userHome, peers, isolate *bool

type row struct {
	rtt  time.Duration
	tool string
	s    sample
}

func bench(n int, rtts []time.Duration, gpushBin, dir, sleep string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	if _, err := exec.LookPath("pdsh"); err != nil {
		return fmt.Errorf("pdsh not installed (apt-get install pdsh): %w", err)
	}
	if _, err := exec.LookPath("fuser"); err != nil {
		return fmt.Errorf("fuser not installed (apt-get install psmisc): %w", err)
	}
	if err := checkPIDMax(n); err != nil {
		return err
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "gpush-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	// The lab's programs first: which holders they are decides whether
	// the machine has the memory for n hosts.
	bins, err := lab.Build(ctx, filepath.Join(dir, "bin"), lab.Binaries{})
	if err != nil {
		return err
	}
	fmt.Printf("lab: %s\n", bins.Note)
	if avail, ok, err := memAvailableKiB(); err != nil {
		return err
	} else if ok {
		if err := checkMemory(n, bins.Kind, avail); err != nil {
			return err
		}
	}
	if gpushBin == "" {
		gpushBin = filepath.Join(dir, "bin", "gpush")
		fmt.Println("building gpush with its helpers ...")
		if err := lab.BuildGpush(ctx, gpushBin); err != nil {
			return err
		}
	} else if abs, err := filepath.Abs(gpushBin); err == nil {
		gpushBin = abs
	}
	var rows []row
	for _, rtt := range rtts {
		// gpush and pdsh share one lab: pdsh only reads.
		r, err := runGpushAndPdsh(ctx, n, rtt, filepath.Join(dir, fmt.Sprintf("rtt%v-a", rtt)), bins, gpushBin)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
		if !*peers {
			continue
		}
		// The one-liner needs leftovers of its own.
		r, err = runOneLiner(ctx, n, rtt, filepath.Join(dir, fmt.Sprintf("rtt%v-b", rtt)), bins, sleep)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	view := "each host with a process view of its own"
	if !*isolate {
		view = "every host seeing every lab host's processes"
	}
	fmt.Printf("\n%d hosts (leftovers scenario, 4 fake GPUs each, %s), one run each, every host behind its own latency proxy\n", n, view)
	fmt.Printf("| RTT | tool | wall | ctl cpu | ctl RSS (tree) | conns/host | sessions/host | host cpu/host | GPUs held after | protected killed |\n")
	fmt.Printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		s := r.s
		host := (s.machine - s.cpu - s.self) / time.Duration(n)
		held, collat := "-", "-"
		if s.checked {
			held, collat = strconv.Itoa(s.held), strconv.Itoa(s.collat)
		}
		fmt.Printf("| %v | %s | %.2f s | %.2f s | %.1f MiB (%d procs) | %.2f | %.2f | %.3f s | %s | %s |\n",
			r.rtt, r.tool, s.wall.Seconds(), s.cpu.Seconds(), float64(s.treeRSS)/1024, s.procs,
			float64(s.conns)/float64(n), float64(s.sessions)/float64(n), host.Seconds(), held, collat)
	}
	for _, rtt := range rtts {
		var g, o *sample
		for i := range rows {
			if rows[i].rtt != rtt {
				continue
			}
			switch rows[i].tool {
			case toolGpush:
				g = &rows[i].s
			case toolOneLiner:
				o = &rows[i].s
			}
		}
		if g != nil && o != nil {
			fmt.Printf("RTT %v: gpush / one-liner: wall %.2fx, controller cpu %.2fx, controller RSS %.2fx\n",
				rtt, ratio(g.wall, o.wall), ratio(g.cpu, o.cpu), float64(g.treeRSS)/float64(max(o.treeRSS, 1)))
		}
	}
	return nil
}

const (
	toolGpush    = "gpush free_gpus.lua (warm)"
	toolOneLiner = "seeds' one-liner, ssh per host"
	toolPdsh     = "pdsh -R ssh, read-only status"
)

func startLab(ctx context.Context, n int, rtt time.Duration, dir string, bins lab.Binaries) (*lab.Lab, error) {
	fmt.Printf("starting %d lab hosts at RTT %v in %s ...\n", n, rtt, dir)
	o := lab.Options{Hosts: n, Dir: dir, Scenario: lab.ScenarioLeftovers, Bin: bins,
		HostRTT: func(int) time.Duration { return rtt }, Isolate: *isolate}
	// pdsh runs one command on every host: each learns its lab name from
	// the environment its ssh sends (SetEnv in the bench's ssh_config).
	o.SSHD.ExtraConfig = []string{"AcceptEnv GPUSH_LAB_HOST"}
	if !*userHome {
		// Every session's shell reads the login user's startup files: on
		// the development machine root's .bashrc runs `pyenv init` (Debian's
		// bash sources .bashrc for sshd commands), 0.2-0.5 s per session,
		// which at 50 hosts swamps two cores. An empty home of the lab's
		// own makes a session cost what sshd and a bare shell cost, for
		// every tool alike.
		home := dir + "-home"
		if err := os.MkdirAll(home, 0o700); err != nil {
			return nil, fmt.Errorf("lab home: %w", err)
		}
		o.SSHD.ExtraConfig = append(o.SSHD.ExtraConfig, "SetEnv HOME="+home)
	}
	l, err := lab.Start(ctx, o)
	if err != nil {
		if l != nil {
			l.Stop()
		}
		return nil, err
	}
	return l, nil
}

func runGpushAndPdsh(ctx context.Context, n int, rtt time.Duration, dir string, bins lab.Binaries, gpushBin string) ([]row, error) {
	l, err := startLab(ctx, n, rtt, dir, bins)
	if err != nil {
		return nil, err
	}
	defer l.Stop()
	env := append(os.Environ(), "SSH_AUTH_SOCK=", "NO_COLOR=1")
	// One sshd on two cores takes 1000 handshakes at once: more than
	// gpush's default 10 s to connect (ssh and pdsh have no such bound).
	slow := filepath.Join(l.Dir, "connect-timeout.yaml")
	if err := os.WriteFile(slow, []byte("all:\n  vars:\n    ansible_ssh_timeout: 300\n"), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", slow, err)
	}
	common := []string{"-i", l.Inventory, "-i", slow, "--known-hosts", l.KnownHosts, "--forks", strconv.Itoa(n)}
	// Warm-up, read-only: deploys the helper on every host. On a loaded
	// machine some hosts time out: again, up to three times.
	for try := 1; ; try++ {
		s := measure(ctx, l, env, gpushBin, append([]string{"run", "gpu_status.lua"}, common...)...)
		if s.code == 0 {
			break
		}
		if try == 3 {
			return nil, fmt.Errorf("warm-up gpush gpu_status.lua exited %d, 3 times:\n%s\n%s", s.code, tail(s.stdout), s.stderr)
		}
		fmt.Printf("warm-up gpush gpu_status.lua exited %d (%s); again\n", s.code, recap(s.stdout))
	}
	if !*peers {
		return []row{{rtt, toolGpush, measureFree(ctx, l, env, gpushBin, common)}}, nil
	}
	cfg, err := pdshConfig(l)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, n)
	for _, h := range l.Hosts {
		names = append(names, h.Name)
	}
	pdshEnv := append(env, "PDSH_SSH_ARGS_APPEND=-F "+cfg)
	status := filepath.Join(l.Dir, "hosts") + `/"$GPUSH_LAB_HOST"/smi/nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader`
	pdshArgs := []string{"-R", "ssh", "-f", strconv.Itoa(n), "-w", strings.Join(names, ","), status}
	if s := measure(ctx, l, pdshEnv, "pdsh", pdshArgs...); s.code != 0 {
		return nil, fmt.Errorf("warm-up pdsh exited %d:\n%s\n%s", s.code, tail(s.stdout), s.stderr)
	}
	p := measure(ctx, l, pdshEnv, "pdsh", pdshArgs...)
	if p.code != 0 {
		return nil, fmt.Errorf("pdsh exited %d:\n%s", p.code, p.stderr)
	}
	if got := strings.Count(p.stdout, "143771"); got != 4*n {
		return nil, fmt.Errorf("pdsh status: %d GPU lines, want %d:\n%s", got, 4*n, tail(p.stdout))
	}
	fmt.Printf("pdsh: wall %v cpu %v\n", p.wall.Round(time.Millisecond), p.cpu.Round(time.Millisecond))
	return []row{{rtt, toolGpush, measureFree(ctx, l, env, gpushBin, common)}, {rtt, toolPdsh, p}}, nil
}

// measureFree measures the warm gpush free_gpus.lua and what it left.
func measureFree(ctx context.Context, l *lab.Lab, env []string, gpushBin string, common []string) sample {
	// The controller's CPU profile stays in the lab folder (kept with -dir).
	env = append(env[:len(env):len(env)], "GPUSH_CPUPROFILE="+filepath.Join(l.Dir, "gpush-free.cpu.pprof"))
	g := measure(ctx, l, env, gpushBin, append([]string{"run", "free_gpus.lua"}, common...)...)
	if g.code != 0 {
		fmt.Printf("gpush free_gpus.lua exited %d (reported in the table):\n%s\n%s\n", g.code, tail(g.stdout), g.stderr)
	}
	g.held, g.collat = after(l)
	g.checked = true
	fmt.Printf("gpush: wall %v cpu %v, %d GPUs held after; %s\n", g.wall.Round(time.Millisecond), g.cpu.Round(time.Millisecond), g.held, recap(g.stdout))
	return g
}

// pdshConfig writes the lab's ssh_config with a SetEnv naming each host.
func pdshConfig(l *lab.Lab) (string, error) {
	b, err := os.ReadFile(l.SSHConfig)
	if err != nil {
		return "", fmt.Errorf("read the lab's ssh_config: %w", err)
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		out.WriteString(line + "\n")
		if name, ok := strings.CutPrefix(line, "Host "); ok {
			fmt.Fprintf(&out, "  SetEnv GPUSH_LAB_HOST=%s\n", name)
		}
	}
	p := filepath.Join(l.Dir, "ssh_config.pdsh")
	if err := os.WriteFile(p, []byte(out.String()), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return p, nil
}

func runOneLiner(ctx context.Context, n int, rtt time.Duration, dir string, bins lab.Binaries, sleep string) ([]row, error) {
	l, err := startLab(ctx, n, rtt, dir, bins)
	if err != nil {
		return nil, err
	}
	defer l.Stop()
	// One ssh per host, all at once, as `for h in ...; do ssh $h '...' & done; wait`.
	var sh strings.Builder
	sh.WriteString("set -u\n")
	for _, h := range l.Hosts {
		remote := fmt.Sprintf("%s stop %s; fuser -k %s/nvidia*; sleep %s; %s --query-gpu=index,memory.used,memory.total --format=csv,noheader",
			h.Systemctl, strings.Join(h.Services, " "), h.DevDir, sleep, h.SMI)
		fmt.Fprintf(&sh, "ssh -F %s %s %s &\n", shq(l.SSHConfig), h.Name, shq(remote))
	}
	sh.WriteString("wait\n")
	script := filepath.Join(l.Dir, "oneliner.sh")
	if err := os.WriteFile(script, []byte(sh.String()), 0o755); err != nil {
		return nil, fmt.Errorf("write %s: %w", script, err)
	}
	o := measure(ctx, l, append(os.Environ(), "SSH_AUTH_SOCK="), "/bin/bash", script)
	if got := strings.Count(o.stdout, "143771"); got != 4*n {
		return nil, fmt.Errorf("one-liner: %d GPU lines, want %d:\n%s\n%s", got, 4*n, tail(o.stdout), o.stderr)
	}
	o.held, o.collat = after(l)
	o.checked = true
	fmt.Printf("one-liner: wall %v cpu %v, %d GPUs held after\n", o.wall.Round(time.Millisecond), o.cpu.Round(time.Millisecond), o.held)
	return []row{{rtt, toolOneLiner, o}}, nil
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// after counts, once the fake driver's release delay has passed, the GPUs
// still showing memory used and the protected processes (persistenced,
// the NVML monitor, the unrelated process) no longer alive.
func after(l *lab.Lab) (held, collateral int) {
	time.Sleep(300 * time.Millisecond) // the lab's release delay is 70 ms
	for _, h := range l.Hosts {
		out, err := exec.Command(h.SMI, "--query-gpu=memory.used", "--format=csv,noheader,nounits").Output()
		if err != nil {
			held += 4 // unknown counts as held
			continue
		}
		for _, f := range strings.Fields(string(out)) {
			if f != "0" {
				held++
			}
		}
		for _, role := range []string{lab.RolePersistenced, lab.RoleMonitor, lab.RoleUnrelated} {
			for _, p := range l.Find(h.Name, role) {
				if !lab.Alive(p) {
					collateral++
				}
			}
		}
	}
	return held, collateral
}

// measure runs one command, returning wall time, its CPU time (user+sys of
// it and every descendant it waited for), its tree's peak RSS and the sshd
// connections/sessions logged while it ran.
func measure(ctx context.Context, l *lab.Lab, env []string, bin string, args ...string) sample {
	before := logCounts(l.SSHD.LogPath)
	busy0, self0 := machineBusy(), selfCPU()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	var s sample
	if err := cmd.Start(); err != nil {
		s.code, s.stderr = -1, err.Error()
		return s
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.treeRSS, s.procs = pollTree(cmd.Process.Pid, stop)
	}()
	err := cmd.Wait()
	s.wall = time.Since(start)
	close(stop)
	wg.Wait()
	s.machine, s.self = machineBusy()-busy0, selfCPU()-self0
	s.stdout, s.stderr = out.String(), errb.String()
	if cmd.ProcessState != nil {
		s.code = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			s.maxRSS = ru.Maxrss
		}
	} else if err != nil {
		s.code = -1
		s.stderr += err.Error()
	}
	// sshd logs a session's end after the client saw it: poll until the
	// count stops moving rather than sleeping a fixed time.
	last := logCounts(l.SSHD.LogPath)
	for i := 0; i < 40; i++ {
		time.Sleep(50 * time.Millisecond)
		next := logCounts(l.SSHD.LogPath)
		if next == last {
			break
		}
		last = next
	}
	s.conns = last.conns - before.conns
	s.sessions = last.sessions - before.sessions
	return s
}

// pollTree samples root's process tree every 50 ms until stop and returns
// the sum over every process seen of its last VmHWM (peak RSS, KiB).
func pollTree(root int, stop <-chan struct{}) (int64, int) {
	peak := map[int]int64{}
	for {
		for _, pid := range tree(root) {
			if hwm := vmHWM(pid); hwm > peak[pid] {
				peak[pid] = hwm
			}
		}
		select {
		case <-stop:
			var sum int64
			for _, v := range peak {
				sum += v
			}
			return sum, len(peak)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tree lists root and its descendants through /proc/PID/task/TID/children.
func tree(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(t)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type counts struct{ conns, sessions int }

// machineBusy is the machine's non-idle CPU time so far (/proc/stat).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ is 100 on Linux
}

// logCounts counts accepted logins and started sessions in sshd's log
// (LogLevel VERBOSE prints both).
func logCounts(path string) counts {
	b, _ := os.ReadFile(path)
	var c counts
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(line, "Accepted publickey for"):
			c.conns++
		case strings.Contains(line, "Starting session:"):
			c.sessions++
		}
	}
	return c
}

// pidsPerHost is how many pids (threads count) a lab host takes at most
// during a run: about 15 for its Go holders and init, 14 for a session
// (sshd, shells, the helper's threads), a few for a peer's ssh. Measured at
// 1000 hosts: 15,300 idle, near 29,000 during gpu_status.
const pidsPerHost = 35

// checkPIDMax refuses a lab larger than kernel.pid_max allows: past it
// fork fails, and sshd drops connections before its banner, which would
// read as gpush's failures.
func checkPIDMax(n int) error {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return nil // not Linux's /proc: nothing to check
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("read kernel.pid_max: %q: %w", b, err)
	}
	if need := n*pidsPerHost + 5000; limit < need {
		return fmt.Errorf("kernel.pid_max is %d, below the ~%d pids (threads included) %d lab hosts take at once; raise it first: sysctl -w kernel.pid_max=%d", limit, need, n, max(need, 4194304))
	}
	return nil
}

// What a bench run takes, in KiB of PSS plus page tables and kernel stacks
// (16 KiB a thread), measured on isolated leftovers hosts (one lab at a
// time: the one-liner's lab starts after gpush's is stopped).
const (
	// An idle lab host with the C gpu-holders and lab-init: 1014 KiB at 20
	// hosts (9 processes, 9 threads); with the Go ones 6901 KiB (33 threads).
	labHostCKiB  = 1100
	labHostGoKiB = 7200
	// A host during gpush's run: its sshd session (~4.5 MiB at 1000 hosts),
	// the helper (3.7 MiB), sftp-server, nsenter and the shell (0.7 MiB),
	// their page tables and stacks. The one-liner's ssh client and session
	// take less (~7.5 MiB), pdsh's the same.
	runHostKiB = 10 * 1024
	// gpush's controller (460 MiB at its peak, cold at 1000 hosts), this
	// program and the sshd.
	benchFixedKiB = 700 * 1024
)

// memoryNeedKiB estimates the memory a run on n hosts takes at its peak
// with lab programs of kind (lab.Binaries.Kind).
func memoryNeedKiB(n int, kind string) int64 {
	host := int64(labHostGoKiB)
	if kind == lab.KindC {
		host = labHostCKiB
	}
	return int64(n)*(host+runHostKiB) + benchFixedKiB
}

// checkMemory refuses a run that MemAvailable (availKiB) cannot hold,
// keeping a tenth of it for the rest of the machine: past it the OOM killer
// picks among the lab's processes, sshd's and gpush's, which would read as
// gpush's failures (or take the machine down).
func checkMemory(n int, kind string, availKiB int64) error {
	need := memoryNeedKiB(n, kind)
	usable := availKiB * 9 / 10
	if need <= usable {
		return nil
	}
	perHost := (memoryNeedKiB(1000, kind) - benchFixedKiB) / 1000
	fits := max(0, (usable-benchFixedKiB)/perHost)
	hint := ""
	if kind != lab.KindC {
		hint = fmt.Sprintf("; or install a C compiler (apt-get install gcc libc6-dev): the lab's C holders and init take ~%d MiB less a host", (labHostGoKiB-labHostCKiB)/1024)
	}
	return fmt.Errorf("%d lab hosts need ~%.1f GiB at the peak (%.1f MiB a host: the lab's %s holders and init %.1f MiB, the host's session and helper during the run %.1f MiB; plus %d MiB for gpush and the bench), "+
		"over 90%% of MemAvailable (%.1f GiB): run -n %d or fewer, or free memory first%s",
		n, float64(need)/(1<<20), float64(perHost)/1024, kindName(kind), float64(perHost-runHostKiB)/1024, float64(runHostKiB)/1024, benchFixedKiB/1024, float64(availKiB)/(1<<20), fits, hint)
}

func kindName(kind string) string {
	if kind == lab.KindC {
		return "C"
	}
	return "Go"
}

// memAvailableKiB reads MemAvailable from /proc/meminfo; ok is false
// where there is none (not Linux).
func memAvailableKiB() (kib int64, ok bool, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false, nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, found := strings.CutPrefix(line, "MemAvailable:"); found {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, false, fmt.Errorf("read /proc/meminfo: MemAvailable line %q, want N kB", line)
			}
			v, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("read /proc/meminfo: MemAvailable %q: %w", f[0], err)
			}
			return v, true, nil
		}
	}
	return 0, false, errors.New("read /proc/meminfo: no MemAvailable line (kernel older than 3.14?)")
}

// recap is gpush's RECAP line.
func recap(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "RECAP") {
			return line
		}
	}
	return "no RECAP line"
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
