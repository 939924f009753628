package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpush/gpush/lab"
)

// cutProxy forwards loopback TCP to target and cuts each connection (a RST)
// once more than after bytes went upstream: a link that dies mid-upload.
// It runs until the test ends.
func cutProxy(t *testing.T, target string, after int64) (port int, cuts *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cuts = new(atomic.Int32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	serve := func(c net.Conn) {
		defer c.Close()
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		track(up)
		defer up.Close()
		wg.Add(1)
		go func() { defer wg.Done(); io.Copy(c, up); c.Close() }()
		var sent int64
		buf := make([]byte, 16<<10)
		for {
			n, err := c.Read(buf)
			if sent += int64(n); sent > after {
				cuts.Add(1)
				c.(*net.TCPConn).SetLinger(0)
				up.(*net.TCPConn).SetLinger(0)
				return
			}
			if n > 0 {
				if _, err := up.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() { defer wg.Done(); serve(c) }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, cuts
}

// A connection lost while the helper goes up is "unreachable" (exit 4) for
// that host, like a drop anywhere else; the other host's result stands.
func TestConnectionLostDuringUploadIsUnreachable(t *testing.T) {
	l := startLab(t, lab.Options{Hosts: 2})
	port, cuts := cutProxy(t, l.SSHD.Addr, 512<<10)

	// lab02 goes through the proxy, into a helper folder of its own so that
	// it must upload whatever lab01 did.
	b, err := os.ReadFile(l.Inventory)
	if err != nil {
		t.Fatal(err)
	}
	var inv map[string]any
	if err := yaml.Unmarshal(b, &inv); err != nil {
		t.Fatal(err)
	}
	hosts := inv["all"].(map[string]any)["children"].(map[string]any)["lab"].(map[string]any)["hosts"].(map[string]any)
	lab02 := hosts["lab02"].(map[string]any)
	lab02["ansible_port"] = port
	lab02["gpush_remote_dir"] = filepath.Join(l.Dir, "remote-lab02")
	if b, err = yaml.Marshal(inv); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.Inventory, b, 0o644); err != nil {
		t.Fatal(err)
	}
	kh := l.SSHD.KnownHostsLine() + "\n" + l.SSHD.KnownHostsLine(fmt.Sprintf("127.0.0.1:%d", port)) + "\n"
	if err := os.WriteFile(l.KnownHosts, []byte(kh), 0o644); err != nil {
		t.Fatal(err)
	}

	r := gpush(t, l, "run", "gpu_status.lua", "--limit", "lab", "--json")
	if cuts.Load() == 0 {
		t.Fatal("the proxy never cut the connection: lab02 uploaded nothing?")
	}
	if r.code != 4 {
		t.Errorf("exit %d, want 4 (a host unreachable)", r.code)
	}
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var o map[string]any
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("--json line %q: %v", sc.Text(), err)
		}
		got[fmt.Sprint(o["host"])] = o
	}
	if s := got["lab01"]["status"]; s != "ok" {
		t.Errorf("lab01: status %v, want ok: %v", s, got["lab01"])
	}
	if s := got["lab02"]["status"]; s != "unreachable" {
		t.Errorf("lab02: status %v, want unreachable: %v", s, got["lab02"])
	}
	requireContains(t, fmt.Sprint(got["lab02"]["error"]), "upload helper", "connection lost")
}
