package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// psqlResult is what one run of a PostgreSQL client program produced.
type psqlResult struct {
	stdout, stderr string
	code           int // exit status; -1 when killed by a signal
}

func (r psqlResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s\n--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// clientEnv is the environment of psql/pgbench: ours without any PG*
// variable that could redirect the connection, plus the app password and
// the C locale (messages in English).
func clientEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PGPASSWORD="+pgtest.AppPassword, "PGCONNECT_TIMEOUT=10", "LC_ALL=C")
	return append(env, extra...)
}

// psqlConninfo is a libpq connection string for the app user on port.
func psqlConninfo(port int, db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable gssencmode=disable",
		port, pgtest.AppUser, db)
}

// runClient runs a PostgreSQL client program to completion. A failure to
// start it fails the test; a non-zero exit is reported in the result.
func runClient(t *testing.T, ctx context.Context, env []string, stdin io.Reader, prog string, args ...string) psqlResult {
	t.Helper()
	cmd := exec.CommandContext(ctx, pgtest.Bin(prog), args...)
	cmd.Env = env
	cmd.Stdin = stdin
	cmd.WaitDelay = 5 * time.Second
	res := runCommand(t, cmd)
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not finish in time: %v\n%s", prog, args, ctx.Err(), res)
	}
	return res
}

// runCommand runs cmd to completion and captures its output and exit
// code; a failure to start it fails the test.
func runCommand(t *testing.T, cmd *exec.Cmd) psqlResult {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := psqlResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("%s: %v", cmd.Args, err)
	}
	return res
}

// psql runs psql -X -v ON_ERROR_STOP=1 with args then conninfo.
func psql(t *testing.T, ctx context.Context, conninfo string, env []string, stdin io.Reader, args ...string) psqlResult {
	t.Helper()
	all := append([]string{"-X", "-v", "ON_ERROR_STOP=1"}, args...)
	return runClient(t, ctx, env, stdin, "psql", append(all, conninfo)...)
}

// mustPsql is psql that requires exit status 0.
func mustPsql(t *testing.T, ctx context.Context, conninfo string, env []string, stdin io.Reader, args ...string) psqlResult {
	t.Helper()
	r := psql(t, ctx, conninfo, env, stdin, args...)
	if r.code != 0 {
		t.Fatalf("psql %q failed:\n%s", args, r)
	}
	return r
}

var identSeq atomic.Int64

// uniqueIdent returns a lower-case SQL identifier no other test uses.
func uniqueIdent(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), identSeq.Add(1))
}

// awaitCond polls cond until it holds or d passes; then it fails the test
// with what.
func awaitCond(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last error: %v)", d, what, lastErr)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestPsqlQueriesReachPrimary(t *testing.T) {
	c := pgtest.Shared(t)
	px := kinetictest.Start(t, c, kinetictest.Params{})
	ctx := ctxT(t, 2*time.Minute)
	ci := psqlConninfo(px.Port(), pgtest.AppDB)
	env := clientEnv()
	primaryPort := strconv.Itoa(c.Primary.Port)

	t.Run("ServerPort", func(t *testing.T) {
		r := mustPsql(t, ctx, ci, env, nil, "-At", "-c", "SELECT inet_server_port()")
		if got := strings.TrimSpace(r.stdout); got != primaryPort {
			t.Fatalf("inet_server_port() through the proxy = %q, want the primary's %s", got, primaryPort)
		}
	})

	t.Run("MultiStatement", func(t *testing.T) {
		// One Query message with three statements: psql 15 prints every result.
		r := mustPsql(t, ctx, ci, env, nil, "-At", "-c", "select 1 as a; select inet_server_port(); select 'three'")
		want := "1\n" + primaryPort + "\nthree"
		if got := strings.TrimSpace(r.stdout); got != want {
			t.Fatalf("multi-statement query printed %q, want %q", got, want)
		}
		// Several -c in one psql run share one session, hence one backend.
		r = mustPsql(t, ctx, ci, env, nil, "-At",
			"-c", "select pg_backend_pid()", "-c", "select pg_backend_pid()")
		pids := strings.Fields(r.stdout)
		if len(pids) != 2 || pids[0] != pids[1] {
			t.Fatalf("two statements of one psql session ran on backends %q, want one", pids)
		}
	})

	t.Run("Notice", func(t *testing.T) {
		r := mustPsql(t, ctx, ci, env, nil, "-c", "DO $$ begin raise notice 'hi'; end $$")
		if !strings.Contains(r.stderr, "NOTICE:  hi") {
			t.Fatalf("the NOTICE was not shown:\n%s", r)
		}
		if strings.TrimSpace(r.stdout) != "DO" {
			t.Fatalf("DO did not complete:\n%s", r)
		}
	})

	t.Run("ErrorMidStream", func(t *testing.T) {
		script := filepath.Join(t.TempDir(), "err.sql")
		writeFile(t, script, "select pg_backend_pid() as before \\gset\n"+
			"select 1/(5-i) from generate_series(1,10) i;\n"+
			"select pg_backend_pid() = :before as same_session, inet_server_port(), 'after';\n")
		r := psql(t, ctx, ci, env, nil, "-v", "ON_ERROR_STOP=0", "-At", "-f", script)
		if r.code != 0 {
			t.Fatalf("psql with ON_ERROR_STOP=0 failed:\n%s", r)
		}
		if !strings.Contains(r.stderr, "ERROR:  division by zero") {
			t.Fatalf("the error was not shown:\n%s", r)
		}
		if want := "t|" + primaryPort + "|after"; !strings.Contains(r.stdout, want) {
			t.Fatalf("the statement after the error did not run in the same session (want %q):\n%s", want, r)
		}

		// On the wire: the rows produced before the failing one reach the
		// client, then the ErrorResponse, and the connection stays usable.
		conn := connect(t, ctx, px.AppDSN())
		rr := conn.PgConn().Exec(ctx, "select 1/(5-i) from generate_series(1,10) i")
		if !rr.NextResult() {
			t.Fatalf("no result: %v", rr.Close())
		}
		res := rr.ResultReader()
		var rows []string
		for res.NextRow() {
			rows = append(rows, string(res.Values()[0]))
		}
		_, err := res.Close()
		if cerr := rr.Close(); err == nil {
			err = cerr
		}
		if pgCode(err) != "22012" {
			t.Fatalf("want division_by_zero (22012), got %v", err)
		}
		if !slices.Equal(rows, []string{"0", "0", "0", "1"}) {
			t.Fatalf("rows before the error = %q, want [0 0 0 1]", rows)
		}
		if n := queryInt(t, ctx, conn, "select inet_server_port()"); n != int64(c.Primary.Port) {
			t.Fatalf("after the error the session answered from port %d", n)
		}
	})

	t.Run("EmptyQuery", func(t *testing.T) {
		// psql sends a script's lone ";" as the Query ";", which PostgreSQL
		// answers with EmptyQueryResponse. A tap between psql and the proxy
		// shows what truly crossed the wire.
		tap := startWireTap(t, px.Addr)
		script := filepath.Join(t.TempDir(), "empty.sql")
		writeFile(t, script, ";\n")
		tapCI := psqlConninfo(tap.port(), pgtest.AppDB)
		r := mustPsql(t, ctx, tapCI, env, nil, "-f", script, "-c", "select 'still here'")
		if !strings.Contains(r.stdout, "still here") {
			t.Fatalf("psql did not continue after the empty query:\n%s", r)
		}
		queries, types := tap.seen()
		t.Logf("psql sent %q; backend message types %q", queries, types)
		if !slices.ContainsFunc(queries, func(q string) bool { return strings.TrimSpace(q) == ";" || strings.TrimSpace(q) == "" }) {
			t.Fatalf("psql sent no empty Query; queries seen: %q", queries)
		}
		if !bytes.Contains(types, []byte{'I'}) {
			t.Fatalf("no EmptyQueryResponse came back; backend message types seen: %q", types)
		}

		// The same with an empty string, written as a raw Query message.
		conn := connect(t, ctx, px.AppDSN())
		pc := conn.PgConn()
		pc.Frontend().Send(&pgproto3.Query{String: ""})
		if err := pc.Frontend().Flush(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			msg, err := pc.ReceiveMessage(ctx)
			if err != nil {
				t.Fatalf("after Query \"\": %v (messages so far %q)", err, got)
			}
			got = append(got, fmt.Sprintf("%T", msg))
			if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
		want := []string{"*pgproto3.EmptyQueryResponse", "*pgproto3.ReadyForQuery"}
		if !slices.Equal(got, want) {
			t.Fatalf("Query \"\" got %q, want %q", got, want)
		}
		if n := queryInt(t, ctx, conn, "select 7"); n != 7 {
			t.Fatalf("select 7 = %d", n)
		}
	})
}

func TestPsqlCopy(t *testing.T) {
	c := pgtest.Shared(t)
	px := kinetictest.Start(t, c, kinetictest.Params{})
	ctx := ctxT(t, 2*time.Minute)
	ci := psqlConninfo(px.Port(), pgtest.AppDB)
	env := clientEnv()
	tbl := uniqueIdent("copy")
	conn := connect(t, ctx, px.AppDSN())
	if _, err := conn.Exec(ctx, "create table "+tbl+" (n int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dropTable(ctx, c, tbl)
	})

	countSum := func() string {
		t.Helper()
		r := mustPsql(t, ctx, ci, env, nil, "-At", "-c", "select count(*), coalesce(sum(n), 0) from "+tbl)
		return strings.TrimSpace(r.stdout)
	}

	// COPY FROM STDIN fed by \copy from a program: 50 000 CopyData messages.
	r := mustPsql(t, ctx, ci, env, nil, "-c", `\copy `+tbl+` from program 'seq 1 50000'`)
	if strings.TrimSpace(r.stdout) != "COPY 50000" {
		t.Fatalf(`\copy from program:`+"\n%s", r)
	}
	if got, want := countSum(), "50000|1250025000"; got != want {
		t.Fatalf("after \\copy from: count|sum = %s, want %s", got, want)
	}

	// COPY TO STDOUT into a file.
	out := filepath.Join(t.TempDir(), "out.txt")
	r = mustPsql(t, ctx, ci, env, nil, "-c", `\copy `+tbl+` to '`+out+`'`)
	if strings.TrimSpace(r.stdout) != "COPY 50000" {
		t.Fatalf(`\copy to:`+"\n%s", r)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkSequence(t, b, 1, 50000)

	// COPY FROM STDIN with the data in psql's own script on stdin.
	var in strings.Builder
	in.WriteString("COPY " + tbl + " FROM STDIN;\n")
	for i := 50001; i <= 60000; i++ {
		fmt.Fprintf(&in, "%d\n", i)
	}
	in.WriteString("\\.\nselect count(*) from " + tbl + ";\n")
	r = mustPsql(t, ctx, ci, env, strings.NewReader(in.String()), "-At")
	if !strings.Contains(r.stdout, "COPY 10000") || !strings.Contains(r.stdout, "\n60000") {
		t.Fatalf("COPY FROM STDIN via stdin:\n%s", r)
	}

	// A bad row aborts the COPY while psql is still sending data; the whole
	// COPY is rolled back and the session keeps working.
	bad := "COPY " + tbl + " FROM STDIN;\n1\nnot-a-number\n3\n\\.\nselect 'alive', count(*) from " + tbl + ";\n"
	r = psql(t, ctx, ci, env, strings.NewReader(bad), "-v", "ON_ERROR_STOP=0", "-At")
	if !strings.Contains(r.stderr, "invalid input syntax for type integer") || !strings.Contains(r.stdout, "alive|60000") {
		t.Fatalf("COPY with a bad row:\n%s", r)
	}

	// COPY TO STDOUT of the whole table through psql's stdout.
	r = mustPsql(t, ctx, ci, env, nil, "-c", "copy "+tbl+" to stdout")
	checkSequence(t, []byte(r.stdout), 1, 60000)
}

// checkSequence requires b to hold the integers lo..hi, one per line, in
// any order.
func checkSequence(t *testing.T, b []byte, lo, hi int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != hi-lo+1 {
		t.Fatalf("got %d lines, want %d", len(lines), hi-lo+1)
	}
	nums := make([]int, len(lines))
	for i, l := range lines {
		n, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("line %d: %q", i+1, l)
		}
		nums[i] = n
	}
	slices.Sort(nums)
	for i, n := range nums {
		if n != lo+i {
			t.Fatalf("sorted line %d is %d, want %d", i+1, n, lo+i)
		}
	}
}

func TestPsqlLargeObjectFunctionCall(t *testing.T) {
	c := pgtest.Shared(t)
	px := kinetictest.Start(t, c, kinetictest.Params{})
	ctx := ctxT(t, 2*time.Minute)
	ci := psqlConninfo(px.Port(), pgtest.AppDB)
	env := clientEnv()
	dir := t.TempDir()

	data := make([]byte, 1<<20+12345)
	rand.Read(data)
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}

	// libpq's lo_import/lo_export run lo_open, lowrite, loread, lo_close...
	// as FunctionCall messages inside a transaction psql opens.
	r := mustPsql(t, ctx, ci, env, nil, "-c", `\lo_import '`+in+`'`)
	f := strings.Fields(r.stdout)
	if len(f) != 2 || f[0] != "lo_import" {
		t.Fatalf(`\lo_import:`+"\n%s", r)
	}
	oid := f[1]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		psql(t, ctx, ci, env, nil, "-c", `\lo_unlink `+oid)
	})

	// The object exists on the primary, with the right size (reading
	// pg_largeobject takes the superuser).
	direct := connect(t, ctx, c.Primary.DSN(pgtest.SuperUser, "", pgtest.AppDB))
	if n := queryInt(t, ctx, direct, "select coalesce(sum(length(data)), 0) from pg_largeobject where loid = "+oid); n != int64(len(data)) {
		t.Fatalf("large object %s holds %d bytes on the primary, want %d", oid, n, len(data))
	}

	r = mustPsql(t, ctx, ci, env, nil, "-c", `\lo_export `+oid+` '`+out+`'`)
	if strings.TrimSpace(r.stdout) != "lo_export" {
		t.Fatalf(`\lo_export:`+"\n%s", r)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("exported %d bytes differ from the %d imported", len(got), len(data))
	}
}

func TestPsqlCtrlCCancels(t *testing.T) {
	c := pgtest.Shared(t)
	px := kinetictest.Start(t, c, kinetictest.Params{})
	ctx := ctxT(t, 2*time.Minute)
	ci := psqlConninfo(px.Port(), pgtest.AppDB)
	tag := uniqueIdent("ctrlc")
	sleeping := func() (int64, error) {
		s, err := c.Primary.QueryString(ctx, "select count(*) from pg_stat_activity where state = 'active' "+
			"and pid <> pg_backend_pid() and query like '%pg_sleep(60)%"+tag+"%'")
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(s, 10, 64)
	}

	cmd := exec.Command(pgtest.Bin("psql"), "-X", "-v", "ON_ERROR_STOP=1",
		"-c", "select pg_sleep(60) /* "+tag+" */", ci)
	cmd.Env = clientEnv()
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})

	awaitCond(t, 20*time.Second, "the primary to run pg_sleep(60) for psql", func() (bool, error) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("psql ended before the query was seen: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
		default:
		}
		n, err := sleeping()
		return n == 1, err
	})

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-done:
		done <- werr
	case <-time.After(20 * time.Second): // hang guard, not a latency assertion
		t.Fatalf("psql still running 20s after SIGINT\nstderr:\n%s", errb.String())
	}
	if !strings.Contains(errb.String(), "canceling statement due to user request") {
		t.Fatalf("psql did not report the cancel (exit %v):\nstdout:\n%s\nstderr:\n%s", werr, out.String(), errb.String())
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 1 {
		t.Errorf("psql exit = %v, want status 1 (the statement failed)", werr)
	}
	awaitCond(t, 10*time.Second, "pg_sleep to disappear from pg_stat_activity", func() (bool, error) {
		n, err := sleeping()
		return n == 0, err
	})
}

func TestPsqlOptionsAndAppName(t *testing.T) {
	c := pgtest.Shared(t)
	px := kinetictest.Start(t, c, kinetictest.Params{})
	ctx := ctxT(t, time.Minute)
	env := clientEnv("PGOPTIONS=-c search_path=foo,public -c statement_timeout=1234", "PGAPPNAME=myapp")
	args := []string{"-At",
		"-c", "show search_path",
		"-c", "show statement_timeout",
		"-c", "select application_name from pg_stat_activity where pid = pg_backend_pid()",
		"-c", "select current_schemas(false)",
		"-c", "select inet_server_port()",
	}
	r := mustPsql(t, ctx, psqlConninfo(px.Port(), pgtest.AppDB), env, nil, args...)
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := []string{"foo,public", "1234ms", "myapp", "{public}", strconv.Itoa(c.Primary.Port)}
	if !slices.Equal(got, want) {
		t.Errorf("through the proxy: %q, want %q", got, want)
	}
	// The proxy must be indistinguishable from the server itself.
	d := mustPsql(t, ctx, psqlConninfo(c.Primary.Port, pgtest.AppDB), env, nil, args...)
	if dg := strings.Split(strings.TrimSpace(d.stdout), "\n"); !slices.Equal(got[:4], dg[:4]) {
		t.Errorf("through the proxy %q, directly %q", got[:4], dg[:4])
	}
	// The ParameterStatus messages of the startup reflect the client's own
	// parameters, as PostgreSQL's do (libpq and drivers read DateStyle,
	// application_name... from them, not with SHOW).
	for i := range 2 { // the second session gets a pooled, reset connection
		q := "&application_name=myapp" + strconv.Itoa(i) + "&options=" + strings.NewReplacer(" ", "%20", "=", "%3D", ",", "%2C").Replace("-c DateStyle=SQL,DMY")
		viaProxy := connect(t, ctx, px.AppDSN()+q).PgConn()
		directly := connect(t, ctx, c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB)+q).PgConn()
		for _, name := range []string{"application_name", "DateStyle"} {
			if p, d := viaProxy.ParameterStatus(name), directly.ParameterStatus(name); p != d {
				t.Errorf("session %d: ParameterStatus %s through the proxy %q, directly %q", i, name, p, d)
			}
		}
		viaProxy.Close(ctx)
	}

	// statement_timeout is in force, not only displayed.
	r = psql(t, ctx, psqlConninfo(px.Port(), pgtest.AppDB), env, nil, "-c", "select pg_sleep(30)")
	if r.code == 0 || !strings.Contains(r.stderr, "canceling statement due to statement timeout") {
		t.Errorf("statement_timeout=1234 not applied:\n%s", r)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dropTable drops tbl in the app database of the primary, best effort.
func dropTable(ctx context.Context, c *pgtest.Cluster, tbl string) {
	pc, err := pgconn.Connect(ctx, c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB))
	if err != nil {
		return
	}
	defer pc.Close(context.Background())
	pc.Exec(ctx, "drop table if exists "+tbl).ReadAll()
}

// lockedBuffer is a bytes.Buffer safe for a process writing while the test
// reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// wireTap relays TCP connections to target and records the Query strings
// clients send and the message types servers answer with. Clients must not
// ask for TLS or GSS encryption.
type wireTap struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	queries []string
	types   []byte
}

func startWireTap(t *testing.T, target string) *wireTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wireTap{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	w.wg.Add(1)
	go w.accept()
	t.Cleanup(func() {
		ln.Close()
		w.mu.Lock()
		for c := range w.conns {
			c.Close()
		}
		w.mu.Unlock()
		w.wg.Wait()
	})
	return w
}

func (w *wireTap) port() int { return w.ln.Addr().(*net.TCPAddr).Port }

func (w *wireTap) seen() ([]string, []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.queries), slices.Clone(w.types)
}

func (w *wireTap) track(cs ...net.Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cs {
		w.conns[c] = struct{}{}
	}
}

func (w *wireTap) accept() {
	defer w.wg.Done()
	for {
		client, err := w.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", w.target)
		if err != nil {
			client.Close()
			continue
		}
		w.track(client, server)
		w.wg.Add(2)
		go func() {
			defer w.wg.Done()
			defer server.Close()
			defer client.Close()
			w.relay(client, server, true)
		}()
		go func() {
			defer w.wg.Done()
			defer client.Close()
			defer server.Close()
			w.relay(server, client, false)
		}()
	}
}

// relay copies messages from src to dst. The client's first message (the
// startup packet) has no type byte.
func (w *wireTap) relay(src, dst net.Conn, fromClient bool) {
	r := bufio.NewReader(src)
	if fromClient {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		body := make([]byte, n-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if _, err := dst.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		msg := make([]byte, 5+n-4)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(r, msg[5:]); err != nil {
			return
		}
		w.mu.Lock()
		if fromClient {
			if hdr[0] == 'Q' {
				w.queries = append(w.queries, string(bytes.TrimSuffix(msg[5:], []byte{0})))
			}
		} else {
			w.types = append(w.types, hdr[0])
		}
		w.mu.Unlock()
		if _, err := dst.Write(msg); err != nil {
			return
		}
	}
}
