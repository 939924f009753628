package helper

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// containerKind: a container's runtime, which starts the container again
// by its restart policy. Pods are podKind's: the kubelet, not the runtime,
// decides there.
type containerKind struct{}

func (containerKind) find(r *managerReader, p procInfo) (Manager, bool) {
	ref := p.cg.Ref
	if ref.PodUID != "" || ref.ID == "" && ref.Name == "" {
		return Manager{}, false
	}
	m := Manager{Kind: ManagerContainer, Runtime: ref.Runtime, ContainerID: ref.ID, Restarts: RestartsMaybe}
	if ref.ID == "" {
		m.ContainerName = ref.Name
	}
	return m, true
}

func (containerKind) read(r *managerReader, ms []*Manager) []managerState {
	out := make([]managerState, len(ms))
	for i, m := range ms {
		m.Stop = containerStopArgv(*m)
		out[i] = managerState{alive: true, state: "unknown: the " + m.Runtime + " runtime's state was not read"}
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

func (containerKind) stop(r *managerReader, m Manager, grace time.Duration, dryRun bool) (string, string) {
	argv := containerStopArgv(m)
	if dryRun {
		return StopWould, "would run " + strings.Join(argv, " ")
	}
	return StopFailed, "stopping a " + m.Runtime + " container is not supported: run " + strings.Join(argv, " ")
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
