package conformance

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// The database and roles pgx's suite expects, after pgx's
// testsetup/postgresql_setup.sql and the connection strings of its CI
// workflow (.github/workflows/ci.yml). The roles are superusers there too:
// tests SET log_statement, create and drop types and tables, and terminate
// each other's backends.
const (
	pgxDB       = "pgx_test"
	pgxTemplate = "pgx_test_template" // pgxDB is recreated from it for every target
	pgxPassword = "secret"

	md5Role   = "pgx_md5"   // md5-hashed password, md5 in pg_hba.conf
	scramRole = "pgx_scram" // SCRAM verifier, scram-sha-256
	plainRole = "pgx_pw"    // SCRAM verifier, "password" (cleartext) in pg_hba.conf
)

// hbaLines go in front of pgtest's pg_hba.conf on every server (the first
// matching line wins): kineticd logs in to the primary and to the replica
// as these roles too. pgtest's own lines stay for its roles.
const hbaLines = `# pgx conformance (test/conformance)
host    all  pgx_md5    127.0.0.1/32  md5
host    all  pgx_scram  127.0.0.1/32  scram-sha-256
host    all  pgx_pw     127.0.0.1/32  password
`

// setupCluster makes c what pgx's suite expects: its roles, pg_hba.conf
// lines and a template database with the extensions hstore and ltree and
// the domain uint64.
func setupCluster(t *testing.T, ctx context.Context, c *pgtest.Cluster) {
	t.Helper()
	prependHBA(t, ctx, c, hbaLines)
	if err := c.Primary.Exec(ctx, fmt.Sprintf(`
		SET password_encryption = 'md5';
		CREATE ROLE %[1]s SUPERUSER LOGIN PASSWORD '%[4]s';
		SET password_encryption = 'scram-sha-256';
		CREATE ROLE %[2]s SUPERUSER LOGIN PASSWORD '%[4]s';
		CREATE ROLE %[3]s SUPERUSER LOGIN PASSWORD '%[4]s';`,
		md5Role, scramRole, plainRole, pgxPassword)); err != nil {
		t.Fatal(err)
	}
	if err := c.Primary.Exec(ctx, "CREATE DATABASE "+pgxTemplate); err != nil {
		t.Fatal(err)
	}
	superExec(t, ctx, c.Primary, pgxTemplate, `
		CREATE EXTENSION hstore;
		CREATE EXTENSION ltree;
		CREATE DOMAIN uint64 AS numeric(20,0);`)
}

// resetDB recreates pgxDB from the template, so every target starts from
// the same database whatever an earlier target's failing tests left behind,
// and waits until the replica has it.
func resetDB(t *testing.T, ctx context.Context, c *pgtest.Cluster) {
	t.Helper()
	if err := c.Primary.Exec(ctx, "DROP DATABASE IF EXISTS "+pgxDB+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Primary.Exec(ctx, "CREATE DATABASE "+pgxDB+" TEMPLATE "+pgxTemplate); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
}

// superExec runs sql as the superuser in database db of s.
func superExec(t *testing.T, ctx context.Context, s *pgtest.Server, db, sql string) {
	t.Helper()
	conn, err := pgconn.Connect(ctx, s.DSN(pgtest.SuperUser, "", db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", strings.TrimSpace(sql), err)
	}
}

// md5Secret is PostgreSQL's md5 password hash, which makes kineticd ask
// the client for md5 as the server would.
func md5Secret(user, password string) string {
	sum := md5.Sum([]byte(password + user))
	return "md5" + hex.EncodeToString(sum[:])
}

// connStrings are the PGX_TEST_* variables for a server (or kineticd) at
// addr: one set for every target, TCP only, TLS off. The unix-socket, TLS,
// SCRAM-PLUS, client-certificate and OAuth variables stay unset, so those
// tests skip everywhere alike.
func connStrings(host string, port int) []string {
	cs := func(user string, extra string) string {
		return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable%s", host, port, user, pgxPassword, pgxDB, extra)
	}
	return []string{
		"PGX_TEST_DATABASE=" + cs(md5Role, ""),
		"PGX_TEST_TCP_CONN_STRING=" + cs(md5Role, ""),
		"PGX_TEST_MD5_PASSWORD_CONN_STRING=" + cs(md5Role, ""),
		"PGX_TEST_SCRAM_PASSWORD_CONN_STRING=" + cs(scramRole, " channel_binding=disable"),
		"PGX_TEST_PLAIN_PASSWORD_CONN_STRING=" + cs(plainRole, ""),
		// pgx's PgBouncer tests (statement cache modes, cancel through a
		// pooler) are as meaningful for kineticd, and pass directly.
		"PGX_TEST_PGBOUNCER_CONN_STRING=" + cs(md5Role, ""),
	}
}

// suiteEnv is the environment of a pgx test binary: ours without any PG*
// variable (pgx reads PGHOST, PGUSER, PGPORT... as defaults, and a stray
// PGX_TEST_* would change which tests run), plus vars.
func suiteEnv(vars []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, vars...)
}
