package proxy

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// The pool janitor: closes pooled server connections idle longer than
// server_idle_timeout_ms, or older than server_lifetime_ms while idle
// (pool.Pool.Sweep). One goroutine per Server, owned by its wg and
// stopped with the monitor (stopMon).

// janitorPeriod is how often the janitor sweeps under cfg: a quarter of
// the shortest timeout, between 10 ms and 1 s.
func janitorPeriod(cfg *config.Config) time.Duration {
	d := time.Second
	cs := cfg.Server
	for _, t := range []int{cs.ServerIdleTimeoutMS, cs.ServerLifetimeMS, cs.QueryTimeoutMS, cs.IdleTransactionTimeoutMS, cs.ClientIdleTimeoutMS} {
		if t > 0 {
			d = min(d, time.Duration(t)*time.Millisecond/4)
		}
	}
	return max(d, 10*time.Millisecond)
}

func (s *Server) janitor(ctx context.Context) {
	t := time.NewTimer(janitorPeriod(s.opts.Config.Load()))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.pools.Each(func(p *pool.Pool) { p.Sweep(now) })
			// Sessions keep the config they started with, so each is
			// checked against its own timeouts (timeouts.go).
			for _, ss := range s.sessionList() {
				ss.checkTimeouts(now)
			}
			t.Reset(janitorPeriod(s.opts.Config.Load()))
		}
	}
}

// Metric names of the dial bound (max_concurrent_dials).
const (
	metricDialsInProgress    = "kinetic_server_dials_in_progress"
	metricDialsInProgressMax = "kinetic_server_dials_in_progress_max"
)

// registerDialMetrics exports the server logins in progress (all servers)
// and the most there were at once since start. (A Metrics shared by a
// second Server keeps the first one's.)
func (s *Server) registerDialMetrics() {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricDialsInProgress,
			Help: "Server logins (connect, TLS, authentication) of the pools and of kineticd's own lookups in progress now, all servers together; at most max_concurrent_dials per server."},
			func() float64 { return float64(s.pools.DialStats().InProgress) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricDialsInProgressMax,
			Help: "The most server logins of the pools and of kineticd's own lookups that were in progress at once since start."},
			func() float64 { return float64(s.pools.DialStats().Peak) }),
	} {
		s.metrics.Registry().Register(c)
	}
}
