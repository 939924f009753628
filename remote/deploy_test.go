package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestGoArch(t *testing.T) {
	for in, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "x86_64\n": "amd64"} {
		if got, err := GoArch(in); err != nil || got != want {
			t.Errorf("GoArch(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"armv7l", "ppc64le", "s390x", "i686", ""} {
		if _, err := GoArch(in); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("GoArch(%q) = %v, want a refusal", in, err)
		}
	}
}

func TestRemoteDir(t *testing.T) {
	h := Host{Name: "g1"}
	cases := map[any]string{
		nil:             "/home/u/.cache/gpush",
		"/opt/gpush/":   "/opt/gpush",
		"~":             "/home/u",
		"~/x/../y":      "/home/u/y",
		"rel/dir":       "/home/u/rel/dir",
		" /srv/gpush  ": "/srv/gpush",
	}
	for v, want := range cases {
		h.Vars = map[string]any{}
		if v != nil {
			h.Vars[VarRemoteDir] = v
		}
		got, err := RemoteDir(h, "/home/u")
		if err != nil || got != want {
			t.Errorf("%v: got %q, %v; want %q", v, got, err, want)
		}
	}
	for _, bad := range []any{"", 42, "~bob/x"} {
		h.Vars = map[string]any{VarRemoteDir: bad}
		if _, err := RemoteDir(h, "/home/u"); err == nil || !strings.Contains(err.Error(), VarRemoteDir) {
			t.Errorf("%v: want an error naming %s, got %v", bad, VarRemoteDir, err)
		}
	}
}

func TestParseProbe(t *testing.T) {
	p, err := parseProbe("g1", []byte("welcome banner from .bashrc\nx86_64\n1000\n/home/u\n"))
	if err != nil || p.machine != "x86_64" || p.uid != 1000 || p.home != "/home/u" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range []string{"", "x86_64\n", "x86_64\nroot\n/home\n", "x86_64\n0\n\n"} {
		if _, err := parseProbe("g1", []byte(bad)); err == nil || !strings.Contains(err.Error(), "g1") {
			t.Errorf("%q: want an error naming the host, got %v", bad, err)
		}
	}
}

// Uploads queue for a slot: when all are taken, a deployment waits, and
// gives up with its ctx; a released slot serves the next.
func TestUploadSlotsBound(t *testing.T) {
	var releases []func()
	for i := 0; i < cap(uploadSlots); i++ {
		r, err := uploadSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := uploadSlot(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("all slots taken: got %v, want the ctx's error", err)
	}
	releases[0]()
	r, err := uploadSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r()
	for _, r := range releases[1:] {
		r()
	}
}

func TestWithStepsSaysAfterOnce(t *testing.T) {
	var steps stepLog
	steps.add("helper digests", time.Now())
	steps.add("warm check refused", time.Now())
	msg := withSteps(errors.New("h1: create helper folder /x: permission denied"), steps).Error()
	if strings.Contains(msg, "after after") || !strings.Contains(msg, "(after helper digests ") {
		t.Errorf("%q", msg)
	}
	if msg := withSteps(errors.New("e"), nil).Error(); msg != "e (no step before)" {
		t.Errorf("%q", msg)
	}
}

// "timed out after" a command's own timeout only when that time passed.
func TestEndedErrorSaysWhoseDeadline(t *testing.T) {
	for _, tc := range []struct {
		timeout, elapsed time.Duration
		why              error
		want, notWant    string
	}{
		{time.Second, time.Second, context.DeadlineExceeded, "h1: sleep: timed out after 1s", "caller"},
		{time.Minute, 200 * time.Millisecond, context.DeadlineExceeded, "h1: sleep: cut off by the caller's deadline after 200ms", "timed out"},
		{0, 5 * time.Second, context.DeadlineExceeded, "cut off by the caller's deadline after 5s", "timed out"},
		{time.Minute, time.Millisecond, context.Canceled, "h1: sleep: context canceled", "deadline"},
	} {
		msg := endedError("h1", "sleep", tc.timeout, tc.elapsed, tc.why).Error()
		if !strings.Contains(msg, tc.want) || strings.Contains(msg, tc.notWant) {
			t.Errorf("%+v: %q", tc, msg)
		}
		if !errors.Is(endedError("h1", "sleep", tc.timeout, tc.elapsed, tc.why), tc.why) {
			t.Errorf("%+v: does not wrap its cause", tc)
		}
	}
}
