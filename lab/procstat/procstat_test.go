package procstat

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// A comm with spaces and parentheses: the fields start after the last ')'.
	const line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 987654 123 456 789\n"
	st, err := Parse([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stat{Comm: "a (b) c", State: 'S', PPID: 17, StartTime: 987654}); st != want {
		t.Errorf("Parse = %+v, want %+v", st, want)
	}
	if st.Exited() {
		t.Error("S reads as exited")
	}
	for _, s := range []byte{'Z', 'X'} {
		if !(Stat{State: s}).Exited() {
			t.Errorf("%c does not read as exited", s)
		}
	}
	for _, bad := range []string{
		"",
		"1 (x S 1",      // no ')'
		"1 (x) S 1 1 1", // short
		"1 (x) SS 1" + strings.Repeat(" 0", 20),
		"1 (x) S p" + strings.Repeat(" 0", 20),
		"1 (x) S 1" + strings.Repeat(" 0", 17) + " t",
	} {
		if st, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", bad, st)
		}
	}
}

func TestReadSelfAndChild(t *testing.T) {
	st, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getppid() || st.State == 'Z' || st.StartTime == 0 || st.Comm == "" {
		t.Errorf("own stat %+v (ppid want %d)", st, os.Getppid())
	}
	// A child that has exited but is not reaped: a zombie.
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c, err := Read(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if c.PPID != os.Getpid() {
			t.Fatalf("child %+v: ppid want %d", c, os.Getpid())
		}
		if c.Exited() {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("child still %c after it exited", c.State)
		}
	}
}

func TestReadIn(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "7"), 0o755)
	os.WriteFile(filepath.Join(dir, "7", "stat"), []byte("7 (w) Z 1"+strings.Repeat(" 5", 18)+"\n"), 0o644)
	st, err := ReadIn(dir, 7)
	if err != nil || !st.Exited() || st.PPID != 1 || st.StartTime != 5 || st.Comm != "w" {
		t.Errorf("ReadIn = %+v, %v", st, err)
	}
	_, err = ReadIn(dir, 8)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "8", "stat")) {
		t.Errorf("missing pid: %v, want ErrNotExist naming the file", err)
	}
	os.MkdirAll(filepath.Join(dir, "9"), 0o755)
	os.WriteFile(filepath.Join(dir, "9", "stat"), []byte("9 (w) S"), 0o644)
	if _, err := ReadIn(dir, 9); !errors.Is(err, ErrShort) {
		t.Errorf("short stat: %v, want ErrShort", err)
	}
	if n := testing.AllocsPerRun(100, func() { ReadIn(dir, 7) }); n > 3 {
		t.Errorf("ReadIn allocates %v times, want at most 3 (the path, the comm)", n)
	}
}
