package helper

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The kubelet's cgroup layouts, both drivers and every QoS class, each
// read as a pod manager: the pod's uid with dashes, restarts yes, the pod's
// own cgroup folder, its name and restart count from the node's
// /var/log/pods where the kubelet left them, and the back-off that count
// gives; stopping it names kubectl delete pod.
func TestPodManagerFromCgroup(t *testing.T) {
	podU := strings.ReplaceAll(podUID, "-", "_")
	named := t.TempDir()
	// Container "worker" of pod ml/trainer-7f9c, restarted twice: the
	// kubelet keeps the current log (2.log) and the one before.
	logs := filepath.Join(named, "var/log/pods", "ml_trainer-7f9c_"+podUID, "worker")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"1.log", "2.log"} {
		if err := os.WriteFile(filepath.Join(logs, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(named, "var/log/containers"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(logs, "2.log"), filepath.Join(named, "var/log/containers", "trainer-7f9c_ml_worker-"+ctrID+".log")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, pod, runtime, qos string
	}{
		{"cgroupfs besteffort", "/kubepods/besteffort/pod" + podUID + "/" + ctrID, "/kubepods/besteffort/pod" + podUID, RuntimeCRI, "besteffort"},
		{"cgroupfs burstable", "/kubepods/burstable/pod" + podUID + "/" + ctrID, "/kubepods/burstable/pod" + podUID, RuntimeCRI, "burstable"},
		{"cgroupfs guaranteed", "/kubepods/pod" + podUID + "/" + ctrID, "/kubepods/pod" + podUID, RuntimeCRI, "guaranteed"},
		{"cgroupfs cri-o", "/kubepods/besteffort/pod" + podUID + "/crio-" + ctrID, "/kubepods/besteffort/pod" + podUID, RuntimeCRIO, "besteffort"},
		{"cgroupfs under a parent", "/gpush-lab/x-1/lab03/kubepods/besteffort/pod" + podUID + "/" + ctrID, "/gpush-lab/x-1/lab03/kubepods/besteffort/pod" + podUID, RuntimeCRI, "besteffort"},
		{"systemd containerd besteffort", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podU + ".slice/cri-containerd-" + ctrID + ".scope",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podU + ".slice", RuntimeContainerd, "besteffort"},
		{"systemd cri-o burstable", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podU + ".slice/crio-" + ctrID + ".scope",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podU + ".slice", RuntimeCRIO, "burstable"},
		{"systemd cri-dockerd guaranteed", "/kubepods.slice/kubepods-pod" + podU + ".slice/docker-" + ctrID + ".scope",
			"/kubepods.slice/kubepods-pod" + podU + ".slice", RuntimeDocker, "guaranteed"},
	} {
		for _, v := range []struct {
			name, cgroup string
		}{
			{"v2", "0::" + tc.path + "\n"},
			{"v1", "12:memory:" + tc.path + "\n1:name=systemd:" + tc.path + "\n0::/\n"},
		} {
			t.Run(tc.name+" "+v.name, func(t *testing.T) {
				for _, root := range []string{named, t.TempDir()} {
					s, err := newScanner(Config{RootDir: root})
					if err != nil {
						t.Fatal(err)
					}
					r := s.managerReader(t.Context())
					info := procInfo{pid: 1, cg: parseCgroup([]byte(v.cgroup)), r: r}
					if info.cg.Ref.QoS != tc.qos || info.cg.Ref.Runtime != tc.runtime || info.cg.Ref.ID != ctrID {
						t.Errorf("%s: container %+v, want runtime %s, QoS %s, id %s", tc.path, info.cg.Ref, tc.runtime, tc.qos, ctrID)
					}
					if info.cg.Unit != "" {
						t.Errorf("%s: unit %q inside a pod", tc.path, info.cg.Unit)
					}
					if m, ok := (containerKind{}).find(r, info); ok {
						t.Errorf("%s: a container manager %+v for a pod's container (the kubelet, not the runtime, restarts it)", tc.path, m)
					}
					m, ok := podKind{}.find(r, info)
					if !ok {
						t.Fatalf("%s: no pod manager", tc.path)
					}
					podKind{}.read(r, []*Manager{&m})
					if m.Kind != ManagerPod || m.PodUID != podUID || m.Restarts != RestartsYes || m.Cgroup != tc.pod || m.ContainerID != ctrID {
						t.Errorf("%s: %+v; want pod %s, restarts yes, cgroup %s", tc.path, m, podUID, tc.pod)
					}
					if root == named {
						want := []string{"kubectl", "delete", "pod", "-n", "ml", "trainer-7f9c"}
						if m.Namespace != "ml" || m.Pod != "trainer-7f9c" || m.ContainerName != "worker" || !slices.Equal(m.Stop, want) {
							t.Errorf("%s, named: pod %s/%s container %s, stop %q; want ml/trainer-7f9c worker, %q", tc.path, m.Namespace, m.Pod, m.ContainerName, m.Stop, want)
						}
						if m.RestartCount != 2 || !m.DelayKnown || m.Delay.D() != 40*time.Second {
							t.Errorf("%s, named: %d restarts, delay %v (known %v); want 2 and the kubelet's 40s", tc.path, m.RestartCount, m.Delay.D(), m.DelayKnown)
						}
						if got := ManagerLabel(m); got != "pod ml/trainer-7f9c (the kubelet restarts its containers)" {
							t.Errorf("label %q", got)
						}
					} else {
						// Nothing on the node names it: the uid still does.
						if m.Pod != "" || m.DelayKnown || len(m.Stop) != 4 || m.Stop[0] != "kubectl" || m.Stop[3] != "(the pod with uid "+podUID+")" {
							t.Errorf("%s, unnamed: %+v", tc.path, m)
						}
					}
					if m.Key() != "pod:"+podUID {
						t.Errorf("key %q", m.Key())
					}
				}
			})
		}
	}
}

// A pod's stop is refused: gpush never deletes Kubernetes objects, it
// says which kubectl command would.
func TestPodManagerStopRefused(t *testing.T) {
	m := Manager{Kind: ManagerPod, PodUID: podUID, Namespace: "ml", Pod: "trainer-7f9c", Stop: []string{"kubectl", "delete", "pod", "-n", "ml", "trainer-7f9c"}}
	resp, err := Managers(t.Context(), ManagersRequest{Action: ManagersStop, Managers: []Manager{m}, Config: Config{RootDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Results[0]
	// No Cgroup: what cannot be told is alive, so the stop is asked for.
	if !res.Alive || res.Outcome != StopRefused || !strings.Contains(res.Reason, "kubectl delete pod -n ml trainer-7f9c") {
		t.Errorf("stop of a pod: %+v", res)
	}
}

// The kubelet's back-off after n restarts: 10 s doubled each time, at
// most 5 min.
func TestKubeletBackoff(t *testing.T) {
	for n, want := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second,
		300 * time.Second, 300 * time.Second, 300 * time.Second} {
		if got := kubeletBackoff(n); got != want {
			t.Errorf("kubeletBackoff(%d) = %v, want %v", n, got, want)
		}
	}
	if got := kubeletBackoff(1000); got != 5*time.Minute {
		t.Errorf("kubeletBackoff(1000) = %v", got)
	}
}
