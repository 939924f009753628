package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// maxRequest bounds what Serve reads from stdin.
const maxRequest = 1 << 20

// Serve answers one request: it reads the verb's JSON request from stdin
// (empty input is the zero request) and writes its JSON response to
// stdout. When the request cannot be served it writes an ErrorResponse and
// returns the error (the binary then exits non-zero).
func Serve(ctx context.Context, verb string, stdin io.Reader, stdout io.Writer) error {
	resp, err := serve(ctx, verb, stdin)
	if err != nil {
		_ = writeJSON(stdout, ErrorResponse{Version: Version, Error: err.Error()})
		return err
	}
	if err := writeJSON(stdout, resp); err != nil {
		return fmt.Errorf("write %s response: %w", verb, err)
	}
	return nil
}

// Margins of the request budgets (see Budget).
const (
	// scanAllowance covers what is not a tool run: the /proc scans.
	scanAllowance = 10 * time.Second
	// waitOverrun lets the poll that starts at a wait's deadline finish
	// (a few nvidia-smi runs and a scan), so that it ends timed-out, not
	// cut off; a hung nvidia-smi is cut off then.
	waitOverrun = 2 * time.Second
	// killSlack covers the scans of a kill.
	killSlack = time.Second
)

// Budget is the longest a snapshot may take: both nvidia-smi runs and the
// scans.
func (r SnapshotRequest) Budget() time.Duration {
	return 2*smiTimeout(r.Config) + scanAllowance
}

// Budget is the longest a wait-free may take: its timeout (default 30s;
// the settle is part of it) and the last poll.
func (r WaitFreeRequest) Budget() time.Duration {
	t := r.Timeout.D()
	if t <= 0 {
		t = DefaultWaitTimeout
	}
	return t + waitOverrun
}

// Budget is the longest a kill may take: the grace, then the waits for
// the first signal's and KILL's victims to vanish.
func (r KillRequest) Budget() time.Duration {
	g := r.Grace.D()
	if g <= 0 {
		g = DefaultGrace
	}
	return g + 2*killWait + killSlack
}

// Budget is the longest a unit request may take: its timeout for systemctl
// (the look before and the action share it), then the look after and the
// listing of what is left (a snapshot).
func (r UnitRequest) Budget() time.Duration {
	return unitTimeout(r) + unitAfterTimeout(r) + SnapshotRequest{Config: r.Config}.Budget()
}

func serve(ctx context.Context, verb string, stdin io.Reader) (any, error) {
	var cancels []context.CancelFunc
	data, err := io.ReadAll(io.LimitReader(stdin, maxRequest+1))
	if err != nil {
		return nil, fmt.Errorf("read request: %w", err)
	}
	if len(data) > maxRequest {
		return nil, fmt.Errorf("request larger than %d bytes", maxRequest)
	}
	// Each request runs under its Budget: every tool it runs gets the
	// lesser of its own timeout and the time left.
	within := func(b time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, b)
		cancels = append(cancels, cancel)
		return c
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	switch verb {
	case VerbSnapshot:
		var req SnapshotRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		return TakeSnapshot(within(req.Budget()), req.Config)
	case VerbKill:
		var req KillRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		return Kill(within(req.Budget()), req)
	case VerbWaitFree:
		var req WaitFreeRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		return WaitFree(within(req.Budget()), req)
	case VerbUnit:
		var req UnitRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		return Unit(within(req.Budget()), req)
	}
	return nil, fmt.Errorf("unknown verb %q (want %s, %s, %s or %s)", verb, VerbSnapshot, VerbKill, VerbWaitFree, VerbUnit)
}

// decode is strict: an unknown field is a typo or a version mismatch, and
// either must not be silently ignored by a tool that kills processes. Its
// errors do not name the verb: every caller already does.
func decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request: %w", err)
	}
	if dec.More() {
		return errors.New("bad request: more than one JSON value on stdin")
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

const configHelp = `  dev_dir       where the NVIDIA device nodes are (default /dev)
  nvidia_smi    nvidia-smi to run (default: PATH, /usr/bin, /usr/local/nvidia/bin)
  proc_dir      the proc filesystem (default /proc)
  driver_dir    the driver's proc folder (default PROC_DIR/driver/nvidia)
  protected     extra protected process names (globs), e.g. ["my-daemon*"]
  smi_timeout   deadline for each nvidia-smi call (default "10s")
`

var verbHelp = map[string]string{
	VerbSnapshot: `gpush-helper snapshot: list GPUs and every process holding an NVIDIA device.

Reads a JSON request on stdin (empty = defaults), writes a Snapshot as JSON.
Holders come from scanning /proc/*/fd (so workers nvidia-smi does not list
are found too); memory comes from nvidia-smi.

Request fields:
` + configHelp + `
By hand: with a terminal on stdin, or with --table, it prints a table.
Flags for by-hand use: --table, --dev-dir DIR, --nvidia-smi PATH, --proc-dir DIR.
`,
	VerbKill: `gpush-helper kill: signal processes by identity (pid + start time + boot id).

The identity is re-checked right before every signal (through a pidfd where
the kernel has one): a reused pid is never signalled. TERM first, KILL
after the grace period. Never signals pid <= 1, the helper or its ancestors,
kernel threads; protected names (nvidia-persistenced, nv-hostengine, dcgm*,
Xorg, ...) only with force. A process whose main thread exited while other
threads live is signalled. supervisors: live parents of the killed that may
restart them.

Request fields:
  targets   [{"pid":N,"start_time":T,"boot_id":"..."}] (from a snapshot)
  signal    first signal: TERM (default), INT, HUP, QUIT, USR1, USR2, KILL
  grace     wait after the first signal before KILL (default "5s")
  group     also signal each target's process group
  tree      also signal each target's descendants
  force     allow protected names
  dry_run   report would-kill, signal nothing
` + configHelp,
	VerbWaitFree: `gpush-helper wait-free: poll until the chosen GPUs are free.

Free: memory known and at or under the threshold, no owner (a process
nvidia-smi lists as a compute app) and nothing suspicious; monitors that
only hold the device files never block. status gives each GPU's state.
Outcomes: freed, new-holder (an owner not there at the first poll, or one
that came back during the settle), timed-out (owners left), suspicious,
memory-held (no owner, memory still used), protected, unknown (memory
cannot be read: returned at once when nothing else can change).

Request fields:
  gpus            GPU indices to watch (default all)
  threshold_mib   MiB counted as free (default: the idle allowance, 64 MiB)
  interval        poll interval (default "100ms")
  timeout         deadline (default "30s")
  settle          once free, stay free this long (default 0)
  watch           supervisors from kill: a new holder they start fails the settle
  ignore_shared   holders of no GPU device (nvidiactl/nvidia-uvm only) do not block
` + configHelp,
	VerbUnit: `gpush-helper unit: stop, start, restart or report a systemd unit.

systemctl runs as an argument vector (no shell) under a deadline. After a
stop, processes still in the unit's cgroup and GPU holders belonging to the
unit are listed. On a host without systemd: systemd=false and a reason.

Request fields:
  action    stop | start | restart | status
  unit      unit name ("sglang" means sglang.service); systemd's rules apply
  timeout   deadline for systemctl (default "90s")
` + configHelp,
}

const usage = `usage: gpush-helper <verb> [--help]

Verbs (JSON request on stdin, JSON response on stdout):
  snapshot    GPUs and the processes holding them
  kill        signal holders by identity, TERM then KILL
  wait-free   poll until GPUs are free
  unit        stop/start/restart/status a systemd unit
  version     print the version
`

// Main is the gpush-helper command line; it returns the exit status.
func Main(ctx context.Context, args []string, stdin *os.File, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	verb, rest := args[0], args[1:]
	switch verb {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version":
		fmt.Fprintf(stdout, "gpush-helper %s (%s %s/%s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	help, known := verbHelp[verb]
	if !known {
		_ = writeJSON(stdout, ErrorResponse{Version: Version, Error: fmt.Sprintf("unknown verb %q", verb)})
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("gpush-helper "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // help goes to stdout on --help, see below
	var cfg Config
	table := false
	if verb == VerbSnapshot {
		fs.BoolVar(&table, "table", false, "print a table")
		fs.StringVar(&cfg.DevDir, "dev-dir", "", "device dir")
		fs.StringVar(&cfg.NvidiaSMI, "nvidia-smi", "", "nvidia-smi path")
		fs.StringVar(&cfg.ProcDir, "proc-dir", "", "proc dir")
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			return 0
		}
		fmt.Fprintf(stderr, "gpush-helper %s: %v (see --help)\n", verb, err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpush-helper %s: unexpected argument %q\n", verb, fs.Arg(0))
		return 2
	}
	if verb == VerbSnapshot && (table || isTerminal(stdin)) {
		snap, err := TakeSnapshot(ctx, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "gpush-helper snapshot: %v\n", err)
			return 1
		}
		WriteTable(stdout, snap)
		return 0
	}
	if err := Serve(ctx, verb, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "gpush-helper %s: %v\n", verb, err)
		return 1
	}
	return 0
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// WriteTable prints a snapshot the way an operator reads nvidia-smi: the
// GPUs, then one line per holder with its unit and state.
func WriteTable(w io.Writer, s *Snapshot) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s  boot %s  %s\n", s.Hostname, s.BootID, s.Time.Local().Format(time.DateTime))
	fmt.Fprintln(tw, "GPU\tMINOR\tBUS-ID\tNAME\tMEMORY-USAGE\tSOURCE\tSTATE")
	states := map[int]GPUStatus{}
	for _, st := range s.Status {
		states[st.Index] = st
	}
	for _, g := range s.GPUs {
		state := "-"
		if st, ok := states[g.Index]; ok {
			state = st.State
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s / %s\t%s\t%s\n", g.Index, intOrDash(g.Minor), orDash(g.BusID), orDash(g.Name), mib(g.MemUsedMiB), mib(g.MemTotalMiB), orDash(g.Source), state)
	}
	if len(s.GPUs) == 0 {
		fmt.Fprintln(tw, "(no GPUs reported)\t\t\t\t\t\t")
	}
	tw.Flush()
	// One line per GPU that is not free: why, in the words a script reports.
	for _, st := range s.Status {
		if st.Reason != "" {
			fmt.Fprintf(w, "GPU %d %s: %s\n", st.Index, st.State, st.Reason)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GPU\tPID\tPPID\tUSER\tSTATE\tAGE\tGPU-MEMORY\tUNIT\tCOMMAND")
	hs := append([]Holder{}, s.Holders...)
	sort.SliceStable(hs, func(a, b int) bool { return firstGPU(hs[a]) < firstGPU(hs[b]) })
	for _, h := range hs {
		gpus := "-"
		if len(h.GPUs) > 0 {
			gpus = strings.Trim(strings.ReplaceAll(fmt.Sprint(h.GPUs), " ", ","), "[]")
		} else if h.SharedOnly {
			gpus = "shared"
		}
		unit := h.Unit
		if h.Container != "" {
			unit = "ctr:" + h.Container[:12]
		}
		if unit == "" {
			unit = "-"
		}
		cmd := strings.Join(h.Cmdline, " ")
		if cmd == "" {
			cmd = "[" + h.Comm + "]"
		}
		if len(cmd) > 60 {
			cmd = cmd[:57] + "..."
		}
		switch {
		case h.Suspicious != "":
			cmd += "  (suspicious: " + h.Suspicious + ")"
		case h.Protected:
			cmd += "  (protected: " + h.ProtectedWhy + ")"
		case !h.Owner:
			cmd += "  (owns nothing)"
		}
		if h.ZombieLeader {
			cmd += "  (main thread exited; threads hold the devices)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", gpus, h.PID, h.PPID, h.User, h.State,
			(time.Duration(h.AgeSeconds) * time.Second).String(), mib(h.MemMiB), unit, cmd)
	}
	if len(hs) == 0 {
		fmt.Fprintln(tw, "(no process holds an NVIDIA device)")
	}
	tw.Flush()
	for _, g := range s.Ghosts {
		fmt.Fprintf(w, "ghost: pid %d (%s) is gone, %s still charged to it on GPU %d; held by %v\n", g.PID, g.Name, mib(g.MemMiB), g.GPU, g.HeldBy)
	}
	for _, warn := range s.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
}

func firstGPU(h Holder) int {
	if len(h.GPUs) == 0 {
		return 1 << 30
	}
	return h.GPUs[0]
}

func mib(v int64) string {
	if v < 0 {
		return "N/A"
	}
	return fmt.Sprintf("%dMiB", v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func intOrDash(v int) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
