package main

import (
	"bytes"
	"context"
	"io"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules/modulestest"
)

// What is written comes out in order, no sooner than the delay, then EOF.
func TestLinkDelaysInOrder(t *testing.T) {
	const delay = 30 * time.Millisecond
	l := newLink(delay)
	start := time.Now()
	l.Write([]byte("serve "))
	buf := []byte("hello")
	l.Write(buf)
	copy(buf, "XXXXX") // the link keeps its own copy
	l.CloseWrite()
	if _, err := l.Write([]byte("late")); err == nil {
		t.Error("a write after CloseWrite succeeded")
	}
	got, err := io.ReadAll(l)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "serve hello" {
		t.Errorf("read %q", got)
	}
	if el := time.Since(start); el < delay {
		t.Errorf("read everything after %v, before the link's delay %v", el, delay)
	}
}

// A reader blocked on an empty link is released by the reader's close.
func TestLinkCloseReadReleasesTheReader(t *testing.T) {
	l := newLink(time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := l.Read(make([]byte, 8))
		done <- err
	}()
	l.CloseRead()
	if err := <-done; err != io.EOF {
		t.Errorf("read ended with %v, want EOF", err)
	}
	if _, err := l.Write([]byte("x")); err == nil {
		t.Error("a write after the reader left succeeded")
	}
}

var fast = latency{rtt: 2 * time.Millisecond, call: time.Millisecond, release: time.Millisecond}

// free_gpus.lua through the runner frees every simulated host: one serve
// session each, the lab's 6 helper calls, every GPU at 0 MiB.
func TestSimulatedFree(t *testing.T) {
	res, err := runOne(20, config{lat: fast, script: "free_gpus.lua"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Statuses[lua.StatusOK] != 20 || len(res.Problems) > 0 {
		t.Fatalf("statuses %v, problems %v", res.Statuses, res.Problems)
	}
	if res.Sessions != 20 || res.Calls != 6*20 {
		t.Errorf("%d sessions, %d calls for 20 hosts, want 20 and 120", res.Sessions, res.Calls)
	}
	if res.PeakRSS <= 0 || res.PeakHeap <= 0 || res.ModelHeap <= 0 || res.SessionHeap <= 0 || res.SessionG != 2*20 {
		t.Errorf("figures %+v", res)
	}
}

// A host the free cannot free (a worker stuck in D that survives KILL)
// fails, is named, and is not counted ok.
func TestSimulatedFreeStuckHostFails(t *testing.T) {
	edit := func(f *fleet) {
		f.hosts[hostName(3)].model.AddHolder(modulestest.FakeHolder{MemByGPU: map[int]int64{1: 2048}, Stuck: true})
	}
	res, err := runOne(5, config{lat: fast, script: "free_gpus.lua", edit: edit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Statuses[lua.StatusOK] != 4 || res.Statuses[lua.StatusFailed] != 1 {
		t.Fatalf("statuses %v, want 4 ok and 1 failed", res.Statuses)
	}
	if len(res.Problems) != 1 || !strings.HasPrefix(res.Problems[0], hostName(3)+" failed: ") {
		t.Errorf("problems %q, want the stuck host's failure", res.Problems)
	}
}

// gpu_status.lua reads each simulated host's 4 GPUs in one session.
func TestSimulatedStatus(t *testing.T) {
	res, err := runOne(10, config{lat: fast, script: "gpu_status.lua", forks: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Statuses[lua.StatusOK] != 10 || len(res.Problems) > 0 || res.Sessions != 10 {
		t.Fatalf("statuses %v, problems %v, %d sessions", res.Statuses, res.Problems, res.Sessions)
	}
}

// The warm check refuses a helper the host does not have, and a command
// other than the warm check is not found.
func TestSimulatedHostRefuses(t *testing.T) {
	f := newFleet(1, fast)
	tr := &simTransport{f: f, h: f.hosts[hostName(0)]}
	sum, _, _ := simDigest("amd64")
	for _, c := range []struct {
		argv []string
		want string
		code int
	}{
		{[]string{"sh", "-c", "gpush-warm-exec", "sh", "~/.cache/gpush", "tok", "", strings.Repeat("0", 64), "1", "", ""}, "gpush-warm: /home/sim/.cache/gpush/gpush-helper-" + sum[:32] + " has sha256 " + sum, 0},
		{[]string{"cat", "--", "/etc/hostname"}, "", 127},
	} {
		st, err := tr.Start(context.Background(), c.argv)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(st)
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%v: stdout %q, want %q", c.argv[0], out, c.want)
		}
		if code, _, ok := st.Exit(5 * time.Second); !ok || code != c.code {
			t.Errorf("%v: exit %d (%v), want %d", c.argv[0], code, ok, c.code)
		}
	}
	if err := tr.Put(context.Background(), "/bin/sh", "/tmp/x"); err == nil {
		t.Error("a file copy to a simulated host succeeded")
	}
}

// The profile's samples of labelled goroutines are told from the others.
func TestLabelShare(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Skip("a CPU profile runs already:", err)
	}
	burn := func() int {
		x := 0
		for i := range 300_000_000 {
			x += i % 7
		}
		return x
	}
	done := make(chan int)
	pprof.Do(context.Background(), pprof.Labels("side", "peer"), func(context.Context) {
		go func() { done <- burn() }()
	})
	if burn() != <-done {
		t.Fatal("the same loop gave two sums")
	}
	pprof.StopCPUProfile()
	peer, total, err := labelShare(buf.Bytes(), "side", "peer")
	if err != nil {
		t.Fatal(err)
	}
	if peer <= 0 || peer >= total {
		t.Errorf("labelled %d ns of %d: want some, not all", peer, total)
	}
}

var _ helper.Handler = (*modulestest.GPUHost)(nil).Serve
