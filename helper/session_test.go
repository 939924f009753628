package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// inLoop is ServeLoop run in the test's process on pipes (so that its
// hooks and streamLinger can be set), with real nvidia-smi processes.
type inLoop struct {
	t    testing.TB
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan struct{} // closed when ServeLoop returned
	id   uint64
}

func startInLoop(t testing.TB) *inLoop {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	l := &inLoop{t: t, in: inW, out: bufio.NewReader(outR), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		ServeLoop(context.Background(), "tok", inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		go io.Copy(io.Discard, l.out) // a reply nobody reads must not block the end
		<-l.done
	})
	if _, err := l.out.ReadString('\n'); err != nil { // the hello
		t.Fatal(err)
	}
	return l
}

// call sends one request and returns its response, decoded into resp.
func (l *inLoop) call(verb string, req, resp any) {
	l.t.Helper()
	l.id++
	b, err := json.Marshal(req)
	if err != nil {
		l.t.Fatal(err)
	}
	line, _ := json.Marshal(ServeRequest{ID: l.id, Verb: verb, Req: b})
	if _, err := l.in.Write(append(line, '\n')); err != nil {
		l.t.Fatal(err)
	}
	var r ServeReply
	var text string
	for {
		text, err = l.out.ReadString('\n')
		if err != nil {
			l.t.Fatalf("%s: read reply: %v", verb, err)
		}
		r = ServeReply{}
		if err := json.Unmarshal([]byte(text), &r); err != nil || r.ID != l.id || r.Failed {
			l.t.Fatalf("%s: reply %q (%v)", verb, text, err)
		}
		if r.Progress == nil {
			break // progress lines come before the reply
		}
	}
	if err := json.Unmarshal(r.Resp, resp); err != nil {
		l.t.Fatalf("%s: response %s: %v", verb, r.Resp, err)
	}
}

// end closes stdin and waits for the loop to return.
func (l *inLoop) end() {
	l.t.Helper()
	l.in.Close()
	select {
	case <-l.done:
	case <-time.After(30 * time.Second):
		l.t.Fatal("serve loop did not end after stdin EOF")
	}
}

// killStream kills a stream this process started (its pid cannot be
// reused before the helper reaps it) and waits until it is reaped.
func killStream(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(20 * time.Second); !reaped(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("killed stream pid %d not reaped", pid)
		}
	}
}

// smiLog wraps the host's nvidia-smi in a script logging "PID ARG1" per
// run (exec keeps the pid: a stream's is the logged one), and returns the
// config using it and a reader of the runs of each form so far.
func smiLog(t testing.TB, h *host) (Config, func() (oneShots, apps int, streams []int)) {
	t.Helper()
	log := filepath.Join(h.dir, "smi-runs.log")
	wrap := filepath.Join(h.dir, "logging", "nvidia-smi")
	if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"$$ ${1%%=*}\" >> '" + log + "'\nexec '" + h.smi + "' \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := h.cfg
	cfg.NvidiaSMI = wrap
	return cfg, func() (int, int, []int) {
		b, _ := os.ReadFile(log)
		var one, apps int
		var streams []int
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var pid int
			var form string
			if _, err := fmt.Sscan(line, &pid, &form); err != nil {
				continue
			}
			switch form {
			case "--query-gpu":
				one++
			case "--query-compute-apps":
				apps++
			case "-lms":
				streams = append(streams, pid)
			}
		}
		return one, apps, streams
	}
}

// snapshotSeesNewWorker takes a snapshot in l while a 5000 MiB worker of
// GPU 0 starts as it begins, and fails unless the snapshot reads it.
func snapshotSeesNewWorker(t *testing.T, l *inLoop, h *host, cfg Config) (*Snapshot, *holder) {
	t.Helper()
	var worker *holder
	snapshotStartHook = func() { worker = h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "5000") }
	t.Cleanup(func() { snapshotStartHook = nil })
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	snapshotStartHook = nil
	if len(s.GPUs) != 1 || s.GPUs[0].MemUsedMiB != 5000 || findHolder(&s, worker.pid) == nil {
		t.Fatalf("snapshot gpus %+v holders %+v: want GPU 0 at 5000 MiB held by pid %d", s.GPUs, s.Holders, worker.pid)
	}
	return &s, worker
}

// slowSession keeps a session's stream and listing for a minute and gives
// its stream time to start: what is tested is the reuse, not the bounds.
func slowSession(t testing.TB) {
	setLinger(t, time.Minute)
	slowStall(t)
	old := listingReuse
	listingReuse = time.Minute
	t.Cleanup(func() { listingReuse = old })
}

func setLinger(t testing.TB, d time.Duration) {
	old := streamLinger
	streamLinger = d
	t.Cleanup(func() { streamLinger = old })
}

// slowStall gives a loaded machine's stream time to start or resume
// (late, not never), so that counts of one-shots do not depend on load.
func slowStall(t testing.TB) {
	old, oldWait := memStreamStall, roundWaitMin
	memStreamStall, roundWaitMin = 20*time.Second, 10*time.Second
	t.Cleanup(func() { memStreamStall, roundWaitMin = old, oldWait })
}

// In one session, a wait's stream serves the snapshot after it and the
// next wait: two waits and two snapshots start one nvidia-smi stream and
// no --query-gpu one-shot, and every answer names the GPUs in full.
func TestSessionStreamReuse(t *testing.T) {
	setLinger(t, time.Minute) // the reuse, not the idle end, is tested here
	slowStall(t)
	h := newHost(t, 2)
	cfg, runs := smiLog(t, h)
	var fromStream int
	var mu sync.Mutex
	smiStreamHook = func() { mu.Lock(); fromStream++; mu.Unlock() }
	t.Cleanup(func() { smiStreamHook = nil })
	l := startInLoop(t)
	for round := range 2 {
		var w WaitFreeResponse
		l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
		if w.Outcome != WaitFreed || len(w.GPUs) != 2 || strings.Contains(w.Reason, "memory stream") {
			t.Fatalf("wait %d: outcome %s gpus %+v reason %q", round, w.Outcome, w.GPUs, w.Reason)
		}
		var s Snapshot
		l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
		if !s.SMI || len(s.GPUs) != 2 || s.GPUs[1].UUID != h.fake.GPUs[1].UUID || s.GPUs[1].MemTotalMiB != 143771 || s.GPUs[0].MemUsedMiB != 0 {
			t.Fatalf("snapshot %d: smi %v gpus %+v warnings %q", round, s.SMI, s.GPUs, s.Warnings)
		}
	}
	one, _, streams := runs()
	mu.Lock()
	n := fromStream
	mu.Unlock()
	if one != 0 || len(streams) != 1 || n != 2 {
		t.Errorf("%d --query-gpu, %d streams, %d snapshots from the stream: want 0, 1, 2", one, len(streams), n)
	}
	l.end()
	if _, _, streams = runs(); len(streams) != 1 || !reaped(streams[0]) {
		t.Errorf("streams %v after the session's end: want one, reaped", streams)
	}
}

// A snapshot reads the GPUs from a round the stream began after the
// request did, never an older one: the stream prints every 300 ms (so
// that its latest round, from before, reads the GPU free), and a worker
// takes 5000 MiB as the snapshot request begins; the snapshot reads it,
// from the stream (no one-shot ran).
func TestSessionSnapshotIsFresh(t *testing.T) {
	setLinger(t, time.Minute)
	slowStall(t)
	old := memStreamPeriod
	memStreamPeriod = 300 * time.Millisecond
	t.Cleanup(func() { memStreamPeriod = old })
	h := newHost(t, 1)
	cfg, runs := smiLog(t, h)
	l := startInLoop(t)
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
	if w.Outcome != WaitFreed {
		t.Fatalf("wait: outcome %s reason %q", w.Outcome, w.Reason)
	}
	snapshotSeesNewWorker(t, l, h, cfg)
	if one, _, streams := runs(); one != 0 || len(streams) != 1 {
		t.Errorf("%d --query-gpu, %d streams: want the snapshot served by the wait's stream", one, len(streams))
	}
}

// A session's first snapshot starts the stream instead of a --query-gpu
// run: a worker started as the snapshot begins is in its reading, and the
// wait and the snapshot after it read the same process.
func TestSessionFirstSnapshotStartsStream(t *testing.T) {
	setLinger(t, time.Minute)
	slowStall(t)
	h := newHost(t, 1)
	cfg, runs := smiLog(t, h)
	l := startInLoop(t)
	s, worker := snapshotSeesNewWorker(t, l, h, cfg)
	one, _, streams := runs()
	if one != 0 || len(streams) != 1 {
		t.Fatalf("first snapshot: %d --query-gpu, streams %v: want one stream and no one-shot", one, streams)
	}
	syscall.Kill(worker.pid, syscall.SIGKILL)
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, s)
	if one, _, now := runs(); w.Outcome != WaitFreed || one != 0 || len(now) != 1 || len(s.GPUs) != 1 || s.GPUs[0].MemUsedMiB != 0 {
		t.Errorf("wait %s (%q) and snapshot %+v: %d --query-gpu, streams %v: want GPU 0 freed, read from stream %d", w.Outcome, w.Reason, s.GPUs, one, now, streams[0])
	}
	l.end()
	if !reaped(streams[0]) {
		t.Errorf("stream pid %d outlived the session", streams[0])
	}
}

// The stream ends on its own once no call used it for streamLinger; a
// snapshot after that starts a new one, which the next wait reads.
func TestSessionStreamLingerEnds(t *testing.T) {
	setLinger(t, 200*time.Millisecond)
	slowStall(t)
	h := newHost(t, 1)
	cfg, runs := smiLog(t, h)
	l := startInLoop(t)
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
	_, _, streams := runs()
	if w.Outcome != WaitFreed || len(streams) != 1 {
		t.Fatalf("wait: outcome %s reason %q, streams %v", w.Outcome, w.Reason, streams)
	}
	for end := time.Now().Add(20 * time.Second); !reaped(streams[0]); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("stream pid %d still there 20 s after its wait, linger %s", streams[0], streamLinger)
		}
	}
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	// With none lingering the snapshot starts the session's stream (no
	// one-shot), and the next wait reads that one.
	if one, _, streams := runs(); one != 0 || len(streams) != 2 || !s.SMI || len(s.GPUs) != 1 {
		t.Errorf("snapshot after the linger: %d --query-gpu (want 0), streams %v (want a new one), gpus %+v", one, streams, s.GPUs)
	}
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
	if _, _, streams = runs(); w.Outcome != WaitFreed || len(streams) != 2 {
		t.Errorf("second wait: outcome %s, streams %v: want the snapshot's reused", w.Outcome, streams)
	}
	l.end()
	for _, p := range streams {
		if !reaped(p) {
			t.Errorf("stream pid %d outlived the session", p)
		}
	}
}

// A stream killed while it lingers is not reused: the next snapshot starts
// a new one, which the next wait reads.
func TestSessionDeadStreamFallsBack(t *testing.T) {
	setLinger(t, time.Minute)
	slowStall(t)
	h := newHost(t, 1)
	cfg, runs := smiLog(t, h)
	l := startInLoop(t)
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
	_, _, streams := runs()
	if len(streams) != 1 {
		t.Fatalf("streams %v", streams)
	}
	killStream(t, streams[0])
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	// Not the dead one: the snapshot starts a new stream, which the next
	// wait reuses. When the snapshot comes before the session has read the
	// dead stream's end (a loaded machine), it answers from one --query-gpu
	// and the wait starts the new stream: a right answer either way, never
	// a reading from the dead stream, never two one-shots.
	one, _, streams := runs()
	if one > 1 || len(streams) > 2 || (one == 0 && len(streams) != 2) || !s.SMI || len(s.GPUs) != 1 || s.GPUs[0].UUID == "" {
		t.Errorf("snapshot after the stream died: %d --query-gpu (want a new stream, or one --query-gpu), streams %v, gpus %+v", one, streams, s.GPUs)
	}
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
	if _, _, streams = runs(); w.Outcome != WaitFreed || len(streams) != 2 || strings.Contains(w.Reason, "memory stream") {
		t.Errorf("wait after the stream died: outcome %s reason %q streams %v", w.Outcome, w.Reason, streams)
	}
}

// Two waits at once in one session: the second cannot share the first's
// updates, so it runs a stream of its own, stopped at its release; the
// shared one lingers after its release, and the session's end stops it.
func TestSessionConcurrentWaits(t *testing.T) {
	setLinger(t, time.Minute)
	h := newHost(t, 1)
	ss := newSession()
	ctx := withSession(context.Background(), ss)
	a, releaseA, err := waitStream(ctx, h.smi, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	b, releaseB, err := waitStream(ctx, h.smi, 10*time.Millisecond)
	if err != nil {
		releaseA()
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("a second wait got the stream the first reads")
	}
	releaseB()
	if !reaped(b.pid) {
		t.Errorf("the second wait's own stream (pid %d) is still there after its release", b.pid)
	}
	releaseA()
	if st, release, _ := ss.snapshotStream(h.smi); reaped(a.pid) || st != a {
		t.Errorf("the shared stream (pid %d) did not linger after its wait", a.pid)
	} else {
		release()
	}
	c, releaseC, err := waitStream(ctx, h.smi, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if c != a {
		t.Errorf("the next wait started pid %d instead of reusing the lingering %d", c.pid, a.pid)
	}
	releaseC()
	ss.close()
	if !reaped(a.pid) {
		t.Errorf("the shared stream (pid %d) outlived the session", a.pid)
	}
}

// A snapshot of GPUs that read 0 MiB, watched by a monitor (its device
// open, nothing mapped), runs no --query-compute-apps: nothing could be
// listed. Once a worker holds memory, the listing runs and names it.
func TestSnapshotSkipsListingWhenNothingAllocated(t *testing.T) {
	h := newHost(t, 2)
	cfg, runs := smiLog(t, h)
	mon := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	s, err := TakeSnapshot(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !s.SMI || len(s.GPUs) != 2 || s.GPUs[0].MemUsedMiB != 0 || findHolder(s, mon.pid) == nil || findHolder(s, mon.pid).Owner {
		t.Fatalf("idle snapshot: gpus %+v holders %+v", s.GPUs, s.Holders)
	}
	for _, st := range s.Status {
		if st.State != GPUFree {
			t.Errorf("GPU %d: %s (%s), want free", st.Index, st.State, st.Reason)
		}
	}
	if _, apps, _ := runs(); apps != 0 {
		t.Errorf("%d --query-compute-apps on idle GPUs, want 0", apps)
	}
	w := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "3000")
	if s, err = TakeSnapshot(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if hd := findHolder(s, w.pid); hd == nil || !hd.Owner || hd.OwnerWhy != "listed by nvidia-smi" || hd.MemByGPU[1] != 3000 {
		t.Fatalf("worker %d: %+v", w.pid, hd)
	}
	if _, apps, _ := runs(); apps != 1 {
		t.Errorf("%d --query-compute-apps with memory in use, want 1", apps)
	}
}

// A wait right after a snapshot in one session starts from the snapshot's
// listing: the worker it judged holds the GPU, named with its memory, and
// the wait runs no --query-compute-apps of its own. A worker that came
// after the snapshot is not judged by it: the wait lists it.
func TestSessionWaitUsesSnapshotListing(t *testing.T) {
	setLinger(t, time.Minute)
	slowStall(t)
	h := newHost(t, 2)
	cfg, runs := smiLog(t, h)
	w0 := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000")
	l := startInLoop(t)
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	_, apps0, _ := runs()
	var w WaitFreeResponse
	// A few polls, well under appsRefresh (a loaded machine polls less).
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, GPUs: []int{0}, Timeout: Duration(200 * time.Millisecond), Interval: Duration(50 * time.Millisecond)}, &w)
	if w.Outcome != WaitTimedOut || len(w.Status) != 1 || !slices.Equal(w.Status[0].Owners, []int{w0.pid}) ||
		len(w.Holders) != 1 || w.Holders[0].MemMiB != 5000 || w.Holders[0].OwnerWhy != "listed by nvidia-smi" {
		t.Fatalf("wait on GPU 0: outcome %s status %+v holders %+v reason %q", w.Outcome, w.Status, w.Holders, w.Reason)
	}
	if _, apps, _ := runs(); apps != apps0 {
		t.Errorf("the wait ran --query-compute-apps %d times, want none: the snapshot's listing judged its holder", apps-apps0)
	}
	w1 := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "3000")
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	w2 := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "1000")
	_, apps0, _ = runs()
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, GPUs: []int{1}, Timeout: Duration(200 * time.Millisecond), Interval: Duration(50 * time.Millisecond)}, &w)
	if w.Outcome != WaitTimedOut || len(w.Status) != 1 || !slices.Equal(w.Status[0].Owners, []int{w1.pid, w2.pid}) {
		t.Fatalf("wait on GPU 1: outcome %s status %+v reason %q: want both workers owners", w.Outcome, w.Status, w.Reason)
	}
	if _, apps, _ := runs(); apps == apps0 {
		t.Error("the wait ran no --query-compute-apps: the worker started after the snapshot was not judged")
	}
}

// A snapshot's listing older than appsRefresh polls of the wait is not
// used: the wait lists the holders itself.
func TestSessionOldListingIsNotUsed(t *testing.T) {
	h := newHost(t, 1)
	cfg, runs := smiLog(t, h)
	h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000")
	l := startInLoop(t)
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	_, apps0, _ := runs()
	time.Sleep(appsRefresh * 20 * time.Millisecond) // appsRefresh polls of the wait below
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(100 * time.Millisecond), Interval: Duration(20 * time.Millisecond)}, &w)
	if w.Outcome != WaitTimedOut || len(w.Holders) != 1 {
		t.Fatalf("outcome %s holders %+v reason %q", w.Outcome, w.Holders, w.Reason)
	}
	if _, apps, _ := runs(); apps == apps0 {
		t.Error("the wait ran no --query-compute-apps: it used a listing older than appsRefresh of its polls")
	}
}

// procState is the state letter of /proc/PID/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[0]
}

// While no call reads it, the lingering stream is stopped (state T): it
// costs the host nothing; a snapshot resumes it for its reading, and it
// is stopped again after. Its nvidia-smi holds a device open (as the real
// one does) but is the helper's own: no snapshot lists it as a holder.
func TestSessionLingeringStreamIsPausedAndNoHolder(t *testing.T) {
	setLinger(t, time.Minute)
	slowStall(t)
	h := newHost(t, 1)
	wrap := filepath.Join(h.dir, "holding", "nvidia-smi")
	if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nexec 3<'" + h.d("nvidiactl") + "' 4<'" + h.d("nvidia0") + "'\nexec '" + h.smi + "' \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := h.cfg
	cfg.NvidiaSMI = wrap
	pids := streamPIDs(t)
	l := startInLoop(t)
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second)}, &w)
	if w.Outcome != WaitFreed || len(pids()) != 1 {
		t.Fatalf("wait: outcome %s reason %q streams %v", w.Outcome, w.Reason, pids())
	}
	stream := pids()[0]
	for end := time.Now().Add(20 * time.Second); procState(t, stream) != "T"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("lingering stream %d in state %s, want T (stopped)", stream, procState(t, stream))
		}
	}
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	if len(s.GPUs) != 1 || s.GPUs[0].UUID == "" || findHolder(&s, stream) != nil {
		t.Fatalf("snapshot gpus %+v holders %+v: want the GPU, not the helper's own stream %d", s.GPUs, s.Holders, stream)
	}
	if len(pids()) != 1 {
		t.Errorf("streams %v: the snapshot should have resumed the lingering one", pids())
	}
	for end := time.Now().Add(20 * time.Second); procState(t, stream) != "T"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("stream %d in state %s after the snapshot, want T", stream, procState(t, stream))
		}
	}
	// A process that is not the helper's own, holding the same devices, is listed.
	mon := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	if findHolder(&s, mon.pid) == nil || findHolder(&s, stream) != nil {
		t.Errorf("holders %+v: want the monitor %d and not the stream %d", s.Holders, mon.pid, stream)
	}
	l.end()
	if !reaped(stream) {
		t.Errorf("stream %d outlived the session", stream)
	}
}

// A session's snapshot judges by the last snapshot's listing while no GPU's
// memory or owners changed (a free's look after its unit stop), and lists
// anew when they did: a freed GPU (its owner gone, 0 MiB) needs no listing,
// a new worker, memory kept by a gone owner's child (a ghost) or an old
// listing do; a ghost's GPU read at 0 MiB again does not.
func TestSessionSnapshotReusesListing(t *testing.T) {
	if !(procFS{dir: "/proc"}).inHostPIDNamespace() {
		t.Skip("the test runs outside the host's PID namespace: no listing is reused there")
	}
	// Snapshots come seconds apart on a loaded machine: the age bound is
	// tested at the end.
	slowSession(t)
	h := newHost(t, 3)
	cfg, runs := smiLog(t, h)
	w0 := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000")
	w1 := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "3000")
	mon := h.start(h.as("nvitop"), "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	l := startInLoop(t)
	snap := func(what string, wantApps int) *Snapshot {
		t.Helper()
		_, before, _ := runs()
		var s Snapshot
		l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
		if _, apps, _ := runs(); apps-before != wantApps {
			t.Errorf("%s: %d --query-compute-apps, want %d", what, apps-before, wantApps)
		}
		return &s
	}
	owner := func(s *Snapshot, pid int, mib int64) {
		t.Helper()
		if hd := findHolder(s, pid); hd == nil || !hd.Owner || hd.OwnerWhy != "listed by nvidia-smi" || hd.MemMiB != mib {
			t.Errorf("pid %d: %+v, want an owner of %d MiB", pid, hd, mib)
		}
	}
	snap("first", 1)
	s := snap("nothing changed", 0)
	owner(s, w0.pid, 5000)
	owner(s, w1.pid, 3000)
	if hd := findHolder(s, mon.pid); hd == nil || hd.Owner {
		t.Errorf("monitor: %+v", hd)
	}
	if st := statusOf(t, s.Status, 0); st.State != GPUHeld || !slices.Equal(st.Owners, []int{w0.pid}) {
		t.Errorf("GPU 0: %+v", st)
	}

	syscall.Kill(w1.pid, syscall.SIGKILL)
	err := <-w1.done
	w1.done <- err
	for end := time.Now().Add(10 * time.Second); !reaped(w1.pid) && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
	}
	s = snap("GPU 1's owner gone, its memory with it", 0)
	if st := statusOf(t, s.Status, 1); st.State != GPUFree {
		t.Errorf("GPU 1: %+v, want free", st)
	}
	owner(s, w0.pid, 5000)

	w2 := h.start("", "--dev", h.d("nvidia2"), "--dev", h.d("nvidiactl"), "--mem-mib", "2000")
	s = snap("a new worker", 1)
	owner(s, w2.pid, 2000)

	k := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "1000", "--keeper")
	snap("a worker and its keeper", 1)
	syscall.Kill(k.pid, syscall.SIGKILL)
	err = <-k.done
	k.done <- err
	s = snap("the worker gone, its keeper keeping its memory", 1)
	if len(s.Ghosts) != 1 || s.Ghosts[0].PID != k.pid || s.Ghosts[0].GPU != 1 {
		t.Errorf("ghosts %+v, want pid %d's memory on GPU 1", s.Ghosts, k.pid)
	}
	snap("memory still charged to the gone worker", 1)
	// The keeper gone too: GPU 1 reads 0 MiB, nothing is charged to anyone.
	syscall.Kill(k.child, syscall.SIGKILL)
	for end := time.Now().Add(10 * time.Second); !gone(k.child) && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
	}
	s = snap("the ghost's memory released", 0)
	if st := statusOf(t, s.Status, 1); st.State != GPUFree || len(s.Ghosts) != 0 {
		t.Errorf("GPU 1: %+v, ghosts %+v: want free", st, s.Ghosts)
	}

	listingReuse = 50 * time.Millisecond
	time.Sleep(listingReuse)
	snap("an old listing", 1)
}

// A worker killed beside another on the same GPU: the snapshot while its
// memory drains lists (an owner is gone, memory stays); once the driver
// released it, the next reads the survivor's memory alone and needs no
// listing. A wait in the session after such a kill lets the stream watch
// the drain instead of listing every poll, and still says freed only once
// the memory is gone.
func TestSessionDrainNeedsNoListing(t *testing.T) {
	if !(procFS{dir: "/proc"}).inHostPIDNamespace() {
		t.Skip("the test runs outside the host's PID namespace")
	}
	slowSession(t)
	h := newHost(t, 2)
	h.fake.ReleaseDelay = "400ms"
	h.save()
	cfg, runs := smiLog(t, h)
	a := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000")
	b := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "3000")
	l := startInLoop(t)
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	kill := func(hd *holder) {
		syscall.Kill(hd.pid, syscall.SIGKILL)
		err := <-hd.done
		hd.done <- err
	}
	kill(b)
	_, apps0, _ := runs()
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	if _, apps, _ := runs(); apps != apps0+1 || s.GPUs[0].MemUsedMiB != 8000 {
		t.Fatalf("right after the kill: %d listings, GPU 0 at %d MiB: want 1 listing, 8000 MiB draining", apps-apps0, s.GPUs[0].MemUsedMiB)
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		// Outside the session, through the unlogged nvidia-smi.
		if s, err := TakeSnapshot(context.Background(), h.cfg); err == nil && s.GPUs[0].MemUsedMiB == 5000 {
			break
		}
	}
	_, apps0, _ = runs()
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	if _, apps, _ := runs(); apps != apps0 {
		t.Errorf("after the drain: %d listings, want 0", apps-apps0)
	}
	if hd := findHolder(&s, a.pid); s.GPUs[0].MemUsedMiB != 5000 || hd == nil || !hd.Owner || hd.MemMiB != 5000 {
		t.Errorf("after the drain: GPU 0 at %d MiB, survivor %+v", s.GPUs[0].MemUsedMiB, hd)
	}

	kill(a)
	_, apps0, _ = runs()
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, GPUs: []int{0}, Timeout: Duration(10 * time.Second)}, &w)
	if !w.OK || w.Outcome != WaitFreed || w.GPUs[0].MemUsedMiB != 0 {
		t.Fatalf("wait after the last kill: %s %q GPUs %+v", w.Outcome, w.Reason, w.GPUs)
	}
	if _, apps, _ := runs(); apps != apps0 {
		t.Errorf("the wait listed %d times while the killed worker's memory drained, want 0", apps-apps0)
	}
	if len(w.Timeline) == 0 || w.Timeline[0].UsedMiB[0] != 5000 {
		// A loaded machine's first poll may come after the release: then
		// there was no drain to watch, and nothing to list either.
		t.Logf("timeline %+v: the drain was not seen", w.Timeline)
	}
}

// The stream a snapshot starts runs at awaitPeriod, and so does a wait
// that ends at its first free reading: that wait reads the snapshot's
// process. A wait with a settle watches for seconds at memStreamPeriod:
// it starts a stream of its own at that period instead of reading the
// fast one.
func TestSessionStreamPeriodByUse(t *testing.T) {
	setLinger(t, time.Minute)
	slowStall(t)
	h := newHost(t, 1)
	cfg, runs := smiLog(t, h)
	periods := map[int]time.Duration{}
	var mu sync.Mutex
	memStreamHook = func(pid int, argv []string) {
		mu.Lock()
		defer mu.Unlock()
		for i, a := range argv {
			if a == "-lms" && i+1 < len(argv) {
				ms, _ := strconv.Atoi(argv[i+1])
				periods[pid] = time.Duration(ms) * time.Millisecond
			}
		}
	}
	t.Cleanup(func() { memStreamHook = nil })
	l := startInLoop(t)
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	var w WaitFreeResponse
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second), NewSince: 1}, &w)
	_, _, streams := runs()
	if w.Outcome != WaitFreed || len(streams) != 1 {
		t.Fatalf("release wait: outcome %s (%q), streams %v: want freed, read from the snapshot's stream", w.Outcome, w.Reason, streams)
	}
	l.call(VerbWaitFree, WaitFreeRequest{Config: cfg, Timeout: Duration(10 * time.Second), Settle: Duration(300 * time.Millisecond)}, &w)
	_, _, streams = runs()
	if w.Outcome != WaitFreed || len(streams) != 2 {
		t.Fatalf("settle wait: outcome %s (%q), streams %v: want freed, from a stream of its own", w.Outcome, w.Reason, streams)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := periods[streams[0]]; got != awaitPeriod() {
		t.Errorf("snapshot's stream: -lms %s, want %s", got, awaitPeriod())
	}
	if got := periods[streams[1]]; got != memStreamPeriod {
		t.Errorf("settle wait's stream: -lms %s, want %s", got, memStreamPeriod)
	}
}

// A prestarted stream serves the session's first snapshot (no other
// process, no one-shot), the snapshot's reading still as fresh as one
// begun with it; one no call uses stops after the linger.
func TestSessionPrestart(t *testing.T) {
	setLinger(t, time.Minute)
	slowStall(t)
	h := newHost(t, 1)
	cfg, runs := smiLog(t, h)
	ss := NewSession()
	ss.Prestart(cfg)
	ctx := ss.Bind(context.Background())
	var worker *holder
	snapshotStartHook = func() { worker = h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "5000") }
	t.Cleanup(func() { snapshotStartHook = nil })
	s, err := TakeSnapshot(ctx, cfg)
	snapshotStartHook = nil
	if err != nil {
		t.Fatal(err)
	}
	if len(s.GPUs) != 1 || s.GPUs[0].MemUsedMiB != 5000 || findHolder(s, worker.pid) == nil {
		t.Fatalf("snapshot gpus %+v holders %+v: want GPU 0 at 5000 MiB held by pid %d", s.GPUs, s.Holders, worker.pid)
	}
	one, _, streams := runs()
	if one != 0 || len(streams) != 1 {
		t.Errorf("%d --query-gpu, streams %v: want the prestarted stream alone", one, streams)
	}
	ss.Close()
	if len(streams) > 0 && !reaped(streams[0]) {
		t.Errorf("stream pid %d outlived the session", streams[0])
	}

	setLinger(t, 100*time.Millisecond)
	unused := NewSession()
	unused.Prestart(cfg)
	for end := time.Now().Add(10 * time.Second); len(streams) < 2 && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		_, _, streams = runs() // the wrapper logs the run as it starts
	}
	if len(streams) != 2 {
		t.Fatalf("streams %v: want the second session's prestarted one", streams)
	}
	for end := time.Now().Add(20 * time.Second); !reaped(streams[1]); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("unused prestarted stream pid %d still there 20 s on, linger %s", streams[1], streamLinger)
		}
	}
	unused.Close()
}

// An owner killed beside another on its GPU, its memory released before
// the session's next snapshot: that snapshot judges by the listing from
// before the kill (what a listing now would say: the survivor alone, at
// its amount) and needs none; a listing is still run while the gone
// owner's memory stays (see TestSessionDrainNeedsNoListing).
func TestSessionGoneOwnerReleasedNeedsNoListing(t *testing.T) {
	if !(procFS{dir: "/proc"}).inHostPIDNamespace() {
		t.Skip("the test runs outside the host's PID namespace: no listing is reused there")
	}
	slowSession(t)
	h := newHost(t, 2)
	h.fake.ReleaseDelay = "300ms"
	h.save()
	cfg, runs := smiLog(t, h)
	a := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000")
	b := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "3000")
	c := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "2000")
	l := startInLoop(t)
	var s Snapshot
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	syscall.Kill(b.pid, syscall.SIGKILL)
	err := <-b.done
	b.done <- err
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		// Outside the session, through the unlogged nvidia-smi.
		if s, err := TakeSnapshot(context.Background(), h.cfg); err == nil && s.GPUs[0].MemUsedMiB == 5000 {
			break
		}
	}
	_, apps0, _ := runs()
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	if _, apps, _ := runs(); apps != apps0 {
		t.Errorf("the killed owner's memory released: %d listings, want 0", apps-apps0)
	}
	if hd := findHolder(&s, a.pid); s.GPUs[0].MemUsedMiB != 5000 || hd == nil || !hd.Owner || hd.MemMiB != 5000 {
		t.Errorf("GPU 0 at %d MiB, survivor %+v: want its owner of 5000 MiB", s.GPUs[0].MemUsedMiB, hd)
	}
	if st := statusOf(t, s.Status, 0); st.State != GPUHeld || !slices.Equal(st.Owners, []int{a.pid}) {
		t.Errorf("GPU 0: %+v, want held by %d", st, a.pid)
	}
	if hd := findHolder(&s, c.pid); hd == nil || !hd.Owner || hd.MemMiB != 2000 {
		t.Errorf("GPU 1's owner: %+v", hd)
	}

	// Killed with a keeper that holds its memory: the memory stays, so the
	// listing is read and says where it went.
	k := h.start("", "--dev", h.d("nvidia1"), "--dev", h.d("nvidiactl"), "--mem-mib", "1000", "--keeper")
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	syscall.Kill(k.pid, syscall.SIGKILL)
	err = <-k.done
	k.done <- err
	time.Sleep(500 * time.Millisecond) // past the release delay: only the keeper keeps it
	_, apps0, _ = runs()
	l.call(VerbSnapshot, SnapshotRequest{Config: cfg}, &s)
	if _, apps, _ := runs(); apps != apps0+1 {
		t.Errorf("a gone owner's memory kept: %d listings, want 1", apps-apps0)
	}
	if len(s.Ghosts) != 1 || s.Ghosts[0].PID != k.pid {
		t.Errorf("ghosts %+v, want pid %d's memory", s.Ghosts, k.pid)
	}
}

// The unit verb's leftovers (a holdersOnly snapshot) need what a listing
// says of each holder, not of the GPUs: right after a stop, while the
// stopped worker's memory drains, the holders are judged by the session's
// listing; a holder that maps a device and that the listing did not judge
// (a new context) still makes one, and a plain snapshot still lists while
// a gone owner's memory stays.
func TestHoldersOnlySnapshotReusesListing(t *testing.T) {
	slowSession(t)
	h := newHost(t, 1)
	h.fake.ReleaseDelay = "10s"
	h.save()
	cfg, runs := smiLog(t, h)
	a := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000")
	b := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "3000")
	ss := newSession()
	t.Cleanup(ss.close)
	ctx := withSession(context.Background(), ss)
	snap := func(holdersOnly bool) (*Snapshot, int) {
		t.Helper()
		s, err := newScanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.noManagers, s.holdersOnly = true, holdersOnly
		_, apps0, _ := runs()
		snap, err := s.snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, apps, _ := runs()
		return snap, apps - apps0
	}
	if _, n := snap(false); n != 1 {
		t.Fatalf("first snapshot: %d listings, want 1", n)
	}
	syscall.Kill(b.pid, syscall.SIGKILL)
	err := <-b.done
	b.done <- err
	s, n := snap(true)
	if n != 0 {
		t.Errorf("holders only, a gone owner's memory draining: %d listings, want 0", n)
	}
	if hd := findHolder(s, a.pid); hd == nil || !hd.Owner || hd.MemMiB != 5000 || findHolder(s, b.pid) != nil {
		t.Errorf("holders %+v: want %d an owner of 5000 MiB, %d gone", s.Holders, a.pid, b.pid)
	}
	if _, n := snap(false); n != 1 {
		t.Errorf("a plain snapshot while the gone owner's memory stays: %d listings, want 1", n)
	}
	w := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "1000")
	s, n = snap(true)
	if hd := findHolder(s, w.pid); n != 1 || hd == nil || !hd.Owner || hd.MemMiB != 1000 {
		t.Errorf("a new worker: %d listings, holder %+v: want 1 listing naming it an owner of 1000 MiB", n, hd)
	}
}

// A snapshot that must list (a holder maps a device, no listing to reuse)
// and whose GPU reading is a process start runs the listing beside that
// reading, not after it: the wrapper's --query-gpu run goes on only once
// a --query-compute-apps run has begun. One that need not list (no holder
// maps a device, every GPU at 0 MiB) runs no listing at all.
func TestSnapshotListsBesideSlowGPUReading(t *testing.T) {
	h := newHost(t, 1)
	mark, log := filepath.Join(h.dir, "listing-started"), filepath.Join(h.dir, "order.log")
	wrap := filepath.Join(h.dir, "ordering", "nvidia-smi")
	if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"--query-compute-apps*) : > '" + mark + "' ;;\n" +
		"--query-gpu*) i=0; while [ ! -e '" + mark + "' ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n" +
		"  if [ -e '" + mark + "' ]; then echo beside >> '" + log + "'; else echo after >> '" + log + "'; fi ;;\n" +
		"esac\nexec '" + h.smi + "' \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := h.cfg
	cfg.NvidiaSMI = wrap
	w := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"), "--mem-mib", "5000")
	s, err := TakeSnapshot(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(log)
	if got := strings.TrimSpace(string(b)); got != "beside" {
		t.Errorf("GPU reading ran %q the listing, want beside it", got)
	}
	if hd := findHolder(s, w.pid); hd == nil || !hd.Owner || hd.MemMiB != 5000 || len(s.Status) != 1 || s.Status[0].State != GPUHeld {
		t.Errorf("snapshot %+v, holders %+v: want %d an owner of 5000 MiB", s.Status, s.Holders, w.pid)
	}

	syscall.Kill(w.pid, syscall.SIGKILL)
	err = <-w.done
	w.done <- err // for the holder's cleanup
	mon := h.start("", "--dev", h.d("nvidia0"), "--dev", h.d("nvidiactl"))
	cfg, runs := smiLog(t, h)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s, err = TakeSnapshot(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if s.GPUs[0].MemUsedMiB == 0 || time.Now().After(end) {
			break
		}
	}
	if _, apps, _ := runs(); apps != 0 || findHolder(s, mon.pid) == nil {
		t.Errorf("a monitor alone on an idle GPU: %d listings (holders %+v), want none", apps, s.Holders)
	}
}
