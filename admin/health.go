package admin

import (
	"encoding/json"
	"net/http"
)

// Route states reported by /readyz (RouteReadiness.State).
const (
	// RoutePrimaryUp: the latest verdict on the route's primary is fresh,
	// reachable and not in recovery. Reads and writes can be served.
	RoutePrimaryUp = "primary_up"
	// RouteReadsOnly: the primary is down (or in recovery, or not probed
	// within verdict_ttl_ms) but at least one replica qualifies for reads
	// under the route's lag budget. Reads are served; writes fail (08006).
	RouteReadsOnly = "reads_only"
	// RouteUnavailable: neither the primary nor any replica can serve.
	RouteUnavailable = "unavailable"
	// RouteUnchecked: the route runs no health checks (no replicas, or
	// read_routing_mode = "off"), so there is no verdict to go by; it
	// counts as ready and its primary is tried per connection.
	RouteUnchecked = "unchecked"
)

// RouteReadiness is one route's ability to serve, as the proxy's latest
// health verdicts show it.
type RouteReadiness struct {
	Route string `json:"route"`
	// Ready is true when the route can serve something: its primary, or
	// reads on a replica.
	Ready bool `json:"ready"`
	// State is one of RoutePrimaryUp, RouteReadsOnly, RouteUnavailable,
	// RouteUnchecked.
	State string `json:"state"`
	// Reason says why, in words (the primary's probe error, the replicas'
	// SPEC §8 reasons).
	Reason string `json:"reason"`
	// Primary is the configured primary's address.
	Primary string `json:"primary"`
	// ReplicasEligible of Replicas qualify for reads under the route's
	// lag budget (max_replica_lag_ms, max_replica_lag_bytes).
	ReplicasEligible int `json:"replicas_eligible"`
	Replicas         int `json:"replicas"`
}

// Readiness is the proxy's state as /readyz judges it.
type Readiness struct {
	// ConfigLoaded: a validated configuration is in force.
	ConfigLoaded bool
	// Accepting: the client listener is accepting connections (Serve is
	// running and no shutdown has begun).
	Accepting bool
	// Routes holds one entry per configured route.
	Routes []RouteReadiness
}

// Ready reports whether the instance should receive traffic: config
// loaded, listener accepting, and every route ready.
func (r Readiness) Ready() bool {
	if !r.ConfigLoaded || !r.Accepting {
		return false
	}
	for _, rt := range r.Routes {
		if !rt.Ready {
			return false
		}
	}
	return true
}

// ReadinessSource is what /readyz needs from the proxy: the current
// readiness, computed from state the proxy already keeps (its health
// verdicts), without new probes. It must be cheap and safe for concurrent
// use. proxy.Server implements it.
type ReadinessSource interface {
	Readiness() Readiness
}

// healthBody is the JSON /healthz answers.
type healthBody struct {
	Status string `json:"status"`
}

// readyBody is the JSON /readyz answers.
type readyBody struct {
	Status   string           `json:"status"` // "ready" or "not_ready"
	Config   string           `json:"config"` // "loaded" or "not_loaded"
	Listener string           `json:"listener"`
	Routes   []RouteReadiness `json:"routes"`
}

// healthz answers 200 {"status":"ok"} while the process serves HTTP.
func healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, healthBody{Status: "ok"})
}

// readyz answers 200 when src reports the instance ready, 503 otherwise;
// the body names each route's state either way. A nil src is never
// ready.
func readyz(src ReadinessSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var rd Readiness
		if src != nil {
			rd = src.Readiness()
		}
		body := readyBody{Status: "not_ready", Config: "not_loaded", Listener: "not_accepting", Routes: rd.Routes}
		if body.Routes == nil {
			body.Routes = []RouteReadiness{}
		}
		if rd.ConfigLoaded {
			body.Config = "loaded"
		}
		if rd.Accepting {
			body.Listener = "accepting"
		}
		code := http.StatusServiceUnavailable
		if rd.Ready() {
			body.Status, code = "ready", http.StatusOK
		}
		writeJSON(w, r, code, body)
	}
}

func writeJSON(w http.ResponseWriter, r *http.Request, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		w.Write(append(b, '\n'))
	}
}
