package proxy

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

// The rules of proxy/affinity.go on fixed snapshots: a read on replica A
// keeps read-your-writes reads on A until a probe begun after it bounds
// what it saw; a restart of A (another start time) takes A away too; a
// bounding probe raises the floor to its replay position and lifts the
// restriction.
func TestSeenReadsBoundAndRestrict(t *testing.T) {
	const a, b = "a:5432", "b:5432"
	started := time.Unix(1764547200, 0)
	newSession := func() *session {
		ss := &session{log: zap.NewNop()}
		ss.mu.tx = 'I'
		ss.initWaits()
		return ss
	}
	standby := func(addr string, probed time.Time, replay uint64, start time.Time) health.Verdict {
		v := health.Verdict{ProbedAt: probed, Reachable: true, Detected: health.RoleStandby, Timeline: 1,
			ReplayLSN: replay, StartedAt: start}
		v.Addr = addr
		return v
	}
	readAt := time.Now()
	cands := func() []candidate {
		return []candidate{{addr: a, weight: 1, eligible: true}, {addr: b, weight: 1, eligible: true}}
	}

	ss := newSession()
	ss.mu.fresh.seen = []seenRead{{addr: a, at: readAt, started: started}}
	before := health.NewSnapshot(standby(a, readAt.Add(-time.Millisecond), 500, started), standby(b, readAt, 900, started))
	if ss.boundSeenLocked(before); !ss.mu.fresh.floor.IsZero() || len(ss.mu.fresh.seen) != 1 {
		t.Fatalf("a probe begun before the read bounded it: floor %v, seen %v", ss.mu.fresh.floor, ss.mu.fresh.seen)
	}
	c := cands()
	if blocked := ss.restrictToSeenLocked(c, before); blocked || !c[0].eligible || c[1].eligible || c[1].reason != reasonReadYourWrites {
		t.Fatalf("unbounded read on A: candidates %+v (blocked %v); want A alone", c, blocked)
	}

	restarted := health.NewSnapshot(standby(a, readAt.Add(time.Millisecond), 100, started.Add(time.Minute)), standby(b, readAt, 900, started))
	if ss.boundSeenLocked(restarted); !ss.mu.fresh.floor.IsZero() || len(ss.mu.fresh.seen) != 1 {
		t.Fatalf("a probe of A after its restart bounded the read: floor %v, seen %v", ss.mu.fresh.floor, ss.mu.fresh.seen)
	}
	c = cands()
	if blocked := ss.restrictToSeenLocked(c, restarted); c[0].eligible || c[1].eligible || !blocked {
		t.Fatalf("A restarted: candidates %+v (blocked %v); want neither, blocked", c, blocked)
	}

	after := health.NewSnapshot(standby(a, readAt.Add(time.Millisecond), 700, started), standby(b, readAt, 900, started))
	if ss.boundSeenLocked(after); ss.mu.fresh.floor != (freshness.Token{Timeline: 1, LSN: 700}) || len(ss.mu.fresh.seen) != 0 {
		t.Fatalf("a probe begun after the read: seen %v, floor %v; want none, 1/700", ss.mu.fresh.seen, ss.mu.fresh.floor)
	}
	c = cands()
	if ss.restrictToSeenLocked(c, after); !c[0].eligible || !c[1].eligible {
		t.Fatalf("bounded: candidates %+v; want both", c)
	}
}

// decide keeps a read-your-writes read on the affine replica while it is
// eligible, whatever the weights, and balances otherwise.
func TestDecideAffine(t *testing.T) {
	s := sessionInfo{mode: "prefer_replica", fallback: "primary", affine: "a:5432"}
	u := unitInfo{read: true}
	cands := []candidate{{addr: "a:5432", weight: 1, eligible: true}, {addr: "b:5432", weight: 100, eligible: true}}
	for _, rnd := range []float64{0, 0.5, 0.99} {
		if d := decide(s, u, cands, rnd); d.addr != "a:5432" {
			t.Fatalf("rnd %v: %+v, want the affine replica", rnd, d)
		}
	}
	cands[0].eligible = false
	if d := decide(s, u, cands, 0.5); d.addr != "b:5432" {
		t.Fatalf("affine replica not eligible: %+v, want b", d)
	}
}

// A read that will stay where it goes (balance) picks the replica with
// the fewest sessions staying there for its weight, ties by weight and
// rnd; a session leaves its own replica only for one with fewer by more
// than itself, so two replicas never trade it back and forth; and the
// counts follow sessions moving and ending.
func TestDecideBalanced(t *testing.T) {
	const a, b = "a:5432", "b:5432"
	u := unitInfo{read: true}
	eq := []candidate{{addr: a, weight: 1, eligible: true}, {addr: b, weight: 1, eligible: true}}
	counts := func(na, nb int64) *affineCounts {
		c := &affineCounts{}
		c.counter(a).Store(na)
		c.counter(b).Store(nb)
		return c
	}
	for _, tc := range []struct {
		name   string
		affine string
		na, nb int64
		cands  []candidate
		rnd    []float64
		want   string
	}{
		{"the fewer sessions wins, whatever rnd", "", 3, 1, eq, []float64{0, 0.5, 0.99}, b},
		{"a tie: rnd, low", "", 2, 2, eq, []float64{0.2}, a},
		{"a tie: rnd, high", "", 2, 2, eq, []float64{0.7}, b},
		{"per weight: 2 on weight 3 is lighter than 1 on weight 1", "", 1, 2,
			[]candidate{{addr: a, weight: 1, eligible: true}, {addr: b, weight: 3, eligible: true}}, []float64{0, 0.99}, b},
		{"the lighter one not eligible", "", 3, 0,
			[]candidate{{addr: a, weight: 1, eligible: true}, {addr: b, weight: 1, reason: reasonReadYourWrites}}, []float64{0.9}, a},
		{"affine on the heavier by more than itself: moves", a, 5, 3, eq, []float64{0, 0.99}, b},
		{"affine, heavier by itself alone: stays (moving would only swap)", a, 4, 3, eq, []float64{0, 0.99}, a},
		{"affine, the lighter one may not serve it: stays", a, 9, 0,
			[]candidate{{addr: a, weight: 1, eligible: true}, {addr: b, weight: 1, reason: reasonReadYourWrites}}, []float64{0.5}, a},
	} {
		s := sessionInfo{mode: "prefer_replica", fallback: "primary", affine: tc.affine, balance: counts(tc.na, tc.nb)}
		for _, rnd := range tc.rnd {
			if d := decide(s, u, tc.cands, rnd); d.target != targetReplica || d.addr != tc.want {
				t.Errorf("%s, rnd %v: %+v, want %s", tc.name, rnd, d, tc.want)
			}
		}
	}

	// 16 sessions arriving one after another on two replicas of equal
	// weight split 8 and 8, whatever rnd says.
	c := &affineCounts{}
	for i := 0; i < 16; i++ {
		d := decide(sessionInfo{mode: "prefer_replica", fallback: "primary", balance: c}, u, eq, 0.99)
		c.move("", d.addr)
	}
	if na, nb := c.count(a), c.count(b); na != 8 || nb != 8 {
		t.Fatalf("16 sessions split %d / %d, want 8 / 8", na, nb)
	}

	// The session records move and end the counts.
	srv := &Server{}
	ss := &session{log: zap.NewNop(), srv: srv}
	ss.mu.Lock()
	ss.mu.fresh.affine = a
	ss.mu.Unlock()
	srv.affine.move("", a)
	ss.leaveAffine()
	if n := srv.affine.count(a); n != 0 {
		t.Fatalf("after the session ended %d sessions stay on a, want 0", n)
	}
}

// A replay position read on demand counts for a replica only while the
// probes show the same run of the server: a standby that restarted may
// have come back behind it (it starts at its minimum recovery point).
func TestObservedReplayPerRun(t *testing.T) {
	const a = "a:5432"
	rt := &config.Route{Name: "main", Replicas: []config.Endpoint{{Address: a, Weight: 1}}}
	started := time.Unix(1764547200, 0)
	now := time.Now()
	snapAt := func(start time.Time) *health.Snapshot {
		v := health.Verdict{ProbedAt: now, Reachable: true, Detected: health.RoleStandby,
			Timeline: 1, ReplayLSN: 100, StartedAt: start}
		v.Addr, v.Configured = a, health.RoleStandby
		return health.NewSnapshot(v)
	}
	req := freshness.Requirement{Floor: freshness.Token{Timeline: 1, LSN: 500}, VerdictTTL: time.Minute}
	s := &Server{}
	s.observe(a, freshness.Token{Timeline: 1, LSN: 600}, started)
	if c := s.candidatesFrom(rt, snapAt(started), req); !c[0].eligible {
		t.Fatalf("same run, observed 600 >= floor 500: %+v, want eligible", c[0])
	}
	if c := s.candidatesFrom(rt, snapAt(started.Add(time.Minute)), req); c[0].eligible {
		t.Fatalf("restarted (probe shows another start time, replay 100): %+v, want not eligible", c[0])
	}
	s.observe(a, freshness.Token{Timeline: 1, LSN: 900}, time.Time{})
	if c := s.candidatesFrom(rt, snapAt(time.Time{}), freshness.Requirement{Floor: freshness.Token{Timeline: 1, LSN: 700}, VerdictTTL: time.Minute}); c[0].eligible {
		t.Fatalf("a position of an unknown run was used: %+v", c[0])
	}
}

// judgeLocked, which both decideLocked and waitForReplica judge the
// replicas by, holds a read to the floor as it stands, not the plan's
// (a bound since raised it), keeps a read to the replica it read from
// while that read is unbounded, and leaves out the replicas the unit
// tried. A replica eligible for the plan's requirement alone ended the
// wait of fallback_policy "wait" at once, and the read then fell back to
// the primary without having waited.
func TestJudgeAsDecided(t *testing.T) {
	const a, b = "a:5432", "b:5432"
	rt := &config.Route{Name: "main", Replicas: []config.Endpoint{{Address: a, Weight: 1}, {Address: b, Weight: 1}}}
	rt.Freshness.FreshnessPolicy = config.FreshnessSessionWriteLSN
	started := time.Unix(1764547200, 0)
	readAt := time.Now()
	standby := func(addr string, probed time.Time, replay uint64) health.Verdict {
		v := health.Verdict{ProbedAt: probed, Reachable: true, Detected: health.RoleStandby, Timeline: 1,
			ReplayLSN: replay, StartedAt: started}
		v.Addr, v.Configured = addr, health.RoleStandby
		return v
	}
	u := unitInfo{read: true}
	req := freshness.Requirement{Floor: freshness.Token{Timeline: 1, LSN: 500}, PrimaryTimeline: 1, VerdictTTL: time.Minute}
	eligible := func(cands []candidate) (out []string) {
		for _, c := range cands {
			if c.eligible {
				out = append(out, c.addr)
			}
		}
		return out
	}
	newSession := func() *session {
		ss := &session{log: zap.NewNop(), srv: &Server{}, route: rt}
		ss.mu.tx = 'I'
		return ss
	}

	ss := newSession()
	snap := health.NewSnapshot(standby(a, readAt, 600), standby(b, readAt, 700))
	if c, _ := ss.judgeLocked(snap, config.RoutingPreferReplica, u, nil, req); len(eligible(c)) != 2 {
		t.Fatalf("floor 500, replays 600 and 700: eligible %v, want both", eligible(c))
	}
	ss.raiseFloorLocked(freshness.Token{Timeline: 1, LSN: 900}) // (boundSeenByPrimary, after the plan)
	if c, _ := ss.judgeLocked(snap, config.RoutingPreferReplica, u, nil, req); len(eligible(c)) != 0 {
		t.Fatalf("the floor raised to 900 since the plan: eligible %v, want none", eligible(c))
	}
	if c, _ := ss.judgeLocked(snap, config.RoutingPreferReplica, unitInfo{read: true, staleOK: true}, nil, req); len(eligible(c)) != 2 {
		t.Fatalf("a stale-ok read is not held to the session's floor: eligible %v, want both", eligible(c))
	}

	ss = newSession()
	ss.mu.fresh.seen = []seenRead{{addr: a, at: readAt, started: started}}
	before := health.NewSnapshot(standby(a, readAt.Add(-time.Millisecond), 400), standby(b, readAt.Add(-time.Millisecond), 700))
	if c, blocked := ss.judgeLocked(before, config.RoutingPreferReplica, u, nil, req); len(eligible(c)) != 0 || !blocked {
		t.Fatalf("an unbounded read on a (400, behind the floor): eligible %v, blocked %v; want none, blocked", eligible(c), blocked)
	}
	after := health.NewSnapshot(standby(a, readAt.Add(time.Millisecond), 800), standby(b, readAt.Add(time.Millisecond), 700))
	if c, _ := ss.judgeLocked(after, config.RoutingPreferReplica, u, nil, req); !slices.Equal(eligible(c), []string{a}) {
		t.Fatalf("a probe of a after the read (800) bounds it, the floor rises to 800: eligible %v, want a alone", eligible(c))
	}
	if c, _ := ss.judgeLocked(after, config.RoutingPreferReplica, u, map[string]bool{a: true}, req); len(eligible(c)) != 0 {
		t.Fatalf("a tried for the unit: eligible %v, want none", eligible(c))
	}
}
