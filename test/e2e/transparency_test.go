package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	if n := got.Load(); n != batches*perBatch {
		t.Fatalf("the listener received %d of %d notifications", n, batches*perBatch)
	}
}

func ctxWithin(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	time.AfterFunc(d, cancel)
	return c
}
