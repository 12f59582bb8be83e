package proxy

import (
	"fmt"
	"testing"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

// planRoute is a route with the query classes the plan rows use.
func planRoute(policy string, maxLagMS int) *config.Route {
	return &config.Route{
		Name:        "main",
		Primary:     config.Endpoint{Address: "p:5432"},
		Replicas:    []config.Endpoint{{Address: "r:5432", Weight: 1}},
		ReadRouting: config.ReadRouting{ReadRoutingMode: config.RoutingPreferReplica, FallbackPolicy: config.FallbackPrimary},
		Freshness:   config.Freshness{FreshnessPolicy: policy, MaxReplicaLagMS: maxLagMS},
		QueryClasses: []config.QueryClass{
			{Name: "analytics", Routing: config.ClassPrimaryOnly},
			{Name: "reports", Routing: config.ClassReplicaIfLagOK, Stage: 2, FallbackPolicy: config.FallbackReject},
			{Name: "feed", Routing: config.ClassReplicaToleratesStaleness, LabelStaleness: true},
		},
	}
}

func tok(tli uint32, lsn uint64) freshness.Token {
	return freshness.Token{Timeline: tli, LSN: freshness.LSN(lsn)}
}

// TestPlanUnit has one row per rule planUnit applies (SPEC §3–§7), in
// the order it applies them, with the facts it asks for.
func TestPlanUnit(t *testing.T) {
	rt := planRoute(config.FreshnessSessionWriteLSN, 0)
	read := unitInfo{read: true, reason: reasonRead}
	known := func(f unitFacts) unitFacts { f.positionAsked, f.positionKnown = true, true; return f }
	base := unitFacts{unit: read, route: rt, fresh: true, stage: 1, primaryTimeline: 1, token: tok(1, 100)}
	type want struct {
		read     bool
		reason   string
		need     planNeed
		fail     string // SQLSTATE
		rejected string
		fallback string
		floor    freshness.Token
		strict   bool
		staleOK  bool
		told     bool            // the session is told of a lost (or maybe lost) write: its unsure write and prior token are forgotten
		judged   bool            // its prior token was judged
		quietly  freshness.Token // the token, told KN002 already, falls back to this without a second report
	}
	for _, tc := range []struct {
		rule string
		f    unitFacts
		want want
	}{
		{"§3 routing off: nothing asked, the unit as classified (decide sends it to the primary)",
			unitFacts{unit: read, route: rt}, want{read: true, reason: reasonRead, fallback: config.FallbackPrimary}},
		{"§3 a write: nothing asked",
			unitFacts{unit: unitInfo{reason: reasonWrite}, route: rt, fresh: true, stage: 1}, want{reason: reasonWrite, fallback: config.FallbackPrimary}},
		{"§4 hint primary: nothing asked",
			unitFacts{unit: unitInfo{read: true, hintPrim: true}, route: rt, fresh: true, stage: 1}, want{read: true, fallback: config.FallbackPrimary}},
		{"§3 SERIALIZABLE by default (default_transaction_isolation): a read goes to the primary, nothing asked",
			func() unitFacts { f := base; f.serializable = true; return f }(), want{reason: reasonWrite, fallback: config.FallbackPrimary}},
		{"§3 SERIALIZABLE by default: a read-only transaction opens on the primary",
			func() unitFacts {
				f := base
				f.serializable, f.unit = true, unitInfo{txStart: true, reason: reasonRead}
				return f
			}(), want{reason: reasonWrite, fallback: config.FallbackPrimary}},
		{"§5 a read asks for the session's position first",
			base, want{read: true, reason: reasonRead, need: needPosition, fallback: config.FallbackPrimary}},
		{"§5 position unknown (captures unanswered, or a capture debt): read_your_writes",
			func() unitFacts { f := base; f.positionAsked = true; return f }(), want{reason: reasonReadYourWrites, fallback: config.FallbackPrimary}},
		{"§5 a stale-ok read asks for no position: the lag budget alone (also when it would be unknown)",
			func() unitFacts { f := base; f.unit.staleOK = true; return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, staleOK: true}},
		{"§5 position known: a read, floor = the session's write token",
			known(base), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
		{"§5 the monotonic-read floor when above the token",
			func() unitFacts { f := known(base); f.floor = tok(1, 150); return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 150)}},
		{"§4 SET pg_kinetic.min_lsn raises the floor",
			func() unitFacts { f := known(base); f.minLSN = tok(0, 300); return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 300)}},
		{"§4 a min_lsn hint raises the floor",
			func() unitFacts { f := known(base); f.unit.minLSN = tok(1, 400); return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 400)}},
		{"§5 a min_lsn of an older timeline wins (timeline_changed later)",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.token = 2, tok(2, 100)
				f.unit.minLSN = tok(1, 50)
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 50)}},
		{"§7 a token of timeline 1 before the switch point: carried onto timeline 2",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token = 2, planHistory(t), tok(1, 0x4000)
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(2, 0x4000)}},
		{"§7 a min_lsn of timeline 1 before the switch point: carried too",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token = 2, planHistory(t), tok(2, 0x100)
				f.unit.minLSN = tok(1, 0x5000)
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(2, 0x5000)}},
		{"§7 a token of timeline 1 beyond the switch point: KN002 (lost write)",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token = 2, planHistory(t), tok(1, 0x5001)
				return f
			}(), want{read: true, reason: reasonRead, fail: codeLostWrite, rejected: reasonTimelineChanged, fallback: config.FallbackPrimary}},
		{"§7 a write whose position was never read, primary now on a later timeline: KN002 (may have been lost)",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token = 2, planHistory(t), tok(1, 0x4000)
				f.unsure = unsureWrite{timeline: 1, after: tok(1, 0x4000)}
				return f
			}(), want{read: true, reason: reasonRead, fail: codeLostWrite, rejected: reasonTimelineChanged, fallback: config.FallbackPrimary, told: true}},
		{"§7 a token beyond the switch point that the session was told KN002 with (an unsure write's, the history unknown then): not told again, it falls back quietly and the read goes on",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token, f.told = 2, planHistory(t), tok(1, 0x5001), tok(1, 0x5001)
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(2, 0x5000), quietly: tok(2, 0x5000)}},
		{"§7 the same token told with an earlier token, not this one: KN002",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token, f.told = 2, planHistory(t), tok(1, 0x5001), tok(1, 0x4000)
				return f
			}(), want{read: true, reason: reasonRead, fail: codeLostWrite, rejected: reasonTimelineChanged, fallback: config.FallbackPrimary}},
		{"§7 the same unsure write without a history: KN002 too",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.token = 2, tok(1, 0x4000)
				f.unsure = unsureWrite{timeline: 1, after: tok(1, 0x4000)}
				return f
			}(), want{read: true, reason: reasonRead, fail: codeLostWrite, rejected: reasonTimelineChanged, fallback: config.FallbackPrimary, told: true}},
		{"§7 a write's next unit after the failover is told too, before it runs",
			func() unitFacts {
				f := base
				f.unit, f.primaryTimeline = unitInfo{reason: reasonWrite}, 2
				f.unsure = unsureWrite{timeline: 1}
				return f
			}(), want{reason: reasonWrite, fail: codeLostWrite, rejected: reasonTimelineChanged, fallback: config.FallbackPrimary, told: true}},
		{"§7 an unsure write on the primary's own timeline: nothing to tell (its position is read later)",
			func() unitFacts {
				f := known(base)
				f.unsure = unsureWrite{timeline: 1, after: tok(1, 50)}
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
		{"§7 a stale-ok read is not told",
			func() unitFacts {
				f := known(base)
				f.unit.class, f.primaryTimeline = "feed", 2
				f.unsure = unsureWrite{timeline: 1}
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, staleOK: true}},
		{"§7 a token of timeline 1 replaced by timeline 2's position before the history was known, beyond the switch point: KN002",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token, f.prior = 2, planHistory(t), tok(2, 0x6000), tok(1, 0x5001)
				return f
			}(), want{read: true, reason: reasonRead, fail: codeLostWrite, rejected: reasonTimelineChanged, fallback: config.FallbackPrimary, told: true, judged: true}},
		{"§7 the same prior token before the switch point: judged, the read goes on",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.primaryHistory, f.token, f.prior = 2, planHistory(t), tok(2, 0x6000), tok(1, 0x4000)
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(2, 0x6000), judged: true}},
		{"§7 no history: the old token stays (timeline_changed later)",
			func() unitFacts {
				f := known(base)
				f.primaryTimeline, f.token = 2, tok(1, 0x5001)
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 0x5001)}},
		{"§4 strict: asks for the primary's position after the session's",
			func() unitFacts { f := known(base); f.unit.strict = true; return f }(), want{read: true, reason: reasonRead, need: needStrict, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
		{"§4 strict, the primary's position read: floor raised to it",
			func() unitFacts {
				f := known(base)
				f.unit.strict, f.strictAsked, f.strictOK, f.strictPos = true, true, true, tok(1, 900)
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 900), strict: true}},
		{"§4 read_consistency strict: a plain read asks for the primary's position",
			func() unitFacts {
				f := known(base)
				r := *rt
				r.Freshness.ReadConsistency = config.ConsistencyStrict
				f.route = &r
				return f
			}(), want{read: true, reason: reasonRead, need: needStrict, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
		{"§4 read_consistency strict: a stale-ok read stays stale-ok (no position asked)",
			func() unitFacts {
				f := base
				f.unit.staleOK = true
				r := *rt
				r.Freshness.ReadConsistency = config.ConsistencyStrict
				f.route = &r
				return f
			}(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, staleOK: true}},
		{"§4 strict, the primary's position unknown: strict_fresh",
			func() unitFacts { f := known(base); f.unit.strict, f.strictAsked = true, true; return f }(), want{reason: reasonStrictFresh, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
		{"§5 sticky_primary_window after a write: read_your_writes, after the token rules",
			func() unitFacts { f := known(base); f.sticky = true; return f }(), want{reason: reasonReadYourWrites, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
		{"§7 in a transaction block on its server: no position asked",
			func() unitFacts { f := base; f.staysPut = true; return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary}},
		{"§6 class primary_only",
			func() unitFacts { f := base; f.unit.class = "analytics"; return f }(), want{reason: reasonClassPrimaryOnly, fallback: config.FallbackPrimary}},
		{"§6 session query class when the unit declares none",
			func() unitFacts { f := base; f.queryClass = "analytics"; return f }(), want{reason: reasonClassPrimaryOnly, fallback: config.FallbackPrimary}},
		{"§6 billing_balance is always primary_only",
			func() unitFacts { f := base; f.unit.class = config.QueryClassBillingBalance; return f }(), want{reason: reasonClassPrimaryOnly, fallback: config.FallbackPrimary}},
		{"§6 class above the rollout stage: class_not_enabled, the class's fallback",
			func() unitFacts { f := base; f.unit.class = "reports"; return f }(), want{reason: reasonClassNotEnabled, fallback: config.FallbackReject}},
		{"§6 class enabled at its stage: a read with the class's fallback",
			func() unitFacts { f := known(base); f.unit.class, f.stage = "reports", 2; return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackReject, floor: tok(1, 100)}},
		{"§6 rolled back: every class to the primary",
			func() unitFacts { f := base; f.rolledBack = true; return f }(), want{reason: reasonRollback, fallback: config.FallbackPrimary}},
		{"§6 replica_tolerates_staleness: the lag budget, not the session's writes",
			func() unitFacts { f := known(base); f.unit.class = "feed"; return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, staleOK: true}},
		{"§6 unknown class: 22023",
			func() unitFacts { f := base; f.unit.class = "nosuch"; return f }(), want{read: true, reason: reasonRead, fail: codeInvalidParameter, fallback: config.FallbackPrimary}},
		{"§6 a class on a write is still checked",
			func() unitFacts { f := base; f.unit = unitInfo{reason: reasonWrite, class: "nosuch"}; return f }(), want{reason: reasonWrite, fail: codeInvalidParameter, fallback: config.FallbackPrimary}},
		{"§7 a write while the primary is in recovery: fails closed, last_route split_brain",
			func() unitFacts {
				f := base
				f.unit, f.primaryInRecovery = unitInfo{reason: reasonWrite}, true
				return f
			}(), want{reason: reasonWrite, fail: codeReadOnlyTx, rejected: reasonSplitBrain, fallback: config.FallbackPrimary}},
		{"§7 a read while the primary is in recovery goes on to the replicas",
			func() unitFacts { f := known(base); f.primaryInRecovery = true; return f }(), want{read: true, reason: reasonRead, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
		{"§7 a class-primary read while the primary is in recovery fails closed like a write",
			func() unitFacts { f := base; f.unit.class, f.primaryInRecovery = "analytics", true; return f }(), want{reason: reasonClassPrimaryOnly, fail: codeReadOnlyTx, rejected: reasonSplitBrain, fallback: config.FallbackPrimary}},
		{"§4 a transaction start is routed like a read",
			func() unitFacts { f := known(base); f.unit = unitInfo{txStart: true, reason: reasonWrite}; return f }(), want{reason: reasonWrite, fallback: config.FallbackPrimary, floor: tok(1, 100)}},
	} {
		p := planUnit(tc.f)
		got := want{read: p.unit.read, reason: p.unit.reason, need: p.need, rejected: p.rejected, fallback: p.fallback,
			floor: p.req.Floor, strict: p.req.Strict, staleOK: p.unit.staleOK, told: p.unsureTold, judged: p.priorJudged}
		if p.quiet {
			got.quietly = *p.lost
		}
		if p.fail != nil {
			got.fail = p.fail.Code
		}
		if tc.f.unit.hintPrim {
			got.reason = "" // (decide says hint_primary)
		}
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.rule, got, tc.want)
		}
	}
}

// TestPlanUnitLagBudget: max_lag policies carry the route's budget; a
// stale-tolerant class carries it even under session_write_lsn.
func TestPlanUnitLagBudget(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		class   string
		wantLag int64
		floor   bool
	}{
		{config.FreshnessMaxLag, "", 500, false},
		{config.FreshnessSessionWriteLSN, "", 0, true},
		{config.FreshnessSessionWriteLSNAndMax, "", 500, true},
		{config.FreshnessSessionWriteLSN, "feed", 500, false},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.policy, tc.class), func(t *testing.T) {
			f := unitFacts{unit: unitInfo{read: true, class: tc.class}, route: planRoute(tc.policy, 500), fresh: true, stage: 1,
				primaryTimeline: 1, token: tok(1, 100), positionAsked: true, positionKnown: true}
			p := planUnit(f)
			if p.req.MaxLagMS != tc.wantLag || !p.req.Floor.IsZero() != tc.floor {
				t.Errorf("got MaxLagMS %d floor %v, want %d floor %v", p.req.MaxLagMS, p.req.Floor, tc.wantLag, tc.floor)
			}
		})
	}
}

// TestPlanFallback has one row per rule a read that fell back goes
// through (SPEC §5, §7), in order.
func TestPlanFallback(t *testing.T) {
	ryw := decision{target: targetPrimary, reason: reasonReadYourWrites}
	down := decision{target: targetPrimary, reason: reasonReplicaUnavailable}
	floor := fallbackFacts{fallback: config.FallbackPrimary, needsFloor: true}
	with := func(f fallbackFacts, set func(*fallbackFacts)) fallbackFacts { set(&f); return f }
	for _, tc := range []struct {
		rule string
		d    decision
		u    unitInfo
		f    fallbackFacts
		want fallbackStep
	}{
		{"a replica chosen: go", decision{target: targetReplica, addr: "r", reason: reasonRead}, unitInfo{read: true}, floor, fallbackStep{action: fallbackGo}},
		{"a write: not a fallback", decision{target: targetPrimary, reason: reasonWrite}, unitInfo{}, floor, fallbackStep{action: fallbackGo}},
		{"hint primary: not a fallback", decision{target: targetPrimary, reason: reasonHintPrimary}, unitInfo{read: true}, floor, fallbackStep{action: fallbackGo}},
		{"read_your_writes: refresh the replicas' positions first", ryw, unitInfo{read: true}, floor, fallbackStep{action: fallbackRefresh}},
		{"strict_fresh: refresh the replicas' positions first (the probes predate the read's floor)", decision{target: targetPrimary, reason: reasonStrictFresh}, unitInfo{read: true, strict: true},
			fallbackFacts{fallback: config.FallbackPrimary}, fallbackStep{action: fallbackRefresh}},
		{"strict_fresh, refreshed: a fallback slot", decision{target: targetPrimary, reason: reasonStrictFresh}, unitInfo{read: true, strict: true},
			fallbackFacts{fallback: config.FallbackPrimary, refreshed: true}, fallbackStep{action: fallbackPrimary, hurry: true}},
		{"read_your_writes without a floor (max_lag policy): no refresh", ryw, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackPrimary}, fallbackStep{action: fallbackPrimary, hurry: true}},
		{"refreshed, only the seen replica may serve and cannot: bound with the primary", ryw, unitInfo{read: true},
			with(floor, func(f *fallbackFacts) { f.refreshed, f.seenBlocked = true, true }), fallbackStep{action: fallbackBound}},
		{"replica_unavailable, seen replica blocked: bound (no refresh)", down, unitInfo{read: true},
			with(floor, func(f *fallbackFacts) { f.seenBlocked = true }), fallbackStep{action: fallbackBound}},
		{"refreshed and bound: hurry, take a fallback slot", ryw, unitInfo{read: true},
			with(floor, func(f *fallbackFacts) { f.refreshed, f.boundTried, f.seenBlocked = true, true, true }), fallbackStep{action: fallbackPrimary, hurry: true}},
		{"hurried already this decision: not again", down, unitInfo{read: true},
			with(floor, func(f *fallbackFacts) { f.hurried = true }), fallbackStep{action: fallbackPrimary}},
		{"fallback wait: hurry, wait for a replica", decision{target: targetPrimary, reason: "lag_exceeded"}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackWait}, fallbackStep{action: fallbackWait, hurry: true}},
		{"fallback wait, waited: a fallback slot", decision{target: targetPrimary, reason: "lag_exceeded"}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackWait, waited: true, hurried: true}, fallbackStep{action: fallbackPrimary}},
		{"rejected (require_replica or fallback reject), fallback wait: wait first", decision{target: targetRejected, reason: reasonReplicaUnavailable}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackWait}, fallbackStep{action: fallbackWait, hurry: true}},
		{"rejected: stays rejected, no slot", decision{target: targetRejected, reason: reasonReplicaUnavailable}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackReject}, fallbackStep{action: fallbackGo, hurry: true}},
		{"to the primary while it is in recovery: rejected split_brain", down, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackPrimary, primaryInRecovery: true}, fallbackStep{action: fallbackGo, reject: reasonSplitBrain, hurry: true}},
		{"to the primary while it is down: wait for a replica first", decision{target: targetPrimary, reason: "timeline_changed"}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackPrimary, primaryDown: true}, fallbackStep{action: fallbackWait, hurry: true}},
		{"to the primary while it is down, waited: to the primary (08006 if still down)", decision{target: targetPrimary, reason: "lag_unknown"}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackPrimary, primaryDown: true, waited: true, hurried: true}, fallbackStep{action: fallbackPrimary}},
		{"rejected while the primary is down: no wait", decision{target: targetRejected, reason: reasonReplicaUnavailable}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackReject, primaryDown: true}, fallbackStep{action: fallbackGo, hurry: true}},
		{"a stale-tolerant read served by the primary: degraded notice", decision{target: targetPrimary, reason: "lag_exceeded"}, unitInfo{read: true, staleOK: true},
			fallbackFacts{fallback: config.FallbackPrimary}, fallbackStep{action: fallbackPrimary, hurry: true, notice: true}},
		{"timeline_changed is a fallback", decision{target: targetPrimary, reason: "timeline_changed"}, unitInfo{read: true},
			fallbackFacts{fallback: config.FallbackPrimary}, fallbackStep{action: fallbackPrimary, hurry: true}},
	} {
		if got := planFallback(tc.d, tc.u, tc.f); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.rule, got, tc.want)
		}
	}
}

// planHistory is timeline 2's history: timeline 1 ended at 0/5000.
func planHistory(t *testing.T) *health.TimelineHistory {
	t.Helper()
	h, err := health.ParseTimelineHistory(2, "1\t0/5000\tno recovery target specified\n")
	if err != nil {
		t.Fatal(err)
	}
	return h
}
