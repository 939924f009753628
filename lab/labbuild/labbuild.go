// Package labbuild builds the lab's programs, for the lab and for the tests
// that run them: the static C builds (cc) of the programs every lab host
// runs many of, and `go build` of the others. It imports nothing of the
// lab, so that the tests of any package (labgpu's, the helper's) can run
// the holder build the lab runs.
package labbuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Holder builds, as Kind says.
const (
	KindC  = "c"
	KindGo = "go"
)

// HolderPkg is the Go gpu-holder; its C build is c/gpu-holder.c beside it.
const HolderPkg = "github.com/gpush/gpush/lab/cmd/gpu-holder"

// HolderEnv picks the holder build TestHolder makes: c, go, or empty for C
// where a C compiler is there.
const HolderEnv = "GPUSH_TEST_HOLDER"

// ErrNoCC says that there is no C compiler to build the C programs with.
var ErrNoCC = errors.New("no C compiler (cc) in PATH (Debian: apt-get install gcc libc6-dev)")

// C compiles src to out: static, so that it runs the same under any lab
// host's view and maps no shared libraries (whose pages each process would
// touch on its own). name is the program's, for errors.
func C(ctx context.Context, out, name string, src []byte) error {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return fmt.Errorf("build C %s: %w", name, ErrNoCC)
	}
	srcPath := out + ".c"
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		return fmt.Errorf("build C %s: %w", name, err)
	}
	defer os.Remove(srcPath)
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, cc, "-static", "-O2", "-Wall", "-Werror", "-pthread", "-o", tmp, srcPath)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build C %s: %s -static %s: %w\n%s", name, cc, srcPath, err, b)
	}
	// Renamed into place: a binary already linked elsewhere keeps its inode.
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("build C %s: %w", name, err)
	}
	return nil
}

// Go runs `go build -o out pkg` (CGO off: the lab binaries are static).
func Go(ctx context.Context, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// TestHolder builds to out the gpu-holder that tests of code handling
// holders run: the C build where cc is there (what the lab runs then),
// else the Go one, unless $GPUSH_TEST_HOLDER names one. In CI (CI=true),
// which installs gcc, a missing compiler is an error. It returns the kind
// it built. The holder's own tests run both builds.
func TestHolder(ctx context.Context, out string) (string, error) {
	kind := os.Getenv(HolderEnv)
	switch kind {
	case "", KindC, KindGo:
	default:
		return "", fmt.Errorf("$%s=%q: want %s, %s or empty", HolderEnv, kind, KindC, KindGo)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	if kind != KindGo {
		err := buildHolderC(ctx, out)
		if err == nil {
			return KindC, nil
		}
		if kind == KindC || !errors.Is(err, ErrNoCC) || os.Getenv("CI") == "true" {
			return "", err
		}
	}
	return KindGo, Go(ctx, out, HolderPkg)
}

// buildHolderC compiles the C holder from the module's source.
func buildHolderC(ctx context.Context, out string) error {
	if _, err := exec.LookPath("cc"); err != nil {
		return fmt.Errorf("build C gpu-holder: %w", ErrNoCC)
	}
	dir, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", HolderPkg).Output()
	if err != nil {
		return fmt.Errorf("find the source of %s: %w", HolderPkg, err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "c", "gpu-holder.c"))
	if err != nil {
		return fmt.Errorf("build C gpu-holder: %w", err)
	}
	return C(ctx, out, "gpu-holder", src)
}
