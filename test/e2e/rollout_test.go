package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/admin"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// classesTOML declares the shared vocabulary's classes on the route and a
// rollout at stage 0 persisted to stateFile.
func classesTOML(stateFile string) string {
	return fmt.Sprintf(`
[[routes.query_classes]]
name = "catalog_browse"
routing = "replica_tolerates_staleness"
stage = 1

[[routes.query_classes]]
name = "reporting_aggregate"
routing = "replica_if_lag_ok"
stage = 2

[[routes.query_classes]]
name = "billing_balance"
routing = "primary_only"

[[routes.query_classes]]
name = "session_state"
routing = "primary_only"

[rollout]
stage = 0
state_file = %q
`, stateFile)
}

// adminExec runs one admin console command through the proxy.
func adminExec(t *testing.T, ctx context.Context, px *kinetictest.Proxy, cmd string) [][]string {
	t.Helper()
	c, err := pgx.Connect(ctx, px.DSN(pgtest.AppUser, pgtest.AppPassword, "pgkinetic"))
	if err != nil {
		t.Fatalf("admin console: %v", err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, cmd, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals, _ := rows.Values()
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = fmt.Sprint(v)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return out
}

// classPort runs a read declaring class through a fresh session (no token)
// and returns where it ran and the proxy's stated reason.
func classPort(t *testing.T, ctx context.Context, px *kinetictest.Proxy, class string) (int, string) {
	t.Helper()
	c := connect(t, ctx, px.AppDSN())
	defer c.Close(ctx)
	p := portOf(t, ctx, c, "/* pg-kinetic: class="+class+" */ select inet_server_port()", pgx.QueryExecModeSimpleProtocol)
	return p, lastRoute(t, ctx, c)
}

// TestRolloutStagesAndRollbackDrill: classes reach replicas only once their
// stage is enabled (catalog_browse, then reporting_aggregate); ROUTING
// ROLLBACK returns every read to the primary and survives a restart;
// ROUTING STAGE re-enables.
func TestRolloutStagesAndRollbackDrill(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 90*time.Second)
	state := filepath.Join(t.TempDir(), "rollout.json")
	params := kinetictest.Params{Extra: classesTOML(state)}
	reps := cl.StandbyPorts()
	start := func() *kinetictest.Proxy {
		px := routedProxy(t, cl, params)
		return px
	}
	expect := func(px *kinetictest.Proxy, class string, replica bool, reason string) {
		t.Helper()
		// A replica target needs a fresh health verdict: retry briefly.
		awaitCond(t, 10*time.Second, class+" routing", func() (bool, error) {
			p, route := classPort(t, ctx, px, class)
			if replica {
				return reps[p], nil
			}
			if p != cl.Primary.Port || !strings.Contains(route, "reason="+reason) {
				t.Fatalf("class %s ran on %d (%s), want the primary with reason %s", class, p, route, reason)
			}
			return true, nil
		})
	}

	px := start()
	expect(px, "catalog_browse", false, "class_not_enabled")
	expect(px, "reporting_aggregate", false, "class_not_enabled")
	expect(px, "billing_balance", false, "class_primary_only")

	adminExec(t, ctx, px, "ROUTING STAGE 1")
	expect(px, "catalog_browse", true, "")
	expect(px, "reporting_aggregate", false, "class_not_enabled")

	adminExec(t, ctx, px, "ROUTING STAGE 2")
	expect(px, "catalog_browse", true, "")
	expect(px, "reporting_aggregate", true, "")
	expect(px, "session_state", false, "class_primary_only")

	adminExec(t, ctx, px, "ROUTING ROLLBACK")
	expect(px, "catalog_browse", false, "rollback")
	expect(px, "reporting_aggregate", false, "rollback")
	c := connect(t, ctx, px.AppDSN())
	if p := portOf(t, ctx, c, "select inet_server_port()", pgx.QueryExecModeSimpleProtocol); p != cl.Primary.Port {
		t.Fatalf("an undeclared read after ROUTING ROLLBACK ran on %d", p)
	}
	c.Close(ctx)

	// Restart: a new kineticd with the same config and state file.
	px.Server.Close()
	px2 := kinetictest.Start(t, cl, kinetictest.Params{Extra: classesTOML(state), Replicas: []string{cl.Standbys[0].Addr(), cl.Standbys[1].Addr()}, ReadRoutingMode: "prefer_replica"})
	expect(px2, "catalog_browse", false, "rollback")
	expect(px2, "reporting_aggregate", false, "rollback")

	adminExec(t, ctx, px2, "ROUTING STAGE 2")
	expect(px2, "catalog_browse", true, "")
	expect(px2, "reporting_aggregate", true, "")

	routes := adminExec(t, ctx, px2, "SHOW ROUTES")
	found := false
	for _, r := range routes {
		if len(r) > 7 && r[1] == "billing_balance" && r[7] != "0" {
			t.Errorf("SHOW ROUTES: billing_balance has replica decisions: %v", r)
		}
		if len(r) > 1 && r[1] == "catalog_browse" {
			found = true
		}
	}
	if !found {
		t.Errorf("SHOW ROUTES lacks catalog_browse: %v", routes)
	}
}

// TestUnknownClassIsAnError: a class= hint naming no class gets 22023, and
// SET pg_kinetic.query_class validates too.
func TestUnknownClassIsAnError(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{Extra: classesTOML(filepath.Join(t.TempDir(), "s.json"))})
	c := connect(t, ctx, px.AppDSN())
	_, err := c.Exec(ctx, "/* pg-kinetic: class=no_such_class */ select 1", pgx.QueryExecModeSimpleProtocol)
	if pgCode(err) != "22023" {
		t.Fatalf("unknown class hint: %v, want 22023", err)
	}
	_, err = c.Exec(ctx, "set pg_kinetic.query_class = 'nope'")
	if pgCode(err) != "22023" {
		t.Fatalf("SET of an unknown class: %v, want 22023", err)
	}
	if _, err := c.Exec(ctx, "set pg_kinetic.query_class = 'billing_balance'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if p := portOf(t, ctx, c, "select inet_server_port()", pgx.QueryExecModeSimpleProtocol); p != cl.Primary.Port {
			t.Fatalf("billing_balance session read on %d", p)
		}
	}
}

// TestAdminConsole: SHOW SERVERS with one replica paused shows its lag; a
// non-admin is refused; unknown commands get 42601.
func TestAdminConsole(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{Extra: `
[[users]]
name = "notadmin"
password = "x"
backend_user = "app"
backend_password = "app-secret"
`})
	paused := cl.Standbys[0]
	if err := paused.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		paused.ResumeReplay(context.Background())
		cl.WaitReplicated(context.Background())
	})
	for i := 0; i < 20; i++ {
		cl.Primary.Exec(ctx, "select pg_logical_emit_message(false, 'kinetic', 'tick')")
		time.Sleep(20 * time.Millisecond)
	}
	var servers [][]string
	awaitCond(t, 10*time.Second, "SHOW SERVERS to show the paused replica's lag", func() (bool, error) {
		servers = adminExec(t, ctx, px, "SHOW SERVERS")
		for _, r := range servers {
			if r[1] == paused.Addr() && r[8] != "0" && r[8] != "" {
				return true, nil
			}
		}
		return false, nil
	})
	for _, r := range servers {
		t.Logf("SHOW SERVERS: %s", strings.Join(r, " | "))
	}
	if got := adminExec(t, ctx, px, "SHOW VERSION"); len(got) != 1 {
		t.Fatalf("SHOW VERSION: %v", got)
	}
	c, err := pgx.Connect(ctx, px.DSN(pgtest.AppUser, pgtest.AppPassword, "pgkinetic"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol); pgCode(err) != "42601" {
		t.Fatalf("SQL on the admin console: %v, want 42601", err)
	}
	if _, err := pgx.Connect(ctx, px.DSN("notadmin", "x", "pgkinetic")); pgCode(err) != "28000" {
		t.Fatalf("non-admin on the console: %v, want 28000", err)
	}
}

// TestBillingAndSessionStateNeverReachReplicas: under a mixed load (hints,
// SET pg_kinetic.query_class, a startup parameter, undeclared reads,
// writes), kinetic_route_decisions_total never shows a replica target for
// billing_balance or session_state, while catalog_browse does reach them.
func TestBillingAndSessionStateNeverReachReplicas(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	extra := strings.Replace(classesTOML(filepath.Join(t.TempDir(), "s.json")), "stage = 0", "stage = 2", 1)
	px := routedProxy(t, cl, kinetictest.Params{Extra: extra})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := admin.ServeMetrics(ln, px.Server.Metrics())
	defer hs.Close()

	cfg, _ := pgx.ParseConfig(px.AppDSN())
	cfg.RuntimeParams["options"] = "-c pg_kinetic.query_class=session_state"
	startupClass, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer startupClass.Close(ctx)
	c := connect(t, ctx, px.AppDSN())
	set := connect(t, ctx, px.AppDSN())
	if _, err := set.Exec(ctx, "set pg_kinetic.query_class = 'billing_balance'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		for _, q := range []struct {
			conn  *pgx.Conn
			sql   string
			never bool
		}{
			{c, "/* pg-kinetic: class=billing_balance */ select inet_server_port()", true},
			{c, "/* pg-kinetic: class=session_state replica */ select inet_server_port()", true},
			{c, "/* pg-kinetic: class=catalog_browse */ select inet_server_port()", false},
			{c, "select inet_server_port()", false},
			{set, "select inet_server_port()", true},
			{startupClass, "select inet_server_port()", true},
		} {
			p := portOf(t, ctx, q.conn, q.sql, pgx.QueryExecModeSimpleProtocol)
			if q.never && p != cl.Primary.Port {
				t.Fatalf("%q ran on %d", q.sql, p)
			}
		}
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	classDecisions := func(class, target string) int {
		n := 0
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "kinetic_route_decisions_total{") && strings.Contains(line, `query_class="`+class+`"`) &&
				strings.Contains(line, `target="`+target+`"`) {
				var v float64
				fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
				n += int(v)
			}
		}
		return n
	}
	replicaDecisions := func(class string) int { return classDecisions(class, "replica") }
	for _, class := range []string{"billing_balance", "session_state"} {
		if n := replicaDecisions(class); n != 0 {
			t.Errorf("%s has %d replica decisions in kinetic_route_decisions_total", class, n)
		}
		// (Its series exist at 0 from start-up: count, not presence.)
		if classDecisions(class, "primary") == 0 {
			t.Errorf("no decisions recorded for %s at all", class)
		}
	}
	if n := replicaDecisions("catalog_browse"); n == 0 {
		t.Errorf("catalog_browse never reached a replica:\n%s", text)
	}
	t.Logf("replica decisions: catalog_browse=%d default=%d billing_balance=0 session_state=0",
		replicaDecisions("catalog_browse"), replicaDecisions("default"))
}

// TestAutoRollback: with auto_rollback on, every replica staying over the
// lag budget longer than lag_slo_window_ms rolls routing back by itself;
// the rollback persists until ROUTING STAGE.
func TestAutoRollback(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	state := filepath.Join(t.TempDir(), "auto.json")
	extra := strings.Replace(classesTOML(state), "stage = 0\n", "stage = 2\nauto_rollback = true\nlag_slo_window_ms = 1500\n", 1) + `
`
	extra = "\n[routes.freshness]\nmax_replica_lag_ms = 300\n" + extra
	px := routedProxy(t, cl, kinetictest.Params{Extra: extra})
	if p, _ := classPort(t, ctx, px, "catalog_browse"); p != cl.Standbys[0].Port {
		t.Fatalf("catalog_browse on %d before the breach", p)
	}
	if err := cl.Standbys[0].PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				cl.Primary.Exec(context.Background(), "select pg_logical_emit_message(false, 'kinetic', 'tick')")
			}
		}
	}()
	awaitCond(t, 20*time.Second, "auto_rollback to roll routing back", func() (bool, error) {
		_, route := classPort(t, ctx, px, "catalog_browse")
		return strings.Contains(route, "reason=rollback"), nil
	})
	stats := adminExec(t, ctx, px, "SHOW STATS")
	rolled := false
	for _, r := range stats {
		if r[0] == "rolled_back" && r[1] == "true" {
			rolled = true
		}
	}
	if !rolled {
		t.Fatalf("SHOW STATS after auto rollback: %v", stats)
	}
	if err := cl.Standbys[0].ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	// Still rolled back after the replica recovered: an operator decides.
	if _, route := classPort(t, ctx, px, "catalog_browse"); !strings.Contains(route, "reason=rollback") {
		t.Fatalf("rollback lifted by itself: %s", route)
	}
	adminExec(t, ctx, px, "ROUTING STAGE 2")
	awaitCond(t, 10*time.Second, "catalog_browse back on the replica", func() (bool, error) {
		p, _ := classPort(t, ctx, px, "catalog_browse")
		return p == cl.Standbys[0].Port, nil
	})
	for _, cmd := range []string{"SHOW CLIENTS", "SHOW POOLS", "SHOW CONFIG"} {
		if rows := adminExec(t, ctx, px, cmd); len(rows) == 0 {
			t.Errorf("%s returned no rows", cmd)
		}
	}
}
