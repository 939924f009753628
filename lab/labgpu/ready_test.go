package labgpu

import (
	"slices"
	"testing"
)

func TestReadyPID(t *testing.T) {
	for _, c := range []struct {
		line string
		pid  int
		ok   bool
	}{
		{ReadyLine(4242), 4242, true},
		{"ready 17\n", 17, true},
		{"  ready   17  ", 17, true},
		{"ready", 0, false},
		{"ready x", 0, false},
		{"ready 0", 0, false},
		{"ready -3", 0, false},
		{"ready 1 2", 0, false},
		{"steady 5", 0, false},
	} {
		pid, ok := ReadyPID(c.line)
		if pid != c.pid || ok != c.ok {
			t.Errorf("ReadyPID(%q) = %d, %v; want %d, %v", c.line, pid, ok, c.pid, c.ok)
		}
	}
	log := "starting\nready 10\nnoise\nready 11\nready bad\n"
	if got := ReadyPIDs(log); !slices.Equal(got, []int{10, 11}) {
		t.Errorf("ReadyPIDs = %v, want [10 11]", got)
	}
}
