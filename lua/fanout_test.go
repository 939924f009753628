package lua

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fanOut runs at most forks at once, and a host waiting for a slot has no
// goroutine yet: 200 hosts at 4 forks never run more than 4 goroutines of
// their own.
func TestFanOutStartsHostsAsSlotsFree(t *testing.T) {
	before := runtime.NumGoroutine()
	var running, most, extra atomic.Int32
	var done atomic.Int32
	fanOut(t.Context(), 200, 4, func(i int, _ func()) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if g := int32(runtime.NumGoroutine() - before); g > extra.Load() {
			extra.Store(g)
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		done.Add(1)
	}, func(i int) { t.Errorf("host %d cancelled", i) })
	if done.Load() != 200 || most.Load() > 4 {
		t.Errorf("%d hosts ran, %d at most at once; want 200 and 4", done.Load(), most.Load())
	}
	if extra.Load() > 8 { // 4 forks, and the runtime's own (timers) at times
		t.Errorf("%d goroutines beside the test's while hosts ran, want about 4 (one per fork, none per waiting host)", extra.Load())
	}
}

// A host that calls done gives its slot up while its goroutine goes on:
// the next host starts, and fanOut returns without waiting for it.
func TestFanOutDoneFreesTheSlot(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []int
	fanOut(t.Context(), 2, 1, func(i int, done func()) {
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
		if i == 0 {
			done()
			<-release // stuck, as an abandoned script
		}
	}, func(i int) { t.Errorf("host %d cancelled", i) })
	close(release)
	if len(order) != 2 || order[1] != 1 {
		t.Errorf("hosts ran %v, want [0 1]", order)
	}
}

// Hosts not started when ctx ends are cancelled, each once.
func TestFanOutCancelsTheRest(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var ran, cancelled atomic.Int32
	fanOut(ctx, 10, 1, func(i int, _ func()) {
		ran.Add(1)
		if i == 2 {
			cancel()
		}
	}, func(int) { cancelled.Add(1) })
	if ran.Load() != 3 || cancelled.Load() != 7 {
		t.Errorf("%d ran, %d cancelled; want 3 and 7", ran.Load(), cancelled.Load())
	}
}
