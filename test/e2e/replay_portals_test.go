package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestMovedPortalOfClosedStatement: a unit routed at a Flush to a standby
// binds portal p2 from statement s1, runs it, Closes s1 and then BEGINs:
// the unit moves to the primary, and the portals its standby part made
// are bound again there (replay.go). p2 outlives s1, as on the server,
// so it is bound again from the unnamed statement with s1's text. Before
// the fix a Closed statement stopped the replay: p2 was missing on the
// primary and a later Execute of it got 34000 "portal does not exist"
// where PostgreSQL answers (here, in the failed block) 25P02
// (differential sequence 15105487470337724142, both routed modes).
func TestMovedPortalOfClosedStatement(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 60*time.Second)
	t.Run("Session", func(t *testing.T) { movedPortal(t, ctx, cl, routedProxy(t, cl, kinetictest.Params{})) })
	t.Run("Transaction", func(t *testing.T) {
		movedPortal(t, ctx, cl, routedProxy(t, cl, kinetictest.Params{PoolMode: "transaction"}))
	})
}

func movedPortal(t *testing.T, ctx context.Context, cl *pgtest.Cluster, px *kinetictest.Proxy) {
	standby := cl.StandbyPorts()
	onStandby := 0
	for round := 0; round < 5; round++ {
		rc := rawConnect(t, ctx, px.AppDSN())
		rc.send(&pgproto3.Parse{Name: "s1", Query: "select inet_server_port()::text"}, &pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Flush{})
		rc.want(3, "ParseComplete ParameterDescription RowDescription")
		rc.send(&pgproto3.Bind{DestinationPortal: "p2", PreparedStatement: "s1"}, &pgproto3.Execute{Portal: "p2"},
			&pgproto3.Close{ObjectType: 'S', Name: "s1"},
			&pgproto3.Parse{Query: "begin"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		got := rc.expect(8)
		var port int
		if _, err := fmt.Sscanf(got, "BindComplete D:%d C:SELECT 1 CloseComplete ParseComplete BindComplete C:BEGIN Z:T", &port); err != nil {
			t.Fatalf("round %d: %s", round, got)
		}
		if standby[port] {
			onStandby++
		}
		// The completed portal is there, in the block: run again, it
		// returns no more rows; in the failed block it gets 25P02.
		rc.send(&pgproto3.Execute{Portal: "p2"}, &pgproto3.Sync{})
		rc.want(2, "C:SELECT 0 Z:T")
		rc.send(&pgproto3.Parse{Query: "select nosuchcol from pg_class"}, &pgproto3.Sync{})
		rc.want(2, "E:42703 Z:E")
		rc.send(&pgproto3.Execute{Portal: "p2", MaxRows: 2}, &pgproto3.Flush{})
		if got := rc.expect(1); got != "E:25P02" {
			t.Fatalf("round %d: Execute of p2 in the failed block: %s, want E:25P02 (as PostgreSQL)", round, got)
		}
		rc.send(&pgproto3.Sync{})
		rc.want(1, "Z:E")
		rc.send(&pgproto3.Query{String: "rollback"})
		rc.want(2, "C:ROLLBACK Z:I")
		rc.close()
	}
	// The test means something only if the first part ran on a standby.
	if onStandby == 0 {
		t.Fatalf("no round's first part ran on a standby (%s)", strings.TrimSpace(fmt.Sprint(standby)))
	}
}
