package conformance

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Environment variables of the run (doc.go).
const (
	envEnable = "KINETIC_CONFORMANCE"         // "1" runs TestPgxSuite
	envRun    = "KINETIC_CONFORMANCE_PGX_RUN" // -test.run for pgx's binaries
	envOut    = "KINETIC_CONFORMANCE_OUT"     // a directory for the raw test2json streams
)

// target is one place pgx's suite runs against.
type target struct {
	name     string // "direct", "session/off", ...
	poolMode string // "" for direct
	routing  string // read_routing_mode
}

var targets = []target{
	{name: "direct"},
	{name: "session/off", poolMode: "session", routing: "off"},
	{name: "session/routed", poolMode: "session", routing: "prefer_replica"},
	{name: "transaction/off", poolMode: "transaction", routing: "off"},
	{name: "transaction/routed", poolMode: "transaction", routing: "prefer_replica"},
}

// TestPgxSuite runs pgx's own tests directly against a PostgreSQL 15
// primary and then through kineticd in four configurations, and fails on
// any test that passes directly and not through kineticd unless allowed or
// knownOpen lists it.
func TestPgxSuite(t *testing.T) {
	skipUnlessEnabled(t)
	begin := time.Now()
	// kineticd is built from the working tree, which others may be
	// changing: build it now and name it now, so the table's heading names
	// what was judged.
	kinetictest.Binary(t)
	kineticd := sourceVersion()
	version, bins := buildPgx(t)
	c, ctx := conformanceCluster(t, 1)
	setupCluster(t, ctx, c)
	reps := runDriver(t, ctx, c, driverSuite{
		name: "pgx", bins: bins, route: pgxRoute,
		vars: connStrings, reset: resetDB, runPattern: os.Getenv(envRun),
	})
	t.Logf("pgx %s conformance of kineticd %s, %v in all:\n%s", version, kineticd, time.Since(begin).Round(time.Second), table(reps))
}

func skipUnlessEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv(envEnable) != "1" {
		t.Skipf("the drivers' conformance run takes ~23 minutes and is not part of go test ./...; run it with `make conformance` "+
			"or `%s=1 go test -count=1 -timeout 40m -v ./test/conformance/` (doc.go: one target with -run 'TestPgxSuite/transaction/routed', one pgx test with %s=TestName)",
			envEnable, envRun)
	}
}

// conformanceCluster starts a PostgreSQL 15 primary with streaming
// replicas for one driver's run; kineticd routes to all of them.
func conformanceCluster(t *testing.T, standbys int) (*pgtest.Cluster, context.Context) {
	t.Helper()
	c := pgtest.New(t, pgtest.Options{Standbys: standbys})
	if dir := os.Getenv(envOut); dir != "" {
		// The servers' own logs go with the raw streams (registered after
		// the cluster, so this runs before it is removed).
		t.Cleanup(func() { keepServerLogs(t, dir, c) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c, ctx
}

// driverSuite is one driver's own test suite, ready to run.
type driverSuite struct {
	name  string
	bins  []binary
	route driverRoute
	// vars are the environment variables that point the driver's tests
	// at a server or at kineticd.
	vars func(host string, port int) []string
	// reset gives every target the same database, whatever an earlier
	// one's failures left behind.
	reset      func(t *testing.T, ctx context.Context, c *pgtest.Cluster)
	runPattern string // -test.run for its binaries
}

// runDriver runs d's binaries directly against c's primary, the baseline,
// and then through kineticd on every target (-run selects among those),
// and judges each target against the baseline. It returns the reports
// for the table: the baseline's, then each target's.
func runDriver(t *testing.T, ctx context.Context, c *pgtest.Cluster, d driverSuite) []*targetReport {
	t.Helper()
	d.reset(t, ctx, c)
	direct, directRep := runTarget(t, ctx, "direct", d.bins, d.vars("127.0.0.1", c.Primary.Port), d.runPattern)
	directRep.Target = "direct"
	reps := []*targetReport{directRep}
	if directRep.count(vPassed) == 0 {
		t.Fatalf("no %s test passed directly against PostgreSQL; the setup is broken:\n%s", d.name, table(reps))
	}
	for _, br := range directRep.Broken {
		t.Errorf("a %s test binary did not run to the end against PostgreSQL: %s", d.name, br)
	}
	if n := directRep.count(vFailed); n > 0 {
		// Not a kineticd failure, but every such test is left out of the
		// comparison, so say it loudly.
		t.Logf("WARNING: %d %s tests fail directly against PostgreSQL and are not compared", n, d.name)
	}

	for _, tg := range targets[1:] {
		t.Run(tg.name, func(t *testing.T) {
			d.reset(t, ctx, c)
			px := startKineticd(t, ctx, c, tg, d.route)
			got, rep := runTarget(t, ctx, tg.name, d.bins, d.vars("127.0.0.1", portOf(px.Addr)), d.runPattern)
			judgedRep := judge(tg.name, direct, got, allowed, knownOpen)
			judgedRep.Wall, judgedRep.Broken = rep.Wall, rep.Broken
			reps = append(reps, judgedRep)
			for _, br := range rep.Broken {
				t.Errorf("a %s test binary did not run to the end through kineticd (%s): %s", d.name, tg.name, br)
			}
			for _, j := range judgedRep.Tests {
				if j.Verdict == vFailed {
					t.Errorf("%s passes directly but not through kineticd (%s): %s", j.Key, tg.name, j.Line)
					if r := got[j.Key]; r != nil && len(r.Output) > 0 {
						// The whole output: a flake seen once in CI must be
						// diagnosable from CI's log.
						t.Logf("the output of %s on %s:\n%s", j.Key, tg.name, strings.Join(r.Output, "\n"))
					}
				}
			}
			if slow := slowest(direct, got); slow != "" {
				t.Logf("%s tests much slower on %s than directly (not judged: a hint of a wait or of quadratic work; pgx's TestConnExecBatchHuge took 46 s routed against 1 s directly until 2026-12-07):\n%s", d.name, tg.name, slow)
			}
			for _, e := range judgedRep.NowPassing {
				t.Logf("%s passes on %s although listed (%q, %s): remove the entry if it stays so", e.Test, tg.name, e.Target, e.Why)
			}
		})
	}
	return reps
}

// runTarget runs every binary of a driver against the conn strings vars, one after
// another (the machine has two cores), and merges their tests.
// With KINETIC_CONFORMANCE_OUT set, each binary's test2json stream is kept
// there as TARGET-PKG.json (session_routed-pgconn.json) for the whole
// output of a failing test.
func runTarget(t *testing.T, ctx context.Context, name string, bins []binary, vars []string, runPattern string) (map[string]*testResult, *targetReport) {
	t.Helper()
	all := map[string]*testResult{}
	rep := &targetReport{}
	for _, b := range bins {
		var keep io.Writer
		if dir := os.Getenv(envOut); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+"-"+b.pkg+".json"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			keep = f
		}
		run, err := runSuite(ctx, b, append(suiteEnv(vars), b.env...), runPattern, keep)
		for rerun := 1; err == nil && rerun <= maxReruns; rerun++ {
			why := timingPanic(b.pkg, run.Broken)
			if why == "" {
				break
			}
			// Not judged: the driver's own bound (timingPanics).
			t.Logf("%s on %s ended early (%s: %s); running it again (%d of %d)", b.pkg, name, run.Broken, why, rerun, maxReruns)
			run, err = runSuite(ctx, b, append(suiteEnv(vars), b.env...), runPattern, keep)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d tests in %v", b.pkg, len(run.Tests), run.Wall.Round(time.Millisecond))
		rep.Wall += run.Wall
		if run.Broken != "" {
			rep.Broken = append(rep.Broken, b.pkg+": "+run.Broken)
		}
		for k, r := range run.Tests {
			all[k] = r
		}
	}
	d := directReport(all)
	d.Wall, d.Broken = rep.Wall, rep.Broken
	return all, d
}

// routeUser is a [[users]] entry of a driver's route: the secret clients
// authenticate with (a password, or an md5 hash so that kineticd asks for
// md5 as the server does) and the password kineticd logs in to servers
// with.
type routeUser struct{ name, secret, backend string }

// driverRoute is what a driver's suite needs of kineticd: a route for its
// database and its roles as [[users]] (the first one is used to wait for
// the replica).
type driverRoute struct {
	name, db string
	users    []routeUser
	// poolSize is [routes.pool] size, 40 when 0: in session pooling a
	// client holds a server connection for as long as it is connected,
	// and a suite that leaves clients connected needs a larger pool (as
	// behind PgBouncer), or its next login waits for acquire_timeout_ms.
	poolSize int
	// consistency is [routes.freshness] read_consistency, "session" when
	// "". A suite whose client is a pool of connections and that reads on
	// one what it wrote on another an instant before needs "strict".
	consistency string
}

// pgxRoute is pgx's: database pgx_test, its three roles.
var pgxRoute = driverRoute{name: "pgx", db: pgxDB, users: []routeUser{
	{md5Role, md5Secret(md5Role, pgxPassword), pgxPassword},
	{scramRole, pgxPassword, pgxPassword},
	{plainRole, pgxPassword, pgxPassword},
}}

// startKineticd runs the kineticd binary for target tg with route r in
// front of the cluster's primary and replicas, r's roles as [[users]], and
// pools large enough for the drivers' parallel tests.
func startKineticd(t *testing.T, ctx context.Context, c *pgtest.Cluster, tg target, r driverRoute) *kinetictest.Process {
	t.Helper()
	var replicas []string
	var replicaTOML strings.Builder
	for _, s := range c.Standbys {
		replicas = append(replicas, s.Addr())
		fmt.Fprintf(&replicaTOML, "[[routes.replicas]]\naddress = %q\n", s.Addr())
	}
	var users strings.Builder
	for _, u := range r.users {
		fmt.Fprintf(&users, "\n[[users]]\nname = %q\npassword = %q\nbackend_password = %q\n", u.name, u.secret, u.backend)
	}
	extra := users.String() + fmt.Sprintf(`
[[routes]]
name = %q
database = %q
[routes.primary]
address = %q
%s[routes.read_routing]
read_routing_mode = %q
fallback_policy = "primary"
[routes.freshness]
freshness_policy = "session_write_lsn_and_max_lag"
read_consistency = %q
[routes.ha]
replica_health_interval_ms = 200
replica_health_timeout_ms = 200
[routes.pool]
size = %d
acquire_timeout_ms = 10000
`, r.name, r.db, c.Primary.Addr(), replicaTOML.String(), tg.routing, cmp.Or(r.consistency, "session"), cmp.Or(r.poolSize, 40))
	px := kinetictest.StartProcess(t, c, kinetictest.Params{
		PoolMode:        tg.poolMode,
		ReadRoutingMode: tg.routing,
		FallbackPolicy:  "primary",
		Replicas:        replicas,
		MaxClientConn:   1000,
		LogLevel:        "warn",
		Extra:           extra,
	})
	if tg.routing != "off" {
		// Reads reach the replica only after its first probe; wait for
		// that so the run measures routing, not its warm-up.
		u := r.users[0]
		dsn := kinetictest.DSN(px.Addr, u.name, u.backend, r.db)
		kinetictest.AwaitReadOn(t, ctx, dsn, c.StandbyPorts())
	}
	return px
}

// keepServerLogs copies each server's log into dir (primary.log,
// standby1.log, ...).
func keepServerLogs(t *testing.T, dir string, c *pgtest.Cluster) {
	servers := append([]*pgtest.Server{c.Primary}, c.Standbys...)
	for i, s := range servers {
		name := "primary.log"
		if i > 0 {
			name = fmt.Sprintf("standby%d.log", i)
		}
		b, err := os.ReadFile(s.LogFile)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if err != nil {
			t.Logf("keeping %s: %v", name, err)
		}
	}
}

func portOf(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	n, _ := strconv.Atoi(addr[i+1:])
	return n
}

// sourceVersion names the working tree kinetictest.Binary builds kineticd
// from: git describe --always --dirty, or "(unknown)".
func sourceVersion() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "(unknown)"
	}
	return strings.TrimSpace(string(out))
}

// slowest lists the tests of got that took over a second longer than
// directly and over three times as long, slowest first, at most five.
func slowest(direct, got map[string]*testResult) string {
	type slow struct {
		key       string
		was, took time.Duration
	}
	var all []slow
	for k, r := range got {
		d := direct[k]
		if d == nil || r.Outcome != pass || d.Outcome != pass {
			continue
		}
		if r.Elapsed-d.Elapsed > time.Second && r.Elapsed > 3*d.Elapsed {
			all = append(all, slow{k, d.Elapsed, r.Elapsed})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].took-all[i].was > all[j].took-all[j].was })
	var b strings.Builder
	for i, s := range all {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "  %s: %v directly, %v\n", s.key, s.was.Round(10*time.Millisecond), s.took.Round(10*time.Millisecond))
	}
	return b.String()
}
