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
//
// Every response is bounded by MaxResponse (see writeBounded).
func Serve(ctx context.Context, verb string, stdin io.Reader, stdout io.Writer) error {
	return serveWith(ctx, verb, stdin, stdout, serve)
}

// serveWith is Serve with the response from answer.
func serveWith(ctx context.Context, verb string, stdin io.Reader, stdout io.Writer, answer answerFunc) error {
	if Tracing() {
		TraceCPU("helper " + verb + ": start")
	}
	resp, err := answer(ctx, verb, stdin)
	Tracef("helper %s: done (err %v)", verb, err)
	if Tracing() {
		TraceCPU("helper " + verb + ": done")
	}
	if err == nil {
		err = writeBounded(stdout, resp)
		if err == nil {
			return nil
		}
		err = fmt.Errorf("%s response: %w", verb, err)
	}
	_ = writeJSON(stdout, ErrorResponse{Version: Version, Error: cutText(err.Error(), maxErrorText)})
	return err
}

// MaxResponse bounds one response. The controller reads at most 64 MiB of
// the helper's stdout (remote.HelperMaxOutput); this stays below it.
// Measured: a snapshot holder is about 0.7 KiB with a 200-byte command
// line, 0.55 KiB once trimSteps[1] cut it: 100k holders fit (52 MiB).
const MaxResponse = 60 << 20

// maxErrorText bounds the message of an ErrorResponse: errors quote what
// tools printed.
const maxErrorText = 64 << 10

// trimSteps are tried in turn while a response is over MaxResponse: what
// makes a response big on a hostile or huge host is command lines (up to
// 6 MiB each), per-process detail times 100k processes, and the timeline
// of a long wait. Identities, states and memory are never cut: the
// controller judges and kills by them.
var trimSteps = []trimStep{
	{cmdline: 1 << 10, samples: 10000, why: "command lines cut to 1 KiB, timeline thinned to 10000 samples"},
	{cmdline: 128, samples: 1000, detail: true, why: "command lines cut to 128 bytes, cgroup paths and owner reasons dropped, timeline thinned to 1000 samples"},
	{cmdline: 32, samples: 100, detail: true, why: "command lines cut to 32 bytes, cgroup paths and owner reasons dropped, timeline thinned to 100 samples"},
}

// maxWarnings is how many warnings a trimmed snapshot keeps (a hostile
// nvidia-smi can list 100k pids that do not exist).
const maxWarnings = 200

type trimStep struct {
	cmdline int  // bytes of argv kept per process
	samples int  // timeline samples kept
	detail  bool // drop the cgroup path and the owner reason (Unit and Owner stay)
	why     string
}

// writeBounded writes resp as one JSON line of at most MaxResponse bytes,
// trimmed when needed, with a note in the response saying what was cut;
// when even the last trim step leaves it too big, it writes nothing and
// says so.
func writeBounded(w io.Writer, resp any) error {
	step := 0
	// Command lines alone over the limit: cut them before encoding (which
	// would build the whole oversized text first).
	for ; step < len(trimSteps) && argvBytes(resp) >= MaxResponse; step++ {
		trimResponse(resp, trimSteps[step], argvBytes(resp))
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	for ; step < len(trimSteps) && len(b) >= MaxResponse; step++ {
		if !trimResponse(resp, trimSteps[step], len(b)) {
			continue // nothing this step cuts: no need to encode again
		}
		if b, err = json.Marshal(resp); err != nil {
			return fmt.Errorf("encode: %w", err)
		}
	}
	if len(b) >= MaxResponse {
		return fmt.Errorf("%d bytes, over the helper's limit of %d MiB even with %s (%s)", len(b), MaxResponse>>20, trimSteps[len(trimSteps)-1].why, responseCounts(resp))
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// argvBytes is the size of the command lines in a response.
func argvBytes(resp any) int {
	n := 0
	add := func(argv []string) {
		for _, a := range argv {
			n += len(a)
		}
	}
	holders := func(hs []Holder) {
		for _, h := range hs {
			add(h.Cmdline)
			for _, m := range h.Managers {
				add(m.Cmdline)
			}
		}
	}
	switch r := resp.(type) {
	case *Snapshot:
		holders(r.Holders)
	case *WaitFreeResponse:
		holders(r.Holders)
	case *UnitResponse:
		holders(r.GPUHolders)
		for _, p := range r.Remaining {
			add(p.Cmdline)
		}
	case *KillResponse:
		for _, sup := range r.Managers {
			add(sup.Cmdline)
		}
	}
	return n
}

// trimResponse applies step to the response types that carry processes or
// samples and notes it there; it reports whether anything was cut.
func trimResponse(resp any, step trimStep, size int) bool {
	note := fmt.Sprintf("response of %d bytes over %d MiB: %s", size, MaxResponse>>20, step.why)
	cut := false
	argv := func(a []string) []string {
		b, c := cutArgv(a, step.cmdline)
		cut = cut || c
		return b
	}
	holders := func(hs []Holder) {
		for i := range hs {
			hs[i].Cmdline = argv(hs[i].Cmdline)
			for j := range hs[i].Managers {
				hs[i].Managers[j].Cmdline = argv(hs[i].Managers[j].Cmdline)
			}
			if step.detail && (hs[i].Cgroup != "" || hs[i].OwnerWhy != "") {
				hs[i].Cgroup, hs[i].OwnerWhy, cut = "", "", true
			}
		}
	}
	switch r := resp.(type) {
	case *Snapshot:
		holders(r.Holders)
		if len(r.Warnings) > maxWarnings {
			r.Warnings, cut = append(r.Warnings[:maxWarnings], fmt.Sprintf("and %d more warnings", len(r.Warnings)-maxWarnings)), true
		}
		if cut {
			r.Warnings = append(r.Warnings, note)
		}
	case *WaitFreeResponse:
		holders(r.Holders)
		if len(r.Timeline) > step.samples {
			r.Timeline, cut = thinTimeline(r.Timeline, step.samples), true
		}
		if cut {
			r.Reason = joinNote(r.Reason, note)
		}
	case *UnitResponse:
		holders(r.GPUHolders)
		for i := range r.Remaining {
			r.Remaining[i].Cmdline = argv(r.Remaining[i].Cmdline)
		}
		if cut {
			r.Reason = joinNote(r.Reason, note)
		}
	case *KillResponse:
		// Results carry no command line, and there is no field for a note.
		for i := range r.Managers {
			r.Managers[i].Cmdline = argv(r.Managers[i].Cmdline)
		}
	}
	return cut
}

func joinNote(reason, note string) string {
	if reason == "" {
		return note
	}
	return reason + "; " + note
}

// cutArgv keeps the leading arguments of argv while they fit in max bytes,
// cutting the one that does not, and ends with a marker that says how much
// was dropped; false when it all fits.
func cutArgv(argv []string, max int) ([]string, bool) {
	total := 0
	for _, a := range argv {
		total += len(a)
	}
	if total <= max {
		return argv, false
	}
	var out []string
	kept := 0
	for _, a := range argv {
		if kept+len(a) > max {
			if rest := max - kept; rest > 0 {
				out = append(out, a[:rest])
				kept += rest
			}
			break
		}
		out = append(out, a)
		kept += len(a)
	}
	return append(out, fmt.Sprintf("...[%d more bytes]", total-kept)), true
}

// thinTimeline keeps n samples spread evenly over the wait, the last one
// included.
func thinTimeline(ss []Sample, n int) []Sample {
	if len(ss) <= n || n < 2 {
		return ss
	}
	out := make([]Sample, 0, n)
	for i := 0; i < n-1; i++ {
		out = append(out, ss[i*(len(ss)-1)/(n-1)])
	}
	return append(out, ss[len(ss)-1])
}

// responseCounts names what made a response big, for the error.
func responseCounts(resp any) string {
	switch r := resp.(type) {
	case *Snapshot:
		return fmt.Sprintf("%d GPUs, %d holders, %d warnings", len(r.GPUs), len(r.Holders), len(r.Warnings))
	case *WaitFreeResponse:
		return fmt.Sprintf("%d holders, %d samples", len(r.Holders), len(r.Timeline))
	case *UnitResponse:
		return fmt.Sprintf("%d processes left in the unit, %d GPU holders", len(r.Remaining), len(r.GPUHolders))
	case *KillResponse:
		return fmt.Sprintf("%d results, %d supervisors", len(r.Results), len(r.Managers))
	}
	return fmt.Sprintf("%T", resp)
}

// cutText bounds s to max bytes, saying how much was cut.
func cutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s...[%d more bytes]", s[:max], len(s)-max)
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

// Budget is the longest a managers request may take: per manager, a
// read and a stop (a unit's systemctl, a runtime's stop after its grace,
// a process tree's kill), then the read after.
func (r ManagersRequest) Budget() time.Duration {
	g := r.Grace.D()
	if g <= 0 {
		g = DefaultGrace
	}
	per := 2*managerReadTimeout + g + 2*killWait + killSlack
	if r.Action == ManagersStop {
		per += DefaultUnitTimeout
	}
	return time.Duration(max(1, len(r.Managers))) * per
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
	case VerbManagers:
		var req ManagersRequest
		if err := decode(data, &req); err != nil {
			return nil, err
		}
		return Managers(within(req.Budget()), req)
	}
	return nil, fmt.Errorf("unknown verb %q (want %s, %s, %s, %s or %s)", verb, VerbSnapshot, VerbKill, VerbWaitFree, VerbUnit, VerbManagers)
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
  smi_timeout   deadline for each nvidia-smi call (default "10s"), never past
                the request's own
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
	VerbManagers: `gpush-helper managers: read again, or stop, what restarts GPU workers.

A manager is a live parent process, a systemd unit, a container's runtime,
a Kubernetes pod or a Slurm job (as a holder's managers in a snapshot). Each
is read again (alive, restart policy, restart count, delay); stop stops it:
systemctl stop, the runtime's stop, scancel, or the process's tree by
identity (TERM, grace, KILL). A pod is never stopped (refused).

Request fields:
  action    status | stop
  managers  managers as a snapshot or a kill reports them
  grace     a process tree's TERM -> KILL grace, a container's stop timeout (default "5s")
  dry_run   stop: say what would be stopped
` + configHelp,
	VerbUnit: `gpush-helper unit: stop, start, restart or report a systemd unit.

systemctl runs as an argument vector (no shell) under a deadline. After a
stop, processes still in the unit's cgroup and GPU holders belonging to the
unit are listed. On a host without systemd: systemd=false and a reason.

Request fields:
  action    stop | start | restart | status
  unit      unit name ("sglang" means sglang.service); systemd's rules apply
  timeout   deadline for the systemctl calls up to the action, together
            (default "90s"); the look after the action gets min(timeout, 10s)
` + configHelp,
}

const usage = `usage: gpush-helper <verb> [--help]

Every tool the helper runs is killed (its process group) at its deadline
or past 16 MiB of output on a stream; a response is at most 60 MiB.

Verbs (JSON request on stdin, JSON response on stdout):
  snapshot    GPUs and the processes holding them
  kill        signal holders by identity, TERM then KILL
  wait-free   poll until GPUs are free
  unit        stop/start/restart/status a systemd unit
  serve TOKEN answer requests, one JSON line each way, until stdin ends
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
	case VerbServe:
		if len(rest) != 1 || rest[0] == "" || strings.HasPrefix(rest[0], "-") {
			fmt.Fprint(stderr, "usage: gpush-helper serve TOKEN (one JSON request per line on stdin, one response per line on stdout)\n")
			return 2
		}
		defer TraceCPU("helper serve: end")
		return ServeLoop(ctx, rest[0], stdin, stdout)
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s / %s\t%s\t%s\n", g.Index, intOrDash(g.Minor), orDash(g.BusID), orDash(g.Name), gpuMiB(g.MemUsedMiB, g.MemUnread, true), gpuMiB(g.MemTotalMiB, g.MemUnread, g.MemUsedMiB >= 0), orDash(g.Source), state)
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
			unit = "ctr:" + h.Container // the short id already
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

// gpuMiB is a GPU's memory figure; an unread one shows what nvidia-smi
// printed (own: unread is this column's, not the other's).
func gpuMiB(v int64, unread string, own bool) string {
	if v < 0 && own && unread != "" {
		return unread
	}
	return mib(v)
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
