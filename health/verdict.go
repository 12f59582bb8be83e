package health

import (
	"slices"
	"time"
)

// Role is what a server is to its route: configured in the config file, or
// detected by a probe with pg_is_in_recovery().
type Role uint8

const (
	// RoleUnknown: not configured, or not detected (the server was not
	// reachable, or has not been probed yet).
	RoleUnknown Role = iota
	// RolePrimary: configured as the route's primary, or detected not in
	// recovery.
	RolePrimary
	// RoleStandby: configured as one of the route's replicas, or detected in
	// recovery (a streaming or archive-replaying hot standby).
	RoleStandby
)

// String returns "unknown", "primary" or "standby".
func (r Role) String() string {
	switch r {
	case RolePrimary:
		return "primary"
	case RoleStandby:
		return "standby"
	default:
		return "unknown"
	}
}

// Target is one server to probe, as the config describes it. Addr
// ("host:port") is the key: a Checker runs one probe loop per Addr.
type Target struct {
	Route      string
	Addr       string
	Configured Role // RolePrimary or RoleStandby per the config
}

// Verdict is the outcome of one probe of one server. A Verdict is a value:
// copies are independent, and the Checker never changes one it published.
//
// This release records reachability, role and system identifier. Later
// releases add fields (timeline, WAL positions, lag); readers that ignore
// them keep working.
type Verdict struct {
	Target
	// Reachable is true when the probe connected and its query answered.
	Reachable bool
	// Detected is the role pg_is_in_recovery() reported; RoleUnknown when
	// the server was unreachable.
	Detected Role
	// SystemID is pg_control_system().system_identifier as decimal text,
	// "" when unreachable. Every server of a route must report the same
	// one; that check comes with the route-level rules of a later release.
	SystemID string
	// ProbedAt is when the probe began, read from the Checker's clock. The
	// state a verdict describes is at least this recent.
	ProbedAt time.Time
	// Err is the probe's error ("" when it succeeded): a connect failure, an
	// authentication error, a timeout ("probe timed out after ..."), or an
	// unexpected answer.
	Err string
}

// RoleMismatch reports a split-brain condition: the server is reachable, a
// role was detected, and it differs from the configured one (a configured
// replica that is not in recovery, or a configured primary that is). A
// verdict with no detected or no configured role is not a mismatch: there is
// no evidence either way.
func (v Verdict) RoleMismatch() bool {
	return v.Reachable && v.Configured != RoleUnknown && v.Detected != RoleUnknown && v.Detected != v.Configured
}

// Snapshot is an immutable table of the latest verdict of every target that
// has been probed at least once. A Checker publishes a new Snapshot for
// every new verdict and never modifies an old one, so a Snapshot may be read
// from any number of goroutines without locks and kept as long as needed.
type Snapshot struct {
	verdicts []Verdict      // in target order (the order SetTargets was given)
	index    map[string]int // Addr -> position in verdicts
	changed  chan struct{}  // closed when a newer snapshot replaces this one
}

func newSnapshot(verdicts []Verdict) *Snapshot {
	s := &Snapshot{
		verdicts: verdicts,
		index:    make(map[string]int, len(verdicts)),
		changed:  make(chan struct{}),
	}
	for i, v := range verdicts {
		s.index[v.Addr] = i
	}
	return s
}

// Get returns the verdict for the server at addr, and false when there is
// none (not a target, or not probed yet). A nil Snapshot has no verdicts.
func (s *Snapshot) Get(addr string) (Verdict, bool) {
	if s == nil {
		return Verdict{}, false
	}
	i, ok := s.index[addr]
	if !ok {
		return Verdict{}, false
	}
	return s.verdicts[i], true
}

// All returns every verdict in target order, in a slice the caller owns.
func (s *Snapshot) All() []Verdict {
	if s == nil {
		return nil
	}
	return slices.Clone(s.verdicts)
}

// Changed returns a channel that is closed when a newer snapshot replaces s.
// A waiter that finds nothing eligible in s waits on it (with its own
// deadline) and then looks at the Checker's new Snapshot; no publication
// between the two can be missed. After the Checker is closed no further
// snapshot is published, so the channel of the last one is never closed.
func (s *Snapshot) Changed() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.changed
}
