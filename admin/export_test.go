package admin

import "testing"

// SeriesUse is, for the external tests of this package (package
// admin_test, which may import proxy), one selector that deploy/alerts.yml
// or deploy/grafana/kineticd.json uses: a metric name as written (a
// histogram's _bucket, _count or _sum included) and its equality label
// matchers.
type SeriesUse struct {
	Where  string // the alert or panel
	Metric string
	Equals map[string]string
	// Labels are the label names the metric has.
	Labels []string
}

// ShippedSeriesUses checks the shipped alerts and dashboard and returns
// every selector they use.
func ShippedSeriesUses(t *testing.T) []SeriesUse {
	t.Helper()
	exported := exportedMetrics(t)
	var out []SeriesUse
	add := func(where string, ec exprCheck) {
		for _, u := range ec.uses {
			out = append(out, SeriesUse{Where: where, Metric: u.metric, Equals: u.equals, Labels: exported[u.metric].labels})
		}
	}
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			add("alert "+r.Alert, checkExpr(t, r.Alert, r.Expr, exported))
		}
	}
	for _, e := range dashboardExprs(t, loadDashboard(t)) {
		add("panel "+e.name, checkExpr(t, e.name, e.expr, exported))
	}
	return out
}
