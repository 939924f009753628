package lab

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab/labsystemd"
	"github.com/gpush/gpush/lab/podmanlab"
	"golang.org/x/sys/unix"
)

// What stages the incidents of real clusters on lab hosts: more GPUs
// (Options.GPUs), holders of another user (Options.OtherUser), a worker in
// a real podman container (Options.Podman), and host names of a prefix of
// one's own, so that two labs merge into one fleet (Options.Prefix).

// DefaultPrefix names the lab's hosts when Options.Prefix is empty.
const DefaultPrefix = "lab"

func validPrefix(p string) bool {
	for i, r := range p {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || r != '-' && (r < '0' || r > '9')) {
			return false
		}
	}
	return p != ""
}

// downName is the name of unreachable host i (1-based): down01, ... for
// the default prefix, PREFIX-down01, ... for another.
func downName(prefix string, i int) string {
	if prefix == DefaultPrefix {
		return fmt.Sprintf("down%02d", i)
	}
	return fmt.Sprintf("%s-down%02d", prefix, i)
}

// prefixTag sets the second group of the lab's GPU UUIDs: 0 for the
// default prefix (the UUIDs of labs before prefixes), else a hash of the
// prefix, so that two merged labs' GPUs have UUIDs of their own.
func prefixTag(prefix string) uint16 {
	if prefix == DefaultPrefix {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(prefix))
	v := uint16(h.Sum32()) | uint16(h.Sum32()>>16)
	if v == 0 {
		v = 1
	}
	return v
}

// busID is GPU i's PCI bus id: 18, 28, ... F8 on domain 0 (the first 15,
// as the lab always had them), then the same buses on domains 1, 2, ...
func busID(i int) string {
	return fmt.Sprintf("%08X:%02X:00.0", i/15, 0x18+(i%15)*0x10)
}

// lookupUser turns Options.OtherUser (a name, or a uid with or without an
// account) into the credential its holders start with.
func lookupUser(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.ParseUint(name, 10, 32); nerr != nil {
			return nil, fmt.Errorf("lab: OtherUser %q: %w", name, err)
		}
		if u, err = user.LookupId(name); err != nil {
			// A uid without an account: its own gid, as nothing says another.
			return &syscall.Credential{Uid: mustUint32(name), Gid: mustUint32(name), NoSetGroups: true}, nil
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("lab: OtherUser %q: uid %q", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("lab: OtherUser %q: gid %q", name, u.Gid)
	}
	if uid == 0 {
		return nil, fmt.Errorf("lab: OtherUser %q is root: name another user", name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func mustUint32(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}

// searchableByOthers checks that dir and every folder above it let other
// users through (o+x): another user's holder runs from dir/bin.
func searchableByOthers(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (mode %v): pick a lab folder every user can reach, or chmod o+x it", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// procUID is pid's real uid (-1 when it cannot be read).
func procUID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// podmanDir is the lab's private podman setup in a lab folder.
func podmanDir(dir string) string { return filepath.Join(dir, "podman") }

// setupPodman writes the lab's private podman setup (Options.Podman).
func (l *Lab) setupPodman() error {
	if l.opts.Isolate {
		// The container's process would live in the machine's PID
		// namespace: the host's view would not show it.
		return errors.New("lab: Podman with Isolate: a container's worker runs outside the host's PID namespace, so the host would not see it; use one or the other")
	}
	r, err := podmanlab.Setup(podmanDir(l.Dir), false)
	if err != nil {
		return fmt.Errorf("lab: Podman: %w", err)
	}
	l.Podman = r
	return nil
}

// startContainer starts h's podman worker on GPU gpu: the lab's static
// gpu-holder as python3 in a container with --restart=always, the host's
// device folder and the holder's folder mounted at their own paths, and
// records its process once it holds the GPU.
func (l *Lab) startContainer(ctx context.Context, h Host, gpu int) error {
	bin, err := l.holderAs("python3")
	if err != nil {
		return err
	}
	dev := func(n string) string { return filepath.Join(h.DevDir, n) }
	gpuDev := dev(fmt.Sprintf("nvidia%d", gpu))
	o := podmanlab.Options{Restart: "always", Binds: []string{h.DevDir, filepath.Dir(bin)},
		Cmd: []string{bin, "--dev", gpuDev, "--dev", dev("nvidiactl"), "--dev", dev("nvidia-uvm"), "--mem-mib", "6144"}}
	if l.other != nil {
		o.User = fmt.Sprintf("%d:%d", l.other.Uid, l.other.Gid)
	}
	// A container an earlier lab in this folder left stopped keeps its name.
	if err := l.Podman.Remove(h.Container); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, l.Podman.Podman, l.Podman.RunArgs(h.Container, o)...)
	if l.NoServices == "" {
		// In the lab's cgroup subtree: the container under the host's
		// podman folder, and `podman run` in podman/conmon, which the
		// conmon it starts stays in (cgroupfs moves it nowhere), with the
		// cleanups that conmon runs to restart the container.
		o.CgroupParent = l.cgroupBase + "/" + h.Name + "/podman"
		var procs []string
		for _, hier := range l.cgroups {
			dir := filepath.Join(hier, o.CgroupParent, "conmon")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("podman cgroup: %w", err)
			}
			procs = append(procs, filepath.Join(dir, "cgroup.procs"))
		}
		join := `while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"`
		args := append([]string{"-c", join, "podman-run"}, procs...)
		args = append(append(args, "--", l.Podman.Podman), l.Podman.RunArgs(h.Container, o)...)
		cmd = exec.CommandContext(ctx, "/bin/sh", args...)
	}
	cmd.Env = append(os.Environ(), l.Podman.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("podman run %s: %w: %s", h.Container, err, strings.TrimSpace(string(out)))
	}
	var last podmanlab.State
	for {
		st, ok, err := l.Podman.State(h.Container)
		if err != nil {
			return err
		}
		last = st
		if ok && st.Status == "running" && st.Pid > 0 && holds(st.Pid, gpuDev) {
			p := &proc{Proc: Proc{Host: h.Name, Role: RoleContainer, GPU: gpu, PID: st.Pid, HostPID: st.Pid, Container: h.Container}}
			p.StartTime, _ = StartTime(p.PID)
			l.add(p)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("podman container %s not holding %s (last state %+v): %w", h.Container, gpuDev, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// holds reports whether pid has path open.
func holds(pid int, path string) bool {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if t, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && t == path {
			return true
		}
	}
	return false
}

// removeContainers removes every host's container, by name.
func (l *Lab) removeContainers() error {
	if l.Podman == nil {
		return nil
	}
	var errs []error
	for _, h := range l.Hosts {
		if h.Container != "" {
			if err := l.Podman.Remove(h.Container); err != nil {
				errs = append(errs, fmt.Errorf("lab host %s: %w", h.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// endContainers removes, by name, every container of the private podman
// setup a dead lab left in dir: all of them are that lab's. It returns how
// many it removed.
func endContainers(dir string) (int, error) {
	if _, err := os.Stat(filepath.Join(podmanDir(dir), "containers.conf")); err != nil {
		return 0, nil
	}
	r, err := podmanlab.Setup(podmanDir(dir), false)
	if err != nil {
		return 0, err
	}
	out, err := r.Exec("ps", "-a", "--format", "{{.Names}}")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range strings.Fields(out) {
		if err := r.Remove(name); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// controllerHierarchies are the cgroup v1 hierarchies mounted in root
// other than hs, those the lab places its processes in: the controllers'
// (cpu, memory, pids, ...), where podman's cgroupfs manager makes a
// container's cgroups too. None on a pure cgroup v2 host.
func controllerHierarchies(root string, hs []string) []string {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if !e.IsDir() || slices.Contains(hs, p) {
			continue // a symlink (cpu -> cpu,cpuacct) names one already listed
		}
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == cgroup1Magic {
			out = append(out, p)
		}
	}
	return out
}

const cgroup1Magic = 0x27e0eb

// removeControllerTrees removes the cgroups under base that podman made in
// the controllers' hierarchies for the lab's containers, and the shared
// parent where no other lab uses it.
func removeControllerTrees(hs []string, base string) []error {
	var errs []error
	for _, h := range controllerHierarchies(labsystemd.DefaultCgroupRoot, hs) {
		if _, err := os.Stat(filepath.Join(h, base)); err != nil {
			continue
		}
		if err := labsystemd.RemoveTree(h, base); err != nil {
			errs = append(errs, fmt.Errorf("lab: %w", err))
		}
		labsystemd.Prune(filepath.Join(h, filepath.Dir(base)), h)
	}
	return errs
}
