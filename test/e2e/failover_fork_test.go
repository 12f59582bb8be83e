package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestFailoverForkedTimelineReportsLostWrite: the standby promoted in the
// second of two failovers never followed the first one's timeline (its
// WAL receiver had stopped on timeline 1), so its new timeline 3 forks
// off timeline 1 and has none of what was written on timeline 2. A
// session whose write ran on timeline 2 is told KN002 at its next read,
// and the row is indeed not on the new primary. Timeline 3's history does
// not name timeline 2; kineticd judges the token with timeline 2's
// history, which its probes read while timeline 2's primary served. Until
// 2026-12-07 it did not: the read went to the primary and found nothing,
// with a success status (the failover drills once lost 5,021 writes so,
// none reported).
func TestFailoverForkedTimelineReportsLostWrite(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := ctxT(t, 120*time.Second)
	grantProbe(t, ctx, cl, "GRANT EXECUTE ON FUNCTION pg_read_file(text) TO "+pgtest.AppUser)
	tbl := chaosTable(t, ctx, cl)
	first, second, third := cl.Primary, cl.Standbys[0], cl.Standbys[1]
	dsn := chaosProxy(t, cl, kinetictest.Params{Primary: first.Addr(), Replicas: addrs(second, third)}, "")
	awaitReplicaRead(t, dsn, pgtest.Ports(second, third))

	// third stops on timeline 1; first fails, second is promoted to 2.
	stopStreaming(t, ctx, third)
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	promote(t, ctx, second)
	awaitWritesOn(t, ctx, dsn, second)

	lost := connect(t, ctx, dsn)
	if p := insertAt(t, ctx, lost, tbl, 1); p != second.Port {
		t.Fatalf("INSERT ran on %d, want %d", p, second.Port)
	}
	token, err := showSimple(ctx, lost, "pg_kinetic.write_lsn")
	if err != nil || !strings.HasPrefix(token, "2:") {
		t.Fatalf("token = %q, %v; want timeline 2", token, err)
	}
	// Give third timeline 2's history file (as an archive would), so its
	// promotion picks timeline 3 rather than a second timeline 2; it
	// still has none of timeline 2's WAL.
	hist, err := os.ReadFile(filepath.Join(second.DataDir, "pg_wal", "00000002.history"))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(third.DataDir, "pg_wal", "00000002.history")
	if err := os.WriteFile(dst, hist, 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(third.DataDir); err == nil {
		st := fi.Sys().(*syscall.Stat_t)
		if err := os.Chown(dst, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := second.Kill(); err != nil {
		t.Fatal(err)
	}
	promote(t, ctx, third)
	awaitCond(t, 10*time.Second, "third to leave recovery", func() (bool, error) {
		v, err := third.QueryString(ctx, "select not pg_is_in_recovery()")
		return v == "t", err
	})
	if tl, err := third.QueryString(ctx, "select substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"); err != nil || tl != "00000003" {
		t.Fatalf("third's timeline: %q, %v; want 00000003", tl, err)
	}
	awaitWritesOn(t, ctx, dsn, third)

	pe := awaitLostWrite(t, ctx, lost, tbl, 1)
	if !strings.Contains(pe.Detail, token) {
		t.Fatalf("KN002 = %q / %q; want the token %s in DETAIL", pe.Message, pe.Detail, token)
	}
	t.Logf("KN002: %s (DETAIL: %s)", pe.Message, pe.Detail)
	p, n, err := rowAt(ctx, lost, tbl, 1)
	if err != nil || n != 0 || p != third.Port {
		t.Fatalf("the read after KN002: %d rows on %d, %v; want 0 rows on %d (the write was lost)", n, p, err, third.Port)
	}
}

// promote promotes standby s where it stands (pg_promote), leaving the
// other standbys' primary_conninfo as it is (Cluster.Promote re-points
// them).
func promote(t *testing.T, ctx context.Context, s *pgtest.Server) {
	t.Helper()
	if err := s.Exec(ctx, "SELECT pg_promote(true, 60)"); err != nil {
		t.Fatal(err)
	}
}

// awaitWritesOn waits until a write through kineticd at dsn runs on s.
func awaitWritesOn(t *testing.T, ctx context.Context, dsn string, s *pgtest.Server) {
	t.Helper()
	awaitCond(t, 15*time.Second, "writes to reach "+s.Name, func() (bool, error) {
		w := connect(t, ctx, dsn)
		defer w.Close(ctx)
		p, err := readPort(ctx, w, "select inet_server_port() from (select pg_current_wal_lsn()) x")
		return p == s.Port, err
	})
}

// awaitLostWrite reads row id of tbl through c until the read fails with
// KN002 (until the primary's history is read, the primary answers it)
// and returns that error; another SQLSTATE fails the wait.
func awaitLostWrite(t *testing.T, ctx context.Context, c *pgx.Conn, tbl string, id int) *pgconn.PgError {
	t.Helper()
	_, _, err := rowAt(ctx, c, tbl, id)
	awaitCond(t, 10*time.Second, "the lost write to be reported", func() (bool, error) {
		if pgCode(err) == "KN002" {
			return true, nil
		}
		if err != nil && pgCode(err) != "" {
			return false, err
		}
		var p int
		var n int64
		p, n, err = rowAt(ctx, c, tbl, id)
		if err == nil && n == 0 {
			t.Logf("a read on %d found no row, with no error", p)
		}
		return false, nil
	})
	return asPgError(err)
}
