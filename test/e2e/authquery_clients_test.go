package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestAuthQueryPassThroughClients: a route whose auth_user has only its
// SCRAM verifier in [[users]] (no plaintext password, no
// backend_password), and a looked-up user that is nowhere in the config.
// Before any client has logged in as the auth_user, the lookup cannot log
// in to the primary (pass-through has no key yet): the looked-up user gets
// FATAL 28000, as docs/behaviour.md says. Once the auth_user has logged in
// through kineticd, the auth_user's lookups log in with its ClientKey and
// the looked-up user (every login a lookup of its own, the user's
// password changed on the server before each client) logs in
// through pgx without and with TLS (channel_binding=require:
// SCRAM-SHA-256-PLUS), psql over TLS with channel_binding=require and
// psycopg 3 likewise; its writes run on the primary and its reads reach
// the replicas, every server login of both users being a pass-through.
func TestAuthQueryPassThroughClients(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 3*time.Minute)
	authUser := uniqueIdent("aqpt_auth")
	authPass := "auth-" + authUser
	user := uniqueIdent("aqpt_user")
	userPass := "user-" + user + "-\u00e9"
	// The default auth_query reads pg_shadow: the auth_user is a superuser.
	authVerifier, _ := passThroughRole(t, ctx, cl, authUser, authPass)
	if err := cl.Primary.Exec(ctx, "alter role "+authUser+" superuser"); err != nil {
		t.Fatal(err)
	}
	_, table := passThroughRole(t, ctx, cl, user, userPass)

	cert, key := selfSigned(t)
	route := uniqueIdent("aqpt")
	var extra strings.Builder
	// auth_cache_ttl_ms = 0: every login of the looked-up user below (pgx,
	// pgx over TLS, psql, psycopg) is a lookup of its own, each logging in
	// to the primary as the auth_user by pass-through, not one lookup and
	// then the cache.
	fmt.Fprintf(&extra, "\n[[routes]]\nname = %q\ndatabase = %q\nbackend_database = %q\nauth_user = %q\nauth_cache_ttl_ms = 0\n", route, route, pgtest.AppDB, authUser)
	fmt.Fprintf(&extra, "[routes.primary]\naddress = %q\n", cl.Primary.Addr())
	for _, s := range cl.Standbys {
		fmt.Fprintf(&extra, "[[routes.replicas]]\naddress = %q\n", s.Addr())
	}
	extra.WriteString("[routes.read_routing]\nread_routing_mode = \"prefer_replica\"\nfallback_policy = \"wait\"\n[routes.ha]\nreplica_health_interval_ms = 200\nreplica_health_timeout_ms = 200\n")
	p := kinetictest.Params{TLSMode: "allow", TLSCert: cert, TLSKey: key, Extra: extra.String(),
		Users: fmt.Sprintf("[[users]]\nname = %q\npassword = %q\n", authUser, authVerifier)}
	toml := kinetictest.TOML(cl, p)
	if strings.Contains(toml, authPass) || strings.Contains(toml, userPass) || strings.Contains(toml, user) {
		t.Fatalf("the config names the looked-up user or holds a plaintext password of the two roles:\n%s", toml)
	}
	if !strings.Contains(toml, authVerifier) {
		t.Fatalf("the auth_user's entry is not its verifier:\n%s", toml)
	}
	for _, line := range strings.Split(toml, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.Contains(k, "password") && !strings.HasPrefix(strings.Trim(strings.TrimSpace(v), `"`), "SCRAM-SHA-256$") {
			t.Fatalf("the config holds a password that is not a SCRAM verifier: %s", line)
		}
	}
	addr := startTOML(t, toml)
	dsn := kinetictest.DSN(addr, user, userPass, route)
	login := func(dsn string) (*pgx.Conn, error) {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		return pgx.Connect(cctx, dsn)
	}
	// setPassword gives the looked-up user a new password before each
	// client below: that client's login works only if its own lookup ran
	// and succeeded, since a failed lookup falls back to the cached old
	// verifier.
	setPassword := func(p string) {
		t.Helper()
		if err := cl.Primary.Exec(ctx, fmt.Sprintf("alter role %s password '%s'", user, p)); err != nil {
			t.Fatal(err)
		}
		if err := cl.WaitReplicated(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// No client has proved the auth_user's verifier yet.
	_, err := login(dsn)
	if pe := asPgError(err); pe == nil || pe.Severity != "FATAL" || pe.Code != "28000" ||
		pe.Message != fmt.Sprintf("pg-kinetic: the auth_query lookup of route %q failed (see kineticd's log)", route) {
		t.Fatalf("lookup before the auth_user has a key: %v, want FATAL 28000", err)
	}

	// The auth_user logs in (its own server login is a pass-through too).
	a, err := login(kinetictest.DSN(addr, authUser, authPass, route))
	if err != nil {
		t.Fatalf("auth_user: %v", err)
	}
	if who := queryString(t, ctx, a, "/* pg-kinetic: primary */ select current_user"); who != authUser {
		t.Fatalf("auth_user runs as %q", who)
	}
	a.Close(ctx)

	// pgx, no TLS: a write on the primary, then reads on the replica.
	c, err := login(dsn)
	if err != nil {
		t.Fatalf("looked-up user after the auth_user logged in: %v", err)
	}
	defer c.Close(ctx)
	if port := portOf(t, ctx, c, "insert into "+table+" (who) values (current_user) returning inet_server_port()"); port != cl.Primary.Port {
		t.Fatalf("the insert ran on port %d, not the primary's %d", port, cl.Primary.Port)
	}
	kinetictest.AwaitReadOn(t, ctx, dsn, cl.StandbyPorts())

	// pgx over TLS with channel binding.
	tlsPass := userPass + "-tls"
	setPassword(tlsPass)
	tlsDSN := strings.Replace(kinetictest.DSN(addr, user, tlsPass, route), "sslmode=disable", "sslmode=require&channel_binding=require", 1)
	tc, err := login(tlsDSN)
	if err != nil {
		t.Fatalf("pgx channel_binding=require: %v", err)
	}
	defer tc.Close(ctx)
	if !isTLS(tc.PgConn()) {
		t.Fatal("pgx with sslmode=require is not on TLS")
	}
	if who := queryString(t, ctx, tc, "select current_user"); who != user {
		t.Fatalf("current_user over TLS = %q", who)
	}
	kinetictest.AwaitReadOn(t, ctx, tlsDSN, cl.StandbyPorts())

	// psql (libpq) over TLS with channel binding required.
	host, port, _ := strings.Cut(addr, ":")
	conninfo := fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=require channel_binding=require", host, port, user, route)
	psqlPass := userPass + "-psql"
	setPassword(psqlPass)
	env := clientEnv("PGPASSWORD=" + psqlPass)
	script := strings.Repeat("select current_user, inet_server_port();\n", 20)
	out := mustPsql(t, ctx, conninfo, env, strings.NewReader(script), "-At", "-F", " ").stdout
	if !readsOn(t, out, user, cl.StandbyPorts()) {
		t.Errorf("psql: no read reached a replica:\n%s", out)
	}
	if ssl := mustPsql(t, ctx, conninfo, env, nil, "-At", "-c", "\\conninfo").stdout; !strings.Contains(ssl, "SSL connection") {
		t.Errorf("psql is not on TLS: %s", ssl)
	}

	// psycopg 3 over TLS with channel binding required.
	pyPass := userPass + "-psycopg"
	setPassword(pyPass)
	res := psycopgReads(t, ctx, conninfo+" password="+pyPass, true)
	if res.code != 0 || !readsOn(t, res.stdout, user, cl.StandbyPorts()) {
		t.Errorf("psycopg: no read reached a replica:\n%s", res)
	}

	// A wrong password still fails like one.
	_, err = login(kinetictest.DSN(addr, user, pyPass+"x", route))
	wantPasswordFailure(t, err, user)
}
