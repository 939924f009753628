package lab

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/remote/helperbin"

	"github.com/gpush/gpush/lab/procstat"
)

// A lab host must look like a GPU host to the outside: the fake nvidia-smi
// reports the holders' memory, the leftovers are alive with the right
// names, the orphan was re-parented, and Stop ends every process.
func TestLeftoversLab(t *testing.T) {
	if _, err := sshd.FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Hosts: 2, Dir: t.TempDir(), Scenario: ScenarioRespawn, Unreachable: 1})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatal(err)
	}
	defer l.Stop()

	out, err := exec.Command(l.Hosts[1].SMI, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits").CombinedOutput()
	if err != nil {
		t.Fatalf("fake nvidia-smi: %v\n%s", err, out)
	}
	// worker 10240 on GPU 0, orphan parent killed + child 6144 on GPU 1
	// (the parent's memory may linger for the release delay), ignorer 4096
	// on GPU 2, respawner 2048 on GPU 3.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 4 || lines[0] != "0, 10240" || lines[2] != "2, 4096" || lines[3] != "3, 2048" {
		t.Errorf("nvidia-smi memory:\n%s", out)
	}
	gpu0 := RoleServiceMain // vllm-embed.service, or a plain worker without cgroups
	if l.NoServices != "" {
		gpu0 = RoleWorker
	}
	for _, role := range []string{gpu0, RoleOrphan, RoleTermIgnorer, RoleRespawner, RoleSupervisor, RoleMonitor, RolePersistenced, RoleUnrelated} {
		ps := l.Find("lab02", role)
		if len(ps) != 1 || !Alive(ps[0]) {
			t.Errorf("%s: %v not alive", role, ps)
		}
	}
	if ps := l.Find("lab01", RoleOrphanParent); len(ps) != 1 || Alive(ps[0]) {
		t.Errorf("orphan parent %v should be dead", ps)
	}
	comm, _ := os.ReadFile("/proc/" + itoa(l.Find("lab01", RolePersistenced)[0].PID) + "/comm")
	if got := strings.TrimSpace(string(comm)); got != "nvidia-persiste" {
		t.Errorf("persistenced comm %q", got)
	}

	// Workers own their memory (nvidia-uvm open); the monitor holds every
	// GPU's device file and nvidiactl but no nvidia-uvm.
	if fds := openDevs(t, l.Find("lab01", RoleTermIgnorer)[0].PID); !strings.Contains(fds, " nvidia-uvm ") {
		t.Errorf("term-ignorer devices %q lack nvidia-uvm", fds)
	}
	if fds := openDevs(t, l.Find("lab01", RoleMonitor)[0].PID); fds != " nvidia0 nvidia1 nvidia2 nvidia3 nvidiactl " {
		t.Errorf("monitor devices %q, want every nvidiaN and nvidiactl only", fds)
	}
	sup := l.Find("lab01", RoleSupervisor)[0]
	if ppid := parentOf(t, l.Find("lab01", RoleRespawner)[0].PID); ppid != sup.PID {
		t.Errorf("respawner's parent %d, want the supervisor %d", ppid, sup.PID)
	}

	// The respawner comes back as a new process when killed.
	old := l.Find("lab01", RoleRespawner)[0]
	if err := syscallKill(old.PID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(l.Find("lab01", RoleRespawner)) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("respawner never came back")
		}
	}
	if n := l.Find("lab01", RoleRespawner)[1]; !Alive(n) || n.PID == old.PID || parentOf(t, n.PID) != sup.PID {
		t.Errorf("respawned %v (parent %d, want the supervisor %d)", n, parentOf(t, n.PID), sup.PID)
	}

	inv, err := os.ReadFile(l.Inventory)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lab01:", "lab02:", "down01:", "gpush_dev_dir: " + l.Hosts[0].DevDir, "ansible_ssh_private_key_file: " + l.ClientKey} {
		if !strings.Contains(string(inv), want) {
			t.Errorf("inventory lacks %q:\n%s", want, inv)
		}
	}
	// The ssh_config lets plain OpenSSH reach a lab host, as pdsh will.
	if b, err := exec.Command("ssh", "-F", l.SSHConfig, "lab01", "echo", "hi").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "hi" {
		t.Errorf("ssh -F %s lab01: %v\n%s", l.SSHConfig, err, b)
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
	if _, err := os.Stat(filepath.Join(l.Dir, "inventory.yaml")); err != nil {
		t.Errorf("Stop must keep the lab folder: %v", err)
	}
}

// The leftovers scenario with its services: both units active under the
// host's systemctl, their processes in the units' cgroups; stopping
// sglang-qwen.service leaves its worker holding GPU 3; Stop ends it all
// and removes the lab's cgroups.
func TestLeftoversServices(t *testing.T) {
	if _, err := sshd.FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := Start(ctx, Options{Hosts: 1, Dir: t.TempDir()})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatal(err)
	}
	defer l.Stop()
	if l.NoServices != "" {
		t.Skipf("skipping, the lab runs no services here: %s", l.NoServices)
	}
	h := l.Hosts[0]
	if strings.Join(h.Services, ",") != UnitVLLM+","+UnitSGLang {
		t.Errorf("services %v", h.Services)
	}
	inv, _ := os.ReadFile(l.Inventory)
	for _, want := range []string{"gpush_systemctl: " + h.Systemctl, "- " + UnitSGLang} {
		if !strings.Contains(string(inv), want) {
			t.Errorf("inventory lacks %q:\n%s", want, inv)
		}
	}
	systemctl := func(args ...string) string {
		out, _ := exec.Command(h.Systemctl, args...).CombinedOutput()
		return string(out)
	}
	if got := systemctl("is-active", UnitVLLM, UnitSGLang); got != "active\nactive\n" {
		t.Errorf("is-active: %q", got)
	}
	mains, children := l.Find("lab01", RoleServiceMain), l.Find("lab01", RoleServiceChild)
	if len(mains) != 2 || len(children) != 1 || children[0].Unit != UnitSGLang || children[0].GPU != 3 {
		t.Fatalf("service procs: mains %v children %v", mains, children)
	}
	for _, p := range append(mains, children...) {
		cg, _ := os.ReadFile("/proc/" + itoa(p.PID) + "/cgroup")
		if !strings.Contains(string(cg), "/system.slice/"+p.Unit+"\n") {
			t.Errorf("%s pid %d not in its unit's cgroup:\n%s", p.Role, p.PID, cg)
		}
	}
	out, _ := exec.Command(h.SMI, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits").CombinedOutput()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 4 || lines[0] != "0, 10240" || lines[3] != "3, 10240" {
		t.Errorf("nvidia-smi memory:\n%s", out)
	}
	if out, err := exec.Command(h.Systemctl, "stop", UnitSGLang).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	if !Alive(children[0]) {
		t.Error("sglang's worker must outlive the stop (KillMode=process)")
	}
	if got := systemctl("show", "-p", "ActiveState", "-p", "ControlGroup", "--value", UnitSGLang); got != "/gpush-lab/"+filepath.Base(l.Dir)+"-"+itoa(os.Getpid())+"/lab01/system.slice/"+UnitSGLang+"\ninactive\n" {
		t.Errorf("after stop: %q", got)
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
		if _, err := os.Stat(filepath.Join(hier, l.cgroupBase)); err == nil {
			t.Errorf("cgroup %s left in %s", l.cgroupBase, hier)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// openDevs lists the NVIDIA device files (base names) pid has open, sorted,
// space-separated and space-framed.
func openDevs(t *testing.T, pid int) string {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/" + itoa(pid) + "/fd/" + e.Name())
		if err == nil && strings.HasPrefix(filepath.Base(target), "nvidia") {
			names = append(names, filepath.Base(target))
		}
	}
	sort.Strings(names)
	return " " + strings.Join(names, " ") + " "
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	st, err := procstat.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.PPID
}

// procState is pid's state letter (Z: a zombie).
func procState(pid int) (string, error) {
	st, err := procstat.Read(pid)
	return string(st.State), err
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// Each host gets its own latency proxy: its inventory port and ssh_config
// Port are the proxy's, its delay is half its RTT, and a real ssh login
// goes through it to the lab's sshd.
func TestHostRTTProxies(t *testing.T) {
	if _, err := sshd.FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	ssh, err := exec.LookPath("ssh")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ssh client missing in CI: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rtts := []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond}
	l, err := Start(ctx, Options{Hosts: 3, Dir: t.TempDir(), Scenario: ScenarioIdle, HostRTT: func(i int) time.Duration { return rtts[i] }})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatal(err)
	}
	defer l.Stop()
	inv, err := os.ReadFile(l.Inventory)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{l.SSHD.Port: true}
	for i, h := range l.Hosts {
		if seen[h.Port] {
			t.Errorf("host %s: port %d is the sshd's or another host's", h.Name, h.Port)
		}
		seen[h.Port] = true
		if h.RTT != rtts[i] || l.proxies[i].Delay != rtts[i]/2 || l.proxies[i].Port() != h.Port {
			t.Errorf("host %s: RTT %v, proxy delay %v on port %d; want RTT %v, delay %v on port %d",
				h.Name, h.RTT, l.proxies[i].Delay, l.proxies[i].Port(), rtts[i], rtts[i]/2, h.Port)
		}
		if !strings.Contains(string(inv), "ansible_port: "+itoa(h.Port)+"\n") {
			t.Errorf("inventory lacks host %s's ansible_port %d:\n%s", h.Name, h.Port, inv)
		}
		out, err := exec.CommandContext(ctx, ssh, "-F", l.SSHConfig, h.Name, "echo", "via-proxy").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "via-proxy" {
			t.Errorf("ssh %s through its proxy: %v\n%s\nsshd log:\n%s", h.Name, err, out, l.SSHD.Logs())
		}
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, h := range l.Hosts {
		if out, err := exec.CommandContext(ctx, ssh, "-F", l.SSHConfig, "-o", "ConnectTimeout=5", h.Name, "true").CombinedOutput(); err == nil {
			t.Errorf("ssh %s still works after Stop:\n%s", h.Name, out)
		}
	}
}

// BuildGpush embeds every helper gpush knows: one left out is built from
// source at run time by the gpush under test, outliving it.
func TestHelperArchesAreHelperbins(t *testing.T) {
	if !slices.Equal(HelperArches, helperbin.Arches) {
		t.Fatalf("lab.HelperArches %v, remote/helperbin.Arches %v", HelperArches, helperbin.Arches)
	}
}

// startLab starts a lab for t, skipping where the lab's sshd cannot run.
func startLab(t *testing.T, ctx context.Context, o Options) *Lab {
	t.Helper()
	if _, err := sshd.FindBinary(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab's sshd needs root")
	}
	l, err := Start(ctx, o)
	if err != nil {
		if l != nil {
			l.Stop()
		}
		t.Fatal(err)
	}
	return l
}

// A lab started again in the folder of a stopped one starts afresh: its
// services' processes are the ones this start made (alive, new pids), not
// those the previous lab's unit logs name.
func TestRestartInSameDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	l := startLab(t, ctx, Options{Hosts: 1, Dir: dir})
	if l.NoServices != "" {
		l.Stop()
		t.Skipf("skipping, the lab runs no services here: %s", l.NoServices)
	}
	first := map[int]bool{}
	for _, p := range l.Procs() {
		first[p.PID] = true
	}
	// While it runs, the folder is its own.
	var busy *BusyError
	if l2, err := Start(ctx, Options{Hosts: 1, Dir: dir}); !errors.As(err, &busy) || !busy.Running || busy.PID != os.Getpid() || !strings.Contains(err.Error(), dir) {
		if l2 != nil {
			l2.Stop()
		}
		t.Errorf("a second Start in the folder of a running lab: %v, want a BusyError naming pid %d", err, os.Getpid())
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	l = startLab(t, ctx, Options{Hosts: 1, Dir: dir})
	defer l.Stop()
	for _, role := range []string{RoleServiceMain, RoleServiceChild} {
		ps := l.Find("lab01", role)
		if len(ps) == 0 {
			t.Errorf("no %s after the second start", role)
		}
		for _, p := range ps {
			if !Alive(p) || first[p.PID] {
				t.Errorf("second start's %s of %s is pid %d (alive %v, the first lab's %v): read from an earlier start",
					role, p.Unit, p.PID, Alive(p), first[p.PID])
			}
		}
	}
}

// BuildGpush overlays each helper's digest sidecar with one of the helper
// it embeds: helperbin trusts a sidecar naming the embedded size, and the
// tree's, from an earlier `make build`, can name another helper of the
// same size.
func TestBuildGpushOverlaysSidecars(t *testing.T) {
	out := filepath.Join(t.TempDir(), "gpush")
	if err := BuildGpush(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out + ".overlay.json")
	if err != nil {
		t.Fatal(err)
	}
	var ov struct{ Replace map[string]string }
	if err := json.Unmarshal(b, &ov); err != nil {
		t.Fatal(err)
	}
	for _, arch := range HelperArches {
		var bin, side string
		for tree, file := range ov.Replace {
			switch filepath.Base(tree) {
			case "gpush-helper-linux-" + arch:
				bin = file
			case "gpush-helper-linux-" + arch + ".sha256":
				side = file
			}
		}
		if bin == "" || side == "" {
			t.Fatalf("%s: overlay %v lacks the helper or its sidecar", arch, ov.Replace)
		}
		hb, _ := os.ReadFile(bin)
		sb, _ := os.ReadFile(side)
		if want := fmt.Sprintf("%x %d\n", sha256.Sum256(hb), len(hb)); string(sb) != want {
			t.Errorf("%s: sidecar %q, want %q", arch, sb, want)
		}
	}
}
