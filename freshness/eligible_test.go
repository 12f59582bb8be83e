package freshness

import (
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/health"
)

func TestEligible(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 10, 0, time.UTC)
	const ttl = 4750 * time.Millisecond
	req := Requirement{VerdictTTL: ttl}
	replica := health.Target{Route: "main", Addr: "10.0.0.2:5432", Configured: health.RoleStandby}
	// standby returns a reachable standby verdict taken age ago.
	standby := func(age time.Duration) health.Verdict {
		return health.Verdict{Target: replica, Reachable: true, Detected: health.RoleStandby, SystemID: "7", ProbedAt: now.Add(-age)}
	}
	with := func(v health.Verdict, edit func(*health.Verdict)) health.Verdict { edit(&v); return v }

	tests := []struct {
		name       string
		v          health.Verdict
		have       bool
		req        Requirement
		wantOK     bool
		wantReason string
	}{
		{"fresh reachable standby", standby(2 * time.Second), true, req, true, ""},
		{"just probed", standby(0), true, req, true, ""},
		{"exactly TTL old is still fresh", standby(ttl), true, req, true, ""},
		{"one nanosecond past TTL is unknown", standby(ttl + time.Nanosecond), true, req, false, ReasonLagUnknown},
		{"long past TTL", standby(time.Hour), true, req, false, ReasonLagUnknown},
		{"stamped after now (probe finished after the caller read its clock)", standby(-time.Second), true, req, true, ""},
		{"zero ProbedAt is ancient", with(standby(0), func(v *health.Verdict) { v.ProbedAt = time.Time{} }), true, req, false, ReasonLagUnknown},
		{"zero TTL fails closed", standby(time.Millisecond), true, Requirement{}, false, ReasonLagUnknown},
		{"zero TTL, verdict taken at now", standby(0), true, Requirement{}, true, ""},
		{"no verdict yet", health.Verdict{}, false, req, false, ReasonReplicaUnavailable},
		{"have=false wins over a good-looking verdict", standby(0), false, req, false, ReasonReplicaUnavailable},
		{"unreachable", health.Verdict{Target: replica, ProbedAt: now, Err: "connection refused"}, true, req, false, ReasonReplicaUnavailable},
		{"unreachable and old is unavailable, not unknown", health.Verdict{Target: replica, ProbedAt: now.Add(-time.Minute), Err: "connection refused"}, true, req, false, ReasonReplicaUnavailable},
		{"promoted replica is split brain", with(standby(time.Second), func(v *health.Verdict) { v.Detected = health.RolePrimary }), true, req, false, ReasonSplitBrain},
		{"split brain reported even when old", with(standby(time.Hour), func(v *health.Verdict) { v.Detected = health.RolePrimary }), true, req, false, ReasonSplitBrain},
		{"reachable but role not detected", with(standby(0), func(v *health.Verdict) { v.Detected = health.RoleUnknown }), true, req, false, ReasonReplicaUnavailable},
		{"configured primary is no replica", with(standby(0), func(v *health.Verdict) {
			v.Configured, v.Detected = health.RolePrimary, health.RolePrimary
		}), true, req, false, ReasonReplicaUnavailable},
		// follow_failover: the old primary rewound as a standby of the
		// elected one serves reads again (with fixed roles it is never a
		// candidate).
		{"configured primary rejoined as a standby", with(standby(0), func(v *health.Verdict) { v.Configured = health.RolePrimary }), true, req, true, ""},
		{"a split brain by election", with(standby(0), func(v *health.Verdict) { v.SplitBrain = true }), true, req, false, ReasonSplitBrain},
		{"unconfigured role", with(standby(0), func(v *health.Verdict) { v.Configured = health.RoleUnknown }), true, req, false, ReasonReplicaUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := Eligible(tc.v, tc.have, tc.req, now)
			if ok != tc.wantOK || reason != tc.wantReason {
				t.Errorf("Eligible = (%v, %q), want (%v, %q)", ok, reason, tc.wantOK, tc.wantReason)
			}
			if ok && reason != "" {
				t.Errorf("eligible with reason %q", reason)
			}
		})
	}
}

// The worked examples in Eligible's documentation, verbatim.
func TestEligibleDocExamples(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse("15:04:05.000", s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	now := at("12:00:10.000")
	req := Requirement{VerdictTTL: 2*2*time.Second + 750*time.Millisecond}
	tg := health.Target{Configured: health.RoleStandby}
	for _, ex := range []struct {
		v      health.Verdict
		have   bool
		ok     bool
		reason string
	}{
		{health.Verdict{Target: tg, Reachable: true, Detected: health.RoleStandby, ProbedAt: at("12:00:08.000")}, true, true, ""},
		{health.Verdict{Target: tg, Reachable: true, Detected: health.RoleStandby, ProbedAt: at("12:00:05.250")}, true, true, ""},
		{health.Verdict{Target: tg, Reachable: true, Detected: health.RoleStandby, ProbedAt: at("12:00:05.249")}, true, false, "lag_unknown"},
		{health.Verdict{Target: tg, Reachable: true, Detected: health.RolePrimary, ProbedAt: at("12:00:09.000")}, true, false, "split_brain"},
		{health.Verdict{Target: tg, Err: "refused", ProbedAt: at("11:59:40.000")}, true, false, "replica_unavailable"},
		{health.Verdict{}, false, false, "replica_unavailable"},
	} {
		if ok, reason := Eligible(ex.v, ex.have, req, now); ok != ex.ok || reason != ex.reason {
			t.Errorf("%+v: Eligible = (%v, %q), want (%v, %q)", ex.v, ok, reason, ex.ok, ex.reason)
		}
	}
}

// Floors, timelines, identity and lag budgets: rules 6 to 10, after the
// health rules.
func TestEligibleFreshnessRules(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 10, 0, time.UTC)
	const ttl = 4750 * time.Millisecond
	replica := health.Target{Route: "main", Addr: "10.0.0.2:5432", Configured: health.RoleStandby}
	// standby: fresh, timeline 2, replayed 1/10, 300 ms and 4096 bytes behind.
	standby := health.Verdict{Target: replica, Reachable: true, Detected: health.RoleStandby, SystemID: "7", ProbedAt: now.Add(-time.Second),
		Timeline: 2, ReplayLSN: 0x1_00000010, ReceiveLSN: 0x1_00000020, LagMS: 300, LagBytes: 4096}
	with := func(edit func(*health.Verdict)) health.Verdict { v := standby; edit(&v); return v }
	tok := func(s string) Token {
		tk, err := ParseToken(s)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	floor := func(s string) Requirement { return Requirement{VerdictTTL: ttl, Floor: tok(s), PrimaryTimeline: 2} }
	strict := func(s string) Requirement { r := floor(s); r.Strict = true; return r }
	budget := func(ms, bytes int64) Requirement {
		return Requirement{VerdictTTL: ttl, MaxLagMS: ms, MaxLagBytes: bytes, PrimaryTimeline: 2}
	}
	all := func(f string, ms, bytes int64) Requirement {
		r := floor(f)
		r.MaxLagMS, r.MaxLagBytes = ms, bytes
		return r
	}

	tests := []struct {
		name       string
		v          health.Verdict
		req        Requirement
		wantOK     bool
		wantReason string
	}{
		{"no requirement beyond the TTL", standby, Requirement{VerdictTTL: ttl}, true, ""},
		{"zero floor requires nothing, even of an unknown replay position", with(func(v *health.Verdict) { v.ReplayLSN = 0 }), floor("0/0"), true, ""},

		// Identity (rule 6).
		{"another cluster", with(func(v *health.Verdict) { v.IdentityMismatch = true }), Requirement{VerdictTTL: ttl}, false, ReasonSplitBrain},
		{"another cluster, floor met", with(func(v *health.Verdict) { v.IdentityMismatch = true }), floor("2:0/1"), false, ReasonSplitBrain},
		{"another cluster and stale: stale is reported first", with(func(v *health.Verdict) {
			v.IdentityMismatch, v.ProbedAt = true, now.Add(-time.Hour)
		}), Requirement{VerdictTTL: ttl}, false, ReasonLagUnknown},

		// Timeline (rule 7).
		{"floor on the replica's timeline", standby, floor("2:1/10"), true, ""},
		{"bare floor: the primary's timeline", standby, floor("1/10"), true, ""},
		{"bare floor, primary timeline unknown: positions alone", standby, Requirement{VerdictTTL: ttl, Floor: tok("1/10")}, true, ""},
		{"bare floor, primary on another timeline", standby, Requirement{VerdictTTL: ttl, Floor: tok("1/10"), PrimaryTimeline: 3}, false, ReasonTimelineChanged},
		{"floor from an older timeline", standby, floor("1:0/500"), false, ReasonTimelineChanged},
		{"floor from an older timeline, far below the replay position", standby, floor("1:0/1"), false, ReasonTimelineChanged},
		{"floor from a newer timeline", standby, floor("3:1/0"), false, ReasonTimelineChanged},
		{"replica still on the floor's timeline, primary moved on", with(func(v *health.Verdict) { v.Timeline = 1 }),
			Requirement{VerdictTTL: ttl, Floor: tok("1:0/500"), PrimaryTimeline: 2}, false, ReasonTimelineChanged},
		{"floor and replica agree, primary timeline unknown", standby, Requirement{VerdictTTL: ttl, Floor: tok("2:1/0")}, true, ""},
		{"replica timeline unknown", with(func(v *health.Verdict) { v.Timeline = 0 }), floor("2:0/1"), false, ReasonTimelineChanged},
		{"timeline checked before the position", standby, floor("1:FF/0"), false, ReasonTimelineChanged},

		// Replay position (rule 8), compared as 64-bit numbers.
		{"replayed exactly the floor", standby, floor("2:1/10"), true, ""},
		{"one byte short", standby, floor("2:1/11"), false, ReasonReadYourWrites},
		{"one byte short, strict-fresh", standby, strict("2:1/11"), false, ReasonStrictFresh},
		{"strict-fresh met", standby, strict("2:1/10"), true, ""},
		{"0/FFFFFFFF < 1/0: below the replay position", standby, floor("2:0/FFFFFFFF"), true, ""},
		{"1/9 < 1/10 though not as text", standby, floor("2:1/9"), true, ""},
		{"A/0 > 1/10", standby, floor("2:A/0"), false, ReasonReadYourWrites},
		{"across the halves: replayed 0/FFFFFFFF, floor 1/0", with(func(v *health.Verdict) { v.ReplayLSN = 0xFFFFFFFF }), floor("2:1/0"), false, ReasonReadYourWrites},
		{"across the halves: replayed 1/0, floor 0/FFFFFFFF", with(func(v *health.Verdict) { v.ReplayLSN = 1 << 32 }), floor("2:0/FFFFFFFF"), true, ""},
		{"received is not replayed", standby, floor("2:1/20"), false, ReasonReadYourWrites},
		{"replay position unknown", with(func(v *health.Verdict) { v.ReplayLSN = 0 }), floor("2:0/1"), false, ReasonReadYourWrites},
		{"paused but past the floor", with(func(v *health.Verdict) { v.ReplayPaused = true }), floor("2:1/0"), true, ""},

		// Lag budget (rules 9, 10).
		{"within both budgets", standby, budget(2500, 1<<20), true, ""},
		{"lag equal to the budget", standby, budget(300, 4096), true, ""},
		{"1 ms over", standby, budget(299, 0), false, ReasonLagExceeded},
		{"1 byte over", standby, budget(0, 4095), false, ReasonLagExceeded},
		{"no time budget, bytes over", standby, budget(0, 1), false, ReasonLagExceeded},
		{"ms unknown", with(func(v *health.Verdict) { v.LagMS = -1 }), budget(2500, 0), false, ReasonLagUnknown},
		{"bytes unknown", with(func(v *health.Verdict) { v.LagBytes = -1 }), budget(0, 1<<20), false, ReasonLagUnknown},
		{"ms unknown but only bytes budgeted", with(func(v *health.Verdict) { v.LagMS = -1 }), budget(0, 1<<20), true, ""},
		{"unknown lag without a budget", with(func(v *health.Verdict) { v.LagMS, v.LagBytes = -1, -1 }), floor("2:1/0"), true, ""},
		{"over one budget, unknown on the other: exceeded", with(func(v *health.Verdict) { v.LagMS = -1 }), budget(2500, 10), false, ReasonLagExceeded},
		{"idle pair: 0 lag is within any budget", with(func(v *health.Verdict) { v.LagMS, v.LagBytes = 0, 0 }), budget(1, 1), true, ""},

		// Order: floor before lag.
		{"floor missed and lag over: the floor", standby, all("2:2/0", 1, 1), false, ReasonReadYourWrites},
		{"floor met, lag over", standby, all("2:1/0", 1, 0), false, ReasonLagExceeded},
		{"everything met", standby, all("2:1/0", 300, 4096), true, ""},
		// Health rules still come first.
		{"floor met but stale", with(func(v *health.Verdict) { v.ProbedAt = now.Add(-ttl - time.Millisecond) }), floor("2:1/0"), false, ReasonLagUnknown},
		{"floor met but promoted", with(func(v *health.Verdict) { v.Detected = health.RolePrimary }), floor("2:1/0"), false, ReasonSplitBrain},
		{"floor met but unreachable", with(func(v *health.Verdict) { v.Reachable = false }), floor("2:1/0"), false, ReasonReplicaUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := Eligible(tc.v, true, tc.req, now)
			if ok != tc.wantOK || reason != tc.wantReason {
				t.Errorf("Eligible = (%v, %q), want (%v, %q)", ok, reason, tc.wantOK, tc.wantReason)
			}
		})
	}
}

// The second block of worked examples in Eligible's documentation, verbatim.
func TestEligibleFreshnessDocExamples(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 10, 0, time.UTC)
	v := health.Verdict{Target: health.Target{Configured: health.RoleStandby}, Reachable: true, Detected: health.RoleStandby,
		ProbedAt: now, Timeline: 2, ReplayLSN: 0x1_00000010, LagMS: 300, LagBytes: 4096}
	base := Requirement{VerdictTTL: 4750 * time.Millisecond, PrimaryTimeline: 2}
	withFloor := func(s string, strict bool) Requirement {
		r := base
		var err error
		if r.Floor, err = ParseToken(s); err != nil {
			t.Fatal(err)
		}
		r.Strict = strict
		return r
	}
	foreign := v
	foreign.IdentityMismatch = true
	unknown := v
	unknown.LagMS = -1
	for _, ex := range []struct {
		name   string
		v      health.Verdict
		req    Requirement
		ok     bool
		reason string
	}{
		{"no floor, no budget", v, base, true, ""},
		{"another cluster", foreign, base, false, "split_brain"},
		{"2:1/10", v, withFloor("2:1/10", false), true, ""},
		{"1/10", v, withFloor("1/10", false), true, ""},
		{"2:0/FFFFFFFF", v, withFloor("2:0/FFFFFFFF", false), true, ""},
		{"2:1/9", v, withFloor("2:1/9", false), true, ""},
		{"2:1/11", v, withFloor("2:1/11", false), false, "read_your_writes"},
		{"2:1/11 strict", v, withFloor("2:1/11", true), false, "strict_fresh"},
		{"1:0/500", v, withFloor("1:0/500", false), false, "timeline_changed"},
		{"3:1/0", v, withFloor("3:1/0", false), false, "timeline_changed"},
		{"MaxLagMS 300", v, func() Requirement { r := base; r.MaxLagMS = 300; return r }(), true, ""},
		{"MaxLagMS 299", v, func() Requirement { r := base; r.MaxLagMS = 299; return r }(), false, "lag_exceeded"},
		{"MaxLagBytes 4095", v, func() Requirement { r := base; r.MaxLagBytes = 4095; return r }(), false, "lag_exceeded"},
		{"MaxLagMS 2500, unknown", unknown, func() Requirement { r := base; r.MaxLagMS = 2500; return r }(), false, "lag_unknown"},
	} {
		if ok, reason := Eligible(ex.v, true, ex.req, now); ok != ex.ok || reason != ex.reason {
			t.Errorf("%s: Eligible = (%v, %q), want (%v, %q)", ex.name, ok, reason, ex.ok, ex.reason)
		}
	}
}
