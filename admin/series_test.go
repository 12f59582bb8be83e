package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/proxy"
)

// SPEC §8 reasons a read falls back to the primary for, and those it is
// rejected for (the same, or the fallback limit).
var (
	fallbackReasons = []string{"read_your_writes", "strict_fresh", "lag_exceeded", "lag_unknown", "replica_unavailable",
		"split_brain", "timeline_changed"}
	rejectReasons = append(slices.Clone(fallbackReasons), "fallback_overload")
	retryCauses   = []string{"connection_lost", "unreachable"}
	// Gauges that are 0 on an idle proxy with every server down.
	zeroGauges = []string{admin.MetricPoolConnections, admin.MetricSplitBrain, admin.MetricClientConnections}
)

// deadAddrs returns n loopback addresses nothing listens on.
func deadAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		ln.Close()
	}
	return out
}

// seriesConfig is a config with route "app" (reads routed, two replicas,
// a tolerant and a primary_only class) and route "plain" (routing off, no
// replicas), plus route "extra" when extra is set. Every server is down.
func seriesConfig(a []string, extra bool) string {
	s := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"

[[users]]
name = "app"
password = "secret"

[[routes]]
name = "app"
database = "app"
[routes.primary]
address = %q
[[routes.replicas]]
address = %q
weight = 1
[[routes.replicas]]
address = %q
weight = 1
[routes.read_routing]
read_routing_mode = "prefer_replica"
[routes.ha]
replica_health_interval_ms = 200
replica_health_timeout_ms = 100
[[routes.query_classes]]
name = "catalog_browse"
routing = "replica_tolerates_staleness"
stage = 1
[[routes.query_classes]]
name = "billing_balance"
routing = "primary_only"

[[routes]]
name = "plain"
database = "plain"
[routes.primary]
address = %q
`, a[0], a[1], a[2], a[3])
	if extra {
		s += fmt.Sprintf(`
[[routes]]
name = "extra"
database = "extra"
[routes.primary]
address = %q
[[routes.replicas]]
address = %q
weight = 1
[routes.read_routing]
read_routing_mode = "require_replica"
[routes.ha]
replica_health_interval_ms = 200
replica_health_timeout_ms = 100
[[routes.query_classes]]
name = "reporting_aggregate"
routing = "replica_if_lag_ok"
`, a[4], a[5])
	}
	return s
}

func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// scrapeFamilies scrapes /metrics once routes' per-server series are
// there (the monitor publishes them as it starts), at most 10 s.
func scrapeFamilies(t *testing.T, addr string, routes []string) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, b := httpGet(t, "http://"+addr+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		missing := ""
		for _, r := range routes {
			if !hasSeries(mfs[admin.MetricPoolConnections], map[string]string{"route": r}) {
				missing = r
			}
		}
		if missing == "" {
			return mfs
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s series of route %s after 10 s", admin.MetricPoolConnections, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

func matches(m *dto.Metric, want map[string]string) bool {
	ls := labelsOf(m)
	for k, v := range want {
		if ls[k] != v {
			return false
		}
	}
	return true
}

func hasSeries(mf *dto.MetricFamily, want map[string]string) bool {
	if mf == nil {
		return false
	}
	return slices.ContainsFunc(mf.GetMetric(), func(m *dto.Metric) bool { return matches(m, want) })
}

// family is the family a selector's metric name belongs to (a histogram's
// _bucket, _count and _sum belong to the histogram).
func family(mfs map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if mf, ok := mfs[name]; ok {
		return mf
	}
	for _, suf := range []string{"_bucket", "_count", "_sum"} {
		if mf, ok := mfs[strings.TrimSuffix(name, suf)]; ok && strings.HasSuffix(name, suf) {
			return mf
		}
	}
	return nil
}

// value is a sample's value: a counter's or gauge's, a histogram's count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// checkStartupSeries asserts that every series the alerts and the dashboard
// select exists at 0 for every route of cfg, and for every reason and
// server where the metric has those labels.
func checkStartupSeries(t *testing.T, mfs map[string]*dto.MetricFamily, cfg *config.Config, uses []admin.SeriesUse) {
	t.Helper()
	routesReads := func(rt *config.Route) bool {
		return rt.ReadRouting.ReadRoutingMode != "" && rt.ReadRouting.ReadRoutingMode != config.RoutingOff
	}
	want := func(metric string, labels map[string]string, why string) {
		t.Helper()
		mf := family(mfs, metric)
		if !hasSeries(mf, labels) {
			t.Errorf("%s%v missing at start-up (%s)", metric, labels, why)
			return
		}
		if mf.GetType() != dto.MetricType_COUNTER && mf.GetType() != dto.MetricType_HISTOGRAM && !slices.Contains(zeroGauges, metric) {
			return // a gauge of time (all_replicas_stale) need not be 0
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) && value(m) != 0 {
				t.Errorf("%s%v = %v with no traffic, want 0", metric, labelsOf(m), value(m))
			}
		}
	}
	for _, u := range uses {
		switch u.Metric {
		case admin.MetricProbeAge:
			continue // (the age of the last probe, reached or not: see SHOW SERVERS)
		case admin.MetricReplicaLagBytes, admin.MetricReplicaLagMS:
			// Absent while unknown (every server here is down): an unknown
			// lag must not read as 0.
			for i := range cfg.Routes {
				for _, rep := range cfg.Routes[i].Replicas {
					if l := map[string]string{"route": cfg.Routes[i].Name, "server": rep.Address}; hasSeries(family(mfs, u.Metric), l) {
						t.Errorf("%s%v exported although the server was never reached", u.Metric, l)
					}
				}
			}
			continue
		}
		if !slices.Contains(u.Labels, "route") {
			want(u.Metric, u.Equals, u.Where)
			continue
		}
		for i := range cfg.Routes {
			rt := &cfg.Routes[i]
			if slices.Contains(u.Labels, "server") && slices.Contains(u.Labels, "cause") && len(rt.Replicas) == 0 {
				continue // read retries: a route without replicas retries nothing
			}
			l := map[string]string{"route": rt.Name}
			for k, v := range u.Equals {
				if k == "target" && !routesReads(rt) {
					continue // a route that routes no reads has no replica decisions
				}
				l[k] = v
			}
			want(u.Metric, l, u.Where)
		}
	}
	for i := range cfg.Routes {
		rt := &cfg.Routes[i]
		for _, r := range fallbackReasons {
			want(admin.MetricPrimaryFallbacks, map[string]string{"route": rt.Name, "reason": r}, "every fallback reason")
		}
		for _, r := range rejectReasons {
			want(admin.MetricRejectedReads, map[string]string{"route": rt.Name, "reason": r}, "every rejection reason")
		}
		servers := []string{rt.Primary.Address}
		for _, rep := range rt.Replicas {
			servers = append(servers, rep.Address)
			for _, c := range retryCauses {
				want("kinetic_read_retries_total", map[string]string{"route": rt.Name, "server": rep.Address, "cause": c}, "every replica and cause")
			}
		}
		for _, s := range servers {
			for _, st := range []string{"active", "idle"} {
				want(admin.MetricPoolConnections, map[string]string{"route": rt.Name, "server": s, "state": st}, "every server")
			}
			want(admin.MetricSplitBrain, map[string]string{"route": rt.Name, "server": s}, "every server")
		}
		want(admin.MetricAllReplicasStale, map[string]string{"route": rt.Name}, "every route")
		if routesReads(rt) {
			classes := []string{admin.DefaultQueryClass}
			for _, qc := range rt.QueryClasses {
				if qc.Routing != config.ClassPrimaryOnly {
					classes = append(classes, qc.Name)
				}
			}
			for _, c := range classes {
				want(admin.MetricRouteDecisions, map[string]string{"route": rt.Name, "query_class": c, "target": "replica", "reason": "read"}, "replica share per class")
				for _, r := range fallbackReasons {
					want(admin.MetricRouteDecisions, map[string]string{"route": rt.Name, "query_class": c, "target": "primary", "reason": r}, "decisions by reason")
				}
			}
		}
	}
	for _, target := range []string{"primary", "replica"} {
		want(admin.MetricQueryDuration, map[string]string{"target": target}, "statement duration by target")
	}
}

// TestSeriesExistAtStartup: a kineticd started with no traffic (every
// server down) exports every series deploy/alerts.yml and
// deploy/grafana/kineticd.json select, at 0, for each route, reason and
// server; and again for a route a reload adds. Its /readyz is 503 and
// says why per route, and says the listener is not accepting once the
// server drains.
func TestSeriesExistAtStartup(t *testing.T) {
	uses := admin.ShippedSeriesUses(t)
	if len(uses) < 10 {
		t.Fatalf("only %d selectors in the alerts and the dashboard", len(uses))
	}
	addrs := deadAddrs(t, 6)
	path := filepath.Join(t.TempDir(), "kineticd.toml")
	if err := os.WriteFile(path, []byte(seriesConfig(addrs, false)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	holder := config.NewHolder(cfg)
	srv, err := proxy.New(proxy.Options{Config: holder, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := admin.Serve(mln, srv.Metrics(), srv, false)
	shut := false
	defer func() {
		hs.Close()
		if !shut {
			srv.Close()
		}
		if err := <-served; err != nil && !errors.Is(err, proxy.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	maddr := mln.Addr().String()

	mfs := scrapeFamilies(t, maddr, []string{"app", "plain"})
	checkStartupSeries(t, mfs, cfg, uses)
	if mf := mfs[admin.MetricClientConnections]; mf == nil || value(mf.GetMetric()[0]) != 0 {
		t.Errorf("%s: %v, want 0", admin.MetricClientConnections, mf)
	}
	var n int
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "kinetic_") {
			n += len(mf.GetMetric())
		}
	}
	t.Logf("%d kinetic_ series at start-up for 2 routes", n)

	// /readyz: route app's servers are all down, route plain runs no checks.
	code, body := httpGet(t, "http://"+maddr+"/readyz")
	var rd struct {
		Status, Config, Listener string
		Routes                   []admin.RouteReadiness
	}
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatalf("/readyz body %s: %v", body, err)
	}
	if code != http.StatusServiceUnavailable || rd.Status != "not_ready" || rd.Config != "loaded" || rd.Listener != "accepting" || len(rd.Routes) != 2 {
		t.Fatalf("/readyz = %d %s, want 503 not_ready with the config loaded, the listener accepting and 2 routes", code, body)
	}
	if r := rd.Routes[0]; r.Route != "app" || r.Ready || r.State != admin.RouteUnavailable {
		t.Errorf("route app: %+v, want unavailable", r)
	}
	if r := rd.Routes[1]; r.Route != "plain" || !r.Ready || r.State != admin.RouteUnchecked {
		t.Errorf("route plain: %+v, want unchecked and ready", r)
	}

	// A reload adding a route declares its series too; the old ones stay.
	if err := os.WriteFile(path, []byte(seriesConfig(addrs, true)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = holder.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	mfs = scrapeFamilies(t, maddr, []string{"app", "plain", "extra"})
	checkStartupSeries(t, mfs, cfg, uses)
	if !hasSeries(mfs[admin.MetricRouteDecisions], map[string]string{"route": "extra", "query_class": "reporting_aggregate", "target": "rejected", "reason": "lag_unknown"}) {
		t.Error("route extra's reporting_aggregate rejected/lag_unknown decisions missing after the reload")
	}

	// Draining: the listener no longer accepts, and /readyz says so.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut = true
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	code, body = httpGet(t, "http://"+maddr+"/readyz")
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatalf("/readyz body %s: %v", body, err)
	}
	if code != http.StatusServiceUnavailable || rd.Listener != "not_accepting" {
		t.Errorf("/readyz after Shutdown = %d %s, want 503 with the listener not_accepting", code, body)
	}
}
