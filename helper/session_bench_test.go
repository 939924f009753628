package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkSessionFree runs a free's helper calls on one host of two held
// GPUs (snapshot; kill GPU 0's worker, wait; snapshot; kill GPU 1's, wait;
// snapshot), each verb on its own without the session stream ("calls")
// and in one serve session ("session"), alternately in the same run, and
// reports per free the nvidia-smi processes started, the helper's CPU
// (this process's rusage, the test's idle goroutines included) and that
// of the processes it reaped (nvidia-smi), with the session/calls ratios.
//
//	go test -run '^$' -bench SessionFree -benchtime 5x ./helper/
func BenchmarkSessionFree(b *testing.B) {
	slowStall(b)
	setLinger(b, 1500*time.Millisecond)
	type total struct {
		procs       int
		self, child time.Duration
	}
	sum := map[string]*total{"calls": {}, "session": {}}
	for i := 0; i < b.N; i++ {
		for _, mode := range []string{"calls", "session"} {
			b.StopTimer()
			h := newHost(b, 2)
			h.fake.ReleaseDelay = "70ms"
			h.save()
			h.cfg.SMITimeout = Duration(time.Minute) // a loaded machine is slow, not wrong
			cfg, runs := smiLog(b, h)
			workers := []*holder{
				h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000"),
				h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "7000"),
			}
			call := func(verb string, req, resp any) {
				body, err := json.Marshal(req)
				if err != nil {
					b.Fatal(err)
				}
				var out bytes.Buffer
				if err := Serve(context.Background(), verb, bytes.NewReader(body), &out); err != nil {
					b.Fatalf("%s: %v: %s", verb, err, out.Bytes())
				}
				if err := json.Unmarshal(out.Bytes(), resp); err != nil {
					b.Fatal(err)
				}
			}
			var l *inLoop
			if mode == "session" {
				l = startInLoop(b)
				call = l.call
			}
			self0, child0 := rusage(unix.RUSAGE_SELF), rusage(unix.RUSAGE_CHILDREN)
			b.StartTimer()
			var s Snapshot
			call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
			for g, w := range workers {
				hd := findHolder(&s, w.pid)
				if hd == nil {
					b.Fatalf("%s: worker %d not in the snapshot", mode, w.pid)
				}
				var k KillResponse
				call(VerbKill, KillRequest{Config: cfg, Targets: []Identity{hd.Identity}, Grace: Duration(time.Second)}, &k)
				var wr WaitFreeResponse
				call(VerbWaitFree, WaitFreeRequest{Config: cfg, GPUs: []int{g}, Timeout: Duration(10 * time.Second)}, &wr)
				if wr.Outcome != WaitFreed {
					b.Fatalf("%s: GPU %d: %s %s", mode, g, wr.Outcome, wr.Reason)
				}
				s = Snapshot{}
				call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
				if s.GPUs[g].MemUsedMiB != 0 {
					b.Fatalf("%s: GPU %d reads %d MiB after its wait", mode, g, s.GPUs[g].MemUsedMiB)
				}
			}
			b.StopTimer()
			if l != nil {
				l.end() // the stream's end is part of the session's cost
			}
			one, apps, streams := runs()
			t := sum[mode]
			t.procs += one + apps + len(streams)
			t.self += rusage(unix.RUSAGE_SELF) - self0
			t.child += rusage(unix.RUSAGE_CHILDREN) - child0
		}
	}
	n := float64(b.N)
	c, s := sum["calls"], sum["session"]
	b.ReportMetric(float64(c.procs)/n, "smi/free-calls")
	b.ReportMetric(float64(s.procs)/n, "smi/free-session")
	b.ReportMetric(c.self.Seconds()*1e3/n, "self-ms/free-calls")
	b.ReportMetric(s.self.Seconds()*1e3/n, "self-ms/free-session")
	b.ReportMetric(c.child.Seconds()*1e3/n, "smi-ms/free-calls")
	b.ReportMetric(s.child.Seconds()*1e3/n, "smi-ms/free-session")
	b.ReportMetric(float64(s.procs)/float64(c.procs), "smi-ratio")
	b.ReportMetric(float64(s.self+s.child)/float64(c.self+c.child), "cpu-ratio")
}

// rusage is user+system CPU of who (RUSAGE_SELF, RUSAGE_CHILDREN).
func rusage(who int) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
