package remote

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// unasked is what the server sends without being asked: global requests
// (OpenSSH's hostkeys-00, keepalives) and channel opens. ssh.NewClient
// answers them on two goroutines and waits for the end on a third, for
// every connection (and its port forwards, which gpush has none of); the
// poller answers them for every connection of the process, the way those
// do: "no" to a request, "unknown channel type" to a channel.
type unasked struct {
	chans <-chan ssh.NewChannel
	reqs  <-chan *ssh.Request
}

// unaskedPoll is how often the poller looks for what servers sent unasked.
// It is rare (one hostkeys-00 per connection, a keepalive per
// ClientAliveInterval, an exit status per session) and can wait: x/crypto
// queues 16 of each kind per connection or channel before it stalls, and
// OpenSSH gives a keepalive ClientAliveInterval seconds to be answered.
// A goroutine blocked on every connection and session instead cost each
// concurrent host its stack (BenchmarkLabMemory).
const unaskedPoll = 100 * time.Millisecond

// unaskedPerPoll bounds what one watch takes per look, so that a server
// flooding requests cannot hold up the others.
const unaskedPerPoll = 64

// unaskedWatch is one source of unasked messages: a connection's global
// requests and channel opens, or a session channel's requests. onReq sees
// each request (nil: refuse it); onEnd, if set, runs on a goroutine of its
// own once every channel of the watch is closed.
type unaskedWatch struct {
	// mu is held while the watch is drained: by the poller, or by the
	// watch's owner waiting for its end (finish).
	mu    sync.Mutex
	chans <-chan ssh.NewChannel
	reqs  <-chan *ssh.Request
	onReq func(*ssh.Request)
	onEnd func()
}

// refuse answers a request "no", where its sender wants an answer. The
// reply is a write on the connection, which a peer that stopped reading
// blocks: never on the poller.
func refuse(r *ssh.Request) {
	if r.WantReply {
		go r.Reply(false, nil)
	}
}

// drain takes what the watch has queued, at most unaskedPerPoll, and
// reports whether all of its channels are closed. A watch its owner is
// finishing is left to it.
func (w *unaskedWatch) drain() bool {
	if !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	for range unaskedPerPoll {
		select {
		case r, ok := <-w.reqs:
			w.handleReq(r, ok)
		case ch, ok := <-w.chans:
			w.handleChan(ch, ok)
		default:
			return w.ended()
		}
	}
	return w.ended()
}

// finish drains w on the calling goroutine until its channels close (true)
// or wait passes: a session's owner waiting for its exit status takes it
// as soon as it comes, not at the poller's next look.
func (w *unaskedWatch) finish(wait time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	for !w.ended() {
		select {
		case r, ok := <-w.reqs:
			w.handleReq(r, ok)
		case ch, ok := <-w.chans:
			w.handleChan(ch, ok)
		case <-t.C:
			return false
		}
	}
	return true
}

func (w *unaskedWatch) ended() bool { return w.reqs == nil && w.chans == nil }

// handleReq and handleChan take one receive; mu is held.
func (w *unaskedWatch) handleReq(r *ssh.Request, ok bool) {
	switch {
	case !ok:
		w.reqs = nil
	case w.onReq != nil:
		w.onReq(r)
	default:
		refuse(r)
	}
}

func (w *unaskedWatch) handleChan(ch ssh.NewChannel, ok bool) {
	if !ok {
		w.chans = nil
		return
	}
	go ch.Reject(ssh.UnknownChannelType, fmt.Sprintf("unknown channel type: %v", ch.ChannelType()))
}

// unaskedPoller holds every watch of the process; it runs on a timer while
// it has any.
var unaskedPoller struct {
	mu      sync.Mutex
	watches map[*unaskedWatch]struct{}
	armed   bool
}

// pollUnasked adds w to the poller.
func pollUnasked(w *unaskedWatch) {
	p := &unaskedPoller
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watches == nil {
		p.watches = map[*unaskedWatch]struct{}{}
	}
	p.watches[w] = struct{}{}
	if !p.armed {
		p.armed = true
		time.AfterFunc(unaskedPoll, pollOnce)
	}
}

// pollOnce looks at every watch once, ends those whose channels closed,
// and arms the next look while any is left. Only the poller's timer runs
// it, so a watch is drained by one goroutine at a time.
func pollOnce() {
	p := &unaskedPoller
	p.mu.Lock()
	ws := make([]*unaskedWatch, 0, len(p.watches))
	for w := range p.watches {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	var ended []*unaskedWatch
	for _, w := range ws {
		if w.drain() {
			ended = append(ended, w)
		}
	}
	p.mu.Lock()
	for _, w := range ended {
		delete(p.watches, w)
		if w.onEnd != nil {
			go w.onEnd()
		}
	}
	if len(p.watches) > 0 {
		time.AfterFunc(unaskedPoll, pollOnce)
	} else {
		p.armed = false
	}
	p.mu.Unlock()
}
