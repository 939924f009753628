// Package helperbin provides the gpush-helper binaries that gpush uploads
// to hosts: the ones embedded at build time (`make build` writes them to
// bin/), or, in a plain `go test` / `go run` without make, one built from
// the module source with the local Go toolchain.
package helperbin

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

//go:embed bin
var embedded embed.FS

// ModulePath is the module whose cmd/gpush-helper is built when no binary
// is embedded.
const ModulePath = "github.com/gpush/gpush"

// Arches are the GOARCH values a helper exists for.
var Arches = []string{"amd64", "arm64"}

// FileName is the helper's file name in bin/ for goarch.
func FileName(goarch string) string { return "gpush-helper-linux-" + goarch }

// embeddedCopies holds each embedded helper read once: embed.FS.ReadFile
// copies the 3 MiB on every call, which 1000 hosts deploying at once
// turned into gigabytes of garbage.
var embeddedCopies sync.Map // goarch -> *buildResult

// Embedded returns the helper embedded for goarch, or false. The slice is
// shared by every caller: it must not be modified.
func Embedded(goarch string) ([]byte, bool) {
	v, _ := embeddedCopies.LoadOrStore(goarch, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() { r.b, r.err = embedded.ReadFile("bin/" + FileName(goarch)) })
	if r.err != nil || len(r.b) == 0 {
		return nil, false
	}
	return r.b, true
}

// Digest is the hex sha256 and the size of the helper Source gives for
// goarch (its signature fits remote.Options.HelperDigest). An embedded
// helper is hashed as it is read, in small pieces, and only its digest is
// kept: a warm run then never copies the binaries into the heap (Embedded
// keeps ~3 MiB for each architecture it is asked for); 1000 warm hosts
// kept both for the whole run. Otherwise it hashes Source's bytes.
func Digest(goarch string) (string, int64, error) {
	v, _ := digests.LoadOrStore(goarch, &digestResult{})
	r := v.(*digestResult)
	r.once.Do(func() { r.sum, r.size, r.err = digest(goarch) })
	return r.sum, r.size, r.err
}

type digestResult struct {
	once sync.Once
	sum  string
	size int64
	err  error
}

var digests sync.Map // goarch -> *digestResult

func digest(goarch string) (string, int64, error) {
	if supported(goarch) && !testing.Testing() {
		if sum, n, ok, err := embeddedDigest(goarch); ok || err != nil {
			return sum, n, err
		}
	}
	b, err := Source(goarch)
	if err != nil {
		return "", 0, err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), int64(len(b)), nil
}

// embeddedDigest is the digest of the embedded helper for goarch; ok is
// false when none is embedded (as for Embedded). It is the sidecar
// FILE.sha256 that `make helpers` writes beside each helper ("HEX SIZE")
// when that names the embedded file's size: then not even the binary's
// pages in gpush's own executable are read (once read they count in the
// process's RSS, ~6 MiB for both). Else the file is hashed as it is read.
func embeddedDigest(goarch string) (sum string, n int64, ok bool, err error) {
	name := "bin/" + FileName(goarch)
	st, err := fs.Stat(embedded, name)
	if err != nil || st.Size() == 0 {
		return "", 0, false, nil
	}
	if side, err := embedded.ReadFile(name + ".sha256"); err == nil {
		var hexSum string
		var size int64
		if _, err := fmt.Sscanf(string(side), "%64s %d", &hexSum, &size); err == nil && size == st.Size() {
			if b, err := hex.DecodeString(hexSum); err == nil && len(b) == sha256.Size {
				return hexSum, size, true, nil
			}
		}
	}
	return streamDigest(name)
}

// streamDigest hashes the embedded file name in small reads.
func streamDigest(name string) (sum string, n int64, ok bool, err error) {
	f, err := embedded.Open(name)
	if err != nil {
		return "", 0, false, nil
	}
	defer f.Close()
	h := sha256.New()
	if n, err = io.Copy(h, f); err != nil {
		return "", 0, false, fmt.Errorf("read the embedded %s: %w", name, err)
	}
	if n == 0 {
		return "", 0, false, nil
	}
	return hex.EncodeToString(h.Sum(nil)), n, true, nil
}

type buildResult struct {
	once sync.Once
	b    []byte
	err  error
}

var builds sync.Map // goarch -> *buildResult

// Source returns the helper for linux/goarch: the embedded one, else one
// built once per process from the module source. Its signature fits
// remote.Options.HelperSource. The slice is shared: it must not be modified.
//
// Test binaries build from the source even when helpers are embedded:
// binaries left in bin/ by an earlier `make build` would otherwise have
// the tests exercise stale helper code. Only a test binary run away from
// the source falls back to the embedded helper.
func Source(goarch string) ([]byte, error) {
	if !supported(goarch) {
		return nil, fmt.Errorf("no gpush-helper for linux/%s (built for %s only)", goarch, strings.Join(Arches, ", "))
	}
	emb, hasEmb := Embedded(goarch)
	if hasEmb && !testing.Testing() {
		return emb, nil
	}
	v, _ := builds.LoadOrStore(goarch, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() { r.b, r.err = build(goarch) })
	switch {
	case r.err == nil:
		return r.b, nil
	case hasEmb && errors.Is(r.err, errNoSource):
		return emb, nil
	case hasEmb:
		return nil, fmt.Errorf("gpush-helper for linux/%s: building it from the module source failed (%w); "+
			"tests do not fall back to the embedded one, which may be stale", goarch, r.err)
	}
	return nil, fmt.Errorf("gpush-helper for linux/%s is not embedded in this gpush and could not be built "+
		"from source (%w); run `make build`", goarch, r.err)
}

func supported(goarch string) bool {
	for _, a := range Arches {
		if a == goarch {
			return true
		}
	}
	return false
}

// build compiles ./cmd/gpush-helper statically for linux/goarch into the
// user cache dir and returns the binary. Go's build cache makes a repeat
// cheap, so it is rebuilt once per process rather than trusted stale.
func build(goarch string) ([]byte, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	goBin, err := findGo()
	if err != nil {
		return nil, err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "gpush", "helper-build")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	out := filepath.Join(dir, FileName(goarch))
	// A private temp name, renamed into place: concurrent test binaries
	// build the same file.
	tmp := out + ".tmp-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", tmp, "./cmd/gpush-helper")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("go build ./cmd/gpush-helper in %s: %w: %s", root, err, strings.TrimSpace(string(b)))
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("rename %s: %w", tmp, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("read built helper: %w", err)
	}
	return b, nil
}

func findGo() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	// GOROOT is set where go runs this (go test, go run); else Go's usual place.
	tries := []string{"/usr/local/go/bin/go"}
	if root := os.Getenv("GOROOT"); filepath.IsAbs(root) {
		tries = append([]string{filepath.Join(root, "bin", "go")}, tries...)
	}
	for _, p := range tries {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", errors.New("no Go toolchain (go) on PATH")
}

var errNoSource = errors.New("the " + ModulePath + " module source (with cmd/gpush-helper) is not here")

// moduleRoot finds the gpush module source: from this file's compile-time
// path (absent under -trimpath), else from the working directory upwards.
func moduleRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for {
			if isModuleRoot(d) {
				return d, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("%w (looked up from %s)", errNoSource, strings.Join(starts, ", "))
}

func isModuleRoot(d string) bool {
	f, err := os.Open(filepath.Join(d, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "module" {
			if fields[1] != ModulePath {
				return false
			}
			fi, err := os.Stat(filepath.Join(d, "cmd", "gpush-helper"))
			return err == nil && fi.IsDir()
		}
	}
	return false
}
