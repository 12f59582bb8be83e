package conformance

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// go-pg: an ORM with a wire protocol of its own (neither pgx's, lib/pq's
// nor pgdriver's), at a pinned version (this repository does not require
// it; its module comes through the module proxy). Its tests log in as
// postgres with password postgres to database postgres at PGHOST:PGPORT
// (db_test.go's pgOptions and the examples), with PGSSLMODE=disable as
// its Makefile runs them, and need hstore there.
const (
	gopgModule  = "github.com/go-pg/pg/v10"
	gopgVersion = "v10.11.0"

	gopgDB       = "postgres"
	gopgUser     = "postgres" // the clusters' superuser; trusted directly, a password through kineticd
	gopgPassword = "postgres"

	// envGopgRun is -test.run for its binary, as envRun is for pgx's.
	envGopgRun = "KINETIC_CONFORMANCE_GOPG_RUN"
)

// gopgRoute is go-pg's: database postgres, user postgres. Its examples
// connect a new pool each (modelDB) and close none, so in session pooling
// more clients stay connected by the end than a pool of 40 serves (the
// next login then waits out acquire_timeout_ms); the pool is sized for them.
//
// Its reads run with read_consistency = "strict": go-pg is a pool of
// connections, and its specs read on one connection what they wrote on
// another an instant before (SelectAndCount runs its SELECT and its
// count(*) on two connections at once, right after the INSERT on a
// third). Each connection is a session of its own to kineticd, whose
// session contract lets such a read run on a replica that has not
// replayed the INSERT yet: a CI run counted 0 of 3 books in transaction
// pooling, routed. "strict" is the setting such an application needs
// (docs/behaviour.md, "Reads across connections"); the other suites keep
// the default.
var gopgRoute = driverRoute{name: "gopg", db: gopgDB, users: []routeUser{{gopgUser, gopgPassword, gopgPassword}}, poolSize: 100,
	consistency: "strict"}

// TestGopgSuite runs go-pg's own tests as TestPgxSuite runs pgx's:
// directly, then through kineticd on the four targets, under the same pass
// rule, on a cluster of two standbys. Its Go tests and examples count one
// by one; its 149 Ginkgo specs (DB, Tx, Listener, ORM, pool, COPY,
// cancellation, statement timeouts, hooks) run inside one of them,
// TestGinkgo, whose output names a failing spec. It found that a read
// after VACUUM waited 0.4 s for the replica (docs/behaviour.md, "WAL the
// primary has not written out").
func TestGopgSuite(t *testing.T) {
	skipUnlessEnabled(t)
	begin := time.Now()
	kinetictest.Binary(t)
	kineticd := sourceVersion()
	built := buildModule(t, gopgModule, gopgVersion, []pkgDir{{"gopg", "."}})[0]

	c, ctx := conformanceCluster(t, 2)
	if err := c.Primary.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", gopgUser, gopgPassword)); err != nil {
		t.Fatal(err)
	}
	reps := runDriver(t, ctx, c, driverSuite{
		name: "go-pg", bins: []binary{built}, route: gopgRoute,
		vars: func(host string, port int) []string {
			return []string{"PGHOST=" + host, fmt.Sprintf("PGPORT=%d", port), "PGSSLMODE=disable", "TZ="}
		},
		reset: resetGopgDB, runPattern: os.Getenv(envGopgRun),
	})
	t.Logf("go-pg %s conformance of kineticd %s, %v in all:\n%s", gopgVersion, kineticd, time.Since(begin).Round(time.Second), table(reps))
}

// resetGopgDB gives every target an empty public schema in database
// postgres, with hstore.
func resetGopgDB(t *testing.T, ctx context.Context, c *pgtest.Cluster) {
	t.Helper()
	sql := strings.Join([]string{
		"DROP SCHEMA IF EXISTS public CASCADE",
		"CREATE SCHEMA public",
		"GRANT ALL ON SCHEMA public TO public",
		"CREATE EXTENSION hstore",
	}, "; ")
	if err := c.Primary.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
}
