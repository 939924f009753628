package helper

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Container runtimes, as Holder.Runtime names them.
const (
	RuntimeDocker     = "docker"
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimePodman     = "podman"
	RuntimeLXC        = "lxc"
	// RuntimeCRI: a Kubernetes container whose cgroup does not say which
	// runtime runs it (the cgroupfs driver with a bare id).
	RuntimeCRI = "cri"
)

// containerRef is what a cgroup path says of a container.
type containerRef struct {
	ID      string // the full id (64 hex), or "" for LXC
	Name    string // LXC's container name
	Runtime string
	// PodUID is the Kubernetes pod's uid (with dashes); QoS its class.
	PodUID string
	QoS    string
}

// The shapes of a container's cgroup, one path component each, innermost
// first in unitAndContainer's walk. Written down from the runtimes' docs:
//
//	docker, cgroupfs driver (v1):        /docker/<id>
//	docker, systemd driver (v1, v2):     /system.slice/docker-<id>.scope
//	docker rootless (v2):                /user.slice/user-1000.slice/user@1000.service/user.slice/docker-<id>.scope
//	containerd (nerdctl), systemd:       /system.slice/nerdctl-<id>.scope; cgroupfs: /default/<id> (its namespace)
//	podman rootful, systemd (v2):        /machine.slice/libpod-<id>.scope/container
//	podman rootful, cgroupfs (v1):       /libpod_parent/libpod-<id>
//	podman rootless (v2):                /user.slice/user-1000.slice/user@1000.service/user.slice/libpod-<id>.scope/container
//	podman quadlet (split):              /system.slice/NAME.service/libpod-payload-<id>
//	podman pod:                          /machine.slice/machine-libpod_pod_<podid>.slice/libpod-<id>.scope/container
//	kubelet, systemd driver:             /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope
//	                                     (crio-<id>.scope for cri-o, docker-<id>.scope for cri-dockerd;
//	                                     guaranteed pods sit in kubepods-pod<uid_>.slice)
//	kubelet, cgroupfs driver:            /kubepods/besteffort/pod<uid>/<id> (crio-<id> for cri-o)
//	kind, k3s in a container:            /kubelet.slice/kubelet-kubepods.slice/... as the systemd driver's
//	LXC 4+:                              /lxc.payload.<name>; older: /lxc/<name>
//
// The conmon and shim scopes beside them (libpod-conmon-<id>.scope,
// crio-conmon-<id>.scope) are the runtime's monitors, not the container.
var (
	scopeContainer = regexp.MustCompile(`^(docker|cri-containerd|crio|libpod-payload|libpod|nerdctl|containerd)-([0-9a-f]{64})(?:\.scope)?$`)
	bareContainer  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	podComponent   = regexp.MustCompile(`^(?:.*-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$`)
	lxcPayload     = regexp.MustCompile(`^lxc\.payload\.(.+)$`)
	userManager    = regexp.MustCompile(`^user@[0-9]+\.service$`)
)

var scopeRuntime = map[string]string{"docker": RuntimeDocker, "cri-containerd": RuntimeContainerd, "crio": RuntimeCRIO,
	"libpod": RuntimePodman, "libpod-payload": RuntimePodman, "nerdctl": RuntimeContainerd, "containerd": RuntimeContainerd}

// findContainer reads the container, if any, from a cgroup path's
// components; at is the index of the container's component (-1 if none).
func findContainer(comps []string) (ref containerRef, at int) {
	at = -1
	for i := len(comps) - 1; i >= 0 && at < 0; i-- {
		c := comps[i]
		switch {
		case strings.HasPrefix(c, "libpod-conmon-") || strings.HasPrefix(c, "crio-conmon-"):
			continue
		case scopeContainer.MatchString(c):
			m := scopeContainer.FindStringSubmatch(c)
			ref.ID, ref.Runtime, at = m[2], scopeRuntime[m[1]], i
		case bareContainer.MatchString(c):
			ref.ID, at = c, i
			parent := ""
			if i > 0 {
				parent = comps[i-1]
			}
			switch {
			case parent == "docker":
				ref.Runtime = RuntimeDocker
			case podComponent.MatchString(parent):
				ref.Runtime = RuntimeCRI
			default:
				// containerd's cgroupfs layout: /<namespace>/<id>.
				ref.Runtime = RuntimeContainerd
			}
		case lxcPayload.MatchString(c):
			ref.Name, ref.Runtime, at = lxcPayload.FindStringSubmatch(c)[1], RuntimeLXC, i
		case i > 0 && comps[i-1] == "lxc" && c != "":
			ref.Name, ref.Runtime, at = c, RuntimeLXC, i
		}
	}
	if at < 0 {
		return ref, at
	}
	kube := false
	for _, c := range comps[:at] {
		if strings.Contains(c, "kubepods") {
			kube = true
		}
		if kube {
			if m := podComponent.FindStringSubmatch(c); m != nil {
				ref.PodUID = strings.ReplaceAll(m[1], "_", "-")
			}
			switch {
			case strings.Contains(c, "burstable"):
				ref.QoS = "burstable"
			case strings.Contains(c, "besteffort"):
				ref.QoS = "besteffort"
			}
		}
	}
	if ref.PodUID != "" && ref.QoS == "" {
		ref.QoS = "guaranteed"
	}
	return ref, at
}

// ShortID is the 12-character form of a container id, as docker ps,
// crictl and podman ps print it.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// containerNames finds container and pod names on the host without an
// API server, from the files runtimes and the kubelet leave (under
// Config.RootDir): the kubelet's /var/log/containers links
// (POD_NAMESPACE_CONTAINER-ID.log) and /var/log/pods folders
// (NAMESPACE_POD_UID), docker's containers/ID/config.v2.json and podman's
// containers.json (rootful, and a rootless user's in their home). Each source is read once per request, when a
// container first asks.
type containerNames struct {
	root string
	k8s  map[string]k8sName // by container id
	pods map[string]k8sName // by pod uid
	pod  map[string][]string
	read bool
	// users: rootless podman's lists by uid; homes from /etc/passwd.
	users map[int]map[string][]string
	homes map[int]string
}

type k8sName struct {
	Namespace, Pod, Container string
}

// fill names what can be named of ref into h.
func (n *containerNames) fill(h *Holder, ref containerRef) {
	if n == nil {
		return
	}
	if !n.read {
		n.read = true
		n.readKubelet()
		n.pod = n.readPodman()
	}
	if ref.ID != "" {
		if k, ok := n.k8s[ref.ID]; ok {
			h.Namespace, h.Pod, h.ContainerName = k.Namespace, k.Pod, k.Container
		}
	}
	if ref.PodUID != "" && h.Pod == "" {
		if k, ok := n.pods[ref.PodUID]; ok {
			h.Namespace, h.Pod = k.Namespace, k.Pod
		}
	}
	if h.ContainerName != "" || ref.ID == "" {
		return
	}
	switch ref.Runtime {
	case RuntimeDocker:
		h.ContainerName = n.dockerName(ref.ID)
	case RuntimePodman:
		names := n.pod[ref.ID]
		if len(names) == 0 && h.UID > 0 {
			names = n.rootless(h.UID)[ref.ID]
		}
		if len(names) > 0 {
			h.ContainerName = names[0]
		}
	}
}

// rootless reads the container list of a rootless podman user: under the
// home folder /etc/passwd gives, in podman's default graph root
// (~/.local/share/containers/storage). Once per uid and request.
func (n *containerNames) rootless(uid int) map[string][]string {
	if list, ok := n.users[uid]; ok {
		return list
	}
	if n.users == nil {
		n.users = map[int]map[string][]string{}
		b, _ := os.ReadFile(filepath.Join(n.root, "etc/passwd"))
		n.homes = parseHomes(b)
	}
	var list map[string][]string
	if home := n.homes[uid]; home != "" {
		list = readContainersJSON(filepath.Join(n.root, home, ".local/share/containers/storage/overlay-containers/containers.json"))
	}
	n.users[uid] = list
	return list
}

// parseHomes maps uid -> home folder from /etc/passwd lines.
func parseHomes(b []byte) map[int]string {
	m := map[int]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 7 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if uid, err := strconv.Atoi(f[2]); err == nil && filepath.IsAbs(f[5]) {
			if _, dup := m[uid]; !dup {
				m[uid] = f[5]
			}
		}
	}
	return m
}

var kubeLogLink = regexp.MustCompile(`^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$`)

// readKubelet indexes /var/log/containers and /var/log/pods. Pod names and
// namespaces are DNS names (no "_"), so "_" splits them safely.
func (n *containerNames) readKubelet() {
	n.k8s, n.pods = map[string]k8sName{}, map[string]k8sName{}
	if ents, err := os.ReadDir(filepath.Join(n.root, "var/log/containers")); err == nil {
		for _, e := range ents {
			if m := kubeLogLink.FindStringSubmatch(e.Name()); m != nil {
				n.k8s[m[4]] = k8sName{Pod: m[1], Namespace: m[2], Container: m[3]}
			}
		}
	}
	if ents, err := os.ReadDir(filepath.Join(n.root, "var/log/pods")); err == nil {
		for _, e := range ents {
			parts := strings.Split(e.Name(), "_")
			if len(parts) == 3 && e.IsDir() {
				n.pods[parts[2]] = k8sName{Namespace: parts[0], Pod: parts[1]}
			}
		}
	}
}

// dockerName reads "Name" ("/web") from docker's config of the container.
func (n *containerNames) dockerName(id string) string {
	b, err := os.ReadFile(filepath.Join(n.root, "var/lib/docker/containers", id, "config.v2.json"))
	if err != nil {
		return ""
	}
	var c struct{ Name string }
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	return strings.TrimPrefix(c.Name, "/")
}

// readPodman reads rootful podman's container list: id -> names.
func (n *containerNames) readPodman() map[string][]string {
	return readContainersJSON(filepath.Join(n.root, "var/lib/containers/storage/overlay-containers/containers.json"))
}

// readContainersJSON reads a podman (containers/storage) container list.
func readContainersJSON(file string) map[string][]string {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var list []struct {
		ID    string   `json:"id"`
		Names []string `json:"names"`
	}
	if json.Unmarshal(b, &list) != nil {
		return nil
	}
	out := map[string][]string{}
	for _, c := range list {
		out[c.ID] = c.Names
	}
	return out
}
