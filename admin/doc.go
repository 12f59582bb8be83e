// Package admin is the operator's view of kineticd (SPEC §8): Prometheus
// metrics (metrics.go) and the admin console (console.go).
//
// Metrics owns its own prometheus.Registry holding every SPEC §8 metric and
// the Go runtime and process collectors; there is no package-level state.
// Its recording methods are called by the proxy on every statement and are
// safe for concurrent use and allocation-free once a label combination has
// been seen; health-derived gauges are replaced whole per route from a
// snapshot (SetServers), so removed servers leave no series behind.
// The proxy declares each route's labelled series (DeclareRoute) so they
// exist at 0 before their first event. Serve serves the registry at
// /metrics, with /healthz and /readyz (health.go: readiness comes from a
// ReadinessSource, the proxy, judged from its health verdicts), on the
// [metrics] listen listener from one goroutine it owns; HTTPServer.Close
// stops it and waits. deploy/alerts.yml and deploy/grafana/kineticd.json
// are the shipped alert rules and dashboard over these metrics, checked by
// alerts_test.go and dashboard_test.go.
//
// The admin console answers clients that connect to database "pgkinetic" as
// an [admin] users member, over the simple query protocol; nothing it
// receives is forwarded to a server.
package admin
