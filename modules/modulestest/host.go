package modulestest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/remote"
)

// Host is a fake modules.Host around a fake Conn.
type Host struct {
	HostName  string
	Addr      string
	GroupList []string
	VarMap    map[string]any
	Config    helper.Config
	FakeConn  *Conn
	// DialErr, when set, is what Conn returns instead of FakeConn.
	DialErr error

	check   atomic.Bool
	mu      sync.Mutex
	events  []modules.Event
	dials   int
	connErr error
	stats   modules.Stats
	respawn modules.Managers
}

// NewHost returns a host named name served by model.
func NewHost(name string, model *GPUHost) *Host {
	return &Host{HostName: name, Addr: name + ".example", GroupList: []string{"all"},
		VarMap: map[string]any{}, FakeConn: NewConn(name, model)}
}

var _ modules.Host = (*Host)(nil)

// SetCheck turns check mode on or off.
func (h *Host) SetCheck(v bool) { h.check.Store(v) }

// Name implements modules.Host.
func (h *Host) Name() string { return h.HostName }

// Address implements modules.Host.
func (h *Host) Address() string { return h.Addr }

// Groups implements modules.Host.
func (h *Host) Groups() []string { return h.GroupList }

// Vars implements modules.Host.
func (h *Host) Vars() map[string]any { return h.VarMap }

// Conn implements modules.Host and counts dials.
func (h *Host) Conn(ctx context.Context) (remote.Conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dials++
	if h.DialErr != nil {
		return nil, h.DialErr
	}
	return h.FakeConn, nil
}

// HelperConfig implements modules.Host.
func (h *Host) HelperConfig() helper.Config { return h.Config }

// Check implements modules.Host.
func (h *Host) Check() bool { return h.check.Load() }

// Logger implements modules.Host; it discards.
func (h *Host) Logger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Emit records the event.
func (h *Host) Emit(e modules.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// Events returns the events emitted so far.
func (h *Host) Events() []modules.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]modules.Event(nil), h.events...)
}

// Stats implements modules.Host.
func (h *Host) Stats() *modules.Stats { return &h.stats }

// Managers is what may restart a worker, for this test.
func (h *Host) Managers() *modules.Managers { return &h.respawn }

// ConnFailed records the connection error.
func (h *Host) ConnFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.connErr == nil {
		h.connErr = err
	}
}

// ConnErr returns what ConnFailed recorded.
func (h *Host) ConnErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connErr
}
