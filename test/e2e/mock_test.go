package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/proxy"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgmock"
)

// Fast protocol tests against a scripted server (test/pgmock), next to
// the real-PostgreSQL ones: the mock logs every message it receives, so
// they check what the proxy sent, its injected messages included.

func startMock(t *testing.T) *pgmock.Server {
	t.Helper()
	m, err := pgmock.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// exchange sends msgs and reads answers up to the ready-th ReadyForQuery,
// as short strings ("1" ParseComplete, "T col" a RowDescription's first
// column, "D v" a DataRow's first value, "E XX000", "Z I"...).
func exchange(t *testing.T, c *rawClient, ready int, msgs ...pgproto3.FrontendMessage) []string {
	t.Helper()
	for _, m := range msgs {
		c.fe.Send(m)
	}
	if err := c.fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for n := 0; n < ready; {
		m, err := c.fe.Receive()
		if err != nil {
			t.Fatalf("%v (after %v)", err, got)
		}
		switch m := m.(type) {
		case *pgproto3.ParseComplete:
			got = append(got, "1")
		case *pgproto3.BindComplete:
			got = append(got, "2")
		case *pgproto3.CloseComplete:
			got = append(got, "3")
		case *pgproto3.RowDescription:
			got = append(got, "T "+string(m.Fields[0].Name))
		case *pgproto3.DataRow:
			got = append(got, "D "+string(m.Values[0]))
		case *pgproto3.CommandComplete:
			got = append(got, "C "+string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			got = append(got, "E "+m.Code)
		case *pgproto3.ReadyForQuery:
			got = append(got, "Z "+string(m.TxStatus))
			n++
		}
	}
	return got
}

func mockClient(t *testing.T, px *kinetictest.Proxy) *rawClient {
	c := dialRaw(t, px.Addr)
	c.login()
	c.nc.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// poolIdle is the number of idle server connections SHOW POOLS reports.
func poolIdle(t *testing.T, px *kinetictest.Proxy) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows := adminExec(t, ctx, px, "SHOW POOLS")
	n := 0
	for _, r := range rows {
		if len(r) > 5 {
			v, _ := strconv.Atoi(r[5]) // idle
			n += v
		}
	}
	return n
}

// subsequence reports whether want appears in got in order.
func subsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestMockStatementPreparedOnAnotherConnection: in transaction pooling a
// statement prepared on one server connection is Bound when only another
// is free; the proxy Parses it there first, and the client sees only its
// own answers.
func TestMockStatementPreparedOnAnotherConnection(t *testing.T) {
	m := startMock(t)
	px := kinetictest.Start(t, nil, kinetictest.Params{Primary: m.Addr(), PoolMode: "transaction", PoolSize: 2, LogLevel: "warn"})
	a, b := mockClient(t, px), mockClient(t, px)
	if got := exchange(t, a, 1, &pgproto3.Parse{Name: "s1", Query: "SELECT 1"}, &pgproto3.Sync{}); fmt.Sprint(got) != "[1 Z I]" {
		t.Fatalf("Parse: %v", got)
	}
	// The connection goes back to its pool just after the ReadyForQuery
	// reached a: wait for it, so that b takes it.
	awaitCond(t, 5*time.Second, "the connection s1 was prepared on to be idle", func() (bool, error) {
		return poolIdle(t, px) == 1, nil
	})
	// b holds the only idle server connection, the one s1 was prepared on.
	if got := exchange(t, b, 1, &pgproto3.Query{String: "BEGIN"}); fmt.Sprint(got) != "[C BEGIN Z T]" {
		t.Fatalf("BEGIN: %v", got)
	}
	got := exchange(t, a, 1, &pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if fmt.Sprint(got) != "[2 D 1 C SELECT 1 Z I]" {
		t.Fatalf("Bind on the other connection: %v", got)
	}
	exchange(t, b, 1, &pgproto3.Query{String: "COMMIT"})
	rec := m.Received()
	if len(rec) != 2 {
		t.Fatalf("%d server connections, want 2: %q", len(rec), rec)
	}
	if !subsequence(rec[0], []string{"Parse s1", "Sync", "Query BEGIN", "Query COMMIT"}) || slices.Contains(rec[0], "Bind s1") {
		t.Errorf("first connection received %q", rec[0])
	}
	if !subsequence(rec[1], []string{"Parse s1", "Bind s1", "Execute", "Sync"}) {
		t.Errorf("second connection received %q, want the proxy's Parse of s1 before the client's Bind", rec[1])
	}
}

// TestMockPipelinedErrorSkipsToSync: a batch whose first statement fails
// is skipped by the server up to its Sync; the proxy relays the one error
// and forwards the batch as it is (nothing of its own), and a statement
// that batch prepared does not exist afterwards.
func TestMockPipelinedErrorSkipsToSync(t *testing.T) {
	for _, pool := range []string{"session", "transaction"} {
		t.Run(pool, func(t *testing.T) {
			m := startMock(t)
			px := kinetictest.Start(t, nil, kinetictest.Params{Primary: m.Addr(), PoolMode: pool, PoolSize: 1, LogLevel: "warn"})
			c := mockClient(t, px)
			got := exchange(t, c, 1,
				&pgproto3.Parse{Name: "s1", Query: "SELECT " + pgmock.FailMark}, &pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{},
				&pgproto3.Parse{Name: "s2", Query: "SELECT 2"}, &pgproto3.Sync{})
			if fmt.Sprint(got) != "[E XX000 Z I]" {
				t.Fatalf("failing batch: %v", got)
			}
			got = exchange(t, c, 1, &pgproto3.Bind{PreparedStatement: "s2"}, &pgproto3.Execute{}, &pgproto3.Sync{})
			if fmt.Sprint(got) != "[E 26000 Z I]" {
				t.Fatalf("Bind of the skipped s2: %v", got)
			}
			rec := m.Received()
			want := []string{"Parse s1", "Bind s1", "Execute", "Parse s2", "Sync", "Bind s2", "Execute", "Sync"}
			var mine []string
			for _, r := range rec[0] {
				if !strings.HasPrefix(r, "Query ") { // (settings the proxy applies at connect)
					mine = append(mine, r)
				}
			}
			if fmt.Sprint(mine) != fmt.Sprint(want) {
				t.Errorf("server received %q, want %q", mine, want)
			}
		})
	}
}

// TestMockBarrierAfterError replays, with the race window widened, the
// order of events that hung a session in CI (testdata/races.txt of the
// differential test): the server's error is read before the proxy
// registers a barrier for a statement it must Close and Parse again in
// the same batch, and recorded after. The client must get its
// ReadyForQuery.
func TestMockBarrierAfterError(t *testing.T) {
	old := proxy.SetRaceWindows(proxy.RaceWindows{AfterErrorHeader: 50 * time.Millisecond, BeforeBarrier: 20 * time.Millisecond})
	t.Cleanup(func() { proxy.SetRaceWindows(old) })
	m := startMock(t)
	px := kinetictest.Start(t, nil, kinetictest.Params{Primary: m.Addr(), PoolMode: "session", PoolSize: 1, LogLevel: "warn"})
	c := mockClient(t, px)
	if got := exchange(t, c, 1, &pgproto3.Parse{Name: "cached", Query: "SELECT 1"}, &pgproto3.Sync{}); fmt.Sprint(got) != "[1 Z I]" {
		t.Fatalf("Parse: %v", got)
	}
	if got := exchange(t, c, 1, &pgproto3.Query{String: "BEGIN; SELECT " + pgmock.FailMark}); fmt.Sprint(got) != "[C BEGIN E XX000 Z E]" {
		t.Fatalf("failing transaction: %v", got)
	}
	for _, msg := range []pgproto3.FrontendMessage{
		&pgproto3.Parse{Name: "s2", Query: "SELECT 2"}, &pgproto3.Bind{PreparedStatement: "s2"}, &pgproto3.Execute{},
		&pgproto3.Parse{Name: "cached", Query: "SELECT 3"}, &pgproto3.Describe{ObjectType: 'S', Name: "cached"}, &pgproto3.Flush{},
	} {
		c.fe.Send(msg)
	}
	got := exchange(t, c, 1, &pgproto3.Sync{})
	if fmt.Sprint(got) != "[E 25P02 Z E]" {
		t.Fatalf("batch in the failed transaction: %v", got)
	}
}
