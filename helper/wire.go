// Package helper is the host-side half of gpush: it finds the processes that
// hold NVIDIA devices, reads GPU memory, kills holders by identity, waits for
// GPUs to be free and drives systemd units. It runs ON the GPU host inside the
// static gpush-helper binary; the controller talks to it with the JSON wire
// types in this file (one request on stdin, one response on stdout).
package helper

import (
	"encoding/json"
	"fmt"
	"time"
)

// Version is the helper's version. It is stamped into every response and is
// part of the content address under which the controller deploys the binary.
var Version = "0.1.0"

// Verbs the helper answers.
const (
	VerbSnapshot = "snapshot"
	VerbKill     = "kill"
	VerbWaitFree = "wait-free"
	VerbUnit     = "unit"
	VerbManagers = "managers"
)

// Duration is a time.Duration that travels as a Go duration string ("5s",
// "150ms"); a bare JSON number is read as seconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string such as "1.5s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts "1.5s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("duration must be a string like \"5s\" or a number of seconds, got %s", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// Config says where things are on the host. Every request carries one; the
// zero value means the real defaults (/dev, nvidia-smi on PATH, ...).
type Config struct {
	// DevDir is where the NVIDIA device nodes live (default /dev). The lab
	// points it at a folder of fake device files.
	DevDir string `json:"dev_dir,omitempty"`
	// NvidiaSMI is the nvidia-smi to run (default: PATH, then /usr/bin,
	// /usr/local/nvidia/bin).
	NvidiaSMI string `json:"nvidia_smi,omitempty"`
	// ProcDir is the proc filesystem (default /proc); tests only.
	ProcDir string `json:"proc_dir,omitempty"`
	// DriverDir is the driver's proc folder (default ProcDir/driver/nvidia),
	// whose gpus/*/information files map /dev/nvidiaN to GPUs. The lab points
	// it at fake information files (GPUs nvidia-smi does not list).
	DriverDir string `json:"driver_dir,omitempty"`
	// RootDir is where the host's container metadata is read from
	// (var/log/pods, var/log/containers, var/lib/docker/containers,
	// var/lib/containers/storage below it; default /). Tests point it at a
	// folder of their own.
	RootDir string `json:"root_dir,omitempty"`
	// Protected adds process names (comm or argv[0] base, globs allowed) that
	// are never signalled unless a request forces it.
	Protected []string `json:"protected,omitempty"`
	// SMITimeout bounds every nvidia-smi call (default 10s).
	SMITimeout Duration `json:"smi_timeout,omitempty"`
	// Systemctl is the systemctl to run for the unit verb. When set, it is
	// used as is and /run/systemd/system is not required (an operator's
	// override; the lab points it at its stand-in). Default: systemctl on
	// PATH, then /usr/bin, /bin, on a host that runs systemd.
	Systemctl string `json:"systemctl,omitempty"`
}

// GPU is one device as nvidia-smi reports it. Memory is in MiB; -1 means the
// driver did not say ([N/A], [Not Supported]).
type GPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	BusID       string `json:"bus_id"`
	Minor       int    `json:"minor"` // /dev/nvidiaN's N; -1 when unknown
	MemUsedMiB  int64  `json:"mem_used_mib"`
	MemTotalMiB int64  `json:"mem_total_mib"`
	// MemUnread is what nvidia-smi printed instead of memory.used (else
	// memory.total) when it gave no number: "[Not Supported]" (this GPU or
	// its mode never reports it) and "[N/A]" (no reading now) mean
	// different things; "" when both were read, or not read from nvidia-smi.
	MemUnread string `json:"mem_unread,omitempty"`
	// Source says where the GPU is known from: "nvidia-smi" (listed, memory
	// read), "driver" (/proc/driver/nvidia only: nvidia-smi missing, failing
	// or not listing it) or "device" (only a held /dev/nvidiaN names it).
	// A GPU not listed by nvidia-smi has unknown memory (-1) and is never free.
	Source string `json:"source"`
}

// GPU sources.
const (
	SourceSMI    = "nvidia-smi"
	SourceDriver = "driver"
	SourceDevice = "device"
)

// Identity names one process for its whole life: a PID is reused, a PID with
// its start time (clock ticks since boot) on one boot is not.
type Identity struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	BootID    string `json:"boot_id"`
}

// Holder is a process with an NVIDIA device open.
type Holder struct {
	Identity
	PPID    int      `json:"ppid"`
	PGID    int      `json:"pgid"`
	SID     int      `json:"sid"`
	UID     int      `json:"uid"`
	User    string   `json:"user"`
	Comm    string   `json:"comm"`
	Cmdline []string `json:"cmdline"`
	State   string   `json:"state"` // R, S, D, Z, T, ...
	// AgeSeconds is how long the process has run.
	AgeSeconds float64 `json:"age_s"`
	// GPUs are the indices of the GPUs whose /dev/nvidiaN it holds.
	GPUs []int `json:"gpus"`
	// Devices are the device paths it holds, relative to DevDir
	// ("nvidia0", "nvidiactl", "nvidia-caps/nvidia-cap1").
	Devices []string `json:"devices"`
	// SharedOnly: it holds only nvidiactl/nvidia-uvm/nvidia-caps, no GPU.
	SharedOnly bool `json:"shared_only"`
	// MemMiB is its GPU memory from --query-compute-apps (0 if not listed,
	// -1 if listed with an unknown amount); MemByGPU splits it per GPU index.
	MemMiB   int64         `json:"mem_mib"`
	MemByGPU map[int]int64 `json:"mem_by_gpu,omitempty"`
	// Owner: it owns GPU memory or a compute context (nvidia-smi lists it
	// as a compute app, or it has nvidia-uvm open). Holders that are not
	// owners (monitors, NVML clients, a child that inherited the fds) are
	// killed only while memory stays held after the owners are gone.
	Owner bool `json:"owner"`
	// OwnerWhy says what made it an owner: "listed by nvidia-smi", "maps
	// nvidiactl, nvidia0 (a CUDA context) but nvidia-smi does not list it",
	// "has nvidia-uvm open (nvidia-smi cannot list compute apps)".
	OwnerWhy string `json:"owner_why,omitempty"`
	// Suspicious is set when a process with a protected name behaves like a
	// worker (owns memory or has nvidia-uvm open): protection by name can be
	// spoofed. It is still not killed without force, and its GPUs are not free.
	Suspicious string `json:"suspicious,omitempty"`
	// ZombieLeader: its main thread has exited (state Z) while other threads
	// still hold the devices (found through /proc/PID/task/TID/fd).
	ZombieLeader bool `json:"zombie_leader,omitempty"`
	// Unit is the systemd service or scope the process runs in (from
	// /proc/PID/cgroup); never a container's scope (docker-ID.scope).
	Unit string `json:"unit,omitempty"`
	// Container is the container the process runs in, by its short id (12
	// hex, as docker ps and crictl print it; an LXC container by its name);
	// ContainerID is the full id. Runtime says whose: docker, containerd,
	// cri-o, podman, lxc, or cri (a Kubernetes container of a runtime its
	// cgroup does not name).
	Container   string `json:"container,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
	Runtime     string `json:"runtime,omitempty"`
	// ContainerName, Pod and Namespace are named from what the runtimes and
	// the kubelet leave on the host (no API server): /var/log/containers,
	// /var/log/pods, docker's and podman's container configs. PodUID comes
	// from the cgroup path (kubepods...pod<uid>), PodQoS too.
	ContainerName string `json:"container_name,omitempty"`
	PodUID        string `json:"pod_uid,omitempty"`
	Pod           string `json:"pod,omitempty"`
	Namespace     string `json:"namespace,omitempty"`
	PodQoS        string `json:"pod_qos,omitempty"`
	Cgroup        string `json:"cgroup,omitempty"`
	NSpid         []int  `json:"nspid,omitempty"`
	Protected     bool   `json:"protected"`
	// Managers is the chain from the holder up to what would start it
	// again, innermost first (see Manager); empty when nothing does.
	Managers []Manager `json:"managers,omitempty"`
	// ProtectedWhy says which rule protects it (a name, "pid 1", "ancestor of the helper").
	ProtectedWhy string `json:"protected_why,omitempty"`
}

// SnapshotRequest asks for the GPUs and their holders.
type SnapshotRequest struct {
	Config
}

// Snapshot is the state of one host's GPUs.
type Snapshot struct {
	Version  string    `json:"version"`
	Hostname string    `json:"hostname"`
	BootID   string    `json:"boot_id"`
	Time     time.Time `json:"time"`
	// SMI is false when nvidia-smi is missing or failed; Warnings says why.
	SMI     bool     `json:"smi"`
	GPUs    []GPU    `json:"gpus"`
	Holders []Holder `json:"holders"`
	// Ghosts: memory nvidia-smi charges to pids that no longer exist.
	Ghosts []Ghost `json:"ghosts,omitempty"`
	// Status is Assess of GPUs and Holders at the idle baseline.
	Status   []GPUStatus `json:"status"`
	Warnings []string    `json:"warnings,omitempty"`
}

// Ghost is GPU memory nvidia-smi charges to a pid that no longer exists on
// this host (the helper runs in the host's PID namespace): a forked child
// that inherited the device files keeps it alive. HeldBy are the live
// holders of that GPU that nvidia-smi does not list: the likely keepers.
type Ghost struct {
	PID    int    `json:"pid"`
	Name   string `json:"name"`
	GPU    int    `json:"gpu"`
	MemMiB int64  `json:"mem_mib"`
	// MemUnread is what nvidia-smi printed for its memory when MemMiB is
	// -1 ("[Not Supported]", "[N/A]").
	MemUnread string `json:"mem_unread,omitempty"`
	HeldBy    []int  `json:"held_by,omitempty"`
}

// GPU states, as Assess judges them.
const (
	GPUFree       = "free"        // at or under its threshold, no owner, nothing suspicious
	GPUHeld       = "held"        // owners (memory or a compute context) hold it
	GPUMemoryHeld = "memory-held" // over the threshold with no owner left; Others may keep it
	GPUProtected  = "protected"   // over the threshold, held only by protected processes (not killed)
	GPUSuspicious = "suspicious"  // a protected name behaving like a worker holds it
	GPUUnknown    = "unknown"     // its memory cannot be read (not listed, [N/A], no nvidia-smi)
	GPUNewHolder  = "new-holder"  // (wait-free) a holder that was not there at the start appeared
)

// GPUStatus is one GPU's state with the processes behind it, so that a
// script decides per GPU without re-deriving anything.
type GPUStatus struct {
	Index        int    `json:"index"`
	State        string `json:"state"`
	Reason       string `json:"reason,omitempty"`
	UsedMiB      int64  `json:"used_mib"`
	ThresholdMiB int64  `json:"threshold_mib"`
	// Owners: unprotected holders owning memory or a compute context on it.
	Owners []int `json:"owners,omitempty"`
	// Others: unprotected holders of its device owning nothing (monitors,
	// inherited fds): the second stage of a free, only while memory stays held.
	Others []int `json:"others,omitempty"`
	// Protected: protected holders of it (never signalled without force).
	Protected []int `json:"protected,omitempty"`
	// Suspicious: protected-name holders that behave like workers.
	Suspicious []int   `json:"suspicious,omitempty"`
	Ghosts     []Ghost `json:"ghosts,omitempty"`
	// Waiting (wait-free for given holders): those of them that still hold
	// this GPU, by its device file or memory charged to their pid.
	Waiting []int `json:"waiting,omitempty"`
}

// Manager kinds: what may start a GPU worker again after it is killed.
const (
	ManagerProcess   = "process"   // a live parent (supervisor, launcher, shell loop)
	ManagerUnit      = "unit"      // a systemd service
	ManagerContainer = "container" // a container runtime's restart policy
	ManagerPod       = "pod"       // the kubelet, for a Kubernetes pod
	ManagerSlurm     = "slurm"     // a Slurm job (its script, a requeue)
)

// What a manager does after its worker dies (Manager.Restarts).
const (
	RestartsYes   = "yes"   // it will (Restart=always, --restart=always, the kubelet, a requeue)
	RestartsMaybe = "maybe" // it may, and nothing on the host says it will not (a live parent)
	RestartsNo    = "no"    // it will not (Restart=no, --restart=no)
)

// Manager is one link of a holder's chain up to what would start it again:
// a live parent process, its systemd unit, its container's runtime, its
// Kubernetes pod, its Slurm job. Holder.Managers lists the chain innermost
// first; a kill reports the managers of what it killed, and a GPU is freed
// only when none that restarts is left alive (see VerbManagers).
type Manager struct {
	Kind string `json:"kind"`
	// Identity, Comm and Cmdline name a process manager.
	Identity
	Comm    string   `json:"comm,omitempty"`
	Cmdline []string `json:"cmdline,omitempty"`
	// Unit is the systemd service (a unit manager, or the unit a process
	// manager runs in); Restart its Restart=, RestartSec its RestartSec=,
	// ActiveState and SubState systemd's.
	Unit        string   `json:"unit,omitempty"`
	Restart     string   `json:"restart,omitempty"`
	RestartSec  Duration `json:"restart_sec,omitempty"`
	ActiveState string   `json:"active_state,omitempty"`
	SubState    string   `json:"sub_state,omitempty"`
	// A container manager: its runtime (podman, docker, ...), id, name,
	// restart policy and restart count, as the runtime's state says.
	Runtime       string `json:"runtime,omitempty"`
	ContainerID   string `json:"container_id,omitempty"`
	ContainerName string `json:"container_name,omitempty"`
	RestartPolicy string `json:"restart_policy,omitempty"`
	RestartCount  int    `json:"restart_count,omitempty"`
	// A pod manager: the pod's uid (from the cgroup), namespace and name
	// (from the kubelet's files on the node, when it left them).
	PodUID    string `json:"pod_uid,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	// Cgroup is the pod's or the container's cgroup folder (a pod is there
	// while it is; a container its runtime does not list is there while it is).
	Cgroup string `json:"cgroup,omitempty"`
	// A Slurm manager: the job, its user and the step the holder runs in;
	// Requeue when the job is requeued after it ends; JobState Slurm's
	// (RUNNING, PENDING, COMPLETING, CANCELLED, ...) and RestartCount its
	// Restarts= (times requeued), as scontrol says.
	JobID    string `json:"job_id,omitempty"`
	JobUser  string `json:"job_user,omitempty"`
	Step     string `json:"step,omitempty"`
	Requeue  bool   `json:"requeue,omitempty"`
	JobState string `json:"job_state,omitempty"`
	// Restarts says whether it starts the worker again (RestartsYes,
	// RestartsMaybe, RestartsNo).
	Restarts string `json:"restarts"`
	// Delay is how long it waits before a restart, when its settings or
	// state say (RestartSec, a runtime's or the kubelet's back-off);
	// DelayKnown is false when nothing says.
	Delay      Duration `json:"delay,omitempty"`
	DelayKnown bool     `json:"delay_known,omitempty"`
	// Stop is the command an operator runs to stop it ("systemctl stop
	// sglang.service", "podman stop w1", "scancel 42", "kill 633"): shown,
	// never run through a shell.
	Stop []string `json:"stop,omitempty"`
	// Children are the pids of killed holders it manages.
	Children []int `json:"children,omitempty"`
	// Why is one line for the report: "pid 633 (python3 train.py) restarts
	// its workers: kill 633".
	Why string `json:"why"`
}

// Key names a manager across readings: one process, unit, container, pod or job.
func (m Manager) Key() string {
	switch m.Kind {
	case ManagerUnit:
		return "unit:" + m.Unit
	case ManagerContainer:
		// The id when known: a reading fills in the name.
		if m.ContainerID != "" {
			return "container:" + m.Runtime + ":" + m.ContainerID
		}
		return "container:" + m.Runtime + ":" + m.ContainerName
	case ManagerPod:
		return "pod:" + m.PodUID
	case ManagerSlurm:
		return "slurm:" + m.JobID
	}
	return fmt.Sprintf("process:%d:%d", m.PID, m.StartTime)
}

// Kill outcomes.
const (
	OutcomeExited   = "exited"   // gone after TERM (or was gone already)
	OutcomeKilled   = "killed"   // needed KILL, now gone
	OutcomeSurvived = "survived" // still there after KILL (D state, ...)
	OutcomeSkipped  = "skipped"  // never signalled; Reason says why
	OutcomeWould    = "would-kill"
)

// KillRequest signals holders by identity: TERM (or Signal), wait Grace, then KILL.
type KillRequest struct {
	Config
	Targets []Identity `json:"targets"`
	// Signal is the first signal (default TERM).
	Signal string `json:"signal,omitempty"`
	// Grace is how long to wait after the first signal before KILL (default 5s).
	Grace Duration `json:"grace,omitempty"`
	// Group also signals each target's process group; Tree its descendants.
	Group bool `json:"group,omitempty"`
	Tree  bool `json:"tree,omitempty"`
	// Force allows protected processes (never pid<=1, the helper or its ancestors).
	Force bool `json:"force,omitempty"`
	// DryRun reports what would be signalled and signals nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// KillResult is what happened to one process.
type KillResult struct {
	Identity
	Comm    string   `json:"comm"`
	Outcome string   `json:"outcome"`
	State   string   `json:"state,omitempty"`  // for survived: the state it is stuck in
	Reason  string   `json:"reason,omitempty"` // for skipped and survived
	Signals []string `json:"signals,omitempty"`
	// SignalTimes: when each of Signals was sent, by the host's clock.
	SignalTimes []time.Time `json:"signal_times,omitempty"`
	// Via says why it was a target: "target", "group of PID", "child of PID".
	Via string `json:"via,omitempty"`
	// PPID is its parent when it was signalled.
	PPID int `json:"ppid,omitempty"`
}

// KillResponse lists one result per process considered.
type KillResponse struct {
	Version string       `json:"version"`
	Results []KillResult `json:"results"`
	// Managers: what may restart the processes just killed.
	Managers []Manager `json:"managers,omitempty"`
	// Since is the host's clock (ticks since boot, as Identity.StartTime)
	// when the request began: a process started later is not one it saw.
	Since   uint64   `json:"since,omitempty"`
	Elapsed Duration `json:"elapsed"`
}

// Wait-free outcomes.
const (
	WaitFreed      = "freed"
	WaitMemoryHeld = "memory-held" // no holder left, memory still used
	WaitNewHolder  = "new-holder"  // a process that was not there at the start holds a GPU
	WaitTimedOut   = "timed-out"   // holders still there at the deadline
	// A chosen GPU's memory cannot be read (not listed, [N/A], no
	// nvidia-smi): never free, and waiting cannot change that.
	WaitUnknown = "unknown"
	// Memory held only by protected processes (never killed without force).
	WaitProtected = "protected"
	// A protected name behaving like a worker holds a chosen GPU.
	WaitSuspicious = "suspicious"
	// The given holders (WaitFreeRequest.Holders) hold nothing any more.
	WaitReleased = "released"
)

// WaitFreeRequest polls until the chosen GPUs are free.
type WaitFreeRequest struct {
	Config
	// GPUs to watch (indices); empty means all.
	GPUs []int `json:"gpus,omitempty"`
	// ThresholdMiB: used memory at or under this counts as free. Nil means
	// the idle baseline (see BaselineMiB).
	ThresholdMiB *int64 `json:"threshold_mib,omitempty"`
	// Interval between polls (default 100ms); Timeout is the deadline (default 30s).
	Interval Duration `json:"interval,omitempty"`
	Timeout  Duration `json:"timeout,omitempty"`
	// IgnoreShared: holders of only nvidiactl/uvm do not block (default false).
	IgnoreShared bool `json:"ignore_shared,omitempty"`
	// Settle: once free, the GPUs must stay free this long (no new holder,
	// memory at baseline) before the outcome is freed. Used while something
	// that can restart a worker remains (Watch).
	Settle Duration `json:"settle,omitempty"`
	// Watch names what may restart a worker, for the reason when one comes back.
	Watch []Manager `json:"watch,omitempty"`
	// Holders, when given, changes what is waited for: until these
	// processes (by identity) no longer hold any NVIDIA device nor memory
	// nvidia-smi charges to their pid, whoever else holds the GPUs. GPUs
	// then defaults to the GPUs they held at the first poll. The outcome
	// is released; a worker a Watch supervisor starts in their place
	// during Settle ends it as new-holder.
	Holders []Identity `json:"holders,omitempty"`
	// NewSince (ticks since boot, as Identity.StartTime; a kill's Since):
	// a holder started at or after it is new whenever it is first seen,
	// the first poll included; an owner of a chosen GPU that is new this
	// way ends the wait at once as new-holder (a worker already restarted).
	NewSince uint64 `json:"new_since,omitempty"`
}

// Sample is one poll.
type Sample struct {
	T       Duration      `json:"t"` // since the request started
	UsedMiB map[int]int64 `json:"used_mib"`
	Holders int           `json:"holders"`
}

// WaitFreeResponse says whether and when the GPUs became free.
type WaitFreeResponse struct {
	Version  string   `json:"version"`
	OK       bool     `json:"ok"`
	Outcome  string   `json:"outcome"`
	Reason   string   `json:"reason,omitempty"`
	Elapsed  Duration `json:"elapsed"`
	Polls    int      `json:"polls"`
	Timeline []Sample `json:"timeline"`
	GPUs     []GPU    `json:"gpus"`
	Holders  []Holder `json:"holders"` // those still there at the end
	// ThresholdMiB per GPU index, as used.
	ThresholdMiB map[int]int64 `json:"threshold_mib"`
	// Status per chosen GPU at the end (Assess, plus new-holder).
	Status []GPUStatus `json:"status"`
	// Settled is how long the GPUs were watched after they first read free.
	Settled Duration `json:"settled,omitempty"`
}

// Unit actions.
const (
	UnitStop    = "stop"
	UnitStart   = "start"
	UnitRestart = "restart"
	UnitStatus  = "status"
)

// UnitRequest drives one systemd unit, or several at once.
type UnitRequest struct {
	Config
	Action string `json:"action"`
	Unit   string `json:"unit"`
	// Units, instead of Unit, acts on several units with one systemctl
	// show before, one action and one show after, and one snapshot for
	// their leftovers; the response's Units answers each in this order.
	Units []string `json:"units,omitempty"`
	// Timeout bounds the systemctl call (default 90s): each unit's action,
	// also in a call for several, whose jobs systemd runs side by side.
	Timeout Duration `json:"timeout,omitempty"`
}

// Proc is a process still alive in a unit's cgroup.
type Proc struct {
	Identity
	Comm    string   `json:"comm"`
	Cmdline []string `json:"cmdline"`
	State   string   `json:"state"`
}

// UnitResponse reports the unit after the action. For a request with
// Units, Units holds one response per unit; then Unit is empty, OK says
// whether every unit is ok, and Reason counts those that are not.
type UnitResponse struct {
	Version string `json:"version"`
	Unit    string `json:"unit"`
	Action  string `json:"action"`
	// Systemd is false on a host without systemd; Reason says so.
	Systemd bool   `json:"systemd"`
	OK      bool   `json:"ok"`
	Reason  string `json:"reason,omitempty"`
	// LoadState is systemd's: "loaded", "not-found" (no such unit: never
	// "stopped"), "masked", ...
	LoadState   string `json:"load_state,omitempty"`
	ActiveState string `json:"active_state,omitempty"`
	// PriorActiveState is its ActiveState before the action: a stop of a
	// unit inactive already changed nothing.
	PriorActiveState string `json:"prior_active_state,omitempty"`
	// KillMode is the unit's KillMode=: what its stop ends (control-group
	// and mixed: every process of its cgroup; process: its main process
	// only; none: nothing).
	KillMode string `json:"kill_mode,omitempty"`
	// Restart is the unit's Restart= ("no", "always", "on-failure", ...).
	Restart      string   `json:"restart,omitempty"`
	SubState     string   `json:"sub_state,omitempty"`
	MainPID      int      `json:"main_pid,omitempty"`
	ControlGroup string   `json:"control_group,omitempty"`
	Elapsed      Duration `json:"elapsed"`
	// Remaining: processes still in the unit's cgroup (after stop).
	Remaining []Proc `json:"remaining,omitempty"`
	// GPUHolders: GPU holders that belong to the unit (by cgroup).
	GPUHolders []Holder `json:"gpu_holders,omitempty"`
	// Units: the per-unit responses of a request with Units, in its order.
	Units []UnitResponse `json:"units,omitempty"`
}

// Manager actions.
const (
	ManagersStatus = "status"
	ManagersStop   = "stop"
)

// ManagersRequest reads the managers again (status) or stops them (stop):
// a unit with systemctl stop, a container with its runtime's stop, a Slurm
// job with scancel, a process with its tree (TERM, Grace, KILL). A pod is
// never stopped: deleting Kubernetes objects is the cluster's business.
type ManagersRequest struct {
	Config
	Action   string    `json:"action"`
	Managers []Manager `json:"managers"`
	// Grace is the TERM -> KILL grace of a process tree and the stop
	// timeout given to a container runtime (default 5s).
	Grace Duration `json:"grace,omitempty"`
	// DryRun (stop): say what would be stopped, stop nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// ManagerResult is one manager after the request.
type ManagerResult struct {
	// Manager as read now (its state, restart count and delay refreshed).
	Manager Manager `json:"manager"`
	// Alive: it is still there and may start a worker (a live process, an
	// active or restarting unit, a running or restarting container, a pod
	// whose cgroup is there, a job squeue still lists). Unknown reads as
	// alive: what cannot be told is never "gone".
	Alive bool `json:"alive"`
	// State is what the reading said ("active (auto-restart)", "running",
	// "RUNNING", "exited", "gone").
	State string `json:"state,omitempty"`
	// Outcome of a stop: stopped, would-stop, refused (a pod), failed;
	// Reason says why for refused and failed.
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Outcomes of a manager stop.
const (
	StopStopped = "stopped"
	StopWould   = "would-stop"
	StopRefused = "refused"
	StopFailed  = "failed"
	StopAlready = "gone" // not there any more: nothing to stop
)

// ManagersResponse answers each manager of the request, in its order.
type ManagersResponse struct {
	Version string          `json:"version"`
	Results []ManagerResult `json:"results"`
	Elapsed Duration        `json:"elapsed"`
}

// ErrorResponse is written instead of a response when a request cannot be
// served at all (bad JSON, unknown verb); the exit status is then non-zero.
type ErrorResponse struct {
	Version string `json:"version"`
	Error   string `json:"error"`
}
