package proxy

// Readiness for /readyz (admin.ReadinessSource): judged from the health
// verdicts the route runtimes already hold, never from a probe of its own.

import (
	"strconv"
	"strings"
	"time"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

var _ admin.ReadinessSource = (*Server)(nil)

// Readiness reports whether a config is in force, whether a listener is
// accepting, and each route's ability to serve per its latest verdicts.
// It is cheap (no I/O) and safe for concurrent use.
func (s *Server) Readiness() admin.Readiness {
	cfg := s.opts.Config.Load()
	r := admin.Readiness{ConfigLoaded: cfg != nil && s.routing.Load() != nil, Accepting: s.accepting()}
	if cfg == nil {
		return r
	}
	now := time.Now()
	for i := range cfg.Routes {
		rt := &cfg.Routes[i]
		c := s.routing.Load().route(rt.Name).checkerOf()
		if c == nil {
			r.Routes = append(r.Routes, routeReadiness(rt, false, health.Verdict{}, false, nil, now))
			continue
		}
		snap := c.Snapshot()
		pv, have := s.primaryVerdict(rt)
		req := freshness.Requirement{VerdictTTL: rt.HA.VerdictTTL(), MaxLagMS: int64(rt.Freshness.MaxReplicaLagMS),
			MaxLagBytes: rt.Freshness.MaxReplicaLagBytes}
		r.Routes = append(r.Routes, routeReadiness(rt, true, pv, have, s.candidatesFrom(rt, snap, req), now))
	}
	return r
}

// accepting reports whether Serve runs on a listener and no shutdown has
// begun.
func (s *Server) accepting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.draining && len(s.listeners) > 0
}

// routeReadiness judges route rt from the latest verdict on its primary
// (pv; have: whether there is one) and its replicas' eligibility under the
// route's lag budget (cands), at now. The primary is the one
// health.Snapshot.Primary names: the elected one with follow_failover. checked is false when the route runs
// no health checks (no replicas, or read_routing_mode = "off"). Examples:
//
//	primary reachable, not in recovery, verdict within verdict_ttl_ms   -> ready, primary_up
//	primary unreachable, one replica eligible (weight > 0)              -> ready, reads_only
//	primary in recovery (split brain, failover), one replica eligible   -> ready, reads_only
//	primary a split brain (Verdict.SplitBrain), no replica eligible     -> not ready, unavailable
//	primary unreachable, replicas unreachable or lagging                -> not ready, unavailable
//	primary not probed yet, no replica eligible                         -> not ready, unavailable
//	route without health checks                                         -> ready, unchecked
func routeReadiness(rt *config.Route, checked bool, pv health.Verdict, have bool, cands []candidate, now time.Time) admin.RouteReadiness {
	out := admin.RouteReadiness{Route: rt.Name, Primary: rt.Primary.Address, Replicas: len(rt.Replicas)}
	if !checked {
		out.Ready, out.State = true, admin.RouteUnchecked
		out.Reason = "the route runs no health checks (no replicas, or read_routing_mode = \"off\"): its primary is tried per connection"
		return out
	}
	var why []string // replicas that are not eligible, with their reason
	for _, c := range cands {
		switch {
		case c.eligible && c.weight > 0:
			out.ReplicasEligible++
		case c.eligible:
			why = append(why, c.addr+" weight 0")
		default:
			why = append(why, c.addr+" "+c.reason)
		}
	}
	replicas := strconv.Itoa(out.ReplicasEligible) + " of " + strconv.Itoa(len(cands)) + " replicas eligible for reads"
	if len(why) > 0 {
		replicas += " (" + strings.Join(why, ", ") + ")"
	}
	if have && pv.Addr != "" {
		out.Primary = pv.Addr // with follow_failover, the elected one
	}
	var primary string
	switch ttl := rt.HA.VerdictTTL(); {
	case !have:
		primary = "the primary has not been probed yet"
	case !pv.Reachable:
		primary = "the primary is unreachable: " + pv.Err
	case pv.Detected != health.RolePrimary:
		primary = "the primary is in recovery (split brain, or a failover in progress)"
	case pv.SplitBrain:
		primary = "the primary is a split brain (another server not in recovery on its timeline or a higher one)"
	case now.Sub(pv.ProbedAt) > ttl:
		primary = "the primary's last verdict is older than verdict_ttl_ms (" + ttl.String() + ")"
	default:
		out.Ready, out.State = true, admin.RoutePrimaryUp
		out.Reason = "the primary is reachable; " + replicas
		return out
	}
	if out.ReplicasEligible > 0 {
		out.Ready, out.State = true, admin.RouteReadsOnly
		out.Reason = primary + "; reads are served by replicas: " + replicas
		return out
	}
	out.State = admin.RouteUnavailable
	out.Reason = primary + "; " + replicas
	return out
}
