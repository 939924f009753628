package labgpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// gpu-holder announces each process once its devices are open with a line
// "ready <pid>" on stdout (the child's line follows the parent's). Everything
// that starts holders (the lab, the tests) waits on these lines.

// ReadyLine is the line gpu-holder prints for pid (without the newline).
func ReadyLine(pid int) string { return fmt.Sprintf("ready %d", pid) }

// SelfPID is this process's pid as the /proc it sees names it. A holder the
// lab starts into a host's own PID namespace (Options.Isolate) still sees
// the machine's /proc, so it says the pid the lab tracks it by, not its pid
// in the namespace (os.Getpid).
func SelfPID() int {
	if link, err := os.Readlink("/proc/self"); err == nil {
		if pid, err := strconv.Atoi(link); err == nil && pid > 0 {
			return pid
		}
	}
	return os.Getpid()
}

// ReadyPID parses one ready line; ok is false for any other line.
func ReadyPID(line string) (pid int, ok bool) {
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "ready" {
		return 0, false
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// ReadyPIDs returns the pids of every ready line in text (a holder's or a
// unit's output log), in order.
func ReadyPIDs(text string) []int {
	var pids []int
	for _, line := range strings.Split(text, "\n") {
		if pid, ok := ReadyPID(line); ok {
			pids = append(pids, pid)
		}
	}
	return pids
}
