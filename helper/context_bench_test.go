package helper

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkReadMaps reads a CUDA process's maps: a few thousand library
// and anonymous lines around the NVIDIA ones of the H200 fixture. The peer
// is reading the same file without parsing it: readMaps/read is the
// parse's cost over the read a scan pays anyway.
func BenchmarkReadMaps(b *testing.B) {
	nv, err := os.ReadFile("../../shared/fixtures/nvidia-h200/maps-p1.txt")
	if err != nil {
		b.Skip("no H200 fixture:", err)
	}
	var sb strings.Builder
	for i := range 4000 {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&sb, "7f%010x-7f%010x r-xp 00000000 08:01 %-8d                   /usr/lib/python3/dist-packages/torch/lib/libtorch_cuda_%d.so\n", i<<12, (i+1)<<12, 1000+i, i/9)
		case 1:
			fmt.Fprintf(&sb, "7f%010x-7f%010x rw-p 00000000 00:00 0\n", i<<12, (i+1)<<12)
		default:
			fmt.Fprintf(&sb, "7f%010x-7f%010x r--p 00001000 08:01 %-8d                   /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n", i<<12, (i+1)<<12, 1000+i)
		}
		if i == 2000 {
			sb.Write(nv)
		}
	}
	path := filepath.Join(b.TempDir(), "maps")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	s := &scanner{devDirs: []string{"/dev"}}
	if devs := s.readMaps(path); len(devs) != 3 {
		b.Fatalf("devices %v, want nvidia0, nvidia-uvm and nvidiactl", devs)
	}
	b.Run("readMaps", func(b *testing.B) {
		for b.Loop() {
			s.readMaps(path)
		}
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, f)
			f.Close()
		}
	})
}
