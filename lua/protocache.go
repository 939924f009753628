package lua

import (
	"bytes"
	"crypto/sha256"
	"sync"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Compiled chunks are shared by every host's state: compiling lib/util.lua
// and the script once per host kept ~0.5 MiB of bytecode and compiler
// buffers per concurrent host (BenchmarkLabMemory). gopher-lua's
// FunctionProto is read-only once compiled, so states can share one; each
// gets its own closure (upvalues, environment) from it.
var protos struct {
	mu sync.Mutex
	m  map[protoKey]*glua.FunctionProto
}

// maxProtos bounds the cache: a REPL that re-requires an edited module
// adds a version each time.
const maxProtos = 256

type protoKey struct {
	chunk string
	sum   [sha256.Size]byte
}

// loadShared is L.Load for src named chunk, with the compiled prototype
// shared across states. Errors are L.Load's own (same message, same type).
func loadShared(L *glua.LState, src []byte, chunk string) (*glua.LFunction, error) {
	k := protoKey{chunk, sha256.Sum256(src)}
	protos.mu.Lock()
	p := protos.m[k]
	protos.mu.Unlock()
	if p == nil {
		ast, err := parse.Parse(bytes.NewReader(src), chunk)
		if err == nil {
			p, err = glua.Compile(ast, chunk)
		}
		if err != nil {
			return L.Load(bytes.NewReader(src), chunk) // fails again, with Load's own error
		}
		protos.mu.Lock()
		if protos.m == nil {
			protos.m = map[protoKey]*glua.FunctionProto{}
		}
		if q := protos.m[k]; q != nil {
			p = q
		} else if len(protos.m) < maxProtos {
			protos.m[k] = p
		}
		protos.mu.Unlock()
	}
	// As L.Load: a main chunk has no upvalues and runs in the globals.
	return L.NewFunctionFromProto(p), nil
}
