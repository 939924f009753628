package helper

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkWaitFreeStream compares plain polling (memStreamPeriod 0) with
// the memory stream, in the same run: how many nvidia-smi processes a 2 s
// wait on a held GPU starts (the stream itself counted as one), and the
// time from the fake's release (70 ms after the kill, as the H200's
// driver) to the freed response, the release as an independent poller
// sees it, as truth.py section E (hw/h200/killverify.py) does on the H200. In the lab each fake reading costs a
// /proc scan of the whole machine (tens of ms on a loaded one), where the
// H200's nvidia-smi -lms 10 printed a line every 10.1 ms.
//
//	go test -run '^$' -bench WaitFreeStream -benchtime 5x ./helper/
func BenchmarkWaitFreeStream(b *testing.B) {
	oldPeriod := memStreamPeriod
	defer func() { memStreamPeriod = oldPeriod }()
	const release = 70 * time.Millisecond // the fake's, after the worker was last seen
	modes := []struct {
		name   string
		period time.Duration
	}{{"poll", 0}, {"stream", oldPeriod}}
	procs := map[string]int{}
	toFreed := map[string]time.Duration{}
	toRelease := map[string]time.Duration{}
	for i := 0; i < b.N; i++ {
		for _, m := range modes {
			memStreamPeriod = m.period
			b.StopTimer()
			h := newHost(b, 1)
			h.fake.ReleaseDelay = release.String()
			h.save()
			log := filepath.Join(h.dir, "starts.log")
			wrap := filepath.Join(h.dir, "counting", "nvidia-smi")
			if err := os.MkdirAll(filepath.Dir(wrap), 0o755); err != nil {
				b.Fatal(err)
			}
			script := "#!/bin/sh\necho \"$1\" >> '" + log + "'\nexec '" + h.smi + "' \"$@\"\n"
			if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
				b.Fatal(err)
			}
			cfg := h.cfg
			cfg.NvidiaSMI = wrap
			cfg.SMITimeout = Duration(time.Minute) // a loaded machine is slow, not wrong
			// (a) A worker that stays: the wait runs its 2 s out.
			stay := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "5000")
			r, err := WaitFree(context.Background(), WaitFreeRequest{Config: cfg, Timeout: Duration(2 * time.Second)})
			if err != nil || r.Outcome != WaitTimedOut {
				b.Fatalf("%s: %v %+v", m.name, err, r)
			}
			text, _ := os.ReadFile(log)
			procs[m.name] += strings.Count(string(text), "\n")
			syscall.Kill(stay.pid, syscall.SIGKILL)
			stay.done <- <-stay.done // reaped; the cleanup reads it again
			// (b) A worker killed some time after the second poll: the
			// stream, started after the first, is reading by then (in the
			// real flow it starts well before the driver's release). The
			// kill falls at a different point of the 100 ms interval each
			// iteration, the same in both modes, as a real release does not
			// wait for the poll's phase.
			phase := time.Duration((i*37+11)%100) * time.Millisecond
			p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "10850")
			// The release is read as on the H200, by an independent poller:
			// a stream of the fake itself, not counted, in both modes. It
			// also keeps the fake's notion of when the worker was last seen
			// (its release is 70 ms after that) as exact in both modes.
			obs, err := startMemStream(h.smi, 10*time.Millisecond)
			if err != nil {
				b.Fatal(err)
			}
			releasedAt := make(chan time.Time, 1)
			go func() {
				for range obs.updates {
					obs.mu.Lock()
					v, at := obs.used[0], obs.at[0]
					obs.mu.Unlock()
					if v >= 0 && v <= BaselineMiB {
						releasedAt <- at
						return
					}
				}
			}()
			killedAt := make(chan time.Time, 1)
			waitPollHook = func(n int) {
				if n == 2 {
					go func() {
						time.Sleep(phase)
						killedAt <- time.Now()
						syscall.Kill(p.pid, syscall.SIGKILL)
					}()
				}
			}
			b.StartTimer()
			r, err = WaitFree(context.Background(), WaitFreeRequest{Config: cfg, Timeout: Duration(5 * time.Second)})
			freed := time.Now()
			b.StopTimer()
			waitPollHook = nil
			if err != nil || r.Outcome != WaitFreed {
				b.Fatalf("%s: %v %+v", m.name, err, r)
			}
			killed := <-killedAt
			var rel time.Time
			select {
			case rel = <-releasedAt:
			case <-time.After(5 * time.Second):
				b.Fatalf("%s: the observer saw no release", m.name)
			}
			obs.close()
			toFreed[m.name] += freed.Sub(rel)
			toRelease[m.name] += rel.Sub(killed)
		}
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(float64(procs["poll"])/n, "poll-smi-procs/2s-wait")
	b.ReportMetric(float64(procs["stream"])/n, "stream-smi-procs/2s-wait")
	b.ReportMetric(float64(procs["stream"])/float64(procs["poll"]), "stream/poll-smi-procs")
	b.ReportMetric(ms(toRelease["poll"]), "poll-ms-kill-to-release")
	b.ReportMetric(ms(toRelease["stream"]), "stream-ms-kill-to-release")
	b.ReportMetric(ms(toFreed["poll"]), "poll-ms-release-to-freed")
	b.ReportMetric(ms(toFreed["stream"]), "stream-ms-release-to-freed")
	b.ReportMetric(float64(toFreed["stream"])/float64(toFreed["poll"]), "stream/poll-release-to-freed")
}
