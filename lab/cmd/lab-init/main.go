// Command lab-init is pid 1 of a lab host's own process view. The lab
// starts it in a new PID and mount namespace; it mounts that namespace's
// /proc there, so that the host's sessions (the helper, fuser and the fake
// nvidia-smi in them) see this host's processes only, as on a real host,
// instead of every lab host's. As a real init does, it reaps the orphans
// re-parented to it and ignores the signals other processes of its
// namespace may send it. It says "ready" on stdout once /proc is mounted
// and runs until the lab kills it, which takes the namespace down with it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "lab-init: %v\n", err)
		os.Exit(2)
	}
}

func run() error {
	if os.Getpid() != 1 {
		return fmt.Errorf("pid %d: not pid 1 of a new PID namespace (the lab starts it with CLONE_NEWPID|CLONE_NEWNS)", os.Getpid())
	}
	// Private first: the /proc mounted below must not reach the machine's
	// mount namespace (nor any other lab host's).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	children := make(chan os.Signal, 64)
	signal.Notify(children, syscall.SIGCHLD)
	if _, err := fmt.Println("ready"); err != nil {
		return fmt.Errorf("say ready: %w", err)
	}
	os.Stdout.Close()
	for range children {
		// Signals coalesce: reap every child that has exited.
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return nil
}
