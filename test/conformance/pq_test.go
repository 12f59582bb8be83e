package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// lib/pq, the other widely used Go driver, at a pinned version (this
// repository does not require it; its module comes through the module
// proxy). Its tests read the libpq variables PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE and PGSSLMODE (internal/pqtest).
const (
	pqModule  = "github.com/lib/pq"
	pqVersion = "v1.12.3"

	pqDB       = "pqgo"
	pqUser     = "pqgo" // a superuser, as in its CI (testdata/postgres)
	pqSecret   = "secret"
	pqPassword = "wordpass" // pqgomd5, pqgopassword, pqgoscram's, from its CI

	// envPqRun is -test.run for lib/pq's binary, as envRun is for pgx's.
	envPqRun = "KINETIC_CONFORMANCE_PQ_RUN"
)

// pqHBA goes in front of pgtest's pg_hba.conf (whose last line asks every
// other role for SCRAM): lib/pq's TestAuth logs in with md5 and with a
// cleartext password.
const pqHBA = `# lib/pq conformance (test/conformance)
host    all  pqgomd5       127.0.0.1/32  md5
host    all  pqgopassword  127.0.0.1/32  password
`

// pqRoute is lib/pq's database and roles. (pqgo logs in with a password
// through kineticd and directly alike: ~/.pgpass, pqVars.)
var pqRoute = driverRoute{name: "pq", db: pqDB, users: []routeUser{
	{pqUser, pqSecret, pqSecret},
	{"pqgomd5", md5Secret("pqgomd5", pqPassword), pqPassword},
	{"pqgoscram", pqPassword, pqPassword},
	{"pqgopassword", pqPassword, pqPassword},
}}

// TestPqSuite runs lib/pq's own tests as TestPgxSuite runs pgx's: directly,
// then through kineticd on the four targets, under the same pass rule. Its
// CI runs them twice, with text and with binary parameters
// (PQTEST_BINARY_PARAMETERS): so does this, as the packages pq and
// pq-binary.
func TestPqSuite(t *testing.T) {
	skipUnlessEnabled(t)
	begin := time.Now()
	kinetictest.Binary(t)
	kineticd := sourceVersion()
	built := buildModule(t, pqModule, pqVersion, []pkgDir{{"pq", "."}})[0]
	// Example_openConfig dials localhost:5432 whatever the variables say,
	// and the other two the host "postgres" (its CI's /etc/hosts names
	// 127.0.0.1 so); log.Fatal ends the binary.
	//
	// TestPing runs on its own, after the rest: it terminates the backend
	// pg_backend_pid() names, which in transaction pooling is a pooled
	// connection (deviation (b)), and another test's transaction running
	// on that connection at the moment failed with it (TestTxOptions:
	// "driver: bad connection", about one run in four).
	//
	// The Listener tests (notify_test.go) run on their own too: its
	// wantEvent panics when a Listener's event takes over 100 ms, which
	// ends the binary (timingPanics), and in CI that once left about 150
	// other tests unrun. Their binary starts with the ListenerConn tests,
	// which wait for nothing, so that the first Listener does not also pay
	// for the process's first connection.
	const skip = "^(Example_openConfig|ExampleNewConnector|ExampleRegisterTLSConfig|TestPing|TestListener.*)$"
	text, bin := built, built
	text.env, text.skip = []string{"PQTEST_BINARY_PARAMETERS=no"}, skip
	bin.pkg, bin.env, bin.skip = "pq-binary", []string{"PQTEST_BINARY_PARAMETERS=yes"}, skip
	ping, binPing := text, bin
	ping.pkg, ping.skip, ping.run = "pq-ping", "", "^TestPing$"
	binPing.pkg, binPing.skip, binPing.run = "pq-binary-ping", "", "^TestPing$"
	listen, binListen := text, bin
	listen.pkg, listen.skip, listen.run = "pq-listen", "", "^TestListener"
	binListen.pkg, binListen.skip, binListen.run = "pq-binary-listen", "", "^TestListener"

	// Two standbys (pgx's run has one): a session's statements spread over
	// two replicas are judged too.
	c, ctx := conformanceCluster(t, 2)
	setupPq(t, ctx, c)
	reps := runDriver(t, ctx, c, driverSuite{
		name: "lib/pq", bins: []binary{text, bin, listen, binListen, ping, binPing}, route: pqRoute,
		vars: pqVars(t), reset: resetPqDB, runPattern: os.Getenv(envPqRun),
	})
	t.Logf("lib/pq %s conformance of kineticd %s, %v in all:\n%s", pqVersion, kineticd, time.Since(begin).Round(time.Second), table(reps))
}

// setupPq makes c what lib/pq's suite expects (its testdata/postgres): the
// superuser pqgo and the roles its authentication tests log in as.
func setupPq(t *testing.T, ctx context.Context, c *pgtest.Cluster) {
	t.Helper()
	prependHBA(t, ctx, c, pqHBA)
	if err := c.Primary.Exec(ctx, fmt.Sprintf(`
		CREATE ROLE %[1]s SUPERUSER LOGIN PASSWORD '%[2]s';
		CREATE ROLE pqgoscram LOGIN PASSWORD '%[3]s';
		CREATE ROLE pqgopassword LOGIN PASSWORD '%[3]s';
		SET password_encryption = 'md5';
		CREATE ROLE pqgomd5 LOGIN PASSWORD '%[3]s';`, pqUser, pqSecret, pqPassword)); err != nil {
		t.Fatal(err)
	}
}

// resetPqDB recreates lib/pq's database for every target and waits until
// the replicas have it.
func resetPqDB(t *testing.T, ctx context.Context, c *pgtest.Cluster) {
	recreateDB(t, ctx, c, pqDB, pqUser)
}

// recreateDB drops database db (ending its sessions) and creates it again
// owned by owner, then waits until the replicas have it.
func recreateDB(t *testing.T, ctx context.Context, c *pgtest.Cluster, db, owner string) {
	t.Helper()
	for _, sql := range []string{"DROP DATABASE IF EXISTS " + db + " WITH (FORCE)", "CREATE DATABASE " + db + " OWNER " + owner} {
		if err := c.Primary.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
}

// pqVars point lib/pq's tests at port as its CI does: PGPORT only, the
// rest its defaults (host localhost, user and database pqgo, sslmode
// disable: internal/pqtest). pqgo's password comes from ~/.pgpass in a
// HOME of the run's own (its tests compare connection settings, where a
// PGPASSWORD would show). Its TLS and client-certificate tests fail alike
// everywhere then (no certificates), so they are not compared.
func pqVars(t *testing.T) func(host string, port int) []string {
	home := t.TempDir()
	pgpass := fmt.Sprintf("*:*:*:%s:%s\n", pqUser, pqSecret)
	if err := os.WriteFile(filepath.Join(home, ".pgpass"), []byte(pgpass), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(_ string, port int) []string {
		return []string{fmt.Sprintf("PGPORT=%d", port), "HOME=" + home}
	}
}

// prependHBA puts lines in front of every server's pg_hba.conf (the first
// matching line wins) and reloads it.
func prependHBA(t *testing.T, ctx context.Context, c *pgtest.Cluster, lines string) {
	t.Helper()
	for _, s := range append([]*pgtest.Server{c.Primary}, c.Standbys...) {
		path := filepath.Join(s.DataDir, "pg_hba.conf")
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// Rewriting the file in place keeps its owner (the server's user).
		if err := os.WriteFile(path, []byte(lines+string(old)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := s.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
}
