package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// adminCmd runs one admin command on its own console session.
func adminCmd(ctx context.Context, px *kinetictest.Proxy, cmd string) error {
	c, err := pgx.Connect(ctx, px.DSN(pgtest.AppUser, pgtest.AppPassword, "pgkinetic"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, cmd, pgx.QueryExecModeSimpleProtocol)
	return err
}

// TestPauseResume: PAUSE waits for the transaction in flight and holds new
// units (of an idle session, in each pool mode) until RESUME; an unknown
// route is an error.
func TestPauseResume(t *testing.T) {
	cl := pgtest.Shared(t)
	for _, pool := range []string{"session", "transaction"} {
		t.Run(pool, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: pool})
			a, b := connect(t, ctx, px.AppDSN()), connect(t, ctx, px.AppDSN())
			if _, err := a.Exec(ctx, "begin"); err != nil {
				t.Fatal(err)
			}
			if n := queryInt(t, ctx, a, "select 1"); n != 1 {
				t.Fatal(n)
			}
			paused := make(chan error, 1)
			go func() { paused <- adminCmd(ctx, px, "PAUSE main") }()
			select {
			case err := <-paused:
				t.Fatalf("PAUSE returned (%v) with a transaction in flight", err)
			case <-time.After(300 * time.Millisecond):
			}
			held := make(chan error, 1)
			go func() {
				var n int
				held <- b.QueryRow(ctx, "select 2").Scan(&n)
			}()
			// The transaction in flight goes on, and PAUSE returns when it ends.
			if n := queryInt(t, ctx, a, "select 3"); n != 3 {
				t.Fatal(n)
			}
			if _, err := a.Exec(ctx, "commit"); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-paused:
				if err != nil {
					t.Fatalf("PAUSE: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("PAUSE did not return after the transaction ended")
			}
			select {
			case err := <-held:
				t.Fatalf("a new unit ran while paused (%v)", err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := adminCmd(ctx, px, "RESUME"); err != nil {
				t.Fatalf("RESUME: %v", err)
			}
			select {
			case err := <-held:
				if err != nil {
					t.Fatalf("held unit after RESUME: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the held unit did not run after RESUME")
			}
			if err := adminCmd(ctx, px, "PAUSE nosuch"); pgCode(err) != "42704" {
				t.Errorf("PAUSE of an unknown route: %v, want 42704", err)
			}
		})
	}
}

// TestPauseResumeUnderPgbench: a PAUSE/RESUME cycle in the middle of a
// pgbench tpcb-like run (transaction pooling) fails no transaction.
func TestPauseResumeUnderPgbench(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := ctxT(t, 3*time.Minute)
	db := uniqueIdent("pause")
	if err := c.Primary.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+pgtest.AppUser); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.Primary.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	})
	extra := fmt.Sprintf("\n[[routes]]\nname = \"bench\"\ndatabase = %q\n[routes.primary]\naddress = %q\n[routes.pool]\nsize = 8\n",
		db, c.Primary.Addr())
	px := kinetictest.Start(t, c, kinetictest.Params{PoolMode: "transaction", Extra: extra})
	env := clientEnv()
	host := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(px.Port()), "-U", pgtest.AppUser}
	if res := runClient(t, ctx, env, nil, "pgbench", append(append([]string{"-i", "-s", "1"}, host...), db)...); res.code != 0 {
		t.Fatalf("pgbench -i:\n%s", res)
	}
	done := make(chan psqlResult, 1)
	go func() {
		done <- runClient(t, ctx, env, nil, "pgbench", append(append([]string{"-c", "4", "-j", "2", "-T", "6"}, host...), db)...)
	}()
	time.Sleep(2 * time.Second)
	start := time.Now()
	if err := adminCmd(ctx, px, "PAUSE bench"); err != nil {
		t.Fatalf("PAUSE: %v", err)
	}
	t.Logf("PAUSE returned after %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	if err := adminCmd(ctx, px, "RESUME bench"); err != nil {
		t.Fatalf("RESUME: %v", err)
	}
	res := <-done
	r, err := parsePgbench(res.stdout)
	if res.code != 0 || err != nil || r.failed != 0 || r.processed == 0 {
		t.Fatalf("pgbench across PAUSE/RESUME: processed %d, failed %d, %v\n%s", r.processed, r.failed, err, res)
	}
	t.Logf("pgbench across a 1 s PAUSE: %d transactions, %d failed, %.0f tps", r.processed, r.failed, r.tps)
}

// TestPlannedSwitchoverUnderPgbench: PAUSE, stop the primary, promote the
// standby, repoint the route (reload), RESUME, in the middle of a pgbench
// tpcb-like run, in transaction pooling (routing off) and in session
// pooling with the standby as a replica: pgbench's sessions go on against
// the new primary and no transaction fails.
func TestPlannedSwitchoverUnderPgbench(t *testing.T) {
	for _, tc := range []struct{ pool, routing string }{{"transaction", "off"}, {"session", "prefer_replica"}} {
		t.Run(tc.pool+"/"+tc.routing, func(t *testing.T) { switchoverUnderPgbench(t, tc.pool, tc.routing) })
	}
}

func switchoverUnderPgbench(t *testing.T, pool, routing string) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 3*time.Minute)
	p := kinetictest.Params{PoolMode: pool, PoolSize: 8, ReadRoutingMode: routing}
	if routing != "off" {
		p.Replicas = addrs(cl.Standbys...)
	}
	px := kinetictest.Start(t, cl, p)
	env := clientEnv()
	host := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(px.Port()), "-U", pgtest.AppUser}
	if res := runClient(t, ctx, env, nil, "pgbench", append(append([]string{"-i", "-s", "1"}, host...), pgtest.AppDB)...); res.code != 0 {
		t.Fatalf("pgbench -i:\n%s", res)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan psqlResult, 1)
	go func() {
		done <- runClient(t, ctx, env, nil, "pgbench", append(append([]string{"-c", "4", "-j", "2", "-T", "8"}, host...), pgtest.AppDB)...)
	}()
	time.Sleep(2 * time.Second)
	start := time.Now()
	if err := adminCmd(ctx, px, "PAUSE main"); err != nil {
		t.Fatalf("PAUSE: %v", err)
	}
	old, next := cl.Primary, cl.Standbys[0]
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Promote(ctx, next); err != nil {
		t.Fatal(err)
	}
	p.Primary, p.Replicas = next.Addr(), nil
	if err := os.WriteFile(px.Path, []byte(kinetictest.TOML(cl, p)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := px.Holder.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := px.Server.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := adminCmd(ctx, px, "RESUME main"); err != nil {
		t.Fatalf("RESUME: %v", err)
	}
	t.Logf("switchover (PAUSE to RESUME) took %v", time.Since(start).Round(time.Millisecond))
	res := <-done
	r, err := parsePgbench(res.stdout)
	if res.code != 0 || err != nil || r.failed != 0 || r.processed == 0 {
		t.Fatalf("pgbench across the switchover: processed %d, failed %d, %v\n%s", r.processed, r.failed, err, res)
	}
	// The writes after the switchover are on the new primary.
	c := connect(t, ctx, px.AppDSN())
	var inRecovery bool
	var port int
	if err := c.QueryRow(ctx, "select pg_is_in_recovery(), inet_server_port() from (select txid_current()) w").Scan(&inRecovery, &port); err != nil || inRecovery || port != next.Port {
		t.Fatalf("after the switchover: port %d in recovery %v (%v), want the new primary %d", port, inRecovery, err, next.Port)
	}
	t.Logf("pgbench across a planned switchover: %d transactions, %d failed, %.0f tps", r.processed, r.failed, r.tps)
}
