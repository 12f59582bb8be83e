package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestPgDump: pg_dump through kineticd with read routing on writes the dump
// it writes directly, in its three ways of taking its snapshot: the default
// (BEGIN, then SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY),
// --serializable-deferrable, and a parallel dump (-j 2: the leader exports
// its snapshot and each worker imports it, SET TRANSACTION SNAPSHOT, which
// works only on the server that exported it); pg_restore of the parallel
// dump writes the direct dump's script. (pg_dump 15.18 runs SELECT
// set_config(name, …) FROM pg_settings at its start, a setting kineticd
// cannot replay elsewhere: its sessions are pinned to the primary, where
// all of it runs. docs/behaviour.md, "Exported snapshots".)
func TestPgDump(t *testing.T) {
	cl := pgtest.Shared(t)
	px := routedProxy(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 120*time.Second)
	const schema = "kinetic_dump"
	setup := `DROP SCHEMA IF EXISTS ` + schema + ` CASCADE;
		CREATE SCHEMA ` + schema + ` AUTHORIZATION ` + pgtest.AppUser + `;
		SET ROLE ` + pgtest.AppUser + `;
		CREATE TABLE ` + schema + `.items (id serial PRIMARY KEY, name text NOT NULL, qty int CHECK (qty >= 0));
		INSERT INTO ` + schema + `.items (name, qty) SELECT 'item ' || g, g FROM generate_series(1, 500) g;
		CREATE TABLE ` + schema + `.notes (item int REFERENCES ` + schema + `.items, body text);
		INSERT INTO ` + schema + `.notes SELECT g, repeat('n', g % 7) FROM generate_series(1, 500, 3) g;
		CREATE INDEX ON ` + schema + `.notes (item);
		CREATE VIEW ` + schema + `.big AS SELECT * FROM ` + schema + `.items WHERE qty > 250;`
	if err := execIn(ctx, cl.Primary, pgtest.AppDB, setup); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		execIn(context.Background(), cl.Primary, pgtest.AppDB, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PGPASSWORD="+pgtest.AppPassword, "PGSSLMODE=disable")
	dump := func(port int, extra ...string) psqlResult {
		args := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", pgtest.AppUser, "-n", schema}, extra...)
		return runClient(t, ctx, env, nil, "pg_dump", append(args, pgtest.AppDB)...)
	}
	direct := dump(cl.Primary.Port)
	if direct.code != 0 {
		t.Fatalf("pg_dump directly:\n%s", direct)
	}
	want := comparable(direct.stdout)
	for _, mode := range [][]string{nil, {"--serializable-deferrable"}} {
		got := dump(px.Port(), mode...)
		if got.code != 0 {
			t.Fatalf("pg_dump %v through kineticd:\n%s", mode, got)
		}
		if comparable(got.stdout) != want {
			t.Errorf("pg_dump %v through kineticd wrote another dump than directly:\n%s", mode, got.stdout)
		}
	}
	dir := filepath.Join(t.TempDir(), "dump")
	if res := dump(px.Port(), "-Fd", "-j", "2", "-f", dir); res.code != 0 {
		t.Fatalf("pg_dump -j 2 through kineticd:\n%s", res)
	}
	res := runClient(t, ctx, env, nil, "pg_restore", "-f", "-", dir)
	if res.code != 0 {
		t.Fatalf("pg_restore of the parallel dump:\n%s", res)
	}
	if comparable(res.stdout) != want {
		t.Errorf("the parallel dump through kineticd restores to another script than the direct dump:\n%s", res.stdout)
	}
}

// comparable is a plain-format dump without the lines that differ from
// run to run: the versions, and the \restrict key of pg_dump 15.14 and
// later.
func comparable(dump string) string {
	var b strings.Builder
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "-- Dumped ") || strings.HasPrefix(l, `\restrict `) || strings.HasPrefix(l, `\unrestrict `) {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// execIn runs sql as the superuser in database db of s.
func execIn(ctx context.Context, s *pgtest.Server, db, sql string) error {
	conn, err := pgconn.Connect(ctx, s.DSN(pgtest.SuperUser, "", db))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql).ReadAll()
	return err
}
