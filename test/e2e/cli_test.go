package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// runKineticd runs the kineticd binary with args to completion.
func runKineticd(t *testing.T, args ...string) psqlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return runCommand(t, exec.CommandContext(ctx, kinetictest.Binary(t), args...))
}

// lineOf returns the 1-based number of the first line of text that
// contains s.
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("no line contains %q", s)
	return 0
}

func TestVersionFlag(t *testing.T) {
	r := runKineticd(t, "--version")
	if r.code != 0 || !regexp.MustCompile(`^kineticd \S+\n$`).MatchString(r.stdout) {
		t.Fatalf("kineticd --version:\n%s", r)
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	writeFile(t, good, kinetictest.TOML(nil, kinetictest.Params{Listen: "127.0.0.1:6432", Primary: "127.0.0.1:5432"}))
	r := runKineticd(t, "--check-config", good)
	if r.code != 0 || r.stdout != "config ok\n" {
		t.Fatalf("--check-config of a valid file:\n%s", r)
	}

	badText := `# two mistakes in [server], one in a route
[server]
listen = "127.0.0.1:6432"
pool_mode = "sessionn"
no_such_key = true

[[users]]
name = "app"
password = "secret"

[[routes]]
name = "main"
database = "app"
[routes.primary]
address = "127.0.0.1:5432"
[routes.read_routing]
read_routing_mode = "sometimes"
`
	bad := filepath.Join(dir, "bad.toml")
	writeFile(t, bad, badText)
	want := []string{
		fmt.Sprintf("%s:%d: server.pool_mode: ", bad, lineOf(t, badText, "pool_mode")),
		fmt.Sprintf("%s:%d: server.no_such_key: ", bad, lineOf(t, badText, "no_such_key")),
		fmt.Sprintf("%s:%d: routes[0].read_routing.read_routing_mode: ", bad, lineOf(t, badText, "read_routing_mode")),
	}
	r = runKineticd(t, "--check-config", bad)
	if r.code != 1 {
		t.Fatalf("--check-config of an invalid file: want exit 1\n%s", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("want one line per problem (%d), got:\n%s", len(want), r)
	}
	for _, w := range want {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) && len(l) > len(w) }) {
			t.Errorf("no line starting with %q (and saying what is wrong) in:\n%s", w, r.stdout)
		}
	}

	missing := filepath.Join(dir, "missing.toml")
	r = runKineticd(t, "--check-config", missing)
	if r.code != 1 || !strings.HasPrefix(r.stdout, missing+": ") {
		t.Fatalf("--check-config of a missing file:\n%s", r)
	}
}

func TestCheckConfigExample(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD = %q: not inside the module", gomod)
	}
	example := filepath.Join(filepath.Dir(gomod), "deploy", "kineticd.example.toml")
	r := runKineticd(t, "--check-config", example)
	if r.code != 0 || r.stdout != "config ok\n" {
		t.Fatalf("--check-config %s:\n%s", example, r)
	}
}

const reloadUserTOML = `
[[users]]
name = "reloaduser"
password = "reload-secret"
backend_user = "app"
backend_password = "app-secret"
`

func TestSIGHUPReload(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	pr := kinetictest.StartProcess(t, c, kinetictest.Params{})
	reloadDSN := kinetictest.DSN(pr.Addr, "reloaduser", "reload-secret", pgtest.AppDB)

	if conn, err := pgx.Connect(ctx, reloadDSN); err == nil {
		conn.Close(ctx)
		t.Fatal("reloaduser connected before it was configured")
	} else if pgCode(err) != "28P01" {
		t.Fatalf("unknown user: want 28P01, got %v", err)
	}

	valid := kinetictest.TOML(c, kinetictest.Params{Listen: pr.Addr, Extra: reloadUserTOML})
	writeFile(t, pr.Path, valid)
	if err := pr.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 20*time.Second, "reloaduser to be accepted after SIGHUP", func() (bool, error) {
		conn, err := pgx.Connect(ctx, reloadDSN)
		if err != nil {
			return false, err
		}
		conn.Close(ctx)
		return true, nil
	})
	conn := connect(t, ctx, reloadDSN)
	var user string
	var port int
	if err := conn.QueryRow(ctx, "select current_user, inet_server_port()").Scan(&user, &port); err != nil {
		t.Fatal(err)
	}
	if user != pgtest.AppUser || port != c.Primary.Port {
		t.Fatalf("reloaduser runs as %q on port %d, want backend_user app on the primary's %d", user, port, c.Primary.Port)
	}
	conn.Close(ctx)

	// An invalid file is refused with the same PATH:LINE problems as
	// --check-config and the running configuration stays.
	invalid := strings.Replace(valid, "[server]\n", "[server]\nno_such_key = 1\n", 1)
	writeFile(t, pr.Path, invalid)
	if err := pr.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := pr.WaitLog(wctx, "reload refused"); err != nil {
		t.Fatalf("%v\n%s", err, pr.Logs())
	}
	problem := fmt.Sprintf("%s:%d: server.no_such_key", pr.Path, lineOf(t, invalid, "no_such_key"))
	if err := pr.WaitLog(wctx, problem); err != nil {
		t.Fatalf("the refusal does not name the problem: %v\n%s", err, pr.Logs())
	}
	for _, dsn := range []string{pr.AppDSN(), reloadDSN} {
		conn := connect(t, ctx, dsn)
		if p := queryInt(t, ctx, conn, "select inet_server_port()"); p != int64(c.Primary.Port) {
			t.Fatalf("after the refused reload %s answered from port %d", dsn, p)
		}
		conn.Close(ctx)
	}
}

// serverBackends counts the primary's backends with application_name app.
func serverBackends(ctx context.Context, c *pgtest.Cluster, app string) (int, error) {
	s, err := c.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where application_name = '"+app+"'")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

// awaitClosedByServer waits until the proxy ends conn's session on its own,
// and returns how: ideally a FATAL 57P01 ErrorResponse.
func awaitClosedByServer(t *testing.T, conn *pgx.Conn, guard time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	err := conn.PgConn().WaitForNotification(ctx)
	if err == nil {
		t.Fatal("got a notification instead of the end of the session")
	}
	if ctx.Err() != nil {
		t.Fatalf("the session was not closed within %v", guard)
	}
	return err
}

func TestSIGTERMDrains(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	tbl := uniqueIdent("drain")
	direct := connect(t, ctx, c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table "+tbl+" (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dropTable(ctx, c, tbl)
	})
	d := kinetictest.StartProcess(t, c, kinetictest.Params{ShutdownTimeout: 10000})
	appA, appB := uniqueIdent("draina"), uniqueIdent("drainb")
	a := connect(t, ctx, d.DSNWithApp(appA))
	b := connect(t, ctx, d.DSNWithApp(appB))
	if n := queryInt(t, ctx, b, "select 1"); n != 1 {
		t.Fatal(n)
	}
	for _, sql := range []string{"begin", "insert into " + tbl + " values (1)"} {
		if _, err := a.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	// The idle session B is closed at once.
	err := awaitClosedByServer(t, b, 10*time.Second)
	if pgCode(err) != "57P01" {
		t.Logf("session B closed without a 57P01 ErrorResponse: %v", err)
	}
	if _, err := b.Exec(ctx, "select 1"); err == nil {
		t.Fatal("idle session B still answers after SIGTERM")
	}

	// New connections are refused while A's transaction is still open.
	awaitCond(t, 10*time.Second, "new connections to be refused", func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, d.DSNWithApp(uniqueIdent("late")))
		if err != nil {
			return true, nil
		}
		conn.Close(ctx)
		return false, errors.New("a new connection was accepted during the drain")
	})
	if d.Exited() {
		t.Fatalf("kineticd exited with a transaction in flight: %v", d.Wait(t, time.Second))
	}

	// A finishes its transaction.
	for _, sql := range []string{"insert into " + tbl + " values (2)", "commit"} {
		if _, err := a.Exec(ctx, sql); err != nil {
			t.Fatalf("session A during the drain: %s: %v", sql, err)
		}
	}
	if err := awaitClosedByServer(t, a, 10*time.Second); pgCode(err) != "57P01" {
		t.Errorf("session A after COMMIT: want FATAL 57P01, got %v", err)
	}

	if err := d.Wait(t, 20*time.Second); err != nil {
		t.Fatalf("kineticd exit: %v, want status 0\n%s", err, d.Logs())
	}
	if n := queryInt(t, ctx, direct, "select count(*) from "+tbl); n != 2 {
		t.Fatalf("the primary has %d committed rows, want 2", n)
	}
	for _, app := range []string{appA, appB} {
		awaitCond(t, 10*time.Second, "the primary's backends of "+app+" to go", func() (bool, error) {
			n, err := serverBackends(ctx, c, app)
			return n == 0, err
		})
	}
}

func TestSIGTERMTimeout(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := ctxT(t, time.Minute)
	tbl := uniqueIdent("drain_timeout")
	direct := connect(t, ctx, c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if _, err := direct.Exec(ctx, "create table "+tbl+" (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dropTable(ctx, c, tbl)
	})
	d := kinetictest.StartProcess(t, c, kinetictest.Params{ShutdownTimeout: 500})
	app := uniqueIdent("stuck")
	a := connect(t, ctx, d.DSNWithApp(app))
	for _, sql := range []string{"begin", "insert into " + tbl + " values (1)"} {
		if _, err := a.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := awaitClosedByServer(t, a, 20*time.Second)
	t.Logf("the open transaction's session ended with: %v", err)
	if err := d.Wait(t, 20*time.Second); err != nil {
		t.Fatalf("kineticd exit: %v, want status 0\n%s", err, d.Logs())
	}
	if n := queryInt(t, ctx, direct, "select count(*) from "+tbl); n != 0 {
		t.Fatalf("the unfinished transaction's row is visible on the primary (%d rows)", n)
	}
	awaitCond(t, 10*time.Second, "the primary's backend of the stuck session to go", func() (bool, error) {
		n, err := serverBackends(ctx, c, app)
		return n == 0, err
	})
}

func TestLargeResultMemory(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := ctxT(t, 2*time.Minute)
	pr := kinetictest.StartProcess(t, c, kinetictest.Params{LogLevel: "info"})
	conn := connect(t, ctx, pr.AppDSN())
	if n := queryInt(t, ctx, conn, "select inet_server_port()"); n != int64(c.Primary.Port) {
		t.Fatalf("answered from port %d", n)
	}
	cur0, peak0, err := pr.RSSKiB()
	if err != nil {
		t.Fatal(err)
	}

	// About 100 MB of DataRows, read and discarded as they arrive.
	const rows, width = 100000, 1000
	mrr := conn.PgConn().Exec(ctx, fmt.Sprintf("select repeat('x', %d) from generate_series(1, %d)", width, rows))
	var n, total int64
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for rr.NextRow() {
			n++
			total += int64(len(rr.Values()[0]))
		}
		if _, err := rr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := mrr.Close(); err != nil {
		t.Fatal(err)
	}
	if n != rows || total != rows*width {
		t.Fatalf("received %d rows, %d bytes; want %d, %d", n, total, rows, rows*width)
	}

	cur1, peak1, err := pr.RSSKiB()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kineticd RSS before: %d KiB (peak %d KiB); after streaming %d MB: %d KiB (peak %d KiB); peak grew %d KiB",
		cur0, peak0, total/1e6, cur1, peak1, peak1-peak0)
	if grew := peak1 - peak0; grew >= 32*1024 {
		t.Fatalf("kineticd's peak RSS grew by %d KiB while relaying %d MB: it buffers results instead of streaming them", grew, total/1e6)
	}
}
