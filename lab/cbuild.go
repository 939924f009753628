package lab

import (
	"context"
	_ "embed"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpush/gpush/lab/labbuild"
)

// The programs every lab host runs many of, gpu-holder (~8 per host) and
// lab-init (one per isolated host), come in two builds with the same flags
// and behaviour: a static C one, a few pages per process, which a lab of
// 1000 hosts needs to fit in memory, and the Go one (~0.6-1.2 MiB PSS per
// process) when no C compiler is there.
const (
	KindC  = labbuild.KindC
	KindGo = labbuild.KindGo
)

// The C sources travel inside the lab package, so that a gpush-lab or
// bench binary builds them anywhere, without the module's source.
var (
	//go:embed cmd/gpu-holder/c/gpu-holder.c
	holderCSource []byte
	//go:embed cmd/lab-init/c/lab-init.c
	initCSource []byte
)

// buildPerHost fills b.Holder and b.Init where empty, each with its C
// build when b.Kind allows it and cc builds it, else its Go one, and says
// which in b.Note. Asked for C, a failed C build is an error. The files
// are named gpu-holder and lab-init whichever the build: comm is the
// file's name.
func buildPerHost(ctx context.Context, binDir string, b *Binaries) error {
	switch b.Kind {
	case "", KindC, KindGo:
	default:
		return fmt.Errorf("lab: build kind %q: want %s, %s or empty (C when a C compiler is there)", b.Kind, KindC, KindGo)
	}
	var notes []string
	made := ""
	for _, p := range []struct {
		field    *string
		name     string
		src      []byte
		goPkg    string
		goMemory string
	}{
		{&b.Holder, "gpu-holder", holderCSource, "github.com/gpush/gpush/lab/cmd/gpu-holder", "~0.6-1.2 MiB"},
		{&b.Init, "lab-init", initCSource, "github.com/gpush/gpush/lab/cmd/lab-init", "~0.65 MiB"},
	} {
		if *p.field != "" {
			notes = append(notes, p.name+" given: "+*p.field)
			continue
		}
		out := filepath.Join(binDir, p.name)
		why := "as asked"
		if b.Kind != KindGo {
			err := buildC(ctx, out, p.name, p.src)
			if err == nil {
				*p.field = out
				notes = append(notes, p.name+" C (cc -static)")
				made = mergeKind(made, KindC)
				continue
			}
			if b.Kind == KindC {
				return err
			}
			why = fmt.Sprintf("no C build: %v", err)
		}
		if err := GoBuild(ctx, out, p.goPkg); err != nil {
			return err
		}
		*p.field = out
		notes = append(notes, fmt.Sprintf("%s Go (%s PSS per process; %s)", p.name, p.goMemory, why))
		made = mergeKind(made, KindGo)
	}
	if made != "" {
		b.Kind = made
	}
	b.Note = strings.Join(notes, "; ")
	return nil
}

// mergeKind is the kind of what was built so far ("mixed" when both).
func mergeKind(have, add string) string {
	if have == "" || have == add {
		return add
	}
	return "mixed"
}

// ErrNoCC says that there is no C compiler to build the C programs with.
var ErrNoCC = labbuild.ErrNoCC

// BuildHolderC compiles the C gpu-holder to out.
func BuildHolderC(ctx context.Context, out string) error {
	return buildC(ctx, out, "gpu-holder", holderCSource)
}

// BuildInitC compiles the C lab-init to out.
func BuildInitC(ctx context.Context, out string) error {
	return buildC(ctx, out, "lab-init", initCSource)
}

// buildC compiles src to out (static: see labbuild.C).
func buildC(ctx context.Context, out, name string, src []byte) error {
	return labbuild.C(ctx, out, name, src)
}
