package freshness

import (
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/health"
)

// BenchmarkEligible measures one routing decision's worth of eligibility
// checks: Eligible over every replica of a route, as proxy.candidatesFrom
// calls it for a read, for the requirement shapes a read can have. Each op
// checks all replicas of the route, so ns/op is per read, not per replica.
// Eligible must not allocate: allocs/op is expected to be 0.
//
//	go test -run XXX -bench Eligible -benchmem ./freshness/
func BenchmarkEligible(b *testing.B) {
	now := time.Date(2026, 1, 2, 12, 0, 10, 0, time.UTC)
	const ttl = 4750 * time.Millisecond // defaults: 2·2s + 750ms
	floor := Token{Timeline: 2, LSN: 0x1_00000010}

	standby := func(addr string, age time.Duration, replay uint64, lagMS, lagBytes int64) health.Verdict {
		return health.Verdict{
			Target:    health.Target{Route: "main", Addr: addr, Configured: health.RoleStandby},
			Reachable: true, Detected: health.RoleStandby, SystemID: "7318349582364729812",
			ProbedAt: now.Add(-age), Timeline: 2,
			ReceiveLSN: replay + 512, ReplayLSN: replay, LagMS: lagMS, LagBytes: lagBytes,
		}
	}
	// A route with three replicas in different states, the common case of
	// a healthy cluster with one straggler, and one that is down.
	healthy := []health.Verdict{
		standby("10.0.0.2:5432", 300*time.Millisecond, 0x1_00000400, 2, 1024),
		standby("10.0.0.3:5432", 1200*time.Millisecond, 0x1_00000020, 40, 8192),
		standby("10.0.0.4:5432", 2*time.Second, 0x0_FFFFF000, 2600, 1<<20), // behind the floor, over the ms budget
	}
	degraded := []health.Verdict{
		healthy[0],
		standby("10.0.0.3:5432", 6*time.Second, 0x1_00000020, 40, 8192), // stale verdict
		{Target: health.Target{Route: "main", Addr: "10.0.0.4:5432", Configured: health.RoleStandby},
			ProbedAt: now.Add(-30 * time.Second), Err: "connection refused", LagMS: -1, LagBytes: -1},
	}

	cases := []struct {
		name     string
		replicas []health.Verdict
		req      Requirement
		eligible int // how many replicas pass: the benchmark checks its inputs
	}{
		{"no_floor", healthy, Requirement{VerdictTTL: ttl}, 3},
		{"lag_budget", healthy, Requirement{VerdictTTL: ttl, MaxLagMS: 2500, MaxLagBytes: 16 << 20}, 2},
		{"floor", healthy, Requirement{VerdictTTL: ttl, Floor: floor, PrimaryTimeline: 2}, 2},
		{"floor+lag_budget", healthy, Requirement{VerdictTTL: ttl, Floor: floor, PrimaryTimeline: 2, MaxLagMS: 2500, MaxLagBytes: 16 << 20}, 2},
		{"strict", healthy, Requirement{VerdictTTL: ttl, Floor: Token{LSN: 0x1_00000100}, Strict: true, PrimaryTimeline: 2}, 1},
		{"timeline_changed", healthy, Requirement{VerdictTTL: ttl, Floor: Token{Timeline: 1, LSN: 0x500}, PrimaryTimeline: 2}, 0},
		{"degraded", degraded, Requirement{VerdictTTL: ttl, Floor: floor, PrimaryTimeline: 2, MaxLagMS: 2500}, 1},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			n := 0
			for _, v := range tc.replicas {
				if ok, _ := Eligible(v, true, tc.req, now); ok {
					n++
				}
			}
			if n != tc.eligible {
				b.Fatalf("%d of %d replicas eligible, want %d", n, len(tc.replicas), tc.eligible)
			}
			b.ReportAllocs()
			for b.Loop() {
				for i := range tc.replicas {
					Eligible(tc.replicas[i], true, tc.req, now)
				}
			}
			b.ReportMetric(float64(len(tc.replicas)), "replicas/op")
		})
	}
}
