package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Transaction pooling (pool_mode = "transaction"). The whole e2e suite also
// runs in this mode (KINETIC_TEST_POOL_MODE, see the Makefile); these tests
// show what only this mode does: many clients share a few server
// connections, and what a session set up survives moving between them.

func txProxy(t *testing.T, cl *pgtest.Cluster, size int) *kinetictest.Proxy {
	return kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: size, AcquireTimeout: 5000})
}

// TestTxPoolManyClientsFewServers: 12 clients through a pool of 2 all run
// queries, interleaved and concurrently, on at most 2 server processes;
// session pooling would refuse the third client (TestPoolFullGets53300).
func TestTxPoolManyClientsFewServers(t *testing.T) {
	cl := pgtest.Shared(t)
	px := txProxy(t, cl, 2)
	ctx := ctxT(t, 60*time.Second)
	app := uniqueIdent("txshare")
	var conns []*pgx.Conn
	for i := 0; i < 12; i++ {
		conns = append(conns, connect(t, ctx, px.AppDSN()+"&application_name="+app))
	}
	var mu sync.Mutex
	pids := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				var pid int64
				if err := c.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				pids[pid] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(pids) == 0 || len(pids) > 2 {
		t.Fatalf("12 clients ran on %d server processes, want 1 or 2 (pool size 2)", len(pids))
	}
	// Idle clients hold nothing: the server sees at most the pool.
	n, err := cl.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where usename = '"+pgtest.AppUser+"' and application_name = '"+app+"'")
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := strconv.Atoi(n); k > 2 {
		t.Fatalf("%d server sessions carry the clients' application_name, want at most 2", k)
	}
}

// TestTxPoolSessionStateFollowsClient: two clients share one server
// connection (pool of 1) and each keeps its own SET values, startup
// parameters, RESETs and DISCARD ALL, whatever the other did in between.
func TestTxPoolSessionStateFollowsClient(t *testing.T) {
	cl := pgtest.Shared(t)
	px := txProxy(t, cl, 1)
	ctx := ctxT(t, 30*time.Second)
	a := connect(t, ctx, px.AppDSN()+"&application_name=client-a")
	b := connect(t, ctx, px.AppDSN()+"&application_name=client-b")
	setting := func(c *pgx.Conn, name string) string {
		t.Helper()
		var v *string
		// No cached prepared statement: after the DISCARD ALL below it
		// would be gone, as directly (26000), and the proxy no longer lets
		// a client use another client's statement of the same name.
		if err := c.QueryRow(ctx, "select current_setting($1, true)", pgx.QueryExecModeExec, name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == nil {
			return "<null>"
		}
		return *v
	}
	if pa, pb := queryInt(t, ctx, a, "select pg_backend_pid()"), queryInt(t, ctx, b, "select pg_backend_pid()"); pa != pb {
		t.Fatalf("a pool of 1 served the clients from processes %d and %d", pa, pb)
	}
	if _, err := a.Exec(ctx, "set kinetic.test = 'a'; set statement_timeout = '7s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "set kinetic.test = 'b'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if got := setting(a, "kinetic.test"); got != "a" {
			t.Fatalf("round %d: client a sees kinetic.test = %q, want a", i, got)
		}
		if got := setting(b, "kinetic.test"); got != "b" {
			t.Fatalf("round %d: client b sees kinetic.test = %q, want b", i, got)
		}
		if got := setting(b, "statement_timeout"); got != "0" {
			t.Fatalf("client b sees client a's statement_timeout %q", got)
		}
		if got := setting(a, "statement_timeout"); got != "7s" {
			t.Fatalf("client a's statement_timeout = %q, want 7s", got)
		}
		if got := setting(a, "application_name"); got != "client-a" {
			t.Fatalf("client a's application_name = %q", got)
		}
		if got := setting(b, "application_name"); got != "client-b" {
			t.Fatalf("client b's application_name = %q", got)
		}
	}
	// A SET rolled back did not happen.
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "set kinetic.test = 'rolled-back'"); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	setting(b, "kinetic.test")
	if got := setting(a, "kinetic.test"); got != "a" {
		t.Fatalf("after a rolled-back SET client a sees %q, want a", got)
	}
	if _, err := a.Exec(ctx, "reset kinetic.test"); err != nil {
		t.Fatal(err)
	}
	setting(b, "kinetic.test")
	if got := setting(a, "kinetic.test"); got != "" && got != "<null>" {
		t.Fatalf("after RESET client a sees %q", got)
	}
	if _, err := b.Exec(ctx, "discard all"); err != nil {
		t.Fatal(err)
	}
	setting(a, "kinetic.test")
	if got := setting(b, "kinetic.test"); got != "" && got != "<null>" {
		t.Fatalf("after DISCARD ALL client b sees %q", got)
	}
	if got := setting(b, "application_name"); got != "client-b" {
		t.Fatalf("after DISCARD ALL client b's startup application_name is %q, want it kept", got)
	}
}

// TestTxPoolPreparedStatements: clients sharing one server connection
// prepare statements of the same name with different texts, at the
// protocol level and with SQL PREPARE, and each always runs its own.
func TestTxPoolPreparedStatements(t *testing.T) {
	cl := pgtest.Shared(t)
	px := txProxy(t, cl, 1)
	ctx := ctxT(t, 30*time.Second)
	a := connect(t, ctx, px.AppDSN())
	b := connect(t, ctx, px.AppDSN())
	if _, err := a.Prepare(ctx, "s1", "select $1::int + 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(ctx, "s1", "select $1::int * 10"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "prepare q as select 'a'::text"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "prepare q as select 'b'::text"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if got := queryInt(t, ctx, a, "s1", i); got != int64(i+1) {
			t.Fatalf("client a's s1(%d) = %d, want %d", i, got, i+1)
		}
		if got := queryInt(t, ctx, b, "s1", i); got != int64(i*10) {
			t.Fatalf("client b's s1(%d) = %d, want %d", i, got, i*10)
		}
		for _, c := range []struct {
			conn *pgx.Conn
			want string
		}{{a, "a"}, {b, "b"}} {
			var got string
			if err := c.conn.QueryRow(ctx, "execute q", pgx.QueryExecModeSimpleProtocol).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("EXECUTE q = %q, want %q", got, c.want)
			}
		}
	}
	// pgx's statement cache names statements by their text: both clients
	// use the same name for the same query on the same server.
	for i := 0; i < 5; i++ {
		for _, c := range []*pgx.Conn{a, b} {
			if got := queryInt(t, ctx, c, "select $1::int * 2", i); got != int64(2*i) {
				t.Fatalf("cached statement gave %d, want %d", got, 2*i)
			}
		}
	}
}

// TestTxPoolPgbenchPrepared: pgbench -M prepared through transaction
// pooling, 8 clients on 2 server connections: every transaction succeeds
// (PgBouncer 1.18 fails this with "prepared statement does not exist").
func TestTxPoolPgbenchPrepared(t *testing.T) {
	cl := pgtest.Shared(t)
	px := txProxy(t, cl, 2)
	ctx := ctxT(t, 2*time.Minute)
	tbl := uniqueIdent("txbench")
	setup := connect(t, ctx, px.AppDSN())
	if _, err := setup.Exec(ctx, fmt.Sprintf("create table %s (id int primary key, v int); insert into %[1]s select g, g from generate_series(1, 100) g", tbl)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setup.Exec(context.Background(), "drop table if exists "+tbl) })
	script := filepath.Join(t.TempDir(), "bench.sql")
	text := fmt.Sprintf("\\set id random(1, 100)\nselect v from %s where id = :id;\nupdate %[1]s set v = v + 1 where id = :id;\n", tbl)
	if err := os.WriteFile(script, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(script), 0o755)
	for _, mode := range []string{"prepared", "extended", "simple"} {
		res := runClient(t, ctx, clientEnv(), nil, "pgbench", "-n", "-M", mode, "-c", "8", "-j", "2", "-t", "100", "-f", script,
			"-h", "127.0.0.1", "-p", strconv.Itoa(px.Port()), "-U", pgtest.AppUser, pgtest.AppDB)
		r, err := parsePgbench(res.stdout)
		if res.code != 0 || err != nil || r.failed != 0 || r.processed != 800 {
			t.Fatalf("pgbench -M %s, 8 clients on 2 server connections: %+v %v\n%s", mode, r, err, res)
		}
		t.Logf("pgbench -M %s through transaction pooling: %d transactions, tps %.0f", mode, r.processed, r.tps)
	}
}

// TestTxPoolPinnedSessionKeepsItsServer: a temporary table pins the
// session to one server connection until DISCARD ALL, while other clients
// share the rest of the pool.
func TestTxPoolPinnedSessionKeepsItsServer(t *testing.T) {
	cl := pgtest.Shared(t)
	px := txProxy(t, cl, 2)
	ctx := ctxT(t, 30*time.Second)
	pinned := connect(t, ctx, px.AppDSN())
	others := []*pgx.Conn{connect(t, ctx, px.AppDSN()), connect(t, ctx, px.AppDSN())}
	if _, err := pinned.Exec(ctx, "create temp table txpin (x int); insert into txpin values (7)"); err != nil {
		t.Fatal(err)
	}
	pid := queryInt(t, ctx, pinned, "select pg_backend_pid()")
	for i := 0; i < 5; i++ {
		for _, o := range others {
			if got := queryInt(t, ctx, o, "select pg_backend_pid()"); got == pid {
				t.Fatalf("another client ran on the pinned session's server process %d", pid)
			}
		}
		if got := queryInt(t, ctx, pinned, "select x from txpin"); got != 7 {
			t.Fatalf("temp table row = %d", got)
		}
		if got := queryInt(t, ctx, pinned, "select pg_backend_pid()"); got != pid {
			t.Fatalf("pinned session moved from process %d to %d", pid, got)
		}
	}
	if _, err := pinned.Exec(ctx, "discard all"); err != nil {
		t.Fatal(err)
	}
	// Released: the other clients may now use both connections, and the
	// temporary table is gone with DISCARD ALL.
	var n int64
	if err := pinned.QueryRow(ctx, "select count(*) from pg_tables where tablename = 'txpin'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("temp table after DISCARD ALL: %d %v", n, err)
	}
	seen := map[int64]bool{}
	for i := 0; i < 20 && len(seen) < 2; i++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, o := range others {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var p int64
				if o.QueryRow(ctx, "select pg_backend_pid() from pg_sleep(0.05)").Scan(&p) == nil {
					mu.Lock()
					seen[p] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	if len(seen) < 2 {
		t.Fatalf("after DISCARD ALL two concurrent clients ran on %d server processes, want 2", len(seen))
	}
}

// TestTxPoolTempSchemaObjectsPin: an object created in the temporary
// schema by naming it (pg_temp.name, no TEMP keyword) pins the session as
// CREATE TEMP TABLE does; without the pin the next transaction runs on
// another server connection, where the object does not exist, and the
// temporary schema goes on to the next client of the first one.
// PostgreSQL's regression suite in transaction pooling found CREATE
// STATISTICS pg_temp.… (stats_ext.sql) not pinning. An unqualified CREATE
// while the session's search_path puts pg_temp first (SET, set_config,
// SET LOCAL, set_config(…, true), the startup packet) makes a temporary
// object too, and pins likewise.
func TestTxPoolTempSchemaObjectsPin(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 90*time.Second)
	const tempTable = "select x from pg_temp.txpin_t"
	cases := []struct {
		name   string
		dsn    string   // added to the DSN
		setup  []string // before create, in the same transaction when tx
		tx     bool
		create string
		check  string
	}{
		{name: "create table as", create: "create table pg_temp.txpin_t as select 7 as x", check: tempTable},
		{name: "select into", create: "select 7 as x into pg_temp.txpin_t", check: tempTable},
		{name: "create statistics", create: "create statistics pg_temp.txpin_st on a, b from txpin_base",
			check: "select count(*) * 7 from pg_statistic_ext where stxname = 'txpin_st' and stxnamespace = pg_my_temp_schema()"},
		{name: "create conversion", create: "create conversion pg_temp.txpin_cv for 'LATIN1' to 'UTF8' from iso8859_1_to_utf8",
			check: "select count(*) * 7 from pg_conversion where conname = 'txpin_cv' and connamespace = pg_my_temp_schema()"},
		// Unqualified, with pg_temp first in search_path: temporary too
		// (until 2026-12-08 these did not pin).
		{name: "set search_path", setup: []string{"set search_path = pg_temp, public"},
			create: "create table txpin_t as select 7 as x", check: "select x from txpin_t"},
		{name: "set_config search_path", setup: []string{"select set_config('search_path', 'pg_temp,public', false)"},
			create: "create table txpin_t (x int)", check: "select count(*) + 7 from txpin_t"},
		{name: "set local search_path", tx: true, setup: []string{"set local search_path = pg_temp, public"},
			create: "create table txpin_t as select 7 as x", check: tempTable},
		{name: "set_config local search_path", tx: true, setup: []string{"select set_config('search_path', 'pg_temp', true)"},
			create: "select 7 as x into txpin_t", check: tempTable},
		{name: "startup search_path", dsn: "&search_path=pg_temp%2Cpublic",
			create: "create function txpin_f() returns int language sql as 'select 7'", check: "select pg_temp.txpin_f()"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			px := txProxy(t, cl, 2)
			pinned := connect(t, ctx, px.AppDSN()+tc.dsn)
			other := connect(t, ctx, px.AppDSN())
			if _, err := other.Exec(ctx, "create table if not exists txpin_base (a int, b int)"); err != nil {
				t.Fatal(err)
			}
			stmts := append(append([]string{}, tc.setup...), tc.create)
			if tc.tx {
				stmts = append(append([]string{"begin"}, stmts...), "commit")
			}
			for _, q := range stmts {
				if _, err := pinned.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			pid := queryInt(t, ctx, pinned, "select pg_backend_pid()")
			// The other client holds a server connection in a transaction:
			// the pooled one, unless the first session kept it.
			tx, err := other.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var otherPID int64
			if err := tx.QueryRow(ctx, "select pg_backend_pid()").Scan(&otherPID); err != nil {
				t.Fatal(err)
			}
			if otherPID == pid {
				t.Fatalf("another client's transaction runs on server process %d, which holds the first session's temporary schema", pid)
			}
			if got := queryInt(t, ctx, pinned, tc.check); got != 7 {
				t.Fatalf("%s = %d through the pinned session, want 7", tc.check, got)
			}
			if got := queryInt(t, ctx, pinned, "select pg_backend_pid()"); got != pid {
				t.Fatalf("session moved from server process %d to %d", pid, got)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTxPoolResetPlaceholderStaysDefined: a customized option (a dotted
// name no module defines) that the client set and then RESET, RESET ALL or
// DISCARD ALL, is defined and empty on PostgreSQL; on another server connection
// of the pool it was undefined (SHOW failed with 42704). PostgreSQL's
// regression suite in transaction pooling found it (guc.sql).
func TestTxPoolResetPlaceholderStaysDefined(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	for _, reset := range []string{"reset kinetic_e2e.my_guc", "reset all", "discard all"} {
		t.Run(reset, func(t *testing.T) {
			// The setup needs the other client's transaction to take the
			// server connection the session just left, so the session's
			// next statement runs on the other one. The session's link goes
			// back to the pool just after its ReadyForQuery reached the
			// client (releaseIdle), so under load the other client may find
			// the other connection first (CI did): the setup is tried
			// again, on a new proxy, up to 5 times.
			var setup string
			for attempt := 1; attempt <= 5; attempt++ {
				if setup = resetPlaceholderCase(t, ctx, cl, reset); setup == "" {
					return
				}
				t.Logf("attempt %d: setup: %s", attempt, setup)
			}
			t.Fatalf("setup never held in 5 attempts: %s", setup)
		})
	}
}

// resetPlaceholderCase is one attempt of TestTxPoolResetPlaceholderStaysDefined
// for reset: "" when it ran (a failure of what it checks fails t), else why
// its setup did not hold.
func resetPlaceholderCase(t *testing.T, ctx context.Context, cl *pgtest.Cluster, reset string) (setup string) {
	t.Helper()
	px := txProxy(t, cl, 2) // (stopped when t ends)
	c := connect(t, ctx, px.AppDSN())
	defer c.Close(ctx)
	other := connect(t, ctx, px.AppDSN())
	defer other.Close(ctx)
	if _, err := c.Exec(ctx, "set kinetic_e2e.my_guc = 'foo'"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, reset); err != nil {
		t.Fatal(err)
	}
	pid := queryInt(t, ctx, c, "select pg_backend_pid()")
	// The other client takes that server connection, so the next
	// statement runs on another.
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var otherPID int64
	if err := tx.QueryRow(ctx, "select pg_backend_pid()").Scan(&otherPID); err != nil {
		t.Fatal(err)
	}
	if otherPID != pid {
		return fmt.Sprintf("the other client's transaction runs on process %d, not on the idle %d", otherPID, pid)
	}
	var shown, current string
	var now int64
	if err := c.QueryRow(ctx, "select current_setting('kinetic_e2e.my_guc'), pg_backend_pid()").Scan(&current, &now); err != nil {
		t.Fatalf("current_setting after %s on another server connection: %v", reset, err)
	}
	if now == pid {
		return fmt.Sprintf("still on process %d", pid)
	}
	if err := c.QueryRow(ctx, "show kinetic_e2e.my_guc").Scan(&shown); err != nil {
		t.Fatalf("SHOW after %s on another server connection: %v", reset, err)
	}
	if current != "" || shown != "" {
		t.Fatalf("after %s: current_setting %q, SHOW %q; PostgreSQL says empty", reset, current, shown)
	}
	return ""
}

// TestTxPoolDescribeOfExecute: psql's \gdesc of "EXECUTE test" is a Parse
// in a batch of its own, then a Describe in another: in transaction
// pooling the Describe may run on another server connection, where the
// proxy Parses the statement again, and that connection may hold another
// client's statement called test. PostgreSQL answers the client's test's
// columns; until 2026-12-07 the proxy Parsed "EXECUTE test" there without
// making test the client's, and the Describe answered NoData (the other
// client's DELETE; PostgreSQL's regression suite in transaction pooling,
// psql.sql after transactions.sql). Statements that EXECUTE each other
// (a cycle a Close and a Parse can make) neither hang nor crash the proxy.
func TestTxPoolDescribeOfExecute(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	for _, routing := range []string{"off", "prefer_replica"} {
		t.Run(routing, func(t *testing.T) {
			px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 2, AcquireTimeout: 5000, ReadRoutingMode: routing})
			other := connect(t, ctx, px.AppDSN())
			c := connect(t, ctx, px.AppDSN())
			if _, err := other.Exec(ctx, "create table if not exists txdesc_t (a int)"); err != nil {
				t.Fatal(err)
			}
			// The other client's test, on the connection it holds.
			if _, err := other.Exec(ctx, "begin"); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Exec(ctx, "prepare test as delete from txdesc_t where false"); err != nil {
				t.Fatal(err)
			}
			otherPID := queryInt(t, ctx, other, "select pg_backend_pid()")
			if _, err := c.Exec(ctx, "prepare test as select 1 as first, 2 as second"); err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c, &pgproto3.Parse{Query: "execute test"})
			if _, err := other.Exec(ctx, "commit"); err != nil {
				t.Fatal(err)
			}
			// The other client's connection is the idle one now: the
			// Describe runs there.
			got := roundTrip(t, c, &pgproto3.Describe{ObjectType: 'S'})
			var cols []string
			for _, m := range got {
				if rd, ok := m.(*pgproto3.RowDescription); ok {
					for _, f := range rd.Fields {
						cols = append(cols, string(f.Name))
					}
				}
			}
			if !slices.Equal(cols, []string{"first", "second"}) {
				var kinds []string
				for _, m := range got {
					kinds = append(kinds, fmt.Sprintf("%T", m))
				}
				t.Errorf("Describe of the statement EXECUTE test: columns %q (answer %v), want first, second", cols, kinds)
			}
			if pid := queryInt(t, ctx, c, "select pg_backend_pid()"); pid != otherPID {
				t.Logf("the session's next statement ran on process %d, not on %d (the other client's)", pid, otherPID)
			}

			// A cycle: a is EXECUTE b, and b, Parsed again, EXECUTE a.
			roundTrip(t, c, &pgproto3.Parse{Name: "b", Query: "select 1"}, &pgproto3.Parse{Name: "a", Query: "execute b"})
			roundTrip(t, c, &pgproto3.Close{ObjectType: 'S', Name: "b"}, &pgproto3.Parse{Name: "b", Query: "execute a"})
			if _, err := other.Exec(ctx, "begin"); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Exec(ctx, "select 1"); err != nil {
				t.Fatal(err)
			}
			// (PostgreSQL itself dies describing it: executeLoop.)
			if got := roundTrip(t, c, &pgproto3.Describe{ObjectType: 'S', Name: "a"}); len(got) != 1 || !isError(got[0], "54001") {
				t.Errorf("Describe of a statement whose EXECUTEs loop: %v, want one ErrorResponse 54001", got)
			}
			if _, err := other.Exec(ctx, "rollback"); err != nil {
				t.Fatal(err)
			}
			if got := queryInt(t, ctx, c, "select 7"); got != 7 {
				t.Fatalf("after the cycle: %d", got)
			}
		})
	}
}

// TestTxPoolReplayOfOneBadSettingKeepsTheOthers: a setting that
// succeeded for the client may fail when the proxy replays it on another
// server connection: a placeholder plpgsql.name set before plpgsql was
// loaded is refused where plpgsql is loaded ("plpgsql" is a reserved
// prefix). The replay was one SELECT of every set_config, so all the
// client's settings were lost with it and its statement ran with the
// server's defaults (PostgreSQL's regression suite, guc.sql, work_mem 4MB
// for 3MB). Each setting is now replayed on its own.
func TestTxPoolReplayOfOneBadSettingKeepsTheOthers(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := txProxy(t, cl, 1)
	c := connect(t, ctx, px.AppDSN())
	other := connect(t, ctx, px.AppDSN())
	for _, q := range []string{"set work_mem = '3MB'", "set plpgsql.kinetic_e2e_flag = 'on'", "set search_path = kinetic_e2e_nowhere, public"} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The other client loads plpgsql on the one server connection (and
	// has its own settings replayed there).
	if _, err := other.Exec(ctx, "do $$ begin end $$"); err != nil {
		t.Fatal(err)
	}
	var workMem, path string
	if err := c.QueryRow(ctx, "select current_setting('work_mem'), current_setting('search_path')").Scan(&workMem, &path); err != nil {
		t.Fatal(err)
	}
	if workMem != "3MB" || path != "kinetic_e2e_nowhere, public" {
		t.Fatalf("after a replay where plpgsql.kinetic_e2e_flag is refused: work_mem %q, search_path %q; want 3MB and the client's path", workMem, path)
	}
}

// TestTxPoolClientPIDIsNotAServer: with no server bound to a session, the
// BackendKeyData process ID is the proxy's own, and cancelling through it
// still reaches the query (TestCancelByContext runs in both modes).
func TestTxPoolClientPIDIsNotAServer(t *testing.T) {
	cl := pgtest.Shared(t)
	px := txProxy(t, cl, 2)
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	pid := c.PgConn().PID()
	s, err := cl.Primary.QueryString(ctx, fmt.Sprintf("select count(*) from pg_stat_activity where pid = %d", pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(s) != "0" {
		t.Fatalf("BackendKeyData pid %d is a server process", pid)
	}
}

// TestTxPoolFullPoolFailsTheUnitOnly: with the only server connection held
// by an open transaction, another client's statement fails with 53300
// after acquire_timeout_ms, and that client's session stays usable.
func TestTxPoolFullPoolFailsTheUnitOnly(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1, AcquireTimeout: 300})
	ctx := ctxT(t, 30*time.Second)
	holder := connect(t, ctx, px.AppDSN())
	waiter := connect(t, ctx, px.AppDSN())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "select 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Exec(ctx, "select 1"); pgCode(err) != "53300" {
		t.Fatalf("statement while the pool's only connection is in a transaction: %v, want 53300", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, ctx, waiter, "select 6 * 7"); got != 42 {
		t.Fatalf("after the pool freed up: %d", got)
	}
}

// TestTxPoolCopyAmongOtherClients: clients that COPY FROM STDIN share a
// pool of 1 with clients running prepared statements; every COPY's rows
// arrive and every other statement gets its answer. (The last message of
// a COPY was written without a claim on its connection, which its reader
// could hand back to the pool while the write was finishing: another
// session's messages were then garbled on that connection, the server
// answered "invalid frontend message type" and closed it. Under -race,
// as in make test, the detector also names the unsynchronised write.)
func TestTxPoolCopyAmongOtherClients(t *testing.T) {
	cl := pgtest.Shared(t)
	px := txProxy(t, cl, 1)
	ctx := ctxT(t, 120*time.Second)
	tbl := uniqueIdent("txcopy")
	admin := connect(t, ctx, px.AppDSN())
	if _, err := admin.Exec(ctx, "create table "+tbl+" (client int, n int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists "+tbl) })
	const copiers, queriers, rounds, rows = 3, 3, 100, 5
	var wg sync.WaitGroup
	errs := make(chan error, copiers+queriers)
	for i := 0; i < copiers; i++ {
		c := connect(t, ctx, px.AppDSN())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				src := make([][]any, rows)
				for k := range src {
					src[k] = []any{int32(i), int32(r*rows + k)}
				}
				n, err := c.CopyFrom(ctx, pgx.Identifier{tbl}, []string{"client", "n"}, pgx.CopyFromRows(src))
				if err != nil || n != rows {
					errs <- fmt.Errorf("copier %d round %d: %d rows, %v", i, r, n, err)
					return
				}
			}
		}()
	}
	for i := 0; i < queriers; i++ {
		c := connect(t, ctx, px.AppDSN())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds*3; r++ {
				var got int
				if err := c.QueryRow(ctx, "select $1::int + 1", r).Scan(&got); err != nil || got != r+1 {
					errs <- fmt.Errorf("querier %d round %d: got %d, %v", i, r, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var total int
	if err := admin.QueryRow(ctx, "select count(*) from "+tbl).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != copiers*rounds*rows {
		t.Errorf("%d rows copied, want %d", total, copiers*rounds*rows)
	}
}
