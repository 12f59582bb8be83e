package pgtest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or ctx ends.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

func mustExec(t *testing.T, ctx context.Context, s *pgtest.Server, sql string) {
	t.Helper()
	if err := s.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

func mustQuery(t *testing.T, ctx context.Context, s *pgtest.Server, sql string) string {
	t.Helper()
	v, err := s.QueryString(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSharedClusterShape(t *testing.T) {
	begin := time.Now()
	c := pgtest.Shared(t)
	t.Logf("Shared returned after %v (the first caller pays for the start)", time.Since(begin).Round(time.Millisecond))
	ctx := testContext(t)

	if len(c.Standbys) != 2 {
		t.Fatalf("got %d standbys, want 2", len(c.Standbys))
	}
	ports := map[int]string{}
	for _, s := range append([]*pgtest.Server{c.Primary}, c.Standbys...) {
		if prev, dup := ports[s.Port]; dup {
			t.Fatalf("%s and %s share port %d", prev, s.Name, s.Port)
		}
		ports[s.Port] = s.Name
		if want := fmt.Sprintf("127.0.0.1:%d", s.Port); s.Addr() != want {
			t.Errorf("%s.Addr() = %q, want %q", s.Name, s.Addr(), want)
		}
		conn, err := pgx.Connect(ctx, s.SuperDSN())
		if err != nil {
			t.Fatalf("%s over TCP: %v", s.Name, err)
		}
		var port int
		err = conn.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port)
		conn.Close(ctx)
		if err != nil || port != s.Port {
			t.Errorf("%s: inet_server_port() = %d, %v; want %d", s.Name, port, err, s.Port)
		}
		if !strings.HasPrefix(s.DataDir, c.Dir) {
			t.Errorf("%s: data dir %s outside %s", s.Name, s.DataDir, c.Dir)
		}
		if got := mustQuery(t, ctx, s, "SHOW server_version_num"); !strings.HasPrefix(got, "15") {
			t.Errorf("%s: server_version_num = %s, want 15xxxx", s.Name, got)
		}
	}
	if rec, err := c.Primary.InRecovery(ctx); err != nil || rec {
		t.Errorf("primary InRecovery = %v, %v; want false", rec, err)
	}
	for _, s := range c.Standbys {
		if rec, err := s.InRecovery(ctx); err != nil || !rec {
			t.Errorf("%s InRecovery = %v, %v; want true", s.Name, rec, err)
		}
	}
	got := mustQuery(t, ctx, c.Primary,
		"SELECT string_agg(application_name || ':' || state, ',' ORDER BY application_name) FROM pg_stat_replication")
	if got != "standby1:streaming,standby2:streaming" {
		t.Errorf("pg_stat_replication = %q", got)
	}

	want := fmt.Sprintf("postgres://app:app-secret@127.0.0.1:%d/app?sslmode=disable", c.Primary.Port)
	if dsn := c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB); dsn != want {
		t.Errorf("DSN = %q, want %q", dsn, want)
	}
	want = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Primary.Port)
	if dsn := c.Primary.SuperDSN(); dsn != want {
		t.Errorf("SuperDSN = %q, want %q", dsn, want)
	}
}

func TestRolesAndAuthentication(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := testContext(t)

	verifiers := mustQuery(t, ctx, c.Primary, `SELECT string_agg(rolname || '=' || left(rolpassword, 14), ',' ORDER BY rolname)
		FROM pg_authid WHERE rolname IN ('app', 'md5user', 'kinetic_repl')`)
	for _, want := range []string{"app=SCRAM-SHA-256$", "md5user=md5", "kinetic_repl=SCRAM-SHA-256$"} {
		if !strings.Contains(verifiers, want) {
			t.Errorf("password verifiers %q lack %q", verifiers, want)
		}
	}
	if got := mustQuery(t, ctx, c.Primary, "SELECT rolreplication FROM pg_roles WHERE rolname = 'kinetic_repl'"); got != "t" {
		t.Errorf("kinetic_repl rolreplication = %s", got)
	}

	for _, s := range []*pgtest.Server{c.Primary, c.Standbys[0]} {
		for _, u := range []struct{ user, password string }{
			{pgtest.AppUser, pgtest.AppPassword},
			{pgtest.MD5User, pgtest.MD5Password},
		} {
			conn, err := pgx.Connect(ctx, s.DSN(u.user, u.password, pgtest.AppDB))
			if err != nil {
				t.Fatalf("%s as %s: %v", s.Name, u.user, err)
			}
			var user, db string
			err = conn.QueryRow(ctx, "SELECT current_user, current_database()").Scan(&user, &db)
			conn.Close(ctx)
			if err != nil || user != u.user || db != pgtest.AppDB {
				t.Errorf("%s: got %s@%s, %v; want %s@%s", s.Name, user, db, err, u.user, pgtest.AppDB)
			}
			if _, err := pgx.Connect(ctx, s.DSN(u.user, "wrong", pgtest.AppDB)); err == nil {
				t.Errorf("%s: %s logged in with a wrong password", s.Name, u.user)
			}
		}
	}

	// app and md5user may create objects in app's public schema.
	for _, u := range []struct{ user, password string }{{pgtest.AppUser, pgtest.AppPassword}, {pgtest.MD5User, pgtest.MD5Password}} {
		conn, err := pgx.Connect(ctx, c.Primary.DSN(u.user, u.password, pgtest.AppDB))
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, fmt.Sprintf("CREATE TABLE public.created_by_%s (id int); DROP TABLE public.created_by_%s", u.user, u.user))
		conn.Close(ctx)
		if err != nil {
			t.Errorf("%s cannot create in schema public: %v", u.user, err)
		}
	}
}

func TestReplication(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := testContext(t)

	mustExec(t, ctx, c.Primary, "CREATE TABLE replication_test (v text); INSERT INTO replication_test VALUES ('hello')")
	t.Cleanup(func() { _ = c.Primary.Exec(context.Background(), "DROP TABLE replication_test") })
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	primaryLSN, err := c.Primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Standbys {
		if got := mustQuery(t, ctx, s, "SELECT v FROM replication_test"); got != "hello" {
			t.Errorf("%s: got %q, want hello", s.Name, got)
		}
		lsn, err := s.ReplayLSN(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok := mustQuery(t, ctx, s, fmt.Sprintf("SELECT '%s'::pg_lsn >= '%s'::pg_lsn", lsn, primaryLSN)); ok != "t" {
			t.Errorf("%s: replay LSN %s behind the primary's %s after WaitReplicated", s.Name, lsn, primaryLSN)
		}
		if err := s.Exec(ctx, "INSERT INTO replication_test VALUES ('no')"); err == nil {
			t.Errorf("%s accepted a write", s.Name)
		}
	}
	if _, err := c.Primary.ReplayLSN(ctx); err == nil {
		t.Error("ReplayLSN on the primary: want an error")
	}
	if _, err := c.Standbys[0].CurrentLSN(ctx); err == nil {
		t.Error("CurrentLSN on a standby: want an error")
	}
}

func TestPauseAndResumeReplay(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := testContext(t)
	paused, other := c.Standbys[0], c.Standbys[1]

	mustExec(t, ctx, c.Primary, "CREATE TABLE pause_test (v int)")
	t.Cleanup(func() { _ = c.Primary.Exec(context.Background(), "DROP TABLE pause_test") })
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	if err := paused.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = paused.ResumeReplay(context.Background()) })
	mustExec(t, ctx, c.Primary, "INSERT INTO pause_test VALUES (1)")
	lsn, err := c.Primary.CurrentLSN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.WaitReplay(ctx, lsn); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, paused.Name+" to receive the insert", func() bool {
		v, _ := paused.QueryString(ctx, fmt.Sprintf("SELECT pg_last_wal_receive_lsn() >= '%s'", lsn))
		return v == "t"
	})
	if got := mustQuery(t, ctx, paused, "SELECT count(*) FROM pause_test"); got != "0" {
		t.Errorf("paused standby sees %s rows, want 0", got)
	}
	if got := mustQuery(t, ctx, other, "SELECT count(*) FROM pause_test"); got != "1" {
		t.Errorf("running standby sees %s rows, want 1", got)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = paused.WaitReplay(short, lsn)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReplay on a paused standby = %v, want a deadline error", err)
	}

	if err := paused.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, ctx, paused, "SELECT count(*) FROM pause_test"); got != "1" {
		t.Errorf("resumed standby sees %s rows, want 1", got)
	}
}

func TestStopAndStart(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := testContext(t)
	s := c.Standbys[1]

	mustExec(t, ctx, c.Primary, "CREATE TABLE stop_test (v int)")
	t.Cleanup(func() { _ = c.Primary.Exec(context.Background(), "DROP TABLE stop_test") })
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.Running() {
			_ = s.Start(context.Background())
		}
	})
	if s.Running() {
		t.Fatal("Running after Stop")
	}
	if conn, err := net.Dial("tcp", s.Addr()); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after Stop", s.Name)
	}
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop of a stopped server: %v", err)
	}
	// WaitReplicated skips stopped standbys.
	mustExec(t, ctx, c.Primary, "INSERT INTO stop_test VALUES (1)")
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}

	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err == nil {
		t.Error("Start of a running server: want an error")
	}
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, ctx, s, "SELECT count(*) FROM stop_test"); got != "1" {
		t.Errorf("restarted standby sees %s rows, want 1", got)
	}
}

func TestKillAndStart(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := testContext(t)

	mustExec(t, ctx, c.Primary, "CREATE TABLE kill_test (v int); INSERT INTO kill_test VALUES (1)")
	t.Cleanup(func() { _ = c.Primary.Exec(context.Background(), "DROP TABLE kill_test") })

	for _, s := range []*pgtest.Server{c.Primary, c.Standbys[0]} {
		// An open session must not keep the killed server's memory alive.
		conn, err := pgx.Connect(ctx, s.SuperDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if s.Running() {
			t.Fatalf("%s Running after Kill", s.Name)
		}
		if err := conn.Ping(ctx); err == nil {
			t.Errorf("%s: a session survived Kill", s.Name)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, ctx, c.Primary, "INSERT INTO kill_test VALUES (2)")
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Standbys {
		if got := mustQuery(t, ctx, s, "SELECT count(*) FROM kill_test"); got != "2" {
			t.Errorf("%s sees %s rows, want 2", s.Name, got)
		}
	}
}

func TestPromote(t *testing.T) {
	c := pgtest.New(t, pgtest.Options{Standbys: 2})
	ctx := testContext(t)
	oldPrimary, promoted, follower := c.Primary, c.Standbys[0], c.Standbys[1]

	mustExec(t, ctx, oldPrimary, "CREATE TABLE promote_test (v int); INSERT INTO promote_test VALUES (1)")
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if err := oldPrimary.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Promote(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	if c.Primary != promoted || len(c.Standbys) != 1 || c.Standbys[0] != follower {
		t.Fatalf("after Promote: primary %s, standbys %v", c.Primary.Name, c.Standbys)
	}
	if rec, err := promoted.InRecovery(ctx); err != nil || rec {
		t.Fatalf("promoted InRecovery = %v, %v", rec, err)
	}
	if err := c.Promote(ctx, promoted); err == nil {
		t.Error("promoting the primary: want an error")
	}

	mustExec(t, ctx, promoted, "INSERT INTO promote_test VALUES (2)")
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, ctx, follower, "SELECT count(*) FROM promote_test"); got != "2" {
		t.Errorf("follower sees %s rows, want 2", got)
	}
	if got := mustQuery(t, ctx, follower, "SELECT received_tli FROM pg_stat_wal_receiver"); got != "2" {
		t.Errorf("follower streams timeline %s, want 2", got)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir after Close: %v", err)
	}
	for _, s := range []*pgtest.Server{oldPrimary, promoted, follower} {
		if s.Running() {
			t.Errorf("%s running after Close", s.Name)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestQueryStringWithoutRows(t *testing.T) {
	c := pgtest.Shared(t)
	if _, err := c.Primary.QueryString(testContext(t), "SELECT 1 WHERE false"); err == nil {
		t.Error("want an error for no rows")
	}
	if v, err := c.Primary.QueryString(testContext(t), "SELECT NULL"); err != nil || v != "" {
		t.Errorf("NULL: got %q, %v", v, err)
	}
}

func TestBin(t *testing.T) {
	for _, name := range []string{"psql", "pgbench", "pg_ctl", "postgres"} {
		if _, err := os.Stat(pgtest.Bin(name)); err != nil {
			t.Errorf("Bin(%q): %v", name, err)
		}
	}
}
