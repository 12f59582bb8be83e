package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestCopyAfterCopyReadsItsWrites: after COPY FROM STDIN the proxy owes
// the session a read of the primary's position (nothing else may follow
// a COPY on the wire), paid before the session's next unit. When that
// next unit is another COPY, the answer to the request that pays the
// first debt may arrive after the second COPY was written: it is a
// position from before the second COPY's commit and must not pay that
// COPY's debt. Before the fix it did, and the read after the second COPY
// went to a standby on a token below it and missed the row, with a
// success status (differential sequence 5889086208397092577; about 1
// read in 40 here). A first COPY that fails leaves a debt as well.
func TestCopyAfterCopyReadsItsWrites(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 3*time.Minute)
	px := routedProxy(t, cl, kinetictest.Params{})
	tbl := uniqueIdent("copydebt")
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table "+tbl+" (run int, k int)"); err != nil {
		t.Fatal(err)
	}
	copyIn := func(rc *rawConn, rows string, want string) {
		t.Helper()
		rc.send(&pgproto3.Query{String: "copy " + tbl + " (run, k) from stdin"})
		rc.want(1, "CopyInResponse")
		rc.send(&pgproto3.CopyData{Data: []byte(rows)}, &pgproto3.CopyDone{})
		rc.want(2, want)
	}
	const rounds = 200
	standby := cl.StandbyPorts()
	onStandby := 0
	for run := 0; run < rounds; run++ {
		rc := rawConnect(t, ctx, px.AppDSN())
		rc.send(&pgproto3.Parse{Name: "n", Query: "/* pg-kinetic: replica */ select count(*)::text || ' ' || inet_server_port() from " + tbl + " where run = $1",
			ParameterOIDs: []uint32{23}}, &pgproto3.Sync{})
		rc.want(2, "ParseComplete Z:I")
		if run%2 == 0 {
			copyIn(rc, fmt.Sprintf("%d\t1\n", run), "C:COPY 1 Z:I")
		} else {
			copyIn(rc, fmt.Sprintf("%d\t1\n%d\tx\n", run, run), "E:22P02 Z:I")
		}
		copyIn(rc, fmt.Sprintf("%d\t2\n", run), "C:COPY 1 Z:I")
		want := 1 + 1 - run%2
		rc.send(&pgproto3.Bind{PreparedStatement: "n", Parameters: [][]byte{[]byte(fmt.Sprint(run))}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		got := rc.expect(4)
		var n, port int
		if _, err := fmt.Sscanf(got, "BindComplete D:%d %d C:SELECT 1 Z:I", &n, &port); err != nil {
			t.Fatalf("run %d: %s", run, got)
		}
		if n != want {
			t.Fatalf("run %d: the read after the session's two COPYs saw %d of its %d rows (port %d; the standbys are %v)",
				run, n, want, port, standby)
		}
		if standby[port] {
			onStandby++
		}
		rc.close()
	}
	// (Reads that found no standby fresh went to the primary: correct,
	// but the test is only worth something if many ran on a standby; on
	// an idle machine all of them do.)
	if onStandby < rounds/10 {
		t.Fatalf("only %d of %d reads ran on a standby", onStandby, rounds)
	}
	t.Logf("%d of %d reads on a standby", onStandby, rounds)
}
