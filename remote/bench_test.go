package remote

import (
	"context"
	"fmt"
	"runtime"
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
	s, err := sc.sftpClient(context.Background())
	if err != nil {
		b.Fatal(err)
	}
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
