package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// countingListener accepts TCP connections on loopback and closes them,
// counting how many hosts were dialled.
func countingListener(t *testing.T) (addr *net.TCPAddr, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr), accepted
}

// A syntax error is reported once, naming file:line, before any host is
// dialled, and exits 1.
func TestRunSyntaxErrorBeforeDialling(t *testing.T) {
	addr, accepted := countingListener(t)
	dir := t.TempDir()
	inv := filepath.Join(dir, "inv.yaml")
	src := fmt.Sprintf("all:\n  vars: {ansible_host: 127.0.0.1, ansible_port: %d}\n  hosts:\n    gpu[01:04]:\n", addr.Port)
	if err := os.WriteFile(inv, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.lua")
	good := filepath.Join(dir, "good.lua")
	for p, s := range map[string]string{
		broken: "-- frees nothing\nlocal h = gpu.holders()\nfor _, x in ipairs(h) do\n  log.info(x.comm))\nend\n",
		good:   "return 1\n",
	} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := gpush(t, "run", broken, "-i", inv, "--known-hosts", filepath.Join(dir, "known_hosts"))
	if code != 1 || stdout != "" || stderr != "gpush: run: broken.lua:4: syntax error near ')'\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and one line naming broken.lua:4", code, stdout, stderr)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d hosts dialled for a script that does not compile", n)
	}
	// The same inventory is dialled by a script that compiles (and is
	// unreachable: the listener hangs up), so the count above can fail.
	code, _, stderr = gpush(t, "run", good, "-i", inv, "--known-hosts", filepath.Join(dir, "known_hosts"), "--timeout", "30s")
	if code != 4 || accepted.Load() != 4 {
		t.Errorf("good script: exit %d, %d dials, stderr %q; want 4 and 4 dials", code, accepted.Load(), stderr)
	}
	if strings.Contains(stderr, "syntax") {
		t.Errorf("good script: stderr %q", stderr)
	}
}
