package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
)

// A server that always answers "Exceeded MaxStartups" (sshd past its
// limit) is busy, not "not an SSH server": dialled again with back-off
// within the connect timeout, then reported as busy with what to change.
func TestMaxStartupsAnswerIsBusyAndRetried(t *testing.T) {
	var tries atomic.Int32
	addr := listen(t, func(c net.Conn) {
		tries.Add(1)
		c.Write([]byte("Exceeded MaxStartups\r\n"))
		c.Close()
	})
	o := hostileOpts(t)
	o.ConnectTimeout = 2 * time.Second
	start := time.Now()
	dialFails(t, hostileHost(addr), o, StageBanner, "busy", `"Exceeded MaxStartups"`, "tries over", "MaxStartups", "--forks")
	took := time.Since(start)
	_, err := Dial(context.Background(), hostileHost(addr), o)
	if !errors.Is(err, ErrServerBusy) {
		t.Errorf("not ErrServerBusy: %v", err)
	}
	if strings.Contains(err.Error(), "not an SSH server") {
		t.Errorf("busy reads as not SSH: %v", err)
	}
	if n := tries.Load(); n < 6 {
		t.Errorf("%d connections for two dials, want several tries each", n)
	}
	if took > 2*time.Second+time.Second {
		t.Errorf("took %s, beyond the connect timeout", took)
	}
	t.Logf("%d connections; %v", tries.Load(), err)
}

// A server that hangs up before its banner (sshd past MaxStartups when its
// line does not get out) is tried again too; one that then answers is
// reached.
func TestClosedBeforeBannerRetriedUntilAnswered(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	var n atomic.Int32
	front := listen(t, func(c net.Conn) {
		defer c.Close()
		if n.Add(1) <= 3 {
			return // hang up at once
		}
		b, err := net.Dial("tcp", e.srv.Addr)
		if err != nil {
			return
		}
		defer b.Close()
		done := make(chan struct{}, 2)
		go func() { io.Copy(b, c); done <- struct{}{} }()
		go func() { io.Copy(c, b); done <- struct{}{} }()
		<-done
	})
	h := e.host
	h.Port = front.Port
	if err := e.srv.WriteKnownHosts(e.kh, "[127.0.0.1]:"+strconv.Itoa(front.Port)); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(context.Background(), h, e.opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	if got := n.Load(); got != 4 {
		t.Errorf("%d connections, want 3 turned away and 1 through", got)
	}
}

// The real OpenSSH sshd with MaxStartups 1: many dials at once, as
// --forks 100 behind one sshd or bastion. sshd turns away all but one
// pending connection at a time ("Exceeded MaxStartups"); every dial gets
// through within its connect timeout.
func TestRealSSHDMaxStartupsAllDialsGetThrough(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{ExtraConfig: []string{"MaxStartups 1"}})
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(context.Background(), e.host, e.opts)
			if err == nil {
				c.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			t.Errorf("dial: %v", err)
		}
	}
	if !strings.Contains(e.srv.Logs(), "past MaxStartups") {
		t.Logf("sshd turned none away (a fast machine?):\n%s", e.srv.Logs())
	}
	t.Logf("%d of %d dials failed; sshd dropped %d connections past MaxStartups", failed, n,
		strings.Count(e.srv.Logs(), "past MaxStartups"))
}

// The same through one ProxyJump bastion whose sshd, and the target's,
// allow one pending connection: the hops are tried again as the hosts are.
func TestRealSSHDMaxStartupsThroughABastion(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{ExtraConfig: []string{"MaxStartups 1"}})
	j := sshd.StartT(t, sshd.Options{ExtraConfig: []string{"MaxStartups 1"}})
	kh := e.srv.KnownHostsLine() + "\n" + j.KnownHostsLine() + "\n"
	if err := os.WriteFile(e.kh, []byte(kh), 0o600); err != nil {
		t.Fatal(err)
	}
	e.host.IdentityFiles = []string{e.srv.ClientKeyPath, j.ClientKeyPath}
	e.host.ProxyJump = fmt.Sprintf("root@127.0.0.1:%d", j.Port)
	const n = 16
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(context.Background(), e.host, e.opts)
			if err != nil {
				failed.Add(1)
				t.Errorf("dial: %v", err)
				return
			}
			c.Close()
		}()
	}
	wg.Wait()
	t.Logf("%d of %d failed; the bastion dropped %d, the target %d past MaxStartups", failed.Load(), n,
		strings.Count(j.Logs(), "past MaxStartups"), strings.Count(e.srv.Logs(), "past MaxStartups"))
}

// A port that always hangs up before a banner is tried within the connect
// timeout too, and then says what it did, not that it is surely busy.
func TestAlwaysClosedBeforeBanner(t *testing.T) {
	var addr *net.TCPAddr
	o := hostileOpts(t)
	var n atomic.Int32
	addr = listen(t, func(c net.Conn) { n.Add(1); c.Close() })
	o.ConnectTimeout = 10 * time.Second
	start := time.Now()
	dialFails(t, hostileHost(addr), o, StageBanner, "closed the connection before sending an SSH banner on each of 4 tries",
		"a busy sshd does that too", "MaxStartups", "hangs up at once")
	if n.Load() != 4 || time.Since(start) > 5*time.Second {
		t.Errorf("%d tries in %s, want 4, well within the connect timeout", n.Load(), time.Since(start))
	}
	_, err := Dial(context.Background(), hostileHost(addr), o)
	if strings.Contains(err.Error(), "is busy") {
		t.Errorf("claims busy: %v", err)
	}
}
