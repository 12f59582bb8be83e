package proxy

import (
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
)

// Targets and reasons use SPEC §8's vocabulary.
const (
	targetPrimary  = "primary"
	targetReplica  = "replica"
	targetRejected = "rejected"

	reasonRead               = "read"
	reasonWrite              = "write"
	reasonHintPrimary        = "hint_primary"
	reasonInTransaction      = "in_transaction"
	reasonSessionPinned      = "session_pinned"
	reasonReplicaUnavailable = "replica_unavailable"
	reasonRoutingOff         = "routing_off"
	reasonUnclassified       = "unclassified"
	reasonReadYourWrites     = "read_your_writes"
	reasonStrictFresh        = "strict_fresh"
	reasonSplitBrain         = "split_brain"
	reasonFallbackOverload   = "fallback_overload"
	reasonClassPrimaryOnly   = "class_primary_only"
	reasonClassNotEnabled    = "class_not_enabled"
	reasonRollback           = "rollback"
)

// candidate is a replica of the route as the router sees it for one unit.
type candidate struct {
	addr     string
	weight   int
	eligible bool
	reason   string // why not eligible (SPEC §8 word)
	lagMS    int64  // the replica's measured lag, -1 unknown
}

// unitInfo is what the router knows about a unit of work.
type unitInfo struct {
	read      bool   // every statement may run on a replica
	reason    string // why not, when !read: write, unclassified, ...
	hintPrim  bool   // /* pg-kinetic: primary */
	txStart   bool   // the unit opens a transaction (it will be pinned wherever it goes)
	pinEffect bool   // a statement pins the session to the primary
	txEnd     bool   // a statement ends a transaction
	begins    bool   // a statement (any, not only the first) opens a transaction block
	lastTx    byte   // the last transaction statement: 'b' a BEGIN, 'e' a COMMIT or ROLLBACK, 0 none
	restore   string // the client's startup values its RESETs reset (restoreQuery), "" if none
	copyIn    bool   // COPY ... FROM STDIN

	// Freshness hints (SPEC §4).
	staleOK, strict bool
	class           string // declared by a class= hint
	minLSN          freshness.Token
	hintErr         string // an invalid hint: the unit fails with 22023
}

// sessionInfo is the session state the decision depends on.
type sessionInfo struct {
	mode, fallback string // read_routing_mode, fallback_policy
	inTx           bool   // a transaction is open on cur
	pinned         string // pin reason, "" if not pinned
	cur            string // address of the server with responses outstanding, "" if none
	curReplica     bool
	affine         string // the replica a read-your-writes read stays on while eligible, "" if none
}

// decision is where a unit goes and why.
type decision struct {
	target string // targetPrimary, targetReplica or targetRejected
	addr   string // replica address when target is targetReplica
	reason string
	lagMS  int64 // the chosen replica's lag (SHOW pg_kinetic.last_route)
}

// decide routes one unit. It is pure: the candidates carry eligibility, rnd
// in [0,1) picks among weights.
//
// Worked examples (mode prefer_replica, fallback primary):
//
//	read, replicas A(eligible, w=1) B(eligible, w=3), rnd=0.5  -> replica B, "read"
//	read, A down, B down                                        -> primary, "replica_unavailable"
//	read, A down, B behind the session's token                  -> primary, "read_your_writes"
//	read inside BEGIN on the primary                            -> primary, "in_transaction"
//	INSERT                                                      -> primary, "write"
//	/* pg-kinetic: primary */ SELECT                            -> primary, "hint_primary"
//	read after CREATE TEMP TABLE                                -> primary, "session_pinned"
//	read, require_replica, no replica eligible                  -> rejected, "replica_unavailable"
//	read while a read on replica A still streams, A eligible    -> replica A (no hop mid-pipeline)
func decide(s sessionInfo, u unitInfo, cands []candidate, rnd float64) decision {
	switch {
	case s.inTx && s.cur != "":
		if s.curReplica {
			return decision{target: targetReplica, addr: s.cur, reason: reasonInTransaction}
		}
		return decision{target: targetPrimary, reason: reasonInTransaction}
	case s.mode == config.RoutingOff || s.mode == "":
		return decision{target: targetPrimary, reason: reasonRoutingOff}
	case s.pinned != "":
		return decision{target: targetPrimary, reason: reasonSessionPinned}
	case u.pinEffect:
		return decision{target: targetPrimary, reason: reasonSessionPinned}
	case !u.read:
		return decision{target: targetPrimary, reason: u.reason}
	case u.hintPrim:
		return decision{target: targetPrimary, reason: reasonHintPrimary}
	}
	// A read. Stay on the replica still answering this session, when it may
	// serve the read too: results must reach the client in order.
	if s.cur != "" && s.curReplica {
		for _, c := range cands {
			if c.addr == s.cur && c.eligible && c.weight > 0 {
				return decision{target: targetReplica, addr: c.addr, reason: reasonRead, lagMS: c.lagMS}
			}
		}
	}
	// A read that must see the session's writes stays on the replica it
	// last used (affinity.go): a running standby never replays backwards.
	if s.affine != "" {
		for _, c := range cands {
			if c.addr == s.affine && c.eligible && c.weight > 0 {
				return decision{target: targetReplica, addr: c.addr, reason: reasonRead, lagMS: c.lagMS}
			}
		}
	}
	// Why no replica: the weightiest reason among the replicas (see
	// reasonWeight), the last one in config order among equals.
	total, why := 0, reasonReplicaUnavailable
	for _, c := range cands {
		if c.eligible && c.weight > 0 {
			total += c.weight
		} else if c.reason != "" && reasonWeight(c.reason) >= reasonWeight(why) {
			why = c.reason
		}
	}
	if total == 0 {
		if s.mode == config.RoutingRequireReplica || s.fallback == config.FallbackReject {
			return decision{target: targetRejected, reason: why}
		}
		return decision{target: targetPrimary, reason: why}
	}
	pick := int(rnd * float64(total))
	for _, c := range cands {
		if !c.eligible || c.weight <= 0 {
			continue
		}
		if pick < c.weight {
			return decision{target: targetReplica, addr: c.addr, reason: reasonRead, lagMS: c.lagMS}
		}
		pick -= c.weight
	}
	return decision{target: targetPrimary, reason: why} // unreachable
}

// reasonWeight orders the reasons a replica was not eligible, for the one
// a read that fell back reports: a replica that is not what it should be
// (split brain, another timeline) first, then one that is up but not fresh
// enough for this read, then one that is down or unknown. The order does
// not depend on which replica comes first in the config.
func reasonWeight(reason string) int {
	switch reason {
	case reasonSplitBrain, "timeline_changed":
		return 2
	case reasonReplicaUnavailable:
		return 0
	}
	return 1
}

// decideSessionServer picks the server a session is bound to at startup:
// in session pooling, the route's primary. It is the server whose process
// ID the client is given (pg_backend_pid(), cancel), and the only server
// that accepts every statement; units are routed on top of this binding.
func decideSessionServer(r *config.Route) decision {
	return decision{target: targetPrimary, addr: r.Primary.Address, reason: reasonRoutingOff}
}
