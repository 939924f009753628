package podmanlab

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A held file, its path quoted for the shell, is open in the container's
// first process at fd 3, at the host's path; a removed container is gone.
func TestHoldAndRemove(t *testing.T) {
	l := New(t)
	dir := filepath.Join(t.TempDir(), "it's here")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "nvidia0")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := l.Run("gpush-lab-hold", Options{Binds: []string{dir}, Hold: []string{f}})
	if len(c.ID) != 64 {
		t.Fatalf("id %q", c.ID)
	}
	pid := c.WaitReady(0, 10*time.Second)
	if got, err := os.Readlink(filepath.Join("/proc", itoa(pid), "fd/3")); err != nil || got != f {
		t.Fatalf("fd 3 of %d: %q %v", pid, got, err)
	}
	c.Remove()
	if st, ok := c.State(); ok {
		t.Fatalf("removed container still there: %+v", st)
	}
}

func itoa(n int) string { return fmt.Sprint(n) }
