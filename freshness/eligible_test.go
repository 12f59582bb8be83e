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
		{"configured primary detected standby is no replica either", with(standby(0), func(v *health.Verdict) { v.Configured = health.RolePrimary }), true, req, false, ReasonReplicaUnavailable},
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
