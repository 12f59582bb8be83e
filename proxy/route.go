package proxy

import (
	"cmp"
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

// Targets and reasons use SPEC §8's vocabulary: one constant per word.
// The words for a replica that may not serve a read are freshness's
// (Eligible returns them); the others are the router's own.
const (
	targetPrimary  = "primary"
	targetReplica  = "replica"
	targetRejected = "rejected"

	reasonRead             = "read"
	reasonWrite            = "write"
	reasonHintPrimary      = "hint_primary"
	reasonInTransaction    = "in_transaction"
	reasonSessionPinned    = "session_pinned"
	reasonRoutingOff       = "routing_off"
	reasonUnclassified     = "unclassified"
	reasonFallbackOverload = "fallback_overload"
	reasonClassPrimaryOnly = "class_primary_only"
	reasonClassNotEnabled  = "class_not_enabled"
	reasonRollback         = "rollback"

	reasonReplicaUnavailable = freshness.ReasonReplicaUnavailable
	reasonReadYourWrites     = freshness.ReasonReadYourWrites
	reasonStrictFresh        = freshness.ReasonStrictFresh
	reasonSplitBrain         = freshness.ReasonSplitBrain
	reasonLagExceeded        = freshness.ReasonLagExceeded
	reasonLagUnknown         = freshness.ReasonLagUnknown
	reasonTimelineChanged    = freshness.ReasonTimelineChanged
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
	read      bool     // every statement may run on a replica
	reason    string   // why not, when !read: write, unclassified, ...
	hintPrim  bool     // /* pg-kinetic: primary */
	txStart   bool     // the unit opens a transaction (it will be pinned wherever it goes)
	pinEffect bool     // a statement pins the session to the primary
	txEnd     bool     // a statement ends a transaction
	commits   bool     // a statement is a COMMIT or END (not a ROLLBACK)
	begins    bool     // a statement (any, not only the first) opens a transaction block
	lastTx    byte     // the last transaction statement: 'b' a BEGIN, 'e' a COMMIT or ROLLBACK, 0 none
	chained   bool     // a COMMIT or ROLLBACK AND CHAIN: the transaction, and its portals, end; another begins
	restore   string   // the client's startup values its RESETs reset (restoreQuery), "" if none
	copyIn    bool     // COPY ... FROM STDIN
	cancels   []uint32 // PIDs it calls pg_cancel_backend for (constants, bound parameters)
	// mayWAL: some statement may write WAL (not provably SET, LISTEN,
	// UNLISTEN or NOTIFY; anything unclassified): after it, on the
	// primary, the session's token and floor are brought up to date.
	mayWAL bool

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
	// balance: the read will stay where it goes (affine), so it goes to
	// the replica with the fewest sessions staying there for its weight,
	// or leaves its own for one with fewer by more than itself (counts,
	// affinity.go). nil: weighted random.
	balance *affineCounts
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
	// It moves when another replica it may use has fewer sessions staying
	// there by more than itself, so sessions that settled while a replica
	// was down or busy spread out again.
	if s.affine != "" {
		for _, c := range cands {
			if c.addr == s.affine && c.eligible && c.weight > 0 {
				if b, ok := s.balance.lighter(c, cands); ok {
					c = b
				}
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
	if s.balance != nil {
		c := s.balance.lightest(cands, rnd)
		return decision{target: targetReplica, addr: c.addr, reason: reasonRead, lagMS: c.lagMS}
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
	case reasonSplitBrain, reasonTimelineChanged:
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

// What a unit's plan asks the caller for: facts that cost I/O, needed
// only when the rules before them leave the unit a read for a replica.
type planNeed int

const (
	needNothing  planNeed = iota
	needPosition          // the session's latest write position (its captures answered, no debt)
	needStrict            // the primary's current WAL position, for a strict-fresh read
)

// unitFacts are what routing one unit depends on before a server is
// chosen. Those that cost I/O start unknown; planUnit asks for them
// (unitPlan.need) and the caller fills them in.
type unitFacts struct {
	unit       unitInfo
	route      *config.Route
	fresh      bool   // read routing is on for the route and it has replicas (freshnessOn)
	queryClass string // SET pg_kinetic.query_class: the session's class when the unit declares none
	stage      int    // the rollout stage in force, and whether it was rolled back (SPEC §6)
	rolledBack bool
	// The configured primary's latest verdict: its timeline, and whether
	// it reports pg_is_in_recovery() (split brain).
	primaryTimeline   uint32
	primaryInRecovery bool
	staysPut          bool // the unit stays in the transaction block open on its server (staysPut)
	// serializable: the session's default_transaction_isolation is
	// SERIALIZABLE (serializableByDefault).
	serializable bool
	sticky       bool // a write within sticky_primary_window_ms
	// needPosition: whether the session's latest write position is known,
	// and its freshness state then (fresh.go): the monotonic-read floor,
	// the write token, SET pg_kinetic.min_lsn.
	positionAsked, positionKnown bool
	floor, token, minLSN         freshness.Token

	strictAsked, strictOK bool // needStrict
	strictPos             freshness.Token

	// primaryHistory is the primary's timeline history (nil when unknown):
	// positions of an earlier timeline are carried onto the primary's by it
	// (freshness.Carry), and a token beyond its switch point is a lost
	// write.
	primaryHistory *health.TimelineHistory
	// unsure is the session's write whose position was never read
	// (unsureWrite); once the primary is on a later timeline it may have
	// been lost.
	unsure unsureWrite
	// prior is the session's token of an earlier timeline not judged yet
	// (sessionFreshness.prior), gathered with the token.
	prior freshness.Token
	// told is the token the session was told KN002 with and kept
	// (sessionFreshness.told), gathered with the token.
	told freshness.Token
}

// unitPlan is what planUnit decides for a unit before a server is chosen.
type unitPlan struct {
	// unit is the unit as routing sees it: read and txStart cleared, and
	// reason set, when a rule sends it to the primary.
	unit     unitInfo
	class    classPolicy // the class policy in force (zero when none applies)
	fallback string      // the fallback_policy that applies to it
	// fail, when set, is the error the unit fails with instead of being
	// routed; rejected is then the reason SHOW pg_kinetic.last_route
	// reports for it ("" to leave last_route alone).
	fail     *pgproto3.ErrorResponse
	rejected string
	req      freshness.Requirement // what a read needs from a replica (SPEC §5)
	need     planNeed              // a fact to gather before planning again; needNothing when done
	// lost, with fail (KN002): the session's token named a write lost in
	// a failover; the token falls back to this (the switch point, on the
	// primary's timeline), so the read fails once. Without fail (quiet):
	// the token was told already (an unsure write's KN002 left it, the
	// history not known then), and falls back without a second report.
	lost  *freshness.Token
	quiet bool
	// unsureTold, with fail (KN002): the session's unsure write (f.unsure)
	// may have been lost, or its prior token was lost; the session has now
	// been told.
	unsureTold bool
	// priorJudged: f.prior was judged against the primary's history
	// (kept, or told as lost): it is forgotten.
	priorJudged bool
}

// planUnit applies, in order, the rules of SPEC §3–§7 that decide a unit's
// routing before any server is chosen. It is pure: everything it depends
// on is in f, and the facts that cost I/O are asked for (need) only when a
// rule before them leaves the unit a read for a replica. The caller loops:
//
//	for p = planUnit(f); p.need != needNothing; p = planUnit(f) { gather p.need into f }
//
// and then chooses a server with decide. Worked examples (prefer_replica,
// fallback primary, freshness session_write_lsn):
//
//	SELECT, class analytics (primary_only)            -> primary, "class_primary_only"
//	SELECT, class reports (stage 2), rollout stage 1  -> primary, "class_not_enabled"
//	SELECT, class=nosuch hint                         -> fails 22023 "unknown query class"
//	INSERT while the primary reports recovery         -> fails 25006, last_route rejected split_brain
//	SELECT, captures still unanswered                 -> need position; unknown -> primary, "read_your_writes"
//	SELECT stale-ok, captures still unanswered        -> no position asked: the lag budget alone
//	SELECT strict, primary position read              -> floor raised to it, Strict set
//	SELECT strict, primary position unknown           -> primary, "strict_fresh"
//	SELECT within sticky_primary_window after a write -> primary, "read_your_writes"
//	SELECT inside BEGIN on its server                 -> unchanged (decide keeps it there), no I/O asked
//	SELECT, token 1:0/5000100, primary on timeline 2
//	  whose history ends timeline 1 at 0/5000000       -> fails KN002, token falls back to 2:0/5000000
//	SELECT, token 1:0/4000000, same history           -> floor 2:0/4000000 (carried onto timeline 2)
func planUnit(f unitFacts) unitPlan {
	u := f.unit
	p := unitPlan{fallback: f.route.ReadRouting.FallbackPolicy}
	toPrimary := func(reason string) { u.read, u.txStart, u.reason = false, false, reason }

	// The unit's query class and the rollout decide whether a read may
	// leave the primary at all (SPEC §6).
	if f.fresh && (u.read || u.txStart || u.class != "") {
		class, err := resolveClass(f.route, cmp.Or(u.class, f.queryClass), f.stage, f.rolledBack)
		if err != nil {
			p.fail = errorf(codeInvalidParameter, "pg-kinetic: %s", err.Error())
			p.unit = u
			return p
		}
		p.class, p.fallback = class, class.fallback
		switch {
		case class.primary && (u.read || u.txStart):
			toPrimary(class.reason)
		case class.staleOK:
			u.staleOK = true
		}
	}
	if f.fresh && f.route.Freshness.ReadConsistency == config.ConsistencyStrict && (u.read || u.txStart) && !u.staleOK {
		// read_consistency = "strict": every read that does not tolerate
		// staleness is strict-fresh, so it sees what other connections
		// committed before it began (docs/behaviour.md, "Reads across
		// connections").
		u.strict = true
	}
	if f.fresh && !u.read && !u.txStart && f.primaryInRecovery {
		// The configured primary is in recovery: writes fail closed, they
		// go neither to it nor to any replica (SPEC §5, §7).
		p.fail = withDetail(errorf(codeReadOnlyTx, "pg-kinetic: the configured primary is in recovery; writes fail closed"),
			"server "+f.route.Primary.Address+" reports pg_is_in_recovery() = true (split brain)")
		p.rejected = reasonSplitBrain
		p.unit = u
		return p
	}
	if f.fresh && f.serializable && (u.read || u.txStart) && !f.staysPut {
		// A hot standby runs no serializable transaction (0A000), which
		// every transaction of the session is by default: the primary
		// runs it, as it runs BEGIN ISOLATION LEVEL SERIALIZABLE.
		toPrimary(reasonWrite)
	}
	// Inside a transaction block the unit stays where it is: positions do
	// not matter, and none is asked for.
	routable := f.fresh && (u.read || u.txStart) && !u.hintPrim && !f.staysPut
	if routable && !u.staleOK {
		// (A read that tolerates staleness needs the lag budget only,
		// not the session's positions: requirement.)
		if !f.positionAsked {
			p.need, p.unit = needPosition, u
			return p
		}
		if !f.positionKnown {
			// The session's latest position is not known: only the
			// primary is provably fresh.
			toPrimary(reasonReadYourWrites)
		}
	}
	if f.fresh && usesToken(f.route) && !u.staleOK && (!routable || f.positionAsked) && planLostWrite(f, &p) {
		p.unit = u
		return p
	}
	if routable && (u.read || u.txStart) {
		// Positions of an earlier timeline, provably before its switch
		// point, are positions on the primary's timeline too (SPEC §5).
		token, known, _, _ := freshness.Carry(f.token, f.primaryTimeline, f.primaryHistory)
		if !known {
			token = f.token
		}
		carry := func(t freshness.Token) freshness.Token {
			if c, known, lost, _ := freshness.Carry(t, f.primaryTimeline, f.primaryHistory); known && !lost {
				return c
			}
			return t
		}
		u.minLSN = carry(u.minLSN)
		p.req = requirement(f.route, u, f.primaryTimeline, carry(f.floor), token, carry(f.minLSN))
		if u.strict {
			switch {
			case !f.strictAsked:
				p.need, p.unit = needStrict, u
				return p
			case !f.strictOK:
				toPrimary(reasonStrictFresh)
			default:
				if p.req.Floor.Less(f.strictPos) {
					p.req.Floor = f.strictPos
				}
				p.req.Strict = true
			}
		}
	}
	if f.sticky && (u.read || u.txStart) {
		// A minimum time on the primary after a write, never an expiry of
		// the token rules before it.
		toPrimary(reasonReadYourWrites)
	}
	p.unit = u
	return p
}

// planLostWrite applies SPEC §7 to a unit that needs the session's token:
// the session's last write was lost in a failover (or may have been),
// told at its next unit that is not stale-ok, a write included: the
// session writing again must not hide the loss (docs/behaviour.md). It
// reports whether p now fails the unit.
func planLostWrite(f unitFacts, p *unitPlan) bool {
	if token, _, lost, sp := freshness.Carry(f.token, f.primaryTimeline, f.primaryHistory); lost {
		to := token // (its own variable: taking token's address would put it on the heap for every unit)
		p.lost = &to
		if f.token == f.told {
			// The session was told KN002 with this token already (its
			// unsure write's, before the history was known): the same
			// loss is not told twice; the token falls back quietly.
			p.quiet = true
			return false
		}
		p.fail = lostWriteError(f.token, sp, f.primaryTimeline)
		p.rejected = reasonTimelineChanged
		return true
	}
	if pr := f.prior; pr.Timeline != 0 {
		// A token a later primary's position replaced before the
		// history was known: judged now that it is.
		if _, known, lost, sp := freshness.Carry(pr, f.primaryTimeline, f.primaryHistory); known {
			p.priorJudged = true
			if lost {
				p.fail = lostWriteError(pr, sp, f.primaryTimeline)
				p.rejected, p.unsureTold = reasonTimelineChanged, true
				return true
			}
		}
	}
	if us := f.unsure; us.timeline != 0 && f.primaryTimeline > us.timeline {
		// A write whose position on its timeline was never read:
		// whether it lies before the switch point is unknown, so the
		// session is told it may have been lost rather than nothing.
		detail := fmt.Sprintf("the position of a write on timeline %d was not read before the primary changed; the primary is on timeline %d",
			us.timeline, f.primaryTimeline)
		if _, known, _, sp := freshness.Carry(us.after, f.primaryTimeline, f.primaryHistory); known {
			detail += fmt.Sprintf("; timeline %d ended at %s", us.timeline, sp)
		}
		p.fail = withDetail(errorf(codeLostWrite, "pg-kinetic: this session's last write may have been lost in a failover"), detail)
		p.rejected, p.unsureTold = reasonTimelineChanged, true
		return true
	}
	return false
}

// lostWriteError is the KN002 for token tok beyond sp, the last position
// of its timeline the primary's timeline primary shares (SPEC §7).
func lostWriteError(tok freshness.Token, sp freshness.LSN, primary uint32) *pgproto3.ErrorResponse {
	return withDetail(errorf(codeLostWrite, "pg-kinetic: this session's last write was lost in a failover"),
		fmt.Sprintf("token %s lies beyond %s, the last position of timeline %d that the primary's timeline %d shares",
			tok, sp, tok.Timeline, primary))
}

// What routing does about a decision that fell back from the replicas
// (planFallback).
type fallbackAction int

const (
	fallbackGo      fallbackAction = iota // route as decided
	fallbackRefresh                       // ask the replicas their replay positions; decide again if one moved
	fallbackBound                         // bound what the session saw with the primary's position; decide again
	fallbackWait                          // fallback_policy "wait": up to read_after_write_timeout_ms for a replica
	fallbackPrimary                       // to the primary: take a max_primary_fallback_inflight slot, or reject fallback_overload
)

// fallbackFacts are what planFallback depends on besides the decision:
// the session's and the route's state, and the steps already taken for
// this unit (each is taken once).
type fallbackFacts struct {
	fallback          string // the fallback_policy that applies (unitPlan.fallback)
	needsFloor        bool   // the read must see the session's writes (needsFloor)
	seenBlocked       bool   // only the replicas the session read from may serve it, and they cannot (restrictToSeenLocked)
	primaryInRecovery bool   // the configured primary reports pg_is_in_recovery()
	primaryDown       bool   // the primary's verdict says unreachable, or a dial to it just failed (a failover may be in progress)
	refreshed         bool   // fallbackRefresh was taken
	boundTried        bool   // fallbackBound was taken
	waited            bool   // fallbackWait was taken
	hurried           bool   // the replicas were hurried since the last decision
}

// fallbackStep is planFallback's answer.
type fallbackStep struct {
	action fallbackAction
	reject string // when set: the unit is rejected for this reason instead
	hurry  bool   // ask the replicas the session needs for their positions soon, so the next reads find one fresh
	notice bool   // with fallbackPrimary: a stale-tolerant read served by the primary says so (NOTICE 01000)
}

// planFallback decides, for a decision d on unit u, the next step before
// it is carried out (SPEC §5, §7). It is pure; the caller takes the step,
// records it in f and asks again, until fallbackGo (or fallbackPrimary, the
// last). Worked examples (prefer_replica, session_write_lsn):
//
//	replica chosen                                        -> go
//	primary, read_your_writes, first time                 -> refresh (one round trip to the replicas)
//	primary, read_your_writes, refreshed, seen replica behind -> bound with the primary's position
//	primary, replica_unavailable, fallback primary        -> hurry; take a fallback slot
//	primary, lag_exceeded, fallback wait, not yet waited  -> hurry; wait for a replica
//	primary, replica_unavailable, primary in recovery     -> rejected split_brain
//	primary, timeline_changed, primary down, not yet waited -> hurry; wait for a replica
//	primary, write                                        -> go (not a fallback)
func planFallback(d decision, u unitInfo, f fallbackFacts) fallbackStep {
	if d.target == targetReplica || !isFallback(d.reason) {
		return fallbackStep{action: fallbackGo}
	}
	switch {
	case !f.refreshed && (d.reason == reasonReadYourWrites && f.needsFloor || d.reason == reasonStrictFresh):
		// The last probe saw the replicas behind, or only the one the
		// session read from may serve it: they are likely past the floor
		// by now. (A strict-fresh read's floor is the primary's position
		// as it began: the probes before it are behind it whenever
		// anything was written since.)
		return fallbackStep{action: fallbackRefresh}
	case !f.boundTried && f.needsFloor && f.seenBlocked:
		// Only the replica it read from may serve it, and that one
		// cannot: bound what it saw with the primary's position.
		return fallbackStep{action: fallbackBound}
	}
	st := fallbackStep{hurry: !f.hurried}
	switch {
	case !f.waited && f.fallback == config.FallbackWait:
		st.action = fallbackWait
	case !f.waited && f.primaryDown && d.target == targetPrimary:
		// The primary cannot serve it either: during a failover the
		// replicas are ineligible for a moment (the promoted one is not
		// yet elected, the others report the new timeline before the
		// new primary's positions are known). Waiting for one keeps
		// reads up (issue 14) where going on would fail with 08006.
		st.action = fallbackWait
	case d.target != targetPrimary:
		st.action = fallbackGo // rejected already (require_replica, fallback reject)
	case f.primaryInRecovery:
		st.action, st.reject = fallbackGo, reasonSplitBrain
	default:
		st.action, st.notice = fallbackPrimary, u.staleOK
	}
	return st
}

// isFallback reports whether a reason is one a read gets when no replica
// could serve it (SPEC §8), as opposed to a unit that was never a read for
// a replica.
func isFallback(reason string) bool {
	switch reason {
	case reasonReplicaUnavailable, reasonReadYourWrites, reasonStrictFresh, reasonLagExceeded, reasonLagUnknown,
		reasonSplitBrain, reasonTimelineChanged:
		return true
	}
	return false
}

// usesToken reports whether rt's freshness policy makes reads see the
// session's writes (session_write_lsn, session_write_lsn_and_max_lag).
func usesToken(rt *config.Route) bool {
	switch rt.Freshness.FreshnessPolicy {
	case config.FreshnessSessionWriteLSN, config.FreshnessSessionWriteLSNAndMax:
		return true
	}
	return false
}
