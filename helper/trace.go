package helper

import (
	"fmt"
	"os"
	"strconv"
	"sync"
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
