package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestCommitInOpenUnitThenRead: a transaction block that wrote ends with
// a COMMIT sent in the rest of a unit the proxy routed at a Flush (the
// part before it only read, inside the block). The read the session sends
// next must see the write: with the replica's replay paused it must not
// go there. Before the fix the unit kept the facts of its first part (a
// read, no transaction end), no position was read after the COMMIT, and
// the read ran on the paused replica without the row (the differential
// test's sequence 10158029952030562462, 1 run in 2).
func TestCommitInOpenUnitThenRead(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table streamed_commit (v int)"); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	px := routedProxy(t, cl, kinetictest.Params{})
	replica := cl.Standbys[0]
	for round := 1; round <= 3; round++ {
		rc := rawConnect(t, ctx, px.AppDSN())
		// The session reads from the replica first (its routing is live).
		rc.send(&pgproto3.Query{String: "select (inet_server_port() = " + fmt.Sprint(replica.Port) + ")::text"})
		rc.want(4, "RowDescription D:true C:SELECT 1 Z:I")
		if err := replica.PauseReplay(ctx); err != nil {
			t.Fatal(err)
		}
		rc.send(&pgproto3.Query{String: "begin"})
		rc.want(2, "C:BEGIN Z:T")
		rc.send(&pgproto3.Query{String: "insert into streamed_commit values (1)"})
		rc.want(2, "C:INSERT 0 1 Z:T")
		rc.send(&pgproto3.Parse{Query: "select count(*)::text from streamed_commit"}, &pgproto3.Bind{},
			&pgproto3.Execute{}, &pgproto3.Flush{})
		rc.want(4, fmt.Sprintf("ParseComplete BindComplete D:%d C:SELECT 1", round))
		rc.send(&pgproto3.Parse{Query: "commit"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		rc.want(4, "ParseComplete BindComplete C:COMMIT Z:I")
		rc.send(&pgproto3.Query{String: "select count(*)::text || ' rows on ' || inet_server_port() from streamed_commit"})
		got := rc.expect(4)
		if want := fmt.Sprintf("RowDescription D:%d rows on %d C:SELECT 1 Z:I", round, cl.Primary.Port); got != want {
			t.Fatalf("round %d: the read after the COMMIT: got %s, want %s (the replica has not replayed the commit)", round, got, want)
		}
		if err := replica.ResumeReplay(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitReplicated(ctx); err != nil {
			t.Fatal(err)
		}
		rc.close()
	}
}
