package remote

import (
	"fmt"
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
func (c *sshConn) keepalive(interval time.Duration, countMax int, heard func() time.Time) {
	patience := time.Duration(countMax) * interval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	var reply chan error // nil while no keepalive is in flight
	var sentAt time.Time
	for {
		select {
		case <-c.dead:
			return
		case err := <-reply:
			reply = nil
			if err != nil {
				c.markDead(fmt.Errorf("keepalive failed: %w", err))
				c.client.Close()
				return
			}
		case <-timer.C:
		}
		now, last := time.Now(), heard()
		if reply == nil {
			if wait := last.Add(interval).Sub(now); wait > 0 {
				timer.Reset(wait)
				continue
			}
			reply, sentAt = make(chan error, 1), now
			go func(ch chan<- error) {
				_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
				ch <- err
			}(reply)
			timer.Reset(patience)
			continue
		}
		// Data that came after the keepalive went out shows the server
		// alive too (its reply may queue behind a large transfer).
		since := sentAt
		if last.After(since) {
			since = last
		}
		if wait := since.Add(patience).Sub(now); wait > 0 {
			timer.Reset(wait)
			continue
		}
		c.markDead(fmt.Errorf("the server stalled: a keepalive sent %s ago is unanswered after %d deadlines of %s "+
			"(KeepaliveInterval %s x KeepaliveCountMax %d), and nothing else came from it for %s; "+
			"the host or its sshd is stopped or hung, or the network path is down",
			now.Sub(sentAt).Round(time.Millisecond), countMax, interval, interval, countMax,
			now.Sub(last).Round(time.Millisecond)))
		c.client.Close()
		return
	}
}
