package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// The tests of this file run the combinations of docs/security.md's
// authentication matrix that no other e2e test covers: md5 clients over
// TLS and through libpq, and kineticd's logins to servers that ask for md5
// or a cleartext password. Each makes roles of its own with pg_hba.conf
// rules of their own on every server of the shared cluster.

// md5Role is passThroughRole (a role with a table of its own) whose
// password the servers then store as an md5 hash, as with
// password_encryption = md5. It returns the table.
func md5Role(t *testing.T, ctx context.Context, cl *pgtest.Cluster, role, password string) string {
	t.Helper()
	_, table := passThroughRole(t, ctx, cl, role, password)
	if err := cl.Primary.Exec(ctx, fmt.Sprintf("set password_encryption = 'md5'; alter role %s password %s", role, sqlQuote(password))); err != nil {
		t.Fatal(err)
	}
	if stored, err := cl.Primary.QueryString(ctx, "select rolpassword from pg_authid where rolname = "+sqlQuote(role)); err != nil || stored != "md5"+md5hex(password+role) {
		t.Fatalf("%s's stored password: %q %v, want its md5 hash", role, stored, err)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	return table
}

// TestMD5ClientOverTLSAndLibpq: a [[users]] entry whose secret is the
// role's md5 hash (no plaintext password, no backend_password), so
// kineticd asks its clients for md5 and answers the servers' md5 requests
// (pg_hba.conf md5 for the role on the primary and both standbys) with the
// hash. pgx over TLS, psql over TLS and psycopg 3 over TLS log in; their
// write runs on the primary and their reads reach the replicas. A wrong
// password through psql fails with 28P01.
func TestMD5ClientOverTLSAndLibpq(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 3*time.Minute)
	role := uniqueIdent("md5cli")
	password := "md5cli-" + role
	addHBARules(t, ctx, cl, fmt.Sprintf("host all %s 127.0.0.1/32 md5\n", role))
	table := md5Role(t, ctx, cl, role, password)
	hash := "md5" + md5hex(password+role)
	cert, key := selfSigned(t)
	p := kinetictest.Params{TLSMode: "allow", TLSCert: cert, TLSKey: key, FallbackPolicy: "wait",
		Extra: fmt.Sprintf("\n[[users]]\nname = %q\npassword = %q\n", role, hash)}
	if toml := kinetictest.TOML(cl, p); strings.Contains(toml, password) || !strings.Contains(toml, hash) {
		t.Fatalf("the config does not hold the role's md5 hash alone:\n%s", toml)
	}
	px := routedProxy(t, cl, p)

	// pgx over TLS: a write on the primary, then reads on a replica.
	dsn := strings.Replace(px.DSN(role, password, pgtest.AppDB), "sslmode=disable", "sslmode=require", 1)
	c := connect(t, ctx, dsn)
	if !isTLS(c.PgConn()) {
		t.Fatal("pgx with sslmode=require is not on TLS")
	}
	if port := portOf(t, ctx, c, "insert into "+table+" (who) values (current_user) returning inet_server_port()"); port != cl.Primary.Port {
		t.Fatalf("the insert ran on port %d, not the primary's %d", port, cl.Primary.Port)
	}
	kinetictest.AwaitReadOn(t, ctx, dsn, cl.StandbyPorts())

	// psql (libpq) over TLS.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=require", px.Port(), role, pgtest.AppDB)
	env := clientEnv("PGPASSWORD=" + password)
	out := mustPsql(t, ctx, conninfo, env, strings.NewReader(strings.Repeat("select current_user, inet_server_port();\n", 20)), "-At", "-F", " ").stdout
	if !readsOn(t, out, role, cl.StandbyPorts()) {
		t.Errorf("psql: no read reached a replica:\n%s", out)
	}
	if info := mustPsql(t, ctx, conninfo, env, nil, "-At", "-c", `\conninfo`).stdout; !strings.Contains(info, "SSL connection") {
		t.Errorf("psql is not on TLS: %s", info)
	}
	if r := psql(t, ctx, conninfo, clientEnv("PGPASSWORD=wrong"), nil, "-w", "-Atc", "select 1"); r.code == 0 ||
		!strings.Contains(r.stderr, fmt.Sprintf("password authentication failed for user %q", role)) {
		t.Errorf("psql with a wrong password:\n%s", r)
	}

	// psycopg 3 (libpq under Python) over TLS.
	res := psycopgReads(t, ctx, conninfo+" password="+password, true)
	if res.code != 0 || !readsOn(t, res.stdout, role, cl.StandbyPorts()) {
		t.Errorf("psycopg: no read reached a replica:\n%s", res)
	}
}

// TestServerLoginMD5AndCleartext: kineticd's login to servers whose
// pg_hba.conf asks for md5 or for a cleartext password ("password"), per
// [[users]] secret, with and without backend_password. With a password to
// send (backend_password, or a plaintext secret) the login works, on the
// primary (the write) and on the standbys (reads routed there). A
// pass-through secret that cannot answer the server's request (a SCRAM
// verifier's ClientKey answers only SCRAM, an md5 hash only md5) is
// refused with kineticd's 28P01 and a DETAIL naming the request and
// backend_password (pool/login.go, needsPassword), the last case towards
// a server that asks for SCRAM.
func TestServerLoginMD5AndCleartext(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 4*time.Minute)
	const (
		md5Req   = "md5 authentication"
		clearReq = "a cleartext password"
		scramReq = "SCRAM-SHA-256 authentication"
	)
	type secretKind int
	const (
		plaintext secretKind = iota
		verifier             // the server's own when it has one, else a fresh one of the password
		md5Hash
	)
	cases := []struct {
		name            string
		hba             string // pg_hba.conf method for the role; "" is the catch-all scram-sha-256
		secret          secretKind
		backendPassword bool
		refused         string // the server's request named in the DETAIL; "" for a login
	}{
		{"verifier with backend_password to md5", "md5", verifier, true, ""},
		{"verifier with backend_password to cleartext", "password", verifier, true, ""},
		{"plaintext to cleartext", "password", plaintext, false, ""},
		{"verifier pass-through to md5", "md5", verifier, false, md5Req},
		{"verifier pass-through to cleartext", "password", verifier, false, clearReq},
		{"md5 hash pass-through to cleartext", "password", md5Hash, false, clearReq},
		{"md5 hash pass-through to SCRAM", "", md5Hash, false, scramReq},
	}
	type role struct{ name, password, table string }
	roles := make([]role, len(cases))
	var rules, extra strings.Builder
	for i, tc := range cases {
		r := role{name: uniqueIdent("mtx"), password: fmt.Sprintf("mtx-%d-pass", i)}
		if tc.hba != "" {
			fmt.Fprintf(&rules, "host all %s 127.0.0.1/32 %s\n", r.name, tc.hba)
		}
		roles[i] = r
	}
	addHBARules(t, ctx, cl, rules.String())
	for i, tc := range cases {
		r := &roles[i]
		var secret string
		switch {
		case tc.hba == "md5":
			// An md5 request needs an md5 hash stored: a SCRAM verifier
			// makes PostgreSQL ask for SCRAM instead.
			r.table = md5Role(t, ctx, cl, r.name, r.password)
			secret = otherVerifier(t, r.password)
		default:
			secret, r.table = passThroughRole(t, ctx, cl, r.name, r.password)
		}
		switch tc.secret {
		case plaintext:
			secret = r.password
		case md5Hash:
			secret = "md5" + md5hex(r.password+r.name)
		}
		fmt.Fprintf(&extra, "\n[[users]]\nname = %q\npassword = %q\n", r.name, secret)
		if tc.backendPassword {
			fmt.Fprintf(&extra, "backend_password = %q\n", r.password)
		}
	}
	px := routedProxy(t, cl, kinetictest.Params{FallbackPolicy: "wait", Extra: extra.String()})

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := roles[i]
			dsn := px.DSN(r.name, r.password, pgtest.AppDB)
			if tc.refused != "" {
				// loginAs runs a query too: in transaction pooling the
				// first server login comes with the first statement.
				who, err := loginAs(ctx, dsn)
				pe := asPgError(err)
				if pe == nil || pe.Code != "28P01" || !strings.Contains(pe.Detail, "server asks for "+tc.refused) ||
					!strings.Contains(pe.Detail, "set backend_password") {
					t.Fatalf("got current_user %q, %v (DETAIL %q); want 28P01 with a DETAIL naming %q and backend_password", who, err, detailOf(err), tc.refused)
				}
				t.Logf("%s: %s (DETAIL: %s)", pe.Code, pe.Message, pe.Detail)
				return
			}
			c := connect(t, ctx, dsn)
			if who := queryString(t, ctx, c, "select current_user"); who != r.name {
				t.Fatalf("current_user = %q, want %q", who, r.name)
			}
			if port := portOf(t, ctx, c, "insert into "+r.table+" (who) values (current_user) returning inet_server_port()"); port != cl.Primary.Port {
				t.Fatalf("the insert ran on port %d, not the primary's %d", port, cl.Primary.Port)
			}
			kinetictest.AwaitReadOn(t, ctx, dsn, cl.StandbyPorts())
			if _, err := loginAs(ctx, px.DSN(r.name, r.password+"x", pgtest.AppDB)); pgCode(err) != "28P01" {
				t.Errorf("wrong password: %v", err)
			}
		})
	}
}

// TestCertUserToMD5Server: a client-certificate user (auth = "cert") whose
// backend_user is md5user (pg_hba.conf md5, an md5 hash stored) logs in to
// the servers with backend_password: a write on the primary, reads on the
// replicas. The same user without backend_password sends the servers an
// empty password, which they refuse.
func TestCertUserToMD5Server(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 2*time.Minute)
	ca := newTestCA(t, "kinetic test CA")
	srvCert, srvKey := ca.issue(t, "127.0.0.1", true)
	withCert, withKey := ca.issue(t, "certmd5", false)
	bareCert, bareKey := ca.issue(t, "certmd5bare", false)
	px := routedProxy(t, cl, kinetictest.Params{TLSMode: "allow", TLSCert: srvCert, TLSKey: srvKey, TLSCA: ca.file, FallbackPolicy: "wait",
		Extra: fmt.Sprintf("\n[[users]]\nname = \"certmd5\"\nauth = \"cert\"\nbackend_user = %q\nbackend_password = %q\n"+
			"\n[[users]]\nname = \"certmd5bare\"\nauth = \"cert\"\nbackend_user = %q\n", pgtest.MD5User, pgtest.MD5Password, pgtest.MD5User)})
	if stored, err := cl.Primary.QueryString(ctx, "select rolpassword from pg_authid where rolname = "+sqlQuote(pgtest.MD5User)); err != nil || !strings.HasPrefix(stored, "md5") {
		t.Fatalf("%s's stored password: %q %v, want an md5 hash", pgtest.MD5User, stored, err)
	}
	table := uniqueIdent("certmd5_t")
	su := connect(t, ctx, cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB))
	if _, err := su.Exec(ctx, fmt.Sprintf("create table %s (id serial primary key, who text); grant all on %s, %s_id_seq to %s",
		table, table, table, pgtest.MD5User)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { su.Exec(context.Background(), "drop table if exists "+table) }) // before connect closes su
	dsn := certDSN(px, "certmd5", "", pgtest.AppDB, withCert, withKey)
	c := connect(t, ctx, dsn)
	if who := queryString(t, ctx, c, "select current_user"); who != pgtest.MD5User {
		t.Fatalf("current_user = %q, want %q", who, pgtest.MD5User)
	}
	if port := portOf(t, ctx, c, "insert into "+table+" (who) values (current_user) returning inet_server_port()"); port != cl.Primary.Port {
		t.Fatalf("a write ran on port %d, not the primary's %d", port, cl.Primary.Port)
	}
	kinetictest.AwaitReadOn(t, ctx, dsn, cl.StandbyPorts())

	who, err := loginAs(ctx, certDSN(px, "certmd5bare", "", pgtest.AppDB, bareCert, bareKey))
	if pe := asPgError(err); pe == nil || pe.Code != "28P01" || pe.Message != fmt.Sprintf("password authentication failed for user %q", pgtest.MD5User) {
		t.Fatalf("cert user without backend_password to an md5 server: current_user %q, %v; want the server's 28P01", who, err)
	}
	t.Logf("without backend_password: %v", err)
}
