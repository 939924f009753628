// Command fake-nvidia-smi answers the nvidia-smi forms gpush uses, in the
// exact format of the real tool (see shared/fixtures/nvidia-h200):
//
//	nvidia-smi -L
//	nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total --format=csv,noheader,nounits
//	nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory --format=csv,noheader,nounits
//	nvidia-smi -lms N --query-gpu=... (or -l S, --loop-ms=N, --loop=S)
//
// With a loop option it prints the query's rows (the header once) every
// period, observing the holders anew each time, until killed, as the real
// tool does. A reading costs what changed since the last one: a
// labgpu.Scanner re-examines only new and changed processes, and the state
// file the release delay needs is rewritten only when its live holders
// change (otherwise its mtime moves: see observe.go).
//
// Its GPUs come from a JSON config (labgpu.Config): the file named by
// $FAKE_NVIDIA_SMI_CONFIG, else fake-nvidia-smi.json beside the path it was
// run as (a per-host link or copy named nvidia-smi), else beside the
// resolved executable. A GPU's used memory is its baseline plus the
// --mem-mib of every live process holding DEVDIR/nvidiaN, plus, for
// release_delay after it was last seen alive, that of a holder that died.
//
// Two faults come from the environment, not the config, so that they need
// no GPUs and no config at all:
//
//	FAKE_NVIDIA_SMI_FLOOD=stdout|stderr   print valid rows without end (or
//	    FAKE_NVIDIA_SMI_FLOOD_BYTES of them, then exit 0) on that stream
//	FAKE_NVIDIA_SMI_HANG=child            print one row, start a child that
//	    keeps the output open, and hang, both of them
//
// Two more serve the benchmark and the tests: FAKE_NVIDIA_SMI_FULL_SCAN=1
// observes by full scans (a whole scan and a state rewrite per reading), and
// FAKE_NVIDIA_SMI_PROC names the /proc to read (default /proc).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gpush/gpush/lab/labgpu"
)

// exitUsage and friends are nvidia-smi's exit statuses.
const (
	exitUsage     = 2
	exitNoDevices = 6
	exitNoDriver  = 9
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func configPath() string {
	if p := os.Getenv(labgpu.ConfigEnv); p != "" {
		return p
	}
	// Beside the path it ran as first: the executable is resolved (a
	// readlink and an lstat per path element) only when that has none.
	var first string
	if a0 := os.Args[0]; strings.Contains(a0, "/") {
		first = filepath.Join(filepath.Dir(a0), labgpu.ConfigName)
	} else if p, err := exec.LookPath(a0); err == nil {
		first = filepath.Join(filepath.Dir(p), labgpu.ConfigName)
	}
	if first != "" {
		if _, err := os.Stat(first); err == nil {
			return first
		}
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		c := filepath.Join(filepath.Dir(exe), labgpu.ConfigName)
		if _, err := os.Stat(c); err == nil || first == "" {
			return c
		}
	}
	if first != "" {
		return first
	}
	return labgpu.ConfigName
}

type request struct {
	form     string // "list", "query-gpu", "compute-apps"
	fields   []string
	header   bool
	units    bool
	csvGiven bool
	loop     time.Duration // 0: print once
}

func parseArgs(args []string) (request, error) {
	r := request{header: true, units: true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		needVal := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("option %s needs a value", name)
			}
			i++
			return args[i], nil
		}
		switch name {
		case "-L", "--list-gpus":
			r.form = "list"
		case "--query-gpu", "--query-compute-apps":
			v, err := needVal()
			if err != nil {
				return r, err
			}
			r.form = map[string]string{"--query-gpu": "query-gpu", "--query-compute-apps": "compute-apps"}[name]
			r.fields = strings.Split(v, ",")
		case "-lms", "--loop-ms", "-l", "--loop":
			v, err := needVal()
			if err != nil {
				return r, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return r, fmt.Errorf("invalid value %q for %s", v, name)
			}
			r.loop = time.Duration(n) * time.Millisecond
			if name == "-l" || name == "--loop" {
				r.loop = time.Duration(n) * time.Second
			}
		case "--format":
			v, err := needVal()
			if err != nil {
				return r, err
			}
			for _, f := range strings.Split(v, ",") {
				switch strings.TrimSpace(f) {
				case "csv":
					r.csvGiven = true
				case "noheader":
					r.header = false
				case "nounits":
					r.units = false
				default:
					return r, fmt.Errorf("invalid format option %q", f)
				}
			}
		default:
			return r, fmt.Errorf("unknown option %q", a)
		}
	}
	if r.form == "" {
		return r, errors.New("only -L, --query-gpu and --query-compute-apps are simulated")
	}
	if r.form != "list" && !r.csvGiven {
		return r, errors.New("--format=csv is required with a --query option")
	}
	return r, nil
}

func run(args []string) int {
	req, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n\nPlease run 'nvidia-smi -h' for help.\n", err)
		return exitUsage
	}
	if stream := os.Getenv(floodEnv); stream != "" {
		return flood(req, stream, os.Getenv(floodBytesEnv))
	}
	if mode := os.Getenv(hangEnv); mode != "" {
		return hang(req, mode)
	}
	cfgPath := configPath()
	cfg, err := labgpu.LoadConfig(cfgPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %v\n", err)
		return exitNoDriver
	}
	switch cfg.FaultFor(req.form) {
	case labgpu.FaultHang:
		for {
			time.Sleep(time.Hour)
		}
	case labgpu.FaultFail:
		fmt.Println("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.")
		fmt.Println()
		return exitNoDriver
	}
	if len(cfg.GPUs) == 0 {
		fmt.Println("No devices were found")
		return exitNoDevices
	}
	once := req.loop == 0 || req.form == "list"
	ob, err := newObserver(cfgPath, cfg, os.Getenv(fullScanEnv) != "", once)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %v\n", err)
		return exitNoDriver
	}
	if once && !ob.full {
		// One reading, a few hundred KiB at most: a collection would
		// cost more than it frees.
		debug.SetGCPercent(-1)
	}
	out := bufio.NewWriter(os.Stdout) // one write per reading
	// Readings come on a schedule, as NVML's do: a slow /proc scan eats
	// into the sleep instead of stretching the period.
	next := time.Now()
	for {
		st, err := ob.observe()
		if err != nil {
			fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %v\n", err)
			return exitNoDriver
		}
		rc := answer(out, req, cfg, st)
		if err := out.Flush(); err != nil {
			return 1 // the reader went away
		}
		if rc != 0 || req.loop == 0 || req.form == "list" {
			return rc
		}
		req.header = false // the real tool prints it once
		next = next.Add(req.loop)
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		} else {
			next = time.Now() // behind: no burst to catch up
		}
	}
}

// answer prints one reading of the form.
func answer(w io.Writer, req request, cfg *labgpu.Config, st *observed) int {
	memText := func(v int64) string {
		switch cfg.FaultFor(req.form) {
		case labgpu.FaultNA:
			return "[N/A]"
		case labgpu.FaultNotSupported:
			return "[Not Supported]"
		}
		if req.units {
			return strconv.FormatInt(v, 10) + " MiB"
		}
		return strconv.FormatInt(v, 10)
	}
	switch req.form {
	case "list":
		for _, g := range cfg.GPUs {
			fmt.Fprintf(w, "GPU %d: %s (UUID: %s)\n", g.Index, g.Name, g.UUID)
		}
	case "query-gpu":
		var rows [][]string
		for _, g := range cfg.GPUs {
			used := st.used[g.Index]
			row := []string{}
			for _, f := range req.fields {
				switch f {
				case "index":
					row = append(row, strconv.Itoa(g.Index))
				case "uuid":
					row = append(row, g.UUID)
				case "name":
					row = append(row, g.Name)
				case "pci.bus_id", "gpu_bus_id":
					row = append(row, g.BusID)
				case "memory.used":
					row = append(row, memText(used))
				case "memory.total":
					row = append(row, memText(g.TotalMiB))
				case "memory.free":
					row = append(row, memText(max(g.TotalMiB-used, 0)))
				default:
					return badField(w, f)
				}
			}
			rows = append(rows, row)
		}
		printCSV(w, req, rows)
	case "compute-apps":
		var rows [][]string
		for _, a := range st.apps {
			g := cfg.GPUs[a.gpu]
			row := []string{}
			for _, f := range req.fields {
				switch f {
				case "pid":
					row = append(row, strconv.Itoa(a.proc.PID))
				case "process_name", "name":
					row = append(row, a.proc.Name)
				case "gpu_uuid":
					row = append(row, g.UUID)
				case "gpu_name":
					row = append(row, g.Name)
				case "gpu_bus_id":
					row = append(row, g.BusID)
				case "used_memory", "used_gpu_memory":
					row = append(row, memText(a.proc.MemMiB))
				default:
					return badField(w, f)
				}
			}
			rows = append(rows, row)
		}
		printCSV(w, req, rows)
	}
	return 0
}

// The environment's faults (see the package comment).
const (
	floodEnv      = "FAKE_NVIDIA_SMI_FLOOD"
	floodBytesEnv = "FAKE_NVIDIA_SMI_FLOOD_BYTES"
	hangEnv       = "FAKE_NVIDIA_SMI_HANG"
)

// floodRow is one valid line of the form, the H200 fixture's GPU 0: a
// flood the parser would accept, so only a cap on the size stops it.
func floodRow(req request) string {
	switch req.form {
	case "list":
		return "GPU 0: NVIDIA H200 (UUID: GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab)\n"
	case "compute-apps":
		return "437, /opt/venv/bin/python3, GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab, 00000000:00:06.0, 10850\n"
	}
	return "0, GPU-d7f963c5-cdb5-ba9d-c562-dbd2e54985ab, NVIDIA H200, 00000000:00:06.0, 0, 143771\n"
}

// flood prints rows on stream without end, or limit bytes of them.
func flood(req request, stream, limit string) int {
	out := os.Stdout
	switch stream {
	case "stdout":
	case "stderr":
		out = os.Stderr
	default:
		fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %s=%q: want stdout or stderr\n", floodEnv, stream)
		return exitUsage
	}
	left := int64(-1) // without end
	if limit != "" {
		n, err := strconv.ParseInt(limit, 10, 64)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %s=%q: want a byte count\n", floodBytesEnv, limit)
			return exitUsage
		}
		left = n
	}
	row := floodRow(req)
	block := []byte(strings.Repeat(row, (64<<10)/len(row)))
	for left != 0 {
		b := block
		if left > 0 && int64(len(b)) > left {
			b = b[:left]
		}
		if _, err := out.Write(b); err != nil {
			return 1 // the reader went away
		}
		if left > 0 {
			left -= int64(len(b))
		}
	}
	return 0
}

// hang prints one row and hangs; with "child", a child started first
// holds the same output open and hangs too (a tool's helper process).
func hang(req request, mode string) int {
	switch mode {
	case "child":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %v\n", err)
			return exitNoDriver
		}
		child := exec.Command(exe, os.Args[1:]...)
		child.Env = append(os.Environ(), hangEnv+"=alone")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %v\n", err)
			return exitNoDriver
		}
	case "alone":
	default:
		fmt.Fprintf(os.Stderr, "fake-nvidia-smi: %s=%q: want child\n", hangEnv, mode)
		return exitUsage
	}
	fmt.Print(floodRow(req))
	for {
		time.Sleep(time.Hour)
	}
}

func badField(w io.Writer, f string) int {
	fmt.Fprintf(w, "Field \"%s\" is not a valid field to query.\n\n", f)
	return exitUsage
}

// header names as the real tool prints them with units.
var headerNames = map[string]string{
	"memory.used": "memory.used [MiB]", "memory.total": "memory.total [MiB]", "memory.free": "memory.free [MiB]",
	"used_memory": "used_gpu_memory [MiB]", "used_gpu_memory": "used_gpu_memory [MiB]",
}

func printCSV(w io.Writer, req request, rows [][]string) {
	if req.header {
		h := make([]string, len(req.fields))
		for i, f := range req.fields {
			h[i] = f
			if n, ok := headerNames[f]; ok && req.units {
				h[i] = n
			}
		}
		fmt.Fprintln(w, strings.Join(h, ", "))
	}
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, ", "))
	}
}
