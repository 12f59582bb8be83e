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
// Zero means unknown for every WAL field: the server was unreachable, the
// field does not apply to its detected role, or PostgreSQL reported NULL.
// Lag is the exception, -1 when unknown, because 0 is the common good news.
type Verdict struct {
	Target
	// Reachable is true when the probe connected and its query answered.
	Reachable bool
	// Detected is the role pg_is_in_recovery() reported; RoleUnknown when
	// the server was unreachable.
	Detected Role
	// SystemID is pg_control_system().system_identifier as decimal text,
	// "" when unreachable. Every server of a route must report the same
	// one: see IdentityMismatch.
	SystemID string
	// ProbedAt is when the probe began, read from the Checker's clock. The
	// state a verdict describes is at least this recent.
	ProbedAt time.Time
	// Err is the probe's error ("" when it succeeded): a connect failure, an
	// authentication error, a timeout ("probe timed out after ..."), or an
	// unexpected answer.
	Err string

	// Timeline is the timeline the server is on. A primary: the one it
	// writes, from the name of its current WAL file (exact at once after a
	// promotion, unlike pg_control_checkpoint(), which waits for a
	// checkpoint). A standby: the one its WAL receiver streams
	// (pg_stat_wal_receiver.received_tli); without a receiver, or when the
	// probe user may not read the receiver's details (it needs
	// pg_read_all_stats), the one it replays as IDENTIFY_SYSTEM answers
	// when the probe user has REPLICATION and a primary was seen on a
	// later timeline (PGProber.Probe), else the timeline of its latest
	// restartpoint or minimum recovery point, which can lag a timeline
	// switch by up to checkpoint_timeout. 0: unknown.
	Timeline uint32
	// CurrentLSN is a primary's WAL insert position,
	// pg_current_wal_insert_lsn(), made comparable with replay positions by
	// NormalizeInsertLSN (an insert position just past a page header means
	// the page boundary, where a caught-up standby's replay stops). 0 on a
	// standby, or unknown.
	CurrentLSN uint64
	// ReceiveLSN is a standby's pg_last_wal_receive_lsn(): WAL received and
	// flushed to its disk. 0 on a primary, or when nothing was streamed.
	ReceiveLSN uint64
	// ReplayLSN is a standby's pg_last_wal_replay_lsn(): WAL replayed, so
	// visible to its queries. Read-your-writes compares tokens with it. 0 on
	// a primary, or unknown.
	ReplayLSN uint64
	// ReplayPaused is a standby's pg_is_wal_replay_paused(): replay paused
	// or a pause requested. Its ReplayLSN will not move until resumed.
	ReplayPaused bool
	// StartedAt is the server's pg_postmaster_start_time(), zero if
	// unknown. A standby whose StartedAt changed restarted: it may have
	// come back behind what it served before (crash recovery stops at its
	// minimum recovery point).
	StartedAt time.Time
	// History is a primary's timeline history: where each earlier
	// timeline of its lineage was left (TimelineHistory.SwitchPoint). Nil
	// on timeline 1, on a standby, or when the probe user may not read it
	// (see PGProber.Probe); shared, never modified.
	History *TimelineHistory
	// LagBytes is how much WAL a standby has not replayed: the route
	// primary's latest CurrentLSN minus ReplayLSN, at least 0. LagMS is how
	// long ago the primary was last known to be at ReplayLSN, 0 when the
	// standby has replayed everything the primary was known to have
	// written (see EstimateLag for the exact rule and its bounds). Both are
	// as of ProbedAt, computed by the Checker from the route primary's
	// samples recorded by then (read before this standby's replay
	// position): one that arrives later but was read earlier updates them
	// in the same snapshot as the primary's verdict; one read later waits
	// for the standby's next probe, since the primary writing after the
	// standby was last seen is no evidence that it lags. Both are -1 when
	// unknown: the server is not a reachable detected standby, the route
	// has no configured primary or no sample of it, the two are on
	// different timelines or of different clusters, or (LagMS only) the
	// standby is behind every sample the Checker kept. A reachable route
	// primary has 0 and 0.
	LagBytes int64
	LagMS    int64
	// IdentityMismatch: the server's system identifier differs from the
	// one the route's configured primary last reported (SPEC §5 identity):
	// it is a copy of another cluster, and gets no reads. False when either
	// is unknown, and always for the route primary itself.
	IdentityMismatch bool
	// Elected: the server is the route's primary for writes. With fixed
	// roles, the configured primary; with follow_failover, the server the
	// election chose (Elect), which may be a configured replica.
	Elected bool
	// SplitBrain: the server gets no reads and no writes for its role. With
	// fixed roles, RoleMismatch; with follow_failover, a reachable server
	// not in recovery that is not the elected primary (a lower timeline,
	// or a second primary on the same one).
	SplitBrain bool
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
	// elections by route, for a Checker that follows failovers.
	elections map[string]Election
}

// NewSnapshot returns a Snapshot of the given verdicts, as a Checker
// would publish them: for fakes and tests of code that reads snapshots.
func NewSnapshot(verdicts ...Verdict) *Snapshot { return newSnapshot(verdicts) }

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
	if len(s.verdicts) <= 8 {
		// A route's few servers: comparing addresses costs less than
		// hashing one (routing asks for every replica on every unit).
		// From the end: the last verdict of an address wins, as in index.
		for i := len(s.verdicts) - 1; i >= 0; i-- {
			if s.verdicts[i].Addr == addr {
				return s.verdicts[i], true
			}
		}
		return Verdict{}, false
	}
	i, ok := s.index[addr]
	if !ok {
		return Verdict{}, false
	}
	return s.verdicts[i], true
}

// Primary returns the verdict of the route's primary: the elected one
// (Verdict.Elected) when there is one, else the configured primary (the
// first target configured RolePrimary, in target order); false when there
// is neither yet. A Checker serving several routes has one per route; ask
// Get with the address instead.
func (s *Snapshot) Primary() (Verdict, bool) {
	if s == nil {
		return Verdict{}, false
	}
	for _, v := range s.verdicts {
		if v.Elected {
			return v, true
		}
	}
	for _, v := range s.verdicts {
		if v.Configured == RolePrimary {
			return v, true
		}
	}
	return Verdict{}, false
}

// Election returns the route's election as of this snapshot
// (follow_failover; see Elect), and false when the Checker does not
// follow failovers or does not probe the route. Before the route's first
// verdicts it is the seeded one (Options.Elections), or the zero
// Election.
func (s *Snapshot) Election(route string) (Election, bool) {
	if s == nil {
		return Election{}, false
	}
	e, ok := s.elections[route]
	return e, ok
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
