package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestPrimaryDownNewSessionsServeReads: with the primary stopped, new
// sessions are still admitted (through a replica, with a proxy PID in
// session pooling); their reads run on the replicas (pg_is_in_recovery),
// their writes fail with 08006 naming the primary, never reaching a
// replica; once the primary is back the same sessions write there.
func TestPrimaryDownNewSessionsServeReads(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 90*time.Second)
	tbl := chaosTable(t, ctx, cl)
	reps := cl.StandbyPorts()
	pools := []string{"session", "transaction"}
	dsns := map[string]string{}
	for _, pool := range pools {
		dsns[pool] = chaosProxy(t, cl, kinetictest.Params{PoolMode: pool, Replicas: addrs(cl.Standbys...)}, "")
		awaitReplicaRead(t, dsns[pool], reps)
	}
	if err := cl.Primary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	sessions := map[string]*pgx.Conn{}
	defer func() {
		for _, c := range sessions {
			c.Close(context.Background())
		}
	}()
	for _, pool := range pools {
		t.Run(pool+"/admitted", func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			c, err := pgx.Connect(cctx, dsns[pool])
			cancel()
			if err != nil {
				t.Fatalf("new session with the primary down: %v (SQLSTATE %q)", err, pgCode(err))
			}
			sessions[pool] = c // (closed by the parent test: the sessions go on below)
			var inRecovery bool
			var port int
			if err := c.QueryRow(ctx, "select pg_is_in_recovery(), inet_server_port()").Scan(&inRecovery, &port); err != nil {
				t.Fatalf("read with the primary down: %v", err)
			}
			if !inRecovery || !reps[port] {
				t.Fatalf("read ran on port %d (in recovery %v), want a replica", port, inRecovery)
			}
			if n := queryInt(t, ctx, c, "select count(*) from "+tbl); n != 0 {
				t.Errorf("table has %d rows, want 0", n)
			}
			_, err = c.Exec(ctx, "insert into "+tbl+" values (1, 'while down')")
			pe := asPgError(err)
			if pe == nil || pe.Code != "08006" || !strings.Contains(pe.Message, "primary") {
				t.Fatalf("write with the primary down: %v, want 08006 naming the primary", err)
			}
			t.Logf("write refused: %s (%s)", pe.Message, pe.Detail)
			// The session goes on: a read after the failed write.
			if err := c.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
				t.Fatalf("read after the refused write: %v, in recovery %v", err, inRecovery)
			}
		})
	}
	if err := cl.Primary.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i, pool := range pools {
		t.Run(pool+"/writes-after-recovery", func(t *testing.T) {
			c := sessions[pool]
			if c == nil {
				t.Fatal("the session was not admitted (see above)")
			}
			awaitCond(t, 20*time.Second, "a write to reach the restarted primary", func() (bool, error) {
				var inRecovery bool
				err := c.QueryRow(ctx, "insert into "+tbl+" values ($1, 'after') returning pg_is_in_recovery()", 10+i).Scan(&inRecovery)
				if err != nil {
					return false, err
				}
				if inRecovery {
					t.Fatal("a write ran on a server in recovery")
				}
				return true, nil
			})
		})
	}
	// Nothing was written anywhere while the primary was down.
	c := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if n := queryInt(t, ctx, c, "select count(*) from "+tbl+" where v = 'while down'"); n != 0 {
		t.Errorf("%d rows written while the primary was down", n)
	}
}
