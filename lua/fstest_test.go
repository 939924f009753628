package lua

import (
	"io/fs"
	"testing/fstest"
)

// fstestMap is a small in-memory fs.FS for the embedded script library.
type fstestMap map[string]string

func (m fstestMap) Open(name string) (fs.File, error) {
	fsys := fstest.MapFS{}
	for k, v := range m {
		fsys[k] = &fstest.MapFile{Data: []byte(v)}
	}
	return fsys.Open(name)
}
