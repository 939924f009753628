package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
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
	for _, role := range []string{RoleWorker, RoleOrphan, RoleTermIgnorer, RoleRespawner, RolePersistenced, RoleUnrelated} {
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
	if n := l.Find("lab01", RoleRespawner)[1]; !Alive(n) || n.PID == old.PID {
		t.Errorf("respawned %v", n)
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

func itoa(i int) string { return strconv.Itoa(i) }

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
