package e2e

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xdg-go/scram"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/proxy"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// passThroughRole creates a LOGIN role whose password the server stores as
// a SCRAM verifier (pgtest's password_encryption), with a table it may
// write in the app database, and returns the verifier read from pg_authid:
// the only secret kineticd gets. Everything is dropped when the test ends.
func passThroughRole(t *testing.T, ctx context.Context, cl *pgtest.Cluster, role, password string) (verifier, table string) {
	t.Helper()
	if err := cl.Primary.Exec(ctx, fmt.Sprintf("create role %s login password '%s'", role, password)); err != nil {
		t.Fatal(err)
	}
	su, err := pgx.Connect(ctx, cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB))
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	table = role + "_t"
	if _, err := su.Exec(ctx, fmt.Sprintf("create table %s (id serial primary key, who text); grant all on %s, %s_id_seq to %s",
		table, table, table, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if su, err := pgx.Connect(ctx, cl.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB)); err == nil {
			su.Exec(ctx, "drop table if exists "+table)
			su.Close(ctx)
		}
		cl.Primary.Exec(ctx, "drop role if exists "+role)
	})
	verifier, err = cl.Primary.QueryString(ctx, "select rolpassword from pg_authid where rolname = '"+role+"'")
	if err != nil || !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Fatalf("verifier of %s: %q %v", role, verifier, err)
	}
	if err := cl.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	return verifier, table
}

// otherVerifier is a verifier of password with a fresh salt: one the
// server does not hold, though the password is the same.
func otherVerifier(t *testing.T, password string) string {
	t.Helper()
	salt := make([]byte, 16)
	rand.Read(salt)
	client, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		t.Fatal(err)
	}
	c := client.GetStoredCredentials(scram.KeyFactors{Salt: string(salt), Iters: 4096})
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$4096:%s$%s:%s", enc(salt), enc(c.StoredKey), enc(c.ServerKey))
}

// TestSCRAMPassThrough: a [[users]] entry whose secret is the server's
// SCRAM verifier, with no backend_password, serves pgx, psql and psycopg
// in session and transaction pooling with reads routed to the replicas:
// every server login (primary and both standbys) is made with the
// ClientKey kineticd recovered from the client's proof. A wrong password
// still fails, and a user whose server verifier differs from kineticd's
// gets 28P01 with a DETAIL naming backend_password.
func TestSCRAMPassThrough(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 4*time.Minute)
	role := uniqueIdent("pt")
	password := "pt-" + role + "-\u00e9" // SASLprep'd by the client, never seen by kineticd
	verifier, table := passThroughRole(t, ctx, cl, role, password)
	diff := uniqueIdent("ptdiff")
	passThroughRole(t, ctx, cl, diff, password)
	extra := fmt.Sprintf("\n[[users]]\nname = %q\npassword = %q\n\n[[users]]\nname = %q\npassword = %q\n",
		role, verifier, diff, otherVerifier(t, password))
	if strings.Contains(extra, password) {
		t.Fatal("the config holds the plaintext password")
	}
	primary := cl.Primary.Port
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			// fallback_policy wait, as the other routing tests: a read
			// waits for a replica instead of falling back to the primary
			// while a verdict is late on a loaded host.
			px := routedProxy(t, cl, kinetictest.Params{PoolMode: mode, FallbackPolicy: "wait", Extra: extra})
			dsn := px.DSN(role, password, pgtest.AppDB)

			// pgx: a write on the primary as the role, reads on a replica.
			c := connect(t, ctx, dsn)
			defer c.Close(ctx)
			if who := queryString(t, ctx, c, "select current_user"); who != role {
				t.Fatalf("current_user = %q, want %q", who, role)
			}
			if port := portOf(t, ctx, c, "insert into "+table+" (who) values (current_user) returning inet_server_port()"); port != primary {
				t.Fatalf("the insert ran on port %d, not the primary's %d", port, primary)
			}
			kinetictest.AwaitReadOn(t, ctx, dsn, cl.StandbyPorts())

			// psql (libpq), reads until one reaches a replica.
			env := clientEnv("PGPASSWORD=" + password) // (exec keeps the last value)
			conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", px.Port(), role, pgtest.AppDB)
			script := strings.Repeat("select current_user, inet_server_port();\n", 20)
			out := mustPsql(t, ctx, conninfo, env, strings.NewReader(script), "-At", "-F", " ").stdout
			if !readsOn(t, out, role, cl.StandbyPorts()) {
				t.Errorf("psql: no read reached a replica:\n%s", out)
			}

			// psycopg 3 (libpq under Python), autocommit reads.
			res := psycopgReads(t, ctx, conninfo+" password="+password, false)
			if res.code != 0 || !readsOn(t, res.stdout, role, cl.StandbyPorts()) {
				t.Errorf("psycopg: no read reached a replica:\n%s", res)
			}

			// A wrong password fails as always, with kineticd's 28P01.
			if _, err := pgx.Connect(ctx, px.DSN(role, password+"x", pgtest.AppDB)); pgCode(err) != "28P01" {
				t.Errorf("wrong password: %v", err)
			}
			// The server's verifier for diff has another salt.
			_, err := pgx.Connect(ctx, px.DSN(diff, password, pgtest.AppDB))
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "28P01" || !strings.Contains(pe.Detail, "verifier for this role differs") ||
				!strings.Contains(pe.Detail, "backend_password") {
				t.Errorf("differing verifier: %v (detail %q)", err, detailOf(err))
			}
		})
	}
}

func detailOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Detail
	}
	return ""
}

// readsOn reports whether out's lines ("USER PORT") are all by user and
// at least one ran on one of ports.
func readsOn(t *testing.T, out, user string, ports map[int]bool) bool {
	t.Helper()
	on := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		who, p, _ := strings.Cut(line, " ")
		port, err := strconv.Atoi(p)
		if who != user || err != nil {
			t.Errorf("unexpected line %q", line)
			return false
		}
		on = on || ports[port]
	}
	return on
}

// TestMD5HashPassThrough: md5user's [[users]] secret is its md5 hash and
// there is no backend_password; the server (md5 in pg_hba.conf) accepts
// kineticd's answer made from the hash.
func TestMD5HashPassThrough(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	hash := "md5" + md5hex(pgtest.MD5Password+pgtest.MD5User)
	toml := strings.Replace(kinetictest.TOML(cl, kinetictest.Params{}),
		fmt.Sprintf("name = %q\npassword = %q", pgtest.MD5User, pgtest.MD5Password),
		fmt.Sprintf("name = %q\npassword = %q", pgtest.MD5User, hash), 1)
	if !strings.Contains(toml, hash) || strings.Contains(toml, pgtest.MD5Password) {
		t.Fatalf("config does not hold md5user's hash alone:\n%s", toml)
	}
	addr := startTOML(t, toml)
	c := connect(t, ctx, kinetictest.DSN(addr, pgtest.MD5User, pgtest.MD5Password, pgtest.AppDB))
	defer c.Close(ctx)
	if who := queryString(t, ctx, c, "select current_user"); who != pgtest.MD5User {
		t.Fatalf("current_user = %q", who)
	}
	if _, err := pgx.Connect(ctx, kinetictest.DSN(addr, pgtest.MD5User, "wrong", pgtest.AppDB)); pgCode(err) != "28P01" {
		t.Errorf("wrong password: %v", err)
	}
}

// psycopgReads runs 20 autocommit reads of current_user and
// inet_server_port() through psycopg 3 (libpq under Python) with conninfo,
// one "user port" line each; wantTLS asserts the connection is on TLS. It
// skips the test when psycopg is missing, except under CI.
func psycopgReads(t *testing.T, ctx context.Context, conninfo string, wantTLS bool) psqlResult {
	t.Helper()
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import psycopg").Run() != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("psycopg is missing for /usr/bin/python3 (Debian python3-psycopg); CI is set")
		}
		t.Skip("psycopg is missing for /usr/bin/python3 (Debian python3-psycopg)")
	}
	script := `import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as c:
    assert c.pgconn.ssl_in_use or sys.argv[2] != "tls", "not on TLS"
    for _ in range(20):
        print(*c.execute("select current_user, inet_server_port()").fetchone())
`
	tls := "any"
	if wantTLS {
		tls = "tls"
	}
	cmd := exec.CommandContext(ctx, py, "-c", script, conninfo, tls)
	cmd.Env = clientEnv()
	return runCommand(t, cmd)
}

// startTOML runs an in-process kineticd with config text toml until the
// test ends, and returns its address.
func startTOML(t *testing.T, toml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kineticd.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("config invalid:\n%v", err)
	}
	srv, err := proxy.New(proxy.Options{Config: config.NewHolder(cfg), Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, proxy.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// TestSCRAMPassThroughChannelBinding: the client binds its SCRAM exchange
// with kineticd to TLS (SCRAM-SHA-256-PLUS, channel_binding=require), and
// kineticd's pass-through login to the server binds to the server's TLS
// certificate in turn (the server offers -PLUS over TLS and refuses a
// wrong binding).
func TestSCRAMPassThroughChannelBinding(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	enableServerSSL(t, ctx, cl.Primary)
	role := uniqueIdent("ptcb")
	password := "cb-" + role
	verifier, _ := passThroughRole(t, ctx, cl, role, password)
	cert, key := selfSigned(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{TLSMode: "require", TLSCert: cert, TLSKey: key, BackendTLSMode: "require",
		Extra: fmt.Sprintf("\n[[users]]\nname = %q\npassword = %q\n", role, verifier)})
	dsn := strings.Replace(px.DSN(role, password, pgtest.AppDB), "sslmode=disable", "sslmode=require&channel_binding=require", 1)
	c := connect(t, ctx, dsn)
	defer c.Close(ctx)
	var who string
	var ssl bool
	if err := c.QueryRow(ctx, "select current_user, ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&who, &ssl); err != nil {
		t.Fatal(err)
	}
	if who != role || !ssl {
		t.Fatalf("current_user %q, server connection over TLS %v", who, ssl)
	}
}

// TestPassThroughProbeUser: the health probes log in as the first
// [[users]] entry; when that is a pass-through user they cannot log in
// before its first client has proved the verifier (so reads stay on the
// primary), and do once one has: then reads reach the replicas.
func TestPassThroughProbeUser(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 2*time.Minute)
	role := uniqueIdent("ptprobe")
	password := "probe-" + role
	verifier, _ := passThroughRole(t, ctx, cl, role, password)
	p := kinetictest.Params{ReadRoutingMode: "prefer_replica"}
	for _, s := range cl.Standbys {
		p.Replicas = append(p.Replicas, s.Addr())
	}
	first := fmt.Sprintf("[[users]]\nname = %q\npassword = %q\n\n[[users]]\nname = \"app\"", role, verifier)
	toml := strings.Replace(kinetictest.TOML(cl, p), "[[users]]\nname = \"app\"", first, 1)
	if !strings.Contains(toml, first) {
		t.Fatal("the pass-through user is not first")
	}
	addr := startTOML(t, toml)
	app := connect(t, ctx, kinetictest.DSN(addr, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	defer app.Close(ctx)
	for i := 0; i < 20; i++ {
		if port := portOf(t, ctx, app, "select inet_server_port()"); port != cl.Primary.Port {
			t.Fatalf("read %d ran on port %d before any probe could log in", i, port)
		}
	}
	c := connect(t, ctx, kinetictest.DSN(addr, role, password, pgtest.AppDB))
	c.Close(ctx)
	kinetictest.AwaitReadOn(t, ctx, kinetictest.DSN(addr, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB), cl.StandbyPorts())
}

// TestNoPlaintextPasswordAnywhere: a kineticd whose configuration holds no
// plaintext password at all — its only [[users]] entries are the servers'
// SCRAM verifier of one role and the md5 hash of another, neither with a
// backend_password — serves both with routing on: the probes log in with
// the verifier user's ClientKey once a client proved it, writes run on
// the primary and reads reach the replicas, through pgx and psql (libpq).
// Every login to every server is a pass-through.
func TestNoPlaintextPasswordAnywhere(t *testing.T) {
	cl := pgtest.Shared(t)
	ctx := ctxT(t, 2*time.Minute)
	role := uniqueIdent("ptonly")
	password := "only-" + role
	verifier, table := passThroughRole(t, ctx, cl, role, password)
	users := fmt.Sprintf("[[users]]\nname = %q\npassword = %q\n\n[[users]]\nname = %q\npassword = \"md5%x\"\n",
		role, verifier, pgtest.MD5User, md5.Sum([]byte(pgtest.MD5Password+pgtest.MD5User)))
	p := kinetictest.Params{ReadRoutingMode: "prefer_replica", FallbackPolicy: "wait", Users: users}
	for _, s := range cl.Standbys {
		p.Replicas = append(p.Replicas, s.Addr())
	}
	toml := kinetictest.TOML(cl, p)
	for _, line := range strings.Split(toml, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.Contains(strings.TrimSpace(k), "password") {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if !strings.HasPrefix(v, "SCRAM-SHA-256$") && !strings.HasPrefix(v, "md5") {
			t.Fatalf("the config holds a plaintext password: %s", line)
		}
	}
	if strings.Contains(toml, password) || strings.Contains(toml, pgtest.MD5Password) || strings.Contains(toml, pgtest.AppPassword) {
		t.Fatal("the config holds a plaintext password")
	}
	addr := startTOML(t, toml)
	dsn := kinetictest.DSN(addr, role, password, pgtest.AppDB)
	c := connect(t, ctx, dsn)
	defer c.Close(ctx)
	if port := portOf(t, ctx, c, "insert into "+table+" (who) values (current_user) returning inet_server_port()"); port != cl.Primary.Port {
		t.Fatalf("the insert ran on port %d, not the primary's %d", port, cl.Primary.Port)
	}
	kinetictest.AwaitReadOn(t, ctx, dsn, cl.StandbyPorts())
	// psql as the verifier user; the md5 user through pgx (its hash
	// answers the server's md5 challenge).
	env := clientEnv("PGPASSWORD=" + password)
	conninfo := fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable", strings.Split(addr, ":")[0], strings.Split(addr, ":")[1], role, pgtest.AppDB)
	out := mustPsql(t, ctx, conninfo, env, strings.NewReader(strings.Repeat("select current_user, inet_server_port();\n", 20)), "-At", "-F", " ").stdout
	if !readsOn(t, out, role, cl.StandbyPorts()) {
		t.Errorf("psql: no read reached a replica:\n%s", out)
	}
	m := connect(t, ctx, kinetictest.DSN(addr, pgtest.MD5User, pgtest.MD5Password, pgtest.AppDB))
	defer m.Close(ctx)
	if who := queryString(t, ctx, m, "select current_user"); who != pgtest.MD5User {
		t.Fatalf("current_user = %q, want %q", who, pgtest.MD5User)
	}
}
