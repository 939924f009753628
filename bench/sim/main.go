// Command sim runs the controller against simulated hosts, to find where
// one controller stops: the lua runner `gpush run` uses (lua.Run, fanOut
// with --forks, the embedded scripts), the modules and the command
// connection of package remote, each host's serve session speaking to the
// helper's own serve loop (helper.ServeLoopOn) in this process, over links
// that delay each direction by RTT/2, answering from a modulestest GPU host
// (the lab's leftovers scenario) after a modelled helper latency.
//
// The hosts are a simulation, a stand-in for real ones: no SSH (x/crypto's
// per-connection goroutines and buffers, the handshake's CPU), no /proc scan
// or nvidia-smi on the host side, no sockets or file descriptors.
//
// Each host count runs in a child process of its own (peak RSS and the
// collector's state start fresh), and reports wall, CPU (user+sys) split by
// pprof label between the controller and the simulated hosts, peak RSS,
// heap, stacks and goroutines, and what the simulated hosts hold by
// themselves (measured before the run: models, links, idle serve loops).
//
//	go run ./bench/sim [-n 1000,3000,10000] [-rtt 20ms] [-script free_gpus.lua] [-forks 0]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/remote"
	"github.com/gpush/gpush/scripts"
)

// gcPercent is gpush's own default (cmd/gpush/main.go), unless GOGC is set.
const gcPercent = 25

type config struct {
	counts []int
	lat    latency
	script string
	forks  int
	prof   string // folder for each count's CPU profile ("": none)
	// edit, when set, changes the simulated hosts before the run (tests).
	edit func(*fleet)
}

func main() {
	ns := flag.String("n", "1000,3000,10000", "host counts, comma-separated; each runs in a process of its own")
	rtt := flag.Duration("rtt", 20*time.Millisecond, "modelled round trip of each host's link (RTT/2 each way)")
	call := flag.Duration("helper-latency", 50*time.Millisecond, "modelled time the helper takes to answer each call (its /proc scan and nvidia-smi)")
	release := flag.Duration("release", 300*time.Millisecond, "modelled time the driver takes to release memory, added to each wait-free")
	script := flag.String("script", "free_gpus.lua", "script to run: free_gpus.lua or gpu_status.lua (any embedded one runs; only these two are checked)")
	forks := flag.Int("forks", 0, "hosts at once, as gpush run --forks (0: all of them)")
	prof := flag.String("cpuprofile", "", "folder to write each host count's CPU profile to (sim-N.cpu.pprof; labels side=peer and side=bench mark the simulated hosts' and the sampler's samples)")
	child := flag.Int("child", 0, "internal: run one host count in this process and print its result as JSON")
	flag.Parse()
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	cfg := config{lat: latency{rtt: *rtt, call: *call, release: *release}, script: *script, forks: *forks, prof: *prof}
	if *child > 0 {
		res, err := runOne(*child, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim:", err)
			os.Exit(1)
		}
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "sim:", err)
			os.Exit(1)
		}
		return
	}
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "sim: -n %q: %q is not a host count\n", *ns, s)
			os.Exit(2)
		}
		cfg.counts = append(cfg.counts, n)
	}
	if err := parent(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
}

// parent runs each host count in a child and prints the table.
func parent(cfg config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("simulated hosts (leftovers scenario, 4 GPUs), %s, rtt %v, helper latency %v, release %v, forks %s, GOGC %s, %d CPUs\n",
		cfg.script, cfg.lat.rtt, cfg.lat.call, cfg.lat.release, forksText(cfg.forks), gogcText(), runtime.NumCPU())
	var rows []result
	for _, n := range cfg.counts {
		args := []string{"-child", strconv.Itoa(n), "-rtt", cfg.lat.rtt.String(), "-helper-latency", cfg.lat.call.String(),
			"-release", cfg.lat.release.String(), "-script", cfg.script, "-forks", strconv.Itoa(cfg.forks), "-cpuprofile", cfg.prof}
		cmd := exec.Command(self, args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("%d hosts: %w", n, err)
		}
		var r result
		if err := json.Unmarshal(out, &r); err != nil {
			return fmt.Errorf("%d hosts: result %q: %w", n, out, err)
		}
		fmt.Printf("%d hosts: %s, wall %.1f s\n", n, r.outcome(), r.Wall)
		rows = append(rows, r)
	}
	fmt.Println()
	printTable(os.Stdout, rows)
	for _, r := range rows {
		if len(r.Problems) > 0 {
			return fmt.Errorf("%d hosts: %s", r.N, strings.Join(r.Problems, "; "))
		}
	}
	return nil
}

func forksText(f int) string {
	if f <= 0 {
		return "all"
	}
	return strconv.Itoa(f)
}

func gogcText() string {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return v
	}
	return strconv.Itoa(gcPercent) + " (gpush's default)"
}

// result is one host count's figures (bytes, seconds).
type result struct {
	N, Forks int
	Script   string
	Statuses map[string]int
	// Problems: what the truth checks found (a host not ok, an ok host
	// not freed, a status without its rows), the first five.
	Problems []string `json:",omitempty"`
	Sessions int64    // warm checks started (serve sessions)
	Calls    int64    // helper requests answered
	Wall     float64
	// CPU of the whole process over the run, and its split by the CPU
	// profile's labels: the simulated hosts' goroutines are labelled; the
	// rest (the runner, modules, remote, the collector's background
	// workers) is the controller's.
	User, Sys, CtlCPU, PeerCPU float64
	// Peaks over the run (sampled every 20 ms): RSS (VmRSS), heap objects
	// (live and not yet swept), goroutine stacks, goroutines; CtlG is the
	// most goroutines that were not the simulated hosts'.
	PeakRSS, PeakHeap, PeakStacks int64
	PeakG, CtlG                   int
	// PeakLive is the most serve sessions that ran at once.
	PeakLive int
	// What the simulated hosts hold by themselves, measured before the run:
	// the models (ModelHeap, every host's for the whole run), and each
	// session started and idle at its hello (SessionHeap and SessionStacks
	// for all n at once: the links, the serve loops' goroutines and
	// buffers; SessionG goroutines). A host's session lives while the host
	// runs: PeakLive of them count at the peak.
	ModelHeap, SessionHeap, SessionStacks int64
	SessionG                              int
	// BaseRSS is the process's RSS before the fleet was built (the Go
	// runtime, the packages' data): what a controller has with no host.
	BaseRSS int64
}

func (r result) outcome() string {
	var parts []string
	for _, s := range []string{lua.StatusOK, lua.StatusFailed, lua.StatusUnreachable, lua.StatusSkipped} {
		if c := r.Statuses[s]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, s))
		}
	}
	return strings.Join(parts, ", ")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// simHold is what the simulated hosts hold at the run's peak: every
// model, and the most sessions that ran at once.
func (r result) simHold() int64 {
	return r.ModelHeap + (r.SessionHeap+r.SessionStacks)*int64(r.PeakLive)/int64(r.N)
}

func printTable(w *os.File, rows []result) {
	fmt.Fprintln(w, "| hosts | forks | result | wall | CPU busy | ctl CPU (user+sys) | ctl CPU/host | sim hosts' CPU | peak RSS | no hosts / sim hosts | ctl RSS | ctl RSS/host | sessions at once | peak goroutines (ctl) | sessions/host | calls/host |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		ctlRSS := r.PeakRSS - r.BaseRSS - r.simHold()
		fmt.Fprintf(w, "| %d | %d | %s | %.1f s | %.2f cores | %.1f s | %.2f ms | %.1f s | %.0f MiB | %.0f / %.0f MiB | %.0f MiB | %.1f KiB | %d | %d (%d) | %.2f | %.1f |\n",
			r.N, r.Forks, r.outcome(), r.Wall, (r.User+r.Sys)/r.Wall, r.CtlCPU, 1000*r.CtlCPU/float64(r.N), r.PeerCPU,
			mib(r.PeakRSS), mib(r.BaseRSS), mib(r.simHold()), mib(ctlRSS), float64(ctlRSS)/1024/float64(r.N), r.PeakLive,
			r.PeakG, r.CtlG, float64(r.Sessions)/float64(r.N), float64(r.Calls)/float64(r.N))
	}
}

// runOne runs the script on n simulated hosts in this process.
func runOne(n int, cfg config) (result, error) {
	res := result{N: n, Forks: cfg.forks, Script: cfg.script, Statuses: map[string]int{}}
	if res.Forks <= 0 {
		res.Forks = n
	}
	s, err := lua.ResolveScript(cfg.script, lua.ResolveOptions{Embedded: scripts.FS})
	if err != nil {
		return res, err
	}
	free := s.Name == "free_gpus.lua"
	hosts := make([]inventory.Host, n)
	for i := range hosts {
		h := inventory.Host{Name: hostName(i), Connection: Connection, Groups: []string{"all"}, Vars: map[string]any{}}
		h.Address = h.Name
		if free {
			h.Vars["services"] = []any{unitVLLM, unitSGLang}
		}
		hosts[i] = h
	}
	ro := remote.Options{HelperDigest: simDigest, Logger: slog.New(slog.DiscardHandler)}
	// What the simulated hosts hold: their models, then their sessions.
	h0 := heapAlloc()
	res.BaseRSS = vmRSS()
	f := newFleet(n, cfg.lat)
	f.register()
	res.ModelHeap = heapAlloc() - h0
	if cfg.edit != nil {
		cfg.edit(f)
	}
	if err := standing(f, hosts, &res); err != nil {
		return res, err
	}

	samp := startSampler(f)
	base := runtime.NumGoroutine()
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		return res, err
	}
	ru0 := rusage()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	results := lua.Run(ctx, s, hosts, lua.Options{
		Forks:       res.Forks,
		MemoryLimit: 256 << 20, // gpush run's --lua-memory default
		Dial:        lua.Dialer(ro),
		Logger:      slog.New(slog.DiscardHandler),
	})
	res.Wall = time.Since(start).Seconds()
	ru1 := rusage()
	pprof.StopCPUProfile()
	peaks := samp.stop()
	res.User = (time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano())).Seconds()
	res.Sys = (time.Duration(ru1.Stime.Nano() - ru0.Stime.Nano())).Seconds()
	peer, bench, total, err := split(prof.Bytes())
	if err != nil {
		return res, err
	}
	all := res.User + res.Sys
	if total > 0 {
		res.PeerCPU = all * float64(peer) / float64(total)
		res.CtlCPU = all * float64(total-peer-bench) / float64(total)
	}
	res.PeakRSS, res.PeakHeap, res.PeakStacks = peaks.rss, peaks.heap, peaks.stacks
	res.PeakG, res.CtlG, res.PeakLive = peaks.g-base, peaks.ctlG-base, peaks.live
	res.Sessions, res.Calls = f.sessions.Load(), f.calls.Load()

	// The truth checks: a host ok after a free has every GPU freed and
	// its monitor and daemon alive; a status host has its 4 rows. A host
	// that failed is listed (its model is as the failure left it).
	listed := 0
	note := func(format string, a ...any) {
		if listed < 5 {
			res.Problems = append(res.Problems, fmt.Sprintf(format, a...))
		}
		listed++
	}
	for _, r := range results {
		res.Statuses[r.Status]++
		switch {
		case r.Status != lua.StatusOK:
			note("%s %s: %s", r.Host, r.Status, r.Error)
		case free:
			if err := f.hosts[r.Host].freed(); err != nil {
				note("%s ok but not freed: %v", r.Host, err)
			}
		default:
			if rows, _ := r.Value.([]any); len(rows) != 4 {
				note("%s: returned %v, want 4 rows (one a GPU)", r.Host, r.Value)
			}
		}
	}
	if listed > 5 {
		res.Problems = append(res.Problems, fmt.Sprintf("and %d more", listed-5))
	}
	if cfg.prof != "" {
		name := filepath.Join(cfg.prof, fmt.Sprintf("sim-%d.cpu.pprof", n))
		if err := os.WriteFile(name, prof.Bytes(), 0o644); err != nil {
			return res, err
		}
	}
	return res, nil
}

// split is the CPU profile's samples: the simulated hosts', the bench's
// own (its sampler) and all.
func split(prof []byte) (peer, bench, total int64, err error) {
	peer, total, err = labelShare(prof, "side", "peer")
	if err != nil {
		return 0, 0, 0, err
	}
	bench, _, err = labelShare(prof, "side", "bench")
	return peer, bench, total, err
}

// standing measures what the simulated hosts' sessions hold by themselves:
// every host's session started through the transport and idle at its
// hello (its links, its serve loop's goroutines and buffers), the bench's
// readers dropped. The sessions are then ended.
func standing(f *fleet, hosts []inventory.Host, res *result) error {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	g0 := runtime.NumGoroutine()
	sum, size, _ := simDigest("amd64")
	streams := make([]remote.Stream, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &simTransport{f: f, h: f.hosts[h.Name]}
			argv := []string{"sh", "-c", "gpush-warm-exec (the warm check)", "sh", "~/.cache/gpush", "tok", "", sum, strconv.FormatInt(size, 10), "", ""}
			st, err := t.Start(context.Background(), argv)
			if err != nil {
				errs[i] = err
				return
			}
			br := bufio.NewReaderSize(st, 64)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					errs[i] = fmt.Errorf("%s: before the hello: %w", h.Name, err)
					return
				}
				if strings.HasPrefix(line, `{"serve":`) {
					break
				}
			}
			streams[i] = st
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	runtime.GC()
	var ms2 runtime.MemStats
	runtime.ReadMemStats(&ms2)
	res.SessionHeap = int64(ms2.HeapAlloc) - int64(ms.HeapAlloc)
	res.SessionStacks = int64(ms2.StackInuse) - int64(ms.StackInuse)
	res.SessionG = runtime.NumGoroutine() - g0
	for _, st := range streams {
		st.Close()
	}
	for _, st := range streams {
		if _, _, ok := st.Exit(30 * time.Second); !ok {
			return errors.New("a simulated host's serve loop did not end with its stdin")
		}
	}
	f.sessions.Store(0)
	runtime.GC()
	return nil
}

// heapAlloc is the live heap after a collection.
func heapAlloc() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

// sampler keeps the peaks of the process's memory and goroutines.
type sampler struct {
	f    *fleet
	quit chan struct{}
	done chan peaks
}

type peaks struct {
	rss, heap, stacks int64
	g, ctlG, live     int
}

func startSampler(f *fleet) *sampler {
	s := &sampler{f: f, quit: make(chan struct{}), done: make(chan peaks, 1)}
	pprof.Do(context.Background(), pprof.Labels("side", "bench"), func(context.Context) { go s.loop() })
	return s
}

func (s *sampler) loop() {
	ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	var p peaks
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(ms)
		p.heap = max(p.heap, int64(ms[0].Value.Uint64()))
		p.stacks = max(p.stacks, int64(ms[1].Value.Uint64()))
		p.rss = max(p.rss, vmRSS())
		g := runtime.NumGoroutine()
		// Each live serve loop is two goroutines (the loop, its line
		// reader), each request it answers one more; the sampler is one.
		live := int(s.f.live.Load())
		peer := 2*live + int(s.f.inflight.Load()) + 1
		p.g, p.ctlG, p.live = max(p.g, g), max(p.ctlG, g-peer), max(p.live, live)
		select {
		case <-s.quit:
			s.done <- p
			return
		case <-t.C:
		}
	}
}

func (s *sampler) stop() peaks {
	close(s.quit)
	return <-s.done
}

// vmRSS is the process's resident set now (bytes), from /proc/self/status.
func vmRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
