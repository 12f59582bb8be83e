package e2e

// Chaos tests (issue 4, item 8): each freshness and failure rule of SPEC §4,
// §5 and §7 against real replication faults — replay paused, servers
// killed, a standby promoted. Where a statement ran is asked of the server
// (inet_server_port()) and why of the proxy (SHOW pg_kinetic.last_route);
// state is awaited on conditions with deadlines, never slept into.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/proxy"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// chaosProxy runs an in-process kineticd with kinetictest's config plus a
// [routes.freshness] table holding the lines in freshness (the template
// has none), and returns the app user's DSN through it. The proxy stops
// when the test ends.
func chaosProxy(t *testing.T, cl *pgtest.Cluster, p kinetictest.Params, freshness string) string {
	t.Helper()
	if p.ReadRoutingMode == "" {
		p.ReadRoutingMode = "prefer_replica"
	}
	text := kinetictest.TOML(cl, p)
	if freshness != "" {
		const ha = "\n[routes.ha]\n"
		if !strings.Contains(text, ha) {
			t.Fatalf("kinetictest's config has no [routes.ha] table to put [routes.freshness] before:\n%s", text)
		}
		text = strings.Replace(text, ha, "\n[routes.freshness]\n"+freshness+"\n"+ha, 1)
	}
	path := filepath.Join(t.TempDir(), "kineticd.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("chaos config invalid:\n%v\n%s", err, text)
	}
	srv, err := proxy.New(proxy.Options{
		Config:  config.NewHolder(cfg),
		Logger:  zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
		Version: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, proxy.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return kinetictest.DSN(ln.Addr().String(), pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB)
}

// addrs lists the servers' addresses, in order, for Params.Replicas.
func addrs(servers ...*pgtest.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}

// awaitReplicaRead waits until a plain read runs on one of reps: the first
// verdicts take a probe interval or two (kinetictest.AwaitReadOn).
func awaitReplicaRead(t *testing.T, dsn string, reps map[int]bool) {
	t.Helper()
	kinetictest.AwaitReadOn(t, context.Background(), dsn, reps)
}

// readPort runs a one-row, one-int-column query and returns the int.
func readPort(ctx context.Context, c *pgx.Conn, sql string, args ...any) (int, error) {
	var p int
	err := c.QueryRow(ctx, sql, args...).Scan(&p)
	return p, err
}

// rowAt reads row id of tbl: the port of the server that answered and how
// many rows it saw (0 or 1).
func rowAt(ctx context.Context, c *pgx.Conn, tbl string, id int) (port int, n int64, err error) {
	err = c.QueryRow(ctx, "select inet_server_port(), count(*) from "+tbl+" where id = $1", id).Scan(&port, &n)
	return port, n, err
}

// chaosTable creates a table in the app database on the primary (directly,
// so that no proxy session holds a token for it), waits until every
// running standby has it, and drops it when the test ends.
func chaosTable(t *testing.T, ctx context.Context, cl *pgtest.Cluster) string {
	t.Helper()
	tbl := uniqueIdent("chaos")
	c := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := c.Exec(ctx, "create table "+tbl+" (id int primary key, v text)"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dropTable(ctx, cl, tbl)
	})
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	return tbl
}

// pauseReplay pauses WAL replay on the standbys and resumes it when the
// test ends (the shared cluster is left caught up, as it was found).
func pauseReplay(t *testing.T, ctx context.Context, cl *pgtest.Cluster, standbys ...*pgtest.Server) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, s := range standbys {
			if s.Running() {
				s.ResumeReplay(ctx)
			}
		}
		if err := cl.WaitReplicated(ctx); err != nil {
			t.Logf("standbys not caught up after the test: %v", err)
		}
	})
	for _, s := range standbys {
		if err := s.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func resumeReplay(t *testing.T, ctx context.Context, standbys ...*pgtest.Server) {
	t.Helper()
	for _, s := range standbys {
		if err := s.ResumeReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// insertAt inserts row id through c and returns where it ran.
func insertAt(t *testing.T, ctx context.Context, c *pgx.Conn, tbl string, id int) int {
	t.Helper()
	p, err := readPort(ctx, c, "insert into "+tbl+" values ($1, 'x') returning inet_server_port()", id)
	if err != nil {
		t.Fatalf("insert %d: %v", id, err)
	}
	return p
}

// routeField returns the value of key (target, reason, lag_ms) in a
// SHOW pg_kinetic.last_route answer.
func routeField(route, key string) string {
	for _, f := range strings.Fields(route) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// showSimple runs SHOW name through the simple protocol (the proxy answers
// pg_kinetic.* there only).
func showSimple(ctx context.Context, c *pgx.Conn, name string) (string, error) {
	var s string
	err := c.QueryRow(ctx, "show "+name, pgx.QueryExecModeSimpleProtocol).Scan(&s)
	return s, err
}

// asPgError returns err's ErrorResponse, or nil.
func asPgError(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

const kn001Message = "pg-kinetic: no server can serve this read within its consistency contract"

// wantKN001 checks err is the consistency rejection with DETAIL cause.
func wantKN001(t *testing.T, err error, cause string) {
	t.Helper()
	pe := asPgError(err)
	if pe == nil || pe.Code != "KN001" {
		t.Fatalf("got %v, want KN001 (cause: %s)", err, cause)
	}
	if pe.Message != kn001Message {
		t.Errorf("KN001 message = %q, want %q", pe.Message, kn001Message)
	}
	if pe.Detail != "cause: "+cause {
		t.Errorf("KN001 DETAIL = %q, want %q", pe.Detail, "cause: "+cause)
	}
}

// parseLSN parses PostgreSQL's X/Y form.
func parseLSN(t *testing.T, s string) uint64 {
	t.Helper()
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("bad LSN %q", s)
	}
	return h<<32 | l
}

// TestChaosReadYourWritesWhileReplayPaused: with replay paused on every
// standby, a session's read of its own write runs on the primary
// (read_your_writes) and sees the row; once replay resumes, the same read
// reaches a replica, which sees the row too.
func TestChaosReadYourWritesWhileReplayPaused(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	reps := cl.StandbyPorts()
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "")
	awaitReplicaRead(t, dsn, reps)
	c := connect(t, ctx, dsn)

	pauseReplay(t, ctx, cl, cl.Standbys...)
	if p := insertAt(t, ctx, c, tbl, 1); p != cl.Primary.Port {
		t.Fatalf("INSERT ran on %d, want the primary %d", p, cl.Primary.Port)
	}
	for i := 0; i < 10; i++ {
		p, n, err := rowAt(ctx, c, tbl, 1)
		if err != nil {
			t.Fatal(err)
		}
		if p != cl.Primary.Port || n != 1 {
			t.Fatalf("read %d of the session's own write: %d rows on %d, want 1 row on the primary %d", i, n, p, cl.Primary.Port)
		}
		if got := lastRoute(t, ctx, c); routeField(got, "target") != "primary" || routeField(got, "reason") != "read_your_writes" {
			t.Fatalf("last_route = %q, want target=primary reason=read_your_writes", got)
		}
	}

	resumeReplay(t, ctx, cl.Standbys...)
	awaitCond(t, 20*time.Second, "the read to reach a replica after replay resumed", func() (bool, error) {
		p, n, err := rowAt(ctx, c, tbl, 1)
		if err != nil {
			return false, err
		}
		if n != 1 {
			t.Fatalf("read of the session's own write on %d saw %d rows", p, n)
		}
		return reps[p], nil
	})
	if got := lastRoute(t, ctx, c); routeField(got, "target") != "replica" || routeField(got, "reason") != "read" {
		t.Errorf("last_route = %q, want target=replica reason=read", got)
	}
}

// TestChaosOnlyCaughtUpReplicaServes: one standby paused, the other
// streaming: after a write, the session's reads run on the caught-up
// replica (or the primary while it is not yet known to have caught up),
// never on the paused one.
func TestChaosOnlyCaughtUpReplicaServes(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	paused, live := cl.Standbys[0], cl.Standbys[1]
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "")
	awaitReplicaRead(t, dsn, cl.StandbyPorts())
	c := connect(t, ctx, dsn)

	pauseReplay(t, ctx, cl, paused)
	if p := insertAt(t, ctx, c, tbl, 1); p != cl.Primary.Port {
		t.Fatalf("INSERT ran on %d", p)
	}
	seen := map[int]int{}
	deadline := time.Now().Add(15 * time.Second)
	for reads := 0; reads < 60 || seen[live.Port] < 20; reads++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d reads the caught-up replica %d served %d: %v", reads, live.Port, seen[live.Port], seen)
		}
		p, n, err := rowAt(ctx, c, tbl, 1)
		if err != nil {
			t.Fatal(err)
		}
		seen[p]++
		if p == paused.Port {
			t.Fatalf("read %d ran on the paused replica %d (%d rows); last_route %q", reads, p, n, lastRoute(t, ctx, c))
		}
		if n != 1 {
			t.Fatalf("read %d on %d saw %d rows of the session's own write", reads, p, n)
		}
		if p != live.Port && p != cl.Primary.Port {
			t.Fatalf("read ran on %d, a server of no role here", p)
		}
	}
	t.Logf("reads by port (paused %d, live %d, primary %d): %v", paused.Port, live.Port, cl.Primary.Port, seen)
}

// TestChaosIdlePairStaysEligible: a pair idle for several times the lag
// budget is not lagging: reads keep reaching the replicas and are never
// refused for lag.
func TestChaosIdlePairStaysEligible(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 60*time.Second)
	reps := cl.StandbyPorts()
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "max_replica_lag_ms = 300")
	awaitReplicaRead(t, dsn, reps)
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	c := connect(t, ctx, dsn)
	start := time.Now()
	reads := 0
	for time.Since(start) < 2500*time.Millisecond {
		p, err := readPort(ctx, c, "select inet_server_port()")
		if err != nil {
			t.Fatal(err)
		}
		route := lastRoute(t, ctx, c)
		if r := routeField(route, "reason"); r == "lag_exceeded" || r == "lag_unknown" {
			t.Fatalf("after %v idle, read %d: last_route %q", time.Since(start).Round(time.Millisecond), reads, route)
		}
		if !reps[p] {
			t.Fatalf("after %v idle, read %d ran on %d, not a replica; last_route %q", time.Since(start).Round(time.Millisecond), reads, p, route)
		}
		reads++
		time.Sleep(50 * time.Millisecond) // polling pace, not a wait for state
	}
	t.Logf("%d reads over %v of an idle pair, all on replicas", reads, time.Since(start).Round(time.Millisecond))
}

// TestChaosLagOverBudget: freshness_policy max_lag with a 300 ms budget:
// while replay is paused and the primary keeps writing, a session without
// a token is sent to the primary for lag_exceeded; after resume, replicas
// serve again.
func TestChaosLagOverBudget(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	reps := cl.StandbyPorts()
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)},
		"freshness_policy = \"max_lag\"\nmax_replica_lag_ms = 300")
	awaitReplicaRead(t, dsn, reps)

	pauseReplay(t, ctx, cl, cl.Standbys...)
	wctx, stopWriting := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Go(func() {
		for wctx.Err() == nil {
			// WAL with no table to clean up afterwards.
			if err := cl.Primary.Exec(wctx, "select pg_logical_emit_message(false, 'pg-kinetic-chaos', 'lag')"); err != nil && wctx.Err() == nil {
				t.Errorf("write on the primary: %v", err)
				return
			}
			select {
			case <-wctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	defer writer.Wait()
	defer stopWriting()

	c := connect(t, ctx, dsn)
	awaitCond(t, 20*time.Second, "a read to fall back for lag_exceeded", func() (bool, error) {
		p, err := readPort(ctx, c, "select inet_server_port()")
		if err != nil {
			return false, err
		}
		route := lastRoute(t, ctx, c)
		return p == cl.Primary.Port && routeField(route, "reason") == "lag_exceeded", nil
	})
	for i := 0; i < 10; i++ {
		p, err := readPort(ctx, c, "select inet_server_port()")
		if err != nil {
			t.Fatal(err)
		}
		if route := lastRoute(t, ctx, c); p != cl.Primary.Port || route != "target=primary reason=lag_exceeded lag_ms=0" {
			t.Fatalf("read %d with every replica over the lag budget ran on %d; last_route %q", i, p, route)
		}
	}
	stopWriting()
	writer.Wait()

	resumeReplay(t, ctx, cl.Standbys...)
	awaitCond(t, 20*time.Second, "reads to return to a replica", func() (bool, error) {
		p, err := readPort(ctx, c, "select inet_server_port()")
		return err == nil && reps[p], err
	})
}

// TestChaosWaitPolicyServedAfterCatchUp: fallback_policy wait with a 5 s
// read_after_write_timeout_ms: a read of the session's own write, issued
// while replay is paused, waits; replay resumes; a replica answers it with
// the row.
func TestChaosWaitPolicyServedAfterCatchUp(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	reps := cl.StandbyPorts()
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...), FallbackPolicy: "wait"},
		"read_after_write_timeout_ms = 5000")
	awaitReplicaRead(t, dsn, reps)
	c := connect(t, ctx, dsn)

	pauseReplay(t, ctx, cl, cl.Standbys...)
	if p := insertAt(t, ctx, c, tbl, 1); p != cl.Primary.Port {
		t.Fatalf("INSERT ran on %d", p)
	}
	type result struct {
		port    int
		n       int64
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		p, n, err := rowAt(ctx, c, tbl, 1)
		done <- result{p, n, err, time.Since(start)}
	}()
	select {
	case r := <-done:
		// With every replica paused, no replica can qualify; the primary
		// may answer only after the whole timeout.
		t.Fatalf("the read was answered while replay was paused, after %v: port %d, %d rows, %v", r.elapsed, r.port, r.n, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	resumeReplay(t, ctx, cl.Standbys...)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("read served on %d after %v (read_after_write_timeout_ms 5000, resumed after 300ms)", r.port, r.elapsed.Round(time.Millisecond))
	if !reps[r.port] || r.n != 1 {
		t.Fatalf("waiting read: %d rows on %d, want 1 row on a replica; last_route %q", r.n, r.port, lastRoute(t, ctx, c))
	}
	if got := lastRoute(t, ctx, c); routeField(got, "target") != "replica" || routeField(got, "reason") != "read" {
		t.Errorf("last_route = %q, want target=replica reason=read", got)
	}
}

// TestChaosRejectPolicy: fallback_policy reject refuses a read its
// replicas cannot serve with KN001 (cause read_your_writes); under
// require_replica, with every replica down, reads get KN001 too.
func TestChaosRejectPolicy(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	replica := cl.Standbys[0]
	reps := pgtest.Ports(replica)

	t.Run("FallbackReject", func(t *testing.T) {
		dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(replica), FallbackPolicy: "reject"}, "")
		awaitReplicaRead(t, dsn, reps)
		c := connect(t, ctx, dsn)
		pauseReplay(t, ctx, cl, replica)
		if p := insertAt(t, ctx, c, tbl, 1); p != cl.Primary.Port {
			t.Fatalf("INSERT ran on %d", p)
		}
		_, _, err := rowAt(ctx, c, tbl, 1)
		wantKN001(t, err, "read_your_writes")
		if got := lastRoute(t, ctx, c); got != "target=rejected reason=read_your_writes lag_ms=0" {
			t.Errorf("last_route = %q", got)
		}
		// The session goes on: writes still work, and the read is served
		// once the replica has caught up.
		if p := insertAt(t, ctx, c, tbl, 2); p != cl.Primary.Port {
			t.Fatalf("INSERT after the rejection ran on %d", p)
		}
		resumeReplay(t, ctx, replica)
		awaitCond(t, 20*time.Second, "the read to be served by the caught-up replica", func() (bool, error) {
			p, n, err := rowAt(ctx, c, tbl, 2)
			if pgCode(err) == "KN001" {
				return false, err
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reps[p] || n != 1 {
				t.Fatalf("read under fallback_policy reject: %d rows on %d", n, p)
			}
			return true, nil
		})
	})

	t.Run("RequireReplicaAllDown", func(t *testing.T) {
		dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(replica), ReadRoutingMode: "require_replica"}, "")
		awaitReplicaRead(t, dsn, reps)
		c := connect(t, ctx, dsn)
		if err := replica.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			_, err := readPort(ctx, c, "select inet_server_port()")
			pe := asPgError(err)
			if pe == nil || pe.Code != "KN001" || pe.Message != kn001Message || !strings.HasPrefix(pe.Detail, "cause: ") {
				t.Fatalf("read %d under require_replica with every replica down: %v, want KN001", i, err)
			}
			if i == 0 {
				t.Logf("KN001 DETAIL: %q", pe.Detail)
			}
		}
		if got := lastRoute(t, ctx, c); routeField(got, "target") != "rejected" {
			t.Errorf("last_route = %q, want target=rejected", got)
		}
	})
}

// TestChaosBothReplicasKilled: both standbys SIGKILLed, one of them in the
// middle of a read: under prefer_replica with fallback_policy primary,
// every read is answered by the primary, without an error.
func TestChaosBothReplicasKilled(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 60*time.Second)
	reps := cl.StandbyPorts()
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "")
	awaitReplicaRead(t, dsn, reps)
	c := connect(t, ctx, dsn)
	awaitCond(t, 20*time.Second, "both replicas to have served this session", func() (bool, error) {
		seen := map[int]bool{}
		for i := 0; i < 20; i++ {
			// (stale-ok: balanced per unit; a read-your-writes read stays
			// on the replica it used, SPEC §5.)
			p, err := readPort(ctx, c, "/* pg-kinetic: stale-ok */ select inet_server_port()")
			if err != nil {
				return false, err
			}
			seen[p] = true
		}
		return seen[cl.Standbys[0].Port] && seen[cl.Standbys[1].Port], nil
	})

	// A read in flight on a replica when the replicas die.
	inflight := connect(t, ctx, dsn)
	marker := uniqueIdent("inflight")
	type result struct {
		port int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := readPort(ctx, inflight, "select inet_server_port() from pg_sleep(1) /* "+marker+" */")
		done <- result{p, err}
	}()
	running := func(s *pgtest.Server) bool {
		n, _ := s.QueryString(ctx, "select count(*) from pg_stat_activity where query like '%"+marker+"%' and pid <> pg_backend_pid()")
		return n == "1"
	}
	awaitCond(t, 20*time.Second, "the in-flight read to run on a replica", func() (bool, error) {
		return running(cl.Standbys[0]) || running(cl.Standbys[1]), nil
	})
	for _, s := range cl.Standbys {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	if r := <-done; r.err != nil {
		t.Errorf("read in flight when the replicas were killed failed: %v (code %q)", r.err, pgCode(r.err))
	} else {
		t.Logf("read in flight when the replicas were killed was answered by %d", r.port)
	}

	for i := 0; i < 20; i++ {
		p, err := readPort(ctx, c, "select inet_server_port()")
		if err != nil {
			t.Fatalf("read %d with both replicas killed: %v", i, err)
		}
		if p != cl.Primary.Port {
			t.Fatalf("read %d with both replicas killed ran on %d", i, p)
		}
		if got := lastRoute(t, ctx, c); routeField(got, "target") != "primary" {
			t.Fatalf("last_route = %q, want target=primary", got)
		}
	}
	awaitCond(t, 10*time.Second, "reads to fall back for replica_unavailable", func() (bool, error) {
		p, err := readPort(ctx, c, "select inet_server_port()")
		if err != nil || p != cl.Primary.Port {
			t.Fatalf("read with both replicas killed: port %d, %v", p, err)
		}
		return lastRoute(t, ctx, c) == "target=primary reason=replica_unavailable lag_ms=0", nil
	})
	// A new session too.
	c2 := connect(t, ctx, dsn)
	if p, err := readPort(ctx, c2, "select inet_server_port()"); err != nil || p != cl.Primary.Port {
		t.Fatalf("new session's read with both replicas killed: port %d, %v", p, err)
	}
}

// TestChaosPrimaryKilled: the primary SIGKILLed: writes through existing
// and new sessions fail with an error, and none of them reaches a replica;
// reads under require_replica are served by a replica or refused with
// KN001, never left hanging.
func TestChaosPrimaryKilled(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 90*time.Second)
	tbl := chaosTable(t, ctx, cl)
	reps := cl.StandbyPorts()
	preferDSN := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "")
	requireDSN := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...), ReadRoutingMode: "require_replica"}, "")
	awaitReplicaRead(t, preferDSN, reps)
	awaitReplicaRead(t, requireDSN, reps)
	writers := []*pgx.Conn{connect(t, ctx, preferDSN), connect(t, ctx, requireDSN)}
	reader := connect(t, ctx, requireDSN)
	if p, err := readPort(ctx, reader, "select inet_server_port()"); err != nil || !reps[p] {
		t.Fatalf("require_replica read before the kill: port %d, %v", p, err)
	}
	for i, w := range writers {
		if p := insertAt(t, ctx, w, tbl, i+1); p != cl.Primary.Port {
			t.Fatalf("INSERT ran on %d", p)
		}
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	if err := cl.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	const firstFailed = 1000 // ids of the writes issued while the primary is down
	id := firstFailed

	t.Run("WritesFail", func(t *testing.T) {
		try := func(what string, c *pgx.Conn) {
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			_, err := c.Exec(wctx, "insert into "+tbl+" values ($1, 'lost')", id)
			id++
			switch {
			case err == nil:
				t.Errorf("%s: INSERT with the primary killed succeeded", what)
			case wctx.Err() != nil:
				t.Errorf("%s: INSERT with the primary killed hung: %v", what, err)
			default:
				t.Logf("%s: INSERT failed: SQLSTATE %q: %v", what, pgCode(err), err)
			}
		}
		for i, w := range writers {
			try(fmt.Sprintf("existing session %d", i), w)
		}
		for i, dsn := range []string{preferDSN, requireDSN} {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			c, err := pgx.Connect(cctx, dsn)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("new session %d: connecting hung: %v", i, err)
				} else {
					t.Logf("new session %d: connect failed: SQLSTATE %q: %v", i, pgCode(err), err)
				}
				id++
				continue
			}
			try(fmt.Sprintf("new session %d", i), c)
			c.Close(ctx)
		}
	})

	t.Run("RequireReplicaReadsServedOrRejected", func(t *testing.T) {
		// Replicas keep a known lag with the primary gone (its last
		// sample stands, and they replayed all of it): a read the
		// replicas can serve should be served, else rejected with KN001.
		check := func(what string, c *pgx.Conn) {
			for i := 0; i < 5; i++ {
				rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				p, err := readPort(rctx, c, "select inet_server_port()")
				hung := rctx.Err() != nil
				cancel()
				switch {
				case hung:
					t.Errorf("%s: read %d with the primary down hung: %v", what, i, err)
					return
				case err == nil && reps[p]:
				case err == nil:
					t.Errorf("%s: read %d ran on %d, not a replica", what, i, p)
				case pgCode(err) == "KN001":
					t.Logf("%s: read %d rejected: %v", what, i, err)
				default:
					t.Errorf("%s: read %d with the primary down: %v (SQLSTATE %q), want a replica's answer or KN001", what, i, err, pgCode(err))
					return
				}
			}
		}
		check("existing require_replica session", reader)
		// A new session is admitted while the primary is down: it logs
		// in through a replica (with a proxy PID) and its reads go on.
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		c, err := pgx.Connect(cctx, requireDSN)
		cancel()
		if err != nil {
			t.Fatalf("new session with the primary down: %v (SQLSTATE %q)", err, pgCode(err))
		}
		defer c.Close(ctx)
		check("new require_replica session", c)
	})

	t.Run("NothingReachedAReplica", func(t *testing.T) {
		if err := cl.Primary.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitReplicated(ctx); err != nil {
			t.Fatal(err)
		}
		for _, s := range append([]*pgtest.Server{cl.Primary}, cl.Standbys...) {
			dc := connect(t, ctx, s.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
			n := queryInt(t, ctx, dc, "select count(*) from "+tbl+" where id >= $1", firstFailed)
			if n != 0 {
				t.Errorf("%s has %d rows written while the primary was down", s.Name, n)
			}
			if all := queryInt(t, ctx, dc, "select count(*) from "+tbl); all != 2 {
				t.Errorf("%s has %d rows, want the 2 written before the kill", s.Name, all)
			}
			dc.Close(ctx)
		}
		for _, s := range cl.Standbys {
			log, err := os.ReadFile(s.LogFile)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(log), "read-only transaction") || strings.Contains(string(log), tbl) {
				t.Errorf("%s logged a statement on the test table (a write sent to a replica?):\n%s", s.Name, log)
			}
		}
	})
}

// TestChaosPromotedBehindOurBack: with fixed roles (follow_failover =
// false), a configured replica promoted without telling kineticd is excluded as a split brain once the probes see it:
// reads never run there (last_route says split_brain, or another server
// answers), writes keep going to the configured primary.
func TestChaosPromotedBehindOurBack(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	primary, promoted, other := cl.Primary, cl.Standbys[0], cl.Standbys[1]
	// other first: when no replica qualifies, last_route names the reason
	// of the last one in config order, the promoted server's.
	// Fixed roles: this is what follow_failover = false keeps (the
	// default follows the promotion: TestFailoverDrill).
	dsn := chaosProxy(t, cl, kinetictest.Params{Primary: primary.Addr(), Replicas: addrs(other, promoted),
		HAExtra: "follow_failover = false"}, "")
	awaitReplicaRead(t, dsn, pgtest.Ports(other, promoted))
	c := connect(t, ctx, dsn)

	// The other standby stays behind this session's write, so that a read
	// of it has no replica left once the promoted one is excluded.
	pauseReplay(t, ctx, cl, other)
	if p := insertAt(t, ctx, c, tbl, 1); p != primary.Port {
		t.Fatalf("INSERT ran on %d", p)
	}
	if err := promoted.WaitReplay(ctx, mustLSN(t, ctx, primary)); err != nil {
		t.Fatal(err)
	}
	if err := cl.Promote(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	onPromoted := 0
	awaitCond(t, 20*time.Second, "the probes to report the promoted replica as split_brain", func() (bool, error) {
		p, n, err := rowAt(ctx, c, tbl, 1)
		if err != nil {
			return false, err
		}
		if n != 1 {
			t.Fatalf("read of the session's own write on %d saw %d rows", p, n)
		}
		if p == promoted.Port {
			onPromoted++ // before the probes noticed: it had replayed the write
		}
		return routeField(lastRoute(t, ctx, c), "reason") == "split_brain", nil
	})
	t.Logf("%d reads ran on the promoted server before the probes noticed", onPromoted)
	for i := 0; i < 20; i++ {
		p, n, err := rowAt(ctx, c, tbl, 1)
		if err != nil {
			t.Fatal(err)
		}
		route := lastRoute(t, ctx, c)
		if p != primary.Port || n != 1 || route != "target=primary reason=split_brain lag_ms=0" {
			t.Fatalf("read %d after the split brain was seen: %d rows on %d (promoted %d, primary %d); last_route %q",
				i, n, p, promoted.Port, primary.Port, route)
		}
	}
	// A session with no token: the other (paused) standby may still be
	// within the lag budget; the promoted one never answers.
	fresh := connect(t, ctx, dsn)
	for i := 0; i < 20; i++ {
		p, err := readPort(ctx, fresh, "select inet_server_port()")
		if err != nil {
			t.Fatal(err)
		}
		route := lastRoute(t, ctx, fresh)
		switch {
		case p == promoted.Port:
			t.Fatalf("fresh session's read %d ran on the promoted server; last_route %q", i, route)
		case p == other.Port && routeField(route, "target") == "replica":
		case p == primary.Port && routeField(route, "target") == "primary":
		default:
			t.Fatalf("fresh session's read %d ran on %d; last_route %q", i, p, route)
		}
	}
	// Writes still go to the configured primary.
	for i, w := range []*pgx.Conn{c, fresh} {
		if p := insertAt(t, ctx, w, tbl, 10+i); p != primary.Port {
			t.Fatalf("INSERT after the promotion ran on %d, want the configured primary %d", p, primary.Port)
		}
	}
}

// mustLSN returns the server's pg_current_wal_lsn().
func mustLSN(t *testing.T, ctx context.Context, s *pgtest.Server) string {
	t.Helper()
	lsn, err := s.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestChaosOldTimelineToken: after a failover, kineticd configured with
// the promoted server as primary and the re-pointed standby (timeline 2)
// as replica sends a read whose token is from timeline 1 to the primary
// (timeline_changed); the same position as a bare token, or no token, is
// served by the replica.
func TestChaosOldTimelineToken(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 90*time.Second)
	// The probe user must see the standby's received_tli to know its
	// timeline at once after a failover; without pg_read_all_stats it trails
	// by up to checkpoint_timeout (docs/behaviour.md, Timelines).
	if err := cl.Primary.Exec(ctx, "GRANT pg_read_all_stats TO "+pgtest.AppUser); err != nil {
		t.Fatal(err)
	}
	tbl := chaosTable(t, ctx, cl)
	oldPrimary, promoted, follower := cl.Primary, cl.Standbys[0], cl.Standbys[1]

	// A token from timeline 1, as a session got it.
	var oldToken string
	{
		dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "")
		c := connect(t, ctx, dsn)
		if p := insertAt(t, ctx, c, tbl, 1); p != oldPrimary.Port {
			t.Fatalf("INSERT ran on %d", p)
		}
		tok, err := showSimple(ctx, c, "pg_kinetic.write_lsn")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tok, "1:") {
			t.Fatalf("token before the failover = %q, want timeline 1", tok)
		}
		oldToken = tok
		c.Close(ctx)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	// Failover: the old primary stops first, so the other standby can
	// follow the new timeline.
	if err := oldPrimary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Promote(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitReplicated(ctx); err != nil { // the follower is on timeline 2
		t.Fatal(err)
	}
	if tli, err := follower.QueryString(ctx, "select received_tli from pg_stat_wal_receiver"); err != nil || tli != "2" {
		t.Fatalf("follower's received_tli = %q (%v), want 2", tli, err)
	}

	dsn := chaosProxy(t, cl, kinetictest.Params{Primary: promoted.Addr(), Replicas: addrs(follower)}, "")
	reps := pgtest.Ports(follower)
	t.Run("NoToken", func(t *testing.T) {
		awaitReplicaRead(t, dsn, reps)
	})
	oldTimeline := func(t *testing.T, c *pgx.Conn, what, sql string, mode pgx.QueryExecMode) {
		t.Helper()
		p, err := readPort(ctx, c, sql, mode)
		if err != nil {
			t.Fatal(err)
		}
		route := lastRoute(t, ctx, c)
		if p != promoted.Port || route != "target=primary reason=timeline_changed lag_ms=0" {
			t.Errorf("%s: read with floor %s (timeline 1, the primary and replica are on 2) ran on %d (primary %d, replica %d); last_route %q, want target=primary reason=timeline_changed",
				what, oldToken, p, promoted.Port, follower.Port, route)
		}
	}
	hinted := "/* pg-kinetic: min_lsn=" + oldToken + " */ select inet_server_port()"
	t.Run("OldTimelineHintSimpleProtocol", func(t *testing.T) {
		c := connect(t, ctx, dsn)
		oldTimeline(t, c, "first statement of a session, simple protocol", hinted, pgx.QueryExecModeSimpleProtocol)
		// The session has read once: its monotonic floor is now a timeline
		// 2 position. The old token must still not be served by the replica.
		oldTimeline(t, c, "second statement, simple protocol", hinted, pgx.QueryExecModeSimpleProtocol)
	})
	t.Run("OldTimelineHintExtendedProtocol", func(t *testing.T) {
		// pgx's default: Parse/Describe/Sync, then Bind/Execute/Sync, two
		// units carrying the same hint.
		c := connect(t, ctx, dsn)
		oldTimeline(t, c, "first statement of a session, extended protocol", hinted, pgx.QueryExecModeCacheStatement)
	})
	t.Run("OldTimelineSetting", func(t *testing.T) {
		c := connect(t, ctx, dsn)
		if _, err := c.Exec(ctx, "set pg_kinetic.min_lsn = '"+oldToken+"'", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			oldTimeline(t, c, fmt.Sprintf("SET pg_kinetic.min_lsn, read %d (simple protocol)", i), "select inet_server_port()", pgx.QueryExecModeSimpleProtocol)
		}
	})
	t.Run("BareToken", func(t *testing.T) {
		_, bare, _ := strings.Cut(oldToken, ":")
		c := connect(t, ctx, dsn)
		awaitCond(t, 10*time.Second, "a read with the bare token "+bare+" to reach the replica", func() (bool, error) {
			p, err := readPort(ctx, c, "/* pg-kinetic: min_lsn="+bare+" */ select inet_server_port()")
			if err != nil {
				return false, err
			}
			route := lastRoute(t, ctx, c)
			if reason := routeField(route, "reason"); reason == "timeline_changed" {
				t.Fatalf("bare token %s read as timeline 1: last_route %q", bare, route)
			}
			return reps[p], nil
		})
		for i := 0; i < 5; i++ {
			p, err := readPort(ctx, c, "/* pg-kinetic: min_lsn="+bare+" */ select inet_server_port()")
			if err != nil {
				t.Fatal(err)
			}
			if !reps[p] {
				t.Fatalf("read %d with bare token %s ran on %d; last_route %q", i, bare, p, lastRoute(t, ctx, c))
			}
		}
	})
}

// TestChaosStrictFresh: a write made on the primary behind kineticd's back
// while one standby is paused: strict-fresh reads see it, and never come
// from the paused standby.
func TestChaosStrictFresh(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	paused, live := cl.Standbys[0], cl.Standbys[1]
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "")
	awaitReplicaRead(t, dsn, cl.StandbyPorts())
	c := connect(t, ctx, dsn)

	pauseReplay(t, ctx, cl, paused)
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "insert into "+tbl+" values (1, 'behind the proxy')"); err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for i := 0; i < 40; i++ {
		var p int
		var n int64
		err := c.QueryRow(ctx, "/* pg-kinetic: strict-fresh */ select inet_server_port(), count(*) from "+tbl+" where id = 1").Scan(&p, &n)
		if err != nil {
			t.Fatal(err)
		}
		seen[p]++
		route := lastRoute(t, ctx, c)
		switch {
		case p == paused.Port:
			t.Fatalf("strict-fresh read %d ran on the paused replica; last_route %q", i, route)
		case n != 1:
			t.Fatalf("strict-fresh read %d on %d missed a committed write; last_route %q", i, p, route)
		case p == live.Port && routeField(route, "target") == "replica":
		case p == cl.Primary.Port && route == "target=primary reason=strict_fresh lag_ms=0":
		default:
			t.Fatalf("strict-fresh read %d ran on %d; last_route %q", i, p, route)
		}
	}
	t.Logf("strict-fresh reads by port (paused %d, live %d, primary %d): %v", paused.Port, live.Port, cl.Primary.Port, seen)
}

// TestChaosFallbackOverloadAndDegradedNotice: with
// max_primary_fallback_inflight = 1, a second concurrent primary fallback
// is refused with KN001 (fallback_overload); a stale-ok read that falls
// back to the primary carries a "pg-kinetic: degraded" notice.
func TestChaosFallbackOverloadAndDegradedNotice(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	reps := cl.StandbyPorts()
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)},
		"max_replica_lag_ms = 300\nmax_primary_fallback_inflight = 1")
	awaitReplicaRead(t, dsn, reps)
	holder := connect(t, ctx, dsn)
	second := connect(t, ctx, dsn)

	pauseReplay(t, ctx, cl, cl.Standbys...)
	if p := insertAt(t, ctx, holder, tbl, 1); p != cl.Primary.Port {
		t.Fatalf("INSERT ran on %d", p)
	}
	if p := insertAt(t, ctx, second, tbl, 2); p != cl.Primary.Port {
		t.Fatalf("INSERT ran on %d", p)
	}

	t.Run("FallbackOverload", func(t *testing.T) {
		marker := uniqueIdent("hold")
		type result struct {
			port int
			err  error
		}
		done := make(chan result, 1)
		go func() {
			p, err := readPort(ctx, holder, "select inet_server_port() from "+tbl+", pg_sleep(2) where id = 1 /* "+marker+" */",
				pgx.QueryExecModeSimpleProtocol)
			done <- result{p, err}
		}()
		awaitCond(t, 20*time.Second, "the first fallback to run on the primary", func() (bool, error) {
			n, err := cl.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where query like '%"+marker+"%' and pid <> pg_backend_pid()")
			return n == "1", err
		})
		_, _, err := rowAt(ctx, second, tbl, 2)
		wantKN001(t, err, "fallback_overload")
		if got := lastRoute(t, ctx, second); got != "target=rejected reason=fallback_overload lag_ms=0" {
			t.Errorf("last_route = %q", got)
		}
		r := <-done
		if r.err != nil || r.port != cl.Primary.Port {
			t.Fatalf("the fallback holding the slot: port %d, %v", r.port, r.err)
		}
		if got := lastRoute(t, ctx, holder); got != "target=primary reason=read_your_writes lag_ms=0" {
			t.Errorf("holder's last_route = %q", got)
		}
		// The slot is free again.
		p, n, err := rowAt(ctx, second, tbl, 2)
		if err != nil || p != cl.Primary.Port || n != 1 {
			t.Fatalf("fallback after the slot was released: %d rows on %d, %v", n, p, err)
		}
	})

	t.Run("DegradedNotice", func(t *testing.T) {
		var mu sync.Mutex
		var notices []*pgconn.Notice
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			notices = append(notices, n)
			mu.Unlock()
		}
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		take := func() []*pgconn.Notice {
			mu.Lock()
			defer mu.Unlock()
			n := notices
			notices = nil
			return n
		}
		const staleOK = "/* pg-kinetic: stale-ok */ select inet_server_port()"
		awaitCond(t, 20*time.Second, "a stale-ok read to fall back for lag_exceeded", func() (bool, error) {
			take()
			p, err := readPort(ctx, c, staleOK, pgx.QueryExecModeSimpleProtocol) // one unit, one notice
			if err != nil {
				return false, err
			}
			got := take()
			if reps[p] {
				if len(got) > 0 {
					t.Fatalf("a stale-ok read served by replica %d got notices %+v", p, got[0])
				}
				return false, nil // still within the lag budget
			}
			route := lastRoute(t, ctx, c)
			if p != cl.Primary.Port || route != "target=primary reason=lag_exceeded lag_ms=0" {
				t.Fatalf("stale-ok read ran on %d; last_route %q", p, route)
			}
			if len(got) != 1 || got[0].Severity != "NOTICE" || !strings.HasPrefix(got[0].Message, "pg-kinetic: degraded") {
				t.Fatalf("stale-ok read that fell back got notices %+v, want one NOTICE \"pg-kinetic: degraded...\"", got)
			}
			if !strings.Contains(got[0].Message+" "+got[0].Detail, "lag_exceeded") {
				t.Errorf("degraded notice does not name its cause: %q / %q", got[0].Message, got[0].Detail)
			}
			t.Logf("notice: %s: %s (%s)", got[0].Severity, got[0].Message, got[0].Detail)
			return true, nil
		})
		resumeReplay(t, ctx, cl.Standbys...)
		awaitCond(t, 20*time.Second, "stale-ok reads to reach a replica again, without a notice", func() (bool, error) {
			take()
			p, err := readPort(ctx, c, staleOK, pgx.QueryExecModeSimpleProtocol)
			got := take()
			if err == nil && reps[p] && len(got) > 0 {
				t.Fatalf("a stale-ok read served by replica %d got a notice: %+v", p, got[0])
			}
			return err == nil && reps[p], err
		})
	})
}

var tokenRE = regexp.MustCompile(`^([1-9][0-9]*):([0-9A-F]{1,8}/[0-9A-F]{1,8})$`)

// TestChaosTokenPublishedAndAcrossSessions: a write's token is published
// as ParameterStatus pg_kinetic.write_lsn and by SHOW pg_kinetic.write_lsn
// alike, as TIMELINE:LSN; a second session that sets it as
// pg_kinetic.min_lsn reads on the primary while replay is paused, and on a
// replica once it has caught up.
func TestChaosTokenPublishedAndAcrossSessions(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	reps := cl.StandbyPorts()
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...)}, "")
	awaitReplicaRead(t, dsn, reps)
	writer := connect(t, ctx, dsn)
	reader := connect(t, ctx, dsn)

	pauseReplay(t, ctx, cl, cl.Standbys...)
	before := parseLSN(t, mustLSN(t, ctx, cl.Primary))
	if p := insertAt(t, ctx, writer, tbl, 1); p != cl.Primary.Port {
		t.Fatalf("INSERT ran on %d", p)
	}
	token, err := showSimple(ctx, writer, "pg_kinetic.write_lsn")
	if err != nil {
		t.Fatal(err)
	}
	m := tokenRE.FindStringSubmatch(token)
	if m == nil {
		t.Fatalf("SHOW pg_kinetic.write_lsn = %q, want TIMELINE:LSN", token)
	}
	after := parseLSN(t, func() string {
		v, err := cl.Primary.QueryString(ctx, "select pg_current_wal_insert_lsn()")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}())
	if lsn := parseLSN(t, m[2]); lsn <= before || lsn > after {
		t.Errorf("token %s is not after the write's commit: primary was at %X before it, %X after", token, before, after)
	}
	walfile, err := cl.Primary.QueryString(ctx, "select substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")
	if err != nil {
		t.Fatal(err)
	}
	if tli, _ := strconv.ParseUint(walfile, 16, 32); strconv.FormatUint(tli, 10) != m[1] {
		t.Errorf("token %s names timeline %s, the primary is on %d", token, m[1], tli)
	}
	// The ParameterStatus follows the write's ReadyForQuery; pgx takes it
	// in with the next message it reads.
	awaitCond(t, 10*time.Second, "ParameterStatus pg_kinetic.write_lsn = "+token, func() (bool, error) {
		if _, err := writer.Exec(ctx, "select 1"); err != nil {
			return false, err
		}
		return writer.PgConn().ParameterStatus("pg_kinetic.write_lsn") == token, nil
	})

	if _, err := reader.Exec(ctx, "set pg_kinetic.min_lsn = '"+token+"'", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if got, err := showSimple(ctx, reader, "pg_kinetic.min_lsn"); err != nil || got != token {
		t.Fatalf("SHOW pg_kinetic.min_lsn = %q (%v), want %q", got, err, token)
	}
	for i := 0; i < 5; i++ {
		p, n, err := rowAt(ctx, reader, tbl, 1)
		if err != nil {
			t.Fatal(err)
		}
		route := lastRoute(t, ctx, reader)
		if p != cl.Primary.Port || n != 1 || route != "target=primary reason=read_your_writes lag_ms=0" {
			t.Fatalf("read %d with min_lsn %s while replay is paused: %d rows on %d; last_route %q", i, token, n, p, route)
		}
	}
	resumeReplay(t, ctx, cl.Standbys...)
	awaitCond(t, 20*time.Second, "the min_lsn read to reach a replica", func() (bool, error) {
		p, n, err := rowAt(ctx, reader, tbl, 1)
		if err != nil {
			return false, err
		}
		if n != 1 {
			t.Fatalf("read with min_lsn %s on %d saw %d rows", token, p, n)
		}
		return reps[p], nil
	})
}

// TestChaosPinnedTransactionServerDies: a read-only transaction pinned to
// a replica whose server is killed: its next statement fails with an
// error, it does not hang.
func TestChaosPinnedTransactionServerDies(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	replica := cl.Standbys[0]
	dsn := chaosProxy(t, cl, kinetictest.Params{Replicas: addrs(replica)}, "")
	awaitReplicaRead(t, dsn, pgtest.Ports(replica))
	c := connect(t, ctx, dsn)
	tx, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := readPort(ctx, tx.Conn(), "select inet_server_port()"); err != nil || p != replica.Port {
		t.Fatalf("read-only transaction's first read: port %d, %v; want the replica %d", p, err, replica.Port)
	}
	if err := replica.Kill(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	p, err := readPort(sctx, tx.Conn(), "select inet_server_port()")
	switch {
	case sctx.Err() != nil:
		t.Fatalf("statement in a transaction whose server was killed hung: %v", err)
	case err == nil:
		t.Fatalf("statement in a transaction whose server was killed succeeded on %d", p)
	}
	t.Logf("statement after the pinned replica died: SQLSTATE %q: %v", pgCode(err), err)
	if asPgError(err) == nil {
		// SPEC §7 and STYLE: the client sees a proper ErrorResponse, not a
		// bare end of stream.
		log, _ := os.ReadFile(replica.LogFile)
		t.Errorf("the client got no ErrorResponse, only %v (the replica's backend said FATAL 57P01 before exiting: %v)",
			err, strings.Contains(string(log), "terminating connection due to unexpected postmaster exit"))
	}
	tx.Rollback(ctx)
}
