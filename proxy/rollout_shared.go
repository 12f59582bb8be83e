package proxy

import (
	"maps"
)

// The rollout state shared by every kineticd of a route ([rollout] shared,
// SPEC §2, §6) lives in one row per route in pgkinetic.rollout_state on
// the route's primary (deploy/sql/pg_kinetic_rollout.sql). Each row has a
// version that every change increments by compare-and-set (UPDATE ...
// WHERE version = expected); a change is announced with NOTIFY
// pg_kinetic_rollout and every instance also reads the row every second.
// Conflicts are settled by the version alone, never by a clock:
//
//   - No local change pending: the row wins, whatever it says.
//   - A local change made when the row was at version B (its base), and
//     the row still at B: the change is written as version B+1.
//   - The row moved past B meanwhile (another instance changed it while
//     this one could not reach the primary, or won the race): the row
//     wins and the local change is dropped (logged), except that a local
//     ROLLBACK is never lost: when the row is not rolled back, the
//     rollback is written on top of it (the row's stage, rolled back, as
//     the row's version + 1). Between a rollback and a re-enable made
//     concurrently, the safer state wins.
//
// planSync is that rule; the syncer (rollout_sync.go) does the I/O.

// rolloutState is a stage and whether routing is rolled back.
type rolloutState struct {
	Stage      int  `json:"stage"`
	RolledBack bool `json:"rolled_back"`
}

// sharedState is a route's row: a state and its version (0: no row seen).
type sharedState struct {
	rolloutState
	Version int64 `json:"version"`
}

// localChange is an operator's change (or auto_rollback's) on this
// instance that the route's row does not hold yet. Base is the row's
// version this instance knew when the change was made.
type localChange struct {
	rolloutState
	Base int64  `json:"base"`
	seq  uint64 // tells a newer local change from the one being written
}

// routeRollout is one instance's view of one route's shared state. Values
// are immutable once in rollout.routes: changes replace the pointer.
type routeRollout struct {
	Known   sharedState  `json:"known"`
	Pending *localChange `json:"pending,omitempty"`
}

// syncAction is what one read of the row leads to.
type syncAction int

const (
	syncNothing syncAction = iota // the view already matches the row
	syncAdopt                     // take the row; drop any pending change
	syncWrite                     // write `write` expecting version `expect` (0: insert)
)

type syncPlan struct {
	action syncAction
	write  rolloutState
	expect int64
	// dropped: a pending change that differs from the row is discarded
	// because the row moved on (log it).
	dropped bool
}

// planSync decides what to do with view given the row read from the
// primary (haveRow false: the table has no row for the route). Pure.
//
// Worked examples (view known@version, pending/base; row):
//
//	known 2@5, none;            row 3@6          -> adopt 3@6
//	known 2@5, ROLLBACK/base 5; row 2@5          -> write rollback expecting 5 (becomes 6)
//	known 2@5, STAGE 3/base 5;  row 1,rb@7       -> adopt 1,rb@7, STAGE 3 dropped
//	known 2@5, ROLLBACK/base 5; row 3@7          -> write 3,rb expecting 7 (a rollback is never lost)
//	known 2@5, ROLLBACK/base 5; row 3,rb@7       -> adopt 3,rb@7 (already rolled back)
//	none,      STAGE 1/base 0;  no row           -> insert 1 (version 1)
//	known 2@5, none;            no row           -> nothing (keep the last state known)
func planSync(view routeRollout, row sharedState, haveRow bool) syncPlan {
	p := view.Pending
	switch {
	case p == nil && !haveRow:
		return syncPlan{action: syncNothing}
	case p == nil:
		if view.Known == row {
			return syncPlan{action: syncNothing}
		}
		return syncPlan{action: syncAdopt}
	case !haveRow:
		return syncPlan{action: syncWrite, write: p.rolloutState, expect: 0}
	case row.Version == p.Base:
		return syncPlan{action: syncWrite, write: p.rolloutState, expect: row.Version}
	case p.RolledBack && !row.RolledBack:
		return syncPlan{action: syncWrite, write: rolloutState{Stage: row.Stage, RolledBack: true}, expect: row.Version}
	default:
		return syncPlan{action: syncAdopt, dropped: p.rolloutState != row.rolloutState}
	}
}

// view is route's shared view (zero when none) and whether sharing is on.
func (r *rollout) view(route string) (routeRollout, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.routes[route]
	if v == nil {
		return routeRollout{}, r.shared
	}
	out := *v
	if v.Pending != nil {
		pc := *v.Pending
		out.Pending = &pc
	}
	return out, r.shared
}

// adopt makes row route's known state and drops the pending change
// numbered seq (0: none was pending when the row was read). A newer local
// change, made after the row was read, stays pending, now based on the
// row's version.
func (r *rollout) adopt(route string, row sharedState, seq uint64) error {
	return r.update(route, func(v *routeRollout) {
		v.Known = row
		switch {
		case v.Pending == nil:
		case v.Pending.seq == seq:
			v.Pending = nil
		default:
			pc := *v.Pending
			pc.Base = row.Version
			v.Pending = &pc
		}
	})
}

// written records that this instance wrote st as version to route's row
// for the pending change numbered seq; as adopt (its own write is no
// concurrent change to a newer local change).
func (r *rollout) written(route string, st rolloutState, version int64, seq uint64) error {
	return r.adopt(route, sharedState{rolloutState: st, Version: version}, seq)
}

// update replaces route's view by f's change of a copy, persisted first.
func (r *rollout) update(route string, f func(*routeRollout)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := routeRollout{}
	if old := r.routes[route]; old != nil {
		v = *old
	}
	f(&v)
	routes := maps.Clone(r.routes)
	routes[route] = &v
	if err := r.writeLocked(rolloutFile{Stage: r.stage, RolledBack: r.rolledBack, Routes: routes}); err != nil {
		return err
	}
	r.routes = routes
	return nil
}
