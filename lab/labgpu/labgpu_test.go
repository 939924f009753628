package labgpu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemMiB(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want int64
	}{
		{[]string{"x", "--dev", "a", "--mem-mib", "10850"}, 10850},
		{[]string{"x", "--mem-mib=7"}, 7},
		{[]string{"x", "-mem-mib", "3"}, 3},
		{[]string{"x", "--child-mem-mib", "6"}, 0},
		{[]string{"x", "--mem-mib"}, 0},
		{[]string{"x", "--mem-mib", "-4"}, 0},
		{nil, 0},
	} {
		if got := MemMiB(tc.argv); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.argv, got, tc.want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, ConfigName)
	zero := 0
	c := Config{DevDir: dir, ReleaseDelay: "70ms", GPUs: []GPU{{Index: 1, Minor: &zero}}}
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(p)
	if err != nil || got.GPUs[0].Dev() != "nvidia0" {
		t.Fatalf("%+v %v", got, err)
	}
	if d, _ := got.Delay(); d.Milliseconds() != 70 {
		t.Errorf("delay %v", d)
	}
	for _, bad := range []string{`{"dev_dir":""}`, `{"dev_dir":"/d","fault":"explode"}`, `{"dev_dir":"/d","release_delay":"soon"}`, `{`} {
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := LoadConfig(p); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestScanFindsOwnFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "nvidia0"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	procs, err := Scan("/proc", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].PID != os.Getpid() || !procs[0].Devices["nvidia0"] {
		t.Errorf("%+v", procs)
	}
}
