package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// recordWriter keeps what it is written and the size of each write.
type recordWriter struct {
	buf    bytes.Buffer
	writes []int
}

func (r *recordWriter) Write(p []byte) (int, error) {
	r.writes = append(r.writes, len(p))
	return r.buf.Write(p)
}

// TestCopyCtxChunks: in-memory data and streams arrive whole, in writes
// of chunkSize at most, and a cancelled ctx stops the copy between chunks.
func TestCopyCtxChunks(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (5*chunkSize/2)/16+3)
	for _, tc := range []struct {
		name string
		r    func() io.Reader
	}{
		{"bytes", func() io.Reader { return bytes.NewReader(data) }},
		{"strings", func() io.Reader { return strings.NewReader(string(data)) }},
		{"stream", func() io.Reader { return bytes.NewBufferString(string(data)) }},
	} {
		var w recordWriter
		n, err := copyCtx(context.Background(), &w, tc.r())
		if err != nil || n != int64(len(data)) || !bytes.Equal(w.buf.Bytes(), data) {
			t.Fatalf("%s: copied %d of %d bytes, err %v, same content %v", tc.name, n, len(data), err, bytes.Equal(w.buf.Bytes(), data))
		}
		if len(w.writes) != 3 {
			t.Errorf("%s: %d writes %v, want 3 of at most %d bytes", tc.name, len(w.writes), w.writes, chunkSize)
		}
		for _, s := range w.writes {
			if s > chunkSize {
				t.Errorf("%s: a write of %d bytes, over %d", tc.name, s, chunkSize)
			}
		}

		ctx, cancel := context.WithCancel(context.Background())
		testHookChunkWritten = func(int64) { cancel() }
		w = recordWriter{}
		_, err = copyCtx(ctx, &w, tc.r())
		testHookChunkWritten = nil
		if !errors.Is(err, context.Canceled) || len(w.writes) != 1 {
			t.Errorf("%s: cancelled after the first chunk: %d writes, err %v; want 1 and context.Canceled", tc.name, len(w.writes), err)
		}
	}
}
