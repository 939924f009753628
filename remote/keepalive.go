package remote

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// keepalive watches the server the way OpenSSH's ServerAliveInterval and
// ServerAliveCountMax do. After each interval in which nothing came from
// the server (heard), a keepalive@openssh.com request is sent; any reply
// (OpenSSH answers with a failure) or any other data proves it alive. A
// keepalive gets one interval to be answered, countMax times over: x/crypto
// lets only one request with a reply be in flight, so the later deadlines
// are those of the same request rather than of new ones that could not be
// sent. When the last deadline passes in silence the connection is closed,
// so that every call blocked on it fails: a stalled server is noticed
// (countMax+1) x interval after it last sent anything (60s by default,
// like ssh with ServerAliveInterval 15).
//
// It runs on a timer, not a goroutine of its own: a goroutine waiting
// out the interval cost every connection its stack (BenchmarkLabMemory);
// only a keepalive in flight has one, waiting for the reply.
type keepalive struct {
	c        *sshConn
	interval time.Duration
	patience time.Duration // countMax x interval
	countMax int
	heard    func() time.Time
	stopped  atomic.Bool

	mu       sync.Mutex  // serializes check and the reply's handling
	timer    *time.Timer // set once, before startKeepalive returns
	inFlight bool
	sentAt   time.Time
}

// startKeepalive arms the first check, one interval from now.
func startKeepalive(c *sshConn, interval time.Duration, countMax int, heard func() time.Time) *keepalive {
	k := &keepalive{c: c, interval: interval, patience: time.Duration(countMax) * interval,
		countMax: countMax, heard: heard}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.timer = time.AfterFunc(interval, k.check)
	return k
}

// stop disarms the timer, so that a closed connection is not kept
// reachable until it would have fired. It takes no lock: markDead calls it,
// also from check and send, which hold mu (timer is set before startKeepalive
// returns and never changes; a check already past its stopped test may
// re-arm it once, and then returns when it fires).
func (k *keepalive) stop() {
	k.stopped.Store(true)
	k.timer.Stop()
}

// check runs when the timer fires: it sends a keepalive when the server
// has been silent for an interval, or gives up on one unanswered past its
// deadlines, and arms the timer for the next look.
func (k *keepalive) check() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checkLocked()
}

func (k *keepalive) checkLocked() {
	if k.stopped.Load() {
		return
	}
	now, last := time.Now(), k.heard()
	if !k.inFlight {
		if wait := last.Add(k.interval).Sub(now); wait > 0 {
			k.timer.Reset(wait)
			return
		}
		k.inFlight, k.sentAt = true, now
		go k.send()
		k.timer.Reset(k.patience)
		return
	}
	// Data that came after the keepalive went out shows the server
	// alive too (its reply may queue behind a large transfer).
	since := k.sentAt
	if last.After(since) {
		since = last
	}
	if wait := since.Add(k.patience).Sub(now); wait > 0 {
		k.timer.Reset(wait)
		return
	}
	k.stopped.Store(true)
	k.c.markDead(fmt.Errorf("the server stalled: a keepalive sent %s ago is unanswered after %d deadlines of %s "+
		"(KeepaliveInterval %s x KeepaliveCountMax %d), and nothing else came from it for %s; "+
		"the host or its sshd is stopped or hung, or the network path is down",
		now.Sub(k.sentAt).Round(time.Millisecond), k.countMax, k.interval, k.interval, k.countMax,
		now.Sub(last).Round(time.Millisecond)))
	k.c.client.Close()
}

// send waits for the keepalive's reply; a failure to send or a connection
// that ended meanwhile ends the connection, a reply lets check decide
// when the next one is due.
func (k *keepalive) send() {
	_, _, err := k.c.client.SendRequest("keepalive@openssh.com", true, nil)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.inFlight = false
	if k.stopped.Load() {
		return
	}
	if err != nil {
		k.stopped.Store(true)
		k.timer.Stop()
		k.c.markDead(fmt.Errorf("keepalive failed: %w", err))
		k.c.client.Close()
		return
	}
	k.checkLocked()
}
