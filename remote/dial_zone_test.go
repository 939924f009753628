package remote

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gpush/gpush/lab/sshd"
)

// TestDialIPv6Zone dials the lab sshd through an address with a zone,
// "::1%lo": a forwarder listening on [::1%lo]:PORT relays to the sshd
// (which listens on 127.0.0.1 only). The zone must survive into the dial
// and the known_hosts entry must name the address unambiguously.
func TestDialIPv6Zone(t *testing.T) {
	requireRoot(t)
	l, err := net.Listen("tcp", "[::1%lo]:0")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no IPv6 loopback: %v", err)
		}
		t.Skipf("no IPv6 loopback: %v", err)
	}
	e := newEnv(t, sshd.Options{})
	var wg sync.WaitGroup
	accepted := make(chan string, 4)
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c.LocalAddr().String()
			up, err := net.Dial("tcp", e.srv.Addr)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
	e.host.Address = "::1%lo"
	e.host.Port = l.Addr().(*net.TCPAddr).Port
	e.opts.HostKeyPolicy = HostKeyAcceptNew
	e.opts.KnownHostsFile = e.tdir + "/known_hosts_zone"
	c, err := Dial(context.Background(), e.host, e.opts)
	if err != nil {
		t.Fatalf("dial [::1%%lo]:%d: %v", e.host.Port, err)
	}
	defer c.Close()
	res, err := c.Run(context.Background(), []string{"echo", "zoned"}, RunOptions{})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "zoned" {
		t.Fatalf("run over the zoned connection: %q, %v", res.Stdout, err)
	}
	if got := <-accepted; !strings.HasPrefix(got, "[::1") {
		t.Errorf("the forwarder was reached at %s", got)
	}
	kh, _ := os.ReadFile(e.opts.KnownHostsFile)
	if !strings.Contains(string(kh), "[::1%lo]:") {
		t.Errorf("known_hosts entry %q does not name [::1%%lo]:PORT", kh)
	}
}
