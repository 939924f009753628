// Command gpush-lab runs simulated GPU hosts behind a real sshd on loopback.
//
//	gpush-lab up -n 4 --dir /tmp/gpush-lab [--scenario leftovers]   # prints the inventory, stays up
//	gpush-lab up -n 4 --dir /tmp/gpush-lab --scenario restarters     # a slow, backoff, kube (kubelet stand-in) and loop restarter
//	gpush-lab up -n 2 --dir /tmp/gpu --prefix gpu --gpus 8 --other-user nobody --podman
//	gpush-lab up --help                                              # every flag, and what each scenario holds
//	gpush-lab down --dir /tmp/gpush-lab                              # also ends what a killed lab left
//	gpush-lab demo [-n 4]                                            # up, gpush run free_gpus.lua, down
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(1)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "demo":
		err = demo(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		fmt.Fprint(os.Stderr, "\n"+scenarioHelp())
		return
	default:
		fmt.Fprintf(os.Stderr, "gpush-lab: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(1)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpush-lab %s: %v\n", os.Args[1], err)
		var x *exec.ExitError
		if errors.As(err, &x) {
			os.Exit(x.ExitCode())
		}
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  gpush-lab up   -n N --dir DIR [--scenario %s] [--gpus G] [--prefix P] [--other-user U] [--podman]
                 [--restart-scale F] [--unreachable K] [--isolate] [--build c|go]
  gpush-lab down --dir DIR
  gpush-lab demo [-n N] [--dir DIR] [--scenario S] [--gpus G] [--restart-scale F] [--keep]
  gpush-lab up --help: every flag and what each scenario holds
`, strings.Join(lab.Scenarios, "|"))
}

// scenarioHelp tells every scenario from lab.ScenarioTable, wrapped.
func scenarioHelp() string {
	var b strings.Builder
	b.WriteString("Scenarios (--scenario; every host also runs nvidia-persistenced, protected, and an unrelated log-shipper):\n")
	for _, sc := range lab.ScenarioTable {
		held := "no GPU held, any --gpus"
		switch sc.MinGPUs {
		case 0:
		case 1:
			held = "GPU 0 held, --gpus 1+"
		default:
			held = fmt.Sprintf("GPUs 0-%d held, --gpus %d+", sc.MinGPUs-1, sc.MinGPUs)
		}
		fmt.Fprintf(&b, "  %s (%s, the others free; --podman's worker on GPU %d)\n", sc.Name, held, sc.MinGPUs)
		b.WriteString(wrap(sc.About, "      ", 100))
	}
	b.WriteString(`
Options that add to any scenario:
  --other-user U  the orphaned worker (GPU 1) and the SIGTERM ignorer (GPU 2) of leftovers and
                  respawn, and the podman worker, run as user U (a name or uid: nobody, 65534)
  --podman        one more python3 worker (6 GiB) per host in a real podman container
                  HOST-trainer, --restart=always, on the first GPU the scenario leaves free
                  (above: a GPU more than the scenario's minimum)
  --prefix P      hosts P01, P02, ... in inventory group P, so that two labs merge:
                  gpush run ... -i A/inventory.yaml -i B/inventory.yaml --known-hosts <(cat A/known_hosts B/known_hosts)
`)
	return b.String()
}

// wrap breaks s into lines of at most width characters, each after indent.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(s) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
	return b.String()
}

type labFlags struct {
	n, unreachable, gpus int
	dir, scenario        string
	prefix, otherUser    string
	build                string
	isolate, podman      bool
	restartScale         float64
}

// options are the lab.Options the flags ask for.
func (f *labFlags) options() lab.Options {
	return lab.Options{Hosts: f.n, Dir: f.dir, Scenario: f.scenario, GPUs: f.gpus, Prefix: f.prefix, OtherUser: f.otherUser, Podman: f.podman,
		Unreachable: f.unreachable, Isolate: f.isolate, RestartScale: f.restartScale, Bin: lab.Binaries{Kind: f.build}}
}

func parseLab(name string, args []string, defDir string) (*flag.FlagSet, *labFlags, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f := &labFlags{}
	fs.IntVar(&f.n, "n", 4, "number of lab hosts")
	fs.StringVar(&f.dir, "dir", defDir, "lab folder (sshd, keys, fake devices, inventory)")
	fs.StringVar(&f.scenario, "scenario", lab.ScenarioLeftovers, strings.Join(lab.Scenarios, ", ")+" (see below)")
	fs.IntVar(&f.gpus, "gpus", 4, "GPUs per host (a scenario needs its minimum, below)")
	fs.StringVar(&f.prefix, "prefix", lab.DefaultPrefix, "host name prefix: PREFIX01, PREFIX02, ... (letters, digits, '-')")
	fs.StringVar(&f.otherUser, "other-user", "", "run some holders as this user (name or uid, e.g. nobody), see below")
	fs.BoolVar(&f.podman, "podman", false, "one worker per host in a real podman container (--restart=always), see below")
	fs.Float64Var(&f.restartScale, "restart-scale", 1, "multiplies every restarter delay of the restarters scenario")
	fs.IntVar(&f.unreachable, "unreachable", 0, "extra inventory hosts on a closed port")
	fs.StringVar(&f.build, "build", "", "how to build gpu-holder and lab-init: c, go, or empty for c when a C compiler is there (c costs a few pages per process, go ~0.6-1.2 MiB)")
	fs.BoolVar(&f.isolate, "isolate", false, "give each host a process view of its own (a PID namespace with its own /proc), as a real host has")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gpush-lab %s [flags]\n", name)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\n"+scenarioHelp())
	}
	return fs, f, nil
}

// state is what `up` leaves in DIR/lab.json for `down` and for scripts.
type state struct {
	PID        int        `json:"pid"`
	StartTime  uint64     `json:"start_time"`
	Inventory  string     `json:"inventory"`
	KnownHosts string     `json:"known_hosts"`
	SSHConfig  string     `json:"ssh_config"`
	Procs      []lab.Proc `json:"procs"`
}

// up starts `gpush-lab serve` in its own session, detached, and returns once
// it wrote DIR/lab.json, printing the inventory path.
func up(args []string) error {
	fs, f, _ := parseLab("up", args, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.dir == "" {
		return errors.New("--dir is required")
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	statePath := filepath.Join(dir, "lab.json")
	// A lab running or starting there, or what a dead one left running.
	if err := lab.Busy(dir); err != nil {
		return err
	}
	// The folder is free: its lab.json, if any, is a dead lab's.
	os.Remove(statePath)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "lab.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, append([]string{"serve", "--dir", dir}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start lab server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("lab server exited (%v):\n%s", err, b)
		case <-deadline:
			return fmt.Errorf("lab server not ready after 5m; see %s", logf.Name())
		case <-tick.C:
		}
		// Only the state this start's server wrote: a lab.json of another
		// `up` racing for the folder is not ours.
		if st, err := readState(statePath); err == nil && st.PID == cmd.Process.Pid {
			fmt.Println(st.Inventory)
			fmt.Fprintf(os.Stderr, "lab up: %d hosts; try:\n  gpush run free_gpus.lua -i %s --known-hosts %s\n  gpush-lab down --dir %s\n",
				f.n, st.Inventory, st.KnownHosts, dir)
			return nil
		}
	}
}

func readState(path string) (*state, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &st, nil
}

// serve runs the lab in the foreground until SIGTERM/SIGINT.
func serve(args []string) error {
	fs, f, _ := parseLab("serve", args, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	o := f.options()
	o.Log = os.Stderr
	l, err := lab.Start(ctx, o)
	if err != nil {
		if l != nil {
			l.Stop()
		}
		return err
	}
	defer l.Stop()
	st := state{PID: os.Getpid(), Inventory: l.Inventory, KnownHosts: l.KnownHosts, SSHConfig: l.SSHConfig, Procs: l.Procs()}
	st.StartTime, _ = lab.StartTime(st.PID)
	b, _ := json.MarshalIndent(st, "", "  ")
	tmp := filepath.Join(l.Dir, "lab.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(l.Dir, "lab.json")); err != nil {
		return err
	}
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "lab: stopping")
	os.Remove(filepath.Join(l.Dir, "lab.json"))
	return l.Stop()
}

// down signals the lab server of DIR (recorded in DIR/lab.json, or in
// the folder's lock while it starts) and waits for it; when the server is
// gone, it ends what that lab left running instead.
func down(args []string) error {
	fs, f, _ := parseLab("down", args, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.dir == "" {
		return errors.New("--dir is required")
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "lab.json")
	st, stErr := readState(path)
	if stErr != nil && !errors.Is(stErr, os.ErrNotExist) {
		return stErr
	}
	server := 0
	if st != nil && lab.Alive(lab.Proc{PID: st.PID, StartTime: st.StartTime}) {
		server = st.PID
	}
	var busy *lab.BusyError
	if err := lab.Busy(dir); server == 0 && errors.As(err, &busy) && busy.Running {
		// Still starting (no lab.json yet): the lock names its server,
		// signalled only if it is that folder's `gpush-lab serve`.
		if busy.PID == 0 || !isServer(busy.PID, dir) {
			return fmt.Errorf("%w; its server could not be told from the lock, try again when it is up", err)
		}
		server = busy.PID
	}
	if server > 0 {
		if err := syscall.Kill(server, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signal lab server pid %d: %w", server, err)
		}
		// Gone once the folder's lock is free: Stop releases it last.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if err := lab.Busy(dir); !errors.As(err, &busy) || !busy.Running {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("lab server pid %d still running after 1m", server)
			}
		}
		fmt.Fprintf(os.Stderr, "lab in %s stopped\n", dir)
		return nil
	}
	var procs []lab.Proc
	pid := 0
	if st != nil {
		procs, pid = st.Procs, st.PID
	}
	killed, err := lab.EndLeftovers(dir, pid, procs, 10*time.Second)
	os.Remove(path)
	if err != nil {
		return err
	}
	switch {
	case killed > 0:
		fmt.Fprintf(os.Stderr, "lab server in %s was gone; ended %d processes it left\n", dir, killed)
	case st == nil:
		return fmt.Errorf("no lab running in %s", dir)
	default:
		fmt.Fprintf(os.Stderr, "lab in %s was already down\n", dir)
	}
	return nil
}

// isServer reports whether pid runs `gpush-lab serve --dir dir`.
func isServer(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return len(args) >= 4 && args[1] == "serve" && args[2] == "--dir" && args[3] == dir
}

// demo starts a lab, runs gpush free_gpus.lua against it, shows that the
// protected daemon and the unrelated process survived, and stops the lab.
func demo(args []string) error {
	fs, f, _ := parseLab("demo", args, "")
	keep := fs.Bool("keep", false, "leave the lab folder in place")
	gpushBin := fs.String("gpush", "", "gpush binary to run (default: build one with the helpers embedded)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// `gpush-lab demo | head` must not kill us before the lab is stopped:
	// with SIGPIPE caught, writes fail with EPIPE and the deferred Stop runs.
	signal.Ignore(syscall.SIGPIPE)
	if f.dir == "" {
		d, err := os.MkdirTemp("", "gpush-lab-")
		if err != nil {
			return err
		}
		f.dir = d
		if !*keep {
			defer os.RemoveAll(d)
		}
	}
	gpush := *gpushBin
	if gpush == "" {
		fmt.Printf("== building gpush with its helpers\n")
		gpush = filepath.Join(f.dir, "bin", "gpush")
		if err := lab.BuildGpush(ctx, gpush); err != nil {
			return err
		}
	}
	fmt.Printf("== starting %d lab hosts (scenario %s) behind one sshd on loopback\n", f.n, f.scenario)
	l, err := lab.Start(ctx, f.options())
	if err != nil {
		if l != nil {
			l.Stop()
		}
		return err
	}
	defer l.Stop()
	h0 := l.Hosts[0]
	// The restarters differ by host: every host is shown.
	shown := func(host string) bool { return host == h0.Name || f.scenario == lab.ScenarioRestarters }
	for _, p := range l.Procs() {
		if shown(p.Host) {
			fmt.Printf("   %s pid %-7d %-14s gpu %s  %s%s\n", p.Host, p.PID, p.Role, gpuStr(p.GPU), p.Unit, restarterStr(p))
		}
	}
	units(h0)
	if f.scenario != lab.ScenarioRestarters {
		fmt.Printf("   (same on the other hosts)\n")
	}
	if l.NoServices != "" {
		fmt.Printf("   no services: %s\n", l.NoServices)
	}
	fmt.Println()
	argv := []string{"run", "free_gpus.lua", "-i", l.Inventory, "--known-hosts", l.KnownHosts, "-e", "grace=1s"}
	fmt.Printf("== gpush %s\n", strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, gpush, argv...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	runErr := cmd.Run()
	fmt.Printf("\n== after the run\n")
	for _, p := range l.Procs() {
		if p.Role == lab.RoleOrphanParent {
			continue
		}
		st := "gone"
		if lab.Alive(p) {
			st = "alive"
		}
		if shown(p.Host) {
			fmt.Printf("   %s pid %-7d %-14s %-5s  %s%s\n", p.Host, p.PID, p.Role, st, p.Unit, restarterStr(p))
		}
	}
	units(h0)
	code := 0
	var x *exec.ExitError
	if errors.As(runErr, &x) {
		code = x.ExitCode()
	} else if runErr != nil {
		return runErr
	}
	fmt.Printf("   gpush exit status %d\n", code)
	return runErr
}

// units prints the state of a host's services as its systemctl reports it.
func units(h lab.Host) {
	for _, u := range h.Services {
		out, _ := exec.Command(h.Systemctl, "show", "-p", "ActiveState", "-p", "SubState", "-p", "MainPID", "-p", "ControlGroup", "--value", u).Output()
		// Values come in systemctl's order: MainPID, ControlGroup, ActiveState, SubState.
		v := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(v) != 4 {
			fmt.Printf("   %s %s: systemctl show said %q\n", h.Name, u, out)
			continue
		}
		cg := v[1]
		if cg == "" {
			cg = "-"
		}
		fmt.Printf("   %s %-20s %s (%s)  main pid %s  cgroup %s\n", h.Name, u, v[2], v[3], v[0], cg)
	}
}

// restarterStr names the restarter of a supervisor or its worker.
func restarterStr(p lab.Proc) string {
	if p.Restarter == "" {
		return ""
	}
	return "restarter " + p.Restarter
}

func gpuStr(i int) string {
	if i < 0 {
		return "-"
	}
	return strconv.Itoa(i)
}
