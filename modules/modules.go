// Package modules holds what every Lua module shares: the Host a module
// serves, the events and stats it reports, and the registry of modules.
//
// Modules follow k6's design: each module package registers itself (a
// Module: its name, doc and functions) when it is initialised, and package
// modules/all imports every module gpush ships, so the registry is the one
// list of modules that the runtime loads and the docs show. A module
// reaches its host only through the Host interface, so it can be tested
// against modulestest's fakes. Its functions are built once for the
// process (SharedFuncs) and every Lua state reads them through a view of
// its own: a function finds the host of the state that calls it with
// HostOf, and keeps what it needs per host with Value; the module's Loader
// binds the state to its host (Bind) and pushes the view.
package modules

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/remote"
)

// Host is everything a module may know about and do to the host it serves.
// One Host serves one Lua state, i.e. one goroutine; implementations must
// still make Emit and Stats safe for concurrent use, since the CLI reads them.
type Host interface {
	// Name is the inventory name, Address what is dialled.
	Name() string
	Address() string
	Groups() []string
	// Vars are the host vars merged with the extra vars (extra vars win).
	Vars() map[string]any
	// Conn returns the host's connection, dialling it on first use. Every
	// later call returns the same connection (or the same dial error).
	Conn(ctx context.Context) (remote.Conn, error)
	// HelperConfig is sent with every helper request (from the gpush_* vars).
	HelperConfig() helper.Config
	// Check is true under --check: destructive calls must change nothing.
	Check() bool
	// Logger is the debug logger, with the host as an attribute.
	Logger() *slog.Logger
	// Emit reports an event (a log line) to the run's output.
	Emit(Event)
	// Stats collects what the recap shows for this host.
	Stats() *Stats
	// Managers is what may restart a worker on this host, for this run.
	Managers() *Managers
	// ConnFailed records that a call failed because the connection is gone,
	// so that the runner reports the host unreachable rather than failed.
	ConnFailed(err error)
}

// Event kinds.
const (
	EventLog   = "log"
	EventStart = "start"
	EventDone  = "done"
)

// Log levels, as the log module names them.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// Event is one thing that happened on one host, streamed to the CLI.
type Event struct {
	Host    string    `json:"host"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Level   string    `json:"level,omitempty"`
	Message string    `json:"message"`
}

// Module is one Lua module. A module package declares only its doc and
// its functions, and registers them from a package variable:
//
//	//go:embed README.md
//	var doc string
//
//	var Module = modules.Register(modules.Module{Name: "ssh", Doc: doc, Funcs: map[string]glua.LGFunction{...}})
type Module struct {
	// Name is the global and the require name ("gpu").
	Name string
	// Doc is the module's reference (its README.md), printed by `gpush doc`.
	Doc string
	// Funcs are the module's functions. One table of them serves every
	// Lua state (SharedFuncs), so a function finds the host of the state
	// calling it with HostOf and keeps what it needs per host with Value.
	Funcs map[string]glua.LGFunction
	// Loader pushes the module's table for host h onto L's stack and
	// returns 1. Register sets it for a module of Funcs (see FuncsLoader);
	// only a module that is not a table of shared functions gives its own.
	Loader func(L *glua.LState, h Host) int
}

// Summary is the first line of the module's doc that is not a heading,
// for lists of modules.
func (m Module) Summary() string {
	for _, l := range strings.Split(m.Doc, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

var (
	registryMu sync.Mutex
	// Registry maps a module name to its module. Module packages fill it
	// through Register when they are initialised (package modules/all
	// imports those gpush ships); read it through Lookup and All once the
	// program has started.
	Registry = map[string]Module{}
)

// Register adds a module to Registry and returns it as registered, its
// Loader set. It panics on an empty or duplicate name, or a module with
// neither functions nor a loader: programming errors found at start-up.
func Register(m Module) Module {
	registryMu.Lock()
	defer registryMu.Unlock()
	if m.Name == "" || (m.Loader == nil && m.Funcs == nil) {
		panic("modules.Register: module needs a name, and functions or a loader")
	}
	if _, dup := Registry[m.Name]; dup {
		panic(fmt.Sprintf("modules.Register: module %q registered twice", m.Name))
	}
	if m.Loader == nil {
		m.Loader = FuncsLoader(m.Funcs)
	}
	Registry[m.Name] = m
	return m
}

// FuncsLoader is the Loader of a module of fns: it binds the state to its
// host (Bind) and pushes a view of one shared table of fns, built on first
// use for the whole process. fns must not change afterwards.
func FuncsLoader(fns map[string]glua.LGFunction) func(L *glua.LState, h Host) int {
	shared := SharedFuncs(fns)
	return func(L *glua.LState, h Host) int {
		Bind(L, h)
		L.Push(shared().View(L))
		return 1
	}
}

// FuncsFor is a function map of one function per name, made by mk: for a
// module whose functions differ only by the name they act as
// (log.info, systemd.stop).
func FuncsFor(names []string, mk func(name string) glua.LGFunction) map[string]glua.LGFunction {
	fns := make(map[string]glua.LGFunction, len(names))
	for _, n := range names {
		fns[n] = mk(n)
	}
	return fns
}

// Lookup returns the module registered under name.
func Lookup(name string) (Module, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	m, ok := Registry[name]
	return m, ok
}

// All returns the registered modules sorted by name.
func All() []Module {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]Module, 0, len(Registry))
	for _, m := range Registry {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names are the registered modules' names, sorted.
func Names() []string {
	var names []string
	for _, m := range All() {
		names = append(names, m.Name)
	}
	return names
}

// Managers records, for one host and one run, what may restart a GPU
// worker after gpush stopped or killed it: the live parent of a killed
// holder, a stopped unit with Restart=. The systemd and gpu modules add to
// it; gpu.wait_free keeps the GPUs watched for the settle time while it is
// not empty, and names them when a worker comes back.
type Managers struct {
	mu   sync.Mutex
	list []helper.Manager
	// stopped: keys of those this run stopped and read stopped after.
	stopped map[string]bool
}

// MarkStopped records that m was stopped and read stopped: its own restart
// delay no longer needs waiting out (the end still reads it again).
func (r *Managers) MarkStopped(m helper.Manager) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped == nil {
		r.stopped = map[string]bool{}
	}
	r.stopped[m.Key()] = true
}

// Running returns a copy of those recorded and not MarkStopped.
func (r *Managers) Running() []helper.Manager {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []helper.Manager
	for _, m := range r.list {
		if !r.stopped[m.Key()] {
			out = append(out, m)
		}
	}
	return out
}

// Add records managers; one already recorded (same Key) is refreshed with
// the newer reading, and its children are merged.
func (r *Managers) Add(ms ...helper.Manager) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range ms {
		i := slices.IndexFunc(r.list, func(o helper.Manager) bool { return o.Key() == m.Key() })
		if i < 0 {
			r.list = append(r.list, m)
			continue
		}
		children := r.list[i].Children
		for _, c := range m.Children {
			if !slices.Contains(children, c) {
				children = append(children, c)
			}
		}
		r.list[i] = m
		r.list[i].Children = children
	}
}

// List returns a copy of what is recorded.
func (r *Managers) List() []helper.Manager {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]helper.Manager(nil), r.list...)
}

// FuncTable is a module table of fns, sized for them: L.NewTable reserves
// 32 array and 32 hash slots (about 2.8 KiB), which every host paid once
// per module (BenchmarkFakeMemory).
func FuncTable(L *glua.LState, fns map[string]glua.LGFunction) *glua.LTable {
	return L.SetFuncs(L.CreateTable(0, len(fns)), fns)
}
