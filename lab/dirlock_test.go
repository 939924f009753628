package lab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpush/gpush/lab/procstat"
)

// lockHolderEnv makes the test binary a lab that takes the folder named
// by it and dies as a KILLed server does: its leader thread ends first
// (what lab.Alive and the CLI see: a zombie), its other threads, which
// share its files and so its lock, lockHolderLinger later. On a loaded
// machine a KILLed Go server's threads leave in that order, for a
// scheduler's while; here for as long as the test wants.
const (
	lockHolderEnv    = "GPUSH_TEST_LAB_LOCK_HOLDER"
	lockHolderLinger = 2 * time.Second
)

// init runs on the main thread (the leader), where runtime.main locks it.
func init() {
	dir := os.Getenv(lockHolderEnv)
	if dir == "" {
		return
	}
	runtime.LockOSThread()
	f, err := lockDir(dir)
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	fmt.Println("locked")
	go func() {
		time.Sleep(lockHolderLinger)
		runtime.KeepAlive(f)
		os.Exit(0)
	}()
	// exit(2), not exit_group(2): the leader alone ends.
	syscall.Syscall(syscall.SYS_EXIT, 0, 0, 0)
}

// startLockHolder starts a lab that holds dir's lock and waits until its
// leader reads as a zombie while its lock is still held.
func startLockHolder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("lock holder: %q", line)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st, err := procstat.Read(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.Exited() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock holder's leader still %c", st.State)
		}
	}
	return cmd
}

// TestLockEndsWithItsLab: right after a lab's server reads as dead, the
// folder's lock is the next lab's, not "in use by a running lab (pid N)"
// (TestUpTwiceOnOneDir failed so on a loaded machine).
func TestLockEndsWithItsLab(t *testing.T) {
	for i := range 3 {
		dir := t.TempDir()
		cmd := startLockHolder(t, dir)
		if pid, _, live := lockHolder(dir); pid != cmd.Process.Pid || live {
			t.Fatalf("the lock names pid %d (live %v), want the exited %d", pid, live, cmd.Process.Pid)
		}
		// The premise: the dead lab's threads still hold the lock.
		if f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR, 0); err == nil {
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
				t.Logf("round %d: the lock was free already", i)
			}
			f.Close()
		}
		start := time.Now()
		var err error
		if i%2 == 0 {
			err = Busy(dir)
		} else {
			var f *os.File
			if f, err = lockDir(dir); err == nil {
				if pid, _, live := lockHolder(dir); pid != os.Getpid() || !live {
					t.Errorf("the lock taken over names pid %d (live %v), want %d", pid, live, os.Getpid())
				}
				unlockDir(f)
			}
		}
		if err != nil {
			t.Fatalf("round %d: the folder of a lab whose server is dead: %v", i, err)
		}
		if d := time.Since(start); d > lockHolderLinger+5*time.Second {
			t.Errorf("round %d: took %s", i, d)
		}
	}
}

// TestLockOfALiveLab: a live holder is named at once, and a lock held by
// no live lab for longer than lockWait reads as held, naming nobody.
func TestLockOfALiveLab(t *testing.T) {
	dir := t.TempDir()
	f, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var busy *BusyError
	if err := Busy(dir); !errors.As(err, &busy) || !busy.Running || busy.PID != os.Getpid() || time.Since(start) > 2*time.Second {
		t.Errorf("Busy on a live lab's folder: %v after %s, want it named at once", err, time.Since(start))
	}
	// A holder that records nothing (a check, a lab before its pid).
	if err := os.WriteFile(filepath.Join(dir, LockName), []byte("1 18446744073709551615\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, _, live := lockHolder(dir); pid != 1 || live {
		t.Errorf("lock naming pid 1 started at another time: pid %d live %v, want not live", pid, live)
	}
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = time.Second
	start = time.Now()
	err = Busy(dir)
	if !errors.As(err, &busy) || !busy.Running || busy.PID != 0 || strings.Contains(err.Error(), "(pid") {
		t.Errorf("Busy on a lock held by no live lab: %v, want held, naming nobody", err)
	}
	if d := time.Since(start); d < lockWait || d > lockWait+5*time.Second {
		t.Errorf("Busy waited %s, want lockWait (%s)", d, lockWait)
	}
	unlockDir(f)
	if err := Busy(dir); err != nil {
		t.Errorf("Busy after unlock: %v", err)
	}
}
