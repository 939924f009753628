package main

import (
	"errors"
	"io"
	"sync"
	"time"
)

// link is one direction of a simulated connection: each write is readable
// delay after it was made, in write order, and the writer's close is seen
// as EOF delay after it too. It has no goroutine and no timer of its own:
// a reader waits on its own goroutine (the controller's serve reader, the
// serve loop's line reader), with one timer per link made at its first
// wait and reused. 10,000 hosts cost 20,000 idle links: a struct, a queue
// and a channel each.
type link struct {
	delay time.Duration

	mu     sync.Mutex
	q      []chunk // written, not yet read, in order
	head   []byte  // the rest of a due chunk being read
	eof    bool    // the writer's close is due: EOF once head and q are read
	gone   bool    // the reader's side closed: writes fail, reads end
	closed bool    // the writer closed (its EOF chunk is queued)
	wake   chan struct{}
	timer  *time.Timer // the reader's, made at its first wait
}

// chunk is one write, or the writer's close (end), due at at.
type chunk struct {
	b   []byte
	at  time.Time
	end bool
}

func newLink(delay time.Duration) *link {
	return &link{delay: delay, wake: make(chan struct{}, 1)}
}

var errLinkClosed = errors.New("simulated link closed")

// Write queues a copy of p, due delay from now. It never blocks: the
// window of a real stream (SSH's 2 MiB) is far above what a serve session
// has in flight.
func (l *link) Write(p []byte) (int, error) {
	l.mu.Lock()
	if l.gone || l.closed {
		l.mu.Unlock()
		return 0, errLinkClosed
	}
	l.q = append(l.q, chunk{b: append([]byte(nil), p...), at: time.Now().Add(l.delay)})
	l.mu.Unlock()
	l.signal()
	return len(p), nil
}

// CloseWrite ends the link: the reader sees EOF delay from now, after
// everything written before.
func (l *link) CloseWrite() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		l.q = append(l.q, chunk{at: time.Now().Add(l.delay), end: true})
	}
	l.mu.Unlock()
	l.signal()
	return nil
}

// CloseRead ends the reader's side: a blocked Read returns EOF, writes fail.
func (l *link) CloseRead() {
	l.mu.Lock()
	l.gone = true
	l.q, l.head = nil, nil
	l.mu.Unlock()
	l.signal()
}

func (l *link) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Read returns what is due, waiting for the oldest pending write's time
// when nothing is.
func (l *link) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		l.mu.Lock()
		if l.gone {
			l.mu.Unlock()
			return 0, io.EOF
		}
		if len(l.head) > 0 {
			n := copy(p, l.head)
			l.head = l.head[n:]
			l.mu.Unlock()
			return n, nil
		}
		var wait time.Duration
		if len(l.q) > 0 {
			c := l.q[0]
			if wait = time.Until(c.at); wait <= 0 {
				l.q[0] = chunk{}
				l.q = l.q[1:]
				if len(l.q) == 0 {
					l.q = nil // the backing array goes with the last chunk
				}
				if c.end {
					l.eof = true
				}
				l.head = c.b
				l.mu.Unlock()
				continue
			}
		} else if l.eof {
			l.mu.Unlock()
			return 0, io.EOF
		}
		if wait > 0 {
			if l.timer == nil {
				l.timer = time.NewTimer(wait)
			} else {
				l.timer.Reset(wait)
			}
		}
		t := l.timer
		l.mu.Unlock()
		if wait > 0 {
			select {
			case <-t.C:
			case <-l.wake:
				t.Stop() // a close; a write queues behind the one waited for
			}
		} else {
			<-l.wake
		}
	}
}
