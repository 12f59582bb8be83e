package admin

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

// scrape fetches /metrics from a live HTTPServer without keep-alives, so
// no client goroutine outlives the request.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want the Prometheus text format", ct)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return string(b)
}

func wantLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, "\n"+l+"\n") {
			t.Errorf("exposition lacks line %q", l)
		}
	}
}

func wantNoSubstr(t *testing.T, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(text, s) {
			t.Errorf("exposition has %q, want it gone", s)
		}
	}
}

func TestServeMetricsExposition(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	m := NewMetrics()
	m.RouteDecision("app", "", "replica", "read")
	m.RouteDecision("app", "", "replica", "read")
	m.RouteDecision("app", "catalog_browse", "primary", "lag_exceeded")
	m.RouteDecision("app", "billing_balance", "primary", "class_primary_only")
	m.RouteDecision("app", "reporting_aggregate", "rejected", "replica_unavailable")
	m.PrimaryFallback("app", "lag_exceeded")
	m.RejectedRead("app", "replica_unavailable")
	m.ReadRetry("app", "pg2", "unreachable")
	m.ReadRetry("app", "pg2", "unreachable")
	m.ReadWait(0.003)
	m.QueryDuration("replica", 0.002)
	m.QueryDuration("primary", 0.2)
	m.ClientConnections(7)
	m.SetAllReplicasStale("app", 12.5)
	m.SetServers("app", []ServerSample{
		{Server: "pg1", LagBytes: 0, LagMS: 0, ProbeAge: 250 * time.Millisecond, PoolActive: 3, PoolIdle: 2},
		{Server: "pg2", LagBytes: 4096, LagMS: 120, ProbeAge: time.Second, PoolActive: 1, PoolIdle: 4},
		{Server: "pg3", LagBytes: -1, LagMS: -1, ProbeAge: 2 * time.Second, SplitBrain: true},
		{Server: "pg4", LagBytes: -1, LagMS: -1, ProbeAge: -time.Millisecond}, // never probed
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := ServeMetrics(ln, m)
	text := "\n" + scrape(t, ln.Addr().String())

	wantLines(t, text,
		`kinetic_route_decisions_total{query_class="default",reason="read",route="app",target="replica"} 2`,
		`kinetic_route_decisions_total{query_class="catalog_browse",reason="lag_exceeded",route="app",target="primary"} 1`,
		`kinetic_route_decisions_total{query_class="billing_balance",reason="class_primary_only",route="app",target="primary"} 1`,
		`kinetic_route_decisions_total{query_class="reporting_aggregate",reason="replica_unavailable",route="app",target="rejected"} 1`,
		`kinetic_primary_fallbacks_total{reason="lag_exceeded",route="app"} 1`,
		`kinetic_rejected_reads_total{reason="replica_unavailable",route="app"} 1`,
		`kinetic_read_retries_total{cause="unreachable",route="app",server="pg2"} 2`,
		`kinetic_read_wait_seconds_count 1`,
		`kinetic_read_wait_seconds_bucket{le="0.005"} 1`,
		`kinetic_read_wait_seconds_bucket{le="0.0025"} 0`,
		`kinetic_query_duration_seconds_count{target="replica"} 1`,
		`kinetic_query_duration_seconds_count{target="primary"} 1`,
		`kinetic_client_connections 7`,
		`kinetic_all_replicas_stale_seconds{route="app"} 12.5`,
		`kinetic_replica_lag_bytes{route="app",server="pg1"} 0`,
		`kinetic_replica_lag_bytes{route="app",server="pg2"} 4096`,
		`kinetic_replica_lag_ms{route="app",server="pg2"} 120`,
		`kinetic_probe_age_seconds{route="app",server="pg1"} 0.25`,
		`kinetic_probe_age_seconds{route="app",server="pg3"} 2`,
		`kinetic_split_brain{route="app",server="pg2"} 0`,
		`kinetic_split_brain{route="app",server="pg3"} 1`,
		`kinetic_split_brain{route="app",server="pg4"} 0`,
		`kinetic_pool_connections{route="app",server="pg4",state="idle"} 0`,
		`kinetic_pool_connections{route="app",server="pg1",state="active"} 3`,
		`kinetic_pool_connections{route="app",server="pg1",state="idle"} 2`,
		`kinetic_pool_connections{route="app",server="pg2",state="idle"} 4`,
	)
	// Unknown lag is omitted, not exported as a number that looks fresh.
	wantNoSubstr(t, text,
		`kinetic_replica_lag_bytes{route="app",server="pg3"}`,
		`kinetic_replica_lag_ms{route="app",server="pg3"}`,
		`kinetic_probe_age_seconds{route="app",server="pg4"}`,
		`query_class=""`,
	)
	// Go runtime and process collectors are registered.
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_start_time_seconds"} {
		if !strings.Contains(text, "\n"+name) {
			t.Errorf("exposition lacks runtime metric %s", name)
		}
	}

	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("listener still accepts after Close")
	}
}

func TestSetServersReplacesRoute(t *testing.T) {
	m := NewMetrics()
	m.SetServers("app", []ServerSample{
		{Server: "pg1", ProbeAge: time.Second},
		{Server: "pg2", LagBytes: 10, LagMS: 5, ProbeAge: time.Second, PoolIdle: 1},
	})
	m.SetServers("other", []ServerSample{{Server: "pgx", ProbeAge: time.Second}})
	if n := testutil.CollectAndCount(m.servers, MetricProbeAge); n != 3 {
		t.Fatalf("%s series = %d, want 3", MetricProbeAge, n)
	}

	// pg2 removed from route app (e.g. by RELOAD): its series disappear,
	// route other is untouched.
	m.SetServers("app", []ServerSample{{Server: "pg1", LagBytes: 0, LagMS: 0, ProbeAge: 2 * time.Second}})
	want := `
# HELP kinetic_probe_age_seconds Seconds since the server's last successful health probe.
# TYPE kinetic_probe_age_seconds gauge
kinetic_probe_age_seconds{route="app",server="pg1"} 2
kinetic_probe_age_seconds{route="other",server="pgx"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), MetricProbeAge); err != nil {
		t.Error(err)
	}
	for _, name := range []string{MetricReplicaLagBytes, MetricReplicaLagMS, MetricSplitBrain} {
		if n := testutil.CollectAndCount(m.servers, name); n != 2 {
			t.Errorf("%s series = %d, want 2", name, n)
		}
	}
	if n := testutil.CollectAndCount(m.servers, MetricPoolConnections); n != 4 {
		t.Errorf("%s series = %d, want 4 (2 servers × active, idle)", MetricPoolConnections, n)
	}

	// The caller's slice is copied: changing it later changes nothing.
	s := []ServerSample{{Server: "pg9", ProbeAge: time.Second}}
	m.SetServers("other", s)
	s[0].Server = "mutated"
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP kinetic_probe_age_seconds Seconds since the server's last successful health probe.
# TYPE kinetic_probe_age_seconds gauge
kinetic_probe_age_seconds{route="app",server="pg1"} 2
kinetic_probe_age_seconds{route="other",server="pg9"} 1
`), MetricProbeAge); err != nil {
		t.Error(err)
	}

	// Empty snapshot and ForgetRoute remove a route entirely.
	m.SetServers("other", nil)
	m.SetAllReplicasStale("app", 3)
	m.ForgetRoute("app")
	if n := testutil.CollectAndCount(m.servers); n != 0 {
		t.Errorf("after removing both routes: %d series, want 0", n)
	}
	if n := testutil.CollectAndCount(m.allStale); n != 0 {
		t.Errorf("after ForgetRoute: %d %s series, want 0", n, MetricAllReplicasStale)
	}
}

func TestRouteDecisionDefaultClass(t *testing.T) {
	m := NewMetrics()
	m.RouteDecision("app", "", "primary", "read_your_writes")
	m.RouteDecision("app", DefaultQueryClass, "primary", "read_your_writes")
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("app", "default", "primary", "read_your_writes")); got != 2 {
		t.Errorf(`query_class="default" = %v, want 2 (the "" and the explicit default)`, got)
	}
	if n := testutil.CollectAndCount(m.decisions); n != 1 {
		t.Errorf("decision series = %d, want 1", n)
	}
}

func TestClientCounterFunc(t *testing.T) {
	m := NewMetrics()
	m.ClientConnections(3)
	if got := testutil.ToFloat64(m.clients); got != 3 {
		t.Errorf("gauge = %v, want 3", got)
	}
	var n int64 = 42
	m.SetClientCounter(func() int64 { return n })
	m.ClientConnections(5) // ignored while a counter is installed
	if got := testutil.ToFloat64(m.clients); got != 42 {
		t.Errorf("with counter = %v, want 42", got)
	}
	m.SetClientCounter(nil)
	if got := testutil.ToFloat64(m.clients); got != 5 {
		t.Errorf("after removing counter = %v, want 5", got)
	}
}

// Two Metrics in one process must not collide: there is no global state.
func TestMetricsIndependentRegistries(t *testing.T) {
	a, b := NewMetrics(), NewMetrics()
	a.RejectedRead("app", "replica_unavailable")
	if n := testutil.CollectAndCount(b.rejected); n != 0 {
		t.Errorf("second Metrics sees %d rejected series, want 0", n)
	}
	if n := testutil.CollectAndCount(a.rejected); n != 1 {
		t.Errorf("first Metrics has %d rejected series, want 1", n)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	m := NewMetrics()
	record := func() {
		m.RouteDecision("app", "", "replica", "read")
		m.RouteDecision("app", "catalog_browse", "primary", "lag_exceeded")
		m.PrimaryFallback("app", "lag_exceeded")
		m.RejectedRead("app", "replica_unavailable")
		m.ReadWait(0.01)
		m.QueryDuration("replica", 0.001)
	}
	record() // first sight of each label set builds the children
	if a := testing.AllocsPerRun(1000, record); a != 0 {
		t.Errorf("hot path allocates %v times per run, want 0", a)
	}
}

func TestMetricsConcurrent(t *testing.T) {
	m := NewMetrics()
	const workers, per = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				m.RouteDecision("app", "", "replica", "read")
				m.QueryDuration("replica", 0.001)
				if i%50 == 0 {
					m.SetServers("app", []ServerSample{{Server: "pg1", ProbeAge: time.Duration(w) * time.Second}})
					if _, err := m.Registry().Gather(); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("app", "default", "replica", "read")); got != workers*per {
		t.Errorf("decisions = %v, want %d", got, workers*per)
	}
}
