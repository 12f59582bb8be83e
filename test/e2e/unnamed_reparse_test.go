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

// TestStandInOfAnotherClient: in a failed transaction the proxy prepares
// a stand-in (an empty query with the statement's parameter types) in
// place of a client's statement that the server connection does not
// hold, so the client's Bind gets the answer PostgreSQL would give. The
// server connection is shared (transaction pooling, pool size 1), so its
// record may hold another client's stand-in of the same name: that is the
// same statement only with the same parameter types. Before the fix the
// record said "a stand-in" without the types; Y's Bind of zero
// parameters then ran against X's one-parameter stand-in and got 08P01
// "bind message supplies 0 parameters, but prepared statement requires
// 1" where PostgreSQL answers 25P02 (differential sequence
// 5826723512045767604).
func TestStandInOfAnotherClient(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1})
	x := rawConnect(t, ctx, px.AppDSN())
	y := rawConnect(t, ctx, px.AppDSN())
	y.send(&pgproto3.Parse{Name: "s", Query: "select 'y'"}, &pgproto3.Sync{})
	y.want(2, "ParseComplete Z:I")
	x.send(&pgproto3.Parse{Name: "s", Query: "select $1::int::text"}, &pgproto3.Sync{})
	x.want(2, "ParseComplete Z:I")
	for round := 0; round < 2; round++ {
		// Y's statement goes back on the connection, then X, in a failed
		// transaction, gets its one-parameter stand-in there.
		y.send(&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		y.want(4, "BindComplete D:y C:SELECT 1 Z:I")
		x.send(&pgproto3.Query{String: "begin"}, &pgproto3.Query{String: "select 1/0"})
		x.want(4, "C:BEGIN Z:T E:22012 Z:E")
		x.send(&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		x.want(2, "E:25P02 Z:E")
		x.send(&pgproto3.Query{String: "rollback"})
		x.want(2, "C:ROLLBACK Z:I")
		// Y, in a failed transaction, binds its own zero-parameter
		// statement: 25P02, as directly.
		y.send(&pgproto3.Query{String: "begin"}, &pgproto3.Query{String: "select 1/0"})
		y.want(4, "C:BEGIN Z:T E:22012 Z:E")
		y.send(&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		y.want(2, "E:25P02 Z:E")
		y.send(&pgproto3.Query{String: "rollback"})
		y.want(2, "C:ROLLBACK Z:I")
		// Both statements still run as their clients prepared them.
		x.send(&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("7")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		x.want(4, "BindComplete D:7 C:SELECT 1 Z:I")
	}
	x.close()
	y.close()
}

// TestStandInAfterFailingExecute: a pipelined batch in a failed
// transaction Describes and Executes a portal of the failed batch before
// it, then Binds a statement this server connection holds another
// client's statement under (transaction pooling, pool size 1). The
// proxy prepares the client's statement ahead of the batch; in a failed
// transaction that must be a stand-in, as the real Parse fails (25P02)
// ahead of everything and took the place of the Describe's NoData. It
// used no stand-in in a batch with an Execute before the Bind, since a
// COMMIT or ROLLBACK run there would end the failed state; now only an
// Execute whose portal may run one counts (differential sequence
// 2630309524058918675, both transaction-pooling modes).
func TestStandInAfterFailingExecute(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1})
	tbl := uniqueIdent("standin")
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table "+tbl+" (k int, v text)"); err != nil {
		t.Fatal(err)
	}
	y := rawConnect(t, ctx, px.AppDSN())
	x := rawConnect(t, ctx, px.AppDSN())
	y.send(&pgproto3.Parse{Name: "s", Query: "update " + tbl + " set v = v || '+' where k <= $1"}, &pgproto3.Describe{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{})
	y.want(4, "ParseComplete ParameterDescription NoData Z:I")
	x.send(&pgproto3.Parse{Name: "s", Query: "select $1::int::text"}, &pgproto3.Sync{})
	x.want(2, "ParseComplete Z:I")
	for round := 0; round < 2; round++ {
		// X's statement is on the connection.
		x.send(&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("3")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		x.want(4, "BindComplete D:3 C:SELECT 1 Z:I")
		y.send(&pgproto3.Query{String: "begin"})
		y.want(2, "C:BEGIN Z:T")
		y.send(&pgproto3.Parse{Query: "release savepoint x1"}, &pgproto3.Bind{DestinationPortal: "p1"}, &pgproto3.Execute{Portal: "p1"}, &pgproto3.Sync{},
			&pgproto3.Describe{ObjectType: 'P', Name: "p1"}, &pgproto3.Execute{Portal: "p1", MaxRows: 2},
			&pgproto3.Bind{DestinationPortal: "p2", PreparedStatement: "s", Parameters: [][]byte{[]byte("5")}},
			&pgproto3.Describe{ObjectType: 'P', Name: "p2"}, &pgproto3.Execute{Portal: "p2"}, &pgproto3.Sync{})
		y.want(7, "ParseComplete BindComplete E:3B001 Z:E NoData E:25P02 Z:E")
		// A ROLLBACK portal Executed before the Bind ends the failed
		// state: the real statement runs after it.
		y.send(&pgproto3.Parse{Query: "rollback"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("5")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		y.want(6, "ParseComplete BindComplete C:ROLLBACK BindComplete C:UPDATE 0 Z:I")
	}
	x.close()
	y.close()
}

// TestLoginSettingsDropUnnamed: in transaction pooling a session logging
// in with other startup settings than the server connection it gets has
// them set there with a simple Query, which drops the server's unnamed
// statement: another client's. The proxy's record of the connection must
// forget it too. Before the fix it did not, and C, whose unnamed
// statement has the same text as the one the record named, bound it
// without a Parse and got 26000 "unnamed prepared statement does not
// exist" (differential sequences 6054448934885829353 and
// 13373058581582800924, transaction-routing).
func TestLoginSettingsDropUnnamed(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1})
	c := rawConnect(t, ctx, px.AppDSN()+"&application_name=kinetic_b")
	c.send(&pgproto3.Parse{Query: "select 'x'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	c.want(5, "ParseComplete BindComplete D:x C:SELECT 1 Z:I")
	// A, with other settings, Parses the same text there.
	a := rawConnect(t, ctx, px.AppDSN()+"&application_name=kinetic_a")
	a.send(&pgproto3.Parse{Query: "select 'x'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	a.want(5, "ParseComplete BindComplete D:x C:SELECT 1 Z:I")
	// B logs in with C's settings: they are set on the connection.
	b := rawConnect(t, ctx, px.AppDSN()+"&application_name=kinetic_b")
	// C binds its unnamed statement: it runs, as directly.
	c.send(&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	c.want(4, "BindComplete D:x C:SELECT 1 Z:I")
	a.close()
	b.close()
	c.close()
}

// TestPipelinedBatchInFailedTx: in a pipeline, a batch whose statement
// must be prepared again on the server connection (another client's
// statement of that name is there) runs in a transaction the batch before
// it fails. PostgreSQL answers its first message (a Describe of a missing
// statement: 26000) and skips the rest. The proxy knew the transaction was
// failed only once the batch before was answered, and before the fix
// wrote its Parse ahead of the whole batch, where the server failed it
// with 25P02 in place of the Describe's 26000 (differential
// 15569880947103983533 and 2024141487199610067, transaction modes, with
// another sequence on the same server connection).
func TestPipelinedBatchInFailedTx(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1})
	a := rawConnect(t, ctx, px.AppDSN())
	b := rawConnect(t, ctx, px.AppDSN())
	a.send(&pgproto3.Parse{Name: "st", Query: "select 1"}, &pgproto3.Sync{})
	a.want(2, "ParseComplete Z:I")
	for round := 0; round < 2; round++ {
		// B's statement of that name replaces A's on the one connection.
		b.send(&pgproto3.Parse{Name: "st", Query: "select 2"}, &pgproto3.Bind{PreparedStatement: "st"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		b.want(5, "ParseComplete BindComplete D:2 C:SELECT 1 Z:I")
		b.send(&pgproto3.Close{ObjectType: 'S', Name: "st"}, &pgproto3.Sync{})
		b.want(2, "CloseComplete Z:I")
		a.send(&pgproto3.Query{String: "begin"})
		a.want(2, "C:BEGIN Z:T")
		a.send(
			&pgproto3.Bind{PreparedStatement: "nosuch"}, &pgproto3.Execute{}, &pgproto3.Sync{},
			&pgproto3.Describe{ObjectType: 'S', Name: "nosuch"}, &pgproto3.Bind{PreparedStatement: "nosuch"}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "st"}, &pgproto3.Execute{}, &pgproto3.Sync{},
			&pgproto3.Query{String: "rollback"})
		a.want(6, "E:26000 Z:E E:26000 Z:E C:ROLLBACK Z:I")
		// A's own statement still runs.
		a.send(&pgproto3.Bind{PreparedStatement: "st"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		a.want(4, "BindComplete D:1 C:SELECT 1 Z:I")
	}
	a.close()
	b.close()
}

// TestDescribeOfPreparedThenParsed: a batch Describes a SQL-PREPAREd
// statement, then Parses and Describes a protocol one. The answers to the
// two Describes come in order; before the fix the proxy kept a place in
// that order only for statements it had seen Parsed, so the PREPAREd
// SELECT's parameter types and row shape were taken for the DELETE's.
// When the DELETE was prepared again on the connection (another client's
// statement of that name had replaced it), its NoData differed from the
// recorded rows, and its Bind failed with 0A000 "cached plan must not
// change result type" where PostgreSQL runs it (differential
// 17198292917881895050, transaction modes, with another sequence on the
// same connection).
func TestDescribeOfPreparedThenParsed(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1})
	tbl := uniqueIdent("described")
	direct := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table "+tbl+" (k int, v text)"); err != nil {
		t.Fatal(err)
	}
	a := rawConnect(t, ctx, px.AppDSN())
	b := rawConnect(t, ctx, px.AppDSN())
	a.send(&pgproto3.Query{String: "prepare ps (int) as select k, v from " + tbl + " where k <= $1"})
	a.want(2, "C:PREPARE Z:I")
	a.send(&pgproto3.Describe{ObjectType: 'S', Name: "ps"},
		&pgproto3.Parse{Name: "s3", Query: "delete from " + tbl + " where k = $1::int"},
		&pgproto3.Describe{ObjectType: 'S', Name: "s3"}, &pgproto3.Sync{})
	a.want(6, "ParameterDescription RowDescription ParseComplete ParameterDescription NoData Z:I")
	for round := 0; round < 2; round++ {
		// B's statement of that name replaces A's on the one connection.
		b.send(&pgproto3.Parse{Name: "s3", Query: "select 2"}, &pgproto3.Bind{PreparedStatement: "s3"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		b.want(5, "ParseComplete BindComplete D:2 C:SELECT 1 Z:I")
		b.send(&pgproto3.Close{ObjectType: 'S', Name: "s3"}, &pgproto3.Sync{})
		b.want(2, "CloseComplete Z:I")
		a.send(&pgproto3.Bind{PreparedStatement: "s3", Parameters: [][]byte{[]byte("8")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		a.want(3, "BindComplete C:DELETE 0 Z:I")
	}
	a.close()
	b.close()
}
