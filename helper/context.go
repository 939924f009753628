package helper

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// A CUDA context maps the driver's device files into the process:
// measured on the H200 (driver 580, hw/h200/results/probe-maps.log), a
// torch worker maps /dev/nvidiactl 27 times and /dev/nvidia0 3 times, and a
// child forked from it keeps those mappings after the parent died, while
// NVML clients (pynvml, nvidia-smi -lms, dcgm) map none, although they
// have nvidia-uvm open. So a holder nvidia-smi does not list, but that maps
// a device, owns a context: the keeper of a dead parent's memory, or a
// worker in a PID namespace nvidia-smi cannot name.

// maxMapsBytes bounds what is read of one /proc/PID/maps: a CUDA process
// has a few thousand lines; a hostile one cannot make the helper read more.
const maxMapsBytes = 8 << 20

// mappedDevices lists the NVIDIA device files (relative to DevDir) that
// pid maps. A zombie leader's own maps are empty: its live threads' are read.
func (s *scanner) mappedDevices(pid int) []string {
	paths := []string{s.proc.path(pid, "maps")}
	if tasks, err := os.ReadDir(s.proc.path(pid, "task")); err == nil {
		for _, t := range tasks {
			if t.Name() != strconv.Itoa(pid) {
				paths = append(paths, filepath.Join(s.proc.path(pid, "task"), t.Name(), "maps"))
			}
		}
	}
	for _, p := range paths {
		if devs := s.readMaps(p); len(devs) > 0 {
			return devs
		}
		if len(paths) > 1 && p == paths[0] {
			// Only a zombie leader's threads are worth reading: a live
			// leader's maps are the whole thread group's.
			if st, err := s.proc.stat(pid); err != nil || st.State != "Z" {
				return nil
			}
		}
	}
	return nil
}

func (s *scanner) readMaps(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := mapsBufs.Get().(*bytes.Buffer)
	defer mapsBufs.Put(buf)
	buf.Reset()
	_, _ = buf.ReadFrom(io.LimitReader(f, maxMapsBytes))
	data := buf.Bytes()
	var devs []string
	// Every device node's path holds "/nvidia" (deviceOf): the whole text
	// is searched for "nvidia" at once (rarer in it than '/', so fewer
	// false starts), and only the lines it lands on after a '/' are
	// looked at, not a CUDA process's thousands of library lines
	// (BenchmarkReadMaps: about 2x a plain read of the file, 21x before).
	for {
		j := bytes.Index(data, []byte("nvidia"))
		if j < 0 {
			break
		}
		if j == 0 || data[j-1] != '/' {
			data = data[j+len("nvidia"):]
			continue
		}
		from := bytes.LastIndexByte(data[:j], '\n') + 1
		to := len(data)
		if k := bytes.IndexByte(data[j:], '\n'); k >= 0 {
			to = j + k
		}
		line := data[from:to]
		data = data[min(to+1, len(data)):]
		i := bytes.Index(line, []byte(" /"))
		if i < 0 {
			continue
		}
		if rel, ok := s.deviceOf(strings.TrimSpace(string(line[i:]))); ok && !slices.Contains(devs, rel) {
			devs = append(devs, rel)
		}
	}
	return devs
}

// mapsBufs are the buffers maps files are read into (a CUDA process's is
// some hundred KiB).
var mapsBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// markMapped makes each holder that nvidia-smi does not list (listed) but
// that maps an NVIDIA device an owner: of the GPUs whose /dev/nvidiaN it
// maps, or of every GPU it holds when it maps only nvidiactl. Its memory is
// unknown (-1): nvidia-smi charges it to nobody or to a dead pid.
func (s *scanner) markMapped(holders []Holder, listed map[int]bool, m gpuMapping) {
	for i := range holders {
		h := &holders[i]
		// A context lives on a GPU: one needs a /dev/nvidiaN open. Protected
		// daemons are judged by the listing alone: how a real
		// nvidia-persistenced maps the driver was never measured, and a false
		// "suspicious" would keep every GPU of a host from being free; a
		// worker under a borrowed name owns memory nvidia-smi lists.
		if listed[h.PID] || h.Owner || len(h.GPUs) == 0 || h.Protected {
			continue
		}
		devs := s.mappedDevices(h.PID)
		if len(devs) == 0 {
			continue
		}
		h.Owner = true
		h.OwnerWhy = "maps " + strings.Join(devs, ", ") + " (a CUDA context) but nvidia-smi does not list it"
		if h.MemMiB == 0 {
			h.MemMiB = -1
		}
		for _, minor := range gpuMinors(devs) {
			if idx, ok := m.index(minor); ok {
				if h.MemByGPU == nil {
					h.MemByGPU = map[int]int64{}
				}
				h.MemByGPU[idx] = -1
			}
		}
		markSuspicious(h)
	}
}
