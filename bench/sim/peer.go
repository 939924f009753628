package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules/modulestest"
	"github.com/gpush/gpush/remote"
)

// The simulated hosts: a stand-in for real ones, not a transport users
// reach. Connection is registered by this program only (in its own
// process); an inventory naming it anywhere else is refused as an unknown
// connection.
const Connection = "gpush_sim"

// The simulated host's answers to the warm check: an x86_64 host whose
// login user has uid 1000 and this home, and the helper installed there
// (the digest the controller is given, see simDigest).
const (
	simHome = "/home/sim"
	simUID  = "1000"
	simMach = "x86_64"
)

// simDigest is the helper every simulated host has in place: the
// controller's Options.HelperDigest gives it for amd64, so each warm check
// passes as on a warm real host. There are no bytes behind it: an upload
// (a cold host) is refused.
func simDigest(goarch string) (string, int64, error) {
	if goarch != "amd64" {
		return "", 0, fmt.Errorf("simulated hosts are %s only", simMach)
	}
	return strings.Repeat("5a", 32), 3 << 20, nil
}

// latency is what a simulated host adds to each exchange: RTT/2 on each
// direction of its link, call before each helper answer (the /proc scan and
// nvidia-smi of a real helper) and release on top of it for a wait-free
// (the driver giving memory back; the model's own clock is virtual).
type latency struct {
	rtt, call, release time.Duration
}

// fleet is the simulated hosts of one run, by name, and what they did.
type fleet struct {
	lat   latency
	hosts map[string]*simHost
	// sessions: warm checks started; live: serve loops running now;
	// inflight: requests being answered now (each one goroutine); calls:
	// requests answered in all.
	sessions, live, inflight, calls atomic.Int64
}

// simHost is one simulated host: the modulestest GPU model, served by the
// helper's own serve loop (helper.ServeLoopOn) on in-process links.
type simHost struct {
	name  string
	model *modulestest.GPUHost
	// monitor and daemon are the pids a free must leave alive.
	monitor, daemon int
}

func newFleet(n int, lat latency) *fleet {
	f := &fleet{lat: lat, hosts: make(map[string]*simHost, n)}
	for i := range n {
		name := hostName(i)
		f.hosts[name] = leftoversHost(name)
	}
	return f
}

func hostName(i int) string { return fmt.Sprintf("sim%05d", i+1) }

// Units of the leftovers scenario, as the lab's.
const (
	unitVLLM   = "vllm-embed.service"
	unitSGLang = "sglang-qwen.service"
)

// leftoversHost is the lab's leftovers scenario (lab.ScenarioLeftovers) as
// a model: 4 H200s; GPU 0 a unit whose stop frees it, GPU 1 an orphaned
// worker, GPU 2 a worker that ignores TERM, GPU 3 a unit whose forked
// worker outlives its stop; an NVML monitor on every GPU and
// nvidia-persistenced, both to be left alone.
func leftoversHost(name string) *simHost {
	m := modulestest.NewGPUHost(name, 4)
	m.AddUnit(modulestest.FakeUnit{Name: unitVLLM, Active: true})
	m.AddUnit(modulestest.FakeUnit{Name: unitSGLang, Active: true, StayAfterStop: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: unitVLLM}, MemByGPU: map[int]int64{0: 10850}})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 6144}})
	m.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{2: 4096}, IgnoreTerm: true})
	m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Unit: unitSGLang}, MemByGPU: map[int]int64{3: 8192}})
	mon := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{GPUs: []int{0, 1, 2, 3}, Comm: "nvitop"}, Monitor: true})
	d := m.AddHolder(modulestest.FakeHolder{Holder: helper.Holder{Comm: "nvidia-persistenced", User: "root", Protected: true}})
	return &simHost{name: name, model: m, monitor: mon.PID, daemon: d.PID}
}

// register makes Connection reach f's hosts (by inventory name).
func (f *fleet) register() {
	remote.RegisterCommand(Connection, func(h remote.Host) (remote.Transport, error) {
		sh, ok := f.hosts[h.Name]
		if !ok {
			return nil, fmt.Errorf("%s: no such simulated host", h.Name)
		}
		return &simTransport{f: f, h: sh}, nil
	})
}

// simTransport starts "commands" on a simulated host: only the warm check
// the serve session starts with (remote's sh -c script, whose result the
// host's state decides: the helper is in place) and, behind it, the
// helper's serve loop. Anything else exits 127, as on a host without it.
type simTransport struct {
	f *fleet
	h *simHost
}

func (t *simTransport) Start(ctx context.Context, argv []string) (remote.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	half := t.f.lat.rtt / 2
	s := &simStream{in: newLink(half), out: newLink(half), errs: newLink(half), done: make(chan struct{}), status: -1}
	// The label marks the host's goroutines (the loop's own inherit it),
	// so that the CPU profile tells their samples from the controller's.
	pprof.Do(context.Background(), pprof.Labels("side", "peer"), func(context.Context) {
		go s.run(t, argv)
	})
	return s, nil
}

func (t *simTransport) Put(ctx context.Context, local, remotePath string) error {
	return fmt.Errorf("%s: simulated host: no file copy (its helper is in place; a warm check that refuses is a bug of the simulation)", t.h.name)
}

// simStream is a started command: stdin, stdout and stderr are links.
type simStream struct {
	in, out, errs *link
	done          chan struct{}
	status        int
	once          sync.Once
}

func (s *simStream) Read(p []byte) (int, error)  { return s.out.Read(p) }
func (s *simStream) Write(p []byte) (int, error) { return s.in.Write(p) }
func (s *simStream) Stderr() io.Reader           { return s.errs }
func (s *simStream) CloseWrite() error           { return s.in.CloseWrite() }

// Close ends stdin; the command ends when it reads that (a serve loop
// cancels and waits for its requests first).
func (s *simStream) Close() error {
	s.once.Do(func() { s.in.CloseWrite() })
	return nil
}

func (s *simStream) Exit(wait time.Duration) (int, string, bool) {
	select {
	case <-s.done:
		return s.status, "", true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.done:
		return s.status, "", true
	case <-t.C:
		return -1, "", false
	}
}

// run is the command on the host: the warm check's outcome, then the
// helper's serve loop, until stdin ends.
func (s *simStream) run(t *simTransport, argv []string) {
	code := s.command(t, argv)
	s.out.CloseWrite()
	s.errs.CloseWrite()
	s.in.CloseRead()
	s.status = code
	close(s.done)
}

func (s *simStream) command(t *simTransport, argv []string) int {
	f, h := t.f, t.h
	// remote's warmArgv: sh -c SCRIPT sh DIR TOKEN BECOME SUM64 SIZE64 SUMARM SIZEARM.
	if len(argv) != 11 || argv[0] != "sh" || argv[1] != "-c" || argv[3] != "sh" || !strings.Contains(argv[2], "gpush-warm-exec") {
		fmt.Fprintf(s.errs, "sh: %s: not found on the simulated host\n", argv[0])
		return 127
	}
	f.sessions.Add(1)
	dir, token, become, sum, size := argv[4], argv[5], argv[6], argv[7], argv[8]
	wantSum, wantSize, _ := simDigest("amd64")
	fmt.Fprintf(s.out, "gpush-probe: %s %s %s %s\n", token, simMach, simUID, simHome)
	if dir == "~" || strings.HasPrefix(dir, "~/") {
		dir = simHome + dir[1:]
	}
	file := strings.TrimSuffix(dir, "/") + "/gpush-helper-" + wantSum[:32]
	switch {
	case become != "":
		fmt.Fprintln(s.out, "gpush-warm: the simulated host has no sudo")
		return 0
	case sum != wantSum || size != strconv.FormatInt(wantSize, 10):
		fmt.Fprintf(s.out, "gpush-warm: %s has sha256 %s, want %s\n", file, wantSum, sum)
		return 0
	}
	fmt.Fprintf(s.out, "gpush-warm-exec: %s\n", file)
	f.live.Add(1)
	defer f.live.Add(-1)
	return helper.ServeLoopOn(context.Background(), token, s.in, s.out, f.handler(h))
}

// handler answers a request from the host's model after the modelled
// helper latency; a cancelled request stops waiting at once.
func (f *fleet) handler(h *simHost) helper.Handler {
	return func(ctx context.Context, verb string, body []byte) (any, error) {
		f.inflight.Add(1)
		defer f.inflight.Add(-1)
		f.calls.Add(1)
		d := f.lat.call
		if verb == helper.VerbWaitFree {
			d += f.lat.release
		}
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		resp, err := h.model.Serve(ctx, verb, body)
		if err != nil {
			return nil, fmt.Errorf("simulated host %s: %w", h.name, err)
		}
		return resp, nil
	}
}

// freed checks what a free_gpus.lua run must have left on the host: every
// GPU at 0 MiB with no holder but the monitor and the protected daemon,
// both alive.
func (h *simHost) freed() error {
	var errs []error
	for i := range 4 {
		if mib := h.model.UsedMiB(i); mib != 0 {
			errs = append(errs, fmt.Errorf("GPU %d: %d MiB used", i, mib))
		}
		for _, pid := range h.model.HoldersOf(i) {
			if pid != h.monitor {
				errs = append(errs, fmt.Errorf("GPU %d: held by pid %d", i, pid))
			}
		}
	}
	if !h.model.Alive(h.monitor) || !h.model.Alive(h.daemon) {
		errs = append(errs, errors.New("the NVML monitor or nvidia-persistenced was killed"))
	}
	return errors.Join(errs...)
}
