package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// isError reports whether m is an ErrorResponse of SQLSTATE code.
func isError(m pgproto3.BackendMessage, code string) bool {
	e, ok := m.(*pgproto3.ErrorResponse)
	return ok && e.Code == code
}

// roundTrip sends msgs and a Sync on c's connection, and returns what
// came back before the ReadyForQuery (RowDescriptions and ErrorResponses
// copied: pgproto3 reuses them).
func roundTrip(t *testing.T, c *pgx.Conn, msgs ...pgproto3.FrontendMessage) []pgproto3.BackendMessage {
	t.Helper()
	fe := c.PgConn().Frontend()
	for _, m := range msgs {
		fe.Send(m)
	}
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []pgproto3.BackendMessage
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			return got
		case *pgproto3.RowDescription:
			got = append(got, &pgproto3.RowDescription{Fields: slices.Clone(m.Fields)})
		case *pgproto3.ErrorResponse:
			e := *m
			got = append(got, &e)
		default:
			got = append(got, m)
		}
	}
}

// TestExecuteLoopDescribe: a client makes two statements EXECUTE each
// other (a = EXECUTE b; Close b; b = EXECUTE a) and Describes one.
// PostgreSQL 15 follows the loop without end and its backend dies of a
// stack overflow (signal 11), which restarts the server and ends every
// other session on it: one client's statements took every client down
// (TestTxPoolDescribeOfExecute did it now and then). Through kineticd the
// Describe fails with 54001 in every pooling mode and routing, the Close
// and the Parse in the same batch as the Describe count, EXECUTE of it
// fails on the server (a bounded recursion there), and another client's
// open transaction goes on.
func TestExecuteLoopDescribe(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 90*time.Second)
	for _, pm := range []string{"session", "transaction"} {
		for _, routing := range []string{"off", "prefer_replica"} {
			t.Run(pm+"/"+routing, func(t *testing.T) {
				px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: pm, ReadRoutingMode: routing, Replicas: []string{cl.Standbys[0].Addr()}})
				other := connect(t, ctx, px.AppDSN())
				mustExec(t, ctx, other, "begin")
				otherPID := queryInt(t, ctx, other, "select pg_backend_pid()")
				c := connect(t, ctx, px.AppDSN())
				roundTrip(t, c, &pgproto3.Parse{Name: "b", Query: "select 1"}, &pgproto3.Parse{Name: "a", Query: "execute b"})
				roundTrip(t, c, &pgproto3.Close{ObjectType: 'S', Name: "b"}, &pgproto3.Parse{Name: "b", Query: "execute a"})
				got := roundTrip(t, c, &pgproto3.Describe{ObjectType: 'S', Name: "a"})
				if len(got) != 1 || !isError(got[0], "54001") {
					t.Errorf("Describe a (a = EXECUTE b, b = EXECUTE a): %v, want one ErrorResponse 54001", got)
				} else if e := got[0].(*pgproto3.ErrorResponse); !strings.Contains(e.Message, "executes itself") {
					t.Errorf("54001 says %q", e.Message)
				}
				// The loop made and described in one batch.
				got = roundTrip(t, c, &pgproto3.Parse{Name: "d", Query: "select 2"}, &pgproto3.Parse{Name: "e", Query: "execute d"},
					&pgproto3.Close{ObjectType: 'S', Name: "d"}, &pgproto3.Parse{Name: "d", Query: "execute e"},
					&pgproto3.Describe{ObjectType: 'S', Name: "d"})
				if len(got) == 0 || !isError(got[len(got)-1], "54001") {
					t.Errorf("the loop made and described in one batch: %v, want an ErrorResponse 54001 last", got)
				}
				// A chain that ends is described as before.
				got = roundTrip(t, c, &pgproto3.Parse{Name: "f", Query: "select 3 as three"}, &pgproto3.Parse{Name: "g", Query: "execute f"},
					&pgproto3.Describe{ObjectType: 'S', Name: "g"})
				if len(got) == 0 || func() bool { _, ok := got[len(got)-1].(*pgproto3.RowDescription); return !ok }() {
					t.Errorf("Describe of g = EXECUTE f: %v, want a RowDescription last", got)
				}
				// Executing the loop is the server's to refuse (54001 there).
				if _, err := c.Exec(ctx, "execute a", pgx.QueryExecModeSimpleProtocol); err == nil || !strings.Contains(err.Error(), "54001") {
					t.Errorf("EXECUTE a: %v, want the server's 54001", err)
				}
				if pid := queryInt(t, ctx, other, "select pg_backend_pid()"); pid != otherPID {
					t.Errorf("the other client's transaction moved from process %d to %d", otherPID, pid)
				}
				mustExec(t, ctx, other, "commit")
				if got := queryInt(t, ctx, c, "select 7"); got != 7 {
					t.Fatalf("after the loop: %d", got)
				}
				if tail := pgtest.LogTail(cl.Primary.LogFile, 200); strings.Contains(tail, "terminated by signal") {
					t.Fatalf("a server process died:\n%s", tail)
				}
			})
		}
	}
}
