package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// pgbenchRun is what pgbench reported for one run.
type pgbenchRun struct {
	processed, failed int
	tps               float64
}

var (
	pgbenchProcessed = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	pgbenchFailed    = regexp.MustCompile(`(?m)^number of failed transactions: (\d+)`)
	pgbenchTPS       = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
)

func parsePgbench(out string) (pgbenchRun, error) {
	var r pgbenchRun
	m := pgbenchProcessed.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no %q line", "number of transactions actually processed")
	}
	r.processed, _ = strconv.Atoi(m[1])
	if m = pgbenchFailed.FindStringSubmatch(out); m == nil {
		return r, fmt.Errorf("no %q line", "number of failed transactions")
	}
	r.failed, _ = strconv.Atoi(m[1])
	if m = pgbenchTPS.FindStringSubmatch(out); m == nil {
		return r, fmt.Errorf("no %q line", "tps = ")
	}
	r.tps, _ = strconv.ParseFloat(m[1], 64)
	return r, nil
}

// TestPgbenchModes initialises pgbench tables through the proxy, in a
// database of the test's own, then runs the TPC-B-like and the select-only
// scripts with each query mode through the proxy and directly against the
// primary. Through the proxy every transaction must succeed; the TPS of
// both paths are logged for comparison, never asserted.
func TestPgbenchModes(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := ctxT(t, 10*time.Minute)
	db := uniqueIdent("bench")
	if err := c.Primary.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+pgtest.AppUser); err != nil {
		t.Fatal(err)
	}
	// Registered before the proxy starts, so it runs after the proxy closed
	// its server connections.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Primary.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", db, err)
		}
	})
	extra := fmt.Sprintf("\n[[routes]]\nname = \"bench\"\ndatabase = %q\n[routes.primary]\naddress = %q\n[routes.pool]\nsize = 8\n",
		db, c.Primary.Addr())
	px := kinetictest.Start(t, c, kinetictest.Params{Extra: extra})
	env := clientEnv()
	hostArgs := func(port int) []string {
		return []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", pgtest.AppUser}
	}

	// Initialisation through the proxy: DDL, COPY FROM STDIN, VACUUM, keys.
	initRes := runClient(t, ctx, env, nil, "pgbench", append(append([]string{"-i", "-s", "1"}, hostArgs(px.Port())...), db)...)
	if initRes.code != 0 {
		t.Fatalf("pgbench -i through the proxy:\n%s", initRes)
	}
	conn := connect(t, ctx, px.DSN(pgtest.AppUser, pgtest.AppPassword, db))
	if n := queryInt(t, ctx, conn, "select count(*) from pgbench_accounts"); n != 100000 {
		t.Fatalf("pgbench_accounts has %d rows after -i -s 1, want 100000", n)
	}
	if p := queryInt(t, ctx, conn, "select inet_server_port()"); p != int64(c.Primary.Port) {
		t.Fatalf("route bench answered from port %d, want the primary's %d", p, c.Primary.Port)
	}
	conn.Close(ctx)

	const clients, txPerClient = 4, 300
	type row struct {
		mode, script  string
		proxy, direct pgbenchRun
	}
	var table []row
	run := func(port int, mode string, selectOnly bool) (pgbenchRun, psqlResult) {
		args := []string{"-M", mode, "-c", strconv.Itoa(clients), "-j", "2", "-t", strconv.Itoa(txPerClient)}
		if selectOnly {
			args = append(args, "-S")
		}
		args = append(append(args, hostArgs(port)...), db)
		res := runClient(t, ctx, env, nil, "pgbench", args...)
		r, err := parsePgbench(res.stdout)
		if res.code != 0 || err != nil {
			t.Errorf("pgbench %q on port %d: %v\n%s", args, port, err, res)
		}
		return r, res
	}
	for _, mode := range []string{"simple", "extended", "prepared"} {
		for _, selectOnly := range []bool{false, true} {
			script := "tpcb-like"
			if selectOnly {
				script = "select-only"
			}
			viaProxy, res := run(px.Port(), mode, selectOnly)
			if viaProxy.failed != 0 || viaProxy.processed != clients*txPerClient {
				t.Errorf("-M %s %s through the proxy: processed %d, failed %d; want %d, 0\n%s",
					mode, script, viaProxy.processed, viaProxy.failed, clients*txPerClient, res)
			}
			direct, res := run(c.Primary.Port, mode, selectOnly)
			if direct.failed != 0 || direct.processed != clients*txPerClient {
				t.Errorf("-M %s %s directly: processed %d, failed %d (the baseline itself failed)\n%s",
					mode, script, direct.processed, direct.failed, res)
			}
			table = append(table, row{mode, script, viaProxy, direct})
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "pgbench -c %d -j 2 -t %d, scale 1 (in-process proxy under the race detector when -race):\n", clients, txPerClient)
	fmt.Fprintf(&b, "%-9s %-12s %12s %12s %7s\n", "mode", "script", "proxy tps", "direct tps", "ratio")
	for _, r := range table {
		ratio := 0.0
		if r.direct.tps > 0 {
			ratio = r.proxy.tps / r.direct.tps
		}
		fmt.Fprintf(&b, "%-9s %-12s %12.1f %12.1f %7.2f\n", r.mode, r.script, r.proxy.tps, r.direct.tps, ratio)
	}
	t.Log(b.String())
}
