package admin

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/pg-kinetic/pg-kinetic/config"
)

// alertsFile is the shipped rules file, relative to this package.
const alertsFile = "../deploy/alerts.yml"

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

// Words of SPEC §8 that label matchers may use.
var (
	specTargets = []string{"primary", "replica", "rejected"}
	specReasons = []string{"read", "write", "hint_primary", "in_transaction", "session_pinned",
		"read_your_writes", "strict_fresh", "lag_exceeded", "lag_unknown", "replica_unavailable",
		"class_primary_only", "class_not_enabled", "rollback", "routing_off", "split_brain",
		"timeline_changed", "unclassified", "fallback_overload"}
)

func loadAlerts(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true) // a misspelt key (anotations:) is an error, not a silently dropped field
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return f
}

// metricInfo is what the registry says about one series name an expression
// may use: its type and its label names (histograms expand to _bucket, _sum
// and _count).
type metricInfo struct {
	typ    dto.MetricType
	labels []string
}

// exportedMetrics records one sample of everything and gathers the registry.
func exportedMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	m := NewMetrics()
	m.RouteDecision("app", "", "replica", "read")
	m.PrimaryFallback("app", "lag_exceeded")
	m.RejectedRead("app", "replica_unavailable")
	m.ReadRetry("app", "pg2", "connection_lost")
	m.ReadWait(0.01)
	m.QueryDuration("replica", 0.01)
	m.ClientConnections(1)
	m.SetAllReplicasStale("app", 0)
	m.SetServers("app", []ServerSample{{Server: "pg1", LagBytes: 1, LagMS: 1, ProbeAge: time.Second, PoolActive: 1}})
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]metricInfo)
	for _, mf := range mfs {
		var labels []string
		if len(mf.GetMetric()) > 0 {
			for _, lp := range mf.GetMetric()[0].GetLabel() {
				labels = append(labels, lp.GetName())
			}
		}
		name, typ := mf.GetName(), mf.GetType()
		out[name] = metricInfo{typ, labels}
		if typ == dto.MetricType_HISTOGRAM {
			out[name+"_bucket"] = metricInfo{dto.MetricType_COUNTER, append(slices.Clone(labels), "le")}
			out[name+"_sum"] = metricInfo{dto.MetricType_COUNTER, labels}
			out[name+"_count"] = metricInfo{dto.MetricType_COUNTER, labels}
		}
	}
	for _, name := range []string{MetricRouteDecisions, MetricReplicaLagBytes, MetricReplicaLagMS, MetricProbeAge,
		MetricSplitBrain, MetricReadWait, MetricPrimaryFallbacks, MetricRejectedReads, MetricAllReplicasStale,
		MetricClientConnections, MetricPoolConnections, MetricQueryDuration} {
		if _, ok := out[name]; !ok {
			t.Fatalf("registry lacks SPEC §8 metric %s after one sample of each", name)
		}
	}
	return out
}

// PromQL words that are not metric names.
var (
	promFuncs = map[string]bool{
		"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true,
		"topk": true, "bottomk": true, "quantile": true, "group": true, "count_values": true,
		"rate": true, "irate": true, "increase": true, "delta": true, "idelta": true, "deriv": true,
		"abs": true, "absent": true, "absent_over_time": true, "clamp_min": true, "clamp_max": true,
		"histogram_quantile": true, "max_over_time": true, "min_over_time": true, "avg_over_time": true,
		"last_over_time": true, "changes": true, "resets": true, "time": true, "timestamp": true,
		"vector": true, "scalar": true,
	}
	counterFuncs = map[string]bool{"rate": true, "irate": true, "increase": true, "resets": true}
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
	labelListKW  = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	matcherRE    = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$`)
)

type exprCheck struct {
	metrics  []string // metric names referenced
	byLabels []string // labels of the first by (...) clause, nil without one
	uses     []seriesUse
}

// seriesUse is one selector of an expression: a metric and its equality
// label matchers (label -> value; regexp and negative matchers left out).
type seriesUse struct {
	metric string
	equals map[string]string
}

// checkExpr is a hand-written PromQL sanity check: balanced brackets, valid
// range durations, every identifier a known function, keyword or exported
// metric, label matchers naming labels the metric has with SPEC values,
// grouping labels the metrics have, and rate()/increase() over counters
// only. It is not a parser; it catches the mistakes a rules file makes in
// practice (renamed metrics, misspelt labels, rate over a gauge).
func checkExpr(t reporter, name, expr string, exported map[string]metricInfo) exprCheck {
	t.Helper()
	var res exprCheck
	var stack []byte       // open brackets
	var funcStack []string // function owning each open paren ("" for grouping)
	pending := ""          // function whose opening paren comes next (after an optional by clause)
	allLabels := map[string]bool{"instance": true, "job": true}
	var groupLabels []string

	i := 0
	nextNonSpace := func(j int) byte {
		for j < len(expr) && (expr[j] == ' ' || expr[j] == '\t' || expr[j] == '\n') {
			j++
		}
		if j < len(expr) {
			return expr[j]
		}
		return 0
	}
	closeOf := map[byte]byte{')': '(', ']': '[', '}': '{'}
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'':
			t.Errorf("%s: string literal outside a label matcher at %d", name, i)
			return res
		case c == '(':
			stack = append(stack, c)
			funcStack = append(funcStack, pending)
			pending = ""
			i++
		case c == ')':
			if len(stack) == 0 || stack[len(stack)-1] != closeOf[c] {
				t.Errorf("%s: unbalanced %q at %d", name, c, i)
				return res
			}
			stack, funcStack = stack[:len(stack)-1], funcStack[:len(funcStack)-1]
			i++
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				t.Errorf("%s: unterminated range at %d", name, i)
				return res
			}
			rng := expr[i+1 : i+end]
			if _, err := model.ParseDuration(rng); err != nil {
				t.Errorf("%s: range [%s]: %v", name, rng, err)
			}
			i += end + 1
		case c == ']' || c == '}' || c == '{':
			t.Errorf("%s: stray %q at %d", name, c, i)
			return res
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(expr) && (expr[j] >= '0' && expr[j] <= '9' || expr[j] == '.' || expr[j] == 'e') {
				j++
			}
			if _, err := strconv.ParseFloat(expr[i:j], 64); err != nil {
				t.Errorf("%s: bad number %q", name, expr[i:j])
			}
			i = j
		case c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || expr[j] >= 'a' && expr[j] <= 'z' ||
				expr[j] >= 'A' && expr[j] <= 'Z' || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			word := expr[i:j]
			i = j
			switch {
			case labelListKW[word]:
				for i < len(expr) && expr[i] == ' ' {
					i++
				}
				if i >= len(expr) || expr[i] != '(' {
					t.Errorf("%s: %s without a label list", name, word)
					return res
				}
				end := strings.IndexByte(expr[i:], ')')
				if end < 0 {
					t.Errorf("%s: unterminated %s (...)", name, word)
					return res
				}
				var ls []string
				for l := range strings.SplitSeq(expr[i+1:i+end], ",") {
					if l = strings.TrimSpace(l); l != "" {
						ls = append(ls, l)
					}
				}
				groupLabels = append(groupLabels, ls...)
				if word == "by" && res.byLabels == nil {
					res.byLabels = append([]string{}, ls...)
				}
				i += end + 1
			case promKeywords[word]:
			case nextNonSpace(i) == '(' || promFuncs[word]:
				// A function call, or an aggregation whose by/without clause
				// comes before its argument: the next '(' opens its argument.
				if !promFuncs[word] {
					t.Errorf("%s: unknown function %s", name, word)
				}
				pending = word
			default:
				info, ok := exported[word]
				if !ok {
					t.Errorf("%s: expr uses %s, which kineticd does not export", name, word)
					continue
				}
				res.metrics = append(res.metrics, word)
				use := seriesUse{metric: word, equals: map[string]string{}}
				for _, l := range info.labels {
					allLabels[l] = true
				}
				if f := enclosingFunc(funcStack); counterFuncs[f] && info.typ != dto.MetricType_COUNTER {
					t.Errorf("%s: %s(%s): %s is a %s, not a counter", name, f, word, word, info.typ)
				}
				if nextNonSpace(i) == '{' {
					for expr[i] != '{' {
						i++
					}
					end := strings.IndexByte(expr[i:], '}')
					if end < 0 {
						t.Errorf("%s: unterminated matcher on %s", name, word)
						return res
					}
					for ms := range strings.SplitSeq(expr[i+1:i+end], ",") {
						if strings.TrimSpace(ms) == "" {
							continue
						}
						mm := matcherRE.FindStringSubmatch(ms)
						if mm == nil {
							t.Errorf("%s: bad matcher %q on %s", name, ms, word)
							continue
						}
						checkMatcher(t, name, word, info, mm[1], mm[2], mm[3])
						if mm[2] == "=" {
							use.equals[mm[1]] = mm[3]
						}
					}
					i += end + 1
				}
				res.uses = append(res.uses, use)
			}
		default:
			if !strings.ContainsRune("+-*/%^=!<>,", rune(c)) {
				t.Errorf("%s: unexpected %q at %d", name, c, i)
				return res
			}
			i++
		}
	}
	if len(stack) > 0 {
		t.Errorf("%s: unbalanced brackets: %q left open", name, string(stack))
	}
	for _, l := range groupLabels {
		if !allLabels[l] {
			t.Errorf("%s: groups by %q, which none of %v has", name, l, res.metrics)
		}
	}
	return res
}

// enclosingFunc is the innermost named function around the current token.
func enclosingFunc(funcStack []string) string {
	for k := len(funcStack) - 1; k >= 0; k-- {
		if funcStack[k] != "" {
			return funcStack[k]
		}
	}
	return ""
}

func checkMatcher(t reporter, name, metric string, info metricInfo, label, op, value string) {
	t.Helper()
	if !slices.Contains(info.labels, label) {
		t.Errorf("%s: %s has no label %q (labels %v)", name, metric, label, info.labels)
		return
	}
	if op != "=" && op != "!=" {
		return // regexps: not checked against the vocabulary
	}
	switch label {
	case "target":
		if !slices.Contains(specTargets, value) {
			t.Errorf("%s: target=%q is not a SPEC §8 target %v", name, value, specTargets)
		}
	case "reason":
		if !slices.Contains(specReasons, value) {
			t.Errorf("%s: reason=%q is not a SPEC §8 reason", name, value)
		}
	}
}

// checkTemplate executes an annotation the way Prometheus does, with the
// labels the alert's series carry, so a $labels.x the expression aggregated
// away is an error rather than "<no value>" in a page.
func checkTemplate(t reporter, name, key, text string, labels []string) {
	t.Helper()
	funcs := template.FuncMap{
		"humanize":           func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) },
		"humanizeDuration":   func(v float64) string { return time.Duration(v * float64(time.Second)).String() },
		"humanizePercentage": func(v float64) string { return strconv.FormatFloat(v*100, 'g', 3, 64) + "%" },
	}
	const prelude = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}"
	tmpl, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(prelude + text)
	if err != nil {
		t.Errorf("%s: annotation %s: %v", name, key, err)
		return
	}
	ls := map[string]string{}
	for _, l := range labels {
		ls[l] = "x"
	}
	data := struct {
		Labels, ExternalLabels map[string]string
		Value                  float64
	}{ls, map[string]string{}, 61}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, data); err != nil {
		t.Errorf("%s: annotation %s uses a label the alert does not carry (%v): %v", name, key, labels, err)
	}
}

func TestAlertRules(t *testing.T) {
	f := loadAlerts(t)
	exported := exportedMetrics(t)
	if len(f.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	seen := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" {
			t.Error("a group has no name")
		}
		if g.Interval != "" {
			if _, err := model.ParseDuration(g.Interval); err != nil {
				t.Errorf("group %s: interval: %v", g.Name, err)
			}
		}
		if len(g.Rules) == 0 {
			t.Errorf("group %s has no rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule has no alert name (record %q): this file holds alerts only", g.Name, r.Record)
				continue
			}
			name := r.Alert
			if !model.IsValidMetricName(model.LabelValue(name)) {
				t.Errorf("%s: not a valid alert name", name)
			}
			if seen[name] {
				t.Errorf("%s: duplicate alert", name)
			}
			seen[name] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", name)
				continue
			}
			if r.For == "" {
				t.Errorf("%s: no for (write 0s to fire at once)", name)
			} else if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", name, r.For, err)
			}
			switch sev := r.Labels["severity"]; sev {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: labels.severity = %q, want critical, warning or info", name, sev)
			}
			if strings.TrimSpace(r.Annotations["summary"]) == "" {
				t.Errorf("%s: no annotations.summary", name)
			}
			if !strings.Contains(r.Annotations["description"], "What to do") {
				t.Errorf("%s: annotations.description must say what to do", name)
			}

			ec := checkExpr(t, name, r.Expr, exported)
			if len(ec.metrics) == 0 {
				t.Errorf("%s: expr references no kineticd metric", name)
				continue
			}
			// The labels a firing alert carries: the first by () clause, or
			// the series' own labels plus the target labels Prometheus adds.
			labels := ec.byLabels
			if labels == nil {
				labels = append(slices.Clone(exported[ec.metrics[0]].labels), "instance", "job")
			}
			for k, v := range r.Annotations {
				checkTemplate(t, name, k, v, labels)
			}
		}
	}
	for _, want := range []string{"KineticAllReplicasStale", "KineticSplitBrain", "KineticRejectedReads", "KineticPrimaryFallbackRatioHigh"} {
		if !seen[want] {
			t.Errorf("alert %s missing", want)
		}
	}
}

// The stale alert's threshold is the default SLO window, and it says so.
func TestAlertStaleThresholdMatchesSLOWindow(t *testing.T) {
	f := loadAlerts(t)
	want := strconv.Itoa(config.DefaultLagSLOWindowMS / 1000)
	re := regexp.MustCompile(`kinetic_all_replicas_stale_seconds\s*>\s*([0-9.]+)`)
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "KineticAllReplicasStale" {
				continue
			}
			m := re.FindStringSubmatch(r.Expr)
			if m == nil {
				t.Fatalf("expr %q does not compare kinetic_all_replicas_stale_seconds with a threshold", r.Expr)
			}
			if m[1] != want {
				t.Errorf("threshold %s s, want %s s (lag_slo_window_ms default %d)", m[1], want, config.DefaultLagSLOWindowMS)
			}
			if !strings.Contains(r.Annotations["description"], "lag_slo_window_ms") {
				t.Error("description does not tell the operator to match the threshold to lag_slo_window_ms")
			}
			return
		}
	}
	t.Fatal("KineticAllReplicasStale not found")
}

// The checker itself must reject the mistakes it exists to catch.
func TestCheckExprCatchesMistakes(t *testing.T) {
	exported := exportedMetrics(t)
	for _, tc := range []struct{ name, expr string }{
		{"renamed metric", `kinetic_replica_lag_seconds > 1`},
		{"unknown label", `kinetic_route_decisions_total{class="x"} > 0`},
		{"target outside vocabulary", `rate(kinetic_route_decisions_total{target="standby"}[5m]) > 0`},
		{"reason outside vocabulary", `rate(kinetic_primary_fallbacks_total{reason="too_slow"}[5m]) > 0`},
		{"rate over a gauge", `rate(kinetic_replica_lag_ms[5m]) > 0`},
		{"bad range", `rate(kinetic_rejected_reads_total[5 minutes]) > 0`},
		{"unbalanced", `sum by (route) (rate(kinetic_rejected_reads_total[5m]) > 0`},
		{"group by missing label", `sum by (server) (rate(kinetic_rejected_reads_total[5m])) > 0`},
		{"unknown function", `ratee(kinetic_rejected_reads_total[5m]) > 0`},
	} {
		var errs errList
		checkExpr(&errs, tc.name, tc.expr, exported)
		if len(errs) == 0 {
			t.Errorf("%s: %q passed the check", tc.name, tc.expr)
		}
	}
	var errs errList
	checkExpr(&errs, "good", `histogram_quantile(0.99, sum by (le, target) (rate(kinetic_query_duration_seconds_bucket[5m]))) > 1`, exported)
	if len(errs) > 0 {
		t.Errorf("a valid histogram_quantile expression failed the check: %v", errs)
	}
}

func TestCheckTemplateCatchesAggregatedLabel(t *testing.T) {
	var errs errList
	checkTemplate(&errs, "x", "summary", "server {{ $labels.server }} is {{ $value | humanize }} behind", []string{"route"})
	if len(errs) == 0 {
		t.Error("$labels.server passed on an alert aggregated by (route)")
	}
	errs = nil
	checkTemplate(&errs, "x", "summary", "route {{ $labels.route }}: {{ $value | humanizeDuration }}", []string{"route"})
	if len(errs) > 0 {
		t.Errorf("valid template failed: %v", errs)
	}
}

// reporter is the part of testing.T the checkers use, so a test can check
// that they reject bad input.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// errList collects a checker's complaints instead of failing the test.
type errList []string

func (*errList) Helper() {}

func (e *errList) Errorf(format string, args ...any) { *e = append(*e, fmt.Sprintf(format, args...)) }
