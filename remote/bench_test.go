package remote

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/latency"
	"github.com/gpush/gpush/lab/sshd"
)

// BenchmarkRunLoopback is one command on an open connection: a channel
// open, exec and exit status over loopback.
func BenchmarkRunLoopback(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	c, err := Dial(context.Background(), e.host, e.opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWarmHelperCall is a new connection to a host that already has
// the helper, up to the first snapshot: what a warm run pays per host.
func BenchmarkWarmHelperCall(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: b.TempDir(), NvidiaSMI: "/nonexistent"}}
	for b.Loop() {
		c, err := Dial(context.Background(), e.host, e.opts)
		if err != nil {
			b.Fatal(err)
		}
		var snap helper.Snapshot
		if err := c.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkHelperContentCheck is what checking the deployed helper's
// content costs per connection: the host's sha256sum, or reading the file
// back over SFTP (hosts without sha256sum).
func BenchmarkHelperContentCheck(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	c, err := Dial(context.Background(), e.host, e.opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc := c.(*sshConn)
	p, err := sc.DeployHelper(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	s, done, err := sc.sftpClient(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer done()
	fi, err := sftpFS{s}.Lstat(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("sha256sum", func(b *testing.B) {
		for b.Loop() {
			if _, err := sc.hostSum(context.Background(), p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sftp-read-back", func(b *testing.B) {
		b.SetBytes(fi.size)
		for b.Loop() {
			if _, err := readBackSum(context.Background(), sftpFS{s}, p, fi.size); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHelperCallRTT is a helper call through a latency proxy of 20 ms
// round trip: the exec path (probe, SFTP and sha256sum per connection, a
// session per call, wrapped for cancelling) against the serve session,
// each iteration doing one of each, so that the ratio comes from one run.
func BenchmarkHelperCallRTT(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	const rtt = 20 * time.Millisecond
	p, err := latency.Listen(srv.Addr, rtt/2, latency.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if err := srv.WriteKnownHosts(e.kh, fmt.Sprintf("[127.0.0.1]:%d", p.Port())); err != nil {
		b.Fatal(err)
	}
	e.host.Port = p.Port()
	b.Run("warm-conn", func(b *testing.B) { benchWarmConn(b, e) })
	b.Run("first-call", func(b *testing.B) { benchFirstCall(b, e) })
}

// benchWarmConn is a call on an open connection whose helper is deployed
// and whose serve session runs.
func benchWarmConn(b *testing.B, e *env) {
	c, err := Dial(context.Background(), e.host, e.opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc := c.(*sshConn)
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: b.TempDir(), NvidiaSMI: "/nonexistent"}}
	// Warm both paths: deployed, serve session running.
	if err := sc.Helper(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
		b.Fatal(err)
	}
	if err := sc.helperExec(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
		b.Fatal(err)
	}
	var execT, serveT time.Duration
	var execS, serveS int32
	n := 0
	for b.Loop() {
		s0, t0 := sc.sessions.Load(), time.Now()
		if err := sc.helperExec(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
			b.Fatal(err)
		}
		s1, t1 := sc.sessions.Load(), time.Now()
		if err := sc.Helper(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
			b.Fatal(err)
		}
		execT, serveT = execT+t1.Sub(t0), serveT+time.Since(t1)
		execS, serveS = execS+s1-s0, serveS+sc.sessions.Load()-s1
		n++
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	b.ReportMetric(ms(execT), "exec-ms/call")
	b.ReportMetric(ms(serveT), "serve-ms/call")
	b.ReportMetric(float64(serveT)/float64(execT), "serve/exec")
	b.ReportMetric(float64(execS)/float64(n), "exec-sessions/call")
	b.ReportMetric(float64(serveS)/float64(n), "serve-sessions/call")
}

// BenchmarkServeConnHeap is the controller heap a warm connection holds
// with its serve session running, against one that has made a call over
// the exec path (no session held): what one host costs at --forks N.
func BenchmarkServeConnHeap(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: b.TempDir(), NvidiaSMI: "/nonexistent"}}
	const conns = 20
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	measure := func(serve bool) float64 {
		var open []Conn
		defer func() {
			for _, c := range open {
				c.Close()
			}
		}()
		base := heap()
		for range conns {
			c, err := Dial(context.Background(), e.host, e.opts)
			if err != nil {
				b.Fatal(err)
			}
			open = append(open, c)
			call := c.(*sshConn).helperExec
			if serve {
				call = c.Helper
			}
			if err := call(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
				b.Fatal(err)
			}
		}
		return float64(heap()-base) / conns / 1024
	}
	var execK, serveK float64
	for b.Loop() {
		execK += measure(false)
		serveK += measure(true)
	}
	b.ReportMetric(execK/float64(b.N), "exec-KiB/conn")
	b.ReportMetric(serveK/float64(b.N), "serve-KiB/conn")
}

// benchFirstCall is a new connection's first call on a warm host: what a
// run pays per host before its script's other calls.
func benchFirstCall(b *testing.B, e *env) {
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: b.TempDir(), NvidiaSMI: "/nonexistent"}}
	dial := func() *sshConn {
		c, err := Dial(context.Background(), e.host, e.opts)
		if err != nil {
			b.Fatal(err)
		}
		return c.(*sshConn)
	}
	warm := dial()
	if err := warm.Helper(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
		b.Fatal(err)
	}
	warm.Close()
	var execT, serveT time.Duration
	var execS, serveS int32
	n := 0
	for b.Loop() {
		c := dial()
		t0 := time.Now()
		if err := c.helperExec(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
			b.Fatal(err)
		}
		execT += time.Since(t0)
		execS += c.sessions.Load()
		c.Close()
		c = dial()
		t0 = time.Now()
		if err := c.Helper(context.Background(), helper.VerbSnapshot, req, nil); err != nil {
			b.Fatal(err)
		}
		serveT += time.Since(t0)
		serveS += c.sessions.Load()
		c.Close()
		n++
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	b.ReportMetric(ms(execT), "exec-ms/first-call")
	b.ReportMetric(ms(serveT), "serve-ms/first-call")
	b.ReportMetric(float64(serveT)/float64(execT), "serve/exec")
	b.ReportMetric(float64(execS)/float64(n), "exec-sessions/conn")
	b.ReportMetric(float64(serveS)/float64(n), "serve-sessions/conn")
}

// BenchmarkColdDeployMemory is the controller's memory while
// GPUSH_MEM_HOSTS (default 48) cold hosts start their helper at once: each
// connection's first call finds no helper in its own folder and uploads
// one, at most cap(uploadSlots) at a time, the rest waiting (as a cold
// `--forks N` run does). It reports the peaks of the Go heap and of the
// goroutine stacks during the uploads per host, and what every host's
// connection still holds once all have their serve session (after a GC),
// over the process before the dials. GPUSH_MEMPROFILE=FILE writes the heap
// profile at that point (allocations since the start included:
// -sample_index=alloc_space shows what the uploads made).
//
// Run it at gpush's GOGC (25) for peaks like a run's:
//
//	GOGC=25 GPUSH_MEM_HOSTS=48 go test -run '^$' -bench ColdDeployMemory -benchtime 1x ./remote/
func BenchmarkColdDeployMemory(b *testing.B) {
	if _, err := sshd.FindBinary(); err != nil {
		b.Skip("skipping: " + err.Error())
	}
	n := 48
	if s := os.Getenv("GPUSH_MEM_HOSTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("GPUSH_MEM_HOSTS=%q: want a positive number", s)
		}
		n = v
	}
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR",
		ExtraConfig: []string{fmt.Sprintf("MaxStartups %d", n+10), fmt.Sprintf("MaxSessions %d", n+10)}})
	e := envFor(b, srv)
	e.opts.Logger = slog.New(slog.DiscardHandler)
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: b.TempDir(), NvidiaSMI: "/nonexistent"}}
	cold := func(root string, i int) (Conn, error) {
		h := e.host
		h.Name = fmt.Sprintf("h%03d", i)
		h.Vars = map[string]any{VarRemoteDir: filepath.Join(root, h.Name)}
		c, err := Dial(context.Background(), h, e.opts)
		if err == nil {
			err = c.Helper(context.Background(), helper.VerbSnapshot, req, nil)
		}
		return c, err
	}
	// One host first: what the process keeps once (the helper's bytes,
	// their digest, known_hosts) is not the hosts'.
	c, err := cold(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	c.Close()
	if os.Getenv("GPUSH_MEMPROFILE") != "" {
		runtime.MemProfileRate = 4096
	}
	var peakHeap, peakStacks, liveHeap, liveStacks, secs float64
	for b.Loop() {
		root := b.TempDir()
		runtime.GC()
		base := readHeapStacks()
		stop := make(chan struct{})
		peaks := make(chan [2]uint64, 1)
		go func() {
			var ph, ps uint64
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				h := readHeapStacks()
				ph, ps = max(ph, h[0]), max(ps, h[1])
				select {
				case <-stop:
					peaks <- [2]uint64{ph, ps}
					return
				case <-t.C:
				}
			}
		}()
		start := time.Now()
		conns := make([]Conn, n)
		errs := make(chan error, n)
		for i := range n {
			go func() {
				c, err := cold(root, i)
				conns[i] = c
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		secs += time.Since(start).Seconds()
		close(stop)
		p := <-peaks
		runtime.GC()
		at := readHeapStacks()
		if p := os.Getenv("GPUSH_MEMPROFILE"); p != "" {
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		for _, c := range conns {
			if got := c.(*sshConn).uploads.Load(); got != 1 {
				b.Fatalf("a connection made %d uploads, want 1 (a cold host)", got)
			}
			c.Close()
		}
		k := float64(n) * 1024
		peakHeap += float64(p[0]-base[0]) / k
		peakStacks += float64(p[1]-base[1]) / k
		liveHeap += float64(at[0]-base[0]) / k
		liveStacks += float64(at[1]-base[1]) / k
	}
	f := float64(b.N)
	b.ReportMetric(peakHeap/f, "peak-heap-KiB/host")
	b.ReportMetric(peakStacks/f, "peak-stack-KiB/host")
	b.ReportMetric(liveHeap/f, "heap-KiB/host")
	b.ReportMetric(liveStacks/f, "stack-KiB/host")
	b.ReportMetric(secs/f, "s/run")
}

// readHeapStacks is the Go heap's live-and-dead objects and the goroutine
// stacks, in bytes.
func readHeapStacks() [2]uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return [2]uint64{s[0].Value.Uint64(), s[1].Value.Uint64()}
}
