package helperbin

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpush/gpush/helper"
)

func TestSourceGivesAStaticLinuxHelper(t *testing.T) {
	b := amd64Source(t)
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not an ELF binary: %v", err)
	}
	if f.Machine != elf.EM_X86_64 {
		t.Fatalf("machine %v, want x86-64", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("helper is dynamically linked (has PT_INTERP); it must be static")
		}
	}
	// A second call returns the same bytes without building again.
	b2, err := Source("amd64")
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("second Source differs (err %v)", err)
	}
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		return
	}
	// It really is the helper: an unknown verb gets an ErrorResponse.
	p := filepath.Join(t.TempDir(), "gpush-helper")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p, "no-such-verb")
	cmd.Stdin = strings.NewReader("{}")
	out, err := cmd.Output()
	if err == nil {
		t.Fatal("unknown verb exited 0")
	}
	var er helper.ErrorResponse
	if jerr := json.Unmarshal(out, &er); jerr != nil || !strings.Contains(er.Error, "no-such-verb") {
		t.Fatalf("want an ErrorResponse naming the verb, got %q (%v)", out, jerr)
	}
}

func TestSourceRefusesOtherArches(t *testing.T) {
	for _, a := range []string{"386", "riscv64", "", "../amd64"} {
		if _, err := Source(a); err == nil || !strings.Contains(err.Error(), "amd64, arm64") {
			t.Errorf("Source(%q) = %v, want a refusal naming the supported arches", a, err)
		}
	}
}

// Digest is what a warm check compares with the host's helper: it must be
// the digest of the very bytes Source would upload, and the embedded
// helper's streamed digest that of Embedded's bytes.
func TestDigestMatchesTheBytes(t *testing.T) {
	b := amd64Source(t)
	sum, n, err := Digest("amd64")
	want := sha256.Sum256(b)
	if err != nil || sum != hex.EncodeToString(want[:]) || n != int64(len(b)) {
		t.Fatalf("Digest = %s, %d, %v; want the sha256 of Source's %d bytes %x", sum, n, err, len(b), want)
	}
	if _, _, err := Digest("mips"); err == nil {
		t.Error("Digest of an architecture without a helper: want an error")
	}
	emb, ok := Embedded("amd64")
	if !ok {
		t.Log("no embedded helper (make build embeds them): its streamed digest is not checked")
		return
	}
	// With make's sidecar (make build writes it) and without it.
	want = sha256.Sum256(emb)
	for what, f := range map[string]func() (string, int64, bool, error){
		"embeddedDigest": func() (string, int64, bool, error) { return embeddedDigest("amd64") },
		"streamDigest":   func() (string, int64, bool, error) { return streamDigest("bin/" + FileName("amd64")) },
	} {
		sum, n, ok, err := f()
		if err != nil || !ok || sum != hex.EncodeToString(want[:]) || n != int64(len(emb)) {
			t.Fatalf("%s = %s, %d, %v, %v; want the sha256 of the %d embedded bytes %x", what, sum, n, ok, err, len(emb), want)
		}
	}
}

// amd64Source is Source("amd64"), the test skipped where there is neither
// an embedded helper nor a go toolchain to build one.
func amd64Source(t *testing.T) []byte {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		if _, ok := Embedded(runtime.GOARCH); !ok {
			t.Skip("no embedded helper and no go toolchain")
		}
	}
	b, err := Source("amd64")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
