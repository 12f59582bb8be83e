package proxy

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

// Failover (SPEC §7, routes.ha.follow_failover): where a route's writes go
// is the health Checker's election (health.Elect), read from its latest
// snapshot at every unit that needs the primary. No write is sent to a
// server that is not the elected primary at that moment: a session whose
// primary connection is to another server reconnects when it is idle, and
// ends (08006) when its transaction or its pinned state is there.

// primaryOf returns the address of route rt's primary as the snapshot
// snap sees it, or "" and why there is none (a sentence for an error's
// DETAIL). With fixed roles (follow_failover = false) it is the
// configured primary.
//
// For example, with primary a and replicas b, c configured:
//
//	follow_failover = false                    → a
//	election {b, timeline 2}                   → b
//	election ambiguous on timeline 2           → "", "two servers ... are primaries on timeline 2 ..."
//	election none, no verdict of a, or a down  → a (a write there fails by itself if a is down)
//	election none, a up in recovery            → "", "no server of route ... is reachable outside recovery"
func primaryOf(rt *config.Route, snap *health.Snapshot) (addr, why string) {
	if !rt.HA.FollowFailover || snap == nil {
		return rt.Primary.Address, ""
	}
	e, ok := snap.Election(rt.Name)
	switch {
	case ok && e.Primary != "":
		return e.Primary, ""
	case ok && e.Ambiguous:
		return "", fmt.Sprintf("two servers of route %s are primaries on timeline %d (split brain): writes fail closed",
			quoteIdent(rt.Name), e.Timeline)
	}
	// No primary elected. The configured primary is tried unless the
	// probes saw it up and not the primary (in recovery, a split brain,
	// another system): an unknown or unreachable verdict may be a probe
	// that timed out, and a write to a server that is down fails by itself.
	if v, seen := snap.Get(rt.Primary.Address); !seen || !v.Reachable {
		return rt.Primary.Address, ""
	}
	return "", fmt.Sprintf("no server of route %s is reachable outside recovery", quoteIdent(rt.Name))
}

// routeServers lists every configured server of rt, the primary first:
// the candidates of its election.
func routeServers(rt *config.Route) []config.Endpoint {
	out := make([]config.Endpoint, 0, 1+len(rt.Replicas))
	out = append(out, rt.Primary)
	return append(out, rt.Replicas...)
}

// readServers lists the servers of rt that may serve reads as replicas,
// with their weights: the configured replicas, and with follow_failover
// also the configured primary (weight 1: it has none of its own) when it
// is not the elected primary — a demoted primary rewound as a standby
// serves reads again once fresh. The elected primary is never among them.
func readServers(rt *config.Route, snap *health.Snapshot) []config.Endpoint {
	if !rt.HA.FollowFailover || snap == nil {
		return rt.Replicas
	}
	out := make([]config.Endpoint, 0, 1+len(rt.Replicas))
	forReadServers(rt, snap, func(e config.Endpoint) { out = append(out, e) })
	return out
}

// forReadServers calls fn with each of readServers' servers, in its
// order, without making the list (a routed read's decision runs it).
func forReadServers(rt *config.Route, snap *health.Snapshot, fn func(config.Endpoint)) {
	if !rt.HA.FollowFailover || snap == nil {
		for _, r := range rt.Replicas {
			fn(r)
		}
		return
	}
	elected, _ := primaryOf(rt, snap)
	if rt.Primary.Address != elected {
		if v, ok := snap.Get(rt.Primary.Address); ok && v.Detected == health.RoleStandby {
			fn(config.Endpoint{Address: rt.Primary.Address, Weight: 1})
		}
	}
	for _, r := range rt.Replicas {
		if r.Address != elected {
			fn(r)
		}
	}
}

// fallBackTold moves a token the session was told KN002 with (and kept:
// lostWrite) to what survived of it, to, once the primary's history shows
// it lost: the report covered it, so nothing is told or counted again.
func (ss *session) fallBackTold(to freshness.Token) {
	ss.mu.Lock()
	ss.fallBackLocked(to)
	ss.mu.Unlock()
}

// fallBackLocked sets the token to to, what survived of a lost one, and a
// floor still on an earlier timeline with it. Callers hold ss.mu.
func (ss *session) fallBackLocked(to freshness.Token) {
	ss.mu.fresh.token, ss.mu.fresh.told = to, freshness.Token{}
	if ss.mu.fresh.floor.Timeline != 0 && ss.mu.fresh.floor.Timeline < to.Timeline {
		ss.mu.fresh.floor = to
	}
}

// snapshotOf is the latest health snapshot of route name, nil when the
// route is not probed.
func (s *Server) snapshotOf(name string) *health.Snapshot {
	if c := s.routing.Load().route(name).checkerOf(); c != nil {
		return c.Snapshot()
	}
	return nil
}

// lostWrite records that the session was told a write of it was (or, for
// an unsure write, may have been) lost in a failover (planUnit's KN002):
// with to, the token, and a floor still on the old timeline, fall back to
// what survived of them, *to (the switch point on the new timeline), so
// only this unit fails; the metric and the log say so. The unsure write,
// if any, has been told.
func (ss *session) lostWrite(to *freshness.Token) {
	ss.mu.Lock()
	lost := ss.mu.fresh.token
	ss.mu.fresh.unsure, ss.mu.fresh.prior = unsureWrite{}, freshness.Token{}
	now := lost
	ss.mu.fresh.told = lost // (the token stays: this report covers it)
	if to != nil {
		now = *to
		ss.fallBackLocked(now)
	}
	ss.mu.Unlock()
	if ss.srv != nil {
		ss.srv.metrics.LostWrite(ss.route.Name)
	}
	ss.log.Warn("a session's last write was lost in a failover (KN002)", zap.String("route", ss.route.Name),
		zap.Stringer("token", lost), zap.Stringer("now", now))
}
