package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lab/labsystemd"
	"github.com/gpush/gpush/lab/podmanlab"
)

// An 8-GPU host: the leftovers on GPUs 0-3, GPUs 4-7 listed and free, the
// monitor holding all eight, every bus id and UUID its own; a scenario
// given fewer GPUs than it needs is refused, naming both numbers.
func TestEightGPUHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := startLab(t, ctx, Options{Hosts: 1, Dir: t.TempDir(), GPUs: 8})
	defer l.Stop()
	h := l.Hosts[0]
	out, err := exec.Command(h.SMI, "--query-gpu=index,uuid,pci.bus_id,memory.used", "--format=csv,noheader,nounits").CombinedOutput()
	if err != nil {
		t.Fatalf("fake nvidia-smi: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 8 {
		t.Fatalf("nvidia-smi lists %d GPUs, want 8:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	for i, line := range lines {
		f := strings.Split(line, ", ")
		if len(f) != 4 || f[0] != itoa(i) || seen[f[1]] || seen[f[2]] {
			t.Errorf("GPU %d: %q (uuid and bus id must be unique)", i, line)
			continue
		}
		seen[f[1]], seen[f[2]] = true, true
		if i >= 4 && f[3] != "0" {
			t.Errorf("GPU %d past the leftovers' four uses %s MiB, want 0", i, f[3])
		}
		if i == 2 && f[3] != "4096" {
			t.Errorf("GPU 2 (the TERM ignorer) uses %s MiB, want 4096", f[3])
		}
	}
	if fds := openDevs(t, l.Find(h.Name, RoleMonitor)[0].PID); fds != " nvidia0 nvidia1 nvidia2 nvidia3 nvidia4 nvidia5 nvidia6 nvidia7 nvidiactl " {
		t.Errorf("monitor devices %q, want all eight GPUs and nvidiactl", fds)
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}

	_, err = Start(ctx, Options{Hosts: 1, Dir: t.TempDir(), GPUs: 3, Scenario: ScenarioRespawn})
	if err == nil || !strings.Contains(err.Error(), "scenario respawn needs 4 GPUs, have 3") {
		t.Errorf("respawn on 3 GPUs: %v, want a refusal naming 4 and 3", err)
	}
}

// Bus ids stay well-formed past 15 GPUs.
func TestBusIDs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 64; i++ {
		id := busID(i)
		var dom, bus int
		if _, err := fmt.Sscanf(id, "%08X:%02X:00.0", &dom, &bus); err != nil || len(id) != 16 || seen[id] {
			t.Errorf("GPU %d: bus id %q", i, id)
		}
		seen[id] = true
	}
	if busID(0) != "00000000:18:00.0" || busID(3) != "00000000:48:00.0" {
		t.Errorf("the first GPUs' bus ids changed: %s %s", busID(0), busID(3))
	}
}

// searchableTempDir is a temporary lab folder that other users can reach
// (t.TempDir's own folder is 0700).
func searchableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := searchableByOthers(dir); err != nil {
		t.Skipf("skipping: %v", err)
	}
	return dir
}

// OtherUser: the orphan and the TERM ignorer run as uid 65534 (no account
// needed), everything else as root; the helper's snapshot says so; a lab
// folder other users cannot reach is refused up front.
func TestOtherUserHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := startLab(t, ctx, Options{Hosts: 1, Dir: searchableTempDir(t), Scenario: ScenarioRespawn, OtherUser: "65534"})
	defer l.Stop()
	h := l.Hosts[0]
	other := map[string]bool{RoleOrphan: true, RoleOrphanParent: true, RoleTermIgnorer: true}
	for _, p := range l.Procs() {
		if p.Role == RoleOrphanParent {
			continue // killed at start
		}
		want := 0
		if other[p.Role] {
			want = 65534
		}
		if p.UID != want || procUID(p.PID) != want {
			t.Errorf("%s pid %d: uid %d (now %d), want %d", p.Role, p.PID, p.UID, procUID(p.PID), want)
		}
	}
	snap, err := helper.TakeSnapshot(ctx, helper.Config{DevDir: h.DevDir, NvidiaSMI: h.SMI})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[int]int{}
	for _, hd := range snap.Holders {
		uids[hd.PID] = hd.UID
	}
	for _, role := range []string{RoleOrphan, RoleTermIgnorer, RoleRespawner, RoleMonitor} {
		p := l.Find(h.Name, role)[0]
		want := 0
		if other[role] {
			want = 65534
		}
		if got, ok := uids[p.PID]; !ok || got != want {
			t.Errorf("helper: %s pid %d uid %d (listed %v), want %d", role, p.PID, got, ok, want)
		}
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}

	private := t.TempDir()
	os.Chmod(filepath.Dir(private), 0o700)
	_, err = Start(ctx, Options{Hosts: 1, Dir: private, OtherUser: "nobody"})
	if err == nil || !strings.Contains(err.Error(), "not searchable by other users") {
		t.Errorf("OtherUser in a 0700 folder: %v, want a refusal", err)
	}
	_, err = Start(ctx, Options{Hosts: 1, Dir: t.TempDir(), OtherUser: "root"})
	if err == nil || !strings.Contains(err.Error(), "is root") {
		t.Errorf("OtherUser root: %v, want a refusal", err)
	}
}

// Podman: each host's worker runs in a real podman container of the lab's
// own podman, on the first GPU its scenario leaves free, as OtherUser,
// inside the lab's cgroup subtree; the helper, run over the lab's sshd
// (whose sessions get CONTAINERS_CONF), sees it as a podman container
// holder whose manager is the container, restart policy always, read from
// that podman; a killed worker comes back; Stop removes the container.
func TestPodmanHolder(t *testing.T) {
	if _, _, err := podmanlab.Find(); err != nil {
		if os.Getenv(podmanlab.RequireEnv) != "" {
			t.Fatal(err)
		}
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	helperBin := filepath.Join(t.TempDir(), "gpush-helper")
	if err := GoBuild(ctx, helperBin, "github.com/gpush/gpush/cmd/gpush-helper"); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(ctx, Options{Hosts: 1, Dir: t.TempDir(), GPUs: 4, Podman: true}); err == nil ||
		!strings.Contains(err.Error(), "5 GPUs or more") {
		t.Errorf("podman on a full 4-GPU leftovers host: %v, want a refusal asking for 5", err)
	}
	l := startLab(t, ctx, Options{Hosts: 2, Dir: searchableTempDir(t), Scenario: ScenarioRestarters, Podman: true, OtherUser: "65534"})
	defer l.Stop()
	if l.Podman == nil || !strings.HasPrefix(l.Podman.Dir, l.Dir+"/") {
		t.Fatalf("the lab's podman %+v, want one under %s", l.Podman, l.Dir)
	}
	for _, h := range l.Hosts {
		cs := l.Find(h.Name, RoleContainer)
		if len(cs) != 1 || !Alive(cs[0]) || cs[0].GPU != 1 || cs[0].Container != h.Name+"-trainer" || cs[0].UID != 65534 {
			t.Fatalf("%s: container workers %+v, want one alive on GPU 1 in %s-trainer as 65534", h.Name, cs, h.Name)
		}
		w := cs[0]
		cg, _ := os.ReadFile("/proc/" + itoa(w.PID) + "/cgroup")
		if l.NoServices == "" && !strings.Contains(string(cg), l.cgroupBase+"/"+h.Name+"/podman/libpod-") {
			t.Errorf("%s: container worker's cgroup not in the lab's subtree %s:\n%s", h.Name, l.cgroupBase, cg)
		}
		id, err := l.Podman.Exec("container", "inspect", "--format", "{{.Id}}", h.Container)
		if err != nil {
			t.Fatal(err)
		}
		id = strings.TrimSpace(id)

		// The helper as gpush runs it: over the sshd, the request on stdin.
		req, _ := json.Marshal(helper.SnapshotRequest{Config: helper.Config{DevDir: h.DevDir, NvidiaSMI: h.SMI}})
		cmd := exec.CommandContext(ctx, "ssh", "-F", l.SSHConfig, h.Name, helperBin, "snapshot")
		cmd.Stdin = bytes.NewReader(req)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: helper snapshot over ssh: %v\n%s", h.Name, err, stderr.String())
		}
		var snap helper.Snapshot
		if err := json.Unmarshal(out, &snap); err != nil {
			t.Fatalf("%s: snapshot: %v\n%s", h.Name, err, out)
		}
		var holder *helper.Holder
		for i := range snap.Holders {
			if snap.Holders[i].PID == w.PID {
				holder = &snap.Holders[i]
			}
		}
		if holder == nil {
			t.Fatalf("%s: the container worker %d is not in the snapshot:\n%s", h.Name, w.PID, out)
		}
		if holder.Runtime != helper.RuntimePodman || holder.ContainerID != id || holder.UID != 65534 || !slices.Equal(holder.GPUs, []int{1}) {
			t.Errorf("%s: container holder %+v, want podman container %s as 65534 on GPU 1", h.Name, holder, id)
		}
		var m *helper.Manager
		for i := range holder.Managers {
			if holder.Managers[i].Kind == helper.ManagerContainer {
				m = &holder.Managers[i]
			}
		}
		if m == nil || m.ContainerName != h.Container || m.RestartPolicy != "always" || m.Runtime != helper.RuntimePodman {
			t.Errorf("%s: container manager %+v (all %+v), want %s, policy always, read from the lab's podman", h.Name, m, holder.Managers, h.Container)
		}
	}

	// --restart=always: a killed worker is back in a new process.
	h := l.Hosts[0]
	old := l.Find(h.Name, RoleContainer)[0]
	if err := syscallKill(old.PID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, ok, err := l.Podman.State(h.Container)
		if err != nil {
			t.Fatal(err)
		}
		if ok && st.Status == "running" && st.Pid != old.PID && st.RestartCount >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s not restarted: %+v", h.Container, st)
		}
	}

	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, h := range l.Hosts {
		if _, ok, err := l.Podman.State(h.Container); ok || err != nil {
			t.Errorf("container %s still there after Stop (%v)", h.Container, err)
		}
	}
	if left := exesUnder(l.Dir); len(left) > 0 {
		t.Errorf("processes %v still run the lab's programs after Stop", left)
	}
	// podman made the container's cgroups in every controller's hierarchy.
	for _, hier := range append(controllerHierarchies(labsystemd.DefaultCgroupRoot, l.cgroups), l.cgroups...) {
		if _, err := os.Stat(filepath.Join(hier, l.cgroupBase)); !os.IsNotExist(err) {
			t.Errorf("the lab's cgroup %s left in %s (%v)", l.cgroupBase, hier, err)
		}
	}
}

// Two labs side by side, one prefixed gpu, both isolated: host names,
// groups, ports and GPU UUIDs are apart; their inventories merge into one
// that reaches each host on its own lab's sshd, with its own vars; each
// lab's ssh_config reaches its hosts, which see their own processes.
func TestPrefixTwoLabs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startLab(t, ctx, Options{Hosts: 2, Dir: t.TempDir(), Scenario: ScenarioIdle, Unreachable: 1, Isolate: true})
	defer a.Stop()
	b := startLab(t, ctx, Options{Hosts: 2, Dir: t.TempDir(), Scenario: ScenarioIdle, Unreachable: 1, Isolate: true, Prefix: "gpu", GPUs: 8})
	defer b.Stop()
	if got := []string{b.Hosts[0].Name, b.Hosts[1].Name}; !slices.Equal(got, []string{"gpu01", "gpu02"}) {
		t.Fatalf("prefixed hosts %v", got)
	}
	uuids := func(l *Lab) []string {
		out, err := exec.Command(l.Hosts[0].SMI, "--query-gpu=uuid", "--format=csv,noheader").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(out))
	}
	ua, ub := uuids(a), uuids(b)
	for _, u := range ub {
		if slices.Contains(ua, u) {
			t.Errorf("GPU UUID %s in both labs", u)
		}
	}

	kh := filepath.Join(t.TempDir(), "known_hosts")
	var khs []byte
	for _, l := range []*Lab{a, b} {
		k, err := os.ReadFile(l.KnownHosts)
		if err != nil {
			t.Fatal(err)
		}
		khs = append(khs, k...)
	}
	if err := os.WriteFile(kh, khs, 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.ResolveAll([]string{a.Inventory, b.Inventory}, inventory.Options{SSHConfigFiles: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Host{}
	for _, l := range []*Lab{a, b} {
		for _, h := range l.Hosts {
			want[h.Name] = h
		}
	}
	byName := map[string]inventory.Host{}
	for _, h := range inv.Hosts() {
		byName[h.Name] = h
	}
	for _, name := range []string{"lab01", "lab02", "gpu01", "gpu02", "down01", "gpu-down01"} {
		if h, ok := byName[name]; !ok || h.Address != "127.0.0.1" {
			t.Errorf("merged inventory: %s %+v (has %v)", name, h, inv.HostNames())
		}
	}
	for name, h := range want {
		ih, ok := byName[name]
		if !ok {
			continue
		}
		if ih.Port != h.Port {
			t.Errorf("%s: merged port %d, want its proxy's %d", name, ih.Port, h.Port)
		}
		if got := fmt.Sprint(ih.Vars["gpush_dev_dir"]); got != h.DevDir {
			t.Errorf("%s: merged gpush_dev_dir %s, want %s", name, got, h.DevDir)
		}
		l := a
		if strings.HasPrefix(name, "gpu") {
			l = b
		}
		if !slices.Equal(ih.IdentityFiles, []string{l.ClientKey}) {
			t.Errorf("%s: merged keys %v, want its lab's %s", name, ih.IdentityFiles, l.ClientKey)
		}
	}
	// Each host through its lab's ssh_config sees its own lab-init and its
	// own holders only.
	for _, l := range []*Lab{a, b} {
		for _, h := range l.Hosts {
			out, err := exec.CommandContext(ctx, "ssh", "-F", l.SSHConfig, h.Name,
				`cat /proc/1/comm; for d in /proc/[0-9]*; do tr '\0' ' ' < "$d/cmdline" 2>/dev/null; echo; done`).CombinedOutput()
			if err != nil {
				t.Fatalf("ssh %s: %v\n%s", h.Name, err, out)
			}
			if !strings.HasPrefix(string(out), "lab-init\n") || !strings.Contains(string(out), h.DevDir+"/") {
				t.Errorf("%s: sees\n%s", h.Name, out)
			}
			for _, o := range want {
				if o.Name != h.Name && strings.Contains(string(out), o.DevDir+"/") {
					t.Errorf("%s sees %s's processes:\n%s", h.Name, o.Name, out)
				}
			}
		}
	}
}
