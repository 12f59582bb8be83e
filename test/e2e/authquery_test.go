package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// Roles of TestAuthQuery's cluster. None is in kineticd's [[users]] except
// the two auth_users.
const (
	aqSuper    = "aq_super"  // SUPERUSER: auth_user of the pg_shadow routes
	aqLookup   = "aq_lookup" // no privileges: auth_user of the SECURITY DEFINER route
	aqSCRAM    = "aq_scram"  // SCRAM verifier
	aqMD5      = "aq_md5"    // md5 hash (pg_hba.conf md5 for it)
	aqNoPass   = "aq_nopass" // LOGIN without a password (NULL secret)
	aqAdmin    = "aq_admin"  // a superuser client: the lookup function hides it
	aqUnseen   = "aq_unseen" // never logs in before the primary is stopped
	aqChgSCRAM = "aq_chg_scram"
	aqChgMD5   = "aq_chg_md5"
)

// aqRoutes are the routes of TestAuthQuery beside kinetictest's "main",
// all on the app database: aq (pg_shadow, 1 h TTL), aqfn (the SECURITY
// DEFINER function of deploy/sql, a non-superuser auth_user), aqcount and
// aqttl (a lookup that logs each call in aq_lookups; 1 h and 300 ms TTL),
// aqbad (an auth_user the server refuses).
func aqRoutes(cl *pgtest.Cluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
[[users]]
name = %q
password = "super-pass"

[[users]]
name = %q
password = "lookup-pass"

[[users]]
name = "aq_badauth"
password = "bad-pass"
backend_user = %q
backend_password = "not-its-password"
`, aqSuper, aqLookup, aqLookup)
	for _, r := range []struct{ name, user, query, ttl string }{
		{"aq", aqSuper, "", "3600000"},
		{"aqfn", aqLookup, "SELECT * FROM pgkinetic.user_lookup($1)", "3600000"},
		{"aqcount", aqSuper, "SELECT * FROM aq_counting_lookup($1, 'count')", "3600000"},
		{"aqttl", aqSuper, "SELECT * FROM aq_counting_lookup($1, 'ttl')", "300"},
		{"aqbad", "aq_badauth", "", "3600000"}, // the server refuses auth_user's login
	} {
		fmt.Fprintf(&b, "\n[[routes]]\nname = %q\ndatabase = %q\nbackend_database = %q\nauth_user = %q\nauth_cache_ttl_ms = %s\n", r.name, r.name, pgtest.AppDB, r.user, r.ttl)
		if r.query != "" {
			fmt.Fprintf(&b, "auth_query = %q\n", r.query)
		}
		fmt.Fprintf(&b, "[routes.primary]\naddress = %q\n", cl.Primary.Addr())
		for _, s := range cl.Standbys {
			fmt.Fprintf(&b, "[[routes.replicas]]\naddress = %q\n", s.Addr())
		}
		b.WriteString("[routes.read_routing]\nread_routing_mode = \"prefer_replica\"\n[routes.ha]\nreplica_health_interval_ms = 200\nreplica_health_timeout_ms = 200\n")
	}
	return b.String()
}

// addHBARules inserts rules (whole pg_hba.conf lines) before the catch-all
// scram-sha-256 line on every server of cl (standbys have their own copy
// of pg_hba.conf) and reloads them. The rules stay when the test ends:
// give them roles of the test's own.
func addHBARules(t *testing.T, ctx context.Context, cl *pgtest.Cluster, rules string) {
	t.Helper()
	for _, s := range append([]*pgtest.Server{cl.Primary}, cl.Standbys...) {
		path := filepath.Join(s.DataDir, "pg_hba.conf")
		hba, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		const catchAll = "host    all          all       127.0.0.1/32   scram-sha-256"
		if !strings.Contains(string(hba), catchAll) {
			t.Fatalf("%s has no catch-all line to insert before:\n%s", path, hba)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(hba), catchAll, rules+catchAll, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.Exec(ctx, "select pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
}

// setupAuthQuery makes the roles, the lookup log, the md5 rule in
// pg_hba.conf, and installs deploy/sql/pg_kinetic_auth_query.sql for
// aq_lookup with psql, as docs/operations.md says.
func setupAuthQuery(t *testing.T, ctx context.Context, cl *pgtest.Cluster) {
	t.Helper()
	addHBARules(t, ctx, cl, fmt.Sprintf("host all %s,%s 127.0.0.1/32 md5\n", aqMD5, aqChgMD5))
	for _, sql := range []string{
		fmt.Sprintf("CREATE ROLE %s SUPERUSER LOGIN PASSWORD 'super-pass'", aqSuper),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'lookup-pass'", aqLookup),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'scram-pass'", aqSCRAM),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'chg-old'", aqChgSCRAM),
		fmt.Sprintf("SET password_encryption = 'md5'; CREATE ROLE %s LOGIN PASSWORD 'md5-pass'; CREATE ROLE %s LOGIN PASSWORD 'chg-old'", aqMD5, aqChgMD5),
		fmt.Sprintf("CREATE ROLE %s LOGIN", aqNoPass),
		fmt.Sprintf("CREATE ROLE %s SUPERUSER LOGIN PASSWORD 'admin-pass'", aqAdmin),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'unseen-pass'", aqUnseen),
	} {
		if err := cl.Primary.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	app := cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB)
	c := connect(t, ctx, app)
	for _, sql := range []string{
		"CREATE TABLE aq_t (id serial primary key, who text default current_user)",
		fmt.Sprintf("GRANT ALL ON aq_t, aq_t_id_seq TO %s, %s", aqSCRAM, aqMD5),
		"CREATE TABLE aq_lookups (route text, usename text)",
		`CREATE FUNCTION aq_counting_lookup(u text, route text, OUT usename name, OUT passwd text) RETURNS SETOF record
		 LANGUAGE sql VOLATILE AS $$
			INSERT INTO aq_lookups VALUES (route, u);
			SELECT usename, passwd FROM pg_shadow WHERE usename = u
		 $$`,
	} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	script, err := filepath.Abs("../../deploy/sql/pg_kinetic_auth_query.sql")
	if err != nil {
		t.Fatal(err)
	}
	ci := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", cl.Primary.Port, pgtest.SuperUser, pgtest.AppDB)
	if r := runClient(t, ctx, clientEnv(), nil, "psql", "-X", "-v", "ON_ERROR_STOP=1", "-v", "auth_user="+aqLookup, "-f", script, ci); r.code != 0 {
		t.Fatalf("psql -f %s: %v", script, r)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
}

// lookups counts the auth_query calls of route (aqcount, aqttl) for user.
func lookups(t *testing.T, ctx context.Context, cl *pgtest.Cluster, route, user string) int {
	t.Helper()
	c := connect(t, ctx, cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB))
	defer c.Close(ctx)
	return int(queryInt(t, ctx, c, "select count(*) from aq_lookups where route = $1 and usename = $2", route, user))
}

// wantPasswordFailure checks err is exactly what a wrong password gets.
func wantPasswordFailure(t *testing.T, err error, user string) {
	t.Helper()
	pe := asPgError(err)
	if pe == nil || pe.Severity != "FATAL" || pe.Code != "28P01" || pe.Message != fmt.Sprintf("password authentication failed for user %q", user) || pe.Detail != "" {
		t.Fatalf("%s: got %v, want FATAL 28P01 password authentication failed", user, err)
	}
}

// TestAuthQuery: users that are not in [[users]] log in with the secret
// the primary holds (auth_query), in the pool mode of the run
// (KINETIC_TEST_POOL_MODE): an absent user, a wrong password and a role
// without a password fail alike (28P01); the right password logs in
// (SCRAM verifier and md5 hash), queries run on the primary and on a
// replica as that user; the SECURITY DEFINER function of deploy/sql works
// for a non-superuser auth_user and hides superusers; concurrent logins
// share one lookup and the cache serves later ones; a changed password is
// picked up after a failed login; the TTL makes logins look up again;
// with the primary stopped a cached user logs in and reads from a replica
// while a user never seen gets 08006 naming the primary.
func TestAuthQuery(t *testing.T) {
	cl := pgtest.New(t, pgtest.Options{Standbys: 1})
	ctx := ctxT(t, 3*time.Minute)
	setupAuthQuery(t, ctx, cl)
	px := kinetictest.Start(t, cl, kinetictest.Params{Replicas: addrs(cl.Standbys...), ReadRoutingMode: "prefer_replica", Extra: aqRoutes(cl)})
	reps := cl.StandbyPorts()
	login := func(user, pass, db string) (*pgx.Conn, error) {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		return pgx.Connect(cctx, px.DSN(user, pass, db))
	}
	mustLogin := func(t *testing.T, user, pass, db string) *pgx.Conn {
		t.Helper()
		c, err := login(user, pass, db)
		if err != nil {
			t.Fatalf("%s on %s: %v", user, db, err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}

	t.Run("failures look like a wrong password", func(t *testing.T) {
		for _, tc := range []struct{ user, pass, db string }{
			{"aq_ghost", "whatever", "aq"}, // no such role
			{aqSCRAM, "wrong", "aq"},       // wrong password, SCRAM
			{aqMD5, "wrong", "aq"},         // wrong password, md5
			{aqNoPass, "anything", "aq"},   // NULL secret
			{"aq_ghost", "whatever", "aqfn"},
			{aqAdmin, "admin-pass", "aqfn"}, // the function hides superusers
			{"app", "wrong", "aq"},          // a [[users]] entry: as before
		} {
			_, err := login(tc.user, tc.pass, tc.db)
			wantPasswordFailure(t, err, tc.user)
		}
		// A lookup that cannot work (auth_user refused) is neither a wrong
		// password nor an unavailable primary; the cause stays in the log.
		_, err := login(aqSCRAM, "scram-pass", "aqbad")
		if pe := asPgError(err); pe == nil || pe.Severity != "FATAL" || pe.Code != "28000" ||
			pe.Message != `pg-kinetic: the auth_query lookup of route "aqbad" failed (see kineticd's log)` || pe.Detail != "" {
			t.Fatalf("lookup with a refused auth_user: %v, want FATAL 28000 without detail", err)
		}
	})

	for _, tc := range []struct{ user, pass, db string }{
		{aqSCRAM, "scram-pass", "aq"},
		{aqMD5, "md5-pass", "aq"},
		{aqSCRAM, "scram-pass", "aqfn"},
		{aqMD5, "md5-pass", "aqfn"},
		{aqAdmin, "admin-pass", "aq"}, // pg_shadow as the superuser auth_user sees it
	} {
		t.Run("logs in/"+tc.user+"@"+tc.db, func(t *testing.T) {
			c := mustLogin(t, tc.user, tc.pass, tc.db)
			var who string
			var inRecovery bool
			if err := c.QueryRow(ctx, "/* pg-kinetic: primary */ select current_user, pg_is_in_recovery()").Scan(&who, &inRecovery); err != nil || who != tc.user || inRecovery {
				t.Fatalf("on the primary: user %q in recovery %v, %v", who, inRecovery, err)
			}
			if tc.user != aqAdmin {
				if n := queryInt(t, ctx, c, "insert into aq_t default values returning id"); n < 1 {
					t.Fatalf("insert returned id %d", n)
				}
			}
			// A new session of the user (no write of its own to wait for)
			// reads on the replica once its verdict is in.
			kinetictest.AwaitReadOn(t, ctx, px.DSN(tc.user, tc.pass, tc.db), reps)
			r := mustLogin(t, tc.user, tc.pass, tc.db)
			awaitCond(t, 20*time.Second, "a read of "+tc.user+" on the replica", func() (bool, error) {
				var port int
				if err := r.QueryRow(ctx, "select current_user, pg_is_in_recovery(), inet_server_port()").Scan(&who, &inRecovery, &port); err != nil {
					return false, err
				}
				if who != tc.user {
					t.Fatalf("read ran as %q, want %q", who, tc.user)
				}
				return inRecovery && reps[port], nil
			})
		})
	}

	t.Run("concurrent logins share one lookup", func(t *testing.T) {
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := login(aqMD5, "md5-pass", "aqcount")
				if err == nil {
					err = c.QueryRow(ctx, "select 1").Scan(new(int))
					c.Close(ctx)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 3; i++ {
			c := mustLogin(t, aqMD5, "md5-pass", "aqcount")
			c.Close(ctx)
		}
		if got := lookups(t, ctx, cl, "count", aqMD5); got != 1 {
			t.Fatalf("%d lookups for %d logins within the TTL, want 1", got, n+3)
		}
		// A wrong md5 password against the cached hash looks it up once
		// more (it may have changed), then fails.
		_, err := login(aqMD5, "wrong", "aqcount")
		wantPasswordFailure(t, err, aqMD5)
		if got := lookups(t, ctx, cl, "count", aqMD5); got != 2 {
			t.Fatalf("%d lookups after a failed md5 login, want 2", got)
		}
	})

	t.Run("changed password", func(t *testing.T) {
		for _, user := range []string{aqChgMD5, aqChgSCRAM} {
			c := mustLogin(t, user, "chg-old", "aqcount")
			c.Close(ctx)
			enc := "scram-sha-256"
			if user == aqChgMD5 {
				enc = "md5"
			}
			if err := cl.Primary.Exec(ctx, fmt.Sprintf("SET password_encryption = '%s'; ALTER ROLE %s PASSWORD 'chg-new'", enc, user)); err != nil {
				t.Fatal(err)
			}
			if user == aqChgSCRAM {
				// A SCRAM exchange against the cached verifier cannot be
				// run again: this login fails, the next looks it up.
				_, err := login(user, "chg-new", "aqcount")
				wantPasswordFailure(t, err, user)
			}
			// md5: the same answer is compared with the new hash at once.
			c = mustLogin(t, user, "chg-new", "aqcount")
			var who string
			if err := c.QueryRow(ctx, "/* pg-kinetic: primary */ select current_user").Scan(&who); err != nil || who != user {
				t.Fatalf("%s after the change: %q %v", user, who, err)
			}
			c.Close(ctx)
			_, err := login(user, "chg-old", "aqcount")
			wantPasswordFailure(t, err, user)
		}
	})

	t.Run("TTL expiry looks up again", func(t *testing.T) {
		c := mustLogin(t, aqSCRAM, "scram-pass", "aqttl")
		c.Close(ctx)
		first := lookups(t, ctx, cl, "ttl", aqSCRAM)
		if first != 1 {
			t.Fatalf("%d lookups after the first login, want 1", first)
		}
		// Only the 300 ms TTL makes a successful login look up again (the
		// 1 h route above made one lookup for 11 logins).
		awaitCond(t, 20*time.Second, "a login after the TTL to look the user up again", func() (bool, error) {
			c, err := login(aqSCRAM, "scram-pass", "aqttl")
			if err != nil {
				t.Fatalf("login on aqttl: %v", err)
			}
			c.Close(ctx)
			return lookups(t, ctx, cl, "ttl", aqSCRAM) > first, nil
		})
	})

	t.Run("primary stopped", func(t *testing.T) {
		if err := cl.Primary.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for _, u := range []struct{ user, pass string }{{aqSCRAM, "scram-pass"}, {aqMD5, "md5-pass"}} {
			c, err := login(u.user, u.pass, "aq")
			if err != nil {
				t.Fatalf("%s (cached) with the primary down: %v", u.user, err)
			}
			var who string
			var inRecovery bool
			var port int
			if err := c.QueryRow(ctx, "select current_user, pg_is_in_recovery(), inet_server_port()").Scan(&who, &inRecovery, &port); err != nil {
				t.Fatalf("%s: read with the primary down: %v", u.user, err)
			}
			c.Close(ctx)
			if who != u.user || !inRecovery || !reps[port] {
				t.Fatalf("%s: read as %q on port %d (in recovery %v), want a replica", u.user, who, port, inRecovery)
			}
			// A wrong password still fails like one.
			_, err = login(u.user, "wrong", "aq")
			wantPasswordFailure(t, err, u.user)
		}
		for _, u := range []struct{ user, pass string }{{aqUnseen, "unseen-pass"}, {"aq_ghost", "whatever"}} {
			_, err := login(u.user, u.pass, "aq")
			pe := asPgError(err)
			if pe == nil || pe.Severity != "FATAL" || pe.Code != "08006" || !strings.Contains(pe.Message, `the primary of route "aq" is unavailable for the auth_query lookup of user "`+u.user+`"`) {
				t.Fatalf("%s (never seen) with the primary down: %v, want FATAL 08006 naming the primary", u.user, err)
			}
			t.Logf("%s: %s (%s)", u.user, pe.Message, pe.Detail)
		}
	})
}
