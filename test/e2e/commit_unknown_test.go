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

// TestCommitInFlightWhenPrimaryDies: a COMMIT, or a write outside a
// transaction block, whose answer never came because the primary died is
// reported as 08007 (transaction resolution unknown) and not run again; a
// statement inside a transaction block that dies with the primary is
// rolled back for sure and gets 08006.
func TestCommitInFlightWhenPrimaryDies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		routing string
		pool    string
		setup   []string // run first, on the session
		stmt    string   // in flight when the primary is killed
		want    string
	}{
		{"autocommit write, routing off", "off", "session", nil,
			"insert into %t select 1, 'x' from pg_sleep(3)", "08007"},
		{"autocommit write, routed, transaction pooling", "prefer_replica", "transaction", nil,
			"insert into %t select 1, 'x' from pg_sleep(3)", "08007"},
		{"COMMIT running a deferred trigger, routed", "prefer_replica", "session",
			[]string{"begin", "insert into %t values (1, 'slow')"}, "commit", "08007"},
		{"a write inside a transaction block", "prefer_replica", "session",
			[]string{"begin"}, "insert into %t select 1, 'x' from pg_sleep(3)", "08006"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := pgtest.New(t, pgtest.Options{Standbys: 1})
			ctx := ctxT(t, 60*time.Second)
			tbl := chaosTable(t, ctx, cl)
			// A deferred constraint trigger that sleeps: COMMIT takes 3 s.
			pc := connect(t, ctx, cl.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
			for _, q := range []string{
				"create function " + tbl + "_slow() returns trigger language plpgsql as $$ begin if new.v = 'slow' then perform pg_sleep(3); end if; return null; end $$",
				"create constraint trigger " + tbl + "_slow after insert on " + tbl + " deferrable initially deferred for each row execute function " + tbl + "_slow()",
			} {
				if _, err := pc.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			pc.Close(ctx)
			p := kinetictest.Params{PoolMode: tc.pool, ReadRoutingMode: tc.routing}
			if tc.routing != "off" {
				p.Replicas = addrs(cl.Standbys...)
			}
			dsn := chaosProxy(t, cl, p, "")
			c := connect(t, ctx, dsn)
			sub := func(q string) string { return strings.ReplaceAll(q, "%t", tbl) }
			for _, q := range tc.setup {
				if _, err := c.Exec(ctx, sub(q), pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := c.Exec(context.Background(), sub(tc.stmt), pgx.QueryExecModeSimpleProtocol)
				done <- err
			}()
			awaitCond(t, 10*time.Second, "the statement to run on the primary", func() (bool, error) {
				n, err := cl.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where wait_event = 'PgSleep'")
				return n == "1", err
			})
			if err := cl.Primary.Kill(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if got := pgCode(err); got != tc.want {
					t.Fatalf("statement in flight when the primary died: %v (SQLSTATE %q), want %s", err, got, tc.want)
				}
				t.Logf("%s: %v", tc.want, err)
			case <-time.After(20 * time.Second):
				t.Fatal("no answer 20 s after the primary died")
			}
		})
	}
}
