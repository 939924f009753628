package repl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// historyLimit is how many entries the editor keeps and the file is
// trimmed to.
const historyLimit = 1000

// The history file has one entry a line. An entry that spans lines (a
// block that could not be joined safely) or starts with a quote is stored
// as a JSON string, so it comes back as one entry; every other line is the
// entry as typed, so a plain file of one entry a line reads as it is.

// defaultHistoryPath is <user cache dir>/gpush/repl_history, its folder
// created (0700: the history may hold what was typed about hosts).
func defaultHistoryPath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "gpush")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("history dir: %w", err)
	}
	return filepath.Join(dir, "repl_history"), nil
}

// historyEntry is what one complete input is remembered as: one line when
// the block's lines can be joined with spaces without changing its meaning
// (no comment, long bracket or line continuation, which a newline ends),
// else the lines as they were.
func historyEntry(lines []string) string {
	if len(lines) == 1 {
		return lines[0]
	}
	joined := make([]string, 0, len(lines))
	for _, l := range lines {
		if strings.Contains(l, "--") || strings.Contains(l, "[[") || strings.Contains(l, "[=") || strings.HasSuffix(l, `\`) {
			return strings.Join(lines, "\n")
		}
		if t := strings.TrimSpace(l); t != "" {
			joined = append(joined, t)
		}
	}
	return strings.Join(joined, " ")
}

func encodeHistory(entry string) string {
	if strings.ContainsAny(entry, "\n\r") || strings.HasPrefix(entry, `"`) {
		b, _ := json.Marshal(entry) // a string always encodes
		return string(b)
	}
	return entry
}

func decodeHistory(line string) string {
	if strings.HasPrefix(line, `"`) {
		var s string
		if json.Unmarshal([]byte(line), &s) == nil {
			return s
		}
	}
	return line
}

// history appends entries to the file.
type history struct {
	path string
	f    *os.File
}

// openHistory reads the entries of the history at path (the last
// historyLimit) and opens it for appending, creating it 0600. A file
// readable by others is narrowed to 0600 (note says so): it holds what was
// typed, -e values and host names among it. A file much longer than the
// limit is rewritten with its last entries.
func openHistory(path string) (h *history, entries []string, note string, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, "", fmt.Errorf("open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, "", fmt.Errorf("stat %s: %w", path, err)
	}
	if mode := st.Mode().Perm(); mode&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, nil, "", fmt.Errorf("%s is mode %04o, readable by others, and cannot be narrowed: %w", path, mode, err)
		}
		note = fmt.Sprintf("history %s was mode %04o: narrowed to 0600", path, mode)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		if sc.Text() != "" {
			entries = append(entries, decodeHistory(sc.Text()))
		}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return nil, nil, note, fmt.Errorf("read %s: %w", path, err)
	}
	if len(entries) > historyLimit {
		entries = entries[len(entries)-historyLimit:]
	}
	h = &history{path: path, f: f}
	if n > 2*historyLimit {
		if err := h.rewrite(entries); err != nil {
			f.Close()
			return nil, nil, note, err
		}
	}
	return h, entries, note, nil
}

// rewrite replaces the file with entries (a temporary file renamed over
// it, 0600 from the start).
func (h *history) rewrite(entries []string) error {
	tmp, err := os.CreateTemp(filepath.Dir(h.path), ".repl_history-*")
	if err != nil {
		return fmt.Errorf("trim %s: %w", h.path, err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	for _, e := range entries {
		fmt.Fprintln(w, encodeHistory(e))
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("trim %s: %w", h.path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("trim %s: %w", h.path, err)
	}
	if err := os.Rename(tmp.Name(), h.path); err != nil {
		return fmt.Errorf("trim %s: %w", h.path, err)
	}
	f, err := os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", h.path, err)
	}
	h.f.Close()
	h.f = f
	return nil
}

func (h *history) add(entry string) error {
	if _, err := fmt.Fprintln(h.f, encodeHistory(entry)); err != nil {
		return fmt.Errorf("append to %s: %w", h.path, err)
	}
	return nil
}

func (h *history) close() { h.f.Close() }
