package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// readyAnswer is /readyz's status code and JSON body.
type readyAnswer struct {
	code   int
	Status string                 `json:"status"`
	Config string                 `json:"config"`
	Routes []admin.RouteReadiness `json:"routes"`
}

func getReady(addr string) (readyAnswer, error) {
	var a readyAnswer
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + addr + "/readyz")
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("body %q: %w", b, err)
	}
	a.code = resp.StatusCode
	return a, nil
}

// awaitReady waits until /readyz answers code with the single route in
// state and eligible replicas eligible for reads, and returns the answer.
func awaitReady(t *testing.T, addr string, code int, state string, eligible int) readyAnswer {
	t.Helper()
	var last readyAnswer
	awaitCond(t, 30*time.Second, fmt.Sprintf("/readyz %d with the route %s, %d replicas eligible", code, state, eligible), func() (bool, error) {
		a, err := getReady(addr)
		if err != nil {
			return false, err
		}
		last = a
		if len(a.Routes) != 1 {
			return false, fmt.Errorf("routes %+v, want one", a.Routes)
		}
		return a.code == code && a.Routes[0].State == state && a.Routes[0].ReplicasEligible == eligible, fmt.Errorf("last answer %d %+v", a.code, a)
	})
	t.Logf("/readyz %d %s: %s", last.code, last.Routes[0].State, last.Routes[0].Reason)
	return last
}

// TestHealthEndpoints: /healthz and /readyz of a kineticd in front of a
// real primary and replica. Ready with the primary up; still ready with
// the primary stopped, because the replica serves reads (and one does run
// there); not ready once the replica is stopped too; ready again when the
// primary is back, with the replica eligible again once it is restarted.
func TestHealthEndpoints(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 3*time.Minute)
	px := kinetictest.Start(t, cl, kinetictest.Params{ReadRoutingMode: "prefer_replica", Replicas: addrs(cl.Standbys...)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := admin.Serve(ln, px.Server.Metrics(), px.Server, false)
	defer hs.Close()
	addr := ln.Addr().String()

	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "{\"status\":\"ok\"}\n" {
		t.Fatalf("/healthz = %d %q", resp.StatusCode, body)
	}

	a := awaitReady(t, addr, http.StatusOK, admin.RoutePrimaryUp, 1)
	if a.Status != "ready" || a.Config != "loaded" || a.Routes[0].Primary != cl.Primary.Addr() || a.Routes[0].ReplicasEligible != 1 {
		t.Errorf("primary up: %+v", a)
	}

	if err := cl.Primary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	a = awaitReady(t, addr, http.StatusOK, admin.RouteReadsOnly, 1)
	if a.Status != "ready" || a.Routes[0].ReplicasEligible != 1 {
		t.Errorf("primary down: %+v", a)
	}
	// The verdict is true: a new session's read runs on the replica.
	c, err := pgx.Connect(ctx, px.AppDSN())
	if err != nil {
		t.Fatalf("a session with the primary down, /readyz ready: %v", err)
	}
	var inRecovery bool
	err = c.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery)
	c.Close(ctx)
	if err != nil || !inRecovery {
		t.Fatalf("read with the primary down: %v (in recovery %v), want it served by the replica", err, inRecovery)
	}

	if err := cl.Standbys[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	a = awaitReady(t, addr, http.StatusServiceUnavailable, admin.RouteUnavailable, 0)
	if a.Status != "not_ready" || a.Routes[0].Ready || a.Routes[0].ReplicasEligible != 0 {
		t.Errorf("everything down: %+v", a)
	}

	if err := cl.Primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, addr, http.StatusOK, admin.RoutePrimaryUp, 0)
	if err := cl.Standbys[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	awaitReady(t, addr, http.StatusOK, admin.RoutePrimaryUp, 1)
}
