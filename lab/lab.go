// Package lab runs simulated GPU hosts on this machine for the demo, the
// end-to-end tests and the benchmark: one real OpenSSH sshd on loopback
// serves every lab host; each host is an inventory entry with its own fake
// device folder (gpush_dev_dir), its own fake nvidia-smi (gpush_nvidia_smi)
// its own systemctl stand-in (gpush_systemctl, lab/cmd/fake-systemctl) whose
// services run in real cgroups, and its own holder processes mimicking what
// a stopped GPU service leaves behind. Nothing outside this package knows it
// is a lab: gpush reaches lab hosts through the same inventory vars a real
// cluster can set.
package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab/labbuild"
	"github.com/gpush/gpush/lab/labgpu"
	"github.com/gpush/gpush/lab/labns"
	"github.com/gpush/gpush/lab/labsystemd"
	"github.com/gpush/gpush/lab/latency"
	"github.com/gpush/gpush/lab/podmanlab"
	"github.com/gpush/gpush/lab/sshd"
	"gopkg.in/yaml.v3"

	"github.com/gpush/gpush/lab/procstat"
)

// Scenarios: what each lab host's GPUs look like at the start. What each
// holds is said once, in ScenarioTable, which both Start and `gpush-lab up
// --help` read.
const (
	ScenarioIdle       = "idle"
	ScenarioLeftovers  = "leftovers"
	ScenarioRespawn    = "respawn"
	ScenarioRestarters = "restarters"
)

// ScenarioInfo is one scenario: what Start lays out and how it is told.
type ScenarioInfo struct {
	Name string
	// MinGPUs is the fewest GPUs a host of it needs: it holds GPUs 0 to
	// MinGPUs-1 and leaves the others free (Options.GPUs).
	MinGPUs int
	// About says what a host of it runs, one sentence per GPU or group of
	// processes.
	About string
}

// ScenarioTable lists every scenario, the default (ScenarioLeftovers)
// second. Every scenario also runs nvidia-persistenced (protected, holding
// nvidiactl) and an unrelated log-shipper (a non-NVIDIA file), both to be
// left alone; see also Options.OtherUser and Options.Podman.
var ScenarioTable = []ScenarioInfo{
	{ScenarioIdle, 0, "Every GPU free: only nvidia-persistenced and the log-shipper run."},
	{ScenarioLeftovers, 4, "GPU 0: " + UnitVLLM + " (KillMode=control-group: its stop alone frees the GPU). " +
		"GPU 1: an orphaned python3 worker (its parent was killed). " +
		"GPU 2: a python3 worker that ignores SIGTERM. " +
		"GPU 3: " + UnitSGLang + " (KillMode=process: its forked worker outlives `systemctl stop`, in the unit's cgroup). " +
		"Plus an NVML monitor (nvitop: nvidiactl and every GPU's device file, no memory), never a target. " +
		"Every worker has nvidia-uvm open and owns its memory. " +
		"Where cgroups cannot be written there are no services: GPU 0 holds a plain python3 worker and GPU 3 is free."},
	{ScenarioRespawn, 4, "The leftovers without " + UnitSGLang + ". " +
		"GPU 3: a python3 worker that a supervisor (a `while true` shell loop, as torchrun's agent is) restarts " + RespawnDelay + " s after each death."},
	{ScenarioRestarters, 1, "GPU 0: a python3 worker (8 GiB) that a restarter brings back whenever it dies, one kind per host in turn: " +
		"slow (a supervisor, 15 s after each death), backoff (1, 2, 4, 8, then 16 s), " +
		"kube (a kubelet stand-in: the worker runs as container " + PodContainer + " of pod " + PodNamespace + "/" + PodName + " in a kubelet-shaped cgroup, " +
		"10 s back-off doubling to 5 min, pod logs under the host's gpush_root_dir; needs writable cgroups), " +
		"loop (`while true; do worker; sleep 2; done`). --restart-scale multiplies every delay."},
}

// Scenarios lists every scenario's name.
var Scenarios = func() []string {
	var out []string
	for _, sc := range ScenarioTable {
		out = append(out, sc.Name)
	}
	return out
}()

// Scenario returns the scenario named name.
func Scenario(name string) (ScenarioInfo, bool) {
	for _, sc := range ScenarioTable {
		if sc.Name == name {
			return sc, true
		}
	}
	return ScenarioInfo{}, false
}

// The restarters of ScenarioRestarters (Host.Restarter, Proc.Restarter).
const (
	// RestarterSlow: a supervisor process that restarts its worker 15 s
	// after each death.
	RestarterSlow = "slow"
	// RestarterBackoff: a supervisor that restarts it after 1, 2, 4, 8,
	// then 16 s each time.
	RestarterBackoff = "backoff"
	// RestarterKube: a stand-in for the kubelet (Kubernetes cannot run in
	// the lab), named kubelet: the worker runs as a pod's container, in a
	// cgroup shaped as the kubelet's (kubepods/besteffort/pod<uid>/<64-hex
	// container id> in the host's cgroup, inside the lab's own subtree),
	// restarted after the kubelet's back-off (10 s doubling to 5 min), with
	// the kubelet's /var/log/pods and /var/log/containers files under the
	// host's Host.RootDir (gpush_root_dir). The pod is PodNamespace/PodName
	// with uid PodUID(host number), its container PodContainer.
	RestarterKube = "kube"
	// RestarterLoop: a shell loop, `while true; do worker; sleep 2; done`.
	RestarterLoop = "loop"
)

// RestarterKinds is the order ScenarioRestarters hands them to hosts in.
var RestarterKinds = []string{RestarterSlow, RestarterBackoff, RestarterKube, RestarterLoop}

// The kube restarter's pod and container.
const (
	PodNamespace = "ml"
	PodName      = "vllm-0"
	PodContainer = "worker"
)

// PodUID is the uid of the kube restarter's pod on host number n (1-based).
func PodUID(n int) string {
	return fmt.Sprintf("1ab%05d-0000-4000-8000-%012d", n, 0)
}

// The lab's services (systemd units run by fake-systemctl).
const (
	UnitVLLM   = "vllm-embed.service"  // GPU 0, KillMode=control-group
	UnitSGLang = "sglang-qwen.service" // GPU 3, KillMode=process: leaves its worker
)

// Process roles.
const (
	RoleWorker       = "worker"        // holds a GPU, exits on TERM
	RoleOrphanParent = "orphan-parent" // killed by the lab at start
	RoleOrphan       = "orphan"        // its child, re-parented, holds a GPU
	RoleTermIgnorer  = "term-ignorer"  // holds a GPU, ignores TERM
	RoleRespawner    = "respawner"     // holds a GPU, restarted by its supervisor when it dies
	RoleSupervisor   = "supervisor"    // the shell loop that restarts the respawner
	RoleMonitor      = "monitor"       // an NVML client: every GPU's device file, no memory; never a target
	RoleServiceMain  = "service-main"  // a service's main process (Proc.Unit), holds a GPU
	RoleServiceChild = "service-child" // a worker the main process forked, in the unit's cgroup
	RolePersistenced = "persistenced"  // protected daemon holding nvidiactl
	RoleUnrelated    = "unrelated"     // holds a non-NVIDIA file; never a target
	RoleContainer    = "container"     // holds a GPU from a podman container with --restart=always (Options.Podman)
)

// Binaries are the lab's executables. Empty fields are built by Start with
// `go build` into Dir/bin (needs the gpush module source).
type Binaries struct {
	Holder        string // lab/cmd/gpu-holder (its C build when cc is there, see Kind)
	FakeSMI       string // lab/cmd/fake-nvidia-smi
	FakeSystemctl string // lab/cmd/fake-systemctl
	Init          string // lab/cmd/lab-init (Options.Isolate; its C build when cc is there)
	Restarter     string // lab/cmd/restarter (ScenarioRestarters)
	// Kind picks how Build makes Holder and Init, the programs every host
	// runs many of: KindC, KindGo, or empty for C when a C compiler builds
	// it, else Go. Build sets it to what it made (KindC, KindGo, "mixed")
	// and Note to which and why (what the lab logs).
	Kind string
	Note string
}

// Options tunes Start.
type Options struct {
	// Hosts is the number of lab hosts (default 1), named lab01, lab02, ...
	// (lab001 ... from 100 hosts on: one width, so that they fold as one
	// node set; Prefix names them otherwise).
	Hosts int
	// Prefix names the hosts instead of lab (gpu: gpu01, gpu02, ...) and
	// the inventory group that holds them; the unreachable hosts are then
	// PREFIX-down01, .... Two labs of different prefixes merge into one
	// inventory (gpush -i A/inventory.yaml -i B/inventory.yaml, their
	// known_hosts files concatenated): host names, the connection vars (on
	// each lab's groups, not all), ports and GPU UUIDs are apart. Letters,
	// digits and '-', starting with a letter.
	Prefix string
	// Dir holds everything (sshd, keys, devices, inventory); required.
	Dir string
	// Scenario applies to every host (default ScenarioLeftovers).
	Scenario string
	// HostScenario, when set, picks the scenario of host i (0-based).
	HostScenario func(i int) string
	// GPUs per host (default 4). A scenario needs its MinGPUs
	// (ScenarioTable) and leaves the GPUs past them free; Podman needs one
	// more.
	GPUs int
	// OtherUser, when set (a user name or a uid: nobody, 65534), runs some
	// holders as that user instead of root, so that users= filters can be
	// tried: the orphaned worker (GPU 1) and the TERM ignorer (GPU 2) of
	// the leftovers and respawn scenarios, and the Podman worker. The lab
	// sets their uid and gid (it runs as root); no account is created, a
	// uid without one runs as itself. Dir and the folders above it must be
	// searchable by others (mode o+x): the holder runs from Dir/bin.
	OtherUser string
	// Podman runs one more worker per host in a real podman container
	// (python3, 6 GiB, nvidia-uvm open) with --restart=always, named
	// HOST-trainer, on the first GPU its scenario leaves free (GPU
	// MinGPUs: 0 idle, 4 leftovers and respawn, 1 restarters). The podman
	// is the lab's own (lab/podmanlab: storage, config and locks under
	// Dir/podman, runc, cgroupfs, the container's cgroup inside the lab's
	// subtree when cgroups are writable); the sshd sets CONTAINERS_CONF
	// and CONTAINERS_STORAGE_CONF in every session, so that the helper's
	// plain `podman` reads the same containers. The container bind-mounts
	// the host's device folder and the lab's holder folder at their own
	// paths and runs the lab's static gpu-holder. Stop removes it by name.
	// Needs root, podman and runc.
	Podman bool
	// Unreachable adds that many inventory hosts (down01, ...) pointing at a
	// closed loopback port.
	Unreachable int
	// Bin are prebuilt binaries (see Binaries).
	Bin Binaries
	// ReleaseDelay is how long the fake nvidia-smi keeps a dead holder's
	// memory (default "70ms", what an H200 showed).
	ReleaseDelay string
	// SSHD tunes the sshd (log level, extra config lines).
	SSHD sshd.Options
	// RTT, when positive, puts a latency proxy (lab/latency) in front of
	// the sshd for each host, delaying each direction by RTT/2: the host's
	// inventory port and ssh_config Port are its proxy's.
	RTT time.Duration
	// HostRTT, when set, is host i's round trip (0-based) and gives every
	// host a proxy, even at 0 (to measure the proxy's own cost).
	HostRTT func(i int) time.Duration
	// Isolate gives every host a process view of its own, as a real host
	// has: its holders, services and SSH sessions run in a PID and mount
	// namespace of its own, under a lab-init with that namespace's /proc,
	// so that a scan on one host (the helper's, fuser's, the fake
	// nvidia-smi's) reads that host's processes only instead of every lab
	// host's. Every host then gets a proxy (at its RTT, else 0) that dials
	// the sshd from a loopback address of its own; the sshd's ForceCommand
	// enters the namespace of the host that address belongs to. Sessions
	// reaching the sshd's own port see the machine's processes, as without
	// Isolate. Start fails when namespaces cannot be made (needs root).
	Isolate bool
	// RestartScale multiplies every delay of ScenarioRestarters' restarters
	// (0 means 1; 0.01 makes the kubelet stand-in's 10 s back-off 100 ms).
	RestartScale float64
	// Log receives progress lines (default: discard).
	Log io.Writer
}

// Proc is one lab process; PID and StartTime are its identity.
type Proc struct {
	Host      string `json:"host"`
	Role      string `json:"role"`
	GPU       int    `json:"gpu"` // -1: holds no GPU
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// HostPID is its pid as its host sees it (and gpush reports it): in
	// the host's own PID namespace with Options.Isolate, else PID.
	HostPID int `json:"host_pid"`
	// Unit is the service whose cgroup it was started in.
	Unit string `json:"unit,omitempty"`
	// Restarter is the kind of restarter (RestarterSlow, ...) a supervisor
	// is, or that restarts a respawner (ScenarioRestarters).
	Restarter string `json:"restarter,omitempty"`
	// UID is its real uid when it started (Options.OtherUser).
	UID int `json:"uid"`
	// Container is the podman container it runs in (RoleContainer).
	Container string `json:"container,omitempty"`
}

// Host is one lab host.
type Host struct {
	Name     string `json:"name"`
	Scenario string `json:"scenario"`
	DevDir   string `json:"dev_dir"`
	SMI      string `json:"nvidia_smi"`
	// Systemctl is the host's fake-systemctl (gpush_systemctl).
	Systemctl string `json:"systemctl"`
	// Services are the host's units (the inventory's `services`), started.
	Services []string `json:"services,omitempty"`
	// RootDir is the host's root for the files container runtimes and the
	// kubelet leave (var/log/pods, ...: gpush_root_dir); empty but for
	// what the kube restarter writes there.
	RootDir string `json:"root_dir"`
	// Restarter is the kind of restarter of its GPU 0 worker
	// (ScenarioRestarters).
	Restarter string `json:"restarter,omitempty"`
	// Port is where the host's sshd answers: its latency proxy when it has
	// one, else the sshd's own port.
	Port int `json:"port"`
	// RTT is the round trip its proxy adds (0 without a proxy).
	RTT time.Duration `json:"rtt,omitempty"`
	// InitPID is the machine's pid of the host's lab-init, pid 1 of its
	// process view (Options.Isolate; 0 without).
	InitPID int `json:"init_pid,omitempty"`
	// ClientAddr is the loopback address its proxy dials the sshd from,
	// which tells the sshd the session's host (Options.Isolate).
	ClientAddr string `json:"client_addr,omitempty"`
	// Container is its podman container (Options.Podman).
	Container string `json:"container,omitempty"`
}

// Lab is a running set of lab hosts.
type Lab struct {
	Dir        string
	Inventory  string // inventory file (YAML)
	KnownHosts string // known_hosts file with the sshd's host key
	SSHConfig  string // ssh_config naming every lab host (for ssh/pdsh)
	ClientKey  string
	User       string
	Hosts      []Host
	SSHD       *sshd.Server
	// NoServices says why the hosts run no services (cgroups not
	// writable); empty when they do.
	NoServices string
	// Podman is the lab's private podman (Options.Podman; nil without).
	Podman *podmanlab.Runtime

	// cgroupBase holds every lab cgroup (CGROUP/gpush-lab/ID/HOST/...);
	// cgroups lists the hierarchies it was created in.
	cgroupBase string
	cgroups    []string

	bin  Binaries
	opts Options
	// other is Options.OtherUser's credential (nil without).
	other   *syscall.Credential
	proxies []*latency.Proxy
	inits   map[string]*labns.View // by host name (Options.Isolate)
	mu      sync.Mutex
	procs   []*proc
	stopCh  chan struct{}
	wg      sync.WaitGroup
	stop    sync.Once
	// lock is Dir's lock (see lockDir), held until the end of Stop.
	lock *os.File
}

type proc struct {
	Proc
	// exited is closed once the lab reaped the process; nil for processes
	// the lab did not start directly (orphans).
	exited chan struct{}
}

// labEnv is the environment of the lab's own processes (holders, services,
// inits): one P each. A Go process makes threads by GOMAXPROCS, and a
// thread takes a pid: 1000 hosts of about 10 lab processes each used half of
// a default kernel.pid_max (32768) before any session started.
func labEnv() []string {
	return append(os.Environ(), "GOMAXPROCS=1")
}

// reap waits for a started process in the background.
func reap(cmd *exec.Cmd) chan struct{} {
	ch := make(chan struct{})
	go func() { cmd.Wait(); close(ch) }()
	return ch
}

// Start builds what is missing, starts the sshd, lays out the hosts, starts
// their holder processes and writes the inventory. Call Stop when done, also
// after an error return (Start cleans up after itself then).
func Start(ctx context.Context, o Options) (l *Lab, err error) {
	if o.Dir == "" {
		return nil, errors.New("lab: Options.Dir is required")
	}
	if o.Hosts <= 0 {
		o.Hosts = 1
	}
	if o.GPUs <= 0 {
		o.GPUs = 4
	}
	if o.Scenario == "" {
		o.Scenario = ScenarioLeftovers
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !validPrefix(o.Prefix) {
		return nil, fmt.Errorf("lab: prefix %q: want letters, digits and '-', starting with a letter", o.Prefix)
	}
	if o.ReleaseDelay == "" {
		o.ReleaseDelay = "70ms"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.RestartScale < 0 {
		return nil, fmt.Errorf("lab: RestartScale %v is negative", o.RestartScale)
	}
	if o.RestartScale == 0 {
		o.RestartScale = 1
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("lab dir %s: %w", o.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create lab dir: %w", err)
	}
	// sshd reads authorized_keys as the login user: the folders on the way
	// must be traversable.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod lab dir %s: %w", dir, err)
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("lab: current user: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	if left := leftovers(dir); len(left) > 0 {
		unlockDir(lock)
		return nil, &BusyError{Dir: dir, Leftovers: left}
	}
	l = &Lab{Dir: dir, User: u.Username, opts: o, stopCh: make(chan struct{}), inits: map[string]*labns.View{}, lock: lock}
	defer func() {
		if err != nil {
			l.Stop()
		}
	}()
	if o.OtherUser != "" {
		if l.other, err = lookupUser(o.OtherUser); err != nil {
			return l, err
		}
		if err := searchableByOthers(dir); err != nil {
			return l, fmt.Errorf("lab: OtherUser %s runs holders from %s: %w", o.OtherUser, dir, err)
		}
	}
	// What an earlier lab in this folder published for its sessions (which
	// host a client address is) must not outlive it.
	if err := os.RemoveAll(filepath.Join(dir, "ns")); err != nil {
		return l, fmt.Errorf("lab: clear the previous lab's namespaces: %w", err)
	}
	if l.bin, err = Build(ctx, filepath.Join(dir, "bin"), o.Bin); err != nil {
		return l, err
	}
	fmt.Fprintf(o.Log, "lab: %s\n", l.bin.Note)
	so := o.SSHD
	so.Dir = filepath.Join(dir, "sshd")
	if so.LogLevel == "" {
		so.LogLevel = "VERBOSE"
	}
	// Every lab host logs in through this one sshd at once.
	own := []string{"MaxStartups 1000", "MaxSessions 1000"}
	if o.Podman {
		if err := l.setupPodman(); err != nil {
			return l, err
		}
		// Every session's environment (the helper's podman reads it).
		line := "SetEnv"
		for _, kv := range l.Podman.Env {
			line += " " + strconv.Quote(kv)
		}
		own = append(own, line)
	}
	if o.Isolate {
		enter, err := l.writeEnter()
		if err != nil {
			return l, err
		}
		sftp, err := sshd.FindSFTPServer()
		if err != nil {
			return l, fmt.Errorf("lab: Isolate: %w", err)
		}
		// Before the caller's lines: a Match block of theirs must not
		// swallow these. The subsystem runs through ForceCommand too, so it
		// must be a program, not internal-sftp.
		own = append(own, "Subsystem sftp "+sftp, "ForceCommand "+shellQuote(enter))
	}
	so.ExtraConfig = append(own, so.ExtraConfig...)
	fmt.Fprintf(o.Log, "lab: starting sshd in %s\n", so.Dir)
	if l.SSHD, err = sshd.Start(ctx, so); err != nil {
		return l, fmt.Errorf("lab: %w", err)
	}
	l.ClientKey = l.SSHD.ClientKeyPath
	l.setupCgroups()
	width := max(2, len(strconv.Itoa(o.Hosts)))
	for i := 0; i < o.Hosts; i++ {
		sc := o.Scenario
		if o.HostScenario != nil {
			sc = o.HostScenario(i)
		}
		h, err := l.layoutHost(fmt.Sprintf("%s%0*d", o.Prefix, width, i+1), sc)
		if err != nil {
			return l, err
		}
		if o.Isolate {
			if err := l.startInit(ctx, &h, i); err != nil {
				return l, err
			}
		}
		l.Hosts = append(l.Hosts, h)
	}
	for _, h := range l.Hosts {
		if err := l.startProcs(ctx, h); err != nil {
			return l, err
		}
	}
	if err := l.startProxies(); err != nil {
		return l, err
	}
	if err := l.writeFiles(o.Unreachable); err != nil {
		return l, err
	}
	fmt.Fprintf(o.Log, "lab: %d hosts up, inventory %s\n", len(l.Hosts), l.Inventory)
	return l, nil
}

// startProxies gives each host its port: a latency proxy of its own when
// Options ask for one, else the sshd's.
func (l *Lab) startProxies() error {
	// Connections being set up to the one sshd, all proxies together: below
	// its listen backlog (see latency.Options.Gate).
	gate := make(chan struct{}, 64)
	for i := range l.Hosts {
		h := &l.Hosts[i]
		h.Port = l.SSHD.Port
		rtt, proxied := l.opts.RTT, l.opts.RTT > 0 || l.opts.Isolate
		if l.opts.HostRTT != nil {
			rtt, proxied = l.opts.HostRTT(i), true
		}
		if !proxied {
			continue
		}
		if rtt < 0 {
			return fmt.Errorf("lab host %s: negative RTT %v", h.Name, rtt)
		}
		p, err := latency.Listen(l.SSHD.Addr, rtt/2, latency.Options{LocalAddr: h.ClientAddr, Log: l.opts.Log, Gate: gate})
		if err != nil {
			return fmt.Errorf("lab host %s: %w", h.Name, err)
		}
		l.proxies = append(l.proxies, p)
		h.Port, h.RTT = p.Port(), rtt
	}
	return nil
}

// Build returns the lab binaries, building with `go build` into binDir
// those that have does not name.
func Build(ctx context.Context, binDir string, have Binaries) (Binaries, error) {
	b := have
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return b, fmt.Errorf("create %s: %w", binDir, err)
	}
	if err := buildPerHost(ctx, binDir, &b); err != nil {
		return b, err
	}
	for _, t := range []struct {
		field *string
		pkg   string
		name  string
	}{
		{&b.FakeSMI, "github.com/gpush/gpush/lab/cmd/fake-nvidia-smi", "fake-nvidia-smi"},
		{&b.FakeSystemctl, "github.com/gpush/gpush/lab/cmd/fake-systemctl", "fake-systemctl"},
		{&b.Restarter, "github.com/gpush/gpush/lab/cmd/restarter", "restarter"},
	} {
		if *t.field != "" {
			continue
		}
		out := filepath.Join(binDir, t.name)
		if err := GoBuild(ctx, out, t.pkg); err != nil {
			return b, err
		}
		*t.field = out
	}
	return b, nil
}

// GoBuild runs `go build -o out pkg` (CGO off: the lab binaries are static).
func GoBuild(ctx context.Context, out, pkg string) error { return labbuild.Go(ctx, out, pkg) }

func (l *Lab) layoutHost(name, scenario string) (Host, error) {
	info, ok := Scenario(scenario)
	if !ok {
		return Host{}, fmt.Errorf("lab host %s: unknown scenario %q (want one of %s)", name, scenario, strings.Join(Scenarios, ", "))
	}
	if l.opts.GPUs < info.MinGPUs {
		return Host{}, fmt.Errorf("lab host %s: scenario %s needs %d GPUs, have %d", name, scenario, info.MinGPUs, l.opts.GPUs)
	}
	if l.opts.Podman && l.opts.GPUs <= info.MinGPUs {
		return Host{}, fmt.Errorf("lab host %s: the podman worker needs a GPU that scenario %s leaves free: it holds GPUs 0-%d, so %d GPUs or more (have %d)",
			name, scenario, info.MinGPUs-1, info.MinGPUs+1, l.opts.GPUs)
	}
	base := filepath.Join(l.Dir, "hosts", name)
	h := Host{Name: name, Scenario: scenario, DevDir: filepath.Join(base, "dev"), SMI: filepath.Join(base, "smi", "nvidia-smi"),
		RootDir: filepath.Join(base, "root")}
	if l.opts.Podman {
		h.Container = name + "-trainer"
	}
	if scenario == ScenarioRestarters {
		h.Restarter = RestarterKinds[len(l.Hosts)%len(RestarterKinds)]
		if h.Restarter == RestarterKube && l.NoServices != "" {
			return h, fmt.Errorf("lab host %s: the kube restarter runs its worker in a pod's cgroup: %s", name, l.NoServices)
		}
	}
	if err := clearHostState(base); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	// The files an earlier kube restarter left (its pod's logs) are that
	// lab's pod.
	if err := os.RemoveAll(h.RootDir); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	for _, d := range []string{h.DevDir, h.RootDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return h, fmt.Errorf("lab host %s: %w", name, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(h.SMI), 0o755); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	devs := []string{"nvidiactl", "nvidia-uvm"}
	for i := 0; i < l.opts.GPUs; i++ {
		devs = append(devs, fmt.Sprintf("nvidia%d", i))
	}
	for _, d := range devs {
		if err := os.WriteFile(filepath.Join(h.DevDir, d), nil, 0o666); err != nil {
			return h, fmt.Errorf("lab host %s: fake device: %w", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "unrelated.log"), nil, 0o644); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	// The fake nvidia-smi reads its config beside the executable, so each
	// host gets its own copy (a hard link: /proc/self/exe keeps the link's path).
	if err := linkOrCopy(l.bin.FakeSMI, h.SMI); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	cfg := labgpu.Config{DevDir: h.DevDir, ReleaseDelay: l.opts.ReleaseDelay}
	hostNum := len(l.Hosts) + 1
	for i := 0; i < l.opts.GPUs; i++ {
		cfg.GPUs = append(cfg.GPUs, labgpu.GPU{
			Index: i, Name: "NVIDIA H200",
			UUID:     fmt.Sprintf("GPU-1ab%05d-%04x-4000-8000-%012d", hostNum, prefixTag(l.opts.Prefix), i),
			BusID:    busID(i),
			TotalMiB: 143771, BaselineMiB: 0,
		})
	}
	if err := cfg.Save(filepath.Join(filepath.Dir(h.SMI), labgpu.ConfigName)); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	// The systemctl stand-in, like the fake nvidia-smi, reads its config
	// (the host's units) beside the path it runs as.
	h.Systemctl = filepath.Join(base, "systemd", "systemctl")
	if err := os.MkdirAll(filepath.Dir(h.Systemctl), 0o755); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	if err := linkOrCopy(l.bin.FakeSystemctl, h.Systemctl); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	units, err := l.hostUnits(h)
	if err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	for _, u := range []string{UnitVLLM, UnitSGLang} {
		if _, ok := units[u]; ok {
			h.Services = append(h.Services, u)
		}
	}
	sc := labsystemd.Config{Units: units, CgroupBase: l.cgroupBase + "/" + name}
	if err := sc.Save(filepath.Join(filepath.Dir(h.Systemctl), labsystemd.ConfigName)); err != nil {
		return h, fmt.Errorf("lab host %s: %w", name, err)
	}
	return h, nil
}

// clearHostState removes what an earlier lab in this folder left of a
// host's state (the unit states of its systemctl, the sightings of its
// nvidia-smi): they name that lab's processes. The units' logs stay, as a
// journal does; startUnit reads only what its own start adds to them.
func clearHostState(base string) error {
	states, _ := filepath.Glob(filepath.Join(base, "systemd", "state", "*.json"))
	smiState := strings.TrimSuffix(labgpu.ConfigName, ".json") + ".state.json"
	states = append(states, filepath.Join(base, "smi", smiState))
	for _, p := range states {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clear the previous lab's state: %w", err)
		}
	}
	return nil
}

// hostUnits are the services of a host: none when idle or without cgroups.
func (l *Lab) hostUnits(h Host) (map[string]labsystemd.Unit, error) {
	units := map[string]labsystemd.Unit{}
	if l.NoServices != "" || !leftoversLike(h.Scenario) {
		return units, nil
	}
	py, err := l.holderAs("python3")
	if err != nil {
		return nil, err
	}
	dev := func(n string) string { return filepath.Join(h.DevDir, n) }
	units[UnitVLLM] = labsystemd.Unit{
		Description: "vLLM embedding server (lab)",
		Exec:        []string{py, "--dev", dev("nvidia0"), "--dev", dev("nvidiactl"), "--dev", dev("nvidia-uvm"), "--mem-mib", "10240"},
		KillMode:    labsystemd.KillControlGroup, StopTimeout: "10s",
	}
	if h.Scenario == ScenarioLeftovers {
		units[UnitSGLang] = labsystemd.Unit{
			Description: "SGLang Qwen server (lab)",
			Exec:        []string{py, "--dev", dev("nvidia3"), "--dev", dev("nvidiactl"), "--dev", dev("nvidia-uvm"), "--mem-mib", "2048", "--child-mem-mib", "8192"},
			KillMode:    labsystemd.KillProcess, StopTimeout: "10s",
		}
	}
	return units, nil
}

// leftoversLike: the scenario runs the leftovers' processes and services
// (ScenarioLeftovers, ScenarioRespawn).
func leftoversLike(scenario string) bool {
	return scenario == ScenarioLeftovers || scenario == ScenarioRespawn
}

// RespawnDelay is how long the lab's supervisor waits before it restarts
// its worker (a real CUDA worker needs seconds more before it opens the
// device: the lab's holder opens it at once).
const RespawnDelay = "0.3"

// unitGPU is the GPU a lab unit holds.
var unitGPU = map[string]int{UnitVLLM: 0, UnitSGLang: 3}

// setupCgroups picks the lab's cgroup base and checks that cgroups can be
// created there; when they cannot, the hosts run no services.
func (l *Lab) setupCgroups() {
	l.cgroupBase = cgroupBaseFor(l.Dir, os.Getpid())
	if err := labsystemd.Writable(labsystemd.DefaultCgroupRoot, l.cgroupBase); err != nil {
		l.NoServices = err.Error()
		fmt.Fprintf(l.opts.Log, "lab: hosts run no services: %v\n", err)
		return
	}
	l.cgroups, _ = labsystemd.Hierarchies(labsystemd.DefaultCgroupRoot)
}

// cgroupBaseFor is the cgroup base of the lab in dir run by process pid.
func cgroupBaseFor(dir string, pid int) string {
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, filepath.Base(dir))
	return fmt.Sprintf("/gpush-lab/%s-%d", id, pid)
}

// startUnit starts a host's service through its systemctl and records the
// main process and its worker once they say ready in the unit's log.
func (l *Lab) startUnit(ctx context.Context, h Host, unit string) error {
	// With the host's whole view (its /proc too): fake-systemctl reads
	// /proc/PID of the pids it starts.
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, h.Systemctl, "start", unit)
	if in := l.inits[h.Name]; in != nil {
		cmd = exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(in.PID), "--pid", "--mount", "--", h.Systemctl, "start", unit)
		// nsenter forks the systemctl into the namespace: cut off, both go
		// (and the child is reaped), not nsenter alone.
		cmd.Cancel = func() error { return labsystemd.KillForker(cmd.Process) }
		cmd.WaitDelay = 5 * time.Second
	}
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = labEnv()
	// The unit's log is its journal: it keeps what earlier starts (an
	// earlier lab in this folder) wrote. Only what this start adds counts.
	logPath := filepath.Join(filepath.Dir(h.Systemctl), "state", unit+".log")
	from, err := fileSize(logPath)
	if err != nil {
		return fmt.Errorf("lab host %s: %s: %w", h.Name, unit, err)
	}
	if err = cmd.Start(); err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return fmt.Errorf("lab host %s: systemctl start %s: %w: %s", h.Name, unit, err, strings.TrimSpace(out.String()))
	}
	want := 1
	if unit == UnitSGLang {
		want = 2
	}
	var pids []int
	for {
		text, err := completeLinesFrom(logPath, from)
		if err != nil {
			return fmt.Errorf("lab host %s: %s: %w", h.Name, unit, err)
		}
		pids = labgpu.ReadyPIDs(text)
		if len(pids) >= want {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab host %s: %s not ready (%d of %d ready lines in %s): %w", h.Name, unit, len(pids), want, logPath, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	for i, pid := range pids[:want] {
		role := RoleServiceMain
		if i > 0 {
			role = RoleServiceChild
		}
		pid, err := l.machinePID(h, unit, pid)
		if err != nil {
			return err
		}
		p := &proc{Proc: Proc{Host: h.Name, Role: role, GPU: unitGPU[unit], PID: pid, Unit: unit}}
		p.StartTime, _ = StartTime(pid)
		l.add(p)
	}
	return nil
}

// fileSize is the size of path, 0 when it does not exist yet.
func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// completeLinesFrom returns the whole lines of path after byte offset from:
// a line still being written is left for the next read, so that half of a
// "ready <pid>" line never passes for a shorter pid.
func completeLinesFrom(path string, from int64) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, 1<<40))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return string(b[:bytes.LastIndexByte(b, '\n')+1]), nil
}

func linkOrCopy(src, dst string) error {
	os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return nil
}

// holderAs returns the holder binary under a process name (comm is taken
// from the executed file's name): python3 for workers, nvidia-persistenced
// for the protected daemon.
func (l *Lab) holderAs(name string) (string, error) { return l.binAs(l.bin.Holder, name) }

// binAs returns bin linked (or copied) under a process name in bin/as.
func (l *Lab) binAs(bin, name string) (string, error) {
	p := filepath.Join(l.Dir, "bin", "as", name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	if err := linkOrCopy(bin, p); err != nil {
		return "", err
	}
	return p, nil
}

func (l *Lab) startProcs(ctx context.Context, h Host) error {
	dev := func(n string) string { return filepath.Join(h.DevDir, n) }
	gpuDev := func(i int) string { return dev(fmt.Sprintf("nvidia%d", i)) }
	type spec struct {
		role, as string
		gpu      int
		args     []string
		other    bool // runs as Options.OtherUser
	}
	specs := []spec{
		{RolePersistenced, "nvidia-persistenced", -1, []string{"--dev", dev("nvidiactl")}, false},
		{RoleUnrelated, "log-shipper", -1, []string{"--dev", filepath.Join(filepath.Dir(h.DevDir), "unrelated.log")}, false},
	}
	uvm := []string{"--dev", dev("nvidiactl"), "--dev", dev("nvidia-uvm")}
	if leftoversLike(h.Scenario) && len(h.Services) == 0 {
		specs = append(specs, spec{RoleWorker, "python3", 0, append([]string{"--dev", gpuDev(0), "--mem-mib", "10240"}, uvm...), false})
	}
	if leftoversLike(h.Scenario) {
		mon := []string{"--dev", dev("nvidiactl")}
		for i := 0; i < l.opts.GPUs; i++ {
			mon = append(mon, "--dev", gpuDev(i))
		}
		specs = append(specs,
			spec{RoleOrphanParent, "python3", 1, append([]string{"--dev", gpuDev(1), "--mem-mib", "3072", "--child-mem-mib", "6144"}, uvm...), true},
			spec{RoleTermIgnorer, "python3", 2, append([]string{"--dev", gpuDev(2), "--mem-mib", "4096", "--ignore-term"}, uvm...), true},
			spec{RoleMonitor, "nvitop", -1, mon, false},
		)
	}
	for _, s := range specs {
		bin, err := l.holderAs(s.as)
		if err != nil {
			return fmt.Errorf("lab host %s: %w", h.Name, err)
		}
		var cred *syscall.Credential
		if s.other {
			cred = l.other
		}
		pids, cmd, err := startHolder(ctx, bin, s.args, cred, func(c *exec.Cmd) error { return l.startIn(h, c) })
		if err != nil {
			return fmt.Errorf("lab host %s: start %s: %w", h.Name, s.role, err)
		}
		p := &proc{Proc: Proc{Host: h.Name, Role: s.role, GPU: s.gpu, PID: pids[0]}, exited: reap(cmd)}
		p.StartTime, _ = StartTime(p.PID)
		l.add(p)
		if s.role == RoleOrphanParent {
			if len(pids) < 2 {
				return fmt.Errorf("lab host %s: gpu-holder --child-mem-mib printed no child pid", h.Name)
			}
			c := &proc{Proc: Proc{Host: h.Name, Role: RoleOrphan, GPU: s.gpu, PID: pids[1]}}
			c.StartTime, _ = StartTime(c.PID)
			l.add(c)
			// Kill the parent so that its worker lives on re-parented: the
			// orphaned-worker case seen on real hosts.
			cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
	}
	if h.Scenario == ScenarioRespawn {
		bin, err := l.holderAs("python3")
		if err != nil {
			return fmt.Errorf("lab host %s: %w", h.Name, err)
		}
		loop := `while :; do "$@"; sleep ` + RespawnDelay + `; done`
		cmd := exec.Command("/bin/sh", append([]string{"-c", loop, "supervisor", bin, "--dev", gpuDev(3), "--mem-mib", "2048"}, uvm...)...)
		if err := l.startSupervisor(ctx, h, 3, cmd); err != nil {
			return fmt.Errorf("lab host %s: %w", h.Name, err)
		}
	}
	if h.Scenario == ScenarioRestarters {
		if err := l.startRestarter(ctx, h, append([]string{"--dev", gpuDev(0), "--mem-mib", "8192"}, uvm...)); err != nil {
			return fmt.Errorf("lab host %s: %w", h.Name, err)
		}
	}
	for _, u := range h.Services {
		if err := l.startUnit(ctx, h, u); err != nil {
			return err
		}
	}
	if h.Container != "" {
		info, _ := Scenario(h.Scenario)
		if err := l.startContainer(ctx, h, info.MinGPUs); err != nil {
			return fmt.Errorf("lab host %s: %w", h.Name, err)
		}
	}
	return nil
}

// startHolder starts a gpu-holder in its own process group (through start)
// and returns the pids of its "ready <pid>" lines (itself, then its child
// or keeper if any).
func startHolder(ctx context.Context, bin string, args []string, cred *syscall.Credential, start func(*exec.Cmd) error) ([]int, *exec.Cmd, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.Env = labEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := start(cmd); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", bin, err)
	}
	want := 1
	for i, a := range args {
		if a == "--child-mem-mib" && i+1 < len(args) || a == "--keeper" {
			want = 2
		}
	}
	type res struct {
		pids []int
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		var pids []int
		sc := bufio.NewScanner(out)
		for len(pids) < want && sc.Scan() {
			if pid, ok := labgpu.ReadyPID(sc.Text()); ok {
				pids = append(pids, pid)
			}
		}
		if len(pids) < want {
			ch <- res{err: fmt.Errorf("%s exited before ready (%v)", bin, sc.Err())}
			return
		}
		ch <- res{pids: pids}
		io.Copy(io.Discard, out) // keep draining so the holder never blocks on stdout
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, nil, r.err
		}
		return r.pids, cmd, nil
	case <-ctx.Done():
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("waiting for %s to be ready: %w", bin, ctx.Err())
	}
}

// startRestarter starts h's restarter (lab/cmd/restarter, of kind
// h.Restarter) with a python3 gpu-holder of GPU 0 as its worker.
func (l *Lab) startRestarter(ctx context.Context, h Host, workerArgs []string) error {
	worker, err := l.holderAs("python3")
	if err != nil {
		return err
	}
	bin := l.bin.Restarter
	args := []string{"-kind", h.Restarter, "-scale", strconv.FormatFloat(l.opts.RestartScale, 'g', -1, 64)}
	if l.NoServices == "" {
		// In the lab's cgroup subtree, with all it starts: Stop empties it.
		var procs []string
		for _, hier := range l.cgroups {
			dir := filepath.Join(hier, l.cgroupBase, h.Name, "restarter")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("restarter cgroup: %w", err)
			}
			procs = append(procs, filepath.Join(dir, "cgroup.procs"))
		}
		args = append(args, "-join", strings.Join(procs, ","))
	}
	if h.Restarter == RestarterKube {
		// comm kubelet, as the node's agent is named.
		if bin, err = l.binAs(l.bin.Restarter, "kubelet"); err != nil {
			return err
		}
		args = append(args, "-cgroup-parent", l.cgroupBase+"/"+h.Name, "-hierarchies", strings.Join(l.cgroups, ","),
			"-root", h.RootDir, "-pod-uid", PodUID(l.hostNumber(h)), "-namespace", PodNamespace, "-pod", PodName, "-container", PodContainer)
	}
	cmd := exec.Command(bin, append(append(args, "--", worker), workerArgs...)...)
	if err := l.startSupervisor(ctx, h, 0, cmd); err != nil {
		return fmt.Errorf("%s restarter: %w", h.Restarter, err)
	}
	return nil
}

// hostNumber is h's 1-based place among the lab's hosts.
func (l *Lab) hostNumber(h Host) int {
	for i, o := range l.Hosts {
		if o.Name == h.Name {
			return i + 1
		}
	}
	return 0
}

// startSupervisor starts cmd, a supervisor (a shell loop, a restarter)
// that restarts a holder whenever it exits, in its own process group,
// which its holders share, and records every holder it starts (their
// "ready <pid>" lines on its stdout) as a respawner. It returns once the
// first one is ready.
func (l *Lab) startSupervisor(ctx context.Context, h Host, gpu int, cmd *exec.Cmd) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = labEnv()
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	err = l.startIn(h, cmd)
	w.Close() // the loop and its holders keep the write end
	if err != nil {
		r.Close()
		return fmt.Errorf("supervisor: %w", err)
	}
	sup := &proc{Proc: Proc{Host: h.Name, Role: RoleSupervisor, GPU: -1, PID: cmd.Process.Pid, Restarter: h.Restarter}, exited: reap(cmd)}
	sup.StartTime, _ = StartTime(sup.PID)
	l.add(sup)
	ready := make(chan struct{})
	go func() {
		// Runs until every process of the group has closed the pipe.
		defer r.Close()
		sc := bufio.NewScanner(r)
		first := true
		for sc.Scan() {
			pid, ok := labgpu.ReadyPID(sc.Text())
			if !ok {
				continue
			}
			p := &proc{Proc: Proc{Host: h.Name, Role: RoleRespawner, GPU: gpu, PID: pid, Restarter: h.Restarter}}
			p.StartTime, _ = StartTime(pid)
			l.add(p)
			if first {
				first = false
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
		return nil
	case <-sup.exited:
		return errors.New("supervisor exited before its worker was ready")
	case <-ctx.Done():
		syscall.Kill(-sup.PID, syscall.SIGKILL)
		return fmt.Errorf("waiting for the supervisor's worker: %w", ctx.Err())
	}
}

func (l *Lab) add(p *proc) {
	if p.HostPID == 0 {
		p.HostPID = labns.HostPID(p.PID)
	}
	p.UID = procUID(p.PID)
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
}

// Procs lists every process the lab started (respawned ones included),
// dead or alive.
func (l *Lab) Procs() []Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Proc, 0, len(l.procs))
	for _, p := range l.procs {
		out = append(out, p.Proc)
	}
	return out
}

// Find returns the processes of a host with a role.
func (l *Lab) Find(host, role string) []Proc {
	var out []Proc
	for _, p := range l.Procs() {
		if p.Host == host && p.Role == role {
			out = append(out, p)
		}
	}
	return out
}

// Alive reports whether the process still runs with the same identity (a
// reused pid does not count); zombies count as dead.
func Alive(p Proc) bool {
	st, err := procstat.Read(p.PID)
	return err == nil && st.StartTime == p.StartTime && !st.Exited()
}

// StartTime reads field 22 of /proc/PID/stat (clock ticks since boot).
func StartTime(pid int) (uint64, error) {
	st, err := procstat.Read(pid)
	return st.StartTime, err
}

// writeFiles writes the inventory, known_hosts and an ssh_config.
func (l *Lab) writeFiles(unreachable int) error {
	port := l.SSHD.Port
	hosts := map[string]any{}
	for _, h := range l.Hosts {
		hosts[h.Name] = map[string]any{
			"gpush_dev_dir":    h.DevDir,
			"gpush_nvidia_smi": h.SMI,
			"gpush_systemctl":  h.Systemctl,
			"gpush_root_dir":   h.RootDir,
			"lab_scenario":     h.Scenario,
		}
		if h.Port != port {
			hosts[h.Name].(map[string]any)["ansible_port"] = h.Port
		}
		if len(h.Services) > 0 {
			hosts[h.Name].(map[string]any)["services"] = h.Services
		}
	}
	// The connection vars sit on the lab's groups, not on all: another
	// lab's inventory merged with this one keeps its own.
	conn := func() map[string]any {
		return map[string]any{
			"ansible_host":                 "127.0.0.1",
			"ansible_port":                 port,
			"ansible_user":                 l.User,
			"ansible_ssh_private_key_file": l.ClientKey,
			"gpush_remote_dir":             filepath.Join(l.Dir, "remote"),
		}
	}
	prefix := l.opts.Prefix
	children := map[string]any{prefix: map[string]any{"vars": conn(), "hosts": hosts}}
	if unreachable > 0 {
		closed, err := closedPort()
		if err != nil {
			return err
		}
		down := map[string]any{}
		for i := 1; i <= unreachable; i++ {
			down[downName(prefix, i)] = map[string]any{"ansible_port": closed}
		}
		group := "down"
		if prefix != DefaultPrefix {
			group = prefix + "-down"
		}
		children[group] = map[string]any{"vars": conn(), "hosts": down}
	}
	inv := map[string]any{"all": map[string]any{"children": children}}
	b, err := yaml.Marshal(inv)
	if err != nil {
		return fmt.Errorf("lab inventory: %w", err)
	}
	l.Inventory = filepath.Join(l.Dir, "inventory.yaml")
	if err := os.WriteFile(l.Inventory, append([]byte("# gpush lab inventory (generated)\n"), b...), 0o644); err != nil {
		return fmt.Errorf("lab inventory: %w", err)
	}
	l.KnownHosts = filepath.Join(l.Dir, "known_hosts")
	// The same host key answers on the sshd's port and every proxy's.
	names := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	for _, p := range l.proxies {
		names = append(names, p.Addr())
	}
	if err := os.WriteFile(l.KnownHosts, []byte(l.SSHD.KnownHostsLine(names...)+"\n"), 0o644); err != nil {
		return fmt.Errorf("lab known_hosts: %w", err)
	}
	var sc strings.Builder
	for _, h := range l.Hosts {
		fmt.Fprintf(&sc, "Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n",
			h.Name, h.Port, l.User, l.ClientKey, l.KnownHosts)
	}
	l.SSHConfig = filepath.Join(l.Dir, "ssh_config")
	if err := os.WriteFile(l.SSHConfig, []byte(sc.String()), 0o644); err != nil {
		return fmt.Errorf("lab ssh_config: %w", err)
	}
	return nil
}

// closedPort returns a loopback port nothing listens on (bound, then closed).
func closedPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("lab: find a closed port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port, nil
}

// Stop kills every process the lab started (by identity, so a reused pid is
// never hit) and whatever is left in the lab's cgroups (a service restarted
// during the run), removes those cgroups, stops the sshd and keeps Dir for
// inspection.
func (l *Lab) Stop() error {
	var errs []error
	l.stop.Do(func() {
		close(l.stopCh)
		l.wg.Wait()
		l.mu.Lock()
		procs := append([]*proc(nil), l.procs...)
		l.mu.Unlock()
		// Containers first, by name: their runtime restarts a killed
		// worker.
		if err := l.removeContainers(); err != nil {
			errs = append(errs, err)
		}
		// A supervisor goes with its group first, so that it starts no
		// worker the lab has not seen.
		for _, p := range procs {
			if p.Role == RoleSupervisor && Alive(p.Proc) {
				syscall.Kill(-p.PID, syscall.SIGKILL)
			}
		}
		l.mu.Lock()
		procs = append([]*proc(nil), l.procs...)
		l.mu.Unlock()
		for _, p := range procs {
			if Alive(p.Proc) {
				syscall.Kill(p.PID, syscall.SIGKILL)
			}
			if p.exited != nil {
				<-p.exited
			}
		}
		if len(l.cgroups) > 0 {
			if left := labsystemd.KillTree(l.cgroups, l.cgroupBase, 10*time.Second); len(left) > 0 {
				errs = append(errs, fmt.Errorf("lab: processes %v still alive in cgroup %s", left, l.cgroupBase))
			}
			for _, h := range l.cgroups {
				if err := labsystemd.RemoveTree(h, l.cgroupBase); err != nil {
					errs = append(errs, fmt.Errorf("lab: %w", err))
				}
				// The shared parent goes too when no other lab uses it.
				labsystemd.Prune(filepath.Join(h, filepath.Dir(l.cgroupBase)), h)
			}
			if l.Podman != nil {
				errs = append(errs, removeControllerTrees(l.cgroups, l.cgroupBase)...)
			}
		}
		// A host's init last: its namespace dies with it, and whatever a
		// session left there (a gpush run killed midway) with it.
		for _, in := range l.inits {
			in.Stop()
		}
		// Proxies go before the sshd: no session is cut mid-stream by it.
		for _, p := range l.proxies {
			p.Close()
		}
		if l.SSHD != nil {
			if err := l.SSHD.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("lab: stop sshd: %w", err))
			}
		}
		if err := l.awaitOwnExes(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
		// Last: the folder is free for another lab only once nothing of
		// this one runs.
		if l.lock != nil {
			unlockDir(l.lock)
		}
	})
	return errors.Join(errs...)
}

// awaitOwnExes waits until no process runs an executable from the lab's
// folder (a helper that sessions left, winding down after its EOF; a fake
// nvidia-smi it started), then kills what is left: those are the lab's by
// construction, nothing else runs programs from its private folder. A
// process writing there after Stop made the caller's removal of the folder
// fail ("directory not empty").
func (l *Lab) awaitOwnExes(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		left := l.ownExes()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				syscall.Kill(p, syscall.SIGKILL)
			}
			return fmt.Errorf("lab: processes %v still ran programs from %s %s after Stop; killed", left, l.Dir, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownExes lists the live processes whose executable lies under l.Dir.
func (l *Lab) ownExes() []int { return exesUnder(l.Dir) }

// exesUnder lists the live processes whose executable lies under dir.
func exesUnder(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	prefix := dir + string(filepath.Separator)
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil || !strings.HasPrefix(exe, prefix) {
			continue
		}
		if st, err := procstat.Read(pid); err == nil && !st.Exited() {
			out = append(out, pid)
		}
	}
	return out
}

// HelperArches are the architectures BuildGpush embeds a helper for:
// remote/helperbin's Arches (the lab does not link the embedded helpers).
var HelperArches = []string{"amd64", "arm64"}

// ModuleRoot returns the folder of the gpush module source (go.mod's dir).
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/gpush/gpush").Output()
	if err != nil {
		return "", fmt.Errorf("find the gpush module source (run from inside it): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// helperSidecar writes bin's FILE.sha256 ("HEX SIZE", as `make helpers`
// does) beside it and returns its path.
func helperSidecar(bin string) (string, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	side := bin + ".sha256"
	if err := os.WriteFile(side, fmt.Appendf(nil, "%x %d\n", sum, len(b)), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", side, err)
	}
	return side, nil
}

// BuildGpush builds gpush to out with a static gpush-helper for every
// architecture embedded (HelperArches), as `make build` does, but without
// writing into the source tree: the helpers go beside out, and `go build
// -overlay` puts them where gpush's go:embed reads them.
func BuildGpush(ctx context.Context, out string) error {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	out, err = filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// Every architecture gpush embeds (helperbin.Arches), as `make build`
	// does: a gpush missing one builds it from the module source when a
	// host asks, and that `go build` (with a test's empty HOME, the whole
	// standard library) outlived the gpush run and wrote into the test's
	// folders.
	replace := map[string]string{}
	for _, arch := range HelperArches {
		name := "gpush-helper-linux-" + arch
		helperOut := filepath.Join(filepath.Dir(out), name)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", helperOut, "./cmd/gpush-helper")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build gpush-helper linux/%s: %w\n%s", arch, err, b)
		}
		replace[filepath.Join(root, "remote", "helperbin", "bin", name)] = helperOut
		// The digest sidecar too: helperbin trusts the tree's one when it
		// names the embedded size, and an earlier `make build`'s helper
		// can have this one's size (a free then uploaded one helper and
		// checked for another).
		side, err := helperSidecar(helperOut)
		if err != nil {
			return err
		}
		replace[filepath.Join(root, "remote", "helperbin", "bin", name+".sha256")] = side
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return err
	}
	overlayPath := out + ".overlay.json"
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", overlayPath, err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-overlay", overlayPath, "-o", out, "./cmd/gpush")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build gpush: %w\n%s", err, b)
	}
	return nil
}
