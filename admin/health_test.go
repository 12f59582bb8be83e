package admin

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fakeReadiness is a ReadinessSource returning a fixed answer.
type fakeReadiness struct{ r Readiness }

func (f fakeReadiness) Readiness() Readiness { return f.r }

// get fetches path from a live HTTPServer without keep-alives.
func get(t *testing.T, method, addr, path string) (int, string, http.Header) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func serveWith(t *testing.T, src ReadinessSource) string {
	t.Helper()
	return serveProfiles(t, src, false)
}

func serveProfiles(t *testing.T, src ReadinessSource, profiles bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := Serve(ln, NewMetrics(), src, profiles)
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestHealthz(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after serveWith's Close (cleanups run last first)
	// /healthz does not depend on readiness: a never-ready source still
	// gets 200.
	addr := serveWith(t, fakeReadiness{})
	code, body, hdr := get(t, http.MethodGet, addr, "/healthz")
	if code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Errorf("GET /healthz = %d %q, want 200 {\"status\":\"ok\"}", code, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if code, body, _ := get(t, http.MethodHead, addr, "/healthz"); code != http.StatusOK || body != "" {
		t.Errorf("HEAD /healthz = %d %q, want 200 and no body", code, body)
	}
	if code, _, _ := get(t, http.MethodPost, addr, "/healthz"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", code)
	}
}

// TestPprof: /debug/pprof/ is served only with [metrics] pprof = true.
func TestPprof(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	off := serveProfiles(t, fakeReadiness{}, false)
	if code, _, _ := get(t, http.MethodGet, off, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("pprof off: GET /debug/pprof/heap = %d, want 404", code)
	}
	on := serveProfiles(t, fakeReadiness{}, true)
	code, body, _ := get(t, http.MethodGet, on, "/debug/pprof/heap?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "heap profile:") {
		t.Errorf("pprof on: GET /debug/pprof/heap?debug=1 = %d %.80q, want 200 and a heap profile", code, body)
	}
	if code, _, _ := get(t, http.MethodGet, on, "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("pprof on: GET /debug/pprof/ = %d, want 200", code)
	}
}

func TestReadyz(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	up := RouteReadiness{Route: "app", Ready: true, State: RoutePrimaryUp, Reason: "the primary is reachable", Primary: "pg1:5432", ReplicasEligible: 1, Replicas: 1}
	readsOnly := RouteReadiness{Route: "app", Ready: true, State: RouteReadsOnly, Reason: "the primary is unreachable: x; reads are served by replicas", Primary: "pg1:5432", ReplicasEligible: 1, Replicas: 2}
	down := RouteReadiness{Route: "billing", State: RouteUnavailable, Reason: "the primary is unreachable: x; 0 of 1 replicas eligible", Primary: "pg2:5432", Replicas: 1}
	unchecked := RouteReadiness{Route: "plain", Ready: true, State: RouteUnchecked, Primary: "pg3:5432"}
	for _, tc := range []struct {
		name     string
		src      ReadinessSource
		code     int
		status   string
		config   string
		listener string
	}{
		{"primary up", fakeReadiness{Readiness{ConfigLoaded: true, Accepting: true, Routes: []RouteReadiness{up, unchecked}}}, 200, "ready", "loaded", "accepting"},
		{"reads only", fakeReadiness{Readiness{ConfigLoaded: true, Accepting: true, Routes: []RouteReadiness{readsOnly}}}, 200, "ready", "loaded", "accepting"},
		{"one route unavailable", fakeReadiness{Readiness{ConfigLoaded: true, Accepting: true, Routes: []RouteReadiness{up, down}}}, 503, "not_ready", "loaded", "accepting"},
		{"not accepting", fakeReadiness{Readiness{ConfigLoaded: true, Routes: []RouteReadiness{up}}}, 503, "not_ready", "loaded", "not_accepting"},
		{"no config", fakeReadiness{Readiness{Accepting: true}}, 503, "not_ready", "not_loaded", "accepting"},
		{"no source", nil, 503, "not_ready", "not_loaded", "not_accepting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveWith(t, tc.src)
			code, body, _ := get(t, http.MethodGet, addr, "/readyz")
			if code != tc.code {
				t.Errorf("status %d, want %d (body %s)", code, tc.code, body)
			}
			var got struct {
				Status, Config, Listener string
				Routes                   []RouteReadiness
			}
			dec := json.NewDecoder(strings.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if got.Status != tc.status || got.Config != tc.config || got.Listener != tc.listener {
				t.Errorf("status/config/listener = %s/%s/%s, want %s/%s/%s", got.Status, got.Config, got.Listener,
					tc.status, tc.config, tc.listener)
			}
			var want []RouteReadiness
			if tc.src != nil {
				want = tc.src.Readiness().Routes
			}
			if len(got.Routes) != len(want) {
				t.Fatalf("routes %+v, want %+v", got.Routes, want)
			}
			for i := range want {
				if got.Routes[i] != want[i] {
					t.Errorf("route %d = %+v, want %+v", i, got.Routes[i], want[i])
				}
			}
			if !strings.Contains(body, `"routes":[`) {
				t.Errorf("body %s has no routes list (an empty one is [], not null)", body)
			}
		})
	}
}
