package config

import (
	"sync"
	"sync/atomic"
)

// Holder holds the running configuration and swaps it whole on reload.
// Readers call Load, which is lock-free and returns an immutable snapshot;
// a reader that needs several values consistent with each other should call
// Load once and read them all from that snapshot. Reloads are serialized.
type Holder struct {
	cur atomic.Pointer[Config]
	mu  sync.Mutex // serializes Reload
}

// NewHolder returns a Holder serving c, which must not be nil.
func NewHolder(c *Config) *Holder {
	if c == nil {
		panic("config: NewHolder(nil)")
	}
	h := &Holder{}
	h.cur.Store(c)
	return h
}

// Load returns the current configuration. Callers must not modify it.
func (h *Holder) Load() *Config { return h.cur.Load() }

// Reload re-reads the file the current configuration came from (its Path).
// On success it swaps the new configuration in and returns it. On failure it
// returns the *Errors and the current configuration stays in place.
func (h *Holder) Reload() (*Config, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.cur.Load().Path
	if p == "" {
		return nil, &Errors{{Msg: "cannot reload: the running config was not loaded from a file"}}
	}
	c, err := Load(p)
	if err != nil {
		return nil, err
	}
	h.cur.Store(c)
	return c, nil
}
