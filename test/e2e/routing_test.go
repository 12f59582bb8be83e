package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/proxy"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// routedProxy starts kineticd with both standbys as replicas and
// read_routing_mode prefer_replica, and waits until reads reach a replica
// (the first health verdicts take a probe interval).
func routedProxy(t *testing.T, cl *pgtest.Cluster, p kinetictest.Params) *kinetictest.Proxy {
	t.Helper()
	for _, s := range cl.Standbys {
		p.Replicas = append(p.Replicas, s.Addr())
	}
	if p.ReadRoutingMode == "" {
		p.ReadRoutingMode = "prefer_replica"
	}
	px := kinetictest.Start(t, cl, p)
	kinetictest.AwaitReadOn(t, context.Background(), px.AppDSN(), cl.StandbyPorts())
	return px
}

func portOf(t *testing.T, ctx context.Context, c *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var port int
	if err := c.QueryRow(ctx, sql, args...).Scan(&port); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return port
}

// mustExec runs sql with the simple protocol (as psql and pg_dump do).
func mustExec(t *testing.T, ctx context.Context, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func lastRoute(t *testing.T, ctx context.Context, c *pgx.Conn) string {
	t.Helper()
	var s string
	if err := c.QueryRow(ctx, "show pg_kinetic.last_route", pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReadsReachReplicasWritesStayOnPrimary: a session's autocommit reads
// stay on one replica, stale-ok ones are spread over both by weight,
// writes and write-capable transactions run on the primary, read-only
// transactions stay on one replica.
func TestReadsReachReplicasWritesStayOnPrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	// The session reads its own writes: fallback_policy "wait" lets a
	// replica catch up (woken by hurried probes) instead of the primary
	// answering until the next regular probe.
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	ctx := ctxT(t, 60*time.Second)
	c := connect(t, ctx, px.AppDSN())
	reps := cl.StandbyPorts()
	tbl := uniqueIdent("routed")
	if _, err := c.Exec(ctx, "create table "+tbl+" (id int primary key, v text); create sequence "+tbl+"_seq"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cl.Primary.Exec(context.Background(), "drop table if exists "+tbl+"; drop sequence if exists "+tbl+"_seq")
	})
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	// Reads that must see the session's writes stay on the replica they
	// first used (monotonic reads without a statement per read, SPEC §5);
	// tolerant ones (stale-ok) are spread by weight per unit.
	seen := map[int]int{}
	for i := 0; i < 40; i++ {
		seen[portOf(t, ctx, c, "select inet_server_port()")]++
	}
	if len(seen) != 1 || seen[cl.Primary.Port] != 0 {
		t.Errorf("40 read-your-writes reads of one session: %v, want all on one replica", seen)
	}
	for p := range seen {
		if !reps[p] {
			t.Errorf("reads ran on %d, not a replica", p)
		}
	}
	seen = map[int]int{}
	for i := 0; i < 40; i++ {
		seen[portOf(t, ctx, c, "/* pg-kinetic: stale-ok */ select inet_server_port()")]++
	}
	for p := range reps {
		if seen[p] == 0 {
			t.Errorf("replica %d served none of 40 stale-ok reads: %v", p, seen)
		}
	}
	if seen[cl.Primary.Port] != 0 {
		t.Errorf("autocommit reads reached the primary: %v", seen)
	}
	if got := lastRoute(t, ctx, c); !strings.HasPrefix(got, "target=replica reason=read") {
		t.Errorf("last_route after a read = %q", got)
	}

	for i := 0; i < 5; i++ {
		if p := portOf(t, ctx, c, "insert into "+tbl+" values ($1, 'x') returning inet_server_port()", i); p != cl.Primary.Port {
			t.Fatalf("INSERT ran on %d", p)
		}
	}
	if got := lastRoute(t, ctx, c); !strings.HasPrefix(got, "target=primary reason=write") {
		t.Errorf("last_route after a write = %q", got)
	}
	// Locking reads, nextval and writable CTEs are writes.
	for _, q := range []string{
		"select inet_server_port() from " + tbl + " where id = 1 for update",
		"with x as (update " + tbl + " set v = 'y' where id = 1 returning 1) select inet_server_port() from x",
		"select inet_server_port() from (select nextval('" + tbl + "_seq')) s",
	} {
		rows, err := c.Query(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			var p int
			rows.Scan(&p)
			if p != cl.Primary.Port {
				t.Errorf("%s ran on %d", q, p)
			}
		}
		rows.Close()
	}

	// A write-capable transaction: every statement on the primary.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		var p int
		if err := tx.QueryRow(ctx, "select inet_server_port()").Scan(&p); err != nil || p != cl.Primary.Port {
			t.Fatalf("read in a read-write transaction on %d (%v)", p, err)
		}
	}
	tx.Commit(ctx)

	// A read-only transaction: one replica for all of it.
	tx, err = c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	for i := 0; i < 5; i++ {
		var p int
		if err := tx.QueryRow(ctx, "select inet_server_port()").Scan(&p); err != nil {
			t.Fatal(err)
		}
		if first == 0 {
			first = p
		}
		if !reps[p] || p != first {
			t.Fatalf("read-only transaction statement %d on %d (first %d)", i, p, first)
		}
	}
	if _, err := tx.Exec(ctx, "insert into "+tbl+" values (100, 'no')"); pgCode(err) != "25006" {
		t.Fatalf("write inside a read-only transaction: %v, want the server's 25006", err)
	}
	tx.Rollback(ctx)
}

// TestSetTransactionReadOnlyPinsAReplica: a plain BEGIN followed by SET
// TRANSACTION READ ONLY runs on one replica; BEGIN followed by anything
// else runs on the primary.
func TestSetTransactionReadOnlyPinsAReplica(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	reps := cl.StandbyPorts()
	script := func(stmts ...string) []int {
		var ports []int
		for _, s := range stmts {
			rows, err := c.Query(ctx, s, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			for rows.Next() {
				var p int
				rows.Scan(&p)
				ports = append(ports, p)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		return ports
	}
	ports := script("begin", "set transaction read only", "select inet_server_port()", "select inet_server_port()", "commit")
	if len(ports) != 2 || !reps[ports[0]] || ports[0] != ports[1] {
		t.Fatalf("BEGIN; SET TRANSACTION READ ONLY: ports %v", ports)
	}
	ports = script("begin", "select inet_server_port()", "select inet_server_port()", "commit")
	if len(ports) != 2 || ports[0] != cl.Primary.Port || ports[1] != cl.Primary.Port {
		t.Fatalf("BEGIN; SELECT: ports %v", ports)
	}
	// An empty transaction never reaches a server and still behaves.
	script("begin", "commit")
	script("start transaction", "rollback")
	if c.PgConn().TxStatus() != 'I' {
		t.Fatalf("status after empty transactions %q", c.PgConn().TxStatus())
	}
}

// TestReadOnlyTransactionPlacedByItsFirstStatement: BEGIN READ ONLY (and
// START TRANSACTION READ ONLY) is placed by the transaction's first
// statement, as a plain BEGIN is: a read pins a replica; a statement that
// must run on the primary runs there, in a read-only transaction as
// directly. So the session's identity holds: pg_backend_pid() as the first
// statement of a read-only transaction names the backend the client's
// BackendKeyData names, as lib/pq's TestPing expects (it terminates that
// backend and wants the connection gone). Command tags are the server's.
func TestReadOnlyTransactionPlacedByItsFirstStatement(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{PoolMode: "session"})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.SuperUser, "", "postgres"))
	reps := cl.StandbyPorts()
	simple := pgx.QueryExecModeSimpleProtocol

	for _, begin := range []string{"begin read only", "start transaction read only", "begin transaction isolation level repeatable read, read only"} {
		t.Run(begin, func(t *testing.T) {
			// The tag is the server's: BEGIN, or START TRANSACTION.
			want, err := direct.Exec(ctx, begin, simple)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := direct.Exec(ctx, "rollback", simple); err != nil {
				t.Fatal(err)
			}
			got, err := c.Exec(ctx, begin, simple)
			if err != nil || got.String() != want.String() {
				t.Fatalf("%s through kineticd: tag %q (%v), directly %q", begin, got, err, want)
			}
			var pid uint32
			var port int
			if err := c.QueryRow(ctx, "select pg_backend_pid(), inet_server_port()", simple).Scan(&pid, &port); err != nil {
				t.Fatal(err)
			}
			if port != cl.Primary.Port || pid != c.PgConn().PID() {
				t.Fatalf("pg_backend_pid() first in a read-only transaction: %d on %d; want %d on the primary (%d)",
					pid, port, c.PgConn().PID(), cl.Primary.Port)
			}
			// Still read only there, as directly.
			if _, err := c.Exec(ctx, "create table kinetic_ro_first (x int)", simple); pgCode(err) != "25006" {
				t.Fatalf("a write in the read-only transaction on the primary: %v, want 25006", err)
			}
			if _, err := c.Exec(ctx, "rollback", simple); err != nil {
				t.Fatal(err)
			}

			// A read first: one replica for the whole transaction.
			if _, err := c.Exec(ctx, begin, simple); err != nil {
				t.Fatal(err)
			}
			first := portOf(t, ctx, c, "select inet_server_port()")
			for i := 0; i < 3; i++ {
				if p := portOf(t, ctx, c, "select inet_server_port()"); !reps[first] || p != first {
					t.Fatalf("read %d of a read-only transaction on %d, its first on %d (replicas %v)", i, p, first, reps)
				}
			}
			tag, err := c.Exec(ctx, "commit", simple)
			if err != nil || tag.String() != "COMMIT" {
				t.Fatalf("commit: %q %v", tag, err)
			}
		})
	}

	// SERIALIZABLE set first: a hot standby runs no serializable
	// transaction (0A000), the primary does, read only too (pg_dump
	// --serializable-deferrable's BEGIN, then SET TRANSACTION).
	for _, script := range [][]string{
		{"begin read only", "set transaction isolation level serializable"},
		{"begin", "set transaction isolation level serializable, read only, deferrable"},
		{"start transaction read only", "set transaction_isolation = 'serializable'"},
	} {
		for _, q := range script {
			if _, err := c.Exec(ctx, q, simple); err != nil {
				t.Fatalf("%v: %s: %v", script, q, err)
			}
		}
		var iso string
		var port int
		if err := c.QueryRow(ctx, "select current_setting('transaction_isolation'), inet_server_port()", simple).Scan(&iso, &port); err != nil {
			t.Fatalf("%v: %v", script, err)
		}
		if iso != "serializable" || port != cl.Primary.Port {
			t.Fatalf("%v: isolation %s on %d, want serializable on the primary (%d)", script, iso, port, cl.Primary.Port)
		}
		if _, err := c.Exec(ctx, "commit", simple); err != nil {
			t.Fatal(err)
		}
	}

	// SET TRANSACTION … READ ONLY right after a plain BEGIN (pg_dump's
	// opening) waits with it: the next statement places the block, on
	// the primary when it must run there, on a replica when it is a read.
	// READ WRITE set after BEGIN READ ONLY makes a transaction only the
	// primary runs (a standby: 0A000).
	for _, tc := range []struct {
		script    []string
		query     string
		onPrimary bool
		readOnly  string
	}{
		{[]string{"begin", "set transaction isolation level repeatable read, read only"}, "select true", false, "on"},
		{[]string{"begin", "set transaction read only", "set transaction isolation level repeatable read"}, "select true", false, "on"},
		{[]string{"begin read only", "set transaction read write"}, "select true", true, "off"},
		{[]string{"begin read only", "set transaction_read_only = off"}, "select true", true, "off"},
		// (READ WRITE anywhere: a standby fails at it even when READ ONLY
		// follows; differential 17381810680918992214)
		{[]string{"begin", "set transaction read write, read only"}, "select true", true, "on"},
		{[]string{"begin read write, read only"}, "select true", true, "on"},
		{[]string{"begin isolation level serializable", "set transaction read only"}, "select true", true, "on"},
		// (last: its commit is a write the standbys may not have replayed yet)
		{[]string{"begin", "set transaction isolation level repeatable read, read only"}, "select txid_current() > 0", true, "on"},
	} {
		for _, q := range tc.script {
			tag, err := c.Exec(ctx, q, simple)
			if err != nil || !strings.HasPrefix(strings.ToUpper(q), tag.String()) {
				t.Fatalf("%v: %s: %q %v", tc.script, q, tag, err)
			}
		}
		var ok bool
		var port int
		var iso string
		if err := c.QueryRow(ctx, tc.query+", inet_server_port(), current_setting('transaction_isolation')", simple).Scan(&ok, &port, &iso); err != nil {
			t.Fatalf("%v then %s: %v", tc.script, tc.query, err)
		}
		// (A query of transaction_read_only itself goes to the primary
		// outside a transaction: a standby answers on whatever was set.)
		ro := queryString(t, ctx, c, "select current_setting('transaction_read_only')")
		if tc.onPrimary != (port == cl.Primary.Port) || !tc.onPrimary && !reps[port] || ro != tc.readOnly {
			t.Fatalf("%v then %s: on %d with transaction_read_only %s; want on the primary (%d): %v, read only %s (last route: %s)",
				tc.script, tc.query, port, ro, cl.Primary.Port, tc.onPrimary, tc.readOnly, lastRoute(t, ctx, c))
		}
		if strings.Contains(strings.Join(tc.script, ";"), "repeatable read") && iso != "repeatable read" {
			t.Fatalf("%v: isolation %s", tc.script, iso)
		}
		if _, err := c.Exec(ctx, "commit", simple); err != nil {
			t.Fatal(err)
		}
	}

	// txid_current() first: a transaction id is the primary's to give
	// (on a standby: "cannot assign TransactionIds during recovery").
	if _, err := c.Exec(ctx, "begin read only", simple); err != nil {
		t.Fatal(err)
	}
	var xid int64
	if err := c.QueryRow(ctx, "select txid_current()", simple).Scan(&xid); err != nil || xid == 0 {
		t.Fatalf("txid_current() first in a read-only transaction: %d %v", xid, err)
	}
	if _, err := c.Exec(ctx, "commit", simple); err != nil {
		t.Fatal(err)
	}
	// An empty read-only transaction reaches no server and still ends.
	for _, end := range []string{"commit", "rollback"} {
		if _, err := c.Exec(ctx, "begin read only", simple); err != nil {
			t.Fatal(err)
		}
		if tag, err := c.Exec(ctx, end, simple); err != nil || tag.String() != strings.ToUpper(end) {
			t.Fatalf("%s of an empty read-only transaction: %q %v", end, tag, err)
		}
	}
	if c.PgConn().TxStatus() != 'I' {
		t.Fatalf("status at the end %q", c.PgConn().TxStatus())
	}
}

// TestSnapshotImportedWhereExported: a snapshot exported with
// pg_export_snapshot() is importable only on its server; a transaction
// importing it with SET TRANSACTION SNAPSHOT sees what the exporting one
// sees, as directly, however both opened (pg_dump -j's workers: BEGIN;
// SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET
// TRANSACTION SNAPSHOT). Before, either could be placed on a standby, and
// the import failed there with 22023 "invalid snapshot identifier".
func TestSnapshotImportedWhereExported(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB))
	simple := pgx.QueryExecModeSimpleProtocol
	mustExec(t, ctx, direct, "drop table if exists kinetic_snap; create table kinetic_snap (x int); insert into kinetic_snap values (1); grant select on kinetic_snap to app")
	t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "drop table if exists kinetic_snap") })
	opens := [][]string{
		{"begin", "set transaction isolation level repeatable read, read only"},
		{"begin isolation level repeatable read read only"},
		{"start transaction isolation level repeatable read, read only"},
	}
	for _, exporter := range opens {
		e := connect(t, ctx, px.AppDSN())
		for _, q := range exporter {
			mustExec(t, ctx, e, q)
		}
		var id string
		if err := e.QueryRow(ctx, "select pg_export_snapshot()", simple).Scan(&id); err != nil {
			t.Fatalf("%v; pg_export_snapshot(): %v", exporter, err)
		}
		// A row committed after the export: no importer sees it.
		mustExec(t, ctx, direct, "insert into kinetic_snap values (2)")
		for _, importer := range opens {
			for i := 0; i < 2; i++ { // (two standbys: either may be picked)
				c := connect(t, ctx, px.AppDSN())
				for _, q := range importer {
					mustExec(t, ctx, c, q)
				}
				if _, err := c.Exec(ctx, "set transaction snapshot '"+id+"'", simple); err != nil {
					t.Fatalf("exported after %v, imported after %v: %v", exporter, importer, err)
				}
				var n int
				if err := c.QueryRow(ctx, "select count(*) from kinetic_snap", simple).Scan(&n); err != nil {
					t.Fatal(err)
				}
				var want int
				if err := e.QueryRow(ctx, "select count(*) from kinetic_snap", simple).Scan(&want); err != nil {
					t.Fatal(err)
				}
				if n != want {
					t.Fatalf("exported after %v, imported after %v: the importer counts %d rows, the exporter %d", exporter, importer, n, want)
				}
				mustExec(t, ctx, c, "commit")
				c.Close(ctx)
			}
		}
		mustExec(t, ctx, e, "commit")
		e.Close(ctx)
	}
}

// TestFailedDeferredBlockFailsOnTheServer: a transaction block the proxy
// has not sent to a server yet (a BEGIN answered locally) that a statement
// the proxy answers itself fails (an invalid pg_kinetic.min_lsn) is failed:
// what follows fails with 25P02 as in PostgreSQL, also statements the
// proxy sends to a server (the extended protocol, several statements in
// one Query), and its COMMIT rolls back. (The differential test found the
// extended-protocol case after BEGIN READ ONLY; the statements ran.)
func TestFailedDeferredBlockFailsOnTheServer(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	simple := pgx.QueryExecModeSimpleProtocol
	for _, begin := range []string{"begin", "begin read only"} {
		t.Run(begin, func(t *testing.T) {
			if _, err := c.Exec(ctx, begin, simple); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, "set pg_kinetic.min_lsn = 'not a position'", simple); pgCode(err) != "22023" {
				t.Fatalf("an invalid min_lsn: %v, want 22023", err)
			}
			var one int
			if err := c.QueryRow(ctx, "select 1", pgx.QueryExecModeDescribeExec).Scan(&one); pgCode(err) != "25P02" {
				t.Fatalf("extended protocol in the failed block: %d, %v; want 25P02", one, err)
			}
			if _, err := c.Exec(ctx, "select 1; select 2", simple); pgCode(err) != "25P02" {
				t.Fatalf("two statements in one Query in the failed block: %v; want 25P02", err)
			}
			tag, err := c.Exec(ctx, "commit", simple)
			if err != nil || tag.String() != "ROLLBACK" {
				t.Fatalf("commit of the failed block: %q %v, want ROLLBACK", tag, err)
			}
			if c.PgConn().TxStatus() != 'I' {
				t.Fatalf("status after it %q", c.PgConn().TxStatus())
			}
		})
	}
}

// TestSessionStateFollowsTheSession: SET outside a transaction applies on
// every server the session uses; temp tables pin the session to the
// primary until DISCARD ALL.
func TestSessionStateFollowsTheSession(t *testing.T) {
	cl := pgtest.Shared(t)
	// The session reads its own writes: fallback_policy "wait" lets a
	// replica catch up (woken by hurried probes) instead of the primary
	// answering until the next regular probe.
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	ctx := ctxT(t, 30*time.Second)
	cfg, _ := pgx.ParseConfig(px.AppDSN())
	cfg.RuntimeParams["application_name"] = "follow-me"
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	reps := cl.StandbyPorts()
	if _, err := c.Exec(ctx, "set work_mem = '7MB'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		var wm, app string
		var p int
		if err := c.QueryRow(ctx, "select current_setting('work_mem'), current_setting('application_name'), inet_server_port()").Scan(&wm, &app, &p); err != nil {
			t.Fatal(err)
		}
		if wm != "7MB" || app != "follow-me" {
			t.Fatalf("on %d: work_mem=%s application_name=%s", p, wm, app)
		}
	}
	if _, err := c.Exec(ctx, "reset work_mem"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		var wm string
		if err := c.QueryRow(ctx, "select current_setting('work_mem')").Scan(&wm); err != nil || wm == "7MB" {
			t.Fatalf("after RESET: work_mem=%s %v", wm, err)
		}
	}

	if _, err := c.Exec(ctx, "create temp table pinme (x int)"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if p := portOf(t, ctx, c, "select inet_server_port()"); p != cl.Primary.Port {
			t.Fatalf("read of a pinned session on %d", p)
		}
	}
	if got := lastRoute(t, ctx, c); !strings.Contains(got, "reason=session_pinned") {
		t.Errorf("last_route of a pinned session = %q", got)
	}
	if _, err := c.Exec(ctx, "discard all"); err != nil {
		t.Fatal(err)
	}
	c.DeallocateAll(ctx) // pgx's cache is gone on the server too
	awaitCond(t, 5*time.Second, "reads to leave the primary after DISCARD ALL", func() (bool, error) {
		var p int
		err := c.QueryRow(ctx, "select inet_server_port()", pgx.QueryExecModeSimpleProtocol).Scan(&p)
		return reps[p], err
	})
}

// TestUnqualifiedTempObjectPinsRouted: with pg_temp first in search_path,
// CREATE TABLE without TEMP or a schema makes a temporary table, which
// exists only on the primary connection: the session is pinned there as
// after CREATE TEMP TABLE. Until 2026-12-08 the next read went to a
// replica and failed with 42P01.
func TestUnqualifiedTempObjectPinsRouted(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	for _, q := range []string{"set search_path = pg_temp, public", "create table path_tmp as select 7 as x"} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for i := 0; i < 5; i++ {
		var x, p int
		if err := c.QueryRow(ctx, "select x, inet_server_port() from path_tmp").Scan(&x, &p); err != nil {
			t.Fatalf("read %d of the temporary table: %v", i, err)
		}
		if x != 7 || p != cl.Primary.Port {
			t.Fatalf("read %d: x=%d on port %d, want 7 on the primary (%d)", i, x, p, cl.Primary.Port)
		}
	}
	if got := lastRoute(t, ctx, c); !strings.Contains(got, "reason=session_pinned") {
		t.Errorf("last_route of a pinned session = %q", got)
	}
}

// TestPreparedStatementsAcrossServers: protocol-level named statements and
// SQL PREPARE work whichever server a unit lands on.
func TestPreparedStatementsAcrossServers(t *testing.T) {
	cl := pgtest.Shared(t)
	// The session reads its own writes: fallback_policy "wait" lets a
	// replica catch up (woken by hurried probes) instead of the primary
	// answering until the next regular probe.
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	reps := cl.StandbyPorts()
	tbl := uniqueIdent("prep")
	if _, err := c.Exec(ctx, "create table "+tbl+" (id int primary key)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists "+tbl) })
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prepare(ctx, "both", "select inet_server_port() where $1::int > 0"); err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for i := 1; i <= 30; i++ {
		seen[portOf(t, ctx, c, "both", i)]++
		// The same statement text as a write on the primary in between.
		if p := portOf(t, ctx, c, "insert into "+tbl+" values ($1) returning inet_server_port()", i); p != cl.Primary.Port {
			t.Fatalf("insert on %d", p)
		}
	}
	n := 0
	for p := range reps {
		n += seen[p]
	}
	if n == 0 {
		t.Fatalf("the prepared read never ran on a replica: %v", seen)
	}
	// Close and prepare again under the same name with other text.
	if err := c.Deallocate(ctx, "both"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prepare(ctx, "both", "select inet_server_port() + 0 * $1::int"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		portOf(t, ctx, c, "both", i)
	}

	// SQL-level PREPARE / EXECUTE / DEALLOCATE.
	if _, err := c.Exec(ctx, "prepare sqlp as select inet_server_port()", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	seen = map[int]int{}
	for i := 0; i < 20; i++ {
		seen[portOf(t, ctx, c, "execute sqlp", pgx.QueryExecModeSimpleProtocol)]++
	}
	n = 0
	for p := range reps {
		n += seen[p]
	}
	if n == 0 {
		t.Fatalf("EXECUTE of a prepared read never ran on a replica: %v", seen)
	}
	if _, err := c.Exec(ctx, "deallocate sqlp", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "prepare sqlp as select 1 + inet_server_port()", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("PREPARE again after DEALLOCATE: %v", err)
	}
	for i := 0; i < 10; i++ {
		if p := portOf(t, ctx, c, "execute sqlp", pgx.QueryExecModeSimpleProtocol); p < 1 {
			t.Fatal(p)
		}
	}
	if _, err := c.Exec(ctx, "execute no_such_statement", pgx.QueryExecModeSimpleProtocol); pgCode(err) != "26000" {
		t.Fatalf("EXECUTE of an unknown statement: %v, want 26000", err)
	}
}

// TestVolatileFunctionsGoToPrimary: a user function that is VOLATILE in
// the primary's catalog makes a SELECT a write; a STABLE one does not.
func TestVolatileFunctionsGoToPrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	// The session reads its own writes: fallback_policy "wait" lets a
	// replica catch up (woken by hurried probes) instead of the primary
	// answering until the next regular probe.
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	reps := cl.StandbyPorts()
	vol, stab := uniqueIdent("vol_fn"), uniqueIdent("stable_fn")
	for _, q := range []string{
		"create function " + vol + "() returns int language sql volatile as 'select inet_server_port()'",
		"create function " + stab + "() returns int language sql stable as 'select inet_server_port()'",
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		cl.Primary.Exec(context.Background(), "drop function if exists "+vol+"(); drop function if exists "+stab+"()")
	})
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if p := portOf(t, ctx, c, "select "+vol+"()"); p != cl.Primary.Port {
			t.Fatalf("volatile function ran on %d", p)
		}
		if p := portOf(t, ctx, c, "select "+stab+"()"); !reps[p] {
			t.Fatalf("stable function ran on %d, want a replica", p)
		}
	}
	// SQL PREPARE / EXECUTE: EXECUTE names no function, the prepared
	// statement and its parameters do.
	for _, q := range []string{
		"prepare vol_p as select " + vol + "()",
		"prepare stab_p as select " + stab + "()",
		"prepare arg_p(int) as select $1",
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if p := portOf(t, ctx, c, "execute vol_p"); p != cl.Primary.Port {
			t.Fatalf("EXECUTE of a prepared volatile call ran on %d", p)
		}
		if p := portOf(t, ctx, c, "execute stab_p"); !reps[p] {
			t.Fatalf("EXECUTE of a prepared stable call ran on %d, want a replica", p)
		}
		if p := portOf(t, ctx, c, "execute arg_p("+vol+"())"); p != cl.Primary.Port {
			t.Fatalf("EXECUTE with a volatile call in its parameters ran on %d", p)
		}
	}
}

// TestReplicaDownFallsBackOrRejects: with a replica stopped, reads go to
// the other one; with none left, prefer_replica falls back to the primary
// and require_replica rejects with KN001.
func TestReplicaDownFallsBackOrRejects(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	prefer := routedProxy(t, cl, kinetictest.Params{})
	require := routedProxy(t, cl, kinetictest.Params{ReadRoutingMode: "require_replica"})
	pc := connect(t, ctx, prefer.AppDSN())
	rc := connect(t, ctx, require.AppDSN())
	replica := cl.Standbys[0]
	if p := portOf(t, ctx, rc, "select inet_server_port()"); p != replica.Port {
		t.Fatalf("require_replica read on %d", p)
	}
	if err := replica.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Start(context.Background()) })
	// Until a probe notices, a read may try the stopped replica: it is
	// retried elsewhere, never an error, under prefer_replica.
	for i := 0; i < 20; i++ {
		if p := portOf(t, ctx, pc, "select inet_server_port()"); p != cl.Primary.Port {
			t.Fatalf("read with the only replica down ran on %d", p)
		}
	}
	if got := lastRoute(t, ctx, pc); !strings.Contains(got, "target=primary") || !strings.Contains(got, "reason=replica_unavailable") {
		t.Errorf("last_route = %q", got)
	}
	_, err := rc.Exec(ctx, "select 1")
	if pgCode(err) != "KN001" {
		t.Fatalf("require_replica with no replica: %v, want KN001", err)
	}
	if !strings.Contains(err.Error(), "no server can serve this read within its consistency contract") {
		t.Errorf("KN001 message: %v", err)
	}
	// Writes still work under require_replica.
	if p := portOf(t, ctx, rc, "select inet_server_port() from (select txid_current()) x"); p != cl.Primary.Port {
		t.Fatalf("write under require_replica ran on %d", p)
	}
	if err := replica.Start(ctx); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 30*time.Second, "reads to return to the restarted replica", func() (bool, error) {
		var p int
		err := pc.QueryRow(ctx, "select inet_server_port()").Scan(&p)
		return p == replica.Port, err
	})
}

// TestReadRetriedWhenReplicaDiesBeforeAnswering: a replica killed while it
// runs a read, before any byte of the answer reached the client, costs
// the client nothing: the read runs once more elsewhere.
func TestReadRetriedWhenReplicaDiesBeforeAnswering(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	c := connect(t, ctx, px.AppDSN())
	replica := cl.Standbys[0]
	done := make(chan error, 1)
	var port int
	go func() {
		done <- c.QueryRow(ctx, "select inet_server_port() from pg_sleep(2) /* retry-me */").Scan(&port)
	}()
	killWhenRunning(t, ctx, replica, "retry-me")
	retriedOnPrimary(t, ctx, cl, c, done, &port)
}

// killWhenRunning kills replica once a statement whose text has tag runs
// there, and starts it again when the test ends.
func killWhenRunning(t *testing.T, ctx context.Context, replica *pgtest.Server, tag string) {
	t.Helper()
	awaitCond(t, 20*time.Second, "the read to run on the replica", func() (bool, error) {
		n, err := replica.QueryString(ctx, "select count(*) from pg_stat_activity where query like '%"+tag+"%' and state = 'active' and pid <> pg_backend_pid()")
		return n == "1", err
	})
	if err := replica.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Start(context.Background()) })
}

// retriedOnPrimary checks that a read whose replica was killed under it
// (done: its outcome, port: inet_server_port() it returned) ran on the
// primary, the only server left, and that the session goes on.
func retriedOnPrimary(t *testing.T, ctx context.Context, cl *pgtest.Cluster, c *pgx.Conn, done <-chan error, port *int) {
	t.Helper()
	if err := <-done; err != nil {
		t.Fatalf("the read failed instead of being retried: %v", err)
	}
	if *port != cl.Primary.Port {
		t.Fatalf("retried read ran on %d, want the primary (the only server left)", *port)
	}
	if p := portOf(t, ctx, c, "select inet_server_port()"); p != cl.Primary.Port {
		t.Fatalf("next read on %d", p)
	}
}

// TestHeldReadReplicaDiesBeforeItsWait: a read the session goroutine did
// not wait for (proxy/retry.go: held) whose replica dies after it was held
// and before the goroutine began to wait for the client (that window
// widened to 3 s) still runs once more elsewhere: nothing would interrupt
// a wait begun after the failure, so it must not begin.
func TestHeldReadReplicaDiesBeforeItsWait(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	c := connect(t, ctx, px.AppDSN())
	replica := cl.Standbys[0]
	if p := portOf(t, ctx, c, "select inet_server_port()"); p != replica.Port {
		t.Fatalf("a read ran on %d, want the replica %d", p, replica.Port)
	}
	old := proxy.SetRaceWindows(proxy.RaceWindows{BeforeHeldWait: 3 * time.Second})
	t.Cleanup(func() { proxy.SetRaceWindows(old) })
	done := make(chan error, 1)
	var port int
	go func() {
		// One unit (simple protocol), so that the read held is the one
		// running (pgx would otherwise prepare it in a unit of its own).
		done <- c.QueryRow(ctx, "select inet_server_port() from pg_sleep(2) /* held-then-lost */", pgx.QueryExecModeSimpleProtocol).Scan(&port)
	}()
	killWhenRunning(t, ctx, replica, "held-then-lost")
	retriedOnPrimary(t, ctx, cl, c, done, &port)
}

// TestPgbenchReadOnlyOnReplicas: pgbench's select-only script in all three
// protocols (prepared: named statements re-prepared on whichever server a
// Bind lands) runs with 0 failures and the replicas serving the reads.
func TestPgbenchReadOnlyOnReplicas(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 5*time.Minute)
	db := uniqueIdent("benchro")
	if err := cl.Primary.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+pgtest.AppUser); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl.Primary.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	})
	reps := ""
	for _, s := range cl.Standbys {
		reps += "[[routes.replicas]]\naddress = \"" + s.Addr() + "\"\n"
	}
	extra := "\n[[routes]]\nname = \"benchro\"\ndatabase = \"" + db + "\"\n[routes.primary]\naddress = \"" + cl.Primary.Addr() + "\"\n" + reps +
		"[routes.read_routing]\nread_routing_mode = \"prefer_replica\"\n[routes.ha]\nreplica_health_interval_ms = 200\nreplica_health_timeout_ms = 200\n[routes.pool]\nsize = 8\n"
	px := kinetictest.Start(t, cl, kinetictest.Params{Extra: extra})
	env := clientEnv()
	args := func(extra ...string) []string {
		return append(append(extra, "-h", "127.0.0.1", "-p", fmt.Sprint(px.Port()), "-U", pgtest.AppUser), db)
	}
	if r := runClient(t, ctx, env, nil, "pgbench", args("-i", "-s", "1")...); r.code != 0 {
		t.Fatalf("pgbench -i:\n%s", r)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, ctx, px.DSN(pgtest.AppUser, pgtest.AppPassword, db))
	awaitCond(t, 20*time.Second, "a read of the bench route to reach a replica", func() (bool, error) {
		var p int
		err := conn.QueryRow(ctx, "select inet_server_port()").Scan(&p)
		return err == nil && p != cl.Primary.Port, err
	})
	commits := func(s *pgtest.Server) int64 {
		v, err := s.QueryString(ctx, "select xact_commit from pg_stat_database where datname = '"+db+"'")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		fmt.Sscan(v, &n)
		return n
	}
	for _, mode := range []string{"simple", "extended", "prepared"} {
		before := map[string]int64{}
		for _, s := range append([]*pgtest.Server{cl.Primary}, cl.Standbys...) {
			before[s.Name] = commits(s)
		}
		r := runClient(t, ctx, env, nil, "pgbench", args("-S", "-M", mode, "-c", "4", "-j", "2", "-t", "250")...)
		res, err := parsePgbench(r.stdout)
		if r.code != 0 || err != nil || res.failed != 0 || res.processed != 1000 {
			t.Fatalf("pgbench -S -M %s: %+v %v\n%s", mode, res, err, r)
		}
		// Statistics reach pg_stat_database within a second or so.
		var onReplicas int64
		awaitCond(t, 10*time.Second, "replica statistics to show the run", func() (bool, error) {
			onReplicas = 0
			for _, s := range cl.Standbys {
				onReplicas += commits(s) - before[s.Name]
			}
			return onReplicas >= 900, nil
		})
		t.Logf("pgbench -S -M %s: %d transactions, 0 failed, %.0f tps; replica commits +%d, primary +%d",
			mode, res.processed, res.tps, onReplicas, commits(cl.Primary)-before[cl.Primary.Name])
	}
}

// TestFlushedPipelineWriteIsReadBack: a write sent in a pipeline that is
// flushed before its Sync (the unit is routed at the Flush) still updates
// the session's token, so the read that follows never hits a replica that
// has not replayed it.
func TestFlushedPipelineWriteIsReadBack(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	c := connect(t, ctx, px.AppDSN())
	tbl := tableOnPausedReplicas(t, ctx, cl, px, "flushed")
	p := c.PgConn().StartPipeline(ctx)
	p.SendQueryParams("insert into "+tbl+" values (1)", nil, nil, nil, nil)
	p.SendFlushRequest() // a protocol Flush: the proxy routes the unit before its Sync
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	res, err := p.GetResults()
	if err != nil {
		t.Fatal(err)
	}
	if rr, ok := res.(*pgconn.ResultReader); !ok {
		t.Fatalf("first pipeline result %T", res)
	} else if _, err := rr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	for {
		res, err := p.GetResults()
		if err != nil {
			t.Fatal(err)
		}
		if rr, ok := res.(*pgconn.ResultReader); ok {
			if _, err := rr.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := res.(*pgconn.PipelineSync); ok {
			break
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var n, port int
	if err := c.QueryRow(ctx, "select count(*), inet_server_port() from "+tbl).Scan(&n, &port); err != nil {
		t.Fatal(err)
	}
	if n != 1 || port != cl.Primary.Port {
		t.Fatalf("read after a flushed pipeline write: %d rows on %d, want 1 row on the primary (replicas paused)", n, port)
	}
}

// TestCopyFromStdinWithRouting: COPY FROM STDIN through a routing proxy
// works (nothing but copy messages reaches the server during the copy) and
// the copied rows are read back from a server that has them.
func TestCopyFromStdinWithRouting(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	c := connect(t, ctx, px.AppDSN())
	tbl := tableOnPausedReplicas(t, ctx, cl, px, "copied")
	n, err := c.CopyFrom(ctx, pgx.Identifier{tbl}, []string{"id"},
		pgx.CopyFromSlice(500, func(i int) ([]any, error) { return []any{i}, nil }))
	if err != nil || n != 500 {
		t.Fatalf("COPY FROM STDIN through the proxy: %d, %v", n, err)
	}
	var got, port int
	if err := c.QueryRow(ctx, "select count(*), inet_server_port() from "+tbl).Scan(&got, &port); err != nil {
		t.Fatal(err)
	}
	if got != 500 || port != cl.Primary.Port {
		t.Fatalf("read after COPY: %d rows on %d, want 500 on the primary (replicas paused)", got, port)
	}
}

// tableOnPausedReplicas creates a table through the proxy (another session),
// waits until every standby has it, then pauses replay on all of them (and
// resumes and waits at cleanup): what is written next exists only on the
// primary.
func tableOnPausedReplicas(t *testing.T, ctx context.Context, cl *pgtest.Cluster, px *kinetictest.Proxy, prefix string) string {
	t.Helper()
	tbl := uniqueIdent(prefix)
	setup := connect(t, ctx, px.AppDSN())
	if _, err := setup.Exec(ctx, "create table "+tbl+" (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setup.Exec(context.Background(), "drop table if exists "+tbl) })
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range cl.Standbys {
		if err := s.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range cl.Standbys {
			s.ResumeReplay(context.Background())
		}
		cl.WaitReplicated(context.Background())
	})
	return tbl
}

// TestChainAfterFailedReadOnlyTx: PostgreSQL ends a failed transaction
// with COMMIT (or ROLLBACK) AND CHAIN by rolling it back and starting the
// next one with the session's defaults, read-write, not with the failed
// one's READ ONLY. A READ ONLY transaction runs on a replica; before the
// fix its chained successor stayed there and its first write failed with
// 25006 (differential 4050215125046564123). Now the write runs on the
// primary, in the chained transaction, and is rolled back with it. The
// chain statement is sent in the simple protocol and in the extended one
// (an unnamed statement, pgx's exec mode, and a named one, its statement
// cache), which the proxy forwards to the replica and whose chained
// transaction it ends there before the next unit.
func TestChainAfterFailedReadOnlyTx(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	// fallback_policy wait: each case's chained transaction writes on the
	// primary (txid_current), so the next case's READ ONLY transaction
	// needs a standby that replayed it, and waits for one instead of
	// falling back to the primary on a loaded host (CI, 2026-12-05).
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	c := connect(t, ctx, px.AppDSN())
	standbys := cl.StandbyPorts()
	for _, tc := range []struct{ end, mode string }{
		{"commit and chain", "simple"},
		{"rollback and chain", "simple"},
		{"commit and chain", "unnamed"},
		{"rollback and chain", "unnamed"},
		{"abort and chain", "named"},
	} {
		end := tc.end
		if _, err := c.Exec(ctx, "begin isolation level repeatable read read only", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		if p := portOf(t, ctx, c, "select inet_server_port()"); !standbys[p] {
			t.Fatalf("before %s (%v): the READ ONLY transaction ran on %d, want a standby", end, tc.mode, p)
		}
		if _, err := c.Exec(ctx, "select 1/0", pgx.QueryExecModeSimpleProtocol); err == nil {
			t.Fatal("select 1/0 succeeded")
		}
		var tag pgconn.CommandTag
		var err error
		switch tc.mode {
		case "simple":
			tag, err = c.Exec(ctx, end, pgx.QueryExecModeSimpleProtocol)
		case "unnamed": // Parse, Bind, Describe, Execute, Sync
			r := c.PgConn().ExecParams(ctx, end, nil, nil, nil, nil).Read()
			tag, err = r.CommandTag, r.Err
		case "named": // Parse, Describe, Sync; Bind, Describe, Execute, Sync
			if _, err = c.PgConn().Prepare(ctx, "chain_end", end, nil); err == nil {
				r := c.PgConn().ExecPrepared(ctx, "chain_end", nil, nil, nil).Read()
				tag, err = r.CommandTag, r.Err
			}
		}
		if err != nil || tag.String() != "ROLLBACK" {
			t.Fatalf("%s (%v): %q, %v; want ROLLBACK", end, tc.mode, tag, err)
		}
		if st := c.PgConn().TxStatus(); st != 'T' {
			t.Fatalf("after %s (%v): transaction status %c, want T", end, tc.mode, st)
		}
		var ro, iso string
		var port int
		if err := c.QueryRow(ctx, "select current_setting('transaction_read_only'), current_setting('transaction_isolation'), inet_server_port() from (select txid_current()) x",
			pgx.QueryExecModeSimpleProtocol).Scan(&ro, &iso, &port); err != nil {
			t.Fatalf("a write in the chained transaction after %s (%v): %v", end, tc.mode, err)
		}
		if ro != "off" || iso != "read committed" || port != cl.Primary.Port {
			t.Fatalf("the chained transaction after %s (%v): read only %s, %s, on %d; want off, read committed, on the primary %d", end, tc.mode, ro, iso, port, cl.Primary.Port)
		}
		if _, err := c.Exec(ctx, "rollback", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSavepointsUndoSessionSettings: a SET inside a savepoint that a
// ROLLBACK TO SAVEPOINT undid is undone on every server the session reads
// from, as on the server that ran it; a RELEASE keeps it. Each script runs
// directly on the primary too, and the session's next reads, on a
// replica, must see what the primary's session sees. Before savepoints
// were followed the proxy kept the rolled-back SETs and replayed them on
// the replicas (work_mem 7MB where PostgreSQL has 9MB). A savepoint
// command whose failed unit hides whether it ran pins the session to its
// server instead of guessing.
//
// The read after a script must run on a replica for the test to mean
// anything, and the script's COMMIT gives the session a token: under load
// (CI, 2026-12-05) a replica had not replayed it yet and the read went to
// the primary (fallback_policy primary). So the read waits for the
// replica instead (fallback_policy wait, up to 5 s).
func TestSavepointsUndoSessionSettings(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait",
		Extra: "[routes.freshness]\nread_after_write_timeout_ms = 5000\n"})
	ctx := ctxT(t, 60*time.Second)
	reps := cl.StandbyPorts()
	scripts := []struct {
		name string
		sql  []string
	}{
		{"rolled back", []string{"begin", "savepoint a", "set work_mem = '7MB'", "rollback to a", "commit"}},
		{"rolled back above a SET kept", []string{"begin", "set work_mem = '9MB'", "savepoint a", "set work_mem = '7MB'", "rollback to savepoint a", "commit"}},
		{"released", []string{"begin", "savepoint a", "set work_mem = '5MB'", "release a", "commit"}},
		{"released then rolled back below", []string{"begin", "savepoint a", "savepoint b", "set work_mem = '6MB'", "release b", "rollback to a", "commit"}},
		{"after an error", []string{"begin", "set work_mem = '3MB'", "savepoint a", "set work_mem = '11MB'", "select 1/0", "rollback to a", "commit"}},
		{"savepoint names reused", []string{"begin", "savepoint a", "set work_mem = '12MB'", "savepoint a", "set work_mem = '13MB'", "rollback to a", "commit"}},
	}
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			var want [2]string
			for i, dsn := range []string{cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB), px.AppDSN()} {
				c := connect(t, ctx, dsn)
				for _, q := range sc.sql {
					c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol) // (select 1/0 fails, as it should)
				}
				var wm string
				var inRecovery bool
				if err := c.QueryRow(ctx, "select current_setting('work_mem'), pg_is_in_recovery()").Scan(&wm, &inRecovery); err != nil {
					t.Fatal(err)
				}
				want[i] = wm
				if i == 1 {
					if !inRecovery {
						t.Errorf("the read after the script ran on the primary (%s)", lastRoute(t, ctx, c))
					}
					if p := portOf(t, ctx, c, "select inet_server_port()"); !reps[p] {
						t.Errorf("the read after the script ran on %d, not a replica", p)
					}
				}
				c.Close(ctx)
			}
			if want[0] != want[1] {
				t.Fatalf("work_mem after the script: PostgreSQL %s, through kineticd %s", want[0], want[1])
			}
		})
	}
	t.Run("outcome unknown pins", func(t *testing.T) {
		// RELEASE b ran before the division failed, in one Query: which
		// the proxy cannot tell from the error. PostgreSQL keeps 8MB.
		c := connect(t, ctx, px.AppDSN())
		defer c.Close(ctx)
		for _, q := range []string{"begin", "set work_mem = '8MB'", "savepoint a", "savepoint b", "release b; select 1/0", "rollback to a", "commit"} {
			c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
		}
		var wm string
		var p int
		if err := c.QueryRow(ctx, "select current_setting('work_mem'), inet_server_port()").Scan(&wm, &p); err != nil {
			t.Fatal(err)
		}
		if wm != "8MB" || p != cl.Primary.Port {
			t.Fatalf("work_mem %s on port %d, want 8MB on the primary (%d)", wm, p, cl.Primary.Port)
		}
		if got := lastRoute(t, ctx, c); !strings.Contains(got, "reason=session_pinned") {
			t.Errorf("last_route = %q, want reason=session_pinned", got)
		}
	})
}

// TestPrepareTransactionReachesThePrimary: PREPARE TRANSACTION after a
// BEGIN the proxy has not sent yet (a plain BEGIN is deferred until the
// transaction's first statement) runs on the primary, which refuses it
// here (max_prepared_transactions = 0: 55000) or prepares even an empty
// transaction. Before, the proxy answered it itself, as it answers COMMIT
// of an empty block, with the tag PREPARE and no error (psycopg 3's own
// test_tpc_disabled failed through kineticd with routing on). Each way of
// sending it is compared with the same script run directly on the primary.
func TestPrepareTransactionReachesThePrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	var max int
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if err := direct.QueryRow(ctx, "select current_setting('max_prepared_transactions')::int").Scan(&max); err != nil {
		t.Fatal(err)
	}
	if max != 0 {
		t.Fatalf("max_prepared_transactions = %d on the shared cluster; the test expects 0", max)
	}
	through := connect(t, ctx, px.AppDSN())
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		outcome := func(c *pgx.Conn) string {
			if _, err := c.Exec(ctx, "begin", pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
			tag, err := c.Exec(ctx, "prepare transaction 'kinetic_tpc'", mode)
			code := ""
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				code = pgErr.Code
			} else if err != nil {
				t.Fatalf("prepare transaction (%v): %v", mode, err)
			}
			return fmt.Sprintf("tag %q, error %q, status %c", tag.String(), code, c.PgConn().TxStatus())
		}
		want, got := outcome(direct), outcome(through)
		if want != got || !strings.Contains(want, "55000") {
			t.Errorf("BEGIN; PREPARE TRANSACTION (%v): through kineticd %s; directly %s (want 55000)", mode, got, want)
		}
	}
}

// TestTransactionReadOnlyIsThePrimarys: outside a transaction block, SHOW
// transaction_read_only and current_setting('transaction_read_only') are
// answered by the session's primary (off), not by a replica, where every
// transaction is read only (on): drivers ask it to tell a primary from a
// standby (pgJDBC's targetServerType=primary, libpq's
// target_session_attrs=read-write before PostgreSQL 14), and psycopg 3's
// own test_set_transaction_param_implicit failed through kineticd with
// routing on. Other reads keep going to a replica, and inside a READ ONLY
// transaction (on a replica) the answer is that transaction's: on.
func TestTransactionReadOnlyIsThePrimarys(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	c := connect(t, ctx, px.AppDSN())
	standbys := cl.StandbyPorts()
	for _, tc := range []struct {
		sql  string
		args []any
		mode pgx.QueryExecMode
	}{
		{"show transaction_read_only", nil, pgx.QueryExecModeSimpleProtocol},
		{"show transaction_read_only", nil, pgx.QueryExecModeExec},
		{"select current_setting('transaction_read_only')", nil, pgx.QueryExecModeSimpleProtocol},
		{"select current_setting('transaction_read_only')", nil, pgx.QueryExecModeCacheStatement},
		{"select current_setting($1)", []any{"transaction_read_only"}, pgx.QueryExecModeExec},
	} {
		var ro string
		if err := c.QueryRow(ctx, tc.sql, append([]any{tc.mode}, tc.args...)...).Scan(&ro); err != nil {
			t.Fatalf("%s (%v): %v", tc.sql, tc.mode, err)
		}
		if ro != "off" {
			t.Errorf("%s (%v) through kineticd: %s, want off (the primary's answer); last route %s", tc.sql, tc.mode, ro, lastRoute(t, ctx, c))
		}
	}
	if p := portOf(t, ctx, c, "select inet_server_port() from (select current_setting('work_mem')) s"); !standbys[p] {
		t.Errorf("a read with current_setting('work_mem') ran on %d, want a standby", p)
	}
	if _, err := c.Exec(ctx, "begin read only", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	var ro string
	var port int
	if err := c.QueryRow(ctx, "select current_setting('transaction_read_only'), inet_server_port()").Scan(&ro, &port); err != nil {
		t.Fatal(err)
	}
	if ro != "on" {
		t.Errorf("inside BEGIN READ ONLY: transaction_read_only %s on %d, want on", ro, port)
	}
	if _, err := c.Exec(ctx, "commit", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
}

// TestUnloggedTablesReadOnThePrimary: a hot standby cannot read an
// UNLOGGED relation (0A000 "cannot access temporary or unlogged relations
// during recovery"), so a read naming one goes to the primary, as
// pgpool-II's check_unlogged_table does; reads of logged tables keep
// going to replicas. psycopg 3's own test_concurrency and
// test_pipeline_communicate_abort failed through kineticd on it. The
// proxy learns of a table turned unlogged through it at once (ALTER …
// SET UNLOGGED), and of one turned unlogged behind its back (directly on
// the primary) from the standby's refusal: that read fails, the next one
// goes to the primary.
func TestUnloggedTablesReadOnThePrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	c := connect(t, ctx, px.AppDSN())
	standbys := cl.StandbyPorts()
	for _, sql := range []string{
		"drop table if exists unlogged_r, logged_r, turned_r, behind_r",
		"create unlogged table unlogged_r (x int)",
		"create table logged_r (x int)",
		"create table turned_r (x int)",
		"create table behind_r (x int)",
		"insert into unlogged_r values (1)",
		"insert into logged_r values (2)",
		"insert into turned_r values (3)",
		"insert into behind_r values (4)",
	} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	where := func(table string, mode pgx.QueryExecMode) (int, error) {
		var x, port int
		err := c.QueryRow(ctx, "select x, inet_server_port() from "+table, mode).Scan(&x, &port)
		return port, err
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		if p, err := where("unlogged_r", mode); err != nil || p != cl.Primary.Port {
			t.Errorf("read of an unlogged table (%v): on %d, %v; want the primary %d", mode, p, err, cl.Primary.Port)
		}
		if p, err := where("logged_r", mode); err != nil || !standbys[p] {
			t.Errorf("read of a logged table (%v): on %d, %v; want a standby", mode, p, err)
		}
	}
	// SQL PREPARE / EXECUTE: EXECUTE names no relation, its PREPARE does.
	for _, sql := range []string{"prepare unlogged_p as select x, inet_server_port() from unlogged_r", "prepare logged_p as select x, inet_server_port() from logged_r"} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	execute := func(name string) (int, error) {
		var x, port int
		err := c.QueryRow(ctx, "execute "+name, pgx.QueryExecModeSimpleProtocol).Scan(&x, &port)
		return port, err
	}
	if p, err := execute("unlogged_p"); err != nil || p != cl.Primary.Port {
		t.Errorf("EXECUTE of a prepared read of an unlogged table: on %d, %v; want the primary %d", p, err, cl.Primary.Port)
	}
	if p, err := execute("logged_p"); err != nil || !standbys[p] {
		t.Errorf("EXECUTE of a prepared read of a logged table: on %d, %v; want a standby", p, err)
	}
	// Cached as logged, then turned unlogged through the proxy.
	if p, err := where("turned_r", pgx.QueryExecModeSimpleProtocol); err != nil || !standbys[p] {
		t.Fatalf("turned_r while logged: on %d, %v; want a standby", p, err)
	}
	if _, err := c.Exec(ctx, "alter table turned_r set unlogged"); err != nil {
		t.Fatal(err)
	}
	if p, err := where("turned_r", pgx.QueryExecModeSimpleProtocol); err != nil || p != cl.Primary.Port {
		t.Errorf("turned_r after SET UNLOGGED: on %d, %v; want the primary %d", p, err, cl.Primary.Port)
	}
	// Cached as logged, then turned unlogged directly on the primary.
	if p, err := where("behind_r", pgx.QueryExecModeSimpleProtocol); err != nil || !standbys[p] {
		t.Fatalf("behind_r while logged: on %d, %v; want a standby", p, err)
	}
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "alter table behind_r set unlogged"); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	// The session's next read reaches a standby (the proxy did not see the
	// change), which refuses it with its own error; the one after goes to
	// the primary.
	var pgErr *pgconn.PgError
	if p, err := where("behind_r", pgx.QueryExecModeSimpleProtocol); !errors.As(err, &pgErr) || pgErr.Code != "0A000" {
		t.Errorf("behind_r after SET UNLOGGED on the primary: on %d, %v; want the standby's 0A000", p, err)
	}
	if p, err := where("behind_r", pgx.QueryExecModeSimpleProtocol); err != nil || p != cl.Primary.Port {
		t.Errorf("behind_r after the standby's refusal: on %d, %v; want the primary %d", p, err, cl.Primary.Port)
	}
}

// TestSerializableByDefaultReadsOnThePrimary: a hot standby runs no
// SERIALIZABLE transaction (0A000), so a session whose
// default_transaction_isolation is serializable (from its startup options,
// or SET SESSION CHARACTERISTICS) reads on the primary, where its reads
// succeed as they do directly; after RESET its reads go back to replicas.
// In transaction pooling a server connection such a session used must not
// pass the setting on: node-postgres's own tests, through kineticd, left a
// standby connection serializable ("RESET ALL; SELECT set_config(...)" ran
// in one transaction there, which the setting failed, undoing the RESET),
// and every later client's reads on it failed or saw the setting.
func TestSerializableByDefaultReadsOnThePrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 90*time.Second)
	for _, pm := range []string{"session", "transaction"} {
		t.Run(pm, func(t *testing.T) {
			px := routedProxy(t, cl, kinetictest.Params{PoolMode: pm, FallbackPolicy: "wait"})
			standbys := cl.StandbyPorts()
			iso := func(c *pgx.Conn, what string) (string, int) {
				t.Helper()
				var level string
				var port int
				if err := c.QueryRow(ctx, "select current_setting('transaction_isolation'), inet_server_port()").Scan(&level, &port); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return level, port
			}
			for i := 0; i < 3; i++ {
				cfg, err := pgx.ParseConfig(px.AppDSN())
				if err != nil {
					t.Fatal(err)
				}
				cfg.RuntimeParams["options"] = "-c default_transaction_isolation=serializable"
				s, err := pgx.ConnectConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if level, port := iso(s, "serializable by startup options"); level != "serializable" || port != cl.Primary.Port {
					t.Errorf("serializable by startup options: %s on %d, want serializable on the primary %d", level, port, cl.Primary.Port)
				}
				// A SET-only unit, and a SHOW, may run on a standby: they take
				// no snapshot.
				var show string
				if err := s.QueryRow(ctx, "show default_transaction_isolation", pgx.QueryExecModeSimpleProtocol).Scan(&show); err != nil || show != "serializable" {
					t.Errorf("SHOW default_transaction_isolation: %q, %v", show, err)
				}
				s.Close(ctx)

				c := connect(t, ctx, px.AppDSN())
				if level, port := iso(c, "a plain session after it"); level != "read committed" || !standbys[port] {
					t.Errorf("a plain session after a serializable one (%d): %s on %d, want read committed on a standby (%s)", i, level, port, lastRoute(t, ctx, c))
				}
				if _, err := c.Exec(ctx, "set session characteristics as transaction isolation level serializable"); err != nil {
					t.Fatal(err)
				}
				if level, port := iso(c, "after SET SESSION CHARACTERISTICS"); level != "serializable" || port != cl.Primary.Port {
					t.Errorf("after SET SESSION CHARACTERISTICS … SERIALIZABLE: %s on %d, want serializable on the primary", level, port)
				}
				if _, err := c.Exec(ctx, "reset default_transaction_isolation"); err != nil {
					t.Fatal(err)
				}
				if level, port := iso(c, "after RESET"); level != "read committed" || !standbys[port] {
					t.Errorf("after RESET default_transaction_isolation: %s on %d, want read committed on a standby (%s)", level, port, lastRoute(t, ctx, c))
				}
				c.Close(ctx)
			}
			// A SET alone takes no snapshot, so it may run on a standby,
			// whose connection then holds the setting: the next session to
			// use that connection must not.
			onStandby := 0
			for i := 0; i < 4; i++ {
				s := connect(t, ctx, px.AppDSN())
				if _, err := s.Exec(ctx, "set default_transaction_isolation = serializable", pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(lastRoute(t, ctx, s), "target=replica") {
					onStandby++
				}
				s.Close(ctx)
				// (With a startup setting of its own, as psql's
				// application_name: its settings are replayed after RESET ALL.)
				c := connect(t, ctx, px.AppDSN()+"&application_name=plain")
				if level, port := iso(c, "a plain session after a SET on a standby"); level != "read committed" || !standbys[port] {
					t.Errorf("a plain session after another's SET default_transaction_isolation (%d): %s on %d, want read committed on a standby", i, level, port)
				}
				c.Close(ctx)
			}
			if onStandby == 0 {
				t.Errorf("no SET default_transaction_isolation ran on a standby: the case is not exercised")
			}
		})
	}
}

// TestBlockCommitMovesToken: the COMMIT of a transaction block that wrote
// moves the session's token (SHOW pg_kinetic.write_lsn, the
// ParameterStatus) to a position at or after the commit, as an autocommit
// write does; a read-only block's COMMIT leaves it. (Before, a block's
// COMMIT, classified a read, raised only the floor: read-your-writes held,
// but the token never named the block's writes, so a failover that lost
// them went unreported, and a token carried to another session missed
// them. TestFailoverDrills' block session found it.)
func TestBlockCommitMovesToken(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	c := connect(t, ctx, px.AppDSN())
	tbl := uniqueIdent("blocktoken")
	if _, err := c.Exec(ctx, "create table "+tbl+" (id int)"); err != nil {
		t.Fatal(err)
	}
	token := func() string {
		var s string
		if err := c.QueryRow(ctx, "show pg_kinetic.write_lsn", pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range 3 {
		start, err := cl.Primary.QueryString(ctx, "select pg_current_wal_insert_lsn()")
		if err != nil {
			t.Fatal(err)
		}
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "insert into "+tbl+" values ($1)", i); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		got := token()
		_, lsn, _ := strings.Cut(got, ":")
		// The block's INSERT and COMMIT records lie after start: a token
		// at or after the commit is past it.
		past, err := cl.Primary.QueryString(ctx, fmt.Sprintf("select '%s'::pg_lsn > '%s'::pg_lsn", lsn, start))
		if err != nil || past != "t" {
			t.Fatalf("write_lsn after block %d's COMMIT: %q, the primary at the block's start %s (%v); want a position past it", i, got, start, err)
		}
	}
	before := token()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "select count(*) from "+tbl); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := token(); got != before {
		t.Fatalf("write_lsn after a read-only block: %q, before it %q; want unchanged", got, before)
	}
}

// TestLastRouteNamesTheLastStatementThatRan: SHOW pg_kinetic.last_route
// after a replica read still names the replica when the driver then sends
// units that run nothing — a Close of a cached statement (pgx deallocates
// an evicted one right before the next query) or a Parse and Describe
// alone — even when such a unit goes to the primary. The consistency
// checker's route samples disagreed with inet_server_port() that way.
func TestLastRouteNamesTheLastStatementThatRan(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	tbl := uniqueIdent("lastroute")
	if _, err := c.Exec(ctx, "create table "+tbl+" (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists "+tbl) })
	if _, err := c.Prepare(ctx, "old", "select inet_server_port() where $1::int > 0"); err != nil {
		t.Fatal(err)
	}
	// A read on a replica: a fresh session's first read that needs no
	// position goes there (stale-ok keeps it from waiting for the table).
	var port int
	awaitCond(t, 20*time.Second, "a read on a replica", func() (bool, error) {
		err := c.QueryRow(ctx, "/* pg-kinetic: stale-ok */ select inet_server_port()").Scan(&port)
		return cl.StandbyPorts()[port], err
	})
	if r := lastRoute(t, ctx, c); !strings.HasPrefix(r, "target=replica") {
		t.Fatalf("after a read on replica port %d: last_route %q", port, r)
	}
	// A Close alone (Deallocate: Close + Sync), and a Parse + Describe of
	// a write alone (Prepare), then the SHOW: last_route is the read's.
	if err := c.Deallocate(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prepare(ctx, "ins", "insert into "+tbl+" values ($1)"); err != nil {
		t.Fatal(err)
	}
	if r := lastRoute(t, ctx, c); !strings.HasPrefix(r, "target=replica") {
		t.Fatalf("units that ran nothing changed last_route: %q, want the replica read's", r)
	}
	// The prepared write runs: now the primary.
	if _, err := c.Exec(ctx, "ins", 1); err != nil {
		t.Fatal(err)
	}
	if r := lastRoute(t, ctx, c); !strings.HasPrefix(r, "target=primary") {
		t.Fatalf("after a write: last_route %q", r)
	}
}

// TestSQLPrepareForHiddenExecute: a function that runs EXECUTE of a SQL
// prepared statement in its dynamic SQL runs on the primary (a VOLATILE
// function), where the proxy cannot see that it needs the statement: the
// PREPARE itself runs on the primary, so the statement is there
// (PostgreSQL's regression suite, partition_prune.sql: its
// explain_parallel_append('execute ab_q4 (2, 2)') failed with 26000 when
// the PREPARE had gone to a replica). An EXECUTE the proxy sees still
// runs on a replica.
func TestSQLPrepareForHiddenExecute(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	setup, err := pgx.Connect(ctx, px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, setup, `CREATE OR REPLACE FUNCTION kinetic_run_prepared(q text) RETURNS int LANGUAGE plpgsql AS
		$$DECLARE v int; BEGIN EXECUTE q INTO v; RETURN v; END$$`)
	setup.Close(ctx)
	// A new session: its PREPARE, a read, would go to a replica.
	c, err := pgx.Connect(ctx, px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	mustExec(t, ctx, c, "prepare hidden_p as select inet_server_port()")
	if p := portOf(t, ctx, c, "select kinetic_run_prepared('execute hidden_p')", pgx.QueryExecModeSimpleProtocol); p != cl.Primary.Port {
		t.Fatalf("the function ran on %d, want the primary %d", p, cl.Primary.Port)
	}
	reps := cl.StandbyPorts()
	onReplica := false
	for i := 0; i < 20 && !onReplica; i++ {
		onReplica = reps[portOf(t, ctx, c, "execute hidden_p", pgx.QueryExecModeSimpleProtocol)]
	}
	if !onReplica {
		t.Fatal("EXECUTE of the prepared read never ran on a replica")
	}
}

// TestSequencesReadOnPrimary: a hot standby shows a sequence as WAL-logged
// ahead of nextval (last_value up to 32 past the primary's, log_cnt 0), so
// a read of a sequence relation runs on the primary, as one of an
// UNLOGGED table does; and DISCARD SEQUENCES discards the primary's
// nextval cache, which currval reads (PostgreSQL's regression suite,
// sequence.sql, found both: last_value 33 where PostgreSQL says 2, and a
// currval after DISCARD SEQUENCES that answered 99).
func TestSequencesReadOnPrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 30*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	c, err := pgx.Connect(ctx, px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	// The name is looked up before the sequence exists (cached: no
	// relation), then made: CREATE SEQUENCE makes the proxy look again.
	if _, err := c.Exec(ctx, "select 1 from pg_class where false and exists (select from kinetic_seq_read)", pgx.QueryExecModeSimpleProtocol); err == nil {
		t.Fatal("a read of a relation that does not exist yet succeeded")
	}
	mustExec(t, ctx, c, "drop sequence if exists kinetic_seq_read; create sequence kinetic_seq_read")
	for range 2 {
		mustExec(t, ctx, c, "select nextval('kinetic_seq_read')")
	}
	var last, logCnt int64
	var port int
	if err := c.QueryRow(ctx, "select last_value, log_cnt, inet_server_port() from kinetic_seq_read", pgx.QueryExecModeSimpleProtocol).Scan(&last, &logCnt, &port); err != nil {
		t.Fatal(err)
	}
	if port != cl.Primary.Port || last != 2 || logCnt < 31 {
		t.Fatalf("the sequence read: last_value %d, log_cnt %d on %d; want 2, 31 or 32 on the primary %d", last, logCnt, port, cl.Primary.Port)
	}
	mustExec(t, ctx, c, "discard sequences")
	_, err = c.Exec(ctx, "select currval('kinetic_seq_read')", pgx.QueryExecModeSimpleProtocol)
	if pgCode(err) != "55000" {
		t.Fatalf("currval after DISCARD SEQUENCES: %v, want 55000 (not yet defined in this session)", err)
	}
}
