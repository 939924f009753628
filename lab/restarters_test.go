package lab

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
)

// Each kind of restarter brings its GPU worker back after a SIGKILL, no
// sooner than its (scaled) delay and not much later, with its back-off
// growing where it has one; the helper's snapshot names each worker's
// manager: the restarter process, the shell loop, or (the kubelet
// stand-in) the pod of the worker's kubelet-shaped cgroup, named and
// counted from the pod logs under the host's root. Stop ends it all and
// removes the pods' cgroups.
func TestRestartersLab(t *testing.T) {
	if _, err := sshd.FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const scale = 0.1
	l, err := Start(ctx, Options{Hosts: 4, Dir: t.TempDir(), Scenario: ScenarioRestarters, RestartScale: scale})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		if l != nil && l.NoServices != "" && os.Getenv("CI") != "true" {
			t.Skipf("skipping, the kube restarter needs writable cgroups: %v", err)
		}
		t.Fatal(err)
	}
	defer l.Stop()

	// The delays of the first two restarts, scaled.
	want := map[string][2]time.Duration{
		RestarterSlow:    {1500 * time.Millisecond, 1500 * time.Millisecond},
		RestarterBackoff: {100 * time.Millisecond, 200 * time.Millisecond},
		RestarterKube:    {1 * time.Second, 2 * time.Second},
		RestarterLoop:    {200 * time.Millisecond, 200 * time.Millisecond},
	}
	comm := map[string]string{RestarterSlow: "restarter", RestarterBackoff: "restarter", RestarterKube: "kubelet", RestarterLoop: "sh"}
	for i, h := range l.Hosts {
		kind := RestarterKinds[i]
		if h.Restarter != kind {
			t.Fatalf("%s: restarter %q, want %q", h.Name, h.Restarter, kind)
		}
		sups := l.Find(h.Name, RoleSupervisor)
		if len(sups) != 1 || !Alive(sups[0]) || sups[0].Restarter != kind {
			t.Fatalf("%s: supervisor %+v", h.Name, sups)
		}
		sup := sups[0]
		if c := readComm(t, sup.PID); c != comm[kind] {
			t.Errorf("%s: the %s restarter's comm %q, want %q", h.Name, kind, c, comm[kind])
		}
		for round, delay := range want[kind] {
			ws := l.Find(h.Name, RoleRespawner)
			if len(ws) != round+1 {
				t.Fatalf("%s: %d workers before kill %d, want %d", h.Name, len(ws), round+1, round+1)
			}
			old := ws[round]
			if !Alive(old) || old.GPU != 0 || old.Restarter != kind || parentOf(t, old.PID) != sup.PID {
				t.Fatalf("%s: worker %+v (alive %v, parent %d), want a live one of GPU 0 under %d", h.Name, old, Alive(old), parentOf(t, old.PID), sup.PID)
			}
			killed := time.Now()
			if err := syscallKill(old.PID); err != nil {
				t.Fatal(err)
			}
			for len(l.Find(h.Name, RoleRespawner)) <= round+1 {
				if time.Since(killed) > delay+10*time.Second {
					t.Fatalf("%s: the %s restarter's worker not back %v after kill %d", h.Name, kind, time.Since(killed), round+1)
				}
				time.Sleep(5 * time.Millisecond)
			}
			took := time.Since(killed)
			if took < delay || took > delay+5*time.Second {
				t.Errorf("%s: the %s restarter brought its worker back after %v, want %v (+ a start)", h.Name, kind, took, delay)
			}
			if n := l.Find(h.Name, RoleRespawner)[round+1]; !Alive(n) || n.PID == old.PID || parentOf(t, n.PID) != sup.PID {
				t.Errorf("%s: restarted worker %+v (parent %d, want %d)", h.Name, n, parentOf(t, n.PID), sup.PID)
			}
		}
	}

	kube := l.Hosts[2]
	ws := l.Find(kube.Name, RoleRespawner)
	w := ws[len(ws)-1]
	uid := PodUID(3)
	cg, err := os.ReadFile("/proc/" + itoa(w.PID) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	shape := regexp.MustCompile(`:` + regexp.QuoteMeta(l.cgroupBase+"/"+kube.Name+"/kubepods/besteffort/pod"+uid+"/") + `([0-9a-f]{64})\n`)
	m := shape.FindSubmatch(cg)
	if m == nil {
		t.Fatalf("kube worker's cgroup, want the lab's %s/%s/kubepods/besteffort/pod%s/<id>:\n%s", l.cgroupBase, kube.Name, uid, cg)
	}
	id := string(m[1])
	// The kubelet's node files: the logs of the current container (2.log,
	// after two restarts) and the one before, the current one's link.
	podLogs := filepath.Join(kube.RootDir, "var/log/pods", PodNamespace+"_"+PodName+"_"+uid, PodContainer)
	logs, _ := filepath.Glob(filepath.Join(podLogs, "*.log"))
	if !slices.Equal(logs, []string{filepath.Join(podLogs, "1.log"), filepath.Join(podLogs, "2.log")}) {
		t.Errorf("pod logs %q, want 1.log and 2.log", logs)
	}
	links, _ := filepath.Glob(filepath.Join(kube.RootDir, "var/log/containers", "*.log"))
	if wantLink := filepath.Join(kube.RootDir, "var/log/containers", PodName+"_"+PodNamespace+"_"+PodContainer+"-"+id+".log"); !slices.Equal(links, []string{wantLink}) {
		t.Errorf("container log links %q, want %q", links, wantLink)
	}

	// What the helper makes of each host's worker.
	for i, h := range l.Hosts {
		ws := l.Find(h.Name, RoleRespawner)
		w, sup := ws[len(ws)-1], l.Find(h.Name, RoleSupervisor)[0]
		snap, err := helper.TakeSnapshot(ctx, helper.Config{DevDir: h.DevDir, NvidiaSMI: h.SMI, RootDir: h.RootDir, Protected: []string{"nvidia-persistenced"}})
		if err != nil {
			t.Fatal(err)
		}
		var holder *helper.Holder
		for j := range snap.Holders {
			if snap.Holders[j].PID == w.PID { // the machine's pid: this process's view
				holder = &snap.Holders[j]
			}
		}
		if holder == nil || len(holder.Managers) == 0 {
			t.Errorf("%s: the worker %d in the snapshot: %+v", h.Name, w.PID, holder)
			continue
		}
		// The restarter, and every worker but the pod's, in the lab's
		// cgroup subtree.
		inLab := []int{sup.PID}
		if RestarterKinds[i] != RestarterKube {
			inLab = append(inLab, w.PID)
		}
		for _, pid := range inLab {
			if cg, _ := os.ReadFile("/proc/" + itoa(pid) + "/cgroup"); !strings.Contains(string(cg), ":"+l.cgroupBase+"/"+h.Name+"/restarter\n") {
				t.Errorf("%s: pid %d not in the lab's cgroup %s/%s/restarter:\n%s", h.Name, pid, l.cgroupBase, h.Name, cg)
			}
		}
		first := holder.Managers[0]
		switch RestarterKinds[i] {
		case RestarterKube:
			if holder.PodUID != uid || holder.PodQoS != "besteffort" || holder.Pod != PodName || holder.Namespace != PodNamespace ||
				holder.ContainerName != PodContainer || holder.ContainerID != id || holder.Unit != "" {
				t.Errorf("%s: kube worker %+v", h.Name, holder)
			}
			stop := []string{"kubectl", "delete", "pod", "-n", PodNamespace, PodName}
			if len(holder.Managers) != 1 || first.Kind != helper.ManagerPod || first.PodUID != uid || first.Restarts != helper.RestartsYes ||
				first.RestartCount != 2 || !first.DelayKnown || first.Delay.D() != 40*time.Second || !slices.Equal(first.Stop, stop) ||
				first.Cgroup != l.cgroupBase+"/"+h.Name+"/kubepods/besteffort/pod"+uid {
				t.Errorf("%s: kube worker's managers %+v, want its pod only (2 restarts, 40s back-off, %q)", h.Name, holder.Managers, stop)
			}
		default:
			if first.Kind != helper.ManagerProcess || first.PID != sup.PID || first.Comm != comm[RestarterKinds[i]] {
				t.Errorf("%s: %s worker's first manager %+v, want its restarter %d (%s)", h.Name, RestarterKinds[i], first, sup.PID, comm[RestarterKinds[i]])
			}
		}
	}

	procs := l.Procs()
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if Alive(p) {
			t.Errorf("%s %s pid %d alive after Stop", p.Host, p.Role, p.PID)
		}
	}
	for _, hier := range l.cgroups {
		if _, err := os.Stat(filepath.Join(hier, l.cgroupBase)); !os.IsNotExist(err) {
			t.Errorf("the lab's cgroup %s left in %s (%v)", l.cgroupBase, hier, err)
		}
	}
}

func readComm(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
