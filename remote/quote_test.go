package remote

import (
	"os/exec"
	"strings"
	"testing"
)

var quoteCases = []string{"", "plain", "a b", "it's", `"`, `\`, "$HOME", "$(id)", "`id`", ";", "&&", "|", "*", "?", "[a]",
	"~", "~root", "{a,b}", "A=b", "-n", "\n", "a\nb", "'", "''", "!", "#x", "%s", "tab\there", "ü", "\x01"}

func TestShellQuoteRoundTripsThroughRealShells(t *testing.T) {
	for _, sh := range []string{"sh", "bash", "dash"} {
		if _, err := exec.LookPath(sh); err != nil {
			continue
		}
		for _, s := range quoteCases {
			checkRoundTrip(t, sh, s)
		}
	}
}

func checkRoundTrip(t *testing.T, sh, s string) {
	t.Helper()
	out, err := exec.Command(sh, "-c", "printf '%s|' "+ShellQuote(s)).Output()
	if err != nil {
		t.Fatalf("%s: %q quoted as %s: %v", sh, s, ShellQuote(s), err)
	}
	if string(out) != s+"|" {
		t.Fatalf("%s read %q quoted as %s back as %q", sh, s, ShellQuote(s), out)
	}
}

func TestShellJoinIsOneWordPerArgument(t *testing.T) {
	line := ShellJoin(quoteCases)
	out, err := exec.Command("sh", "-c", "printf '%s\\0' "+line).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(got) != len(quoteCases) {
		t.Fatalf("%d words, want %d", len(got), len(quoteCases))
	}
	for i := range got {
		if got[i] != quoteCases[i] {
			t.Fatalf("word %d is %q, want %q", i, got[i], quoteCases[i])
		}
	}
	// An assignment-looking first word is still a command name.
	if ShellQuote("A=b") == "A=b" {
		t.Fatal("A=b left bare would be an assignment")
	}
}

func FuzzShellQuote(f *testing.F) {
	for _, s := range quoteCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			t.Skip("NUL cannot be in an argument")
		}
		checkRoundTrip(t, "sh", s)
	})
}
