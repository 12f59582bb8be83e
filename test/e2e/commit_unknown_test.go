package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestCommitInFlightWhenPrimaryDies: a COMMIT, or a write outside a
// transaction block, whose answer never came because the primary died is
// reported as 08007 (transaction resolution unknown) and not run again; a
// statement inside a transaction block that dies with the primary is
// rolled back for sure and gets 08006, as does a read on the primary.
// With routing on, a session whose units in flight leave no transaction
// block open goes on (an ERROR, not a FATAL): its next read is served by
// the standby, so that a write of it the failover lost can still be
// reported (KN002; TestFailoverDrills). Otherwise it ends with a FATAL.
func TestCommitInFlightWhenPrimaryDies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		routing string
		pool    string
		setup   []string // run first, on the session
		stmt    string   // in flight when the primary is killed
		want    string
		keeps   bool // the session goes on
	}{
		{"autocommit write, routing off", "off", "session", nil,
			"insert into %t select 1, 'x' from pg_sleep(3)", "08007", false},
		{"autocommit write, routed, transaction pooling", "prefer_replica", "transaction", nil,
			"insert into %t select 1, 'x' from pg_sleep(3)", "08007", true},
		{"autocommit write, routed, session pooling", "prefer_replica", "session", nil,
			"insert into %t select 1, 'x' from pg_sleep(3)", "08007", true},
		{"a read on the primary, routed", "prefer_replica", "session", nil,
			"/* pg-kinetic: primary */ select pg_sleep(3)", "08006", true},
		{"COMMIT running a deferred trigger, routed", "prefer_replica", "session",
			[]string{"begin", "insert into %t values (1, 'slow')"}, "commit", "08007", true},
		{"a write inside a transaction block, routing off", "off", "session",
			[]string{"begin"}, "insert into %t select 1, 'x' from pg_sleep(3)", "08006", false},
		{"a write inside a transaction block, routed", "prefer_replica", "session",
			[]string{"begin"}, "insert into %t select 1, 'x' from pg_sleep(3)", "08006", true},
		{"a write inside a transaction block, routed, transaction pooling", "prefer_replica", "transaction",
			[]string{"begin"}, "insert into %t select 1, 'x' from pg_sleep(3)", "08006", true},
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
			if tc.routing != "off" {
				awaitReplicaRead(t, dsn, pgtest.Ports(cl.Standbys...))
			}
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
			// Then: the session goes on, its reads on the standby, or it
			// has ended. A block lost with the primary fails until the
			// client ends it.
			if tc.keeps && len(tc.setup) > 0 && tc.stmt != "commit" {
				_, err := c.Exec(ctx, "select 1", pgx.QueryExecModeSimpleProtocol)
				if pgCode(err) != "25P02" {
					t.Fatalf("a statement in the block lost with the primary: %v, want 25P02", err)
				}
				if _, err := c.Exec(ctx, "rollback", pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatalf("ROLLBACK of the block lost with the primary: %v", err)
				}
			}
			port, err := readPort(ctx, c, "/* pg-kinetic: stale-ok */ select inet_server_port()")
			switch {
			case tc.keeps && (err != nil || port != cl.Standbys[0].Port):
				var route string
				_ = c.QueryRow(ctx, "show pg_kinetic.last_route", pgx.QueryExecModeSimpleProtocol).Scan(&route)
				t.Logf("last_route: %s", route)
				t.Fatalf("the session after the error: a read got %v, port %d; want it served by the standby (%d)", err, port, cl.Standbys[0].Port)
			case !tc.keeps && err == nil:
				t.Fatalf("the session went on after the error (a read was answered by port %d); want it ended", port)
			case tc.keeps:
				// And a write fails clearly while there is no primary.
				_, err := c.Exec(ctx, sub("insert into %t values (2, 'y')"), pgx.QueryExecModeSimpleProtocol)
				if pgCode(err) != "08006" {
					t.Fatalf("a write with the primary down after the error: %v, want 08006", err)
				}
			}
		})
	}
}

// TestPipelinedUnitsWhenPrimaryDies: three units pipelined on the primary
// (each with its Sync) when it dies: each gets its error and its
// ReadyForQuery, in order — the write 08007, the reads 08006 (whether they
// reached the primary before its loss or were routed after it) —
// and the session goes on, its next read served by the standby
// (docs/behaviour.md, "Losing the primary").
func TestPipelinedUnitsWhenPrimaryDies(t *testing.T) {
	cl, ctx, tbl, c := routedSessionToKill(t)
	p := c.PgConn().StartPipeline(ctx)
	for _, q := range []string{
		"insert into " + tbl + " select 7, 'x' from pg_sleep(3)",
		"/* pg-kinetic: primary */ select 2",
		"/* pg-kinetic: primary */ select 3",
	} {
		p.SendQueryParams(q, nil, nil, nil, nil)
		p.SendPipelineSync()
	}
	killUnderSleep(t, ctx, cl, p)
	codes := pipelineOutcomes(t, p, 3)
	if want := []string{"08007", "08006", "08006"}; !slices.Equal(codes, want) {
		t.Fatalf("the pipelined units' errors: %v, want %v", codes, want)
	}
	t.Logf("the pipelined units' errors: %v", codes)
	port, err := readPort(ctx, c, "/* pg-kinetic: stale-ok */ select inet_server_port()")
	if err != nil || port != cl.Standbys[0].Port {
		t.Fatalf("a read after the pipeline: port %d, %v; want the standby (%d)", port, err, cl.Standbys[0].Port)
	}
}

// TestIdleBlockWhenPrimaryDies: a session idle inside a transaction block
// when the primary dies goes on (routing on): the block is lost with the
// server, so its next statement fails (08006 naming the loss, then 25P02
// until the block ends), a COMMIT fails instead of passing for a commit,
// a ROLLBACK ends it (simple and extended protocol); then reads are served
// by the standby. The block's SET is undone with it.
func TestIdleBlockWhenPrimaryDies(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  string // how the client ends the block after a failed statement
		ext  bool   // the end in the extended protocol
	}{
		{"COMMIT", "commit", false},
		{"ROLLBACK", "rollback", false},
		{"ROLLBACK, extended protocol", "rollback", true},
		{"COMMIT, extended protocol", "commit", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, ctx, tbl, c := routedSessionToKill(t)
			for _, q := range []string{"begin", "set local work_mem = '7MB'", "set application_name = 'in_lost_block'", "insert into " + tbl + " values (1, 'x')"} {
				if _, err := c.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatal(err)
				}
			}
			if err := cl.Primary.Kill(); err != nil {
				t.Fatal(err)
			}
			_, err := c.Exec(ctx, "select 1", pgx.QueryExecModeSimpleProtocol)
			if code := pgCode(err); code != "08006" {
				t.Fatalf("the first statement after the block was lost: %v, want 08006", err)
			}
			if _, err := c.Exec(ctx, "select 2", pgx.QueryExecModeSimpleProtocol); pgCode(err) != "25P02" {
				t.Fatalf("the next statement in the lost block: %v, want 25P02", err)
			}
			mode := pgx.QueryExecModeSimpleProtocol
			if tc.ext {
				mode = pgx.QueryExecModeDescribeExec
			}
			_, err = c.Exec(ctx, tc.end, mode)
			switch {
			case tc.end == "commit" && pgCode(err) != "08006":
				t.Fatalf("COMMIT of the lost block: %v, want 08006", err)
			case tc.end == "rollback" && err != nil:
				t.Fatalf("ROLLBACK of the lost block: %v", err)
			}
			if st := c.PgConn().TxStatus(); st != 'I' {
				t.Fatalf("transaction status after %s: %c, want I", tc.end, st)
			}
			port, err := readPort(ctx, c, "/* pg-kinetic: stale-ok */ select inet_server_port()")
			if err != nil || port != cl.Standbys[0].Port {
				t.Fatalf("a read after the lost block: port %d, %v; want the standby (%d)", port, err, cl.Standbys[0].Port)
			}
			var app string
			if err := c.QueryRow(ctx, "/* pg-kinetic: stale-ok */ select current_setting('application_name')", pgx.QueryExecModeSimpleProtocol).Scan(&app); err != nil || app == "in_lost_block" {
				t.Fatalf("application_name after the lost block: %q, %v; want the block's SET undone", app, err)
			}
		})
	}
}

// routedSessionToKill starts a primary and a standby, a routed kineticd
// (prefer_replica) and a client session through it, once the standby
// serves reads (its lag known: a read after the kill finds it eligible),
// with a table for the chaos tests.
func routedSessionToKill(t *testing.T) (*pgtest.Cluster, context.Context, string, *pgx.Conn) {
	t.Helper()
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 60*time.Second)
	tbl := chaosTable(t, ctx, cl)
	dsn := chaosProxy(t, cl, kinetictest.Params{ReadRoutingMode: "prefer_replica", Replicas: addrs(cl.Standbys...)}, "")
	awaitReplicaRead(t, dsn, pgtest.Ports(cl.Standbys...))
	return cl, ctx, tbl, connect(t, ctx, dsn)
}

// TestDeallocateInFlightWhenPrimaryDies: a unit of only Closes (a
// driver deallocating cached statements: pgx before its next query)
// pipelined on the primary behind a write when the primary dies is
// answered as PostgreSQL answers a Close of a statement that is not
// there: CloseComplete, no error. The statement went with the server.
// pgx takes a failed deallocation for a broken connection and closes it,
// so before the fix (08006 for the Closes) its session ended and a write
// of it the failover lost went unreported. The session goes on: the name
// is free again (Prepared anew, not 42P05) and the statement runs on the
// standby.
func TestDeallocateInFlightWhenPrimaryDies(t *testing.T) {
	cl, ctx, tbl, c := routedSessionToKill(t)
	// A write: it is prepared on the primary, where the Close goes.
	if _, err := c.Prepare(ctx, "cached", "insert into "+tbl+" values ($1, 'y')"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "cached", 9); err != nil {
		t.Fatal(err)
	}
	p := c.PgConn().StartPipeline(ctx)
	p.SendQueryParams("insert into "+tbl+" select 8, 'x' from pg_sleep(3)", nil, nil, nil, nil)
	p.SendPipelineSync()
	p.SendDeallocate("cached")
	p.SendPipelineSync()
	killUnderSleep(t, ctx, cl, p)
	got := pipelineOutcomes(t, p, 2)
	if want := []string{"08007", "CloseComplete"}; !slices.Equal(got, want) {
		t.Fatalf("the write, then the deallocation: %v, want %v", got, want)
	}
	if c.IsClosed() {
		t.Fatal("the connection closed")
	}
	// (stale-ok: the write's outcome is unknown, so a read that must see
	// it would wait for the primary.)
	if _, err := c.Prepare(ctx, "cached", "/* pg-kinetic: stale-ok */ select inet_server_port()"); err != nil {
		t.Fatalf("Prepare of the deallocated name again: %v", err)
	}
	var port int
	if err := c.QueryRow(ctx, "cached").Scan(&port); err != nil || port != cl.Standbys[0].Port {
		t.Fatalf("the statement after the loss: port %d, %v; want the standby (%d)", port, err, cl.Standbys[0].Port)
	}
}

// killUnderSleep flushes pipeline p, whose first unit sleeps on the
// primary, and kills the primary once that unit runs.
func killUnderSleep(t *testing.T, ctx context.Context, cl *pgtest.Cluster, p *pgconn.Pipeline) {
	t.Helper()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "the write to run on the primary", func() (bool, error) {
		n, err := cl.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where wait_event = 'PgSleep'")
		return n == "1", err
	})
	if err := cl.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
}

// pipelineOutcomes reads p's results up to its syncs-th PipelineSync and
// closes it: per result its SQLSTATE ("" when it succeeded), an error
// before any result by its SQLSTATE, and "CloseComplete" per Close.
func pipelineOutcomes(t *testing.T, p *pgconn.Pipeline, syncs int) []string {
	t.Helper()
	var out []string
	for n := 0; n < syncs; {
		res, err := p.GetResults()
		if code := pgCode(err); code != "" {
			out = append(out, code) // (an error before any result)
			continue
		} else if err != nil {
			t.Fatalf("pipeline after %d of %d syncs (%v): %v", n, syncs, out, err)
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			_, err := r.Close()
			out = append(out, pgCode(err))
		case *pgconn.CloseComplete:
			out = append(out, "CloseComplete")
		case *pgconn.PipelineSync:
			n++
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}
