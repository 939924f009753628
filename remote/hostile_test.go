package remote

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// listen starts a loopback listener whose connections are handled by serve
// until the test ends.
func listen(t *testing.T, serve func(net.Conn)) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); serve(c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr)
}

func hostileHost(addr *net.TCPAddr) Host {
	return Host{Name: "bad1", Address: "127.0.0.1", Port: addr.Port, User: "root", Connection: "ssh"}
}

func hostileOpts(t *testing.T) Options {
	log, _ := testLogger(t)
	return Options{
		KnownHostsFile: filepath.Join(t.TempDir(), "known_hosts"),
		ConnectTimeout: time.Second,
		AgentSocket:    "none",
		DefaultKeys:    []string{},
		Logger:         log,
	}
}

// dialFails dials h and checks the failure: a *DialError at stage, naming
// the host and port. That the deadline ended a stalled peer shows in the
// message ("within 1s"), which only the deadline path writes; no wall-clock
// bound is asserted (it would flake on a loaded machine).
func dialFails(t *testing.T, h Host, o Options, stage string, subs ...string) {
	t.Helper()
	c, err := Dial(context.Background(), h, o)
	if err == nil {
		c.Close()
		t.Fatal("dial succeeded against a broken peer")
	}
	de := dialErr(t, err)
	if de.Stage != stage {
		t.Errorf("stage %q, want %q: %v", de.Stage, stage, err)
	}
	mustContain(t, err.Error(), append([]string{h.Name, "127.0.0.1:" + strconv.Itoa(h.Port)}, subs...)...)
}

func TestPeerNeverSendsBanner(t *testing.T) {
	addr := listen(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	dialFails(t, hostileHost(addr), hostileOpts(t), StageBanner, "accepted the TCP connection but sent no SSH banner within 1s")
}

// The host's own ConnectTimeout (ansible_ssh_timeout, ssh_config) wins
// over Options': the deadline named is the host's.
func TestHostConnectTimeoutWins(t *testing.T) {
	addr := listen(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	h := hostileHost(addr)
	h.ConnectTimeout = 1500 * time.Millisecond
	o := hostileOpts(t)
	o.ConnectTimeout = time.Hour
	dialFails(t, h, o, StageBanner, "sent no SSH banner within 1.5s")
}

func TestPeerStallsInKeyExchange(t *testing.T) {
	addr := listen(t, func(c net.Conn) {
		io.WriteString(c, "SSH-2.0-OpenSSH_9.9 stalled\r\n")
		io.Copy(io.Discard, c)
	})
	dialFails(t, hostileHost(addr), hostileOpts(t), StageKex, "SSH-2.0-OpenSSH_9.9 stalled", "did not complete within 1s")
}

func TestPeerIsHTTP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	dialFails(t, hostileHost(l.Addr().(*net.TCPAddr)), hostileOpts(t), StageBanner, "not an SSH server", "HTTP/1.1 400")
}

func TestPeerRefusesTCP(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	dialFails(t, hostileHost(addr), hostileOpts(t), StageConnect, "connection refused")
}

func TestConnectCanceledByContext(t *testing.T) {
	addr := listen(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	o := hostileOpts(t)
	o.ConnectTimeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err := Dial(ctx, hostileHost(addr), o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want a canceled dial, got %v", err)
	}
}

// goSSHServer is an x/crypto SSH server accepting any key; onExec handles
// each exec request's channel and its TCP connection.
func goSSHServer(t *testing.T, onExec func(ch ssh.Channel, conn net.Conn)) (*net.TCPAddr, ssh.PublicKey) {
	t.Helper()
	_, hk, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(hk)
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) {
		return nil, nil
	}}
	cfg.AddHostKey(signer)
	addr := listen(t, func(nc net.Conn) {
		_, chans, reqs, err := ssh.NewServerConn(nc, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		for nch := range chans {
			ch, creqs, err := nch.Accept()
			if err != nil {
				return
			}
			go func() {
				for r := range creqs {
					r.Reply(r.Type == "exec", nil)
					if r.Type == "exec" {
						onExec(ch, nc)
					}
				}
			}()
		}
	})
	return addr, signer.PublicKey()
}

func TestPeerDropsConnectionMidCommand(t *testing.T) {
	addr, hostKey := goSSHServer(t, func(ch ssh.Channel, nc net.Conn) {
		io.WriteString(ch, "partial output")
		time.Sleep(50 * time.Millisecond)
		nc.Close()
	})
	o := hostileOpts(t)
	os.WriteFile(o.KnownHostsFile, []byte(knownhosts.Line([]string{addr.String()}, hostKey)+"\n"), 0o600)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	kp := filepath.Join(t.TempDir(), "id")
	writeKey(t, kp, key)
	h := hostileHost(addr)
	h.IdentityFiles = []string{kp}
	c, err := Dial(context.Background(), h, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Run(context.Background(), []string{"long-running"}, RunOptions{})
	if !errors.Is(err, ErrConnectionLost) || !IsUnreachable(err) {
		t.Fatalf("want ErrConnectionLost, got %v", err)
	}
	mustContain(t, err.Error(), "bad1", "long-running")
	// Later calls fail at once, with the same cause.
	if _, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("call on a dead connection: %v", err)
	}
}

func writeKey(t *testing.T, path string, key ed25519.PrivateKey) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freezer forwards TCP to a target until frozen; then it forwards nothing
// in either direction (a peer that vanished without closing: a powered-off
// host, a dropped route).
type freezer struct {
	frozen atomic.Bool
}

func (f *freezer) proxy(t *testing.T, target string) *net.TCPAddr {
	return listen(t, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			return
		}
		defer up.Close()
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if err != nil {
					dst.Close()
					return
				}
				for f.frozen.Load() {
					time.Sleep(10 * time.Millisecond)
				}
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		go pipe(up, c)
		pipe(c, up)
	})
}

func TestKeepaliveClosesADeadConnection(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	var fz freezer
	paddr := fz.proxy(t, e.srv.Addr)
	t.Cleanup(func() { fz.frozen.Store(false) }) // runs first: lets the proxy's loops end
	// known_hosts names the proxy's port.
	os.WriteFile(e.kh, []byte(e.srv.KnownHostsLine(fmt.Sprintf("127.0.0.1:%d", paddr.Port))+"\n"), 0o600)
	e.host.Port = paddr.Port
	e.opts.KeepaliveInterval = 200 * time.Millisecond
	e.opts.KeepaliveCountMax = 2
	c := e.dial(t)
	// Keepalives answered: an idle connection stays up.
	time.Sleep(time.Second)
	if _, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil {
		t.Fatalf("healthy connection closed by keepalive: %v", err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), []string{"sleep", "60"}, RunOptions{})
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond)
	fz.frozen.Store(true)
	select {
	case err := <-errc:
		if !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("want ErrConnectionLost, got %v", err)
		}
		mustContain(t, err.Error(), "h1", "keepalive", "stalled")
	case <-time.After(30 * time.Second):
		t.Fatal("a call on a frozen connection never returned")
	}
}

func TestUnknownHostKeyPolicyRefused(t *testing.T) {
	o := hostileOpts(t)
	o.HostKeyPolicy = "no"
	_, err := Dial(context.Background(), Host{Name: "x", Address: "127.0.0.1", Connection: "ssh"}, o)
	if de := dialErr(t, err); de.Stage != StageConfig {
		t.Fatalf("stage %q: %v", de.Stage, err)
	}
	mustContain(t, err.Error(), `"no"`, HostKeyStrict, HostKeyAcceptNew)
}
