package remote

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/sshd"
	"github.com/gpush/gpush/remote/helperbin"
)

// logBuf collects a test's log lines, shown only when the test fails (a
// background goroutine must not t.Log after the test ended).
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t testing.TB) (*slog.Logger, *logBuf) {
	lb := &logBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gpush log:\n%s", lb.String())
		}
	})
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// env is one test's sshd, known_hosts and dial options.
type env struct {
	srv  *sshd.Server
	kh   string
	opts Options
	host Host
	dir  string // the helper's remote dir (same machine: loopback)
	logs *logBuf
	tdir string
}

func newEnv(t testing.TB, so sshd.Options) *env {
	t.Helper()
	return envFor(t, sshd.StartT(t, so))
}

// envFor sets up known_hosts and dial options for srv.
func envFor(t testing.TB, srv *sshd.Server) *env {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sshd log:\n%s", srv.Logs())
		}
	})
	tdir := t.TempDir()
	kh := filepath.Join(tdir, "known_hosts")
	if err := srv.WriteKnownHosts(kh); err != nil {
		t.Fatal(err)
	}
	log, lb := testLogger(t)
	e := &env{srv: srv, kh: kh, logs: lb, tdir: tdir, dir: filepath.Join(tdir, "helper")}
	e.opts = Options{
		KnownHostsFile: kh,
		ConnectTimeout: 10 * time.Second,
		AgentSocket:    "none",
		DefaultKeys:    []string{},
		HelperSource:   helperbin.Source,
		Logger:         log,
	}
	e.host = Host{
		Name: "h1", Address: srv.Host, Port: srv.Port, User: "root",
		IdentityFiles: []string{srv.ClientKeyPath}, Connection: "ssh",
		Vars: map[string]any{VarRemoteDir: e.dir},
	}
	return e
}

func (e *env) dial(t *testing.T) *sshConn {
	t.Helper()
	c, err := Dial(context.Background(), e.host, e.opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*sshConn)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (sshd switches users; CI runs as root)")
	}
}

func dialErr(t *testing.T, err error) *DialError {
	t.Helper()
	var de *DialError
	if !errors.As(err, &de) {
		t.Fatalf("want a *DialError, got %T: %v", err, err)
	}
	if !IsUnreachable(err) {
		t.Fatalf("IsUnreachable(%v) = false", err)
	}
	return de
}

func mustContain(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%q does not contain %q", s, sub)
		}
	}
}
