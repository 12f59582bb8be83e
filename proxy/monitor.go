package proxy

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/freshness"
)

// monitor refreshes the health-derived metrics once a second and runs
// auto_rollback: when every replica of a route has been ineligible for
// longer than lag_slo_window_ms, routing rolls back to primary-only and
// says so loudly (SPEC §6). Owned by the Server; Close stops it.
func (s *Server) monitor(ctx context.Context) {
	staleSince := map[string]time.Time{}
	s.observeServers(staleSince, time.Now()) // per-server series from start-up, not after a second
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.observeServers(staleSince, time.Now())
	}
}

func (s *Server) observeServers(staleSince map[string]time.Time, now time.Time) {
	cfg := s.opts.Config.Load()
	rows := consoleSource{s: s}.Servers()
	for i := range cfg.Routes {
		rt := &cfg.Routes[i]
		var samples []admin.ServerSample
		anyEligible := false
		for _, r := range rows {
			if r.Route != rt.Name {
				continue
			}
			age := time.Duration(r.ProbeAgeMS) * time.Millisecond
			samples = append(samples, admin.ServerSample{Route: rt.Name, Server: r.Address, LagBytes: r.LagBytes,
				LagMS: r.LagMS, ProbeAge: age, SplitBrain: r.SplitBrain, PoolActive: r.PoolActive, PoolIdle: r.PoolIdle})
		}
		req := freshness.Requirement{VerdictTTL: rt.HA.VerdictTTL(), MaxLagMS: int64(rt.Freshness.MaxReplicaLagMS),
			MaxLagBytes: rt.Freshness.MaxReplicaLagBytes}
		for _, c := range s.candidates(rt, req) {
			anyEligible = anyEligible || c.eligible && c.weight > 0
		}
		s.metrics.SetServers(rt.Name, samples)
		if len(rt.Replicas) == 0 || anyEligible {
			delete(staleSince, rt.Name)
			s.metrics.SetAllReplicasStale(rt.Name, 0)
			continue
		}
		since, ok := staleSince[rt.Name]
		if !ok {
			since = now
			staleSince[rt.Name] = now
		}
		stale := now.Sub(since)
		s.metrics.SetAllReplicasStale(rt.Name, stale.Seconds())
		if cfg.Rollout.AutoRollback && stale > cfg.Rollout.LagSLOWindow() {
			if _, rolledBack := s.rollout.get(rt.Name); !rolledBack {
				if err := s.rollout.rollback(s.routeNames()); err != nil {
					s.log.Error("auto_rollback: could not persist the rollback", zap.Error(err))
					continue
				}
				s.syncers.kick()
				s.log.Error("AUTO ROLLBACK: every replica of the route stayed ineligible beyond lag_slo_window_ms; all reads now go to the primary until ROUTING STAGE n",
					zap.String("route", rt.Name), zap.Duration("stale_for", stale), zap.Duration("lag_slo_window", cfg.Rollout.LagSLOWindow()))
			}
		}
	}
}
