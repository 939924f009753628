package helper

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/podmanlab"
)

// Real podman (lab/podmanlab: a private storage the helper's plain
// `podman` finds through CONTAINERS_CONF and CONTAINERS_STORAGE_CONF).

func managersDo(t *testing.T, req ManagersRequest) ManagerResult {
	t.Helper()
	resp, err := Managers(context.Background(), req)
	if err != nil {
		t.Fatalf("managers %s: %v", req.Action, err)
	}
	if len(resp.Results) != 1 {
		t.Fatalf("managers %s: %+v", req.Action, resp.Results)
	}
	return resp.Results[0]
}

// A --restart=always container's holder has the container as its one
// manager, read from podman; its policy brings it back after a SIGKILL;
// the managers verb's stop stops it for good.
func TestPodmanRestartAlways(t *testing.T) {
	lab := podmanlab.New(t)
	h := newHost(t, 2)
	const name = "gpush-test-always"
	c := lab.Run(name, podmanlab.Options{Restart: "always", Binds: []string{h.dev}, Hold: []string{h.d("nvidia0")}})
	pid := c.WaitReady(0, 10*time.Second)

	x := findHolder(snapshot(t, h.cfg), pid)
	if x == nil {
		t.Fatalf("the container's process %d is not a holder", pid)
	}
	if x.ContainerID != c.ID || x.Runtime != RuntimePodman || !slices.Equal(x.GPUs, []int{0}) {
		t.Errorf("holder %+v: want podman container %s on GPU 0", x, c.ID)
	}
	// conmon, its parent, is the runtime's monitor, not a manager of its own.
	if len(x.Managers) != 1 {
		t.Fatalf("managers %+v: want the container alone", x.Managers)
	}
	m := x.Managers[0]
	want := []string{"podman", "stop", name}
	if m.Kind != ManagerContainer || m.Runtime != RuntimePodman || m.ContainerID != c.ID || m.ContainerName != name ||
		m.RestartPolicy != "always" || m.RestartCount != 0 || m.Restarts != RestartsYes || !m.DelayKnown || m.Delay != 0 ||
		!slices.Equal(m.Stop, want) || !strings.HasSuffix(m.Cgroup, "/libpod-"+c.ID) {
		t.Fatalf("container manager %+v", m)
	}
	if wantWhy := "podman container " + name + " (restart=always) restarts its workers: podman stop " + name; m.Why != wantWhy {
		t.Errorf("why %q, want %q", m.Why, wantWhy)
	}

	// Its policy starts it again.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pid2 := c.WaitReady(pid, 10*time.Second)
	r := managersDo(t, ManagersRequest{Action: ManagersStatus, Managers: []Manager{m}})
	if !r.Alive || r.Manager.RestartCount != 1 || r.Manager.Restarts != RestartsYes || r.State != fmt.Sprintf("running (pid %d)", pid2) {
		t.Fatalf("after a SIGKILL: %+v", r)
	}
	if x := findHolder(snapshot(t, h.cfg), pid2); x == nil || len(x.Managers) != 1 || x.Managers[0].RestartCount != 1 {
		t.Fatalf("restarted holder %d: %+v", pid2, x)
	}

	r = managersDo(t, ManagersRequest{Action: ManagersStop, DryRun: true, Managers: []Manager{m}})
	if r.Outcome != StopWould || r.Reason != "would run podman stop "+name || !r.Alive {
		t.Fatalf("dry run: %+v", r)
	}
	if st, _ := c.State(); st.Status != "running" || st.Pid != pid2 {
		t.Fatalf("a dry run changed the container: %+v", st)
	}

	r = managersDo(t, ManagersRequest{Action: ManagersStop, Grace: Duration(5 * time.Second), Managers: []Manager{m}})
	if r.Outcome != StopStopped || r.Alive || !strings.HasPrefix(r.Reason, "podman stop -t 5 "+name+": exited (exit code 0)") {
		t.Fatalf("stop: %+v", r)
	}
	// Stopped by hand, it stays stopped.
	time.Sleep(time.Second)
	if st, _ := c.State(); st.Status != "exited" || st.RestartCount != 1 {
		t.Fatalf("after the stop: %+v", st)
	}
	if alive(pid2) {
		t.Fatalf("pid %d alive after the stop", pid2)
	}
	r = managersDo(t, ManagersRequest{Action: ManagersStatus, Managers: []Manager{m}})
	if r.Alive || r.State != "exited (exit code 0)" || r.Manager.Restarts != RestartsYes {
		t.Fatalf("status after the stop: %+v", r)
	}
	if r = managersDo(t, ManagersRequest{Action: ManagersStop, Managers: []Manager{m}}); r.Outcome != StopAlready {
		t.Fatalf("stop of a stopped container: %+v", r)
	}
}

// --restart=no: Restarts no, alive while it runs and not after its
// process dies; a removed container is gone.
func TestPodmanRestartNo(t *testing.T) {
	lab := podmanlab.New(t)
	h := newHost(t, 1)
	const name = "gpush-test-no"
	c := lab.Run(name, podmanlab.Options{Restart: "no", Binds: []string{h.dev}, Hold: []string{h.d("nvidia0")}})
	pid := c.WaitReady(0, 10*time.Second)
	x := findHolder(snapshot(t, h.cfg), pid)
	if x == nil || len(x.Managers) != 1 {
		t.Fatalf("holder %+v", x)
	}
	m := x.Managers[0]
	if m.ContainerName != name || m.RestartPolicy != "no" || m.Restarts != RestartsNo || m.DelayKnown {
		t.Fatalf("container manager %+v", m)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var r ManagerResult
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if r = managersDo(t, ManagersRequest{Action: ManagersStatus, Managers: []Manager{m}}); !r.Alive {
			break
		}
	}
	if r.Alive || r.Manager.Restarts != RestartsNo || !strings.HasSuffix(r.State, "(exit code 137)") {
		t.Fatalf("after a SIGKILL: %+v", r)
	}
	c.Remove()
	r = managersDo(t, ManagersRequest{Action: ManagersStatus, Managers: []Manager{m}})
	if r.Alive || r.State != "gone: podman has no container "+c.ID {
		t.Fatalf("removed: %+v", r)
	}
	if r = managersDo(t, ManagersRequest{Action: ManagersStop, Managers: []Manager{m}}); r.Outcome != StopAlready {
		t.Fatalf("stop of a removed container: %+v", r)
	}
}

// Docker's files, read when its CLI is not there (real docker cannot run
// on the test machines: these are files as its daemon writes them).
func TestDockerFilesManager(t *testing.T) {
	saved := runtimeCLI
	runtimeCLI = func(name string) (string, string) { return "", name + " not found (test)" }
	t.Cleanup(func() { runtimeCLI = saved })

	root := t.TempDir()
	// A data-root of its own, as /etc/docker/daemon.json says.
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/docker/daemon.json", `{"data-root": "/data/docker", "log-level": "info"}`)
	id := func(c byte) string { return strings.Repeat(string(c), 64) }
	started := func(ago time.Duration) string { return time.Now().Add(-ago).UTC().Format(time.RFC3339Nano) }
	ctr := func(c byte, name, state string, restarts int, manual bool, policy string, max int) {
		write("data/docker/containers/"+id(c)+"/config.v2.json", fmt.Sprintf(
			`{"StreamConfig":{},"State":%s,"ID":%q,"Created":"2026-12-01T10:00:00Z","Path":"python3","Name":"/%s","RestartCount":%d,"HasBeenManuallyStopped":%v}`,
			state, id(c), name, restarts, manual))
		write("data/docker/containers/"+id(c)+"/hostconfig.json", fmt.Sprintf(
			`{"Binds":null,"NetworkMode":"default","RestartPolicy":{"Name":%q,"MaximumRetryCount":%d},"AutoRemove":false}`, policy, max))
	}
	running := func(ago time.Duration) string {
		return fmt.Sprintf(`{"Running":true,"Paused":false,"Restarting":false,"OOMKilled":false,"RemovalInProgress":false,"Dead":false,"Pid":4242,"ExitCode":0,"Error":"","StartedAt":%q,"FinishedAt":"0001-01-01T00:00:00Z","Health":null}`, started(ago))
	}
	exited := fmt.Sprintf(`{"Running":false,"Paused":false,"Restarting":false,"RemovalInProgress":false,"Dead":false,"Pid":0,"ExitCode":137,"StartedAt":%q,"FinishedAt":%q}`, started(time.Hour), started(time.Minute))
	restarting := fmt.Sprintf(`{"Running":true,"Paused":false,"Restarting":true,"Pid":0,"ExitCode":1,"StartedAt":%q,"FinishedAt":%q}`, started(3*time.Second), started(time.Second))
	ctr('a', "web", running(time.Minute), 2, false, "always", 0)
	ctr('b', "manual", exited, 0, true, "unless-stopped", 0)
	ctr('c', "flappy", restarting, 1, false, "on-failure", 5)
	ctr('d', "spent", exited, 3, false, "on-failure", 3)
	ctr('e', "young", running(2*time.Second), 0, false, "always", 0)
	ctr('f', "plain", running(time.Minute), 0, false, "", 0)
	write("data/docker/containers/"+id('9')+"/config.v2.json", `{"State":`)

	req := func(ms ...Manager) []ManagerResult {
		t.Helper()
		resp, err := Managers(context.Background(), ManagersRequest{Config: Config{RootDir: root}, Action: ManagersStatus, Managers: ms})
		if err != nil || len(resp.Results) != len(ms) {
			t.Fatalf("managers: %v %+v", err, resp)
		}
		return resp.Results
	}
	dm := func(c byte) Manager {
		return Manager{Kind: ManagerContainer, Runtime: RuntimeDocker, ContainerID: id(c)}
	}
	byName := Manager{Kind: ManagerContainer, Runtime: RuntimeDocker, ContainerName: "flappy"}
	rs := req(dm('a'), dm('b'), dm('c'), dm('d'), dm('e'), dm('f'), dm('7'), dm('9'), byName)
	check := func(i int, alive bool, restarts, policy string, count int, delay time.Duration, known bool, state string) {
		t.Helper()
		r := rs[i]
		if r.Alive != alive || r.Manager.Restarts != restarts || r.Manager.RestartPolicy != policy || r.Manager.RestartCount != count ||
			r.Manager.Delay.D() != delay || r.Manager.DelayKnown != known || !strings.HasPrefix(r.State, state) {
			t.Errorf("result %d: %+v\nwant alive %v restarts %s policy %q count %d delay %s (%v) state %q", i, r, alive, restarts, policy, count, delay, known, state)
		}
	}
	check(0, true, RestartsYes, "always", 2, 100*time.Millisecond, true, "running (pid 4242)")
	check(1, false, RestartsYes, "unless-stopped", 0, 0, false, "exited (exit code 137), stopped by hand")
	check(2, true, RestartsYes, "on-failure", 1, 0, false, "restarting")
	check(3, false, RestartsNo, "on-failure", 3, 0, false, "exited (exit code 137)")
	check(4, true, RestartsYes, "always", 0, 0, false, "running")
	check(5, true, RestartsNo, "no", 0, 0, false, "running")
	check(6, false, RestartsMaybe, "", 0, 0, false, "gone: docker's files (docker not found (test)) has no container "+id('7'))
	check(7, true, RestartsMaybe, "", 0, 0, false, "unknown: docker's config.v2.json of 999999999999: unexpected end of JSON input")
	check(8, true, RestartsYes, "on-failure", 1, 0, false, "restarting")
	if n := rs[0].Manager.ContainerName; n != "web" || !slices.Equal(rs[0].Manager.Stop, []string{"docker", "stop", "web"}) {
		t.Errorf("name %q stop %q", n, rs[0].Manager.Stop)
	}

	// Its CLI absent, a stop is not run: the operator is told the command.
	resp, err := Managers(context.Background(), ManagersRequest{Config: Config{RootDir: root}, Action: ManagersStop, Managers: []Manager{dm('a')}})
	if err != nil || resp.Results[0].Outcome != StopFailed || resp.Results[0].Reason != "docker not found (test): run docker stop web" || !resp.Results[0].Alive {
		t.Errorf("stop without the CLI: %v %+v", err, resp)
	}

	// No folder to read: not known, so alive.
	os.Remove(filepath.Join(root, "etc/docker/daemon.json"))
	rs = req(dm('a'))
	if !rs[0].Alive || rs[0].Manager.Restarts != RestartsMaybe || !strings.HasPrefix(rs[0].State, "unknown: docker not found (test); docker's containers cannot be read: ") {
		t.Errorf("no docker folder: %+v", rs[0])
	}
}

// A container manager's cgroup is the container's own folder in the path.
func TestContainerCgroup(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for path, want := range map[string]string{
		"/libpod_parent/libpod-" + id:                                  "/libpod_parent/libpod-" + id,
		"/machine.slice/libpod-" + id + ".scope/container":             "/machine.slice/libpod-" + id + ".scope",
		"/system.slice/docker-" + id + ".scope":                        "/system.slice/docker-" + id + ".scope",
		"/docker/" + id:                                                "/docker/" + id,
		"/system.slice/w.service/libpod-payload-" + id + "/init.scope": "/system.slice/w.service/libpod-payload-" + id,
		"/system.slice/sshd.service":                                   "",
	} {
		if got := containerCgroup(path); got != want {
			t.Errorf("containerCgroup(%q) = %q, want %q", path, got, want)
		}
	}
}
