package proxy

// Route recording: what a unit's route is remembered and counted as, for
// SHOW pg_kinetic.last_route, SHOW ROUTES, the route metrics and the
// debug log (SPEC §8), and the session effects a routed unit records.

import (
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// recordRoute remembers a unit's route for SHOW pg_kinetic.last_route and
// the session's pinning effects. A unit that runs nothing (runsNothing:
// a driver's Close of a cached statement, a Parse and Describe alone) is
// counted but leaves last_route naming the last statement that ran: pgx
// deallocates an evicted statement right before the client's next query,
// which is how a SHOW pg_kinetic.last_route after a replica read came to
// say primary (the consistency checker's route samples).
func (ss *session) recordRoute(d decision, ds []*classified, ran bool) {
	target := d.target
	lag := "0"
	if target == targetReplica {
		lag = strconv.FormatInt(d.lagMS, 10)
		if d.lagMS < 0 {
			lag = "unknown"
		}
	}
	class := ""
	for _, dec := range ds {
		if dec.Hints.Class != "" {
			class = dec.Hints.Class
			break
		}
	}
	if class == "" {
		class = ss.queryClass
	}
	ss.countRoute(target, d.reason, lag, class, ran)
	ss.recordEffects(ds)
	for _, dec := range ds {
		if containsFold(dec.text, "pg_terminate_backend") {
			ss.srv.terminations.Add(1)
			break
		}
	}
}

// setLastRoute records a unit's route for SHOW pg_kinetic.last_route and
// counts it for SHOW ROUTES.
func (ss *session) setLastRoute(target, reason, lag, class string) {
	ss.countRoute(target, reason, lag, class, true)
}

// countRoute counts a unit's route for SHOW ROUTES and the metrics and,
// with remember, records it for SHOW pg_kinetic.last_route.
func (ss *session) countRoute(target, reason, lag, class string, remember bool) {
	if remember {
		ss.mu.Lock()
		ss.mu.last = lastRoute{target: target, reason: reason, lag: lag, start: time.Now()}
		ss.mu.Unlock()
	}
	if ss.route != nil {
		ss.decisionCounter(class, target).Add(1)
		ss.srv.metrics.RouteDecision(ss.route.Name, class, target, reason)
		if target == targetRejected {
			ss.srv.metrics.RejectedRead(ss.route.Name, reason)
		} else if target == targetPrimary && isFallback(reason) {
			ss.srv.metrics.PrimaryFallback(ss.route.Name, reason)
		}
		if ce := ss.log.Check(zap.DebugLevel, "route"); ce != nil {
			ce.Write(zap.String("route", ss.route.Name), zap.String("class", class), zap.String("target", target),
				zap.String("reason", reason), zap.String("lag_ms", lag))
		}
	}
}

// runsNothing reports whether b is a whole unit (it ends with Sync) that
// runs no statement: no Execute, Query or FunctionCall.
func runsNothing(b *batch) bool {
	if len(b.msgs) == 0 || b.msgs[len(b.msgs)-1].typ != 'S' {
		return false // (a unit streamed on: its Execute may follow)
	}
	for _, m := range b.msgs {
		switch m.typ {
		case 'E', 'Q', 'F':
			return false
		}
	}
	return true
}

// lastRoute is what SHOW pg_kinetic.last_route reports, kept in parts so
// recording it costs no allocation per unit, and when the unit started
// (zero once its duration is observed, at its ReadyForQuery).
type lastRoute struct {
	target, reason, lag string
	start               time.Time
}

func (r lastRoute) String() string {
	return "target=" + r.target + " reason=" + r.reason + " lag_ms=" + r.lag
}

// decisionCounter is the route's counter of decisions by class and
// target (routeRuntime.decisions, carried across reloads), remembered by
// the session so that counting costs no lookup of a composed key per unit.
func (ss *session) decisionCounter(class, target string) *atomic.Uint64 {
	for _, c := range ss.counters {
		if c.class == class && c.target == target {
			return c.n
		}
	}
	c := new(atomic.Uint64) // (the route is gone from the config in force: counted nowhere)
	if run := ss.runtime(); run != nil {
		key := class + "\x00" + target
		v, ok := run.decisions.Load(key)
		if !ok {
			v, _ = run.decisions.LoadOrStore(key, c)
		}
		c = v.(*atomic.Uint64)
	}
	ss.counters = append(ss.counters, sessionCounter{class: class, target: target, n: c})
	return c
}

// sessionCounter is one entry of session.counters: a session meets few
// (class, target) pairs, so a short list beats a map in time and memory.
type sessionCounter struct {
	class, target string
	n             *atomic.Uint64
}

// decisionCount is how many units of route went to target in class.
func (s *Server) decisionCount(route, class, target string) uint64 {
	if run := s.routing.Load().route(route); run != nil {
		if v, ok := run.decisions.Load(class + "\x00" + target); ok {
			return v.(*atomic.Uint64).Load()
		}
	}
	return 0
}

// rangeDecisions calls f with every route's decision counters, keyed
// class + "\x00" + target, until f returns false.
func (s *Server) rangeDecisions(f func(key, counter any) bool) {
	r := s.routing.Load()
	if r == nil {
		return
	}
	for _, run := range r.routes {
		more := true
		run.decisions.Range(func(k, v any) bool {
			more = f(k, v)
			return more
		})
		if !more {
			return
		}
	}
}
