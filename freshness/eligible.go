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
	// primary (health.Verdict.RoleMismatch).
	ReasonSplitBrain = "split_brain"
	// ReasonLagUnknown: the verdict is older than the requirement's
	// VerdictTTL, so nothing current is known about the replica.
	ReasonLagUnknown = "lag_unknown"
)

// Requirement is what a read needs from a replica. This release: only a
// recent health verdict; the next adds LSN floors, lag budgets and
// strict-fresh.
type Requirement struct {
	// VerdictTTL is the oldest a verdict may be (routes.ha.verdict_ttl_ms,
	// with its 0 already resolved by the caller to 2·interval + timeout).
	// Required: a zero or negative TTL makes every verdict taken before now
	// unknown, which fails closed.
	VerdictTTL time.Duration
}

// Eligible decides whether the replica whose latest verdict is v (have:
// whether there is one) may serve a read needing req at time now. It returns
// true and "", or false and the SPEC §8 reason word.
//
// The rules, first match wins:
//
//  1. no verdict (have = false)                       → replica_unavailable
//  2. unreachable at the last probe                   → replica_unavailable
//  3. configured as a standby, detected as a primary  → split_brain
//  4. not both configured and detected as a standby   → replica_unavailable
//  5. now − ProbedAt > VerdictTTL                     → lag_unknown
//  6. otherwise                                       → eligible
//
// Bad news is reported whatever its age: a replica last seen down is
// "unavailable" rather than "unknown" even while its probe loop backs off
// for longer than the TTL, and a split brain stays one until a probe says
// otherwise. Good news counts only while fresh. A verdict exactly VerdictTTL
// old is still fresh (SPEC: "older than verdict_ttl_ms is unknown"); one
// stamped after now (a probe that began after the caller read its clock) is
// fresh.
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
// Later rules (system identifier, timeline, replay LSN against the read's
// floor, lag budget) slot in after rule 5.
func Eligible(v health.Verdict, have bool, req Requirement, now time.Time) (ok bool, reason string) {
	switch {
	case !have:
		return false, ReasonReplicaUnavailable
	case !v.Reachable:
		return false, ReasonReplicaUnavailable
	case v.Configured == health.RoleStandby && v.Detected == health.RolePrimary:
		return false, ReasonSplitBrain
	case v.Configured != health.RoleStandby || v.Detected != health.RoleStandby:
		return false, ReasonReplicaUnavailable
	case now.Sub(v.ProbedAt) > req.VerdictTTL:
		return false, ReasonLagUnknown
	}
	return true, ""
}
