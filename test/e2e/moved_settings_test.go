package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestMovedSetUndoneOnPooledPrimary: a SET routed at a Flush to a
// replica, then a BEGIN that moves the rest of the unit to the primary.
// The SET belongs to the block there, so when the block fails PostgreSQL
// undoes it and reports the value the client logged in with. In
// transaction pooling the primary's connection may hold, committed, the
// very settings the moved unit needs (another client with the same
// startup settings left them, or this one earlier): the proxy took them
// for the moved unit's own and made nothing inside the block, so the
// failure undid nothing and the client never heard its application_name
// was back (the differential test's regression 2200866276034504366
// keep=1,2,3,5, one CI run in many: a connection another sequence had
// left so was reused).
func TestMovedSetUndoneOnPooledPrimary(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	px := routedProxy(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1, AcquireTimeout: 5000})
	dsn := px.AppDSN() + "&application_name=moved"

	c := rawConnect(t, ctx, dsn)
	// The primary's connection is left with the settings the moved unit
	// will need: application_name '' (made there by the read with the
	// primary hint), then changed back on a replica.
	c.send(&pgproto3.Query{String: "set application_name = ''"})
	c.want(2, "C:SET Z:I")
	c.send(&pgproto3.Query{String: "/* pg-kinetic: primary */ select current_setting('application_name') || ' on ' || inet_server_port()"})
	c.want(4, fmt.Sprintf("RowDescription D: on %d C:SELECT 1 Z:I", cl.Primary.Port))
	c.send(&pgproto3.Query{String: "set application_name = 'moved'"})
	c.want(2, "C:SET Z:I")

	c.send(&pgproto3.Parse{Query: "set application_name = ''"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})
	c.want(3, "ParseComplete BindComplete C:SET")
	c.send(&pgproto3.Parse{Query: "begin"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})
	c.want(3, "ParseComplete BindComplete C:BEGIN")
	c.send(&pgproto3.Parse{Query: "select inet_server_port()::text"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if got, want := c.expectParams(6, true), fmt.Sprintf("ParseComplete BindComplete D:%d C:SELECT 1 S:application_name= Z:T", cl.Primary.Port); got != want {
		t.Fatalf("the block on the primary:\ngot  %s\nwant %s", got, want)
	}
	c.send(&pgproto3.Query{String: "select 1/0"})
	if got, want := c.expectParams(3, true), "E:22012 S:application_name=moved Z:E"; got != want {
		t.Fatalf("the block fails (PostgreSQL undoes the SET made in it and says so):\ngot  %s\nwant %s", got, want)
	}
	c.send(&pgproto3.Query{String: "rollback"})
	c.want(2, "C:ROLLBACK Z:I")
	c.send(&pgproto3.Query{String: "/* pg-kinetic: primary */ select current_setting('application_name')"})
	c.want(4, "RowDescription D:moved C:SELECT 1 Z:I")
	c.close()
}
