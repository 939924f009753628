package labbuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// isGoBinary reports whether path carries Go build info.
func isGoBinary(t *testing.T, path string) bool {
	t.Helper()
	out, err := exec.Command("go", "version", path).CombinedOutput()
	return err == nil && !strings.Contains(string(out), "not a Go executable")
}

// TestHolder builds the lab's holder: C where cc is there, Go otherwise or
// when asked; an unknown kind is refused.
func TestTestHolderPicksTheLabsBuild(t *testing.T) {
	dir := t.TempDir()
	_, ccErr := exec.LookPath("cc")
	t.Setenv(HolderEnv, "")
	kind, err := TestHolder(context.Background(), filepath.Join(dir, "auto", "gpu-holder"))
	if err != nil {
		t.Fatal(err)
	}
	want := KindC
	if ccErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI has no C compiler")
		}
		want = KindGo
	}
	if kind != want || isGoBinary(t, filepath.Join(dir, "auto", "gpu-holder")) != (want == KindGo) {
		t.Errorf("built %s, want %s", kind, want)
	}
	t.Setenv(HolderEnv, KindGo)
	if kind, err := TestHolder(context.Background(), filepath.Join(dir, "go", "gpu-holder")); err != nil || kind != KindGo || !isGoBinary(t, filepath.Join(dir, "go", "gpu-holder")) {
		t.Errorf("%s=go: %s, %v", HolderEnv, kind, err)
	}
	t.Setenv(HolderEnv, "rust")
	if _, err := TestHolder(context.Background(), filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), `"rust"`) {
		t.Errorf("%s=rust: %v", HolderEnv, err)
	}
}
