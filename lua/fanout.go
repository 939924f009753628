package lua

import (
	"context"
	"sync"
)

// fanOut calls do(i) for every i in [0, n), each on its own goroutine and at
// most forks at once, and returns once every i is done: when do returns or
// when it calls done, whichever is first. A host abandoned by its runner
// calls done and leaves its goroutine to end whenever the script stops, so
// a run needs no second goroutine per host to wait for it. A goroutine
// starts only when a slot is free: a waiting host costs no stack. An i not
// started when ctx ends gets cancelled(i) instead, so Ctrl-C does not start
// hosts that have not begun.
func fanOut(ctx context.Context, n, forks int, do func(i int, done func()), cancelled func(i int)) {
	if forks <= 0 {
		forks = DefaultForks
	}
	sem := make(chan struct{}, forks)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		// A slot free and ctx ended both: ctx wins, as for a waiting host.
		if ctx.Err() == nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			for ; i < n; i++ {
				cancelled(i)
			}
			break
		}
		wg.Add(1)
		go func() {
			var once sync.Once
			done := func() {
				once.Do(func() {
					<-sem
					wg.Done()
				})
			}
			defer done()
			do(i, done)
		}()
	}
	wg.Wait()
}
