package admin

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboardFile is the shipped Grafana dashboard, relative to this package.
const dashboardFile = "../deploy/grafana/kineticd.json"

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
			Query      any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		RefID        string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// dashboardExpr is one PromQL expression of the dashboard, named by its
// panel, with Grafana's variables replaced by values PromQL accepts.
type dashboardExpr struct {
	name, expr, legend string
}

var (
	grafanaVarRE = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?`)
	legendRE     = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	labelValues  = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
)

// dashboardExprs returns every target expression of d with its variables
// substituted: Grafana's interval variables by a duration, the
// dashboard's own variables by a label value. A variable that is neither
// is an error.
func dashboardExprs(t reporter, d dashboard) []dashboardExpr {
	t.Helper()
	vars := map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
	for _, v := range d.Templating.List {
		vars[v.Name] = "x"
	}
	var out []dashboardExpr
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				name := p.Title + " " + tg.RefID
				expr := grafanaVarRE.ReplaceAllStringFunc(tg.Expr, func(m string) string {
					v, ok := vars[grafanaVarRE.FindStringSubmatch(m)[1]]
					if !ok {
						t.Errorf("%s: unknown variable %s", name, m)
					}
					return v
				})
				out = append(out, dashboardExpr{name, expr, tg.LegendFormat})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboard: the dashboard parses, its panels are well-formed, and
// every expression uses metrics and labels kineticd exports (checkExpr,
// as for deploy/alerts.yml); legends name labels the series carry; the
// panels the operations guide promises exist.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	used, exprs := checkDashboard(t, d, exportedMetrics(t))
	// What issue 15 asks the dashboard to show.
	for _, m := range []string{MetricRouteDecisions, MetricReplicaLagBytes, MetricReplicaLagMS, MetricPrimaryFallbacks,
		MetricRejectedReads, MetricReadWait + "_bucket", MetricPoolConnections, MetricClientConnections} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
	share := false
	for _, e := range exprs {
		share = share || strings.Contains(e.expr, `target="replica"`) && strings.Contains(e.expr, "by (query_class)")
	}
	if !share {
		t.Error("no panel shows the replica share per query class")
	}
}

// checkDashboard checks d's structure and every expression against
// exported; it returns the metric names used and the expressions.
func checkDashboard(t reporter, d dashboard, exported map[string]metricInfo) (map[string]bool, []dashboardExpr) {
	t.Helper()
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both required", d.Title, d.UID)
	}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.ID == 0 || ids[p.ID] {
				t.Errorf("panel %q: id %d missing or duplicate", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("panel %d: needs a title and a gridPos", p.ID)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no targets", p.Title)
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" {
				t.Errorf("panel %q: datasource must be prometheus", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: refId %q missing or duplicate", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
			}
		}
	}
	walk(d.Panels)

	used := map[string]bool{}
	exprs := dashboardExprs(t, d)
	for _, e := range exprs {
		ec := checkExpr(t, e.name, e.expr, exported)
		if len(ec.metrics) == 0 {
			t.Errorf("%s: expr references no kineticd metric", e.name)
		}
		for _, m := range ec.metrics {
			used[m] = true
		}
		carried := ec.byLabels
		if carried == nil && len(ec.metrics) > 0 && !strings.Contains(e.expr, "sum (") {
			carried = exported[ec.metrics[0]].labels
		}
		for _, m := range legendRE.FindAllStringSubmatch(e.legend, -1) {
			if !slices.Contains(carried, m[1]) {
				t.Errorf("%s: legend {{%s}} is not a label of the result (%v)", e.name, m[1], carried)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: definition %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		if info, ok := exported[m[1]]; !ok || !slices.Contains(info.labels, m[2]) {
			t.Errorf("variable %s: %s{%s} is not exported", v.Name, m[1], m[2])
		}
	}
	return used, exprs
}

// The dashboard checks reject what they exist to catch.
func TestDashboardCheckCatchesMistakes(t *testing.T) {
	exported := exportedMetrics(t)
	bad := `{"title":"x","uid":"x","templating":{"list":[{"name":"route","type":"query","definition":"label_values(kinetic_route_decisions_total, route)"}]},
	"panels":[{"id":1,"type":"timeseries","title":"p","targets":[
		{"refId":"A","expr":"sum by (route) (rate(kinetic_route_decisions_total{route=~\"$route\"}[$__rate_interval]))","legendFormat":"{{server}}"},
		{"refId":"B","expr":"rate(kinetic_primary_fallbacks_total{route=~\"$rout\"}[$__rate_interval])"},
		{"refId":"C","expr":"kinetic_replica_lag_seconds"}]}]}`
	var d dashboard
	if err := json.NewDecoder(bytes.NewReader([]byte(bad))).Decode(&d); err != nil {
		t.Fatal(err)
	}
	var errs errList
	checkDashboard(&errs, d, exported)
	all := strings.Join(errs, "\n")
	for _, want := range []string{"unknown variable $rout", "kinetic_replica_lag_seconds, which kineticd does not export",
		"legend {{server}}", "datasource must be prometheus", "needs a title and a gridPos"} {
		if !strings.Contains(all, want) {
			t.Errorf("no complaint %q in:\n%s", want, all)
		}
	}
}
