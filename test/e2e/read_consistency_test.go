package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestStrictReadConsistencyAcrossConnections: with read_consistency =
// "strict", a read on one connection sees what another connection
// committed through kineticd just before, as an application's connection
// pool needs (go-pg's SelectAndCount counts on another connection than
// the insert before it ran on, and once counted 0 of 3 rows), and such
// reads still reach the standbys. The same loop with the default
// ("session") is run too, and how many of its reads missed the other
// connection's row is logged: the session contract allows it.
func TestStrictReadConsistencyAcrossConnections(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 180*time.Second)
	standbys := cl.StandbyPorts()
	const rounds = 150
	for _, pm := range []string{"session", "transaction"} {
		for _, consistency := range []string{"strict", "session"} {
			t.Run(pm+"/"+consistency, func(t *testing.T) {
				px := routedProxy(t, cl, kinetictest.Params{PoolMode: pm, FreshnessExtra: fmt.Sprintf("read_consistency = %q", consistency)})
				table := "read_consistency_" + pm + "_" + consistency
				w := connect(t, ctx, px.AppDSN())
				r := connect(t, ctx, px.AppDSN())
				mustExec(t, ctx, w, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (n int)")
				t.Cleanup(func() { _ = cl.Primary.Exec(ctx, "DROP TABLE IF EXISTS "+table) })
				onStandby, missed := 0, 0
				for i := 1; i <= rounds; i++ {
					if _, err := w.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", i); err != nil {
						t.Fatal(err)
					}
					var n, port int
					if err := r.QueryRow(ctx, "SELECT count(*), inet_server_port() FROM "+table).Scan(&n, &port); err != nil {
						t.Fatalf("read %d: %v", i, err)
					}
					if standbys[port] {
						onStandby++
					}
					if n != i {
						missed++
						if consistency == "strict" {
							t.Errorf("read %d on another connection (port %d) counted %d rows, want %d", i, port, n, i)
						}
					}
				}
				t.Logf("read_consistency %s, %s pooling: %d of %d reads on a standby, %d missed the other connection's insert",
					consistency, pm, onStandby, rounds, missed)
				if onStandby == 0 {
					t.Errorf("no read reached a standby: the case is not exercised")
				}
			})
		}
	}
}
