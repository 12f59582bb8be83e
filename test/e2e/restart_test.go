package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestRestartUnderPgbenchConnect is the zero-downtime restart of
// docs/operations.md under `pgbench -C` (a new connection for every
// transaction, the workload a restart hurts most): kineticd processes with
// server.reuse_port = true take over the same address one after the other
// (start the next, wait until it listens, SIGTERM the previous, wait for
// it to exit) while pgbench runs, and no transaction or connection fails.
// Each successor must have served transactions (SHOW STATS on it once it
// is alone on the address).
func TestRestartUnderPgbenchConnect(t *testing.T) {
	for _, pool := range []string{"transaction", "session"} {
		t.Run(pool, func(t *testing.T) { restartUnderPgbench(t, pool) })
	}
}

// handovers is how many times the address changes hands during one run.
const handovers = 2

func restartUnderPgbench(t *testing.T, pool string) {
	requireMigrateReq(t)
	c := pgtest.Shared(t)
	ctx := ctxT(t, 3*time.Minute)
	db := uniqueIdent("restart")
	if err := c.Primary.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+pgtest.AppUser); err != nil {
		t.Fatal(err)
	}
	// Registered before any kineticd starts, so it runs after they stopped.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Primary.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", db, err)
		}
	})
	addr := kinetictest.FreeAddr(t)
	p := kinetictest.Params{
		Listen: addr, PoolMode: pool, PoolSize: 8, ShutdownTimeout: 10000, MaxClientConn: 200,
		Extra: fmt.Sprintf("\n[[routes]]\nname = \"bench\"\ndatabase = %q\n[routes.primary]\naddress = %q\n[routes.pool]\nsize = 8\n",
			db, c.Primary.Addr()),
	}
	// The template has no reuse_port; every generation sets it.
	toml := strings.Replace(kinetictest.TOML(c, p), "[server]\n", "[server]\nreuse_port = true\n", 1)
	if !strings.Contains(toml, "reuse_port = true") {
		t.Fatal("the rendered config has no [server] table")
	}
	start := func(gen int) *kinetictest.Process {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("kineticd-%d.toml", gen))
		if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		// StartProcessFile returns once addr accepts, which the previous
		// generation already does: wait for this one's own log line.
		pr := kinetictest.StartProcessFile(t, path, addr)
		if err := pr.WaitLog(ctx, "kineticd started"); err != nil {
			t.Fatalf("generation %d: %v\n%s", gen, err, pr.Logs())
		}
		return pr
	}

	cur := start(0)
	env := clientEnv()
	_, port, _ := net.SplitHostPort(addr)
	host := []string{"-h", "127.0.0.1", "-p", port, "-U", pgtest.AppUser}
	if res := runClient(t, ctx, env, nil, "pgbench", append(append([]string{"-i", "-s", "1"}, host...), db)...); res.code != 0 {
		t.Fatalf("pgbench -i:\n%s", res)
	}
	const seconds = 4 + 3*handovers
	done := make(chan psqlResult, 1)
	go func() {
		args := []string{"-C", "-c", "4", "-j", "2", "-T", strconv.Itoa(seconds)}
		done <- runClient(t, ctx, env, nil, "pgbench", append(append(args, host...), db)...)
	}()
	dsn := kinetictest.DSN(addr, pgtest.AppUser, pgtest.AppPassword, "pgkinetic")
	for gen := 1; gen <= handovers; gen++ {
		time.Sleep(2 * time.Second) // pgbench runs against the current generation alone
		next := start(gen)
		time.Sleep(500 * time.Millisecond) // both listen: the kernel spreads new connections over them
		began := time.Now()
		if err := cur.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cur.Wait(t, 30*time.Second); err != nil {
			t.Fatalf("generation %d exited with %v after SIGTERM\n%s", gen-1, err, cur.Logs())
		}
		drained := time.Since(began)
		// Alone on addr now: every connection reaches next.
		units := showStat(t, ctx, dsn, "units_primary")
		if units == 0 {
			t.Fatalf("generation %d, alone on %s after the handover, served no transaction\n%s", gen, addr, next.Logs())
		}
		t.Logf("handover %d: generation %d drained and exited in %v; generation %d has served %d transactions",
			gen, gen-1, drained.Round(time.Millisecond), gen, units)
		cur = next
	}
	res := <-done
	r, err := parsePgbench(res.stdout)
	if res.code != 0 || err != nil || r.failed != 0 || r.processed == 0 || strings.Contains(res.stderr, "error") {
		t.Fatalf("pgbench -C across %d restarts: processed %d, failed %d, %v\n%s", handovers, r.processed, r.failed, err, res)
	}
	t.Logf("pgbench -C -c 4 -T %d (%s pooling) across %d restarts: %d transactions, %d failed, %.0f tps",
		seconds, pool, handovers, r.processed, r.failed, r.tps)
}

// migrateReq is the sysctl net.ipv4.tcp_migrate_req (Linux 5.14+).
const migrateReq = "/proc/sys/net/ipv4/tcp_migrate_req"

// requireMigrateReq makes sure net.ipv4.tcp_migrate_req is 1 for the test,
// as docs/operations.md requires for a restart with reuse_port: without it
// the kernel resets the connections still queued in the old listener when
// it closes (measured there: about 2 of every 7000 connections a second
// per handover), and pgbench -C would fail now and then. It sets the
// sysctl when it can (root) and restores it after the test; otherwise the
// test fails and says why.
func requireMigrateReq(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(migrateReq)
	if err != nil {
		t.Fatalf("zero-downtime restart needs net.ipv4.tcp_migrate_req (Linux 5.14+): %v", err)
	}
	old := strings.TrimSpace(string(b))
	if old == "1" {
		return
	}
	if err := os.WriteFile(migrateReq, []byte("1\n"), 0o644); err != nil {
		t.Fatalf("net.ipv4.tcp_migrate_req is %s and cannot be set to 1 for this test (%v): run it as root or set the sysctl", old, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(migrateReq, []byte(old+"\n"), 0o644); err != nil {
			t.Errorf("restoring net.ipv4.tcp_migrate_req to %s: %v", old, err)
		}
	})
}

// showStat reads one SHOW STATS value from the kineticd at the admin DSN.
func showStat(t *testing.T, ctx context.Context, dsn, name string) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW STATS", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		if k == name {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("SHOW STATS %s = %q: %v", name, v, err)
			}
			return n
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("SHOW STATS has no %s row", name)
	return 0
}

// TestSIGTERMLetsANewSessionRunItsFirstUnit: at SIGTERM an idle session
// that has already run a unit is closed at once (57P01), but one that has
// logged in and sent nothing yet is a client about to send its first query
// (the case of every connection under pgbench -C): it runs that unit and
// is closed after it, and kineticd waits for it.
func TestSIGTERMLetsANewSessionRunItsFirstUnit(t *testing.T) {
	c := pgtest.Shared(t)
	for _, pool := range []string{"session", "transaction"} {
		t.Run(pool, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			d := kinetictest.StartProcess(t, c, kinetictest.Params{PoolMode: pool, ShutdownTimeout: 20000})
			fresh := connect(t, ctx, d.AppDSN())
			used := connect(t, ctx, d.AppDSN())
			if n := queryInt(t, ctx, used, "select 1"); n != 1 {
				t.Fatal(n)
			}
			if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// Shutdown drains every session in one pass: once the used one
			// is closed, the fresh one has been asked to drain too.
			// (The client may see the close without the FATAL: drain waits
			// at most idleKillPatience, 10 ms, for the session's write lock,
			// which the goroutine that relayed select 1's ReadyForQuery can
			// still hold, descheduled after its write, when SIGTERM comes;
			// on a starved machine that can be longer. The session must be
			// gone either way.)
			if err := awaitClosedByServer(t, used, 10*time.Second); pgCode(err) != "57P01" {
				t.Logf("the used idle session closed without a 57P01 ErrorResponse: %v", err)
			}
			if _, err := used.Exec(ctx, "select 1"); err == nil {
				t.Fatal("the used idle session still answers after SIGTERM")
			}
			if d.Exited() {
				t.Fatalf("kineticd exited before the fresh session ran its first unit: %v\n%s", d.Wait(t, time.Second), d.Logs())
			}
			if n := queryInt(t, ctx, fresh, "select inet_server_port()"); n != int64(c.Primary.Port) {
				t.Fatalf("the fresh session's first query during the drain answered from port %d", n)
			}
			if err := awaitClosedByServer(t, fresh, 10*time.Second); pgCode(err) != "57P01" {
				t.Logf("the fresh session closed without a 57P01 ErrorResponse: %v", err)
			}
			if _, err := fresh.Exec(ctx, "select 1"); err == nil {
				t.Fatal("the fresh session still answers after its first unit during the drain")
			}
			if err := d.Wait(t, 20*time.Second); err != nil {
				t.Fatalf("kineticd exit: %v, want status 0\n%s", err, d.Logs())
			}
		})
	}
}

// TestSecondSIGTERMEndsTheDrain: a second SIGTERM while kineticd drains
// closes the sessions still in a transaction at once instead of waiting
// for shutdown_timeout_ms (here 10 minutes, far above the test's guard).
func TestSecondSIGTERMEndsTheDrain(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	d := kinetictest.StartProcess(t, c, kinetictest.Params{ShutdownTimeout: 600000})
	a := connect(t, ctx, d.AppDSN())
	if _, err := a.Exec(ctx, "begin"); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, ctx, a, "select txid_current()"); n == 0 {
		t.Fatal("no transaction id")
	}
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.WaitLog(ctx, "shutting down: draining sessions"); err != nil {
		t.Fatal(err)
	}
	if d.Exited() {
		t.Fatalf("kineticd exited with a transaction open after one SIGTERM: %v", d.Wait(t, time.Second))
	}
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := awaitClosedByServer(t, a, 20*time.Second); pgCode(err) != "57P01" {
		t.Logf("the session in a transaction closed without a 57P01 ErrorResponse: %v", err)
	}
	if err := d.Wait(t, 20*time.Second); err != nil {
		t.Fatalf("kineticd exit: %v, want status 0\n%s", err, d.Logs())
	}
	if !strings.Contains(d.Logs(), "second signal while draining") {
		t.Errorf("no log line about the second signal:\n%s", d.Logs())
	}
}
