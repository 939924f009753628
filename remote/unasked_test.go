package remote

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
	"golang.org/x/crypto/ssh"
)

// What a server sends unasked gets the answers x/crypto's NewClient gave:
// "no" to a global request, "unknown channel type" to a channel; the
// poller ends the watch once the connection ends.
func TestUnaskedAnswered(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	scfg := &ssh.ServerConfig{NoClientAuth: true}
	scfg.AddHostKey(signer)
	// Loopback TCP, not net.Pipe: both sides write their version line
	// first, which an unbuffered pipe deadlocks on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cside, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sside, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	type server struct {
		conn *ssh.ServerConn
		err  error
	}
	srvc := make(chan server, 1)
	go func() {
		conn, chans, reqs, err := ssh.NewServerConn(sside, scfg)
		if err == nil {
			go ssh.DiscardRequests(reqs)
			go func() {
				for ch := range chans {
					ch.Reject(ssh.Prohibited, "no")
				}
			}()
		}
		srvc <- server{conn, err}
	}()
	conn, chans, reqs, err := ssh.NewClientConn(cside, "pipe", &ssh.ClientConfig{User: "u",
		HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	defer conn.Close()
	srv := <-srvc
	if srv.err != nil {
		t.Fatalf("server handshake: %v", srv.err)
	}
	served := make(chan struct{})
	pollUnasked(&unaskedWatch{chans: chans, reqs: reqs, onEnd: func() { close(served) }})

	ok, _, err := srv.conn.SendRequest("keepalive@openssh.com", true, nil)
	if ok || err != nil {
		t.Errorf("global request: ok %v err %v, want a refusal", ok, err)
	}
	_, _, err = srv.conn.OpenChannel("forwarded-tcpip", nil)
	var oce *ssh.OpenChannelError
	if !errors.As(err, &oce) || oce.Reason != ssh.UnknownChannelType || oce.Message != "unknown channel type: forwarded-tcpip" {
		t.Errorf("channel open: %v, want an unknown channel type refusal", err)
	}
	srv.conn.Close()
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("the poller did not end the watch after the connection ended")
	}
}

// An idle connection to the lab's sshd runs three goroutines: x/crypto's
// mux loop, reader and key exchange; the process's poller answers the
// server and notes the end (NewClient's three and a keepalive loop made it
// eight, one of ours for the unasked made it four). Closing it ends them all.
func TestIdleConnectionGoroutines(t *testing.T) {
	if _, err := sshd.FindBinary(); err != nil {
		t.Skip("skipping: " + err.Error())
	}
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	settled := func(want func(int) bool) int {
		n := runtime.NumGoroutine()
		for i := 0; i < 100 && !want(n); i++ {
			time.Sleep(50 * time.Millisecond) // dial's own helpers finishing
			n = runtime.NumGoroutine()
		}
		return n
	}
	before := runtime.NumGoroutine()
	c, err := Dial(t.Context(), e.host, e.opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if n := settled(func(n int) bool { return n-before <= 3 }); n-before > 3 {
		buf := make([]byte, 1<<16)
		t.Errorf("an idle connection runs %d goroutines, want at most 3:\n%s", n-before, buf[:runtime.Stack(buf, true)])
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := settled(func(n int) bool { return n <= before }); n > before {
		t.Errorf("%d goroutines left after Close", n-before)
	}
}
