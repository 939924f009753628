// Command restarter is what brings a lab host's GPU worker back after it
// dies: one of the kinds of restarter a real GPU host runs, each started
// by the lab (ScenarioRestarters) with the lab's gpu-holder as its worker.
//
//	restarter -kind slow    [-delay 15s] -- WORKER ARGV...  # a supervisor: restarts it 15 s after each death
//	restarter -kind backoff [-delay 1s]  -- WORKER ARGV...  # after 1, 2, 4, 8, 16, 16, ... s
//	restarter -kind loop    [-delay 2s]  -- WORKER ARGV...  # becomes /bin/sh -c 'while true; do "$@"; sleep 2; done'
//	restarter -kind kube    [-delay 10s] -cgroup-parent /gpush-lab/ID/lab03 -hierarchies H1,H2 \
//	    -root DIR -pod-uid UID -namespace NS -pod NAME -container NAME -- WORKER ARGV...
//
// -scale multiplies every delay (0.01: a test's hundredfold speed-up).
// -join P1,P2 first moves the restarter into the cgroups whose
// cgroup.procs files it names (the lab's own subtree), so that it and all
// it starts live there.
//
// The kube kind is a stand-in for the kubelet, since Kubernetes cannot run
// here: it runs the worker as a pod's container, in a cgroup shaped as the
// kubelet's with the cgroupfs driver (PARENT/kubepods/besteffort/pod<UID>/
// <64-hex container id>, a new id for each restart, in every hierarchy
// given), restarts it after the kubelet's back-off (10 s doubling up to
// 5 min; reset once a container ran 10 min), and keeps the node's log files
// as the kubelet does under ROOT: var/log/pods/NS_POD_UID/CONTAINER/N.log
// (N counts the restarts) and the var/log/containers/POD_NS_CONTAINER-ID.log
// link to the running container's log. Unlike the kubelet, it lets the
// worker write to its own stdout, so that whoever started it reads the
// worker's "ready <pid>" lines; the pod's cgroup is removed when the
// stand-in ends on TERM or INT.
//
// Every kind but loop ends its worker (KILL) and exits on TERM or INT; it
// keeps its process group, which the worker shares, so that one signal to
// the group ends both. Lines about restarts go to stderr.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab/labsystemd"
)

// Kinds, as -kind names them.
const (
	kindSlow    = "slow"
	kindBackoff = "backoff"
	kindKube    = "kube"
	kindLoop    = "loop"
)

// defaultDelay is each kind's first delay.
var defaultDelay = map[string]time.Duration{
	kindSlow: 15 * time.Second, kindBackoff: time.Second, kindKube: 10 * time.Second, kindLoop: 2 * time.Second,
}

// Back-off limits: backoff doubles up to 16 times its first delay; the
// kubelet up to 5 min, and starts over after a container ran 10 min.
const (
	backoffSteps   = 4
	kubeMaxBackoff = 5 * time.Minute
	kubeResetAfter = 10 * time.Minute
)

// joinFlag runs the binary as a container's first process: join the
// cgroups (cgroup.procs files before "--"), then exec the worker.
const joinFlag = "--restarter-join"

func main() {
	if len(os.Args) > 1 && os.Args[1] == joinFlag {
		os.Exit(join(os.Args[2:]))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "restarter: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	kind         string
	join         []string
	delay        time.Duration
	scale        float64
	cgroupParent string
	hierarchies  []string
	root         string
	podUID       string
	namespace    string
	pod          string
	container    string
	worker       []string
}

func parse(args []string) (*options, error) {
	fs := flag.NewFlagSet("restarter", flag.ContinueOnError)
	o := &options{}
	var hier, join string
	fs.StringVar(&o.kind, "kind", "", "slow, backoff, kube or loop")
	fs.StringVar(&join, "join", "", "cgroup.procs files to move this process into first, comma-separated")
	fs.DurationVar(&o.delay, "delay", 0, "first restart delay (default: the kind's: slow 15s, backoff 1s, kube 10s, loop 2s)")
	fs.Float64Var(&o.scale, "scale", 1, "multiplies every delay (0 means 1)")
	fs.StringVar(&o.cgroupParent, "cgroup-parent", "", "kube: the cgroup kubepods/ goes in (inside each hierarchy)")
	fs.StringVar(&hier, "hierarchies", "", "kube: the mounted cgroup hierarchies, comma-separated")
	fs.StringVar(&o.root, "root", "", "kube: the node's root folder for var/log/pods and var/log/containers")
	fs.StringVar(&o.podUID, "pod-uid", "", "kube: the pod's uid")
	fs.StringVar(&o.namespace, "namespace", "default", "kube: the pod's namespace")
	fs.StringVar(&o.pod, "pod", "", "kube: the pod's name")
	fs.StringVar(&o.container, "container", "worker", "kube: the container's name")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.worker = fs.Args()
	if join != "" {
		o.join = strings.Split(join, ",")
	}
	if len(o.worker) == 0 || !filepath.IsAbs(o.worker[0]) {
		return nil, fmt.Errorf("want the worker's argv after the flags, starting with an absolute path; got %q", o.worker)
	}
	first, ok := defaultDelay[o.kind]
	if !ok {
		return nil, fmt.Errorf("-kind %q: want slow, backoff, kube or loop", o.kind)
	}
	if o.delay == 0 {
		o.delay = first
	}
	if o.scale == 0 {
		o.scale = 1
	}
	if o.delay < 0 || o.scale < 0 {
		return nil, errors.New("-delay and -scale must not be negative")
	}
	if o.kind == kindKube {
		if hier != "" {
			o.hierarchies = strings.Split(hier, ",")
		}
		if len(o.hierarchies) == 0 || !strings.HasPrefix(o.cgroupParent, "/") || strings.Contains(o.cgroupParent, "..") {
			return nil, errors.New("-kind kube needs -hierarchies and an absolute -cgroup-parent without \"..\"")
		}
		if o.root == "" || o.podUID == "" || o.pod == "" {
			return nil, errors.New("-kind kube needs -root, -pod-uid and -pod")
		}
	}
	return o, nil
}

// scaled is d times the scale.
func (o *options) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * o.scale)
}

// restartDelay is the wait before restart n+1 (n restarts so far).
func (o *options) restartDelay(n int) time.Duration {
	switch o.kind {
	case kindBackoff:
		return o.scaled(o.delay << min(n, backoffSteps))
	case kindKube:
		d := o.delay
		for i := 0; i < n && d < kubeMaxBackoff; i++ {
			d *= 2
		}
		return o.scaled(min(d, kubeMaxBackoff))
	}
	return o.scaled(o.delay)
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	for _, procs := range o.join {
		if err := os.WriteFile(procs, []byte("0"), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", filepath.Dir(procs), err)
		}
	}
	if o.kind == kindLoop {
		// The shell loop itself, as an operator's wrapper script is.
		secs := strconv.FormatFloat(o.scaled(o.delay).Seconds(), 'f', -1, 64)
		loop := `while true; do "$@"; sleep ` + secs + `; done`
		argv := append([]string{"sh", "-c", loop, "sh"}, o.worker...)
		return fmt.Errorf("exec /bin/sh: %w", syscall.Exec("/bin/sh", argv, os.Environ()))
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var pod *kubePod
	if o.kind == kindKube {
		if pod, err = newPod(o); err != nil {
			return err
		}
		defer pod.remove()
	}
	restarts := 0
	for {
		cmd, err := start(o, pod, restarts)
		if err != nil {
			if restarts == 0 {
				return err
			}
			fmt.Fprintf(os.Stderr, "restarter: %v\n", err)
		}
		began := time.Now()
		if cmd != nil {
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				fmt.Fprintf(os.Stderr, "restarter (%s): worker %d ended: %v\n", o.kind, cmd.Process.Pid, err)
			case <-stop:
				cmd.Process.Kill()
				<-done
				pod.containerGone()
				return nil
			}
			pod.containerGone()
		}
		if o.kind == kindKube && time.Since(began) >= o.scaled(kubeResetAfter) {
			restarts = 0
		}
		d := o.restartDelay(restarts)
		fmt.Fprintf(os.Stderr, "restarter (%s): restart %d in %v\n", o.kind, restarts+1, d)
		select {
		case <-time.After(d):
		case <-stop:
			return nil
		}
		restarts++
	}
}

// start starts the worker: directly, or as pod's next container.
func start(o *options, pod *kubePod, restarts int) (*exec.Cmd, error) {
	if pod == nil {
		cmd := exec.Command(o.worker[0], o.worker[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start worker: %w", err)
		}
		return cmd, nil
	}
	return pod.startContainer(o.worker, restarts)
}

// kubePod is the stand-in's one pod: its cgroup in every hierarchy and its
// log folders.
type kubePod struct {
	o      *options
	cgroup string // PARENT/kubepods/besteffort/pod<uid>
	logDir string // ROOT/var/log/pods/NS_POD_UID/CONTAINER
	// id and link are the running container's id and var/log/containers
	// link; prevLog the log of the container before it (the kubelet keeps
	// the current and the previous one).
	id, link, prevLog string
}

func newPod(o *options) (*kubePod, error) {
	p := &kubePod{o: o, cgroup: strings.TrimSuffix(o.cgroupParent, "/") + "/kubepods/besteffort/pod" + o.podUID,
		logDir: filepath.Join(o.root, "var/log/pods", o.namespace+"_"+o.pod+"_"+o.podUID, o.container)}
	for _, h := range o.hierarchies {
		if err := os.MkdirAll(filepath.Join(h, p.cgroup), 0o755); err != nil {
			return nil, fmt.Errorf("create pod cgroup: %w", err)
		}
	}
	if err := os.MkdirAll(p.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("pod log folder: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(o.root, "var/log/containers"), 0o755); err != nil {
		return nil, fmt.Errorf("container log folder: %w", err)
	}
	return p, nil
}

// startContainer runs argv as the pod's container number restarts: a new
// container id and cgroup, joined before the worker's exec, and its log.
func (p *kubePod) startContainer(argv []string, restarts int) (*exec.Cmd, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	p.id = hex.EncodeToString(raw[:])
	var procs []string
	for _, h := range p.o.hierarchies {
		dir := filepath.Join(h, p.cgroup, p.id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create container cgroup: %w", err)
		}
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	logPath := filepath.Join(p.logDir, strconv.Itoa(restarts)+".log")
	line := fmt.Sprintf("%s stderr F kubelet stand-in: started container %s (restart %d)\n", time.Now().UTC().Format(time.RFC3339Nano), p.id, restarts)
	if err := os.WriteFile(logPath, []byte(line), 0o644); err != nil {
		return nil, fmt.Errorf("container log: %w", err)
	}
	p.link = filepath.Join(p.o.root, "var/log/containers", p.o.pod+"_"+p.o.namespace+"_"+p.o.container+"-"+p.id+".log")
	if err := os.Symlink(logPath, p.link); err != nil {
		return nil, fmt.Errorf("container log link: %w", err)
	}
	if p.prevLog != "" && p.prevLog != logPath {
		// Older than the previous container's: gone, as the kubelet's are.
		old, _ := filepath.Glob(filepath.Join(p.logDir, "*.log"))
		for _, f := range old {
			if f != logPath && f != p.prevLog {
				os.Remove(f)
			}
		}
	}
	p.prevLog = logPath
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	status, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer status.Close()
	cmd := exec.Command(self, append(append(append([]string{joinFlag}, procs...), "--"), argv...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("start container: %w", err)
	}
	// EOF once the worker's exec closed fd 3; a message when joining failed.
	if msg, _ := io.ReadAll(status); len(msg) > 0 {
		cmd.Wait()
		return nil, fmt.Errorf("start container %s: %s", p.id, msg)
	}
	return cmd, nil
}

// containerGone removes the ended container's cgroup and log link.
func (p *kubePod) containerGone() {
	if p == nil || p.id == "" {
		return
	}
	for _, h := range p.o.hierarchies {
		if err := labsystemd.RemoveTree(h, p.cgroup+"/"+p.id); err != nil {
			fmt.Fprintf(os.Stderr, "restarter: %v\n", err)
		}
	}
	os.Remove(p.link)
	p.id, p.link = "", ""
}

// remove removes the pod's cgroup (and kubepods/ above it, once empty): a
// pod is gone with its cgroup.
func (p *kubePod) remove() {
	for _, h := range p.o.hierarchies {
		if err := labsystemd.RemoveTree(h, p.cgroup); err != nil {
			fmt.Fprintf(os.Stderr, "restarter: %v\n", err)
		}
		labsystemd.Prune(filepath.Join(h, filepath.Dir(p.cgroup)), filepath.Join(h, p.o.cgroupParent))
	}
}

// join is a container's first process: it joins each cgroup.procs given
// before "--" ("0" is the writer itself, whatever its PID namespace), then
// execs the argv after it. Failures go to fd 3, which is close-on-exec:
// the starter reads EOF on success.
func join(args []string) int {
	status := os.NewFile(3, "start-status")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(status, format, a...)
		return 127
	}
	i := -1
	for j, a := range args {
		if a == "--" {
			i = j
			break
		}
	}
	if i < 0 || i == len(args)-1 {
		return fail("internal: bad join arguments %q", args)
	}
	for _, procs := range args[:i] {
		if err := os.WriteFile(procs, []byte("0"), 0); err != nil {
			return fail("join cgroup %s: %v", filepath.Dir(procs), err)
		}
	}
	syscall.CloseOnExec(3)
	argv := args[i+1:]
	err := syscall.Exec(argv[0], argv, os.Environ())
	return fail("exec %s: %v", argv[0], err)
}
