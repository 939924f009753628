package latency

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// fakeClock stands still; every wait the proxy asks for is recorded and,
// unless gated, fires at once.
type fakeClock struct {
	mu    sync.Mutex
	t0    time.Time
	waits []time.Duration
	gate  chan chan time.Time // non-nil: the test fires each wait
	// ungated, once closed, fires waits at once again: the test is done
	// watching, and the proxy's closing waits (EOF chunks) must not block
	// its Close.
	ungated chan struct{}
}

func (c *fakeClock) now() time.Time { return c.t0 }

func (c *fakeClock) after(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if c.gate != nil {
		select {
		case c.gate <- ch:
			return ch
		case <-c.ungated:
		}
	}
	ch <- c.t0.Add(d)
	return ch
}

func (c *fakeClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// echoServer echoes every connection until EOF, then half-closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String()
}

func startProxy(t *testing.T, target string, d time.Duration, o Options) *Proxy {
	t.Helper()
	p, err := Listen(target, d, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip sends data through the proxy to the echo server, half-closes
// and returns everything that came back.
func roundTrip(t *testing.T, addr string, data []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	return got
}

func TestDelaysAskedAndBytesInOrder(t *testing.T) {
	clk := &fakeClock{t0: time.Unix(1000, 0)}
	const d = 37 * time.Millisecond
	p := startProxy(t, echoServer(t), d, Options{Now: clk.now, After: clk.after, ChunkBytes: 1000})
	data := make([]byte, 256<<10)
	rand.Read(data)
	got := roundTrip(t, p.Addr(), data)
	if !bytes.Equal(got, data) {
		t.Fatalf("echo through the proxy: got %d bytes, want %d, equal prefix %d", len(got), len(data), commonPrefix(got, data))
	}
	waits := clk.recorded()
	// Both directions, each read of at most 1000 bytes waits once, plus one
	// wait per EOF: at least 2*(256 KiB/1000)+2.
	if min := 2*(len(data)/1000) + 2; len(waits) < min {
		t.Fatalf("%d waits asked for, want at least %d", len(waits), min)
	}
	for i, w := range waits {
		if w != d {
			t.Fatalf("wait %d asked for %v, want the one-way delay %v", i, w, d)
		}
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func TestNothingArrivesBeforeTheDelay(t *testing.T) {
	clk := &fakeClock{t0: time.Unix(1000, 0), gate: make(chan chan time.Time), ungated: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Deferred, so before the proxy's Close (a cleanup): the EOFs the
	// deferred closes cause are waits nobody fires.
	defer close(clk.ungated)
	p := startProxy(t, ln.Addr().String(), 50*time.Millisecond, Options{Now: clk.now, After: clk.after})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	fire := <-clk.gate // the proxy read "hello" and now waits
	srv.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 16)
	if n, err := srv.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("target read %q (%v) before the delay elapsed", buf[:n], err)
	}
	fire <- time.Time{}
	srv.SetReadDeadline(time.Time{})
	n, err := io.ReadFull(srv, buf[:5])
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("after the delay the target read %q, %v", buf[:n], err)
	}
	if w := clk.recorded(); len(w) != 1 || w[0] != 50*time.Millisecond {
		t.Fatalf("waits %v, want [50ms]", w)
	}
}

func TestHalfCloseBothWays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := startProxy(t, ln.Addr().String(), time.Millisecond, Options{})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c.Write([]byte("request"))
	c.(*net.TCPConn).CloseWrite()
	req, err := io.ReadAll(srv) // ends only when the half-close came through
	if err != nil || string(req) != "request" {
		t.Fatalf("target read %q, %v", req, err)
	}
	// The client's side is still open for reading after its half-close.
	srv.Write([]byte("answer"))
	srv.(*net.TCPConn).CloseWrite()
	ans, err := io.ReadAll(c)
	if err != nil || string(ans) != "answer" {
		t.Fatalf("client read %q, %v", ans, err)
	}
}

func TestSlowReaderGetsEverything(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Small queue: the proxy must stop reading rather than buffer the stream.
	p := startProxy(t, ln.Addr().String(), 0, Options{QueueChunks: 2, ChunkBytes: 4096})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	data := make([]byte, 8<<20)
	rand.Read(data)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		wrote <- err
	}()
	var got bytes.Buffer
	buf := make([]byte, 512) // tiny reads: a slow consumer
	for {
		n, err := srv.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("got %d bytes, want %d, equal prefix %d", got.Len(), len(data), commonPrefix(got.Bytes(), data))
	}
}

func TestManyConnections(t *testing.T) {
	clk := &fakeClock{t0: time.Unix(1000, 0)}
	p := startProxy(t, echoServer(t), 10*time.Millisecond, Options{Now: clk.now, After: clk.after})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := []byte(strings.Repeat("conn "+strconv.Itoa(i)+";", 1000))
			go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, msg) {
				errs <- fmt.Errorf("connection %d: got %d bytes (%v), want %d", i, len(got), err, len(msg))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRefusedTargetClosesClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := startProxy(t, addr, 0, Options{})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("read %q, %v from a proxy whose target is closed", b, err)
	}
}

// The target sees the connection come from the address asked for: how the
// lab's sshd tells its hosts apart.
func TestLocalAddrIsTheClientAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	from := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			from <- err.Error()
			return
		}
		from <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		c.Close()
	}()
	p := startProxy(t, ln.Addr().String(), 0, Options{LocalAddr: "127.1.0.7"})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := <-from; got != "127.1.0.7" {
		t.Fatalf("target saw the client at %s, want 127.1.0.7", got)
	}
	if _, err := Listen(ln.Addr().String(), 0, Options{LocalAddr: "lab01"}); err == nil || !strings.Contains(err.Error(), `"lab01"`) {
		t.Fatalf("want an error naming the bad local address, got %v", err)
	}
}

// A shared gate holds the connections being set up to the target to its
// size: a slot stays taken until the target's first bytes came back.
func TestGateBoundsConnectionsBeingSetUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	waiting, most := 0, 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			waiting++
			most = max(most, waiting)
			mu.Unlock()
			go func() {
				defer c.Close()
				time.Sleep(30 * time.Millisecond) // a server slow to greet
				mu.Lock()
				waiting--
				mu.Unlock()
				c.Write([]byte("SSH-2.0-test\r\n"))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	gate := make(chan struct{}, 2)
	var proxies []*Proxy
	for i := 0; i < 3; i++ {
		proxies = append(proxies, startProxy(t, ln.Addr().String(), 0, Options{Gate: gate}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(p *Proxy) {
			defer wg.Done()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			line := make([]byte, 14)
			if _, err := io.ReadFull(c, line); err != nil || string(line) != "SSH-2.0-test\r\n" {
				errs <- fmt.Errorf("banner %q: %v", line, err)
			}
		}(proxies[i%3])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if most > 2 {
		t.Fatalf("%d connections waited for the banner at once through a gate of 2", most)
	}
	if len(gate) != 0 {
		t.Fatalf("%d gate slots still taken after every banner came", len(gate))
	}
}

func TestNegativeDelayRefused(t *testing.T) {
	if _, err := Listen("127.0.0.1:1", -time.Second, Options{}); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("want an error naming the target, got %v", err)
	}
}

func TestCloseEndsEveryGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	target := echoServer(t)
	withServer := runtime.NumGoroutine()
	clk := &fakeClock{t0: time.Unix(1000, 0), gate: make(chan chan time.Time, 100)}
	p, err := Listen(target, time.Second, Options{Now: clk.now, After: clk.after})
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for i := 0; i < 10; i++ {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("stuck in a delay that never fires"))
		conns = append(conns, c)
	}
	for i := 0; i < 10; i++ {
		<-clk.gate // every connection waits on its delay
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for the proxy's own goroutines; the echo server's end
	// as the proxy dropped their connections.
	for _, c := range conns {
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Fatalf("client read %q after Close", b)
		}
	}
	for i := 0; runtime.NumGoroutine() > withServer && i < 200; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > withServer {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before the proxy (%d before the echo server):\n%s", n, withServer, base, buf[:runtime.Stack(buf, true)])
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}

// TestCarriesSSH logs in to the real lab sshd through the proxy with a
// real delay and runs a command.
func TestCarriesSSH(t *testing.T) {
	s := sshd.StartT(t, sshd.Options{})
	p := startProxy(t, s.Addr, 5*time.Millisecond, Options{})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := s.WriteKnownHosts(kh, p.Addr()); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(s.ClientSigner)}, HostKeyCallback: cb}
	c, err := ssh.Dial("tcp", p.Addr(), cfg)
	if err != nil {
		t.Fatalf("ssh through the proxy %s to %s: %v\nsshd log:\n%s", p.Addr(), s.Addr, err, s.Logs())
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	// 1 MiB back through the proxy: the SSH stream survives many chunks.
	out, err := sess.Output("head -c 1048576 /dev/zero | tr '\\0' x; echo; echo done")
	if err != nil {
		t.Fatalf("remote command: %v", err)
	}
	if want := strings.Repeat("x", 1<<20) + "\ndone\n"; string(out) != want {
		t.Fatalf("remote output: %d bytes, want %d", len(out), len(want))
	}
}
