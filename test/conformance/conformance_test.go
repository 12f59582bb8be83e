package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	if os.Getenv(envEnable) != "1" {
		t.Skipf("the pgx conformance run takes ~10 minutes and is not part of go test ./...; run it with `make conformance` "+
			"or `%s=1 go test -count=1 -timeout 40m -v ./test/conformance/` (doc.go: one target with -run 'TestPgxSuite/transaction/routed', one pgx test with %s=TestName)",
			envEnable, envRun)
	}
	begin := time.Now()
	// kineticd is built from the working tree, which others may be
	// changing: build it now and name it now, so the table's heading names
	// what was judged.
	kinetictest.Binary(t)
	kineticd := sourceVersion()
	version, bins := buildPgx(t)
	c := pgtest.New(t, pgtest.Options{Standbys: 1})
	if dir := os.Getenv(envOut); dir != "" {
		// The servers' own logs go with the raw streams (registered after
		// the cluster, so this runs before it is removed).
		t.Cleanup(func() { keepServerLogs(t, dir, c) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	setupCluster(t, ctx, c)
	runPattern := os.Getenv(envRun)

	// The baseline always runs; -run selects among the kineticd targets.
	resetDB(t, ctx, c)
	direct, directRep := runTarget(t, ctx, "direct", bins, connStrings("127.0.0.1", c.Primary.Port), runPattern)
	directRep.Target = "direct"
	reps := []*targetReport{directRep}
	if directRep.count(vPassed) == 0 {
		t.Fatalf("no pgx test passed directly against PostgreSQL; the setup is broken:\n%s", table(reps))
	}
	for _, br := range directRep.Broken {
		t.Errorf("a pgx test binary did not run to the end against PostgreSQL: %s", br)
	}
	if n := directRep.count(vFailed); n > 0 {
		// Not a kineticd failure, but every such test is left out of the
		// comparison, so say it loudly.
		t.Logf("WARNING: %d pgx tests fail directly against PostgreSQL and are not compared", n)
	}

	for _, tg := range targets[1:] {
		t.Run(tg.name, func(t *testing.T) {
			resetDB(t, ctx, c)
			px := startKineticd(t, ctx, c, tg)
			got, rep := runTarget(t, ctx, tg.name, bins, connStrings("127.0.0.1", portOf(px.Addr)), runPattern)
			judgedRep := judge(tg.name, direct, got, allowed, knownOpen)
			judgedRep.Wall, judgedRep.Broken = rep.Wall, rep.Broken
			reps = append(reps, judgedRep)
			for _, br := range rep.Broken {
				t.Errorf("a pgx test binary did not run to the end through kineticd (%s): %s", tg.name, br)
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
			for _, e := range judgedRep.NowPassing {
				t.Logf("%s passes on %s although listed (%q, %s): remove the entry if it stays so", e.Test, tg.name, e.Target, e.Why)
			}
		})
	}
	t.Logf("pgx %s conformance of kineticd %s, %v in all:\n%s", version, kineticd, time.Since(begin).Round(time.Second), table(reps))
}

// runTarget runs every pgx binary against the conn strings vars, one after
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
		run, err := runSuite(ctx, b, suiteEnv(vars), runPattern, keep)
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

// startKineticd runs the kineticd binary for target tg with a pgx_test
// route in front of the cluster's primary and replica, the pgx roles as
// [[users]], and pools large enough for pgx's parallel tests.
func startKineticd(t *testing.T, ctx context.Context, c *pgtest.Cluster, tg target) *kinetictest.Process {
	t.Helper()
	replica := c.Standbys[0].Addr()
	var users strings.Builder
	for _, u := range []struct{ name, secret string }{
		{md5Role, md5Secret(md5Role, pgxPassword)},
		{scramRole, pgxPassword},
		{plainRole, pgxPassword},
	} {
		fmt.Fprintf(&users, "\n[[users]]\nname = %q\npassword = %q\nbackend_password = %q\n", u.name, u.secret, pgxPassword)
	}
	extra := users.String() + fmt.Sprintf(`
[[routes]]
name = "pgx"
database = %q
[routes.primary]
address = %q
[[routes.replicas]]
address = %q
[routes.read_routing]
read_routing_mode = %q
fallback_policy = "primary"
[routes.freshness]
freshness_policy = "session_write_lsn_and_max_lag"
[routes.ha]
replica_health_interval_ms = 200
replica_health_timeout_ms = 200
[routes.pool]
size = 40
acquire_timeout_ms = 10000
`, pgxDB, c.Primary.Addr(), replica, tg.routing)
	px := kinetictest.StartProcess(t, c, kinetictest.Params{
		PoolMode:        tg.poolMode,
		ReadRoutingMode: tg.routing,
		FallbackPolicy:  "primary",
		Replicas:        []string{replica},
		MaxClientConn:   1000,
		LogLevel:        "warn",
		Extra:           extra,
	})
	if tg.routing != "off" {
		// Reads reach the replica only after its first probe; wait for
		// that so the run measures routing, not its warm-up.
		dsn := kinetictest.DSN(px.Addr, md5Role, pgxPassword, pgxDB)
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
