package lua

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lab"
	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/remote"
	"github.com/gpush/gpush/remote/helperbin"
)

// memBarrier holds every host of a run at the end of its script, so that
// the heap can be read while all of them are alive at once (connection,
// Lua state, helper results): the controller's cost per concurrent host.
var memBarrier memBarrierT

type memBarrierT struct {
	mu      sync.Mutex
	arrived int
	failed  int           // hosts that ended before the barrier
	all     chan struct{} // closed when arrived+failed reach want
	release chan struct{}
	want    int
}

// checkAll closes all once every host arrived or failed; mu is held.
func (mb *memBarrierT) checkAll() {
	if mb.all != nil && mb.arrived+mb.failed == mb.want {
		close(mb.all)
		mb.all = make(chan struct{}) // closed once; later arrivals need no signal
	}
}

// The test modules' tables are sized as gpush's are (modules.FuncTable):
// every state of the benchmark's hosts opens them too.
func init() {
	modules.Register(modules.Module{Name: "membench", Loader: func(L *glua.LState, h modules.Host) int {
		L.Push(modules.FuncTable(L, map[string]glua.LGFunction{
			"wait": func(L *glua.LState) int {
				memBarrier.mu.Lock()
				all, release := memBarrier.all, memBarrier.release
				if all == nil {
					memBarrier.mu.Unlock()
					return 0 // not in a measured run
				}
				memBarrier.arrived++
				memBarrier.checkAll()
				memBarrier.mu.Unlock()
				select {
				case <-release:
				case <-modules.Ctx(L).Done():
					L.RaiseError("membench.wait: %v", modules.Ctx(L).Err())
				}
				return 0
			},
		}))
		return 1
	}})
}

// BenchmarkLabMemory runs scripts/gpu_status.lua (warm: the helper is
// deployed by a first run) on GPUSH_MEM_HOSTS lab hosts (default 50) at
// --forks = hosts, through the real lab sshd and remote.Dial, and reads the
// heap while every host waits at the end of its script. It reports heap in
// use, Go stacks and RSS growth per concurrent host over the process before
// the run, and the peaks of the heap and of the RSS during the run up to
// that point; GPUSH_MEMPROFILE=FILE writes the heap profile taken at that
// point and FILE.before the one before the run (`go tool pprof
// -sample_index=inuse_space -top -base FILE.before FILE`: what the hosts hold),
// what the run allocated on the way to it (`-sample_index=alloc_space`, the
// same -base: the transient garbage that sets the peak), and FILE.goroutines the goroutines at that point,
// grouped by stack.
//
// GPUSH_MEM_SCRIPT=free_gpus measures scripts/free_gpus.lua instead, on a
// leftovers lab (services stopped, workers killed in stages, verified): the
// warm-up is gpu_status.lua (it deploys and kills nothing), and the lab is
// used up by one free, so only -benchtime 1x runs.
//
//	go test -run '^$' -bench LabMemory -benchtime 1x ./lua/
//	GPUSH_MEM_SCRIPT=free_gpus go test -run '^$' -bench LabMemory -benchtime 1x ./lua/
func BenchmarkLabMemory(b *testing.B) {
	if _, err := sshd.FindBinary(); err != nil {
		b.Skip("skipping: " + err.Error())
	}
	if os.Geteuid() != 0 {
		b.Skip("skipping: the lab's sshd needs root")
	}
	n := memHosts(b, 50)
	name := memScript(b)
	if os.Getenv("GPUSH_MEMPROFILE") != "" {
		runtime.MemProfileRate = 4096 // finer than the default 512 KiB: hosts cost KiB each
	}
	scenario := lab.ScenarioIdle
	if name == memFree {
		scenario = lab.ScenarioLeftovers
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := lab.Build(ctx, b.TempDir(), lab.Binaries{})
	if err != nil {
		b.Fatalf("build lab binaries: %v", err)
	}
	// Sessions get an empty home: the login user's shell startup files
	// (pyenv init in root's .bashrc here) would cost every session seconds
	// at 100 at once.
	home := b.TempDir()
	// Each host with a process view of its own: at 1000 hosts a shared
	// view makes every scan read every lab host's processes, and most
	// hosts then fail before the barrier. Isolated hosts each get a proxy
	// in this process, whose buffers and goroutines then count as the
	// controller's (~74 KiB and 5 goroutines a host): off by default up to
	// 100 hosts, GPUSH_MEM_ISOLATE=1 or 0 to choose.
	isolate := n > 100
	switch v := os.Getenv("GPUSH_MEM_ISOLATE"); v {
	case "":
	case "0", "1":
		isolate = v == "1"
	default:
		b.Fatalf("GPUSH_MEM_ISOLATE=%q: want 0 or 1", v)
	}
	l, err := lab.Start(ctx, lab.Options{Hosts: n, Dir: b.TempDir(), Scenario: scenario, Bin: bin,
		SSHD: sshd.Options{LogLevel: "ERROR", ExtraConfig: []string{"SetEnv HOME=" + home}}, Isolate: isolate})
	if err != nil {
		if l != nil {
			l.Stop()
		}
		b.Fatalf("start lab: %v", err)
	}
	defer func() {
		if err := l.Stop(); err != nil {
			b.Logf("stop lab: %v", err)
		}
	}()
	inv, err := inventory.Load(l.Inventory)
	if err != nil {
		b.Fatal(err)
	}
	hosts := inv.Hosts()
	ropts := remote.Options{KnownHostsFile: l.KnownHosts, AgentSocket: "none",
		HelperSource: helperbin.Source, HelperDigest: helperbin.Digest}
	o := Options{Forks: n, Dial: Dialer(ropts)}
	warm, s := memScripts(b, name)
	measureHosts(b, n, name == memFree, func(measured bool, onResult func(HostResult)) []HostResult {
		o.OnResult = onResult
		if !measured {
			return Run(ctx, warm, hosts, o)
		}
		return Run(ctx, s, hosts, o)
	})
}

// BenchmarkFakeMemory is BenchmarkLabMemory's Lua side alone: the same
// script on GPUSH_MEM_HOSTS (default 200) fake hosts of 4 GPUs
// (modules/modulestest), no SSH; what the runner, the Lua states and the
// modules keep per concurrent host. With GPUSH_MEM_SCRIPT=free_gpus each
// fake host is a leftovers host as the lab's (fakeLeftovers), made afresh
// for every run.
//
//	go test -run '^$' -bench FakeMemory -benchtime 1x ./lua/
func BenchmarkFakeMemory(b *testing.B) {
	n := memHosts(b, 200)
	name := memScript(b)
	if os.Getenv("GPUSH_MEMPROFILE") != "" {
		runtime.MemProfileRate = 4096
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("gpu%04d", i)
	}
	_, hosts := newFleet(names...)
	if name == memFree {
		for i := range hosts {
			hosts[i].Vars["services"] = []any{fakeVLLM, fakeSGLang}
			// The fake kill needs no grace: none of its holders dies slowly.
			hosts[i].Vars["grace"] = "10ms"
		}
	}
	dial := func(ctx context.Context, h inventory.Host) (remote.Conn, error) {
		if name == memFree {
			return modulestest.NewConn(h.Name, fakeLeftovers(h.Name)), nil
		}
		return modulestest.NewConn(h.Name, modulestest.NewGPUHost(h.Name, 4)), nil
	}
	_, s := memScripts(b, name)
	o := Options{Forks: n, Dial: dial}
	// Every run dials afresh: a fake host's warm-up is not needed, and the
	// measured run gets hosts with their leftovers.
	measureHosts(b, n, false, func(_ bool, onResult func(HostResult)) []HostResult {
		o.OnResult = onResult
		return Run(b.Context(), s, hosts, o)
	})
}

// The fake leftovers host's units, as the lab's.
const (
	fakeVLLM   = "vllm-embed.service"
	fakeSGLang = "sglang-qwen.service"
)

// fakeLeftovers is a fake host as the lab's leftovers scenario makes them:
// a service on GPU 0 whose stop frees it, an orphaned worker on GPU 1, a
// worker that ignores TERM on GPU 2, a service on GPU 3 whose worker
// outlives its stop, an NVML monitor of every GPU and the protected
// persistence daemon.
func fakeLeftovers(name string) *modulestest.GPUHost {
	m := modulestest.NewGPUHost(name, 4)
	m.AddUnit(modulestest.FakeUnit{Name: fakeVLLM, Active: true})
	m.AddUnit(modulestest.FakeUnit{Name: fakeSGLang, Active: true, StayAfterStop: true})
	py := func(gpu int, mib int64) modulestest.FakeHolder {
		return modulestest.FakeHolder{Holder: helper.Holder{Comm: "python3", User: "root",
			Cmdline: []string{"/usr/bin/python3", "-m", "worker", "--gpu", strconv.Itoa(gpu)}}, MemByGPU: map[int]int64{gpu: mib}}
	}
	vllm := py(0, 10240)
	vllm.Unit = fakeVLLM
	m.AddHolder(vllm)
	m.AddHolder(py(1, 6144))
	ign := py(2, 4096)
	ign.IgnoreTerm = true
	m.AddHolder(ign)
	sg := py(3, 8192)
	sg.Unit = fakeSGLang
	m.AddHolder(sg)
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{0, 1, 2, 3}, Comm: "nvitop", User: "root"}, Monitor: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Comm: "nvidia-persistenced", User: "root", Protected: true}})
	return m
}

// Scripts GPUSH_MEM_SCRIPT picks.
const (
	memStatus = "gpu_status"
	memFree   = "free_gpus"
)

func memScript(b *testing.B) string {
	switch v := os.Getenv("GPUSH_MEM_SCRIPT"); v {
	case "", memStatus:
		return memStatus
	case memFree:
		return memFree
	default:
		b.Fatalf("GPUSH_MEM_SCRIPT=%q: want %s or %s", v, memStatus, memFree)
		return ""
	}
}

// memScripts are the warm-up run's script (gpu_status.lua: it deploys the
// helper and changes nothing) and the measured one at the barrier.
func memScripts(b *testing.B, name string) (warm, measured *Script) {
	return scriptAtBarrier(b, memStatus), scriptAtBarrier(b, name)
}

// scriptAtBarrier is scripts/NAME.lua as gpush runs it, with a barrier
// (membench.wait()) where every host's state is read: after gpu_status.lua
// returned, its results and the host's connection live; in free_gpus.lua
// after the free's last step (gpu.free returned, its rows logged), the
// script's locals live too (the looks before the stops, the stops'
// results, the free's whole result). A free that fails ends before the
// barrier, and its host is not counted. The leading comment block stays
// first: it declares the script's vars.
func scriptAtBarrier(b *testing.B, name string) *Script {
	dir := filepath.Join("..", "scripts")
	src, err := os.ReadFile(filepath.Join(dir, name+".lua"))
	if err != nil {
		b.Fatal(err)
	}
	var header, body []string
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			header, body = lines[:i], lines[i:]
			break
		}
	}
	if name == memFree {
		const last = "if not r.ok then fail(" // the line after the free's last step
		at := slices.IndexFunc(body, func(l string) bool { return strings.HasPrefix(l, last) })
		if at < 0 {
			b.Fatalf("%s.lua: no line %q to put the barrier before", name, last)
		}
		body = slices.Insert(body, at, "membench.wait()")
	} else {
		body = append(body, "end)(...)", "membench.wait()", "return r")
		body = slices.Insert(body, 0, "local r = (function(...)")
	}
	wrapped := strings.Join(header, "\n") + "\n" + strings.Join(body, "\n") + "\n"
	return &Script{Name: name + ".lua", Source: []byte(wrapped), Dir: dir}
}

func memHosts(b *testing.B, def int) int {
	s := os.Getenv("GPUSH_MEM_HOSTS")
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		b.Fatalf("GPUSH_MEM_HOSTS=%q: want a positive number", s)
	}
	return v
}

// measureHosts makes a first run (a warm-up: the helper gets deployed),
// then for each iteration a run whose n hosts all wait at membench.wait()
// while the heap is read, and reports the growth per host that got there,
// and the peaks of the heap and the RSS on the way there (per host, over
// the same base). A host that fails (a lab host too slow on a loaded
// machine) is logged and not counted; if none got there the benchmark
// fails. once: the hosts can be measured only once (a lab's leftovers are
// used up by a free). run's measured is false for the warm-up.
func measureHosts(b *testing.B, n int, once bool, run func(measured bool, onResult func(HostResult)) []HostResult) {
	failures := 0
	check := func(res []HostResult) {
		for _, r := range res {
			if r.Status != StatusOK {
				failures++
				b.Logf("%s: %s: %s", r.Host, r.Status, r.Error)
			}
		}
	}
	onResult := func(r HostResult) {
		if r.Status == StatusOK {
			return
		}
		memBarrier.mu.Lock()
		memBarrier.failed++
		memBarrier.checkAll()
		memBarrier.mu.Unlock()
	}
	check(run(false, nil))
	var heap, stack, stackUsed, rss, peakHeap, peakRSS, goroutines, hosts float64
	iter := 0
	for b.Loop() {
		if iter++; once && iter > 1 {
			b.Fatal("these hosts can be measured once: run with -benchtime 1x")
		}
		settle()
		before := readMem(b)
		if p := os.Getenv("GPUSH_MEMPROFILE"); p != "" {
			writeHeapProfile(b, p+".before")
		}
		memBarrier.mu.Lock()
		memBarrier.arrived, memBarrier.failed, memBarrier.want = 0, 0, n
		memBarrier.all, memBarrier.release = make(chan struct{}), make(chan struct{})
		all, release := memBarrier.all, memBarrier.release
		memBarrier.mu.Unlock()
		resetPeakRSS(b)
		peaks := watchPeak()
		done := make(chan []HostResult, 1)
		go func() { done <- run(true, onResult) }()
		<-all
		peak := peaks()
		hwm := vmField(b, "VmHWM:")
		memBarrier.mu.Lock()
		live := memBarrier.arrived
		memBarrier.mu.Unlock()
		if live == 0 {
			check(<-done)
			b.Fatal("no host reached the barrier")
		}
		settle()
		at := readMem(b)
		if p := os.Getenv("GPUSH_MEMPROFILE"); p != "" {
			writeHeapProfile(b, p)
			writeGoroutines(b, p+".goroutines")
		}
		memBarrier.mu.Lock()
		memBarrier.all = nil
		memBarrier.mu.Unlock()
		close(release)
		check(<-done)
		heap += float64(at.heap-before.heap) / float64(live)
		stack += float64(at.stack-before.stack) / float64(live)
		stackUsed += float64(at.stackUsed-before.stackUsed) / float64(live)
		rss += float64(at.rss-before.rss) / float64(live)
		peakHeap += float64(peak-before.heap) / float64(live)
		peakRSS += float64(hwm-before.rss) / float64(live)
		goroutines += float64(at.goroutines-before.goroutines) / float64(live)
		hosts += float64(live)
	}
	k := float64(b.N) * 1024
	b.ReportMetric(heap/k, "heap-KiB/host")
	b.ReportMetric(stack/k, "stack-KiB/host")
	b.ReportMetric(stackUsed/k, "stack-used-KiB/host")
	b.ReportMetric(rss/k, "rss-KiB/host")
	b.ReportMetric(peakHeap/k, "peak-heap-KiB/host")
	b.ReportMetric(peakRSS/k, "peak-rss-KiB/host")
	b.ReportMetric(goroutines/float64(b.N), "goroutines/host")
	b.ReportMetric(hosts/float64(b.N), "hosts-measured")
	b.ReportMetric(float64(failures), "hosts-failed")
}

// watchPeak samples the heap's objects (live and not yet collected: what
// the GC lets grow to about twice the live heap) every millisecond until
// the function it returns is called, which returns the highest reading.
func watchPeak() func() int64 {
	stop, out := make(chan struct{}), make(chan int64, 1)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		var top int64
		for {
			metrics.Read(sample)
			top = max(top, int64(sample[0].Value.Uint64()))
			select {
			case <-stop:
				out <- top
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 { close(stop); return <-out }
}

// resetPeakRSS sets this process's VmHWM back to its VmRSS (Linux's
// clear_refs 5), so that the run's own peak can be read.
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatalf("reset the peak RSS: %v", err)
	}
}

type memReading struct {
	heap, stack, rss int64
	// stackUsed is the stack the last collection scanned: what the
	// goroutines use of stack, where stack is what they hold.
	stackUsed  int64
	goroutines int
}

// settle collects garbage until the heap profile is current: it publishes
// a cycle's allocations and frees only two collections later.
func settle() {
	for range 3 {
		runtime.GC()
	}
}

// readMem counts live heap objects (HeapAlloc), not HeapInuse: spans left
// part-full by the warm-up run take a later run's objects without growing.
func readMem(b *testing.B) memReading {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	scan := []metrics.Sample{{Name: "/gc/scan/stack:bytes"}}
	metrics.Read(scan)
	return memReading{heap: int64(ms.HeapAlloc), stack: int64(ms.StackInuse), rss: vmRSS(b),
		stackUsed: int64(scan[0].Value.Uint64()), goroutines: runtime.NumGoroutine()}
}

// vmRSS is this process's resident set (VmRSS of /proc/self/status), in bytes.
func vmRSS(b *testing.B) int64 { return vmField(b, "VmRSS:") }

// vmField reads a size line of /proc/self/status ("VmRSS:", "VmHWM:"), in bytes.
func vmField(b *testing.B, field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("/proc/self/status: %s %q: %v", field, rest, err)
			}
			return kb * 1024
		}
	}
	b.Fatalf("/proc/self/status: no %s line", field)
	return 0
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(fmt.Errorf("heap profile %s: %w", path, err))
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// writeGoroutines writes the goroutines grouped by stack, with counts: what
// each host keeps running besides its heap.
func writeGoroutines(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		b.Fatal(fmt.Errorf("goroutine profile %s: %w", path, err))
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
