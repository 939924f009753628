// Package labgpu is the code shared by the lab's simulated GPU primitives:
// gpu-holder (a process that holds fake device files and "uses" memory) and
// fake-nvidia-smi (which reports that memory in nvidia-smi's real formats).
// The memory a holder uses travels in its own command line (--mem-mib), so
// the fake nvidia-smi needs no side channel: it scans /proc like a driver
// would know its clients. The helper knows nothing of this package.
package labgpu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpush/gpush/lab/procstat"
)

// GPU is one simulated device.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	BusID string `json:"bus_id"`
	// Minor is N of DEVDIR/nvidiaN (default: Index).
	Minor       *int  `json:"minor,omitempty"`
	TotalMiB    int64 `json:"total_mib"`
	BaselineMiB int64 `json:"baseline_mib"`
}

// Dev is the device file name of the GPU.
func (g GPU) Dev() string {
	if g.Minor != nil {
		return "nvidia" + strconv.Itoa(*g.Minor)
	}
	return "nvidia" + strconv.Itoa(g.Index)
}

// Fault modes of the fake nvidia-smi.
const (
	FaultNone         = ""
	FaultHang         = "hang"          // never answers
	FaultNA           = "na"            // memory columns read [N/A]
	FaultNotSupported = "not_supported" // memory columns read [Not Supported]
	FaultFail         = "fail"          // driver not loaded: message, exit 9
)

// Config is fake-nvidia-smi.json.
type Config struct {
	DevDir string `json:"dev_dir"`
	GPUs   []GPU  `json:"gpus"`
	// ReleaseDelay: a dead holder's memory stays counted this long after it
	// was last seen alive ("70ms", as measured on the H200).
	ReleaseDelay string `json:"release_delay,omitempty"`
	Fault        string `json:"fault,omitempty"`
	// FaultOn limits the fault to some forms: "query-gpu", "compute-apps", "list".
	FaultOn []string `json:"fault_on,omitempty"`
}

// ConfigName is the file looked for beside the executable.
const ConfigName = "fake-nvidia-smi.json"

// ConfigEnv names a config file explicitly.
const ConfigEnv = "FAKE_NVIDIA_SMI_CONFIG"

// LoadConfig reads and checks a config file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fake nvidia-smi config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("fake nvidia-smi config %s: %w", path, err)
	}
	if c.DevDir == "" {
		return nil, fmt.Errorf("fake nvidia-smi config %s: dev_dir is empty", path)
	}
	if _, err := c.Delay(); err != nil {
		return nil, fmt.Errorf("fake nvidia-smi config %s: %w", path, err)
	}
	switch c.Fault {
	case FaultNone, FaultHang, FaultNA, FaultNotSupported, FaultFail:
	default:
		return nil, fmt.Errorf("fake nvidia-smi config %s: fault %q: want hang, na, not_supported or fail", path, c.Fault)
	}
	return &c, nil
}

// Save writes the config (tests change it between calls).
func (c *Config) Save(path string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}

// Delay parses ReleaseDelay.
func (c *Config) Delay() (time.Duration, error) {
	if c.ReleaseDelay == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(c.ReleaseDelay)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("release_delay %q: want a duration like \"70ms\"", c.ReleaseDelay)
	}
	return d, nil
}

// FaultFor returns the fault that applies to one query form.
func (c *Config) FaultFor(form string) string {
	if len(c.FaultOn) == 0 {
		return c.Fault
	}
	for _, f := range c.FaultOn {
		if f == form {
			return c.Fault
		}
	}
	return FaultNone
}

// MemMiB reads the memory a gpu-holder claims from its argv: --mem-mib N,
// --mem-mib=N, -mem-mib N (the forms Go's flag package accepts).
func MemMiB(argv []string) int64 { return intFlag(argv, "mem-mib") }

// KeepsMemOf reads a --keeper child's --keeps-mem-of PID and
// --keeps-mem-mib N: the memory of a (possibly dead) parent it keeps alive.
func KeepsMemOf(argv []string) (pid int, mem int64) {
	return int(intFlag(argv, "keeps-mem-of")), intFlag(argv, "keeps-mem-mib")
}

// intFlag reads a non-negative integer flag in the forms Go's flag package
// accepts; 0 when absent or malformed.
func intFlag(argv []string, flag string) int64 {
	for i, a := range argv {
		name, val, hasVal := strings.Cut(a, "=")
		if name != "--"+flag && name != "-"+flag {
			continue
		}
		if !hasVal {
			if i+1 >= len(argv) {
				return 0
			}
			val = argv[i+1]
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	return 0
}

// Proc is a live process holding files under the dev dir.
type Proc struct {
	PID       int
	StartTime uint64
	// Name is what nvidia-smi shows: argv[0], else comm.
	Name    string
	Devices map[string]bool // relative to the dev dir
	MemMiB  int64
	// KeepsOf and KeepsMiB: a --keeper child keeps this pid's memory
	// (KeepsMiB per GPU) alive once that pid has died.
	KeepsOf  int
	KeepsMiB int64
}

// Key names the process for its lifetime.
func (p Proc) Key() string { return fmt.Sprintf("%d/%d", p.PID, p.StartTime) }

// Scan finds the live (non-zombie) processes that have files under devDir
// open, reading procDir.
func Scan(procDir, devDir string) ([]Proc, error) { return scan(procDir, devDir, false) }

// ScanClaims is Scan limited to the processes that claim GPU memory
// (--mem-mib or --keeps-mem-mib in their argv): the only ones the fake
// driver charges. It reads one cmdline per process and fd tables only of
// claimants (and of processes with no cmdline of their own: a zombie
// leader's lives in its threads), where Scan reads every fd table: on a
// lab of 1000 hosts (5,000 processes) that is what every fake nvidia-smi
// run cost.
func ScanClaims(procDir, devDir string) ([]Proc, error) { return scan(procDir, devDir, true) }

func claims(cmdline []byte) bool {
	return bytes.Contains(cmdline, []byte("mem-mib"))
}

func scan(procDir, devDir string, claimsOnly bool) ([]Proc, error) {
	devDir, err := filepath.Abs(devDir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", procDir, err)
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		base := filepath.Join(procDir, e.Name())
		if claimsOnly {
			if cmd, err := os.ReadFile(filepath.Join(base, "cmdline")); err != nil || len(cmd) > 0 && !claims(cmd) {
				continue
			}
		}
		devs, nfds := devsUnder(filepath.Join(base, "fd"), devDir)
		// A thread-group leader that exited has no fds of its own; its
		// live threads still hold the process's files (and its context).
		// Threads share the leader's table otherwise: not read again.
		live := base
		if nfds == 0 {
			tasks, _ := os.ReadDir(filepath.Join(base, "task"))
			for _, t := range tasks {
				if d, _ := devsUnder(filepath.Join(base, "task", t.Name(), "fd"), devDir); len(d) > 0 {
					devs, live = d, filepath.Join(base, "task", t.Name())
					break
				}
			}
		}
		if len(devs) == 0 {
			continue
		}
		stat, err := procstat.ReadIn(procDir, pid)
		if err != nil || stat.State == 'Z' && live == base {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(live, "cmdline"))
		argv := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		name := stat.Comm
		if len(argv) > 0 && argv[0] != "" {
			name = argv[0]
		}
		p := Proc{PID: pid, StartTime: stat.StartTime, Name: name, Devices: devs, MemMiB: MemMiB(argv)}
		p.KeepsOf, p.KeepsMiB = KeepsMemOf(argv)
		if claimsOnly && p.MemMiB == 0 && p.KeepsMiB == 0 {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// devsUnder lists the files under devDir that an fd folder's links name,
// and how many fds it has.
func devsUnder(fdDir, devDir string) (map[string]bool, int) {
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, 0
	}
	devs := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err == nil && strings.HasPrefix(l, devDir+"/") {
			devs[strings.TrimPrefix(l, devDir+"/")] = true
		}
	}
	return devs, len(fds)
}
