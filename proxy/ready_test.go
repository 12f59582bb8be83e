package proxy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/health"
)

// TestRouteReadiness: one row per rule of routeReadiness.
func TestRouteReadiness(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rt := &config.Route{Name: "app", Primary: config.Endpoint{Address: "pg1:5432"},
		Replicas: []config.Endpoint{{Address: "pg2:5432", Weight: 1}, {Address: "pg3:5432", Weight: 1}},
		HA:       config.HA{ReplicaHealthIntervalMS: 1000, ReplicaHealthTimeoutMS: 200, VerdictTTLMS: 3000}}
	primary := func(mod func(*health.Verdict)) health.Verdict {
		v := health.Verdict{Target: health.Target{Route: "app", Addr: "pg1:5432", Configured: health.RolePrimary},
			Reachable: true, Detected: health.RolePrimary, ProbedAt: now.Add(-time.Second)}
		if mod != nil {
			mod(&v)
		}
		return v
	}
	eligible := candidate{addr: "pg2:5432", weight: 1, eligible: true}
	weightless := candidate{addr: "pg2:5432", weight: 0, eligible: true}
	down := candidate{addr: "pg3:5432", weight: 1, reason: reasonReplicaUnavailable}
	lagging := candidate{addr: "pg2:5432", weight: 1, reason: reasonLagExceeded}
	for _, tc := range []struct {
		name    string
		checked bool
		pv      health.Verdict
		have    bool
		cands   []candidate
		ready   bool
		state   string
		reason  []string // substrings of the reason
		nElig   int
	}{
		{"primary up, replicas eligible", true, primary(nil), true, []candidate{eligible, down},
			true, admin.RoutePrimaryUp, []string{"primary is reachable", "1 of 2 replicas", "pg3:5432 replica_unavailable"}, 1},
		{"primary up, no replica eligible", true, primary(nil), true, []candidate{lagging, down},
			true, admin.RoutePrimaryUp, []string{"0 of 2", "pg2:5432 lag_exceeded"}, 0},
		{"primary unreachable, a replica eligible", true, primary(func(v *health.Verdict) {
			v.Reachable, v.Detected, v.Err = false, health.RoleUnknown, "connection refused"
		}), true, []candidate{eligible, down},
			true, admin.RouteReadsOnly, []string{"unreachable: connection refused", "reads are served by replicas"}, 1},
		{"primary in recovery, a replica eligible", true, primary(func(v *health.Verdict) { v.Detected = health.RoleStandby }), true,
			[]candidate{eligible}, true, admin.RouteReadsOnly, []string{"in recovery"}, 1},
		{"primary verdict stale, a replica eligible", true, primary(func(v *health.Verdict) { v.ProbedAt = now.Add(-4 * time.Second) }), true,
			[]candidate{eligible}, true, admin.RouteReadsOnly, []string{"older than verdict_ttl_ms"}, 1},
		{"primary unreachable, replicas down or lagging", true, primary(func(v *health.Verdict) { v.Reachable, v.Err = false, "timeout" }), true,
			[]candidate{lagging, down}, false, admin.RouteUnavailable, []string{"unreachable: timeout", "0 of 2", "lag_exceeded"}, 0},
		{"primary unreachable, only a weight-0 replica", true, primary(func(v *health.Verdict) { v.Reachable = false }), true,
			[]candidate{weightless}, false, admin.RouteUnavailable, []string{"pg2:5432 weight 0"}, 0},
		{"primary a split brain, nothing else", true, primary(func(v *health.Verdict) { v.SplitBrain = true }), true,
			[]candidate{down}, false, admin.RouteUnavailable, []string{"split brain"}, 0},
		{"primary not probed yet", true, health.Verdict{}, false, []candidate{down},
			false, admin.RouteUnavailable, []string{"not been probed"}, 0},
		{"no health checks", false, health.Verdict{}, false, nil,
			true, admin.RouteUnchecked, []string{"no health checks"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := routeReadiness(rt, tc.checked, tc.pv, tc.have, tc.cands, now)
			if got.Ready != tc.ready || got.State != tc.state || got.ReplicasEligible != tc.nElig {
				t.Errorf("ready %v state %s eligible %d, want %v %s %d (%s)", got.Ready, got.State, got.ReplicasEligible,
					tc.ready, tc.state, tc.nElig, got.Reason)
			}
			for _, r := range tc.reason {
				if !strings.Contains(got.Reason, r) {
					t.Errorf("reason %q lacks %q", got.Reason, r)
				}
			}
			if got.Route != "app" || got.Primary != "pg1:5432" || got.Replicas != 2 {
				t.Errorf("route %q primary %q replicas %d", got.Route, got.Primary, got.Replicas)
			}
		})
	}
}

// The reasons declared at 0 are exactly those a fallback can have.
func TestSeriesReasonsMatchIsFallback(t *testing.T) {
	for _, r := range []string{reasonRead, reasonWrite, reasonHintPrimary, reasonInTransaction, reasonSessionPinned,
		reasonReadYourWrites, reasonStrictFresh, reasonLagExceeded, reasonLagUnknown, reasonReplicaUnavailable,
		reasonClassPrimaryOnly, reasonClassNotEnabled, reasonRollback, reasonRoutingOff, reasonSplitBrain,
		reasonTimelineChanged, reasonUnclassified, reasonFallbackOverload} {
		if isFallback(r) != slices.Contains(fallbackReasons, r) {
			t.Errorf("%s: isFallback %v, declared as a fallback reason %v", r, isFallback(r), slices.Contains(fallbackReasons, r))
		}
	}
	if !slices.Contains(rejectReasons, reasonFallbackOverload) || len(rejectReasons) != len(fallbackReasons)+1 {
		t.Errorf("rejectReasons %v: want the fallback reasons and fallback_overload", rejectReasons)
	}
}

func TestRouteSeries(t *testing.T) {
	rt := &config.Route{Name: "app", Replicas: []config.Endpoint{{Address: "r1:5432"}, {Address: "r2:5432"}},
		ReadRouting: config.ReadRouting{ReadRoutingMode: config.RoutingPreferReplica},
		QueryClasses: []config.QueryClass{{Name: "catalog_browse", Routing: config.ClassReplicaToleratesStaleness},
			{Name: "billing_balance", Routing: config.ClassPrimaryOnly}}}
	rs := routeSeries(rt)
	has := func(class, target, reason string) bool {
		return slices.Contains(rs.Decisions, admin.DecisionLabels{QueryClass: class, Target: target, Reason: reason})
	}
	for _, c := range []string{"default", "catalog_browse"} {
		if !has(c, targetReplica, reasonRead) || !has(c, targetPrimary, reasonLagExceeded) || !has(c, targetRejected, reasonFallbackOverload) {
			t.Errorf("class %s lacks replica/read, primary/lag_exceeded or rejected/fallback_overload", c)
		}
	}
	if has("billing_balance", targetReplica, reasonRead) || !has("billing_balance", targetPrimary, reasonClassPrimaryOnly) {
		t.Error("a primary_only class is declared replica/read, or not primary/class_primary_only")
	}
	if !has("default", targetPrimary, reasonWrite) {
		t.Error("default/primary/write missing")
	}
	if want := 1 + 2*(1+len(fallbackReasons)+len(rejectReasons)) + 1; len(rs.Decisions) != want {
		t.Errorf("%d decision series, want %d", len(rs.Decisions), want)
	}
	if !slices.Equal(rs.RetryServers, []string{"r1:5432", "r2:5432"}) || len(rs.RetryCauses) != 2 {
		t.Errorf("retries %v x %v", rs.RetryServers, rs.RetryCauses)
	}
	rt.ReadRouting.ReadRoutingMode = config.RoutingOff
	if rs := routeSeries(rt); len(rs.Decisions) != 1 || rs.Decisions[0].Reason != reasonRoutingOff ||
		len(rs.FallbackReasons) != len(fallbackReasons) || len(rs.RetryServers) != 2 {
		t.Errorf("routing off: %+v, want decisions primary/routing_off only, and every fallback reason and retry", rs)
	}
}
