package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// containerKind: a container's runtime, which starts the container again
// by its restart policy. Pods are podKind's: the kubelet, not the runtime,
// decides there. Podman and docker containers are read with their CLI's
// `container inspect` (one run for all of a request's containers of that
// runtime, in the environment the helper has: CONTAINERS_CONF and
// CONTAINERS_STORAGE_CONF point podman at another configuration or
// storage); docker's are read from the daemon's files when its CLI is not
// there or does not answer. Other runtimes' states are not read.
type containerKind struct{}

func (containerKind) find(r *managerReader, p procInfo) (Manager, bool) {
	ref := p.cg.Ref
	if ref.PodUID != "" || ref.ID == "" && ref.Name == "" {
		return Manager{}, false
	}
	m := Manager{Kind: ManagerContainer, Runtime: ref.Runtime, ContainerID: ref.ID, Restarts: RestartsMaybe,
		Cgroup: containerCgroup(p.cg.Path)}
	if ref.ID == "" {
		m.ContainerName = ref.Name
	}
	return m, true
}

// containerCgroup is the container's own folder in a cgroup path: the path
// up to the component that names the container.
func containerCgroup(path string) string {
	comps := strings.Split(path, "/")
	if _, at := findContainer(comps); at >= 0 {
		return strings.Join(comps[:at+1], "/")
	}
	return ""
}

// containerState is what a runtime says of one container.
type containerState struct {
	ID, Name string
	// Status is the runtime's word: running, paused, exited, created;
	// podman's "stopped" (the process ended, the cleanup that restarts it
	// by policy has not run yet), docker's "restarting" (waiting out its
	// back-off), removing, dead.
	Status       string
	Pid          int
	ExitCode     int
	StartedAt    time.Time
	RestartCount int
	// Policy is the restart policy (always, unless-stopped, on-failure,
	// no); MaxRetries on-failure's limit (0: none).
	Policy     string
	MaxRetries int
	// ManuallyStopped is docker's HasBeenManuallyStopped (docker stop):
	// its policy does not start it again.
	ManuallyStopped bool
	// Unread says why this container's state could not be read.
	Unread string
}

// inspectEntry is one container of `podman container inspect` and `docker
// container inspect`, which name alike what is read here.
type inspectEntry struct {
	ID           string `json:"Id"`
	Name         string
	RestartCount int
	State        struct {
		Status    string
		Pid       int
		ExitCode  int
		StartedAt string
	}
	HostConfig struct {
		RestartPolicy restartPolicyJSON
	}
}

type restartPolicyJSON struct {
	Name              string
	MaximumRetryCount int
}

func (e inspectEntry) state() containerState {
	return containerState{ID: e.ID, Name: strings.TrimPrefix(e.Name, "/"), Status: e.State.Status, Pid: e.State.Pid,
		ExitCode: e.State.ExitCode, StartedAt: parseRuntimeTime(e.State.StartedAt), RestartCount: e.RestartCount,
		Policy: e.HostConfig.RestartPolicy.Name, MaxRetries: e.HostConfig.RestartPolicy.MaximumRetryCount}
}

// parseRuntimeTime reads a runtime's RFC 3339 time; zero when unset
// ("0001-01-01T00:00:00Z") or unreadable.
func parseRuntimeTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// runtimeCLIDirs are where a runtime's CLI is looked for after PATH (a
// helper run over SSH may have a short PATH).
var runtimeCLIDirs = []string{"/usr/bin", "/usr/local/bin", "/bin"}

// runtimeCLI finds a runtime's CLI (podman, docker); tests replace it.
var runtimeCLI = func(name string) (string, string) {
	if p, err := exec.LookPath(name); err == nil {
		return p, ""
	}
	for _, d := range runtimeCLIDirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, ""
		}
	}
	return "", name + " not found on PATH or in " + strings.Join(runtimeCLIDirs, ", ")
}

// containerKey is what names m to its runtime: its id, else its name.
func containerKey(m Manager) string {
	if m.ContainerID != "" {
		return m.ContainerID
	}
	return m.ContainerName
}

// noSuchContainer: a runtime's error output says a container it was asked
// for does not exist (podman: "no such container"/"no such object",
// docker: "No such container:"/"No such object:").
func noSuchContainer(stderr []byte) bool {
	return strings.Contains(strings.ToLower(string(stderr)), "no such")
}

// inspectContainers runs `CLI container inspect KEY...` once and returns
// the containers it listed by the keys asked (a key missing: no such
// container). An error when nothing could be read: the command failed for
// another reason than a missing container, or printed no JSON.
func inspectContainers(ctx context.Context, cli string, keys []string) (map[string]containerState, error) {
	argv := append([]string{cli, "container", "inspect", "--"}, keys...)
	out, errb, err := runBounded(ctx, managerReadTimeout, argv)
	var list []inspectEntry
	if len(bytes.TrimSpace(out)) > 0 {
		if jerr := json.Unmarshal(out, &list); jerr != nil {
			return nil, fmt.Errorf("%s container inspect: %v: %.200q", filepath.Base(cli), jerr, out)
		}
	}
	if err != nil && !noSuchContainer(errb) {
		return nil, withOutput(err, errb)
	}
	states := make([]containerState, len(list))
	for i, e := range list {
		states[i] = e.state()
	}
	return matchContainers(keys, states), nil
}

// matchContainers maps each key to the container it names: its full id,
// its name or a prefix of its id (a short id).
func matchContainers(keys []string, states []containerState) map[string]containerState {
	out := map[string]containerState{}
	for _, k := range keys {
		for _, st := range states {
			if k != "" && (st.ID == k || st.Name == k || strings.HasPrefix(st.ID, k)) {
				out[k] = st
				break
			}
		}
	}
	return out
}

// readContainers reads the runtime's containers named by keys; source
// says where from. An error when none could be read (what then holds is
// not known).
func readContainers(r *managerReader, runtime string, keys []string) (states map[string]containerState, source string, err error) {
	switch runtime {
	case RuntimePodman:
		cli, why := runtimeCLI(RuntimePodman)
		if cli == "" {
			return nil, "", errors.New(why)
		}
		states, err := inspectContainers(r.ctx, cli, keys)
		return states, "podman", err
	case RuntimeDocker:
		cli, why := runtimeCLI(RuntimeDocker)
		if cli != "" {
			states, err := inspectContainers(r.ctx, cli, keys)
			if err == nil {
				return states, "docker", nil
			}
			why = err.Error()
		}
		states, err := readDockerFiles(r.s.cfg.RootDir, keys)
		if err != nil {
			return nil, "", fmt.Errorf("%s; %v", why, err)
		}
		return states, "docker's files (" + why + ")", nil
	}
	return nil, "", fmt.Errorf("the %s runtime's state is not read", runtime)
}

// dockerContainersDir is where the docker daemon keeps its containers
// under root: DATA-ROOT/containers, DATA-ROOT from /etc/docker/daemon.json
// ("data-root", formerly "graph"), /var/lib/docker by default.
func dockerContainersDir(root string) string {
	dataRoot := "/var/lib/docker"
	if b, err := os.ReadFile(filepath.Join(root, "etc/docker/daemon.json")); err == nil {
		var c struct {
			DataRoot string `json:"data-root"`
			Graph    string `json:"graph"`
		}
		if json.Unmarshal(b, &c) == nil {
			switch {
			case filepath.IsAbs(c.DataRoot):
				dataRoot = c.DataRoot
			case filepath.IsAbs(c.Graph):
				dataRoot = c.Graph
			}
		}
	}
	return filepath.Join(root, dataRoot, "containers")
}

// dockerConfig is what is read of a container's config.v2.json, which the
// daemon rewrites on each change of the container's state.
type dockerConfig struct {
	ID    string
	Name  string
	State struct {
		Running, Paused, Restarting, RemovalInProgress, Dead bool
		Pid                                                  int
		ExitCode                                             int
		StartedAt                                            string
	}
	RestartCount           int
	HasBeenManuallyStopped bool
}

// readDockerFiles reads docker containers from the daemon's files:
// ID/config.v2.json (name, state, restart count) and ID/hostconfig.json
// (restart policy). A key that is not a full id is looked for among all
// the containers. An error when the folder cannot be read.
func readDockerFiles(root string, keys []string) (map[string]containerState, error) {
	dir := dockerContainersDir(root)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("docker's containers cannot be read: %v", err)
	}
	var ids []string
	all := false
	for _, k := range keys {
		if bareContainer.MatchString(k) {
			ids = append(ids, k)
		} else {
			all = true
		}
	}
	if all {
		ids = ids[:0]
		for _, e := range ents {
			if e.IsDir() {
				ids = append(ids, e.Name())
			}
		}
	}
	var states []containerState
	for _, id := range ids {
		if st, ok := readDockerContainer(filepath.Join(dir, id), id); ok {
			states = append(states, st)
		}
	}
	return matchContainers(keys, states), nil
}

// readDockerContainer reads one container's folder; ok is false when the
// folder is not there (no such container).
func readDockerContainer(dir, id string) (containerState, bool) {
	st := containerState{ID: id}
	b, err := os.ReadFile(filepath.Join(dir, "config.v2.json"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(dir); errors.Is(derr, fs.ErrNotExist) {
			return st, false
		}
	}
	var c dockerConfig
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		st.Unread = "docker's config.v2.json of " + ShortID(id) + ": " + err.Error()
		return st, true
	}
	st.Name, st.Pid, st.ExitCode = strings.TrimPrefix(c.Name, "/"), c.State.Pid, c.State.ExitCode
	st.StartedAt, st.RestartCount, st.ManuallyStopped = parseRuntimeTime(c.State.StartedAt), c.RestartCount, c.HasBeenManuallyStopped
	// The daemon's own words for these flags (moby's State.StateString).
	switch {
	case c.State.Running && c.State.Paused:
		st.Status = "paused"
	case c.State.Running && c.State.Restarting:
		st.Status = "restarting"
	case c.State.Running:
		st.Status = "running"
	case c.State.RemovalInProgress:
		st.Status = "removing"
	case c.State.Dead:
		st.Status = "dead"
	case st.StartedAt.IsZero():
		st.Status = "created"
	default:
		st.Status = "exited"
	}
	var h struct{ RestartPolicy restartPolicyJSON }
	b, err = os.ReadFile(filepath.Join(dir, "hostconfig.json"))
	if err == nil {
		err = json.Unmarshal(b, &h)
	}
	if err != nil {
		st.Unread = "docker's hostconfig.json of " + ShortID(id) + ": " + err.Error()
		return st, true
	}
	st.Policy, st.MaxRetries = h.RestartPolicy.Name, h.RestartPolicy.MaximumRetryCount
	return st, true
}

// containerRestarts is what the policy does after the worker dies: a
// killed process exits non-zero, so on-failure restarts it too, while its
// retries last (podman and docker both stop at RestartCount ==
// MaximumRetryCount when that is set).
func containerRestarts(st containerState) string {
	switch st.Policy {
	case "always", "unless-stopped":
		return RestartsYes
	case "on-failure":
		if st.MaxRetries > 0 && st.RestartCount >= st.MaxRetries {
			return RestartsNo
		}
		return RestartsYes
	case "", "no":
		return RestartsNo
	}
	return RestartsMaybe
}

// Docker's restart back-off (moby's restartmanager, as docker run's
// --restart documents it): 100 ms before the first restart, doubled before
// each next one, at most 1 min; back to 100 ms once the container has run
// 10 s. The current step lives in the daemon only: the delay is known when
// the container has run 10 s.
const (
	dockerFirstDelay = 100 * time.Millisecond
	dockerResetAfter = 10 * time.Second
)

// containerManagerState fills m from what its runtime said (states by
// key, from source; err when nothing could be read) and says whether it
// is alive: there and running, or going to run again.
func containerManagerState(m *Manager, states map[string]containerState, source string, err error) managerState {
	key := containerKey(*m)
	if m.Restarts == "" {
		m.Restarts = RestartsMaybe
	}
	if err != nil {
		m.Restarts = RestartsMaybe
		return managerState{alive: true, state: "unknown: " + err.Error()}
	}
	st, ok := states[key]
	if !ok {
		if m.Cgroup != "" && cgroupExists(cgroupRoot, m.Cgroup) {
			m.Restarts = RestartsMaybe
			return managerState{alive: true, state: "unknown: " + source + " has no container " + key + ", but its cgroup " + m.Cgroup +
				" is there (another user's or another storage's container?)"}
		}
		return managerState{alive: false, state: "gone: " + source + " has no container " + key}
	}
	if st.Unread != "" {
		m.Restarts = RestartsMaybe
		return managerState{alive: true, state: "unknown: " + st.Unread}
	}
	if st.Name != "" {
		m.ContainerName = st.Name
	}
	m.RestartPolicy, m.RestartCount, m.Restarts = st.Policy, st.RestartCount, containerRestarts(st)
	if m.RestartPolicy == "" {
		m.RestartPolicy = "no"
	}
	m.Delay, m.DelayKnown = 0, false
	if m.Restarts == RestartsYes {
		switch m.Runtime {
		case RuntimePodman:
			// The cleanup conmon runs when the process exits starts it
			// again at once: podman has no back-off.
			m.DelayKnown = true
		case RuntimeDocker:
			if st.Status == "running" && !st.StartedAt.IsZero() && time.Since(st.StartedAt) >= dockerResetAfter {
				m.Delay, m.DelayKnown = Duration(dockerFirstDelay), true
			}
		}
	}
	exited := fmt.Sprintf("%s (exit code %d)", st.Status, st.ExitCode)
	switch st.Status {
	case "running", "paused", "stopping":
		return managerState{alive: true, state: fmt.Sprintf("%s (pid %d)", st.Status, st.Pid)}
	case "restarting":
		return managerState{alive: true, state: "restarting (waiting out docker's back-off)"}
	case "stopped":
		// Podman: ended, its cleanup not yet run; that cleanup restarts it
		// by its policy.
		if m.Restarts == RestartsNo {
			return managerState{alive: false, state: exited}
		}
		return managerState{alive: true, state: exited + ", restart pending (restart=" + m.RestartPolicy + ")"}
	case "exited":
		if st.ManuallyStopped {
			exited += ", stopped by hand: docker does not restart it"
		}
		return managerState{alive: false, state: exited}
	case "created", "configured", "initialized":
		return managerState{alive: false, state: st.Status + " (not started)"}
	case "removing", "dead":
		return managerState{alive: false, state: st.Status}
	}
	m.Restarts = RestartsMaybe
	return managerState{alive: true, state: "unknown: " + source + " says the container is " + strconv.Quote(st.Status)}
}

func (containerKind) read(r *managerReader, ms []*Manager) []managerState {
	out := make([]managerState, len(ms))
	byRuntime := map[string][]int{}
	var runtimes []string
	for i, m := range ms {
		if _, ok := byRuntime[m.Runtime]; !ok {
			runtimes = append(runtimes, m.Runtime)
		}
		byRuntime[m.Runtime] = append(byRuntime[m.Runtime], i)
	}
	for _, rt := range runtimes {
		idx := byRuntime[rt]
		var keys []string
		for _, i := range idx {
			if k := containerKey(*ms[i]); k != "" && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		states, source, err := readContainers(r, rt, keys)
		for _, i := range idx {
			out[i] = containerManagerState(ms[i], states, source, err)
			ms[i].Stop = containerStopArgv(*ms[i])
		}
	}
	return out
}

// containerStopArgv is how an operator stops the container with its runtime.
func containerStopArgv(m Manager) []string {
	name := m.ContainerName
	if name == "" {
		name = ShortID(m.ContainerID)
	}
	switch m.Runtime {
	case RuntimePodman, RuntimeDocker:
		return []string{m.Runtime, "stop", name}
	case RuntimeLXC:
		return []string{"lxc-stop", "-n", name}
	case RuntimeContainerd:
		return []string{"nerdctl", "stop", name}
	}
	return []string{"crictl", "stop", name}
}

// stop runs the runtime's stop (its stop signal, KILL after grace), which
// also keeps its policy from starting the container again, then reads the
// container again to confirm that it neither runs nor will.
func (containerKind) stop(r *managerReader, m Manager, grace time.Duration, dryRun bool) (string, string) {
	argv := containerStopArgv(m)
	if dryRun {
		return StopWould, "would run " + strings.Join(argv, " ")
	}
	if m.Runtime != RuntimePodman && m.Runtime != RuntimeDocker {
		return StopFailed, "stopping a " + m.Runtime + " container is not supported: run " + strings.Join(argv, " ")
	}
	cli, why := runtimeCLI(m.Runtime)
	if cli == "" {
		return StopFailed, why + ": run " + strings.Join(argv, " ")
	}
	key := containerKey(m)
	secs := strconv.Itoa(int((grace + time.Second - 1) / time.Second))
	shown := strings.Join([]string{m.Runtime, "stop", "-t", secs, argv[2]}, " ")
	// The stop waits up to grace for the stop signal, then kills and waits
	// for the exit.
	_, errb, err := runBounded(r.ctx, grace+2*managerReadTimeout, []string{cli, "stop", "-t", secs, "--", key})
	if err != nil {
		if !noSuchContainer(errb) {
			return StopFailed, withOutput(err, errb).Error()
		}
		if m.Cgroup != "" && cgroupExists(cgroupRoot, m.Cgroup) {
			return StopFailed, m.Runtime + " has no container " + key + ", but its cgroup " + m.Cgroup + " is there: stop it as its owner"
		}
		return StopAlready, m.Runtime + " has no container " + key
	}
	states, source, err := readContainers(r, m.Runtime, []string{key})
	if err != nil {
		return StopFailed, shown + " ran, but the container could not be read again: " + err.Error()
	}
	if _, ok := states[key]; !ok {
		return StopStopped, shown + ": the container is gone"
	}
	c := m
	st := containerManagerState(&c, states, source, nil)
	if st.alive {
		return StopFailed, shown + " ran, but the container is " + st.state
	}
	return StopStopped, shown + ": " + st.state
}

// podKind: a Kubernetes pod, whose containers the kubelet restarts with a
// growing back-off (10 s doubling to 5 min) unless the pod's restartPolicy
// says otherwise, which the node's files do not tell: assumed to restart.
type podKind struct{}

func (podKind) find(r *managerReader, p procInfo) (Manager, bool) {
	ref := p.cg.Ref
	if ref.PodUID == "" {
		return Manager{}, false
	}
	m := Manager{Kind: ManagerPod, PodUID: ref.PodUID, Runtime: ref.Runtime, ContainerID: ref.ID, Restarts: RestartsYes,
		Cgroup: podCgroup(p.cg.Path)}
	var h Holder
	r.s.names.fill(&h, ref)
	m.Namespace, m.Pod, m.ContainerName = h.Namespace, h.Pod, h.ContainerName
	return m, true
}

// kubeletBackoff is the kubelet's restart delay after n restarts of a
// container: 10 s, doubled each time, at most 5 min.
func kubeletBackoff(n int) time.Duration {
	d := 10 * time.Second
	for i := 0; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

func (podKind) read(r *managerReader, ms []*Manager) []managerState {
	out := make([]managerState, len(ms))
	for i, m := range ms {
		if m.Pod == "" {
			var h Holder
			r.s.names.fill(&h, containerRef{ID: m.ContainerID, PodUID: m.PodUID})
			m.Namespace, m.Pod, m.ContainerName = h.Namespace, h.Pod, h.ContainerName
		}
		m.Restarts = RestartsYes
		if n, ok := r.s.names.podRestarts(m.Namespace, m.Pod, m.PodUID, m.ContainerName); ok {
			m.RestartCount = n
			m.Delay, m.DelayKnown = Duration(kubeletBackoff(n)), true
		}
		if m.Pod != "" {
			m.Stop = []string{"kubectl", "delete", "pod", "-n", m.Namespace, m.Pod}
		} else {
			m.Stop = []string{"kubectl", "delete", "pod", "(the pod with uid " + m.PodUID + ")"}
		}
		alive := m.Cgroup == "" || cgroupExists(cgroupRoot, m.Cgroup)
		out[i] = managerState{alive: alive, state: "gone"}
		if alive {
			out[i].state = "pod cgroup present"
		}
	}
	return out
}

func (podKind) stop(*managerReader, Manager, time.Duration, bool) (string, string) {
	return StopRefused, "gpush never deletes Kubernetes objects"
}

// podRestarts reads a container's restart count from the kubelet's log
// folder (/var/log/pods/NS_POD_UID/CONTAINER/N.log: N counts restarts).
func (n *containerNames) podRestarts(ns, pod, uid, container string) (int, bool) {
	if ns == "" || pod == "" || container == "" {
		return 0, false
	}
	ents, err := os.ReadDir(filepath.Join(n.root, "var/log/pods", ns+"_"+pod+"_"+uid, container))
	if err != nil {
		return 0, false
	}
	best, ok := 0, false
	for _, e := range ents {
		if v, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log")); err == nil && strings.HasSuffix(e.Name(), ".log") {
			best, ok = max(best, v), true
		}
	}
	return best, ok
}

// podCgroup is the pod's own folder in a cgroup path: the path up to its
// pod<uid> component.
func podCgroup(path string) string {
	comps := strings.Split(path, "/")
	for i, c := range comps {
		if podComponent.MatchString(c) {
			return strings.Join(comps[:i+1], "/")
		}
	}
	return ""
}

// cgroupExists: some cgroup hierarchy mounted under cgroupRoot (v2 itself,
// or each v1 controller and unified beside them) has the folder cg. When
// none can be read, it is taken to exist: what cannot be told is not gone.
func cgroupExists(root, cg string) bool {
	ents, err := os.ReadDir(root)
	if err != nil {
		return true
	}
	if _, err := os.Stat(filepath.Join(root, cg)); err == nil {
		return true
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), cg)); err == nil {
			return true
		}
	}
	return false
}
