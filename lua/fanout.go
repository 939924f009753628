package lua

import (
	"context"
	"sync"
)

// fanOut calls do(i) for every i in [0, n), each on its own goroutine and at
// most forks at once, and returns when all are done. An i still waiting for
// a slot when ctx ends gets cancelled(i) instead, so Ctrl-C does not start
// hosts that have not begun.
func fanOut(ctx context.Context, n, forks int, do, cancelled func(i int)) {
	if forks <= 0 {
		forks = DefaultForks
	}
	sem := make(chan struct{}, forks)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				cancelled(i)
				return
			}
			defer func() { <-sem }()
			do(i)
		}()
	}
	wg.Wait()
}
