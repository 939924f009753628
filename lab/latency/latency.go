// Package latency is a TCP proxy that delays each direction of every
// connection by a fixed one-way delay, so that the lab's loopback sshd
// behaves like a host some round trip away (these machines have no netem).
//
// Bytes read from one side at time t are written to the other at t+delay,
// in order; each direction queues a bounded number of bytes, so a slow
// reader stops the proxy reading from the writer (back-pressure through
// TCP). An EOF is forwarded as a half-close after the same delay. The TCP
// handshake itself is not delayed: a connection costs no round trip before
// its first bytes.
package latency

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Options tunes a Proxy. Zero values pick the real clock.
type Options struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// After waits (default time.After). Tests inject both to see the
	// delays asked for without waiting.
	After func(time.Duration) <-chan time.Time
	// QueueChunks bounds how many reads each direction holds in flight
	// (default 64, each up to ChunkBytes).
	QueueChunks int
	// ChunkBytes is the read size (default 32 KiB).
	ChunkBytes int
	// LocalAddr is the IP the proxy dials Target from (default: the
	// kernel's choice). The lab gives each host its own loopback address,
	// so that the sshd behind tells its hosts apart by client address.
	LocalAddr string
	// Gate, when set, bounds the connections being set up to Target by
	// every proxy that shares it: a slot is held from the dial until
	// Target's first bytes (an SSH server's banner) come back. One sshd
	// accepts only so fast, and its listen backlog (128 in OpenSSH)
	// overflows when a thousand clients connect at once: the kernel drops
	// the handshake's last ACK and the connection is reset before the
	// banner. Waiting here is what a client of a busy server would see.
	Gate chan struct{}
	// Log, when set, gets a line for every connection the proxy could not
	// carry to Target (its client saw the connection close at once).
	Log io.Writer
}

// Proxy listens on 127.0.0.1 and forwards every connection to Target.
type Proxy struct {
	Target string
	Delay  time.Duration // one way: half the round trip

	ln     net.Listener
	o      Options
	dialer net.Dialer
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	once   sync.Once
}

// Listen starts a proxy on 127.0.0.1:0 in front of target, delaying each
// direction by oneWay.
func Listen(target string, oneWay time.Duration, o Options) (*Proxy, error) {
	if oneWay < 0 {
		return nil, fmt.Errorf("latency proxy for %s: negative delay %v", target, oneWay)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.QueueChunks <= 0 {
		o.QueueChunks = 64
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 32 << 10
	}
	var dialer net.Dialer
	if o.LocalAddr != "" {
		ip := net.ParseIP(o.LocalAddr)
		if ip == nil {
			return nil, fmt.Errorf("latency proxy for %s: local address %q is no IP", target, o.LocalAddr)
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("latency proxy for %s: listen: %w", target, err)
	}
	p := &Proxy{Target: target, Delay: oneWay, ln: ln, o: o, dialer: dialer, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (127.0.0.1:PORT).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops listening, drops every connection and returns once every
// goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.done)
		err = p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return err
}

// track registers a connection so that Close can drop it; false once closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			// Closed by Close; any other accept error ends the proxy too,
			// which the next dial to it reports.
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for one accepted connection and runs both
// directions until each has ended.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer client.Close()
	release := func() {}
	if p.o.Gate != nil {
		select {
		case p.o.Gate <- struct{}{}:
		case <-p.done:
			return
		}
		var once sync.Once
		release = func() { once.Do(func() { <-p.o.Gate }) }
		defer release()
	}
	target, err := p.dialer.Dial("tcp", p.Target)
	if err != nil {
		// The client sees the connection close, as with a refused port.
		if p.o.Log != nil {
			fmt.Fprintf(p.o.Log, "latency proxy %s: dial %s: %v\n", p.Addr(), p.Target, err)
		}
		return
	}
	if !p.track(target) {
		target.Close()
		return
	}
	defer p.untrack(target)
	defer target.Close()
	var dirs sync.WaitGroup
	dirs.Add(2)
	go func() { defer dirs.Done(); p.pipe(target, client) }()
	go func() { defer dirs.Done(); p.pipe(client, firstRead{target, release}) }()
	dirs.Wait()
}

// firstRead calls done after its first read returns (bytes or an end).
type firstRead struct {
	net.Conn
	done func()
}

func (f firstRead) Read(b []byte) (int, error) {
	n, err := f.Conn.Read(b)
	f.done()
	return n, err
}

// chunk is one read, due for writing at due; eof marks the source's end.
type chunk struct {
	data []byte
	due  time.Time
	eof  bool
}

// pipe copies src to dst, each read delayed by p.Delay from when it was
// read. A clean EOF becomes a half-close of dst; a failure on either side
// closes both, as a reset would.
func (p *Proxy) pipe(dst, src net.Conn) {
	q := make(chan chunk, p.o.QueueChunks)
	stop := make(chan struct{}) // the writer failed: the reader stops
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(q)
		for {
			buf := make([]byte, p.o.ChunkBytes)
			n, err := src.Read(buf)
			at := p.o.Now()
			if n > 0 {
				select {
				case q <- chunk{data: buf[:n], due: at.Add(p.Delay)}:
				case <-stop:
					return
				case <-p.done:
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					select {
					case q <- chunk{eof: true, due: at.Add(p.Delay)}:
					case <-stop:
					case <-p.done:
					}
				} else {
					// A reset or a close from the other direction: the
					// writer drops the rest.
					dst.Close()
				}
				return
			}
		}
	}()
	failed := false
	for c := range q {
		if failed {
			continue // drain so the reader can end
		}
		if wait := c.due.Sub(p.o.Now()); wait > 0 {
			select {
			case <-p.o.After(wait):
			case <-p.done:
				failed = true
				close(stop)
				continue
			}
		}
		if c.eof {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			} else {
				dst.Close()
			}
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			failed = true
			close(stop)
			src.Close()
		}
	}
	wg.Wait()
}
