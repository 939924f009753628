package lab

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The lab's gpu-holder comes in two builds with the same flags and
// behaviour: the C one (lab/cmd/gpu-holder/c), a few pages per process,
// which a lab of 1000 hosts (~8,000 holders) needs to fit in memory, and
// the Go one, ~0.7-1.2 MiB PSS per process, when no C compiler is there.
const (
	HolderC  = "c"
	HolderGo = "go"
)

// The C source travels inside the lab package, so that a gpush-lab or
// bench binary builds it anywhere, without the module's source.
//
//go:embed cmd/gpu-holder/c/gpu-holder.c
var holderCSource []byte

// buildHolder fills b.Holder (and b.HolderKind, b.HolderNote) when empty:
// the C holder when b.HolderKind allows it and cc builds it, else the Go
// one. Asked for C, a failure to build it is an error.
func buildHolder(ctx context.Context, binDir string, b *Binaries) error {
	if b.Holder != "" {
		if b.HolderKind == "" {
			b.HolderKind = "given"
		}
		b.HolderNote = "given: " + b.Holder
		return nil
	}
	switch b.HolderKind {
	case "", HolderC, HolderGo:
	default:
		return fmt.Errorf("lab: holder kind %q: want %s, %s or empty (C when a C compiler is there)", b.HolderKind, HolderC, HolderGo)
	}
	if b.HolderKind != HolderGo {
		out := filepath.Join(binDir, "gpu-holder")
		err := BuildHolderC(ctx, out)
		if err == nil {
			b.Holder, b.HolderKind, b.HolderNote = out, HolderC, "C, built with cc -static"
			return nil
		}
		if b.HolderKind == HolderC {
			return err
		}
		b.HolderNote = fmt.Sprintf("Go (~1 MiB per process; no C build: %v)", err)
	} else {
		b.HolderNote = "Go, as asked"
	}
	out := filepath.Join(binDir, "gpu-holder-go")
	if err := GoBuild(ctx, out, "github.com/gpush/gpush/lab/cmd/gpu-holder"); err != nil {
		return err
	}
	b.Holder, b.HolderKind = out, HolderGo
	return nil
}

// ErrNoCC says that there is no C compiler to build the C holder with.
var ErrNoCC = errors.New("no C compiler (cc) in PATH (Debian: apt-get install gcc libc6-dev)")

// BuildHolderC compiles the C gpu-holder to out: static, so that it runs
// the same under any lab host's view and maps no shared libraries.
func BuildHolderC(ctx context.Context, out string) error {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return ErrNoCC
	}
	src := out + ".c"
	if err := os.WriteFile(src, holderCSource, 0o644); err != nil {
		return fmt.Errorf("build C gpu-holder: %w", err)
	}
	defer os.Remove(src)
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, cc, "-static", "-O2", "-Wall", "-Werror", "-pthread", "-o", tmp, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build C gpu-holder: %s -static %s: %w\n%s", cc, src, err, b)
	}
	// Renamed into place: a holder already linked under bin/as keeps its inode.
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("build C gpu-holder: %w", err)
	}
	return nil
}
