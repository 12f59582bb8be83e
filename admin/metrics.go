package admin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric names of SPEC §8. They are the contract with dashboards and with
// deploy/alerts.yml (alerts_test.go checks every name an alert uses is one
// of these).
const (
	MetricRouteDecisions    = "kinetic_route_decisions_total"
	MetricReplicaLagBytes   = "kinetic_replica_lag_bytes"
	MetricReplicaLagMS      = "kinetic_replica_lag_ms"
	MetricProbeAge          = "kinetic_probe_age_seconds"
	MetricSplitBrain        = "kinetic_split_brain"
	MetricReadWait          = "kinetic_read_wait_seconds"
	MetricPrimaryFallbacks  = "kinetic_primary_fallbacks_total"
	MetricRejectedReads     = "kinetic_rejected_reads_total"
	MetricAllReplicasStale  = "kinetic_all_replicas_stale_seconds"
	MetricClientConnections = "kinetic_client_connections"
	MetricPoolConnections   = "kinetic_pool_connections"
	MetricQueryDuration     = "kinetic_query_duration_seconds"
	MetricReadRetries       = "kinetic_read_retries_total"
	MetricLostWrites        = "kinetic_lost_writes_total"
	MetricStmtEvictions     = "kinetic_prepared_statement_evictions_total"
)

// DefaultQueryClass is the query_class label of a read that declared no
// class (SPEC §8).
const DefaultQueryClass = "default"

// readWaitBuckets cover read_after_write_timeout_ms (default 750 ms) with
// room for larger settings.
var readWaitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, .75, 1, 2.5, 5, 10}

// queryDurationBuckets run from sub-millisecond point reads to long reports.
var queryDurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics holds every metric of SPEC §8 plus the Go runtime and process
// collectors, in its own prometheus.Registry (never the global default
// one, so two proxies in one test binary do not collide).
//
// All methods are safe for concurrent use. The recording methods called per
// statement (RouteDecision, PrimaryFallback, RejectedRead, ReadWait,
// QueryDuration) look label children up in a read-locked cache and do not
// allocate once a label combination has been seen.
type Metrics struct {
	reg *prometheus.Registry

	decisions     *prometheus.CounterVec
	fallbacks     *prometheus.CounterVec
	rejected      *prometheus.CounterVec
	retries       *prometheus.CounterVec
	lostWrites    *prometheus.CounterVec
	stmtEvictions *prometheus.CounterVec
	readWait      prometheus.Histogram
	queryDuration *prometheus.HistogramVec
	allStale      *prometheus.GaugeVec

	decisionCache childCache[decisionKey, prometheus.Counter]
	fallbackCache childCache[routeReason, prometheus.Counter]
	rejectedCache childCache[routeReason, prometheus.Counter]
	retryCache    childCache[retryKey, prometheus.Counter]
	durationCache childCache[string, prometheus.Observer]

	clients *clientGauge
	servers *serverCollector
}

type decisionKey struct{ route, class, target, reason string }

type routeReason struct{ route, reason string }

type retryKey struct{ route, server, cause string }

// NewMetrics builds the registry with every metric registered. The
// labelled series of a route appear once the proxy declares the route
// (DeclareRoute, at 0) or records a first sample; per-server gauges appear
// with the first SetServers; kinetic_query_duration_seconds has its
// primary and replica series from the start.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRouteDecisions,
			Help: "Routing decisions by route, query class, target (primary, replica, rejected) and reason.",
		}, []string{"route", "query_class", "target", "reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrimaryFallbacks,
			Help: "Reads that could have gone to a replica but were sent to the primary, by reason.",
		}, []string{"route", "reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRejectedReads,
			Help: "Reads refused with KN001 because no server could serve them within their consistency contract, by reason.",
		}, []string{"route", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricReadRetries,
			Help: "Autocommit reads run again elsewhere because their replica failed before the first byte of the answer, by cause (connection_lost, or unreachable: a probe found the replica unreachable while the read waited).",
		}, []string{"route", "server", "cause"}),
		lostWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLostWrites,
			Help: "Sessions told KN002: their last write's token lay beyond the switch point of its timeline, so a failover lost it (SPEC §7).",
		}, []string{"route"}),
		stmtEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricStmtEvictions,
			Help: "Named statements closed on a server connection to keep it within max_prepared_statements (transaction pooling); a client that uses one again gets it prepared again.",
		}, []string{"route"}),
		readWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricReadWait,
			Help:    "Time reads waited for a replica to catch up (fallback_policy wait, read-your-writes).",
			Buckets: readWaitBuckets,
		}),
		queryDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricQueryDuration,
			Help:    "Statement duration as seen by the proxy, by target (primary, replica).",
			Buckets: queryDurationBuckets,
		}, []string{"target"}),
		allStale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricAllReplicasStale,
			Help: "Seconds every replica of the route has been ineligible for reads; 0 while one is eligible. Compare with lag_slo_window_ms.",
		}, []string{"route"}),
		clients: &clientGauge{desc: prometheus.NewDesc(MetricClientConnections,
			"Client connections currently open to the proxy.", nil, nil)},
		servers: newServerCollector(),
	}
	for _, target := range []string{"primary", "replica"} {
		// Both targets exist from start-up (at 0), like DeclareRoute's series.
		m.durationCache.get(target, func() prometheus.Observer { return m.queryDuration.WithLabelValues(target) })
	}
	m.reg.MustRegister(
		m.decisions, m.fallbacks, m.rejected, m.retries, m.lostWrites, m.stmtEvictions, m.readWait, m.queryDuration, m.allStale,
		m.clients, m.servers,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry is the registry holding every metric, for an HTTP handler or for
// tests (testutil.GatherAndCompare).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// RouteDecision counts one routing decision. An empty queryClass is labelled
// "default". target is primary, replica or rejected; reason is from the
// SPEC §8 vocabulary.
func (m *Metrics) RouteDecision(route, queryClass, target, reason string) {
	if queryClass == "" {
		queryClass = DefaultQueryClass
	}
	k := decisionKey{route, queryClass, target, reason}
	m.decisionCache.get(k, func() prometheus.Counter {
		return m.decisions.WithLabelValues(route, queryClass, target, reason)
	}).Inc()
}

// PrimaryFallback counts a read sent to the primary because no replica
// qualified (reason lag_exceeded, lag_unknown, replica_unavailable, ...).
func (m *Metrics) PrimaryFallback(route, reason string) {
	m.fallbackCache.get(routeReason{route, reason}, func() prometheus.Counter {
		return m.fallbacks.WithLabelValues(route, reason)
	}).Inc()
}

// RejectedRead counts a read refused with KN001 (fallback_policy reject or
// require_replica with no qualifying replica, fallback_overload, ...).
func (m *Metrics) RejectedRead(route, reason string) {
	m.rejectedCache.get(routeReason{route, reason}, func() prometheus.Counter {
		return m.rejected.WithLabelValues(route, reason)
	}).Inc()
}

// ReadRetry counts a read run again elsewhere after its replica server
// failed before answering (cause connection_lost or unreachable).
func (m *Metrics) ReadRetry(route, server, cause string) {
	m.retryCache.get(retryKey{route, server, cause}, func() prometheus.Counter {
		return m.retries.WithLabelValues(route, server, cause)
	}).Inc()
}

// ReadWait observes how long a read waited for a replica to catch up.
func (m *Metrics) ReadWait(seconds float64) { m.readWait.Observe(seconds) }

// QueryDuration observes one statement's duration on target.
func (m *Metrics) QueryDuration(target string, seconds float64) {
	m.durationCache.get(target, func() prometheus.Observer {
		return m.queryDuration.WithLabelValues(target)
	}).Observe(seconds)
}

// ClientConnections sets kinetic_client_connections. It is ignored once
// SetClientCounter has installed a counter function.
func (m *Metrics) ClientConnections(n int) { m.clients.n.Store(int64(n)) }

// SetClientCounter makes kinetic_client_connections read fn at scrape time
// instead of the value last passed to ClientConnections. fn must be cheap
// and safe for concurrent use; nil reverts to ClientConnections.
func (m *Metrics) SetClientCounter(fn func() int64) {
	if fn == nil {
		m.clients.fn.Store(nil)
		return
	}
	m.clients.fn.Store(&fn)
}

// ServerSample is one server's health as the proxy last saw it.
type ServerSample struct {
	// Route is informational: SetServers labels every sample with its route
	// argument.
	Route string
	// Server is the server's name, required; it is the server label.
	Server string
	// LagBytes and LagMS are the replica's lag; -1 means unknown, and the
	// series is then omitted rather than exported as a number (an unknown
	// lag must not look like 0). A primary reports 0.
	LagBytes, LagMS int64
	// ProbeAge is the time since the last successful probe; negative means
	// never probed, and the series is omitted (an age of 0 would look fresh).
	ProbeAge time.Duration
	// SplitBrain is true on a role mismatch (SPEC §5): a configured replica
	// that is not in recovery, or a configured primary that is.
	SplitBrain bool
	// PoolActive and PoolIdle are the server's pooled connections.
	PoolActive, PoolIdle int
}

// SetServers replaces the health-derived series of route
// (kinetic_replica_lag_bytes, kinetic_replica_lag_ms,
// kinetic_probe_age_seconds, kinetic_split_brain, kinetic_pool_connections)
// with samples: a server missing from samples disappears from the
// exposition. An empty samples removes the route's series. samples is
// copied.
func (m *Metrics) SetServers(route string, samples []ServerSample) {
	m.servers.set(route, samples)
}

// SetAllReplicasStale sets how long every replica of route has been
// ineligible for reads (0 when at least one is eligible).
func (m *Metrics) SetAllReplicasStale(route string, seconds float64) {
	m.allStale.WithLabelValues(route).Set(seconds)
}

// DecisionLabels names one kinetic_route_decisions_total series of a route.
// An empty QueryClass is "default", as in RouteDecision.
type DecisionLabels struct{ QueryClass, Target, Reason string }

// RouteSeries lists the labelled series of one route that exist from the
// moment the route does, at 0 until their first event: without them a
// rate() in an alert or a dashboard reads "no data" instead of 0 until
// the first fallback, rejection or retry.
type RouteSeries struct {
	Route string
	// Decisions: kinetic_route_decisions_total{route,query_class,target,reason}.
	Decisions []DecisionLabels
	// FallbackReasons: kinetic_primary_fallbacks_total{route,reason}.
	FallbackReasons []string
	// RejectReasons: kinetic_rejected_reads_total{route,reason}.
	RejectReasons []string
	// RetryServers x RetryCauses: kinetic_read_retries_total{route,server,cause}.
	RetryServers, RetryCauses []string
}

// DeclareRoute makes every series rs names exist, at 0 if it has no
// value yet; series that already have one keep it (a reload declares the
// routes again). kinetic_all_replicas_stale_seconds{route} is declared too.
func (m *Metrics) DeclareRoute(rs RouteSeries) {
	r := rs.Route
	for _, d := range rs.Decisions {
		class := d.QueryClass
		if class == "" {
			class = DefaultQueryClass
		}
		m.decisionCache.get(decisionKey{r, class, d.Target, d.Reason}, func() prometheus.Counter {
			return m.decisions.WithLabelValues(r, class, d.Target, d.Reason)
		})
	}
	for _, reason := range rs.FallbackReasons {
		m.fallbackCache.get(routeReason{r, reason}, func() prometheus.Counter {
			return m.fallbacks.WithLabelValues(r, reason)
		})
	}
	for _, reason := range rs.RejectReasons {
		m.rejectedCache.get(routeReason{r, reason}, func() prometheus.Counter {
			return m.rejected.WithLabelValues(r, reason)
		})
	}
	for _, server := range rs.RetryServers {
		for _, cause := range rs.RetryCauses {
			m.retryCache.get(retryKey{r, server, cause}, func() prometheus.Counter {
				return m.retries.WithLabelValues(r, server, cause)
			})
		}
	}
	m.allStale.WithLabelValues(r) // created at 0 when absent, unchanged otherwise
	m.lostWrites.WithLabelValues(r)
	m.stmtEvictions.WithLabelValues(r)
}

// LostWrite counts a session of route told that a failover lost its last
// write (KN002).
func (m *Metrics) LostWrite(route string) { m.lostWrites.WithLabelValues(route).Inc() }

// StatementsEvicted counts n named statements closed on a server
// connection of route for max_prepared_statements.
func (m *Metrics) StatementsEvicted(route string, n int) {
	m.stmtEvictions.WithLabelValues(route).Add(float64(n))
}

// ForgetRoute drops the per-route gauges of a route that a reload removed.
// Counters are kept: a counter that vanishes looks like a reset.
func (m *Metrics) ForgetRoute(route string) {
	m.servers.set(route, nil)
	m.allStale.DeleteLabelValues(route)
}

// childCache maps label values to a vector's child so the hot path does not
// hash label values and build slices on every call.
type childCache[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (c *childCache[K, V]) get(k K, mk func() V) V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[k]; ok {
		return v
	}
	if c.m == nil {
		c.m = make(map[K]V)
	}
	v = mk()
	c.m[k] = v
	return v
}

// clientGauge is kinetic_client_connections: a stored value, or a function
// read at scrape time.
type clientGauge struct {
	desc *prometheus.Desc
	n    atomic.Int64
	fn   atomic.Pointer[func() int64]
}

func (g *clientGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *clientGauge) Collect(ch chan<- prometheus.Metric) {
	v := g.n.Load()
	if fn := g.fn.Load(); fn != nil {
		v = (*fn)()
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(v))
}

// serverCollector exports the per-server gauges from the latest snapshot of
// each route. Replacing a route's snapshot whole means a scrape never sees
// half an update and removed servers leave no stale series behind.
type serverCollector struct {
	lagBytes, lagMS, probeAge, splitBrain, pool *prometheus.Desc

	mu     sync.Mutex
	routes map[string][]ServerSample
}

func newServerCollector() *serverCollector {
	rs := []string{"route", "server"}
	return &serverCollector{
		lagBytes: prometheus.NewDesc(MetricReplicaLagBytes,
			"Replica replay lag behind the primary in bytes of WAL (0 for the primary); absent while unknown.", rs, nil),
		lagMS: prometheus.NewDesc(MetricReplicaLagMS,
			"Replica replay lag behind the primary in milliseconds (0 for the primary); absent while unknown.", rs, nil),
		probeAge: prometheus.NewDesc(MetricProbeAge,
			"Seconds since the server's last successful health probe.", rs, nil),
		splitBrain: prometheus.NewDesc(MetricSplitBrain,
			"1 when the server's detected role contradicts its configured role (a replica not in recovery, or a primary in recovery).", rs, nil),
		pool: prometheus.NewDesc(MetricPoolConnections,
			"Pooled server connections by state (active, idle).", []string{"route", "server", "state"}, nil),
		routes: make(map[string][]ServerSample),
	}
}

func (c *serverCollector) set(route string, samples []ServerSample) {
	cp := append([]ServerSample(nil), samples...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(cp) == 0 {
		delete(c.routes, route)
		return
	}
	c.routes[route] = cp
}

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagBytes
	ch <- c.lagMS
	ch <- c.probeAge
	ch <- c.splitBrain
	ch <- c.pool
}

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	routes := make([]string, 0, len(c.routes))
	snap := make(map[string][]ServerSample, len(c.routes))
	for r, s := range c.routes {
		routes = append(routes, r)
		snap[r] = s // slices are never mutated after set
	}
	c.mu.Unlock()
	sort.Strings(routes)
	for _, r := range routes {
		for _, s := range snap[r] {
			if s.LagBytes >= 0 {
				ch <- prometheus.MustNewConstMetric(c.lagBytes, prometheus.GaugeValue, float64(s.LagBytes), r, s.Server)
			}
			if s.LagMS >= 0 {
				ch <- prometheus.MustNewConstMetric(c.lagMS, prometheus.GaugeValue, float64(s.LagMS), r, s.Server)
			}
			if s.ProbeAge >= 0 {
				ch <- prometheus.MustNewConstMetric(c.probeAge, prometheus.GaugeValue, s.ProbeAge.Seconds(), r, s.Server)
			}
			sb := 0.0
			if s.SplitBrain {
				sb = 1
			}
			ch <- prometheus.MustNewConstMetric(c.splitBrain, prometheus.GaugeValue, sb, r, s.Server)
			ch <- prometheus.MustNewConstMetric(c.pool, prometheus.GaugeValue, float64(s.PoolActive), r, s.Server, "active")
			ch <- prometheus.MustNewConstMetric(c.pool, prometheus.GaugeValue, float64(s.PoolIdle), r, s.Server, "idle")
		}
	}
}

// closeGrace bounds how long Close waits for a scrape in progress.
const closeGrace = 2 * time.Second

// HTTPServer serves the registry in the Prometheus text format at /metrics.
// It owns one goroutine; Close stops it and waits.
type HTTPServer struct {
	srv  *http.Server
	done chan struct{}
	err  error // Serve's result, read after done is closed
}

// ServeMetrics serves m at /metrics on ln ([metrics] listen) until Close,
// with /healthz and a /readyz that is never ready (no ReadinessSource).
// The server takes ownership of ln.
func ServeMetrics(ln net.Listener, m *Metrics) *HTTPServer { return Serve(ln, m, nil, false) }

// Serve serves m at /metrics on ln ([metrics] listen) until Close, plus
// /healthz (200 while the process serves) and /readyz (200 when ready
// reports the instance ready, else 503; health.go). The server takes
// ownership of ln. With profiles ([metrics] pprof) it also serves Go's
// runtime profiles at /debug/pprof/.
func Serve(ln net.Listener, m *Metrics, ready ReadinessSource, profiles bool) *HTTPServer {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	}))
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", readyz(ready))
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	h := &HTTPServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       60 * time.Second,
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			h.err = err
		}
	}()
	return h
}

// Close stops accepting, lets a scrape in progress finish (for at most
// closeGrace, then cuts its connection), waits for the serving goroutine and
// returns Serve's error if it failed. It is safe to call more than once.
func (h *HTTPServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	if err != nil {
		err = h.srv.Close()
	}
	<-h.done
	if h.err != nil {
		return h.err
	}
	return err
}
