package remote

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// A transport is how one connection kind reaches a host: how to start an
// argument vector there with stdin/stdout/stderr pipes, and how to place a
// file there. Everything else (the helper's content and path checks, the
// serve session, cancellation) is written once above it: the serve client
// (serve.go) speaks over any Stream, and the command connection (cmdconn.go)
// places and checks the helper through any Transport.
//
// Transports are in a registry keyed by the connection name, as Ansible's
// ansible_connection spells it (inventory maps the plugin names onto
// these): "ssh" and "local" are the two built in ones with connections of
// their own; "podman", "docker", "kubectl", "slurm" and "gpush_command" are
// command transports, which run a local program (podman exec -i, kubectl
// exec -i, srun, a site's command) that carries the pipes to the target.

// Transport starts argument vectors on one target and places files there.
type Transport interface {
	// Start starts argv on the target, with pipes. argv is never joined
	// into a shell string here, unless the transport's far end is a shell
	// (then every element is quoted).
	Start(ctx context.Context, argv []string) (Stream, error)
	// Put copies the local file to remotePath on the target, creating or
	// replacing it; its mode there is set by the caller.
	Put(ctx context.Context, local, remotePath string) error
}

// Opener opens the connection of one connection kind to a host.
type Opener func(ctx context.Context, h Host, o Options) (Conn, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register adds (or replaces) the connection kind name.
func Register(name string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry[name] = open
}

// RegisterCommand adds the command transport name: newT makes the
// transport of one host (its Address set: Name when it had none), and the
// connection is a command connection over it (the helper placed and
// checked through it, one serve session).
func RegisterCommand(name string, newT func(Host) (Transport, error)) {
	Register(name, func(ctx context.Context, h Host, o Options) (Conn, error) {
		h = h.addressed()
		t, err := newT(h)
		if err != nil {
			return nil, &DialError{Host: h.Name, Addr: h.Address, Stage: StageConfig, Err: err}
		}
		return newCmdConn(h, t, o), nil
	})
}

// Connections lists the registered connection names, sorted.
func Connections() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func opener(name string) (Opener, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	o, ok := registry[name]
	return o, ok
}

func init() {
	Register("ssh", func(ctx context.Context, h Host, o Options) (Conn, error) {
		c, err := dialSSH(ctx, h, o)
		if err != nil {
			return nil, err // never a typed nil *sshConn inside the interface
		}
		return c, nil
	})
	Register("local", func(ctx context.Context, h Host, o Options) (Conn, error) {
		return newLocal(h, o), nil
	})
	RegisterCommand("podman", func(t Host) (Transport, error) {
		return newContainerTransport("podman", "ansible_podman_executable", t)
	})
	RegisterCommand("docker", func(t Host) (Transport, error) {
		return newContainerTransport("docker", "ansible_docker_executable", t)
	})
	RegisterCommand("kubectl", newKubectlTransport)
	RegisterCommand("gpush_command", newCommandTransport)
	RegisterCommand("slurm", newSlurmTransport)
}

// execStream is a local process started with pipes (os.Pipe: reads and
// Wait do not race, as they would with exec.Cmd's StdoutPipe).
type execStream struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	stderr *os.File

	done   chan struct{} // closed when the process was reaped
	status int
	signal string
	once   sync.Once
}

// startExec starts argv on this machine with pipes. ctx bounds only the
// start: the process lives until Close (as a session does).
func startExec(ctx context.Context, argv []string) (*execStream, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	// A process group of its own: the terminal's Ctrl-C reaches gpush,
	// which cancels the helper's calls (and reads their answers), not the
	// carrier (podman exec, kubectl exec) under them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, err
	}
	s := &execStream{cmd: cmd, stdin: inW, stdout: outR, stderr: errR, done: make(chan struct{}), status: -1}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			s.status = 0
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				s.signal = signalName(ws.Signal())
			} else {
				s.status = ee.ExitCode()
			}
		}
		close(s.done)
	}()
	return s, nil
}

func (s *execStream) Read(p []byte) (int, error)  { return s.stdout.Read(p) }
func (s *execStream) Write(p []byte) (int, error) { return s.stdin.Write(p) }
func (s *execStream) Stderr() io.Reader           { return s.stderr }
func (s *execStream) CloseWrite() error           { return s.stdin.Close() }

// Close ends stdin, then TERMs the process if it has not ended a moment
// later, and KILLs it 3s after that (as the local connection's commands).
// It signals only its own process, through its os.Process.
func (s *execStream) Close() error {
	s.once.Do(func() {
		s.stdin.Close()
		go func() {
			defer s.stdout.Close()
			defer s.stderr.Close()
			for _, step := range []struct {
				wait time.Duration
				sig  syscall.Signal
			}{{500 * time.Millisecond, syscall.SIGTERM}, {3 * time.Second, syscall.SIGKILL}} {
				t := time.NewTimer(step.wait)
				select {
				case <-s.done:
					t.Stop()
					return
				case <-t.C:
				}
				s.cmd.Process.Signal(step.sig)
			}
			<-s.done
		}()
	})
	return nil
}

func (s *execStream) Exit(wait time.Duration) (int, string, bool) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.done:
		return s.status, s.signal, true
	case <-t.C:
		return -1, "", false
	}
}

// signalName is a signal's name without SIG ("KILL"), as sshd sends it.
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig))
}

// signalNumber is signalName's inverse (0 for an unknown name).
func signalNumber(name string) int { return int(unix.SignalNum("SIG" + name)) }

// localTransport starts argvs on this machine and copies files here.
type localTransport struct{}

func (localTransport) Start(ctx context.Context, argv []string) (Stream, error) {
	return startExec(ctx, argv)
}

func (localTransport) Put(ctx context.Context, local, remotePath string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	return putAtomic(ctx, localFS{}, remotePath, f, 0o600)
}

// Start runs argv on the SSH host (every element quoted for its shell) on
// a session channel of its own: SSH as a Transport.
func (c *sshConn) Start(ctx context.Context, argv []string) (Stream, error) {
	sc, err := c.newChannelFor(ctx, "start "+argv[0])
	if err != nil {
		return nil, err
	}
	st := &sshStream{ch: sc.ch, exitStatus: -1}
	st.reqs = &unaskedWatch{reqs: sc.reqs, onReq: st.onRequest}
	pollUnasked(st.reqs)
	ok, err := sc.ch.SendRequest("exec", true, ssh.Marshal(&struct{ Command string }{ShellJoin(argv)}))
	if err == nil && !ok {
		err = errors.New("sshd refused to run the command")
	}
	if err != nil {
		sc.ch.Close()
		return nil, c.lost("start "+argv[0], err)
	}
	return st, nil
}

// PutFile copies a local file to remotePath over SFTP (atomic).
func (c *sshConn) PutFile(ctx context.Context, local, remotePath string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	return c.Put(ctx, remotePath, f, 0o600)
}

var (
	_ Stream    = (*execStream)(nil)
	_ Transport = localTransport{}
	_ Transport = sshTransport{}
)

// sshTransport is an SSH connection as a Transport (its Put is PutFile:
// the Conn's Put takes a reader).
type sshTransport struct{ *sshConn }

func (t sshTransport) Put(ctx context.Context, local, remotePath string) error {
	return t.PutFile(ctx, local, remotePath)
}
