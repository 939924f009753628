package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
)

// sumMethods runs f once with the host's sha256sum and once with a host
// that lacks it (the helper is read back over SFTP and hashed here).
func sumMethods(t *testing.T, f func(t *testing.T)) {
	t.Run("sha256sum", f)
	t.Run("sftp-read-back", func(t *testing.T) {
		old := sumCommand
		sumCommand = "gpush-test-no-such-sha256sum"
		defer func() { sumCommand = old }()
		f(t)
	})
}

func mustGoArch(t *testing.T) string {
	a, err := GoArch(unameMachine())
	if err != nil {
		t.Skip(err)
	}
	return a
}

var snapReq = helper.SnapshotRequest{Config: helper.Config{DevDir: os.TempDir(), NvidiaSMI: "/nonexistent/nvidia-smi"}}

func TestPlantedSameSizeHelperRefusedAndReplaced(t *testing.T) {
	requireRoot(t)
	sumMethods(t, func(t *testing.T) {
		e := newEnv(t, sshd.Options{})
		c := e.dial(t)
		p, err := c.DeployHelper(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		want, _ := os.ReadFile(p)
		// A script of exactly the helper's size, with its mode and owner:
		// everything but the content matches.
		marker := filepath.Join(e.tdir, "planted-ran")
		script := []byte("#!/bin/sh\ntouch " + marker + "\nexit 0\n#")
		planted := append(script, bytes.Repeat([]byte("x"), len(want)-len(script))...)
		if err := os.WriteFile(p, planted, 0o755); err != nil {
			t.Fatal(err)
		}

		c2 := e.dial(t)
		var snap helper.Snapshot
		if err := c2.Helper(context.Background(), helper.VerbSnapshot, snapReq, &snap); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the planted helper was executed")
		}
		if snap.Version == "" {
			t.Fatalf("snapshot from the replaced helper: %+v", snap)
		}
		if n := c2.uploads.Load(); n != 1 {
			t.Fatalf("%d uploads, want 1 (the planted file replaced)", n)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
			t.Fatal("helper file does not hold the helper after the replacement")
		}
		mustContain(t, e.logs.String(), "replacing helper file", "planted or corrupted")
	})
}

func TestCorruptedHelperRepaired(t *testing.T) {
	requireRoot(t)
	sumMethods(t, func(t *testing.T) {
		e := newEnv(t, sshd.Options{})
		c := e.dial(t)
		p, err := c.DeployHelper(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		good, _ := os.ReadFile(p)
		// One flipped bit in the middle: same size, owner and mode.
		bad := bytes.Clone(good)
		bad[len(bad)/2] ^= 0x10
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(bad[len(bad)/2:len(bad)/2+1], int64(len(bad)/2))
		f.Close()
		fiBad, _ := os.Stat(p)

		c2 := e.dial(t)
		var snap helper.Snapshot
		if err := c2.Helper(context.Background(), helper.VerbSnapshot, snapReq, &snap); err != nil {
			t.Fatalf("helper call after corruption: %v", err)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, good) {
			t.Fatal("corrupted helper not repaired")
		}
		fiNew, _ := os.Stat(p)
		if os.SameFile(fiBad, fiNew) {
			t.Fatal("repaired in place, not by an atomic rename")
		}
		if c2.uploads.Load() != 1 {
			t.Fatalf("%d uploads, want 1", c2.uploads.Load())
		}
		// A later connection finds the good file and uploads nothing.
		c3 := e.dial(t)
		if err := c3.Helper(context.Background(), helper.VerbSnapshot, snapReq, &snap); err != nil || c3.uploads.Load() != 0 {
			t.Fatalf("third connection: %v, %d uploads", err, c3.uploads.Load())
		}
	})
}

func TestLocalBecomeHelperContentChecked(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("become: needs root for passwordless sudo -n")
	}
	if _, err := execOut("sudo", "-n", "true"); err != nil {
		t.Skipf("sudo -n not usable here: %v", err)
	}
	c, dir := localHost(t)
	c.host.Become = true
	p, err := c.DeployHelper(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(p)
	marker := filepath.Join(dir, "planted-ran")
	script := []byte("#!/bin/sh\ntouch " + marker + "\n#")
	os.WriteFile(p, append(script, bytes.Repeat([]byte("y"), len(good)-len(script))...), 0o755)

	c2, _ := localHost(t)
	c2.host = c.host
	var snap helper.Snapshot
	if err := c2.Helper(context.Background(), helper.VerbSnapshot, snapReq, &snap); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the planted helper ran through sudo")
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, good) || c2.uploads.Load() != 1 {
		t.Fatal("planted local helper not replaced")
	}
}

func TestHelperPathComponentsChecked(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	mk := func(p string, mode os.FileMode, uid int) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	foreign := mk(filepath.Join(e.tdir, "foreign"), 0o755, 65534)
	mk(filepath.Join(foreign, "gpush"), 0o700, 0) // the helper folder itself is fine
	group := mk(filepath.Join(e.tdir, "group"), 0o775, 0)
	world := mk(filepath.Join(e.tdir, "world"), 0o777, 0)
	stickyForeign := mk(filepath.Join(e.tdir, "stickyforeign"), 0o777|os.ModeSticky, 65534)
	real := mk(filepath.Join(e.tdir, "real"), 0o755, 0)
	link := filepath.Join(e.tdir, "link")
	os.Symlink(real, link)
	cases := []struct{ dir, comp, why string }{
		{filepath.Join(foreign, "gpush"), foreign, "owned by uid 65534"},
		{filepath.Join(foreign, "new", "gpush"), foreign, "owned by uid 65534"}, // refused before creating below it
		{filepath.Join(group, "gpush"), group, "group- or world-writable (mode 0775)"},
		{filepath.Join(world, "gpush"), world, "without being a sticky root folder"},
		{filepath.Join(stickyForeign, "gpush"), stickyForeign, "owned by uid 65534"},
		{filepath.Join(link, "gpush"), link, "is a symlink"},
	}
	for _, tc := range cases {
		e.host.Vars[VarRemoteDir] = tc.dir
		c := e.dial(t)
		err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil)
		if err == nil {
			t.Errorf("%s: helper ran from under an unsafe folder", tc.dir)
			continue
		}
		mustContain(t, err.Error(), "h1", tc.dir, "folder "+tc.comp+" on its path", tc.why, VarRemoteDir)
		c.Close()
	}
	if _, err := os.Stat(filepath.Join(foreign, "new")); err == nil {
		t.Error("a folder was created under a foreign-owned one")
	}
	if ents, _ := os.ReadDir(real); len(ents) != 0 {
		t.Error("something was written through the symlink")
	}

	// A sticky root folder (as /tmp) above a private helper folder is fine.
	sticky := mk(filepath.Join(e.tdir, "sticky"), 0o777|os.ModeSticky, 0)
	e.host.Vars[VarRemoteDir] = filepath.Join(sticky, "gpush")
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatalf("helper under a sticky root folder: %v", err)
	}
	c.Close()
}

// The path is checked at the time of use: a folder that turned unsafe
// after the helper was deployed stops the next connection from running it.
func TestHelperPathCheckedOnEveryConnection(t *testing.T) {
	requireRoot(t)
	e := newEnv(t, sshd.Options{})
	parent := filepath.Join(e.tdir, "shared")
	os.Mkdir(parent, 0o755)
	e.host.Vars[VarRemoteDir] = filepath.Join(parent, "gpush")
	c := e.dial(t)
	if err := c.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Another user now owns a folder on the path: they could rename the
	// helper folder away and plant their own between check and exec.
	if err := os.Chown(parent, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	c2 := e.dial(t)
	err := c2.Helper(context.Background(), helper.VerbSnapshot, snapReq, nil)
	if err == nil {
		t.Fatal("helper ran although a folder on its path is another user's")
	}
	mustContain(t, err.Error(), "h1", "folder "+parent+" on its path", "owned by uid 65534", "swap the helper")
}

func TestPathComponents(t *testing.T) {
	got := strings.Join(pathComponents("/a/b//c/"), " ")
	if got != "/ /a /a/b /a/b/c" {
		t.Fatalf("got %q", got)
	}
	if got := strings.Join(pathComponents("/"), " "); got != "/" {
		t.Fatalf("got %q", got)
	}
}

func TestParseSumLine(t *testing.T) {
	const d = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	if got, err := parseSumLine([]byte(d + "  /x/gpush-helper\n")); err != nil || got != d {
		t.Fatalf("%q %v", got, err)
	}
	// A chatty login shell prints first; the digest is the last line.
	if got, err := parseSumLine([]byte("Welcome to gpu01\n" + strings.Repeat("0", 64) + "  /y\n" + d + "  /x/gpush-helper\n")); err != nil || got != d {
		t.Fatalf("after noise: %q %v", got, err)
	}
	for _, bad := range []string{"", "abc  /x\n", strings.Repeat("g", 64) + "  /x\n"} {
		if _, err := parseSumLine([]byte(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestReadBackSumBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("z"), 100<<10)
	os.WriteFile(p, data, 0o600)
	full, err := readBackSum(context.Background(), localFS{}, p, int64(len(data)))
	if err != nil || full != sha256Hex(data) {
		t.Fatalf("full read-back: %v", err)
	}
	// A file that grew past what is expected hashes only size+1 bytes: a
	// mismatch, found without reading all of it.
	got, err := readBackSum(context.Background(), localFS{}, p, 10)
	if err != nil || got != sha256Hex(data[:11]) {
		t.Fatalf("bounded read-back: %q %v", got, err)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func FuzzParseSumLine(f *testing.F) {
	f.Add([]byte("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  /x\n"))
	f.Add([]byte("9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08 *x"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, out []byte) {
		got, err := parseSumLine(out)
		if err != nil {
			return
		}
		if len(got) != 64 || strings.Trim(got, "0123456789abcdef") != "" {
			t.Fatalf("accepted %q as digest %q", out, got)
		}
		if !strings.HasPrefix(strings.ToLower(strings.TrimLeft(string(out), " \t\n\r\v\f")), got) {
			t.Fatalf("digest %q is not the first field of %q", got, out)
		}
	})
}

func FuzzPathComponents(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "//a//b/", "/a/../b", "/root/.cache/gpush"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !strings.HasPrefix(p, "/") {
			return
		}
		comps := pathComponents(p)
		clean := filepath.Clean(p)
		if comps[0] != "/" || comps[len(comps)-1] != clean {
			t.Fatalf("%q: components %q", p, comps)
		}
		for i := 1; i < len(comps); i++ {
			if filepath.Dir(comps[i]) != comps[i-1] {
				t.Fatalf("%q: %q does not lie in %q", p, comps[i], comps[i-1])
			}
		}
	})
}

// binSum hashes each distinct slice once, and never answers for other
// bytes: a copy at another address with other content gets its own sum.
func TestBinSumBySliceIdentity(t *testing.T) {
	a := []byte("helper one")
	b := append([]byte(nil), a...)
	b[0] = 'H'
	want := func(p []byte) string { s := sha256.Sum256(p); return hex.EncodeToString(s[:]) }
	if got := binSum(a); got != want(a) {
		t.Fatalf("binSum(a) = %s", got)
	}
	if got := binSum(b); got != want(b) {
		t.Fatalf("binSum(b) = %s, want %s", got, want(b))
	}
	if got := binSum(a[:4]); got != want(a[:4]) {
		t.Fatalf("a prefix of a cached slice: %s, want %s", got, want(a[:4]))
	}
}
