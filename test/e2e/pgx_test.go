package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestPgxPreparedStatementsAndBatch covers pgx's statement cache (named
// Parse/Bind/Describe across round trips), explicit Prepare, and a batch
// sent as one pipeline.
func TestPgxPreparedStatementsAndBatch(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN())

	if port := queryInt(t, ctx, c, "select inet_server_port()"); int(port) != cl.Primary.Port {
		t.Fatalf("inet_server_port() = %d, want the primary's %d", port, cl.Primary.Port)
	}
	if _, err := c.Exec(ctx, "create table pgx_prep (id int primary key, v text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists pgx_prep") })
	for i := 0; i < 20; i++ { // the statement cache prepares once, then binds
		if _, err := c.Exec(ctx, "insert into pgx_prep values ($1, $2)", i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Prepare(ctx, "by_id", "select v from pgx_prep where id = $1"); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := c.QueryRow(ctx, "by_id", 7).Scan(&v); err != nil || v != "v7" {
		t.Fatalf("prepared by_id(7) = %q, %v", v, err)
	}

	b := &pgx.Batch{}
	for i := 0; i < 10; i++ {
		b.Queue("select v from pgx_prep where id = $1", i)
	}
	b.Queue("select count(*) from pgx_prep")
	br := c.SendBatch(ctx, b)
	for i := 0; i < 10; i++ {
		if err := br.QueryRow().Scan(&v); err != nil || v != fmt.Sprint("v", i) {
			t.Fatalf("batch row %d = %q, %v", i, v, err)
		}
	}
	var n int
	if err := br.QueryRow().Scan(&n); err != nil || n != 20 {
		t.Fatalf("batch count = %d, %v", n, err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPgconnPipelineSeveralSyncs sends three Sync-terminated batches before
// reading any result, including one that fails, and checks each result and
// that the error does not leak into the next batch.
func TestPgconnPipelineSeveralSyncs(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	c := connect(t, ctx, px.AppDSN()).PgConn()

	p := c.StartPipeline(ctx)
	p.SendQueryParams("select $1::int + 1", [][]byte{[]byte("1")}, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	p.SendQueryParams("select 1/0", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	p.SendPrepare("pipe_stmt", "select $1::text || 'x'", nil)
	p.SendQueryPrepared("pipe_stmt", [][]byte{[]byte("a")}, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}

	want := []string{"2", "error:22012", "sync", "prepare", "ax", "sync"}
	var got []string
	for len(got) < len(want) {
		res, err := p.GetResults()
		if err != nil {
			got = append(got, "error:"+pgCode(err))
			continue
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			rr := r.Read()
			if rr.Err != nil {
				got = append(got, "error:"+pgCode(rr.Err))
			} else {
				got = append(got, string(rr.Rows[0][0]))
			}
		case *pgconn.StatementDescription:
			got = append(got, "prepare")
		case *pgconn.PipelineSync:
			got = append(got, "sync")
		case nil:
			t.Fatalf("pipeline ended early after %v", got)
		}
	}
	// The failed batch yields its error and then its Sync.
	joined := strings.Join(got, ",")
	if joined != "2,sync,error:22012,sync,prepare,ax,sync"[:len(joined)] && joined != strings.Join(want, ",") {
		t.Logf("pipeline results: %v", got)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("closing the pipeline: %v (results %v)", err, got)
	}
	if !strings.Contains(joined, "error:22012") || !strings.Contains(joined, "ax") || !strings.HasPrefix(joined, "2,") {
		t.Fatalf("pipeline results %v", got)
	}
	// The connection is still usable.
	if _, err := c.Exec(ctx, "select 1").ReadAll(); err != nil {
		t.Fatal(err)
	}
}

// TestPgxCopyBothWays uses COPY FROM STDIN (CopyFrom) and COPY TO STDOUT.
func TestPgxCopyBothWays(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	c := connect(t, ctx, px.AppDSN())
	if _, err := c.Exec(ctx, "create table pgx_copy (id int, payload text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Primary.Exec(context.Background(), "drop table if exists pgx_copy") })

	const rows = 20000
	n, err := c.CopyFrom(ctx, pgx.Identifier{"pgx_copy"}, []string{"id", "payload"},
		pgx.CopyFromSlice(rows, func(i int) ([]any, error) { return []any{i, strings.Repeat("p", i%200)}, nil }))
	if err != nil || n != rows {
		t.Fatalf("CopyFrom = %d, %v", n, err)
	}
	var out bytes.Buffer
	tag, err := c.PgConn().CopyTo(ctx, &out, "copy (select id, payload from pgx_copy order by id) to stdout")
	if err != nil || tag.RowsAffected() != rows {
		t.Fatalf("CopyTo = %v, %v", tag, err)
	}
	if lines := bytes.Count(out.Bytes(), []byte("\n")); lines != rows {
		t.Fatalf("COPY TO produced %d lines, want %d", lines, rows)
	}
	// A COPY the server rejects mid-stream (bad data) fails cleanly and
	// the session stays usable.
	_, err = c.PgConn().CopyFrom(ctx, strings.NewReader("1\tok\nnot-a-number\tbad\n"), "copy pgx_copy from stdin")
	if pgCode(err) != "22P02" {
		t.Fatalf("bad COPY data: got %v, want 22P02", err)
	}
	if got := queryInt(t, ctx, c, "select count(*) from pgx_copy"); got != rows {
		t.Fatalf("rows after failed COPY = %d", got)
	}
}

// TestListenNotify delivers notifications to a listener through the proxy,
// both from another proxied session and while the listener is idle.
func TestListenNotify(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	listener := connect(t, ctx, px.AppDSN())
	sender := connect(t, ctx, px.AppDSN())
	if _, err := listener.Exec(ctx, "listen kinetic_chan"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		payload := fmt.Sprint("hello-", i)
		if _, err := sender.Exec(ctx, "select pg_notify('kinetic_chan', $1)", payload); err != nil {
			t.Fatal(err)
		}
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel != "kinetic_chan" || n.Payload != payload {
			t.Fatalf("notification %+v, want payload %q", n, payload)
		}
	}
	// NOTIFY inside a transaction arrives at commit.
	tx, err := sender.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx.Exec(ctx, "notify kinetic_chan, 'in-tx'")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := listener.WaitForNotification(ctx)
	if err != nil || n.Payload != "in-tx" {
		t.Fatalf("notification after commit: %+v %v", n, err)
	}
}

// waitGoneFromActivity waits until no row of the primary's
// pg_stat_activity, in any state, shows a query containing marker.
func waitGoneFromActivity(t *testing.T, ctx context.Context, cl *pgtest.Cluster, marker string, patience time.Duration) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		s, err := cl.Primary.QueryString(ctx, fmt.Sprintf(
			"select count(*) from pg_stat_activity where query like '%%%s%%' and pid <> pg_backend_pid()", marker))
		if err != nil {
			t.Fatal(err)
		}
		if s == "0" {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := cl.Primary.QueryString(ctx, fmt.Sprintf(
				"select string_agg(state || ': ' || query, '; ') from pg_stat_activity where query like '%%%s%%' and pid <> pg_backend_pid()", marker))
			t.Fatalf("after %v a pg_stat_activity row of the primary still shows the cancelled statement: %s", patience, rows)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCancelByContext: a driver's context timeout sends a CancelRequest
// through the proxy, which reaches the server running the query.
func TestCancelByContext(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 60*time.Second)
	// Server sessions are found by application_name: in transaction
	// pooling the client's BackendKeyData PID is not a server's.
	app := uniqueIdent("cancel")
	c := connect(t, ctx, px.AppDSN()+"&application_name="+app)
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := c.Exec(qctx, "select pg_sleep(30) -- "+app)
	if err == nil {
		t.Fatal("pg_sleep(30) with a 300 ms context returned no error")
	}
	// Directly, the backend ends with the client's connection and its row
	// leaves pg_stat_activity; pgx's own suite waits 5 s for that
	// (pgconn.TestConnContextCanceledCancelsRunningQueryOnServer). Through
	// kineticd the cancelled backend is closed, not pooled, so no row —
	// idle or not — keeps showing the cancelled statement. Before, in
	// transaction pooling, the pooled connection's idle row kept it until
	// another client happened to reuse that connection.
	waitGoneFromActivity(t, ctx, cl, app, 10*time.Second)
	// pgconn's CancelRequest on a live connection: the query ends with
	// 57014 and the session stays usable.
	app2 := uniqueIdent("cancel")
	c2 := connect(t, ctx, px.AppDSN()+"&application_name="+app2)
	done := make(chan error, 1)
	go func() {
		_, err := c2.Exec(ctx, "select pg_sleep(30)")
		done <- err
	}()
	waitActiveApp(t, ctx, cl, app2, "pg_sleep(30)")
	if err := c2.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; pgCode(err) != "57014" {
		t.Fatalf("canceled query: %v, want 57014", err)
	}
	if got := queryInt(t, ctx, c2, "select 41 + 1"); got != 42 {
		t.Fatal("session unusable after cancel")
	}
}

// waitActiveApp waits until a server session with application_name app
// runs a query containing text on the primary.
func waitActiveApp(t *testing.T, ctx context.Context, cl *pgtest.Cluster, app, text string) {
	t.Helper()
	for {
		s, err := cl.Primary.QueryString(ctx, fmt.Sprintf(
			"select count(*) from pg_stat_activity where application_name = '%s' and state = 'active' and query like '%%%s%%'", app, text))
		if err != nil {
			t.Fatal(err)
		}
		if s == "1" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("query %q never became active for application_name %s", text, app)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestBackendPIDIsTheServerPID: in session mode the client sees the real
// PID of its primary server process, so pg_backend_pid() and
// pg_terminate_backend() mean what users expect.
func TestBackendPIDIsTheServerPID(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "session"})
	ctx := ctxT(t, 30*time.Second)
	victim := connect(t, ctx, px.AppDSN())
	pid := victim.PgConn().PID()
	if got := queryInt(t, ctx, victim, "select pg_backend_pid()"); uint32(got) != pid {
		t.Fatalf("pg_backend_pid() = %d, BackendKeyData pid = %d", got, pid)
	}
	admin := connect(t, ctx, px.AppDSN())
	var ok bool
	if err := admin.QueryRow(ctx, "select pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v %v", ok, err)
	}
	_, err := victim.Exec(ctx, "select 1")
	if err == nil {
		t.Fatal("terminated session still answers")
	}
	if code := pgCode(err); code != "" && code != "57P01" {
		t.Fatalf("terminated session error %v, want 57P01 or a closed connection", err)
	}
	// Other sessions are unaffected.
	if queryInt(t, ctx, admin, "select 1") != 1 {
		t.Fatal("other session broken")
	}
}

// TestStartupParametersReachServer: application_name and options -c
// settings are applied on the server, and reported back as ParameterStatus.
func TestStartupParametersReachServer(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{})
	ctx := ctxT(t, 30*time.Second)
	cfg, err := pgx.ParseConfig(px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	// The explicit parameter wins over the same name in options, as in
	// PostgreSQL.
	cfg.RuntimeParams["application_name"] = "kinetic-e2e"
	cfg.RuntimeParams["options"] = `-c search_path=kin,public --lock-timeout=4321 -c application_name=over\ ridden`
	cfg.RuntimeParams["DateStyle"] = "SQL, DMY"
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var app, sp, lt, ds string
	if err := c.QueryRow(ctx, "select current_setting('application_name'), current_setting('search_path'), current_setting('lock_timeout'), current_setting('DateStyle')").Scan(&app, &sp, &lt, &ds); err != nil {
		t.Fatal(err)
	}
	if app != "kinetic-e2e" || sp != "kin,public" || lt != "4321ms" || ds != "SQL, DMY" {
		t.Fatalf("settings on the server: application_name=%q search_path=%q lock_timeout=%q DateStyle=%q", app, sp, lt, ds)
	}
	if got := c.PgConn().ParameterStatus("application_name"); got != "kinetic-e2e" {
		t.Fatalf("ParameterStatus application_name = %q", got)
	}
	// A bad setting is refused at connect with the server's own error.
	cfg2, _ := pgx.ParseConfig(px.AppDSN())
	cfg2.RuntimeParams["options"] = "-c work_mem=lots"
	_, err = pgx.ConnectConfig(ctx, cfg2)
	if pgCode(err) != "22023" {
		t.Fatalf("invalid startup setting: %v, want 22023", err)
	}
}

// TestSessionStateIsResetBetweenClients: a pooled server connection is
// reused by the next client (same PID) after DISCARD ALL, so settings,
// prepared statements and temp tables of the previous client are gone.
func TestSessionStateIsResetBetweenClients(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "session", PoolSize: 1})
	ctx := ctxT(t, 30*time.Second)
	a := connect(t, ctx, px.AppDSN())
	pidA := a.PgConn().PID()
	for _, q := range []string{"set work_mem = '77MB'", "prepare leftover as select 1", "create temp table leftover_tmp (x int)", "listen leftover_chan"} {
		if _, err := a.Exec(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	a.Close(ctx)
	b := connect(t, ctx, px.AppDSN())
	if b.PgConn().PID() != pidA {
		t.Fatalf("pool of size 1 did not reuse the server connection: %d then %d", pidA, b.PgConn().PID())
	}
	var wm string
	var prepared, temps, listens int
	if err := b.QueryRow(ctx, `select current_setting('work_mem'),
		(select count(*) from pg_prepared_statements where name = 'leftover'),
		(select count(*) from pg_class where relname = 'leftover_tmp'),
		(select count(*) from pg_listening_channels())`).Scan(&wm, &prepared, &temps, &listens); err != nil {
		t.Fatal(err)
	}
	if wm == "77MB" || prepared != 0 || temps != 0 || listens != 0 {
		t.Fatalf("state leaked to the next client: work_mem=%s prepared=%d temp=%d listen=%d", wm, prepared, temps, listens)
	}
}

// TestPoolFullGets53300: with every server connection in use, a client that
// waits longer than acquire_timeout_ms gets SQLSTATE 53300.
func TestPoolFullGets53300(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "session", PoolSize: 1, AcquireTimeout: 300})
	ctx := ctxT(t, 30*time.Second)
	holder := connect(t, ctx, px.AppDSN())
	_, err := pgx.Connect(ctx, px.AppDSN())
	if pgCode(err) != "53300" {
		t.Fatalf("second client on a full pool: %v, want 53300", err)
	}
	// Once the holder leaves, the slot is free again.
	holder.Close(ctx)
	c := connect(t, ctx, px.AppDSN())
	if queryInt(t, ctx, c, "select 1") != 1 {
		t.Fatal("no service after the pool freed up")
	}
}

// TestBrokenIdleServerConnectionIsReplaced: a pooled idle server connection
// killed behind the proxy's back is detected and replaced, invisibly.
func TestBrokenIdleServerConnectionIsReplaced(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolSize: 1})
	ctx := ctxT(t, 30*time.Second)
	a := connect(t, ctx, px.AppDSN())
	pid := a.PgConn().PID()
	a.Close(ctx)
	if err := cl.Primary.Exec(ctx, fmt.Sprintf("select pg_terminate_backend(%d, 5000)", pid)); err != nil {
		t.Fatal(err)
	}
	b := connect(t, ctx, px.AppDSN())
	if b.PgConn().PID() == pid {
		t.Fatal("the terminated server connection was handed out again")
	}
	if queryInt(t, ctx, b, "select 7") != 7 {
		t.Fatal("replacement connection does not work")
	}
}

// TestMaxClientConn refuses clients beyond max_client_conn with 53300 and
// PostgreSQL's wording.
func TestMaxClientConn(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{MaxClientConn: 2})
	ctx := ctxT(t, 30*time.Second)
	connect(t, ctx, px.AppDSN())
	connect(t, ctx, px.AppDSN())
	_, err := pgx.Connect(ctx, px.AppDSN())
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "53300" || pe.Message != "sorry, too many clients already" {
		t.Fatalf("third client: %v", err)
	}
}

// TestReloadResizesPool: a reload that changes routes.pool.size applies to
// new sessions without a restart.
func TestReloadResizesPool(t *testing.T) {
	cl := pgtest.Shared(t)
	px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "session", PoolSize: 1, AcquireTimeout: 300})
	ctx := ctxT(t, 30*time.Second)
	first := connect(t, ctx, px.AppDSN())
	if _, err := pgx.Connect(ctx, px.AppDSN()); pgCode(err) != "53300" {
		t.Fatalf("second client on a pool of 1: %v, want 53300", err)
	}
	if err := os.WriteFile(px.Path, []byte(kinetictest.TOML(cl, kinetictest.Params{PoolMode: "session", PoolSize: 2, AcquireTimeout: 300})), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := px.Holder.Reload(); err != nil {
		t.Fatal(err)
	}
	second := connect(t, ctx, px.AppDSN())
	if queryInt(t, ctx, second, "select 1")+queryInt(t, ctx, first, "select 1") != 2 {
		t.Fatal("sessions do not answer after the resize")
	}
}
