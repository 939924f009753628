// Command bench measures gpush against pdsh on lab hosts: controller CPU
// (user+sys, children included) and wall time of a warm `gpush run
// free_gpus.lua` (helper already deployed) vs `pdsh -R ssh -w <hosts> true`
// through the same sshd and keys, in the same run. It also counts the SSH
// connections and sessions (round trips) per host from the sshd log.
//
//	go run ./bench [-n 50] [-runs 3] [-gpush bin/gpush]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab"
)

type sample struct {
	wall, cpu          time.Duration
	machine            time.Duration // whole machine busy CPU: the lab hosts' side included
	conns, sessions    int
	code               int
	stdoutTail, stderr string
}

func main() {
	n := flag.Int("n", 50, "lab hosts")
	runs := flag.Int("runs", 3, "measured runs of each tool (the median is reported)")
	gpushBin := flag.String("gpush", "", "gpush binary (default: build one)")
	dir := flag.String("dir", "", "lab folder (default: a temporary one, removed)")
	flag.Parse()
	if err := bench(*n, *runs, *gpushBin, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func bench(n, runs int, gpushBin, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := exec.LookPath("pdsh"); err != nil {
		return fmt.Errorf("pdsh not installed (apt-get install pdsh): %w", err)
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "gpush-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
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
	fmt.Printf("starting %d lab hosts ...\n", n)
	l, err := lab.Start(ctx, lab.Options{Hosts: n, Dir: dir, Scenario: lab.ScenarioIdle})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		return err
	}
	defer l.Stop()
	forks := fmt.Sprint(n)
	gpushArgs := []string{"run", "free_gpus.lua", "-i", l.Inventory, "--known-hosts", l.KnownHosts, "--forks", forks}
	env := append(os.Environ(), "SSH_AUTH_SOCK=", "NO_COLOR=1")
	// Warm-up: deploys the helper on every host (they share the lab's remote
	// dir, but each host checks it) and fills caches, for gpush and pdsh alike.
	if s := measure(ctx, l, env, gpushBin, gpushArgs...); s.code != 0 {
		return fmt.Errorf("warm-up gpush run exited %d:\n%s\n%s", s.code, s.stdoutTail, s.stderr)
	}
	names := make([]string, 0, n)
	for _, h := range l.Hosts {
		names = append(names, h.Name)
	}
	pdshEnv := append(env, "PDSH_SSH_ARGS_APPEND=-F "+l.SSHConfig)
	pdshArgs := []string{"-R", "ssh", "-f", forks, "-w", strings.Join(names, ","), "true"}
	if s := measure(ctx, l, pdshEnv, "pdsh", pdshArgs...); s.code != 0 {
		return fmt.Errorf("warm-up pdsh exited %d:\n%s\n%s", s.code, s.stdoutTail, s.stderr)
	}
	var gs, ps []sample
	for i := 0; i < runs; i++ {
		g := measure(ctx, l, env, gpushBin, gpushArgs...)
		if g.code != 0 {
			return fmt.Errorf("gpush run %d exited %d:\n%s\n%s", i+1, g.code, g.stdoutTail, g.stderr)
		}
		p := measure(ctx, l, pdshEnv, "pdsh", pdshArgs...)
		if p.code != 0 {
			return fmt.Errorf("pdsh run %d exited %d:\n%s", i+1, p.code, p.stderr)
		}
		gs, ps = append(gs, g), append(ps, p)
		fmt.Printf("run %d: gpush wall %v cpu %v | pdsh wall %v cpu %v\n", i+1,
			g.wall.Round(time.Millisecond), g.cpu.Round(time.Millisecond), p.wall.Round(time.Millisecond), p.cpu.Round(time.Millisecond))
	}
	g, p := median(gs), median(ps)
	fmt.Printf("\n%d hosts, median of %d runs (controller = this machine; hosts share it too)\n", n, runs)
	fmt.Printf("%-32s %10s %10s %12s %12s %14s\n", "", "wall", "ctl cpu", "machine cpu", "ssh conns/h", "sessions/host")
	row := func(name string, s sample) {
		fmt.Printf("%-32s %10v %10v %12v %12.2f %14.2f\n", name, s.wall.Round(time.Millisecond), s.cpu.Round(time.Millisecond),
			s.machine.Round(10*time.Millisecond), float64(s.conns)/float64(n), float64(s.sessions)/float64(n))
	}
	row("gpush run free_gpus.lua (warm)", g)
	row("pdsh -R ssh true", p)
	fmt.Printf("ratio gpush/pdsh: wall %.2fx, controller cpu %.2fx\n", ratio(g.wall, p.wall), ratio(g.cpu, p.cpu))
	fmt.Println("(ctl cpu: the command and its children; machine cpu: everything, the lab hosts' sshd,")
	fmt.Println(" helper and fake nvidia-smi included, which on a real fleet runs on the hosts)")
	return nil
}

// measure runs one command, returning wall time, its CPU time (user+sys of
// it and every descendant it waited for: pdsh's ssh processes included) and
// the sshd connections/sessions logged while it ran.
func measure(ctx context.Context, l *lab.Lab, env []string, bin string, args ...string) sample {
	before := logCounts(l.SSHD.LogPath)
	busy0 := machineBusy()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	s := sample{wall: time.Since(start), machine: machineBusy() - busy0, stderr: errb.String()}
	o := out.String()
	if len(o) > 4000 {
		o = o[len(o)-4000:]
	}
	s.stdoutTail = o
	if cmd.ProcessState != nil {
		s.code = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	} else if err != nil {
		s.code = -1
		s.stderr += err.Error()
	}
	// sshd logs a session's end after the client saw it: poll until the
	// count stops moving rather than sleeping a fixed time.
	after := logCounts(l.SSHD.LogPath)
	for i := 0; i < 20; i++ {
		time.Sleep(25 * time.Millisecond)
		next := logCounts(l.SSHD.LogPath)
		if next == after {
			break
		}
		after = next
	}
	s.conns = after.conns - before.conns
	s.sessions = after.sessions - before.sessions
	return s
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
		var n int64
		fmt.Sscan(v, &n)
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

func median(s []sample) sample {
	c := append([]sample(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i].wall < c[j].wall })
	return c[len(c)/2]
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
