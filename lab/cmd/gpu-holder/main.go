// Command gpu-holder simulates a GPU worker: it opens device files (fake
// /dev/nvidia* in the lab), says `ready <pid>` on stdout, and sleeps until
// killed. The memory it "uses" is its --mem-mib flag, which the fake
// nvidia-smi reads from /proc/PID/cmdline.
//
//	gpu-holder --dev DIR/nvidia0 --dev DIR/nvidiactl --mem-mib 10240
//	gpu-holder ... --ignore-term          # survives SIGTERM (SIG_IGN)
//	gpu-holder ... --catch-term           # survives SIGTERM (a handler that carries on)
//	gpu-holder ... --child-mem-mib 6144   # plus a child worker that outlives it
//	gpu-holder ... --keeper               # plus a child that inherits the devices and
//	                                      # keeps this process's memory when it dies
//	gpu-holder ... --zombie-leader        # the main thread exits, other threads hold on
//
// comm cannot be set by a flag; run a copy or link of the binary under the
// wanted name (python3, nvidia-persistenced).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
	"golang.org/x/sys/unix"
)

type devList []string

func (d *devList) String() string     { return strings.Join(*d, ",") }
func (d *devList) Set(v string) error { *d = append(*d, v); return nil }

// The zombie-leader mode must run its main goroutine on the main thread
// (the thread-group leader), which only init can arrange.
func init() {
	if slices.Contains(os.Args[1:], "--zombie-leader") || slices.Contains(os.Args[1:], "-zombie-leader") {
		runtime.LockOSThread()
	}
}

func main() {
	var devs devList
	flag.Var(&devs, "dev", "device file to hold open (repeatable)")
	mem := flag.Int64("mem-mib", 0, "GPU memory (MiB) this process uses on each GPU device it holds")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM")
	catchTerm := flag.Bool("catch-term", false, "catch SIGTERM and carry on")
	childMem := flag.Int64("child-mem-mib", 0, "also start a child holder of the same devices using this much memory; it outlives this process")
	keeper := flag.Bool("keeper", false, "also start a child that inherits the open devices and uses no memory of its own: "+
		"after this process dies its memory stays charged to its pid (what the driver does for a forked child)")
	keepsOf := flag.Int("keeps-mem-of", 0, "(set by --keeper) pid whose memory this process keeps alive")
	keepsMem := flag.Int64("keeps-mem-mib", 0, "(set by --keeper) how much memory that is, per GPU")
	zombie := flag.Bool("zombie-leader", false, "after ready, exit the main thread only: the leader turns Z while other threads hold the devices")
	flag.Parse()
	_, _ = keepsOf, keepsMem // read by the fake nvidia-smi from the command line
	if len(devs) == 0 {
		fmt.Fprintln(os.Stderr, "gpu-holder: at least one --dev is required")
		os.Exit(2)
	}
	if *mem < 0 || *childMem < 0 {
		fmt.Fprintln(os.Stderr, "gpu-holder: memory must be >= 0")
		os.Exit(2)
	}
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if *catchTerm {
		// A handler, not SIG_IGN: the kernel delivers TERM, the process
		// decides (as a worker that drains before exiting would).
		caught := make(chan os.Signal, 1)
		signal.Notify(caught, syscall.SIGTERM)
		go func() {
			for range caught {
			}
		}()
	}
	files := make([]*os.File, 0, len(devs))
	for _, d := range devs {
		f, err := os.Open(d)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpu-holder: open device: %v\n", err)
			os.Exit(1)
		}
		files = append(files, f)
	}
	if *mem > 0 || *keepsOf > 0 {
		// A CUDA context maps the device files (the helper tells owners
		// from monitors by that); monitors map nothing.
		for _, f := range files {
			if _, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED); err != nil {
				fmt.Fprintf(os.Stderr, "gpu-holder: map %s: %v\n", f.Name(), err)
				os.Exit(1)
			}
		}
	}
	childPID := 0
	if *childMem > 0 {
		var err error
		if childPID, err = startChild(devs, *childMem); err != nil {
			fmt.Fprintf(os.Stderr, "gpu-holder: child: %v\n", err)
			os.Exit(1)
		}
	}
	if *keeper {
		var err error
		if childPID, err = startKeeper(files, *mem); err != nil {
			fmt.Fprintf(os.Stderr, "gpu-holder: keeper: %v\n", err)
			os.Exit(1)
		}
	}
	fmt.Println(labgpu.ReadyLine(labgpu.SelfPID()))
	if childPID > 0 {
		fmt.Println(labgpu.ReadyLine(childPID))
	}
	if *zombie {
		exitMainThread(files)
	}
	for {
		time.Sleep(time.Hour)
		_ = files // held open until the process dies
	}
}

// startChild starts a holder of the same devices and waits for its ready
// line, which it reports after its own; the child is never waited for, so
// it lives on, re-parented, when this process is killed.
func startChild(devs []string, mem int64) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	args := []string{}
	for _, d := range devs {
		args = append(args, "--dev", d)
	}
	args = append(args, "--mem-mib", strconv.FormatInt(mem, 10))
	return spawnReady(exec.Command(exe, args...), "child")
}

// spawnReady starts cmd and returns the pid its ready line names; it is
// never waited for.
func spawnReady(cmd *exec.Cmd, what string) (int, error) {
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("%s %d exited before ready: %w", what, cmd.Process.Pid, err)
	}
	pid, ok := labgpu.ReadyPID(line)
	if !ok {
		return 0, fmt.Errorf("%s said %q, want ready <pid>", what, line)
	}
	return pid, nil
}

// startKeeper starts a child that inherits the open device files (fd 3..),
// as a forked CUDA worker does, and reports its pid once it is ready.
func startKeeper(files []*os.File, mem int64) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	args := []string{}
	for i := range files {
		// The child reopens nothing: /dev/fd/N is the inherited file.
		args = append(args, "--dev", "/dev/fd/"+strconv.Itoa(3+i))
	}
	args = append(args, "--keeps-mem-of", strconv.Itoa(os.Getpid()), "--keeps-mem-mib", strconv.FormatInt(mem, 10))
	cmd := exec.Command(exe, args...)
	// argv[0] as this process has it, as a fork keeps it (python3).
	cmd.Args[0] = os.Args[0]
	cmd.ExtraFiles = files
	return spawnReady(cmd, "keeper")
}

// exitMainThread ends the main thread alone (exit(2), not exit_group(2)):
// the leader becomes a zombie while the runtime's other threads, which
// share the fd table, keep the devices open. Through syscall.Syscall the
// runtime sees the goroutine as in a syscall forever and schedules (and
// collects garbage) without it.
func exitMainThread(files []*os.File) {
	go func() {
		for {
			time.Sleep(time.Hour)
			runtime.KeepAlive(files)
		}
	}()
	syscall.Syscall(syscall.SYS_EXIT, 0, 0, 0)
}
