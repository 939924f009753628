package inventory

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// DefaultMaxInputSize caps each file gpush reads as an inventory, vars
// file, ssh_config file or -e @file, and what an inventory script prints.
// Parsing costs several times a file's size (a YAML node or an INI host
// is far larger than its text); real inventories are a few MB, so the cap
// keeps a mistaken or hostile input from taking the machine's memory.
const DefaultMaxInputSize = 32 << 20

// MaxInputSizeEnv names the environment variable that sets the cap when
// no --max-input-size is given.
const MaxInputSizeEnv = "GPUSH_MAX_INPUT_SIZE"

// ErrInputTooLarge is the error of a file over the input cap. Test with
// errors.Is.
var ErrInputTooLarge = errors.New("over the input size cap")

// ParseSize reads a byte count: digits, optionally followed by K, M, G
// (powers of 1024; KiB, MiB, GiB and KB, MB, GB are read the same).
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a positive size in bytes, or with K, M or G (64M, 1G)", s)
	}
	return n * mult, nil
}

// InputCap is the cap in effect: max if positive, else $GPUSH_MAX_INPUT_SIZE,
// else DefaultMaxInputSize.
func InputCap(max int64) (int64, error) {
	if max > 0 {
		return max, nil
	}
	if s := strings.TrimSpace(os.Getenv(MaxInputSizeEnv)); s != "" {
		n, err := ParseSize(s)
		if err != nil {
			return 0, fmt.Errorf("$%s=%w", MaxInputSizeEnv, err)
		}
		return n, nil
	}
	return DefaultMaxInputSize, nil
}

// ReadInput reads a whole file, refusing one over max bytes (see
// InputCap; 0 means the default) before reading it, with an error naming
// the file, its size and the cap. A file that grows while read (a pipe, a
// log) is cut off at the cap and refused the same way.
func ReadInput(path string, max int64) ([]byte, error) {
	max, err := InputCap(max)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().IsRegular() && st.Size() > max {
		return nil, tooLarge(path, st.Size(), max)
	}
	size := st.Size()
	if !st.Mode().IsRegular() || size <= 0 {
		size = 512
	}
	buf := make([]byte, 0, size+1)
	r := io.LimitReader(f, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > max {
		// Read past the cap: its whole size is not known.
		return nil, fmt.Errorf("%s: more than %d bytes, %w (--max-input-size or $%s raise it)", path, max, ErrInputTooLarge, MaxInputSizeEnv)
	}
	return buf, nil
}

func tooLarge(path string, size, max int64) error {
	return fmt.Errorf("%s: %d bytes, %w of %d bytes (--max-input-size or $%s raise it)", path, size, ErrInputTooLarge, max, MaxInputSizeEnv)
}
