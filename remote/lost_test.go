package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/gpush/gpush/lab/sshd"
)

// cutter forwards TCP to a target and cuts the connection once more than
// after bytes went upstream (a link that dies mid-upload): a FIN, or a RST
// when reset is set.
type cutter struct {
	after int64
	reset bool
	sent  atomic.Int64
	cuts  atomic.Int32
}

func (k *cutter) proxy(t *testing.T, target string) *net.TCPAddr {
	return listen(t, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			return
		}
		cut := func() {
			if k.reset {
				c.(*net.TCPConn).SetLinger(0)
				up.(*net.TCPConn).SetLinger(0)
			}
			c.Close()
			up.Close()
		}
		go func() {
			io.Copy(c, up)
			c.Close()
		}()
		buf := make([]byte, 16<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if k.sent.Add(int64(n)) > k.after {
					k.cuts.Add(1)
					cut()
					return
				}
				if _, werr := up.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		up.Close()
	})
}

// TestConnectionLostDuringUploadIsUnreachable cuts the link while the
// helper (megabytes) goes up over SFTP: that is a lost connection, like a
// drop anywhere else, not a failed deployment.
func TestConnectionLostDuringUploadIsUnreachable(t *testing.T) {
	requireRoot(t)
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			e := newEnv(t, sshd.Options{})
			// Past the handshake, login and probe, well before the end of
			// the helper upload.
			k := &cutter{after: 512 << 10, reset: reset}
			paddr := k.proxy(t, e.srv.Addr)
			os.WriteFile(e.kh, []byte(e.srv.KnownHostsLine(fmt.Sprintf("127.0.0.1:%d", paddr.Port))+"\n"), 0o600)
			e.host.Port = paddr.Port
			c := e.dial(t)
			var resp map[string]any
			err := c.Helper(context.Background(), "version", nil, &resp)
			if k.cuts.Load() == 0 {
				t.Fatalf("the proxy never cut (helper call: %v)", err)
			}
			if !errors.Is(err, ErrConnectionLost) || !IsUnreachable(err) {
				t.Fatalf("want a lost connection, got %v", err)
			}
			mustContain(t, err.Error(), "h1", "upload helper")
			if c.uploads.Load() != 0 {
				t.Errorf("an upload counted as done")
			}
		})
	}
}
