package remote

import "strings"

// ShellQuote quotes one word for a POSIX shell: it is wrapped in single
// quotes, inside which nothing is special, and every single quote inside
// becomes: a closing quote, a backslash-escaped quote, an opening quote.
// The result always reads back as exactly s.
// Words made only of safe characters stay bare so logs stay readable; '='
// is not safe (a leading NAME=value word is an assignment).
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, needsQuote) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func needsQuote(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("-_./:,+@%", r)
}

// ShellJoin quotes every element of argv and joins them with spaces: the
// command line that, read by a POSIX shell, runs exactly argv.
func ShellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = ShellQuote(a)
	}
	return strings.Join(q, " ")
}
