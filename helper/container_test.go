package helper

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Container ids and pod uids of the shapes runtimes make (the values are
// made up; the shapes are the documented ones, see findContainer).
const (
	ctrID  = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
	ctrID2 = "9a8b7c6d5e4f30211203f4e5d6c7b8a99887766554433221100aabbccddeeff0"
	podUID = "2f0c7e5c-8e2a-4e73-8f0d-94d2e3b3d8a1"
)

func TestParseCgroupContainers(t *testing.T) {
	podU := strings.ReplaceAll(podUID, "-", "_")
	for _, tc := range []struct {
		name, line                  string
		unit, id, runtime, pod, qos string
	}{
		{"docker cgroupfs v1", "12:pids:/docker/" + ctrID + "\n1:name=systemd:/docker/" + ctrID + "\n0::/\n", "", ctrID, "docker", "", ""},
		{"docker systemd v2", "0::/system.slice/docker-" + ctrID + ".scope\n", "", ctrID, "docker", "", ""},
		{"docker rootless", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/docker-" + ctrID + ".scope\n", "", ctrID, "docker", "", ""},
		{"nerdctl systemd", "0::/system.slice/nerdctl-" + ctrID + ".scope\n", "", ctrID, "containerd", "", ""},
		{"containerd cgroupfs namespace", "0::/default/" + ctrID + "\n", "", ctrID, "containerd", "", ""},
		{"podman rootful systemd", "0::/machine.slice/libpod-" + ctrID + ".scope/container\n", "", ctrID, "podman", "", ""},
		{"podman conmon", "0::/machine.slice/libpod-conmon-" + ctrID + ".scope\n", "", "", "", "", ""},
		{"podman cgroupfs v1", "1:name=systemd:/libpod_parent/libpod-" + ctrID + "\n", "", ctrID, "podman", "", ""},
		{"podman rootless", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + ctrID + ".scope/container\n", "", ctrID, "podman", "", ""},
		{"podman pod", "0::/machine.slice/machine-libpod_pod_" + ctrID2 + ".slice/libpod-" + ctrID + ".scope/container\n", "", ctrID, "podman", "", ""},
		{"podman quadlet", "0::/system.slice/llm.service/libpod-payload-" + ctrID + "\n", "llm.service", ctrID, "podman", "", ""},
		{"k8s containerd systemd burstable", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podU + ".slice/cri-containerd-" + ctrID + ".scope\n", "", ctrID, "containerd", podUID, "burstable"},
		{"k8s cri-o systemd besteffort", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podU + ".slice/crio-" + ctrID + ".scope\n", "", ctrID, "cri-o", podUID, "besteffort"},
		{"k8s cri-o conmon", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podU + ".slice/crio-conmon-" + ctrID + ".scope\n", "", "", "", "", ""},
		{"k8s cri-dockerd guaranteed", "0::/kubepods.slice/kubepods-pod" + podU + ".slice/docker-" + ctrID + ".scope\n", "", ctrID, "docker", podUID, "guaranteed"},
		{"k8s cgroupfs v1 burstable", "11:memory:/kubepods/burstable/pod" + podUID + "/" + ctrID + "\n1:name=systemd:/kubepods/burstable/pod" + podUID + "/" + ctrID + "\n", "", ctrID, "cri", podUID, "burstable"},
		{"k8s cgroupfs v1 guaranteed", "1:name=systemd:/kubepods/pod" + podUID + "/" + ctrID + "\n", "", ctrID, "cri", podUID, "guaranteed"},
		{"k8s cgroupfs cri-o", "0::/kubepods/besteffort/pod" + podUID + "/crio-" + ctrID + "\n", "", ctrID, "cri-o", podUID, "besteffort"},
		{"kind node", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + podU + ".slice/cri-containerd-" + ctrID + ".scope\n", "", ctrID, "containerd", podUID, "besteffort"},
		{"lxc payload", "0::/lxc.payload.trainer\n", "", "trainer", "lxc", "", ""},
		{"lxc old", "1:name=systemd:/lxc/trainer\n", "", "trainer", "lxc", "", ""},
		{"plain service", "0::/system.slice/sglang.service\n", "sglang.service", "", "", "", ""},
		{"session", "0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseCgroup([]byte(tc.line))
			if got.Unit != tc.unit || got.Container != tc.id || got.Ref.Runtime != tc.runtime || got.Ref.PodUID != tc.pod || got.Ref.QoS != tc.qos {
				t.Errorf("got unit %q container %q %+v, want unit %q container %q runtime %q pod %q qos %q",
					got.Unit, got.Container, got.Ref, tc.unit, tc.id, tc.runtime, tc.pod, tc.qos)
			}
			if len(got.Unit) > 64 {
				t.Errorf("unit %q: a container's scope shown as the unit", got.Unit)
			}
		})
	}
}

// containerRoot writes what the kubelet, docker and podman leave on a host
// into a folder: /var/log/containers links, /var/log/pods folders, a
// docker config.v2.json, podman's containers.json.
func containerRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	podDir := filepath.Join(root, "var/log/pods", "ml_trainer-7f9c_"+podUID)
	for _, d := range []string{filepath.Join(podDir, "worker"), filepath.Join(root, "var/log/containers"), filepath.Join(root, "etc"),
		filepath.Join(root, "var/lib/docker/containers", ctrID2), filepath.Join(root, "var/lib/containers/storage/overlay-containers")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"var/lib/docker/containers/" + ctrID2 + "/config.v2.json":       `{"ID":"` + ctrID2 + `","Name":"/vllm-web","State":{"Running":true}}`,
		"var/lib/containers/storage/overlay-containers/containers.json": `[{"id":"` + ctrID2 + `x","names":["other"]},{"id":"` + ctrID + `","names":["llm-pod-ctr"],"image":"abc"}]`,
	}
	for f, c := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "var/log/containers", "trainer-7f9c_ml_worker-"+ctrID+".log")
	if err := os.Symlink(filepath.Join(podDir, "worker", "0.log"), link); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestContainerNames(t *testing.T) {
	root := containerRoot(t)
	n := &containerNames{root: root}
	var k8s, dock, pod, uidOnly Holder
	n.fill(&k8s, containerRef{ID: ctrID, Runtime: RuntimeContainerd, PodUID: podUID})
	n.fill(&dock, containerRef{ID: ctrID2, Runtime: RuntimeDocker})
	n.fill(&pod, containerRef{ID: ctrID, Runtime: RuntimePodman})
	n.fill(&uidOnly, containerRef{ID: ctrID2, Runtime: RuntimeCRI, PodUID: podUID})
	if k8s.Pod != "trainer-7f9c" || k8s.Namespace != "ml" || k8s.ContainerName != "worker" {
		t.Errorf("kubernetes: %+v", k8s)
	}
	if dock.ContainerName != "vllm-web" || dock.Pod != "" {
		t.Errorf("docker: %+v", dock)
	}
	// The same id known to the kubelet wins over podman's list.
	if pod.ContainerName != "worker" {
		t.Errorf("podman: %+v", pod)
	}
	if uidOnly.Pod != "trainer-7f9c" || uidOnly.Namespace != "ml" || uidOnly.ContainerName != "" {
		t.Errorf("pod from its uid only: %+v", uidOnly)
	}
	// Rootless podman: the user's own list, found through /etc/passwd.
	home := filepath.Join(root, "home/erin/.local/share/containers/storage/overlay-containers")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nerin:x:1001:1001::/home/erin:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(home, "containers.json"), []byte(`[{"id":"`+ctrID2+`","names":["erins-job"]}]`), 0o644)
	rootless, other := Holder{UID: 1001}, Holder{UID: 1002}
	n.fill(&rootless, containerRef{ID: ctrID2, Runtime: RuntimePodman})
	n.fill(&other, containerRef{ID: ctrID2, Runtime: RuntimePodman})
	if rootless.ContainerName != "erins-job" || other.ContainerName != "" {
		t.Errorf("rootless podman: %+v; another user: %+v", rootless, other)
	}
	// Nothing on the host: nothing named, nothing fails.
	var none Holder
	(&containerNames{root: t.TempDir()}).fill(&none, containerRef{ID: ctrID, Runtime: RuntimeDocker, PodUID: podUID})
	if none.ContainerName != "" || none.Pod != "" {
		t.Errorf("empty host: %+v", none)
	}
}

// Real processes in real cgroups shaped as the kubelet's and docker's: a
// snapshot names the container by its short id, the pod by the kubelet's
// log folders, and shows no unit for either.
func TestSnapshotContainerHolders(t *testing.T) {
	hs := cgroupHierarchies()
	base := fmt.Sprintf("/gpush-test/helper-%d-%s", os.Getpid(), t.Name())
	if len(hs) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs cgroupfs under %s", cgroupRoot)
		}
		t.Skipf("skipping, needs cgroupfs under %s", cgroupRoot)
	}
	podU := strings.ReplaceAll(podUID, "-", "_")
	kube := base + "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podU + ".slice/cri-containerd-" + ctrID + ".scope"
	dock := base + "/system.slice/docker-" + ctrID2 + ".scope"
	for _, hier := range hs {
		for _, cg := range []string{kube, dock} {
			if err := os.MkdirAll(filepath.Join(hier, cg), 0o755); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("CI needs writable cgroups: %v", err)
				}
				t.Skipf("skipping, needs writable cgroups (root, as in CI): %v", err)
			}
		}
	}
	t.Cleanup(func() { removeCgroupTree(t, hs, base) })
	h := newHost(t, 2)
	h.cfg.RootDir = containerRoot(t)
	a := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "1000")
	b := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "2000")
	for _, hier := range hs {
		for pid, cg := range map[int]string{a.pid: kube, b.pid: dock} {
			if err := os.WriteFile(filepath.Join(hier, cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
				t.Fatalf("move %d into %s: %v", pid, cg, err)
			}
		}
	}
	s := snapshot(t, h.cfg)
	x, y := findHolder(s, a.pid), findHolder(s, b.pid)
	if x == nil || y == nil {
		t.Fatalf("holders %d, %d not found: %+v", a.pid, b.pid, s.Holders)
	}
	if x.Container != ctrID[:12] || x.ContainerID != ctrID || x.Runtime != RuntimeContainerd || x.PodUID != podUID ||
		x.Pod != "trainer-7f9c" || x.Namespace != "ml" || x.ContainerName != "worker" || x.PodQoS != "burstable" || x.Unit != "" {
		t.Errorf("kubernetes holder: %+v", x)
	}
	if y.Container != ctrID2[:12] || y.Runtime != RuntimeDocker || y.ContainerName != "vllm-web" || y.Unit != "" || y.Pod != "" {
		t.Errorf("docker holder: %+v", y)
	}
	if !strings.HasSuffix(x.Cgroup, "cri-containerd-"+ctrID+".scope") {
		t.Errorf("cgroup %q", x.Cgroup)
	}
}

// BenchmarkContainerNames: parsing a kubepods cgroup and naming its pod
// and container on a host whose kubelet left 1000 container links, per
// holder, the links read once per request as a snapshot does.
func BenchmarkContainerNames(b *testing.B) {
	root := b.TempDir()
	dir := filepath.Join(root, "var/log/containers")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("%064x", i)
		if i == 999 {
			id = ctrID
		}
		if err := os.Symlink("/nowhere", filepath.Join(dir, fmt.Sprintf("pod-%d_ml_worker-%s.log", i, id))); err != nil {
			b.Fatal(err)
		}
	}
	line := []byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(podUID, "-", "_") +
		".slice/cri-containerd-" + ctrID + ".scope\n")
	n := &containerNames{root: root}
	for b.Loop() {
		var h Holder
		cg := parseCgroup(line)
		n.fill(&h, cg.Ref)
		if h.Pod != "pod-999" {
			b.Fatalf("pod %q", h.Pod)
		}
	}
}
