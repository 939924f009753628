package labns

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpush/gpush/lab/labbuild"
)

// Two views: a process started in one is in that view only, under a pid
// of the view's, and MachinePID finds it again; a program run in a view
// reads the view's /proc and its binds; Stop ends what runs there.
func TestViews(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: namespaces need root")
	}
	ctx := context.Background()
	dir := t.TempDir()
	initBin := filepath.Join(dir, "lab-init")
	if err := labbuild.Go(ctx, initBin, "github.com/gpush/gpush/lab/cmd/lab-init"); err != nil {
		t.Fatal(err)
	}
	var views []*View
	for range 2 {
		v, err := Start(ctx, initBin, Options{KillWithParent: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(v.Stop)
		views = append(views, v)
	}
	a, b := views[0], views[1]
	if a.NSID == b.NSID || HostPID(a.PID) != 1 {
		t.Fatalf("views %s and %s, init %d is pid %d in its own", a.NSID, b.NSID, a.PID, HostPID(a.PID))
	}
	sleep := exec.Command("sleep", "300")
	if err := a.StartIn(sleep); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sleep.Wait(); close(done) }()
	pid := sleep.Process.Pid
	if !a.Holds(pid) || b.Holds(pid) {
		t.Errorf("sleep %d: in a %v, in b %v; want a only", pid, a.Holds(pid), b.Holds(pid))
	}
	inA := HostPID(pid)
	if got, err := a.MachinePID(inA); err != nil || got != pid {
		t.Errorf("a's pid %d: machine pid %d (%v), want %d", inA, got, err, pid)
	}

	// What a's /proc lists: its init and the sleep; b's lists neither.
	src, target := filepath.Join(dir, "src"), filepath.Join(dir, "target")
	for _, d := range []string{src, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("a's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Bind(ctx, src, target); err != nil {
		t.Fatal(err)
	}
	list := `cat "$1/f" 2>/dev/null; echo; for p in /proc/[0-9]*; do echo "${p#/proc/} $(cat "$p/comm")"; done`
	for _, v := range views {
		out, err := v.Command(ctx, dir, "sh", "-c", list, "sh", target).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("listing a view: %v: %s", err, ee.Stderr)
			}
			t.Fatal(err)
		}
		lines := strings.Split(string(out), "\n")
		wantFile, wantSleep := "", false
		if v == a {
			wantFile, wantSleep = "a's", true
		}
		if lines[0] != wantFile {
			t.Errorf("view %s reads %q at %s, want %q", v.NSID, lines[0], target, wantFile)
		}
		if !strings.Contains(string(out), "\n1 lab-init\n") || strings.Contains(string(out), "\n"+strconv.Itoa(inA)+" sleep\n") != wantSleep {
			t.Errorf("view %s lists:\n%s\nwant its init, and a's sleep (%d) %v", v.NSID, out, inA, wantSleep)
		}
	}
	a.Stop()
	<-done
	if _, err := os.Stat(filepath.Join(target, "f")); err == nil {
		t.Error("a's bind shows on the machine")
	}
}
