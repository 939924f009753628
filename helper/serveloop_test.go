package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loop is a real `gpush-helper serve` process on pipes.
type loop struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	hello ServeHello
	done  chan error
}

func startLoop(t *testing.T, argv ...string) *loop {
	t.Helper()
	if len(argv) == 0 {
		argv = []string{buildHelper(t), VerbServe, "tok-123"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A pipe of our own, not StdoutPipe: Wait, running from the start,
	// closes StdoutPipe's read end once the helper exits, and a helper that
	// wrote its fatal line and exited would lose it to the reader.
	outp, outw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = outw
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	outw.Close()
	if err != nil {
		outp.Close()
		t.Fatal(err)
	}
	l := &loop{t: t, cmd: cmd, in: in, out: bufio.NewReader(outp), done: make(chan error, 1)}
	t.Cleanup(func() {
		defer outp.Close()
		in.Close()
		select {
		case <-l.done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its own group only
			<-l.done
		}
	})
	go func() { l.done <- cmd.Wait() }()
	return l
}

// readHello skips lines up to the hello, as the controller does.
func (l *loop) readHello() {
	l.t.Helper()
	for {
		line := l.line()
		if json.Unmarshal([]byte(line), &l.hello) == nil && l.hello.Serve == ServeProtocol {
			return
		}
	}
}

func (l *loop) line() string {
	l.t.Helper()
	s, err := l.out.ReadString('\n')
	if err != nil {
		l.t.Fatalf("read from serve: %v (got %q)", err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

func (l *loop) send(s string) {
	l.t.Helper()
	if _, err := io.WriteString(l.in, s+"\n"); err != nil {
		l.t.Fatal(err)
	}
}

func (l *loop) reply() ServeReply {
	l.t.Helper()
	line := l.line()
	var r ServeReply
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		l.t.Fatalf("reply %q: %v", line, err)
	}
	return r
}

// exit waits for the process and returns its exit status.
func (l *loop) exit() int {
	l.t.Helper()
	select {
	case err := <-l.done:
		l.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			l.t.Fatal(err)
		}
		return 0
	case <-time.After(20 * time.Second):
		l.t.Fatal("serve did not exit")
	}
	return -1
}

func TestServeLoopAnswersEachRequest(t *testing.T) {
	h := newHost(t, 1)
	p := h.start("", "--dev", h.d("nvidia0"), "--mem-mib", "42")
	l := startLoop(t)
	l.readHello()
	if l.hello.Token != "tok-123" || l.hello.Version != Version || l.hello.PID != l.cmd.Process.Pid {
		t.Fatalf("hello %+v", l.hello)
	}
	req, _ := json.Marshal(SnapshotRequest{Config: h.cfg})
	l.send(`{"id":7,"verb":"snapshot","req":` + string(req) + `}`)
	l.send(`{"id":8,"verb":"frobnicate","req":{}}`)
	l.send(`{"id":9,"verb":"snapshot","req":{"dev_dri":"/x"}}`)
	l.send(`{"id":10,"verb":"snapshot"}`) // no req: the zero request, as empty stdin
	got := map[uint64]ServeReply{}
	for range 4 {
		r := l.reply()
		got[r.ID] = r
	}
	var s Snapshot
	if r := got[7]; r.Failed || json.Unmarshal(r.Resp, &s) != nil || findHolder(&s, p.pid) == nil || findHolder(&s, p.pid).MemMiB != 42 {
		t.Errorf("snapshot reply %+v", r)
	}
	for id, want := range map[uint64]string{8: "unknown verb", 9: `unknown field "dev_dri"`} {
		var er ErrorResponse
		if r := got[id]; !r.Failed || json.Unmarshal(r.Resp, &er) != nil || !strings.Contains(er.Error, want) {
			t.Errorf("request %d: want a failed reply with %q, got %s", id, want, r.Resp)
		}
	}
	if r := got[10]; r.Failed {
		t.Errorf("zero request failed: %s", r.Resp)
	}
	l.in.Close()
	if code := l.exit(); code != 0 {
		t.Fatalf("exit %d after stdin EOF, want 0", code)
	}
}

func TestServeLoopOutOfStepIsFatal(t *testing.T) {
	for _, line := range []string{"hello there", `{"verb":"snapshot"}`, `[1,2]`} {
		l := startLoop(t)
		l.readHello()
		l.send(line)
		var f ServeFatal
		if s := l.line(); json.Unmarshal([]byte(s), &f) != nil || f.Fatal == "" {
			t.Errorf("%q: want a fatal line, got %q", line, s)
		}
		if code := l.exit(); code != 2 {
			t.Errorf("%q: exit %d, want 2", line, code)
		}
	}
}

// slowSMI is an nvidia-smi that records its pid and hangs.
func slowSMI(t *testing.T) (smi, pids string) {
	dir := t.TempDir()
	smi, pids = filepath.Join(dir, "nvidia-smi"), filepath.Join(dir, "pids")
	script := "#!/bin/sh\necho $$ >>" + pids + "\nexec sleep 600\n"
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return smi, pids
}

// waitPid waits until the file lists a pid and returns it.
func waitPid(t *testing.T, file string) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(file)
		if f := strings.Fields(string(b)); len(f) > 0 {
			pid, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatal("nvidia-smi never started")
	return 0
}

// gone reports whether pid has exited (a zombie counts: its parent reaps it).
func gone(pid int) bool {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			return true
		}
	}
	return false
}

func TestServeLoopCancelStopsTheVerbsChildren(t *testing.T) {
	l, pid := loopInSlowWait(t)
	// A second request runs meanwhile: the loop is not blocked by the first.
	l.send(`{"id":2,"verb":"frobnicate"}`)
	if r := l.reply(); r.ID != 2 || !r.Failed {
		t.Fatalf("want request 2's error first, got %+v", r)
	}
	l.send(`{"id":1,"cancel":true}`)
	if r := l.reply(); r.ID != 1 {
		t.Fatalf("want request 1's reply after its cancel, got %+v", r)
	}
	if !gone(pid) {
		t.Fatalf("nvidia-smi %d still runs after the cancel frame", pid)
	}
	// A cancel for a finished request is no error.
	l.send(`{"id":1,"cancel":true}`)
	l.send(`{"id":3,"verb":"snapshot","req":{"nvidia_smi":"/nonexistent"}}`)
	if r := l.reply(); r.ID != 3 {
		t.Fatalf("loop not answering after a late cancel: %+v", r)
	}
}

func TestServeLoopEOFCancelsEverything(t *testing.T) {
	l, pid := loopInSlowWait(t)
	l.in.Close()
	if code := l.exit(); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if !gone(pid) {
		t.Fatalf("nvidia-smi %d outlived the serve loop", pid)
	}
}

// The parent (sshd's session) dies while stdin stays open (held by
// another process): the loop notices and ends.
func TestServeLoopEndsWhenItsParentDies(t *testing.T) {
	bin := buildHelper(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// sh starts the loop in the background, prints its pid and exits;
	// the test keeps the loop's stdin open.
	l := startLoop(t, "sh", "-c", `exec 3<&0; "$0" serve tok <&3 & echo $! >"$1"; exec sleep 0.3`, bin, pidFile)
	l.readHello()
	pid := waitPid(t, pidFile)
	if !gone(pid) {
		t.Fatalf("serve loop %d still runs after its parent died", pid)
	}
}

// loopInSlowWait starts a loop and a wait-free (request 1) whose nvidia-smi
// hangs, and returns the loop and that nvidia-smi's pid once it runs.
func loopInSlowWait(t *testing.T) (*loop, int) {
	t.Helper()
	h := newHost(t, 1)
	smi, pids := slowSMI(t)
	cfg := h.cfg
	cfg.NvidiaSMI, cfg.SMITimeout = smi, Duration(5*time.Minute)
	req, _ := json.Marshal(WaitFreeRequest{Config: cfg, Timeout: Duration(5 * time.Minute)})
	l := startLoop(t)
	l.readHello()
	l.send(`{"id":1,"verb":"wait-free","req":` + string(req) + `}`)
	return l, waitPid(t, pids)
}

// A loop whose requests a Handler answers (an in-process model host) frames,
// fails, cancels and ends as the helper's own loop.
func TestServeLoopOnAnswersThroughTheHandler(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	started := make(chan struct{})
	cancelled := make(chan error, 1)
	h := func(ctx context.Context, verb string, body []byte) (any, error) {
		switch verb {
		case "echo":
			return map[string]string{"got": string(body)}, nil
		case "block":
			close(started)
			<-ctx.Done()
			cancelled <- ctx.Err()
			return map[string]bool{"stopped": true}, nil
		}
		return nil, errors.New("no such verb in the model")
	}
	code := make(chan int, 1)
	go func() { code <- ServeLoopOn(context.Background(), "tok-9", inR, outW, h); outW.Close() }()
	br := bufio.NewReader(outR)
	read := func(v any) {
		t.Helper()
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if err := json.Unmarshal(line, v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
	}
	var hello ServeHello
	if read(&hello); hello.Token != "tok-9" || hello.Serve != ServeProtocol {
		t.Fatalf("hello %+v", hello)
	}
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"id":1,"verb":"echo","req":{"a":1}}`)
	send(`{"id":2,"verb":"nope","req":{}}`)
	send(`{"id":3,"verb":"block"}`)
	got := map[uint64]ServeReply{}
	for range 2 {
		var r ServeReply
		read(&r)
		got[r.ID] = r
	}
	if r := got[1]; r.Failed || string(r.Resp) != `{"got":"{\"a\":1}"}` {
		t.Errorf("echo reply %+v (%s)", r, r.Resp)
	}
	var er ErrorResponse
	if r := got[2]; !r.Failed || json.Unmarshal(r.Resp, &er) != nil || er.Error != "no such verb in the model" {
		t.Errorf("failed reply %+v (%s)", r, r.Resp)
	}
	<-started
	send(`{"id":3,"cancel":true}`)
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Errorf("handler ctx ended with %v, want canceled", err)
	}
	var r ServeReply
	if read(&r); r.ID != 3 || string(r.Resp) != `{"stopped":true}` {
		t.Errorf("cancelled request's reply %+v (%s)", r, r.Resp)
	}
	inW.Close()
	if c := <-code; c != 0 {
		t.Errorf("exit %d after stdin EOF, want 0", c)
	}
}
