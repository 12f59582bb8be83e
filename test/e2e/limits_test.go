package e2e

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	dto "github.com/prometheus/client_model/go"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Timeouts and limits of the server side (issue 16 item 3): server_lifetime_ms,
// server_idle_timeout_ms, max_db_connections, max_user_connections and
// max_concurrent_dials, against real PostgreSQL, in the pool mode of the
// run (KINETIC_TEST_POOL_MODE).

// backendPID runs a unit on a fresh client of px and returns the server
// process that ran it; the client then leaves (its server connection goes
// back to the pool, in session pooling too).
func backendPID(t *testing.T, ctx context.Context, dsn string) int64 {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(ctx)
	return queryInt(t, ctx, c, "select pg_backend_pid()")
}

// serverHas reports whether the primary has a backend with pid.
func serverHas(t *testing.T, ctx context.Context, cl *pgtest.Cluster, pid int64) bool {
	t.Helper()
	n, err := cl.Primary.QueryString(ctx, fmt.Sprintf("select count(*) from pg_stat_activity where pid = %d", pid))
	if err != nil {
		t.Fatal(err)
	}
	return n == "1"
}

// waitGone waits until pid has left the primary, failing after 5 s.
func waitGone(t *testing.T, ctx context.Context, cl *pgtest.Cluster, pid int64, why string) time.Duration {
	t.Helper()
	start := time.Now()
	for serverHas(t, ctx, cl, pid) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("server process %d still there after 5 s: %s", pid, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestServerLifetimeZeroUsesOnce: with server_lifetime_ms = 0 every
// server connection serves one session (or one transaction) and is closed
// when released: two clients in a row get two server processes, and the
// first one's is gone. With the default lifetime (1 h) the second reuses
// the first's connection. A route's own server_lifetime_ms overrides it.
func TestServerLifetimeZeroUsesOnce(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	reuse := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1})
	if a, b := backendPID(t, ctx, reuse.AppDSN()), backendPID(t, ctx, reuse.AppDSN()); a != b {
		t.Fatalf("default server_lifetime_ms: pids %d then %d, want the pooled connection reused", a, b)
	}
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1, ServerExtra: "server_lifetime_ms = 0"})
	a := backendPID(t, ctx, px.AppDSN())
	b := backendPID(t, ctx, px.AppDSN())
	if a == b {
		t.Fatalf("server_lifetime_ms = 0: both clients ran on server process %d", a)
	}
	waitGone(t, ctx, cl, a, "server_lifetime_ms = 0 should close it at release")

	// A route's own value ([routes.pool]) overrides [server]'s, both ways.
	route := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1, PoolExtra: "server_lifetime_ms = 0"})
	if a, b := backendPID(t, ctx, route.AppDSN()), backendPID(t, ctx, route.AppDSN()); a == b {
		t.Fatalf("routes.pool.server_lifetime_ms = 0: both clients ran on server process %d", a)
	}
	long := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1, ServerExtra: "server_lifetime_ms = 0", PoolExtra: "server_lifetime_ms = 3600000"})
	if a, b := backendPID(t, ctx, long.AppDSN()), backendPID(t, ctx, long.AppDSN()); a != b {
		t.Fatalf("routes.pool.server_lifetime_ms = 3600000 under [server]'s 0: pids %d then %d, want the pooled connection reused", a, b)
	}
}

// TestServerLifetimeClosesOldConnections: with server_lifetime_ms = 400 a
// pooled connection is reused while young and replaced once it is older
// than that, by the next client after it (at release or when found idle).
func TestServerLifetimeClosesOldConnections(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	const lifetime = 400 * time.Millisecond
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1,
		ServerExtra: "server_lifetime_ms = 400\nserver_idle_timeout_ms = 0"})
	start := time.Now()
	first := backendPID(t, ctx, px.AppDSN())
	for {
		pid := backendPID(t, ctx, px.AppDSN())
		age := time.Since(start)
		if pid != first {
			if age < lifetime {
				t.Fatalf("connection replaced after %v, before its lifetime %v", age, lifetime)
			}
			t.Logf("server connection replaced after %v (lifetime %v)", age.Round(time.Millisecond), lifetime)
			break
		}
		if age > 5*time.Second {
			t.Fatalf("server process %d still serving after %v (server_lifetime_ms = 400)", pid, age)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitGone(t, ctx, cl, first, "past server_lifetime_ms")
}

// TestServerIdleTimeoutJanitor: a pooled connection idle longer than
// server_idle_timeout_ms is closed by the janitor, without any client
// activity; with the default (10 min) it stays.
func TestServerIdleTimeoutJanitor(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	keep := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1})
	kept := backendPID(t, ctx, keep.AppDSN())
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1, ServerExtra: "server_idle_timeout_ms = 300"})
	pid := backendPID(t, ctx, px.AppDSN())
	took := waitGone(t, ctx, cl, pid, "idle past server_idle_timeout_ms")
	t.Logf("idle server connection closed %v after its client left (server_idle_timeout_ms = 300)", took.Round(time.Millisecond))
	if !serverHas(t, ctx, cl, kept) {
		t.Errorf("the default server_idle_timeout_ms closed an idle connection within a second")
	}
}

// holdServer opens a client that holds a server connection until the test
// ends: a session (session pooling) or an open transaction (transaction
// pooling). It returns the server process.
func holdServer(t *testing.T, ctx context.Context, dsn string) (int64, error) {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if _, err := c.Exec(ctx, "begin"); err != nil {
		return 0, err
	}
	var pid int64
	err = c.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid)
	return pid, err
}

// pgDetail is the DETAIL of err's ErrorResponse, or "".
func pgDetail(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Detail
	}
	return ""
}

// md5DSN is the proxy's DSN for the second user, md5user.
func md5DSN(px *kinetictest.Proxy) string {
	return px.DSN(pgtest.MD5User, "md5-secret", pgtest.AppDB)
}

// TestMaxDBConnections: max_db_connections = 2 counts both users'
// connections to the primary: with app and md5user each holding one, a
// third client waits and gets 53300 after acquire_timeout_ms, though its
// pool (size 5) has room. An idle connection of another user's pool is
// closed to make room.
func TestMaxDBConnections(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 5, AcquireTimeout: 500, PoolExtra: "max_db_connections = 2"})
	if _, err := holdServer(t, ctx, px.AppDSN()); err != nil {
		t.Fatal(err)
	}
	if _, err := holdServer(t, ctx, md5DSN(px)); err != nil {
		t.Fatal(err)
	}
	_, err := holdServer(t, ctx, px.AppDSN())
	if pgCode(err) != "53300" || !strings.Contains(pgDetail(err), "max_db_connections (2)") {
		t.Fatalf("third connection beyond max_db_connections = 2: %v, want 53300 naming the limit", err)
	}

	// Eviction: app's pool keeps an idle connection; md5user needs the
	// only slot of max_db_connections = 1.
	ev := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 5, AcquireTimeout: 2000, PoolExtra: "max_db_connections = 1"})
	idle := backendPID(t, ctx, ev.AppDSN())
	if _, err := holdServer(t, ctx, md5DSN(ev)); err != nil {
		t.Fatalf("md5user with app's idle connection taking max_db_connections = 1: %v (want it evicted)", err)
	}
	waitGone(t, ctx, cl, idle, "evicted for another user at max_db_connections")
}

// TestMaxUserConnections: max_user_connections = 1 lets app hold one
// connection; a second app client gets 53300, md5user still gets one.
func TestMaxUserConnections(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 5, AcquireTimeout: 500, PoolExtra: "max_user_connections = 1"})
	if _, err := holdServer(t, ctx, px.AppDSN()); err != nil {
		t.Fatal(err)
	}
	_, err := holdServer(t, ctx, px.AppDSN())
	if pgCode(err) != "53300" || !strings.Contains(pgDetail(err), "max_user_connections (1)") {
		t.Fatalf("second app connection beyond max_user_connections = 1: %v, want 53300 naming the limit", err)
	}
	if _, err := holdServer(t, ctx, md5DSN(px)); err != nil {
		t.Fatalf("md5user under app's max_user_connections: %v", err)
	}
}

// gauge reads an unlabelled gauge of the proxy's registry.
func gauge(t *testing.T, px *kinetictest.Proxy, name string) float64 {
	t.Helper()
	mfs, err := px.Server.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return gaugeValue(mf.GetMetric()[0])
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}

func gaugeValue(m *dto.Metric) float64 { return m.GetGauge().GetValue() }

// TestLoginStorm: 1,000 clients connect at once and each runs a query.
// With max_concurrent_dials = 8 the proxy never has more than 8 logins in
// progress to the primary, and no client fails for it: they wait for a
// connection within acquire_timeout_ms. Without the bound the pool (size
// 100) would open up to 100 logins at once.
func TestLoginStorm(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 120*time.Second)
	const clients, bound = 1000, 8
	// The clients log in as "storm" with md5 (an md5 hash in [[users]]),
	// and the proxy as md5user with md5: logins that cost little CPU, so
	// 1000 of them at once (and the race detector) do not make this a
	// test of SCRAM's key stretching on two cores; client_login_timeout_ms
	// is raised for the same reason.
	stormUser := fmt.Sprintf("[[users]]\nname = \"storm\"\npassword = \"md5%x\"\nbackend_user = %q\nbackend_password = \"md5-secret\"\n",
		md5.Sum([]byte("storm-secretstorm")), pgtest.MD5User)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 100, MaxClientConn: clients + 10, AcquireTimeout: 60000,
		LogLevel: "info", ServerExtra: "client_login_timeout_ms = 120000", PoolExtra: "max_concurrent_dials = " + strconv.Itoa(bound),
		Extra: stormUser})
	app := uniqueIdent("storm")
	var failed atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			c, err := pgx.Connect(ctx, px.DSN("storm", "storm-secret", pgtest.AppDB)+"&default_query_exec_mode=simple_protocol&application_name="+app)
			if err == nil {
				var one int
				err = c.QueryRow(ctx, "select 1").Scan(&one)
				c.Close(ctx)
			}
			if err != nil {
				if failed.Add(1) == 1 {
					errMu.Lock()
					firstErr = err
					errMu.Unlock()
				}
			}
		}()
	}
	start = time.Now()
	close(startGate)
	wg.Wait()
	took := time.Since(start)
	peak := gauge(t, px, "kinetic_server_dials_in_progress_max")
	servers, err := cl.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where usename = 'md5user' and datname = 'app'")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d clients connected and queried in %v; at most %.0f server logins at once (bound %d); %s md5user backends on the primary after",
		clients, took.Round(time.Millisecond), peak, bound, servers)
	if n := failed.Load(); n > 0 {
		errMu.Lock()
		t.Errorf("%d of %d clients failed; first: %v", n, clients, firstErr)
		errMu.Unlock()
	}
	if peak > bound || peak < 1 {
		t.Errorf("at most %.0f logins in progress at once, want 1..%d", peak, bound)
	}
	if got := gauge(t, px, "kinetic_server_dials_in_progress"); got != 0 {
		t.Errorf("kinetic_server_dials_in_progress = %v after the storm, want 0", got)
	}
}
