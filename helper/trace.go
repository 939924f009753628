package helper

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// TraceEnv names the variable that turns the timing trace on: set to a
// file path, each milestone of a run (helper calls, nvidia-smi runs, the
// memory stream's readings that change, wait-free polls and verdicts,
// signals sent) is appended to it as one line "TRACE <unix µs> <what>";
// "-" writes to stderr. Unset, Tracef is one branch on a bool: a free's
// path pays nothing for it. Over SSH the helper's own stderr is not the
// controller's, so the trace covers the process that reads the variable
// (gpush with the local connection runs the helper in-process).
const TraceEnv = "GPUSH_TRACE"

var tracer = openTrace(os.Getenv(TraceEnv))

type traceSink struct {
	mu sync.Mutex
	f  *os.File
}

func openTrace(path string) *traceSink {
	switch path {
	case "":
		return nil
	case "-":
		return &traceSink{f: os.Stderr}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v (trace off)\n", TraceEnv, err)
		return nil
	}
	return &traceSink{f: f}
}

// Tracing reports whether the trace is on (callers skip building a
// message that costs something).
func Tracing() bool { return tracer != nil }

// Tracef writes one trace line stamped with the wall clock in
// microseconds (so that other processes' clocks line up with it).
func Tracef(format string, args ...any) {
	if tracer == nil {
		return
	}
	b := make([]byte, 0, 96)
	b = append(b, "TRACE "...)
	b = strconv.AppendInt(b, time.Now().UnixMicro(), 10)
	b = append(b, ' ')
	b = fmt.Appendf(b, format, args...)
	b = append(b, '\n')
	tracer.mu.Lock()
	_, _ = tracer.f.Write(b)
	tracer.mu.Unlock()
}

// TraceCPU traces the CPU time (user+sys) this process and the children
// it reaped have used so far: what the helper costs its host.
func TraceCPU(what string) {
	if tracer == nil {
		return
	}
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	ms := func(r syscall.Rusage) float64 {
		return float64(r.Utime.Nano()+r.Stime.Nano()) / 1e6
	}
	Tracef("%s: cpu self %.1f ms, reaped children %.1f ms", what, ms(self), ms(kids))
}

// cpuOf is a reaped process's user+sys in milliseconds (0 when unknown).
func cpuOf(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	return float64((ps.UserTime() + ps.SystemTime()).Microseconds()) / 1000
}
