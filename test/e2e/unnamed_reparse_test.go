package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestFailedReparseDropsUnnamed: in transaction pooling a client's unnamed
// statement is Parsed again on the server connection its Bind gets. When
// that Parse fails on the server (here: its table was dropped since), the
// server has dropped the unnamed statement it held before — PostgreSQL
// releases the old unnamed statement before it parses the new one — so
// the proxy's record of that connection must say "none", not the earlier
// statement. Otherwise the session whose unnamed statement that was binds
// it there without Parsing it again and gets 26000 "unnamed prepared
// statement does not exist", which it would never get directly. One
// server connection (pool size 1) makes both sessions share it.
func TestFailedReparseDropsUnnamed(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1})
	tbl := uniqueIdent("reparse")
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table "+tbl+" (k int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Exec(context.Background(), "drop table if exists "+tbl) })

	a := rawConnect(t, ctx, px.AppDSN())
	b := rawConnect(t, ctx, px.AppDSN())
	// A's unnamed statement reads the table.
	a.send(&pgproto3.Parse{Query: "select count(*)::text from " + tbl}, &pgproto3.Sync{})
	a.want(2, "ParseComplete Z:I")
	// B's unnamed statement, on the same server connection.
	b.send(&pgproto3.Parse{Query: "select 'b'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	b.want(5, "ParseComplete BindComplete D:b C:SELECT 1 Z:I")
	// The table goes; A binds its statement: the proxy Parses it again
	// there, which fails (42P01), as A's own statement would fail
	// directly when it is planned again.
	if _, err := direct.Exec(ctx, "drop table "+tbl); err != nil {
		t.Fatal(err)
	}
	a.send(&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	a.want(2, "E:42P01 Z:I")
	// B binds its own unnamed statement again: it must run.
	b.send(&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	b.want(4, "BindComplete D:b C:SELECT 1 Z:I")
	a.close()
	b.close()
}
