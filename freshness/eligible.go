package freshness

import (
	"time"

	"github.com/pg-kinetic/pg-kinetic/health"
)

// Reason words of SPEC §8 that Eligible returns. They are the labels of
// kinetic_route_decisions_total and friends, so they never change spelling.
const (
	// ReasonReplicaUnavailable: no verdict yet, unreachable at the last
	// probe, or not a standby (configured or detected) without being a
	// split brain.
	ReasonReplicaUnavailable = "replica_unavailable"
	// ReasonSplitBrain: reachable, configured as a replica, detected as a
	// primary (health.Verdict.RoleMismatch); or a system identifier other
	// than the route primary's (health.Verdict.IdentityMismatch).
	ReasonSplitBrain = "split_brain"
	// ReasonLagUnknown: the verdict is older than the requirement's
	// VerdictTTL, so nothing current is known about the replica; or a lag
	// budget applies and the verdict's lag is unknown.
	ReasonLagUnknown = "lag_unknown"
	// ReasonTimelineChanged: the read's floor is on another timeline than
	// the replica, or than the route primary.
	ReasonTimelineChanged = "timeline_changed"
	// ReasonReadYourWrites: the replica has not replayed the read's floor
	// (the session's token, or its monotonic-read floor).
	ReasonReadYourWrites = "read_your_writes"
	// ReasonStrictFresh: the replica has not replayed the primary's
	// position read when a strict-fresh statement began.
	ReasonStrictFresh = "strict_fresh"
	// ReasonLagExceeded: the replica's lag is over the read's budget.
	ReasonLagExceeded = "lag_exceeded"
)

// Requirement is what a read needs from a replica. Every field but
// VerdictTTL is optional: its zero value requires nothing.
type Requirement struct {
	// VerdictTTL is the oldest a verdict may be (routes.ha.verdict_ttl_ms,
	// with its 0 already resolved by the caller to 2·interval + timeout).
	// Required: a zero or negative TTL makes every verdict taken before now
	// unknown, which fails closed.
	VerdictTTL time.Duration

	// Floor is the position the replica must have replayed: the session's
	// read-your-writes token raised to its monotonic-read floor (SPEC §5),
	// or, with Strict, the primary's position read as the statement began.
	// Its Timeline 0 means the current one, PrimaryTimeline. The zero Token
	// requires nothing.
	Floor Token
	// Strict says Floor comes from a strict-fresh statement: a replica
	// below it is refused as "strict_fresh" instead of "read_your_writes".
	Strict bool
	// PrimaryTimeline is the route primary's current timeline, from its
	// latest verdict (health.Snapshot.Primary); 0 when unknown. A floor on
	// another timeline cannot be served by any replica.
	PrimaryTimeline uint32

	// MaxLagMS and MaxLagBytes are the lag budget (max_replica_lag_ms,
	// max_replica_lag_bytes): a replica whose LagMS or LagBytes is above
	// the budget, or unknown, is refused. 0 means no budget.
	MaxLagMS    int64
	MaxLagBytes int64
}

// Eligible decides whether the replica whose latest verdict is v (have:
// whether there is one) may serve a read needing req at time now. It returns
// true and "", or false and the SPEC §8 reason word.
//
// The rules, first match wins:
//
//  1. no verdict (have = false)                       → replica_unavailable
//  2. unreachable at the last probe                   → replica_unavailable
//  3. a split brain (health.Verdict.SplitBrain), or configured as a
//     standby and detected as a primary              → split_brain
//  4. not detected as a standby, or not a configured
//     server of the route                             → replica_unavailable
//     (a configured primary that rejoined as a standby of an elected
//     primary serves reads: follow_failover)
//  5. now − ProbedAt > VerdictTTL                     → lag_unknown
//  6. system identifier not the route primary's       → split_brain
//  7. a Floor is set, and its timeline (Floor.Timeline, or PrimaryTimeline
//     when that is 0) is known and is not the replica's Timeline, or not
//     PrimaryTimeline when that is known              → timeline_changed
//  8. a Floor is set and ReplayLSN < Floor.LSN        → read_your_writes
//     (strict_fresh with Strict)
//  9. a budget is set and the lag is over it          → lag_exceeded
//  10. a budget is set and its lag is unknown (−1)    → lag_unknown
//  11. otherwise                                      → eligible
//
// Bad news is reported whatever its age: a replica last seen down is
// "unavailable" rather than "unknown" even while its probe loop backs off
// for longer than the TTL, and a split brain stays one until a probe says
// otherwise. Good news counts only while fresh. A verdict exactly VerdictTTL
// old is still fresh (SPEC: "older than verdict_ttl_ms is unknown"); one
// stamped after now (a probe that began after the caller read its clock) is
// fresh.
//
// Positions compare as 64-bit numbers (0/FFFFFFFF < 1/0), and only on one
// timeline. A floor from an older timeline than the replica's, or the
// primary's, may lie before the switch point and so be on the replica's
// history too, but proving it needs the timeline history, which Eligible
// does not have: it never claims so, and the read goes to the primary
// (SPEC §5). A replica still on the floor's timeline after the primary moved
// to a newer one is refused just the same: it follows a dead history. With
// Timeline 0 on both the floor and PrimaryTimeline nothing is known to
// compare, and positions alone decide. A replica whose Timeline is unknown
// (0) fails rule 7 whenever the floor's timeline is known.
//
// A lag equal to its budget is within it. Lag is as of the verdict's probe
// (health.EstimateLag), and the verdict is at most VerdictTTL old.
//
// For example, with VerdictTTL = 4.75s (the defaults: 2·2s + 750ms),
// now = 12:00:10.000 and a replica configured as a standby:
//
//	reachable standby, probed 12:00:08.000 (2s old)      → true,  ""
//	reachable standby, probed 12:00:05.250 (4.75s old)   → true,  ""
//	reachable standby, probed 12:00:05.249 (4.751s old)  → false, "lag_unknown"
//	reachable primary (promoted), probed 12:00:09.000    → false, "split_brain"
//	unreachable, probed 11:59:40.000 (30s old)           → false, "replica_unavailable"
//	no verdict yet (have = false)                        → false, "replica_unavailable"
//
// and for a fresh reachable standby on timeline 2 that has replayed
// 1/00000010, lagging 300 ms and 4096 bytes, with PrimaryTimeline 2:
//
//	no floor, no budget                                  → true,  ""
//	another cluster's system identifier                  → false, "split_brain"
//	Floor 2:1/10                                         → true,  ""
//	Floor 1/10 (bare: the primary's timeline 2)          → true,  ""
//	Floor 2:0/FFFFFFFF (below: 0/FFFFFFFF < 1/0 < 1/10)  → true,  ""
//	Floor 2:1/9 (below, though "1/9" > "1/10" as text)   → true,  ""
//	Floor 2:1/11                                         → false, "read_your_writes"
//	Floor 2:1/11, Strict                                 → false, "strict_fresh"
//	Floor 1:0/500 (older timeline)                       → false, "timeline_changed"
//	Floor 3:1/0 (newer than the replica and primary)     → false, "timeline_changed"
//	MaxLagMS 300                                         → true,  ""
//	MaxLagMS 299                                         → false, "lag_exceeded"
//	MaxLagBytes 4095                                     → false, "lag_exceeded"
//	MaxLagMS 2500, lag unknown (LagMS −1)                → false, "lag_unknown"
func Eligible(v health.Verdict, have bool, req Requirement, now time.Time) (ok bool, reason string) {
	switch {
	case !have:
		return false, ReasonReplicaUnavailable
	case !v.Reachable:
		return false, ReasonReplicaUnavailable
	case v.SplitBrain || (v.Configured == health.RoleStandby && v.Detected == health.RolePrimary):
		return false, ReasonSplitBrain
	case v.Detected != health.RoleStandby || v.Configured == health.RoleUnknown:
		return false, ReasonReplicaUnavailable
	case now.Sub(v.ProbedAt) > req.VerdictTTL:
		return false, ReasonLagUnknown
	case v.IdentityMismatch:
		return false, ReasonSplitBrain
	}
	if !req.Floor.IsZero() {
		tl := req.Floor.Timeline
		if tl == 0 {
			tl = req.PrimaryTimeline
		}
		if tl != 0 && (v.Timeline != tl || (req.PrimaryTimeline != 0 && req.PrimaryTimeline != tl)) {
			return false, ReasonTimelineChanged
		}
		if LSN(v.ReplayLSN) < req.Floor.LSN {
			if req.Strict {
				return false, ReasonStrictFresh
			}
			return false, ReasonReadYourWrites
		}
	}
	switch {
	case req.MaxLagMS > 0 && v.LagMS > req.MaxLagMS,
		req.MaxLagBytes > 0 && v.LagBytes > req.MaxLagBytes:
		return false, ReasonLagExceeded
	case req.MaxLagMS > 0 && v.LagMS < 0,
		req.MaxLagBytes > 0 && v.LagBytes < 0:
		return false, ReasonLagUnknown
	}
	return true, ""
}
