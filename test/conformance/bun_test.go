package conformance

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// bun's pgdriver: a database/sql driver with a wire protocol of its own
// (not pgx's, not lib/pq's), at a pinned version (this repository does not
// require it; its module comes through the module proxy). Its tests read
// one DSN from PG.
const (
	bunModule  = "github.com/uptrace/bun/driver/pgdriver"
	bunVersion = "v1.2.18"

	bunDB     = "bun"
	bunUser   = "bun"
	bunSecret = "bun-secret"

	// envBunRun is -test.run for its binary, as envRun is for pgx's.
	envBunRun = "KINETIC_CONFORMANCE_BUN_RUN"
)

var bunRoute = driverRoute{name: "bun", db: bunDB, users: []routeUser{{bunUser, bunSecret, bunSecret}}}

// TestBunSuite runs pgdriver's own tests as TestPgxSuite runs pgx's:
// directly, then through kineticd on the four targets, under the same pass
// rule, on a cluster of two standbys. They are few (a dozen), but its
// protocol code is a third one: context cancellation by CancelRequest
// under load (TestCancel), statement_timeout, a startup parameter
// (search_path), and transactions opened with every isolation level, read
// only and not (TestTransactionIsolationLevels: BEGIN with options, then
// SHOW of them inside).
func TestBunSuite(t *testing.T) {
	skipUnlessEnabled(t)
	begin := time.Now()
	kinetictest.Binary(t)
	kineticd := sourceVersion()
	built := buildModule(t, bunModule, bunVersion, []pkgDir{{"pgdriver", "."}})[0]

	c, ctx := conformanceCluster(t, 2)
	if err := c.Primary.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", bunUser, bunSecret)); err != nil {
		t.Fatal(err)
	}
	reps := runDriver(t, ctx, c, driverSuite{
		name: "bun pgdriver", bins: []binary{built}, route: bunRoute,
		vars: func(_ string, port int) []string {
			return []string{fmt.Sprintf("PG=postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", bunUser, bunSecret, port, bunDB)}
		},
		reset: resetBunDB, runPattern: os.Getenv(envBunRun),
	})
	t.Logf("bun pgdriver %s conformance of kineticd %s, %v in all:\n%s", bunVersion, kineticd, time.Since(begin).Round(time.Second), table(reps))
}

// resetBunDB recreates pgdriver's database for every target.
func resetBunDB(t *testing.T, ctx context.Context, c *pgtest.Cluster) {
	recreateDB(t, ctx, c, bunDB, bunUser)
}
