package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Transparency with read routing on (issue 11): what drivers do that
// PostgreSQL answers, kineticd answers the same way, whichever server a
// unit lands on.

// TestUnnamedStatementAcrossUnits: pgx's describe_exec and exec modes send
// Parse of the unnamed statement + Describe + Sync, then Bind/Execute of
// it + Sync. The second unit may land on another server than the first,
// and a WAL position query (a simple Query, which destroys the server's
// unnamed statement) may have run in between: the proxy Parses it again
// wherever it lands. Before the fix: 26000 "unnamed prepared statement
// does not exist".
func TestUnnamedStatementAcrossUnits(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		c := connect(t, ctx, px.AppDSN())
		for i := 0; i < 100; i++ {
			var got int
			if err := c.QueryRow(ctx, "select $1::int + 1", mode, i).Scan(&got); err != nil {
				t.Fatalf("%v, query %d: %v", mode, i, err)
			}
			if got != i+1 {
				t.Fatalf("%v: got %d, want %d", mode, got, i+1)
			}
			// Same text, other parameter type: another statement.
			var s string
			if err := c.QueryRow(ctx, "select $1::text", mode, fmt.Sprint(i)).Scan(&s); err != nil || s != fmt.Sprint(i) {
				t.Fatalf("%v: %q %v", mode, s, err)
			}
		}
	}
	// CopyFrom uses the unnamed statement to describe the table, then
	// copies on the primary.
	c := connect(t, ctx, px.AppDSN())
	if _, err := c.Exec(ctx, "create table if not exists unnamed_copy (a int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists unnamed_copy") })
	for i := 0; i < 20; i++ {
		n, err := c.CopyFrom(ctx, pgx.Identifier{"unnamed_copy"}, []string{"a"}, pgx.CopyFromRows([][]any{{i}, {i + 1}}))
		if err != nil || n != 2 {
			t.Fatalf("CopyFrom %d: %d rows, %v", i, n, err)
		}
	}
}

// TestTerminatedBackendEndsTheSession: in session pooling the client was
// given its primary backend's PID; pg_backend_pid() answers there (not on
// a replica), and when that backend is terminated the client's session
// ends with the server's FATAL 57P01, also while it was idle and its reads
// go to replicas. Before the fix the FATAL was dropped and the next read
// ran silently on a replica.
func TestTerminatedBackendEndsTheSession(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{PoolMode: "session"})
	ctx := ctxT(t, 60*time.Second)

	victim := connect(t, ctx, px.AppDSN())
	pid := victim.PgConn().PID()
	for i := 0; i < 10; i++ {
		if got := queryInt(t, ctx, victim, "select pg_backend_pid()"); uint32(got) != pid {
			t.Fatalf("pg_backend_pid() = %d, BackendKeyData pid = %d", got, pid)
		}
	}
	// The session's reads run on replicas meanwhile.
	if port := portOf(t, ctx, victim, "select inet_server_port()"); port == cl.Primary.Port {
		t.Logf("a read ran on the primary (fallback); the test still checks the FATAL")
	}
	if err := cl.Primary.Exec(ctx, fmt.Sprintf("select pg_terminate_backend(%d)", pid)); err != nil {
		t.Fatal(err)
	}
	// The server's FATAL reaches the client while it is idle; its next
	// statement, a read, fails with it.
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		_, err = victim.Exec(ctx, "select 1")
		if err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil {
		t.Fatal("the session whose backend was terminated still answers reads")
	}
	if code := pgCode(err); code != "" && code != "57P01" {
		t.Fatalf("terminated session: %v, want 57P01 or a closed connection", err)
	}
	if !victim.IsClosed() {
		if _, err := victim.Exec(ctx, "select 1"); err == nil {
			t.Fatal("the session goes on after its backend was terminated")
		}
	}

	// Terminating one's own backend: the statement itself fails with the
	// FATAL, as directly.
	self := connect(t, ctx, px.AppDSN())
	_, err = self.Exec(ctx, "select pg_terminate_backend(pg_backend_pid())")
	if err == nil {
		_, err = self.Exec(ctx, "select 1")
	}
	if err == nil {
		t.Fatal("a session that terminated its own backend still answers")
	}
}

// TestNotificationsNeverDropped: a listener keeps running statements (each
// followed by the proxy's WAL position query on the primary) while another
// session sends notifications at a high rate: every one arrives. Before the
// fix a notification that arrived while the proxy read the answer to its
// own position query was dropped with it (about 1 in 100 after a LISTEN).
func TestNotificationsNeverDropped(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 180*time.Second)
	const batches, perBatch = 100, 1000

	var got atomic.Int64
	cfg, err := pgconn.ParseConfig(px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) {
		if n.Channel == "flood" {
			got.Add(1)
		}
	}
	listener, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if err := listener.Exec(ctx, "listen flood").Close(); err != nil {
		t.Fatal(err)
	}
	sender := connect(t, ctx, px.AppDSN())
	sent := make(chan error, 1)
	go func() {
		for i := 0; i < batches; i++ {
			if _, err := sender.Exec(ctx, fmt.Sprintf("select pg_notify('flood', g::text) from generate_series(1, %d) g", perBatch)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	senderDone := false
	for got.Load() < batches*perBatch && ctx.Err() == nil {
		if err := listener.Exec(ctx, "select 1").Close(); err != nil {
			t.Fatalf("listener statement: %v", err)
		}
		if !senderDone {
			select {
			case err := <-sent:
				if err != nil {
					t.Fatalf("sender: %v", err)
				}
				senderDone = true
			default:
			}
		} else if err := listener.WaitForNotification(ctxWithin(ctx, 2*time.Second)); err != nil && got.Load() < batches*perBatch {
			break // nothing more arrives
		}
	}
	if !senderDone {
		// The sender's last statement may still be answering: it must end
		// before the test closes its connection.
		if err := <-sent; err != nil {
			t.Fatalf("sender: %v", err)
		}
	}
	if n := got.Load(); n != batches*perBatch {
		t.Fatalf("the listener received %d of %d notifications", n, batches*perBatch)
	}
}

func ctxWithin(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	time.AfterFunc(d, cancel)
	return c
}

// rawConn is a client connection after login, driven message by message.
type rawConn struct {
	t  *testing.T
	fe *pgproto3.Frontend
	nc net.Conn
}

func rawConnect(t *testing.T, ctx context.Context, dsn string) *rawConn {
	t.Helper()
	pc, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return &rawConn{t: t, fe: hc.Frontend, nc: hc.Conn}
}

// close ends the session as a client does.
func (rc *rawConn) close() {
	rc.fe.Send(&pgproto3.Terminate{})
	rc.fe.Flush()
	rc.nc.Close()
}

// send writes messages and flushes them.
func (rc *rawConn) send(msgs ...pgproto3.FrontendMessage) {
	rc.t.Helper()
	for _, m := range msgs {
		rc.fe.Send(m)
	}
	if err := rc.fe.Flush(); err != nil {
		rc.t.Fatal(err)
	}
}

// expect reads backend messages until n have arrived (asynchronous
// ParameterStatus and notices aside) and returns their types, with
// DataRow values, as one string.
func (rc *rawConn) expect(n int) string {
	rc.t.Helper()
	return rc.expectParams(n, false)
}

// expectParams is expect, with ParameterStatus messages counted and shown
// as S:name=value when params is set.
func (rc *rawConn) expectParams(n int, params bool) string {
	rc.t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer rc.nc.SetReadDeadline(time.Time{})
	var out []string
	for len(out) < n {
		m, err := rc.fe.Receive()
		if err != nil {
			rc.t.Fatalf("after %q: %v (the proxy did not answer)", out, err)
		}
		switch m := m.(type) {
		case *pgproto3.ParameterStatus:
			if params {
				out = append(out, "S:"+m.Name+"="+m.Value)
			}
		case *pgproto3.NoticeResponse:
		case *pgproto3.DataRow:
			out = append(out, "D:"+string(m.Values[0]))
		case *pgproto3.CommandComplete:
			out = append(out, "C:"+string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			out = append(out, "E:"+m.Code)
		case *pgproto3.ReadyForQuery:
			out = append(out, "Z:"+string(m.TxStatus))
		default:
			out = append(out, fmt.Sprintf("%T", m)[len("*pgproto3."):])
		}
	}
	return strings.Join(out, " ")
}

func (rc *rawConn) want(n int, want string) {
	rc.t.Helper()
	if got := rc.expect(n); got != want {
		rc.t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// TestFlushTerminatedBatches: an extended batch ended by Flush alone (a
// row-limited Execute answered by PortalSuspended, a cursor fetched in
// steps) is answered at the Flush, as by PostgreSQL, with routing on.
// Before the fix the client waited for ever.
func TestFlushTerminatedBatches(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 120*time.Second)
	t.Run("RoutingOff", func(t *testing.T) { flushTerminated(t, ctx, kinetictest.Start(t, cl, kinetictest.Params{})) })
	t.Run("Routed", func(t *testing.T) { flushTerminated(t, ctx, routedProxy(t, cl, kinetictest.Params{})) })
}

func flushTerminated(t *testing.T, ctx context.Context, px *kinetictest.Proxy) {
	t.Run("PortalSuspended", func(t *testing.T) {
		rc := rawConnect(t, ctx, px.AppDSN())
		for i := 0; i < 3; i++ {
			rc.send(&pgproto3.Parse{Name: "s", Query: "select g::text from generate_series(1, 5) g"},
				&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s"},
				&pgproto3.Execute{Portal: "p", MaxRows: 2}, &pgproto3.Flush{})
			rc.want(5, "ParseComplete BindComplete D:1 D:2 PortalSuspended")
			rc.send(&pgproto3.Execute{Portal: "p", MaxRows: 2}, &pgproto3.Flush{})
			rc.want(3, "D:3 D:4 PortalSuspended")
			rc.send(&pgproto3.Execute{Portal: "p"}, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{})
			rc.want(4, "D:5 C:SELECT 1 CloseComplete Z:I")
		}
	})
	t.Run("CursorInTransaction", func(t *testing.T) {
		rc := rawConnect(t, ctx, px.AppDSN())
		rc.send(&pgproto3.Query{String: "begin"})
		rc.want(2, "C:BEGIN Z:T")
		rc.send(&pgproto3.Parse{Query: "select g::text from generate_series(1, 4) g"},
			&pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{MaxRows: 3}, &pgproto3.Flush{})
		rc.want(5, "ParseComplete BindComplete RowDescription D:1 D:2")
		rc.want(2, "D:3 PortalSuspended")
		rc.send(&pgproto3.Execute{MaxRows: 3}, &pgproto3.Sync{})
		rc.want(3, "D:4 C:SELECT 1 Z:T")
		rc.send(&pgproto3.Query{String: "commit"})
		rc.want(2, "C:COMMIT Z:I")
	})
	t.Run("FlushThenNewUnit", func(t *testing.T) {
		// A Flush-ended batch, then a separate Sync-ended read.
		rc := rawConnect(t, ctx, px.AppDSN())
		for i := 0; i < 5; i++ {
			rc.send(&pgproto3.Parse{Query: "select 'a'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})
			rc.want(4, "ParseComplete BindComplete D:a C:SELECT 1")
			rc.send(&pgproto3.Sync{})
			rc.want(1, "Z:I")
			rc.send(&pgproto3.Parse{Query: "select 'b'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
			rc.want(5, "ParseComplete BindComplete D:b C:SELECT 1 Z:I")
		}
	})
}

// TestStalledBatchRunsAsDirectly: with routing on, a client that stops
// inside an extended batch (no Sync yet) has what it sent routed and run
// then, as PostgreSQL would: a statement_timeout fires between Parse and
// the rest (pgx's TestPrepareHandlesTimeoutBetweenParseAndDescribe and
// two more), while the same batch sent at once still runs on a replica;
// and a write after the pause moves the rest of the unit to the primary,
// its token kept. Before the fix the proxy held the Parse until the Sync
// and the statement ran to completion.
func TestStalledBatchRunsAsDirectly(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	replica := map[string]bool{}
	for p := range cl.StandbyPorts() {
		replica[fmt.Sprint(p)] = true
	}
	t.Run("StatementTimeout", func(t *testing.T) {
		rc := rawConnect(t, ctx, px.AppDSN())
		rc.send(&pgproto3.Query{String: "set statement_timeout = '100ms'"})
		rc.want(2, "C:SET Z:I")
		for i := 0; i < 3; i++ {
			// At once: routed as a unit, to a replica.
			rc.send(&pgproto3.Parse{Name: "s", Query: "select inet_server_port()::text"}, &pgproto3.Describe{ObjectType: 'S', Name: "s"},
				&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{})
			got := rc.expect(8)
			port := strings.Fields(got)[4]
			if !replica[strings.TrimPrefix(port, "D:")] {
				t.Fatalf("the batch sent at once: %s; want it answered by a replica %v", got, cl.StandbyPorts())
			}
			// The Parse, then 300 ms of nothing: the timeout fires
			// there, the rest is skipped to the Sync.
			rc.send(&pgproto3.Parse{Name: "s", Query: "select inet_server_port()::text"})
			time.Sleep(300 * time.Millisecond)
			rc.send(&pgproto3.Describe{ObjectType: 'S', Name: "s"}, &pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Sync{})
			rc.want(3, "ParseComplete E:57014 Z:I")
			// The Parse ran: the statement exists, as directly.
			rc.send(&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{})
			if got := rc.expect(5); !strings.HasPrefix(got, "BindComplete D:") || !strings.HasSuffix(got, "C:SELECT 1 CloseComplete Z:I") {
				t.Fatalf("the statement parsed before the timeout: %s", got)
			}
		}
		rc.close()
	})
	t.Run("WriteAfterThePause", func(t *testing.T) {
		tbl := tableOnPausedReplicas(t, ctx, cl, px, "stalled")
		rc := rawConnect(t, ctx, px.AppDSN())
		primary := fmt.Sprint(cl.Primary.Port)
		for i := 1; i <= 3; i++ {
			rc.send(&pgproto3.Parse{Name: "r", Query: "select inet_server_port()::text"})
			time.Sleep(50 * time.Millisecond)
			rc.send(&pgproto3.Parse{Name: "w", Query: "insert into " + tbl + " values ($1) returning inet_server_port()::text"},
				&pgproto3.Bind{PreparedStatement: "w", Parameters: [][]byte{[]byte(fmt.Sprint(i))}}, &pgproto3.Execute{},
				&pgproto3.Bind{PreparedStatement: "r"}, &pgproto3.Execute{},
				&pgproto3.Close{ObjectType: 'S', Name: "r"}, &pgproto3.Close{ObjectType: 'S', Name: "w"}, &pgproto3.Sync{})
			rc.want(11, "ParseComplete ParseComplete BindComplete D:"+primary+" C:INSERT 0 1 BindComplete D:"+primary+
				" C:SELECT 1 CloseComplete CloseComplete Z:I")
			// Read back (the replicas are paused): the token moved, so
			// the primary answers with every row.
			rc.send(&pgproto3.Query{String: "select count(*)::text from " + tbl})
			rc.want(4, fmt.Sprintf("RowDescription D:%d C:SELECT 1 Z:I", i))
		}
		rc.close()
	})
}

// TestPipelineWithStatementPreparedElsewhere: pgx's
// TestPipelineQueryStatementCursorFetch. A statement prepared while reads
// went to a replica is Bound inside a pipeline that runs on the primary
// after other messages of the same batch; the proxy's re-Parse of it must
// not take the place of the client's own ParseComplete. Before the fix the
// client's answers were out of step (a BindComplete where ParseComplete
// was due).
func TestPipelineWithStatementPreparedElsewhere(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	for i := 0; i < 5; i++ {
		rc := rawConnect(t, ctx, px.AppDSN())
		rc.send(&pgproto3.Parse{Name: "ps_fetch", Query: `fetch all in "pc"`},
			&pgproto3.Describe{ObjectType: 'S', Name: "ps_fetch"}, &pgproto3.Sync{})
		rc.want(4, "ParseComplete ParameterDescription NoData Z:I")
		rc.send(&pgproto3.Query{String: "begin"})
		rc.want(2, "C:BEGIN Z:T")
		rc.send(&pgproto3.Parse{Query: `declare "pc" cursor for select n::text from generate_series(1, 3) n`},
			&pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "ps_fetch"}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
			&pgproto3.Sync{})
		rc.want(11, "ParseComplete BindComplete NoData C:DECLARE CURSOR BindComplete RowDescription D:1 D:2 D:3 C:FETCH 3 Z:T")
		rc.send(&pgproto3.Query{String: "rollback"})
		rc.want(2, "C:ROLLBACK Z:I")
		rc.close()
	}
}

// TestKineticCommandsInExtendedProtocol: SHOW/SET/RESET pg_kinetic.* are
// answered by the proxy through drivers' default extended protocol (pgx
// caches a prepared statement, describes it, binds and executes it), with
// the same results as in the simple protocol, and inside pipelines in
// their place. Before the fix SHOW failed with 42704 from the server and
// the server accepted SET pg_kinetic.min_lsn as a placeholder setting: the
// token was silently ignored.
func TestKineticCommandsInExtendedProtocol(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	c := connect(t, ctx, px.AppDSN())
	if _, err := c.Exec(ctx, "create table if not exists kext (a int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists kext") })
	if _, err := c.Exec(ctx, "insert into kext values (1)"); err != nil {
		t.Fatal(err)
	}
	show := func(mode pgx.QueryExecMode, name string) string {
		t.Helper()
		var v string
		if err := c.QueryRow(ctx, "show "+name, mode).Scan(&v); err != nil {
			t.Fatalf("show %s (%v): %v", name, mode, err)
		}
		return v
	}
	simple := show(pgx.QueryExecModeSimpleProtocol, "pg_kinetic.write_lsn")
	if simple == "" {
		t.Fatal("no write token after an insert")
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		for i := 0; i < 3; i++ {
			if got := show(mode, "pg_kinetic.write_lsn"); got != simple {
				t.Fatalf("%v: write_lsn %q, simple protocol %q", mode, got, simple)
			}
		}
		if _, err := c.Exec(ctx, "set pg_kinetic.min_lsn = '"+simple+"'", mode); err != nil {
			t.Fatalf("%v: set min_lsn: %v", mode, err)
		}
		if got := show(mode, "pg_kinetic.min_lsn"); got != simple {
			t.Fatalf("%v: min_lsn %q after SET, want %q", mode, got, simple)
		}
		if _, err := c.Exec(ctx, "reset pg_kinetic.min_lsn", mode); err != nil {
			t.Fatalf("%v: reset: %v", mode, err)
		}
		if got := show(mode, "pg_kinetic.min_lsn"); got != "" {
			t.Fatalf("%v: min_lsn %q after RESET", mode, got)
		}
		// A server would take any value of a placeholder setting.
		_, err := c.Exec(ctx, "set pg_kinetic.min_lsn = 'garbage'", mode)
		if pgCode(err) != "22023" {
			t.Fatalf("%v: set min_lsn = 'garbage': %v, want 22023 from the proxy", mode, err)
		}
		if r := show(mode, "pg_kinetic.last_route"); !strings.HasPrefix(r, "target=") {
			t.Fatalf("%v: last_route %q", mode, r)
		}
	}

	t.Run("Pipeline", func(t *testing.T) {
		rc := rawConnect(t, ctx, px.AppDSN())
		defer rc.close()
		rc.send(&pgproto3.Parse{Query: "insert into kext values (2)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Name: "s", Query: "show pg_kinetic.last_route"}, &pgproto3.Bind{PreparedStatement: "s"},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "select count(*)::text from kext where a = 2"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Sync{})
		rc.want(13, "ParseComplete BindComplete C:INSERT 0 1 ParseComplete BindComplete RowDescription "+
			"D:target=primary reason=write lag_ms=0 C:SHOW ParseComplete BindComplete D:1 C:SELECT 1 Z:I")
		// The local statement stays prepared: Describe and run it again.
		rc.send(&pgproto3.Describe{ObjectType: 'S', Name: "s"}, &pgproto3.Bind{PreparedStatement: "s"},
			&pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{})
		rc.want(7, "ParameterDescription RowDescription BindComplete D:target=primary reason=write lag_ms=0 C:SHOW CloseComplete Z:I")
	})
	t.Run("LocalErrorFailsTheBatch", func(t *testing.T) {
		// A proxy-answered statement that fails makes the server's part
		// of the batch fail too: the insert before it rolls back, the
		// statement after it is skipped, as with a server's own error.
		rc := rawConnect(t, ctx, px.AppDSN())
		defer rc.close()
		rc.send(&pgproto3.Parse{Query: "insert into kext values (3)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "set pg_kinetic.min_lsn = 'garbage'"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "insert into kext values (3)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Sync{})
		rc.want(7, "ParseComplete BindComplete C:INSERT 0 1 ParseComplete BindComplete E:22023 Z:I")
		rc.send(&pgproto3.Query{String: "/* pg-kinetic: primary */ select count(*)::text from kext where a = 3"})
		rc.want(4, "RowDescription D:0 C:SELECT 1 Z:I")
	})
	t.Run("FlushEnded", func(t *testing.T) {
		rc := rawConnect(t, ctx, px.AppDSN())
		defer rc.close()
		rc.send(&pgproto3.Parse{Query: "show pg_kinetic.query_class"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})
		rc.want(4, "ParseComplete BindComplete D: C:SHOW")
		rc.send(&pgproto3.Parse{Query: "select 'x'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})
		rc.want(4, "ParseComplete BindComplete D:x C:SELECT 1")
		rc.send(&pgproto3.Parse{Query: "show pg_kinetic.query_class"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		rc.want(5, "ParseComplete BindComplete D: C:SHOW Z:I")
	})
}

// TestMessagesForwardedAsTheyArrive: with routing off, and inside a
// transaction with routing on (the unit's server is known), the proxy
// forwards a batch's messages as they arrive instead of holding them until
// Sync: a statement_timeout that expires between the client's Parse and
// Describe fires on the server as it does directly (pgx
// TestPrepareWithDigestedNameHandlesTimeoutBetweenParseAndDescribe). A
// routed unit outside a transaction is routed at such a pause instead
// (TestStalledBatchRunsAsDirectly).
func TestMessagesForwardedAsTheyArrive(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	pause := func(t *testing.T, rc *rawConn) {
		rc.send(&pgproto3.Parse{Name: "slow", Query: "select $1::varchar"})
		time.Sleep(300 * time.Millisecond)
		rc.send(&pgproto3.Describe{ObjectType: 'S', Name: "slow"}, &pgproto3.Sync{})
	}
	t.Run("RoutingOff", func(t *testing.T) {
		px := kinetictest.Start(t, cl, kinetictest.Params{})
		rc := rawConnect(t, ctx, px.AppDSN())
		defer rc.close()
		rc.send(&pgproto3.Query{String: "set statement_timeout = '100ms'"})
		rc.want(2, "C:SET Z:I")
		pause(t, rc)
		rc.want(3, "ParseComplete E:57014 Z:I")
	})
	t.Run("RoutedInTransaction", func(t *testing.T) {
		px := routedProxy(t, cl, kinetictest.Params{})
		rc := rawConnect(t, ctx, px.AppDSN())
		defer rc.close()
		rc.send(&pgproto3.Query{String: "begin; set local statement_timeout = '100ms'; select 1"})
		rc.want(6, "C:BEGIN C:SET RowDescription D:1 C:SELECT 1 Z:T")
		pause(t, rc)
		rc.want(3, "ParseComplete E:57014 Z:E")
		rc.send(&pgproto3.Query{String: "rollback"})
		rc.want(2, "C:ROLLBACK Z:I")
	})
}

// TestReplicaStatementNotOnPrimary pins allowed deviation (c) of
// docs/behaviour.md: with routing on, a read running on a replica is in
// that replica's pg_stat_activity, not the primary's, so a client that
// looks for it on the primary to cancel it does not find it; the client's
// own CancelRequest (by its BackendKeyData) still stops it.
func TestReplicaStatementNotOnPrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	c := connect(t, ctx, px.AppDSN())
	const marker = "deviation_c_marker"
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(qctx, "select pg_sleep(30) /* "+marker+" */")
		done <- err
	}()
	count := func(s *pgtest.Server) int {
		n, err := s.QueryString(ctx, "select count(*) from pg_stat_activity where query like '%"+marker+"%' and pid <> pg_backend_pid()")
		if err != nil {
			t.Fatal(err)
		}
		var v int
		fmt.Sscan(n, &v)
		return v
	}
	onReplica := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !onReplica; time.Sleep(20 * time.Millisecond) {
		for _, s := range cl.Standbys {
			onReplica = onReplica || count(s) > 0
		}
	}
	if !onReplica {
		t.Fatal("the read never showed in a replica's pg_stat_activity")
	}
	if n := count(cl.Primary); n != 0 {
		t.Fatalf("the replica read shows in the primary's pg_stat_activity (%d)", n)
	}
	select {
	case err := <-done:
		if pgCode(err) != "57014" && qctx.Err() == nil {
			t.Fatalf("the cancelled read ended with %v, want 57014", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client's CancelRequest did not stop the replica read")
	}
}

// TestBatchBeginTxOptionsWithRePrepare: pgx's TestConnSendBatchBeginTxOptions
// in transaction pooling and with routing: a pipeline that opens a
// transaction with isolation options and then runs a cached statement,
// which the proxy must prepare again on the server connection the unit
// lands on. Prepared ahead of the BEGIN, the proxy's Parse took the
// transaction's snapshot first: 25001 "SET TRANSACTION ISOLATION LEVEL
// must be called before any query".
func TestBatchBeginTxOptionsWithRePrepare(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 120*time.Second)
	run := func(t *testing.T, px *kinetictest.Proxy) {
		modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec}
		errs := make(chan error, 4)
		for w := 0; w < 4; w++ {
			go func() {
				errs <- func() error {
					for i := 0; i < 15; i++ {
						cfg, err := pgx.ParseConfig(px.AppDSN())
						if err != nil {
							return err
						}
						cfg.DefaultQueryExecMode = modes[i%len(modes)]
						c, err := pgx.ConnectConfig(ctx, cfg)
						if err != nil {
							return err
						}
						b := &pgx.Batch{}
						b.Queue("begin isolation level repeatable read read only")
						b.Queue("select current_setting('transaction_isolation'), current_setting('transaction_read_only')")
						br := c.SendBatch(ctx, b)
						_, err = br.Exec()
						var iso, ro string
						if err == nil {
							err = br.QueryRow().Scan(&iso, &ro)
						}
						if err == nil {
							err = br.Close()
						}
						if err == nil && (iso != "repeatable read" || ro != "on") {
							err = fmt.Errorf("transaction_isolation %q, read_only %q", iso, ro)
						}
						c.Close(ctx)
						if err != nil {
							return fmt.Errorf("%v, iteration %d: %w", cfg.DefaultQueryExecMode, i, err)
						}
					}
					return nil
				}()
			}()
		}
		for w := 0; w < 4; w++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("RoutingOff", func(t *testing.T) { run(t, kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 2})) })
	t.Run("Routed", func(t *testing.T) { run(t, routedProxy(t, cl, kinetictest.Params{PoolSize: 2})) })
}

// TestTerminatedBackendNextReadFails: pgx's TestFatalTxError, many times:
// another session terminates this session's primary backend (its
// BackendKeyData PID), and the very next statement, a read that would go
// to a replica, fails with the FATAL as directly, every time.
func TestTerminatedBackendNextReadFails(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{PoolMode: "session"})
	ctx := ctxT(t, 120*time.Second)
	other := connect(t, ctx, px.AppDSN())
	for i := 0; i < 30; i++ {
		c, err := pgx.Connect(ctx, px.AppDSN())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(ctx, "select pg_terminate_backend($1)", c.PgConn().PID()); err != nil {
			t.Fatal(err)
		}
		err = c.QueryRow(ctx, "select 1").Scan(nil)
		closed := c.IsClosed()
		c.Close(ctx)
		if err == nil {
			t.Fatalf("iteration %d: the read after the termination succeeded", i)
		}
		if !closed {
			t.Fatalf("iteration %d: the session is not closed after %v", i, err)
		}
	}
}

// TestReadOnlyTransactionOnReplicaRefusesListen pins a documented
// consequence of routing (docs/behaviour.md, "SERIALIZABLE READ ONLY"): a
// READ ONLY transaction runs on a replica, where recovery refuses LISTEN
// (25006) although the primary would take it in a read-only transaction;
// SERIALIZABLE READ ONLY opens on the primary, since a standby refuses
// serializable isolation.
func TestReadOnlyTransactionOnReplicaRefusesListen(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	c := connect(t, ctx, px.AppDSN())
	replicas := cl.StandbyPorts()

	tx, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	if port := portOf(t, ctx, c, "select inet_server_port()"); !replicas[port] {
		t.Fatalf("a READ ONLY transaction ran on %d, not a replica", port)
	}
	_, err = c.Exec(ctx, "listen ro_chan")
	if pgCode(err) != "25006" {
		t.Fatalf("LISTEN in a READ ONLY transaction on a replica: %v, want 25006", err)
	}
	tx.Rollback(ctx)

	tx, err = c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.Serializable})
	if err != nil {
		t.Fatal(err)
	}
	if port := portOf(t, ctx, c, "select inet_server_port()"); port != cl.Primary.Port {
		t.Fatalf("a SERIALIZABLE READ ONLY transaction ran on %d, not the primary %d", port, cl.Primary.Port)
	}
	var iso string
	if err := c.QueryRow(ctx, "show transaction_isolation").Scan(&iso); err != nil || iso != "serializable" {
		t.Fatalf("transaction_isolation %q, %v", iso, err)
	}
	tx.Rollback(ctx)
}

// TestTxPoolLateCancelStaysWithItsClient: in transaction pooling two
// clients share one server connection. One sends a CancelRequest (its own
// key) right after each of its statements finished; the other's statements
// on the same connection must never be the ones cancelled. Before the fix
// a cancel read the client's last connection and sent the cancel while
// that connection went back to the pool and ran the other client's
// statement (pgx TestRowsScanNilThenScanValue got 57014 in the
// conformance run).
func TestTxPoolLateCancelStaysWithItsClient(t *testing.T) {
	for _, routing := range []string{"off", "prefer_replica"} {
		t.Run(routing, func(t *testing.T) { testTxPoolLateCancel(t, routing) })
	}
}

func testTxPoolLateCancel(t *testing.T, routing string) {
	px := txPoolProxy(t, routing, kinetictest.Params{PoolSize: 1})
	ctx := ctxT(t, 60*time.Second)
	canceller, err := pgconn.Connect(ctx, px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer canceller.Close(context.Background())
	victim := connect(t, ctx, px.AppDSN())
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := canceller.Exec(ctx, "select 1").Close(); err != nil && pgCode(err) != "57014" {
				done <- err
				return
			}
			if err := canceller.CancelRequest(ctx); err != nil {
				done <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		if _, err := victim.Exec(ctx, "select pg_sleep(0.002)"); err != nil {
			close(stop)
			<-done
			t.Fatalf("statement %d of the other client: %v (another client's cancel reached it)", n, err)
		}
		n++
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d statements of the other client, none cancelled", n)
}

// TestRetriedReadWithItsOwnParse: a read retried elsewhere after its
// replica died (SPEC §7) carries a Parse of a named statement: the lost
// attempt's statement is forgotten before the retry, so the retry's Parse
// is not refused as a duplicate. Before the fix: 42P05 "prepared statement
// already exists" (the consistency checker hit it when a standby
// restarted).
func TestRetriedReadWithItsOwnParse(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{})
	rc := rawConnect(t, ctx, px.AppDSN())
	replica := cl.Standbys[0]
	rc.send(&pgproto3.Parse{Name: "s1", Query: "select inet_server_port()::text from pg_sleep(2) /* retry-named */"},
		&pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	killWhenRunning(t, ctx, replica, "retry-named")
	rc.want(5, fmt.Sprintf("ParseComplete BindComplete D:%d C:SELECT 1 Z:I", cl.Primary.Port))
	// The statement exists for the client, once.
	rc.send(&pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	rc.want(4, fmt.Sprintf("BindComplete D:%d C:SELECT 1 Z:I", cl.Primary.Port))
}

// TestProxyErrorAbortsTheServerTransaction: a statement the proxy fails
// itself inside a transaction block (SET pg_kinetic.min_lsn with a value
// that is no WAL position) fails the transaction on the server too, so
// the client's COMMIT rolls back as directly: the row inserted before it
// is not there afterwards, and statements before the ROLLBACK fail with
// 25P02. (The proxy used to report the failed state while the server's
// transaction went on: the COMMIT committed the row.)
func TestProxyErrorAbortsTheServerTransaction(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())
	tbl := uniqueIdent("abort")
	if _, err := c.Exec(ctx, "create table "+tbl+" (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists "+tbl) })
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		if _, err := c.Exec(ctx, "begin"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "insert into "+tbl+" values (1)"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "set pg_kinetic.min_lsn = 'not a position'", mode); err == nil {
			t.Fatalf("%v: a bad pg_kinetic.min_lsn was accepted", mode)
		}
		var pgErr *pgconn.PgError
		if _, err := c.Exec(ctx, "insert into "+tbl+" values (2)"); !errors.As(err, &pgErr) || pgErr.Code != "25P02" {
			t.Errorf("%v: statement after the failed one: %v, want 25P02", mode, err)
		}
		tag, err := c.Exec(ctx, "commit")
		if err != nil {
			t.Fatal(err)
		}
		if tag.String() != "ROLLBACK" {
			t.Errorf("%v: COMMIT of the failed transaction answered %q, want ROLLBACK", mode, tag)
		}
		var n int
		if err := c.QueryRow(ctx, "select count(*) from "+tbl, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%v: %d rows committed by a transaction that failed", mode, n)
		}
	}
}

// TestQueryAfterUnsyncedExtendedMessages: a Query or FunctionCall that
// follows extended messages with no Sync between them runs when those
// succeeded, and is skipped (no answer, no ReadyForQuery) when one failed,
// as PostgreSQL skips everything up to Sync. Each exchange is compared with
// PostgreSQL's own answers to the same messages. The proxy used to count a
// ReadyForQuery for the skipped message: the session's next unit waited 5 s
// for a WAL position that never came, and a client that then closed its
// side was not closed in time (TestHostileBytesNeverDisturbAGoodClient,
// seed 1796211702719763019: Describe, Bind, CopyData, FunctionCall).
func TestQueryAfterUnsyncedExtendedMessages(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	cases := []struct {
		name string
		msgs []pgproto3.FrontendMessage
	}{
		{"FailedParseThenQuery", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "selec 1"}, &pgproto3.Query{String: "select 'skipped'"}, &pgproto3.Sync{}}},
		{"FailedBindThenFunctionCall", []pgproto3.FrontendMessage{
			&pgproto3.Bind{PreparedStatement: "pg_kinetic_no_such_statement"}, &pgproto3.FunctionCall{Function: 0}, &pgproto3.Sync{}}},
		{"FailedDescribeFlushThenQuery", []pgproto3.FrontendMessage{
			&pgproto3.Describe{ObjectType: 'S', Name: "pg_kinetic_no_such_statement"}, &pgproto3.Flush{},
			&pgproto3.Query{String: "select 'skipped'"}, &pgproto3.Sync{}}},
		{"ReadThenQuery", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "select 'extended'"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Query{String: "select 'simple'"}, &pgproto3.Sync{}}},
		{"ReadFlushThenQuery", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "select 'extended'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{},
			&pgproto3.Query{String: "select 'simple'"}, &pgproto3.Sync{}}},
	}
	// Each case ends with a Query of its own: the session must answer it
	// at once, on the next unit.
	after := &pgproto3.Query{String: "select 'after'"}
	run := func(dsn string, msgs []pgproto3.FrontendMessage) string {
		rc := rawConnect(t, ctx, dsn)
		defer rc.close()
		rc.send(append(msgs, after)...)
		var out []string
		for ready := 0; ready < 2 || !strings.HasSuffix(strings.Join(out, " "), "D:after C:SELECT 1 Z:I"); {
			got := rc.expect(1)
			out = append(out, got)
			if strings.HasPrefix(got, "Z:") {
				ready++
			}
		}
		return strings.Join(out, " ")
	}
	direct := cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB)
	for _, px := range []struct {
		name string
		px   *kinetictest.Proxy
	}{
		{"RoutingOff", kinetictest.Start(t, cl, kinetictest.Params{})},
		{"Routed", routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})},
	} {
		for _, c := range cases {
			t.Run(px.name+"/"+c.name, func(t *testing.T) {
				want := run(direct, c.msgs)
				start := time.Now()
				got := run(px.px.AppDSN(), c.msgs)
				if got != want {
					t.Errorf("through kineticd:\n  %s\ndirectly:\n  %s", got, want)
				}
				// (The wait for a WAL position that never comes lasted
				// 5 s, captureWait: this is that hang, not a speed target.)
				if d := time.Since(start); d > 4*time.Second {
					t.Errorf("answered after %v: the session waited for an answer that never comes", d.Round(time.Millisecond))
				}
			})
		}
	}
}

// TestSyncOrFlushWithABody: a Sync or Flush whose length word says it has
// a body (PostgreSQL fails it with 08P01 and, for a Flush, then skips to
// the next Sync) ends the session with FATAL 08P01, and the connection is
// closed at once. Before, a Flush with a body had the server skip to a
// Sync that never came while the proxy took it for idle: the session's
// end waited for ever on the reset of that connection, and the client,
// which had closed its side, was never closed (hostile test, seed
// 1796212521672154413).
func TestSyncOrFlushWithABody(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	for _, typ := range []byte{'S', 'H'} {
		for _, halfClose := range []bool{false, true} {
			t.Run(fmt.Sprintf("%c/halfClose=%v", typ, halfClose), func(t *testing.T) {
				rc := rawConnect(t, ctx, px.AppDSN())
				rc.nc.Write([]byte{typ, 0, 0, 0, 9, 1, 2, 3, 4, 5})
				if halfClose {
					rc.nc.(*net.TCPConn).CloseWrite()
				}
				rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				out, err := io.ReadAll(rc.nc)
				if err != nil {
					t.Fatalf("not closed: %v (answered %q)", err, out)
				}
				if !bytes.Contains(out, []byte("SFATAL\x00")) || !bytes.Contains(out, []byte("C08P01\x00")) {
					t.Errorf("answered %q, want FATAL 08P01", out)
				}
			})
		}
	}
	// The pool is not left with a connection that skips to Sync: new
	// sessions run as before.
	c := connect(t, ctx, px.AppDSN())
	var one int
	if err := c.QueryRow(ctx, "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("select 1 after: %v, %d", err, one)
	}
}

// TestStatementResultChangedElsewhere: a statement the client prepared and
// described on one server, whose result columns an ALTER TABLE then
// changed, fails its next Bind with 0A000 "cached plan must not change
// result type" wherever that Bind lands, as on PostgreSQL. Here it is
// prepared on the primary (inside a transaction that wrote) and bound
// outside a transaction, a read routed to a replica, where the proxy
// prepares it again: before the fix the Bind failed there with 08P01
// (three result formats for two columns), and pgx's own
// TestStmtCacheInvalidationConn failed through kineticd. A second part
// runs pgx's steps: the error, then a retry that succeeds.
func TestStatementResultChangedElsewhere(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 90*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait"})
	tbl := uniqueIdent("shape")
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists "+tbl) })
	create := fmt.Sprintf("drop table if exists %[1]s; create table %[1]s (id int primary key, f1 int not null, f2 int not null); insert into %[1]s values (1, 1, 2)", tbl)

	// prepareInWriteTx connects, creates the table, and inside a
	// transaction that wrote (so on the primary) prepares and describes
	// statement "get"; it returns the connection, in that transaction,
	// and get's text.
	prepareInWriteTx := func(t *testing.T) (*rawConn, string) {
		rc := rawConnect(t, ctx, px.AppDSN())
		rc.send(&pgproto3.Query{String: create})
		rc.expect(4) // CommandComplete ×3, ReadyForQuery
		rc.send(&pgproto3.Query{String: "begin; insert into " + tbl + " values (2, 3, 4)"})
		rc.want(3, "C:BEGIN C:INSERT 0 1 Z:T")
		get := "select * from " + tbl + " where id = $1"
		rc.send(&pgproto3.Parse{Name: "get", Query: get, ParameterOIDs: []uint32{23}},
			&pgproto3.Describe{ObjectType: 'S', Name: "get"}, &pgproto3.Sync{})
		rc.want(4, "ParseComplete ParameterDescription RowDescription Z:T")
		return rc, get
	}

	t.Run("Protocol", func(t *testing.T) {
		rc, get := prepareInWriteTx(t)
		defer rc.close()
		rc.send(&pgproto3.Query{String: "select inet_server_port()::text"})
		rc.want(4, fmt.Sprintf("RowDescription D:%d C:SELECT 1 Z:T", cl.Primary.Port))
		rc.send(&pgproto3.Query{String: "commit; alter table " + tbl + " drop column f1"})
		rc.want(3, "C:COMMIT C:ALTER TABLE Z:I")
		// Where the read runs: a replica (fallback "wait"), which never
		// saw the statement.
		rc.send(&pgproto3.Parse{Query: "select inet_server_port()::text"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		where := rc.expect(5)
		if !strings.HasPrefix(where, "ParseComplete BindComplete D:") || strings.Contains(where, fmt.Sprintf("D:%d ", cl.Primary.Port)) {
			t.Fatalf("the read after the ALTER: %s, want it on a replica", where)
		}
		for range 2 { // it stays stale, as on the server that prepared it
			rc.send(&pgproto3.Bind{PreparedStatement: "get", Parameters: [][]byte{[]byte("1")}, ResultFormatCodes: []int16{0, 0, 0}},
				&pgproto3.Execute{}, &pgproto3.Sync{})
			rc.want(2, "E:0A000 Z:I")
		}
		// Prepared again by the client, it runs with the new columns.
		rc.send(&pgproto3.Close{ObjectType: 'S', Name: "get"},
			&pgproto3.Parse{Name: "get", Query: get, ParameterOIDs: []uint32{23}},
			&pgproto3.Bind{PreparedStatement: "get", Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		rc.want(6, "CloseComplete ParseComplete BindComplete D:1 C:SELECT 1 Z:I")
	})

	// The table is dropped instead: the proxy's own re-Parse and Describe
	// (ended by a Sync of the proxy's, outside a transaction block) fail
	// unseen, and the statement is Parsed again inside the client's batch,
	// so the client gets the error PostgreSQL gives its Bind (42P01), not
	// a 26000 for a statement it prepared.
	t.Run("Dropped", func(t *testing.T) {
		rc, _ := prepareInWriteTx(t)
		defer rc.close()
		rc.send(&pgproto3.Query{String: "commit; drop table " + tbl})
		rc.want(3, "C:COMMIT C:DROP TABLE Z:I")
		for range 2 {
			rc.send(&pgproto3.Bind{PreparedStatement: "get", Parameters: [][]byte{[]byte("1")}},
				&pgproto3.Execute{}, &pgproto3.Sync{})
			rc.want(2, "E:42P01 Z:I")
		}
		// Still usable where it runs after the table is back.
		rc.send(&pgproto3.Query{String: create})
		rc.expect(4)
		rc.send(&pgproto3.Bind{PreparedStatement: "get", Parameters: [][]byte{[]byte("1")}},
			&pgproto3.Execute{}, &pgproto3.Sync{})
		rc.want(4, "BindComplete D:1 C:SELECT 1 Z:I")
	})

	t.Run("Pgx", func(t *testing.T) {
		c := connect(t, ctx, px.AppDSN())
		for i := range 4 {
			// (Another text each round: pgx's cached statement of the last
			// round would fail on the new table as directly.)
			get := fmt.Sprintf("select * from %s where id = $1 and %d = %[2]d", tbl, i)
			if _, err := c.Exec(ctx, create); err != nil {
				t.Fatal(err)
			}
			rows, err := c.Query(ctx, get, 1)
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, "alter table "+tbl+" drop column f1"); err != nil {
				t.Fatal(err)
			}
			rows, err = c.Query(ctx, get, 1)
			if err == nil {
				rows.Next()
				rows.Close()
				err = rows.Err()
			}
			if err == nil || !strings.Contains(err.Error(), "cached plan must not change result type") {
				t.Fatalf("round %d: the statement after the ALTER: %v, want 0A000 cached plan must not change result type", i, err)
			}
			var id, f2 int
			if err := c.QueryRow(ctx, get, 1).Scan(&id, &f2); err != nil || id != 1 || f2 != 2 {
				t.Fatalf("round %d: the retry: %v (%d, %d)", i, err, id, f2)
			}
		}
	})
}

// TestFlushAfterSyncIsNotAUnit: libpq's pipeline mode ends a pipeline with
// Sync and then Flush (psycopg 3's conn.pipeline() does). A Flush with
// nothing before it since the Sync asks the server for nothing: it is not
// a unit. Before the fix the proxy routed it as an open unit (a read, so
// to a replica) and the client's next statement followed it there
// unclassified: a simple-protocol INSERT failed with 25006 on the
// standby, and a read skipped the rules (psycopg 3's own
// test_pipeline_communicate_abort and test_concurrency failed on it). The
// statements after the Flush must run where a lone statement would: the
// write on the primary, proven by inet_server_port().
func TestFlushAfterSyncIsNotAUnit(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	for _, pm := range []string{"session", "transaction"} {
		t.Run(pm, func(t *testing.T) {
			px := routedProxy(t, cl, kinetictest.Params{PoolMode: pm})
			setup := connect(t, ctx, px.AppDSN())
			if _, err := setup.Exec(ctx, "create table if not exists flush_after_sync (x int)"); err != nil {
				t.Fatal(err)
			}
			rc := rawConnect(t, ctx, px.AppDSN())
			defer rc.close()
			primary := fmt.Sprint(cl.Primary.Port)
			for i := 0; i < 3; i++ {
				rc.send(&pgproto3.Parse{Query: "select 1::text"}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Sync{}, &pgproto3.Flush{})
				rc.want(5, "ParseComplete BindComplete D:1 C:SELECT 1 Z:I")
				rc.send(&pgproto3.Query{String: "insert into flush_after_sync values (1) returning inet_server_port()::text"})
				rc.want(4, "RowDescription D:"+primary+" C:INSERT 0 1 Z:I")
			}
		})
	}
}

// TestSQLCancelReachesTheReplica: in session pooling the client's
// BackendKeyData PID is its primary backend's, and pg_cancel_backend of it
// from another connection stops the client's statement, as it does on
// PostgreSQL, also when that statement runs on a replica: the proxy relays
// the cancel there once the primary has run the call (and so checked the
// caller's right to signal that backend). pg-query-stream's own test
// "should work after cancelling query" failed on it (allowed deviation (c)
// before). A caller the primary refuses (42501) stops nothing.
func TestSQLCancelReachesTheReplica(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{PoolMode: "session"})
	ctx := ctxT(t, 90*time.Second)
	victim := connect(t, ctx, px.AppDSN())
	other := connect(t, ctx, px.AppDSN())
	stranger := connect(t, ctx, px.DSN(pgtest.MD5User, pgtest.MD5Password, pgtest.AppDB))
	var pid uint32
	if err := victim.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil || pid != victim.PgConn().PID() {
		t.Fatalf("pg_backend_pid() = %d, %v; BackendKeyData PID %d", pid, err, victim.PgConn().PID())
	}
	const marker = "sql_cancel_marker"
	sleep := func() <-chan error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := victim.Exec(ctx, "select pg_sleep(30) /* "+marker+" */")
			done <- err
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if runningOnStandbys(t, ctx, cl, marker) > 0 {
				return done
			}
			if time.Now().After(deadline) {
				// Where did it go? (Seen once in a full run under the
				// race detector: a read the proxy sent to the primary,
				// no replica eligible then, would be there.)
				onPrimary, err := cl.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where query like '%"+marker+"%' and pid <> pg_backend_pid()")
				t.Fatalf("the read never showed in a replica's pg_stat_activity (in the primary's: %s, %v)", onPrimary, err)
			}
		}
	}
	stopped := func(done <-chan error, how string) {
		t.Helper()
		select {
		case err := <-done:
			if pgCode(err) != "57014" {
				t.Fatalf("%s: the read ended with %v, want 57014", how, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not stop the read on the replica", how)
		}
	}

	done := sleep()
	if _, err := stranger.Exec(ctx, "select pg_cancel_backend($1)", pid); pgCode(err) != "42501" {
		t.Fatalf("another role's pg_cancel_backend: %v, want the primary's 42501", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the read ended (%v) after a refused pg_cancel_backend", err)
	case <-time.After(time.Second):
	}
	var ok bool
	if err := other.QueryRow(ctx, "select pg_cancel_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_cancel_backend($1) = %v, %v", ok, err)
	}
	stopped(done, "pg_cancel_backend($1), extended protocol")

	done = sleep()
	if _, err := other.Exec(ctx, fmt.Sprintf("select pg_cancel_backend(%d)", pid), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	stopped(done, "pg_cancel_backend(constant), simple protocol")
	if p := portOf(t, ctx, victim, "select inet_server_port()"); !cl.StandbyPorts()[p] {
		t.Errorf("after the cancels the next read ran on %d", p)
	}
}

// TestListenThenSilence: a client that ran LISTEN (or SET, UNLISTEN,
// NOTIFY) and waits for its socket to become readable must see nothing
// until a notification comes, as on PostgreSQL. kineticd sent such a unit's
// WAL position as ParameterStatus pg_kinetic.write_lsn a few milliseconds
// after its ReadyForQuery, which woke the client with no notification
// (psycopg2's own test_notifies_received_on_poll: select() returned after
// 9 ms). These statements write no WAL, so they need no position. A write
// still gets its token after its ReadyForQuery.
func TestListenThenSilence(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	silent := func(t *testing.T, c *pgx.Conn, what string) {
		t.Helper()
		nc := c.PgConn().Conn()
		nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		defer nc.SetReadDeadline(time.Time{})
		var b [64]byte
		if n, err := nc.Read(b[:]); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("after %s the client received %q (%v); want nothing until a notification", what, b[:n], err)
		}
	}
	for _, sql := range []string{"listen kinetic_silence", "set application_name = 'silence'", "notify kinetic_silence_other", "unlisten kinetic_silence"} {
		c := connect(t, ctx, px.AppDSN())
		if _, err := c.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		silent(t, c, sql)
		c.Close(ctx)
	}
	// A write's token still arrives after its ReadyForQuery.
	c := connect(t, ctx, px.AppDSN())
	tbl := uniqueIdent("silence_t")
	if _, err := c.Exec(ctx, "create table "+tbl+" (x int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists "+tbl) })
	if _, err := c.Exec(ctx, "select 1"); err != nil {
		t.Fatal(err)
	}
	if c.PgConn().ParameterStatus("pg_kinetic.write_lsn") == "" {
		t.Error("no pg_kinetic.write_lsn after a write")
	}
}

// TestTerminateWhileReplicaRuns: in session pooling, terminating the
// client's BackendKeyData PID (its primary backend) while its statement
// runs on a replica ends the session at once with the server's FATAL
// 57P01, as directly, and the replica's statement stops too: the read
// does not go on to answer after its session was terminated.
func TestTerminateWhileReplicaRuns(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{PoolMode: "session"})
	ctx := ctxT(t, 90*time.Second)
	victim := connect(t, ctx, px.AppDSN())
	pid := victim.PgConn().PID()
	const marker = "terminate_replica_marker"
	onStandbys := func() int { return runningOnStandbys(t, ctx, cl, marker) }
	done := make(chan error, 1)
	go func() {
		_, err := victim.Exec(ctx, "select pg_sleep(30) /* "+marker+" */")
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); onStandbys() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the read never showed in a replica's pg_stat_activity")
		}
	}
	if err := cl.Primary.Exec(ctx, fmt.Sprintf("select pg_terminate_backend(%d)", pid)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the replica's read answered after its session was terminated")
		}
		if code := pgCode(err); code != "" && code != "57P01" {
			t.Fatalf("the read ended with %v, want 57P01 or a closed connection", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the session went on running on the replica after its backend was terminated")
	}
	for deadline := time.Now().Add(10 * time.Second); onStandbys() > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the terminated session's statement still runs on the replica")
		}
	}
}

// runningOnStandbys counts the standbys whose pg_stat_activity shows a
// statement containing marker running (other than the counting one).
func runningOnStandbys(t *testing.T, ctx context.Context, cl *pgtest.Cluster, marker string) int {
	t.Helper()
	n := 0
	for _, s := range cl.Standbys {
		// (Active only: a backend keeps showing its last statement when
		// idle, and a cancelled read's entry would pass for the next one's.)
		v, err := s.QueryString(ctx, "select count(*) from pg_stat_activity where query like '%"+marker+"%' and state = 'active' and pid <> pg_backend_pid()")
		if err != nil {
			t.Fatal(err)
		}
		if v != "0" {
			n++
		}
	}
	return n
}
