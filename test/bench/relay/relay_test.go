package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/pg-kinetic/pg-kinetic/test/bench/internal/benchutil"
	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgmock"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// target is where a client connects: the fake server itself, or a kineticd
// in front of it in a pool mode.
type target struct {
	name     string
	poolMode string // "" = direct to the fake server
}

var targets = []target{
	{"direct", ""},
	{"proxy", "session"},
	{"proxy-transaction", "transaction"},
}

// startFake starts a fake server answering rows rows, closed when tb ends.
func startFake(tb testing.TB, rows int) *pgmock.Server {
	tb.Helper()
	s, err := pgmock.Start(rows)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// dsn returns the app user's connection string for t in front of fake: an
// in-process kineticd (routing off, the given pool mode and size) is started
// for a proxy target and stopped when tb ends.
func dsn(tb testing.TB, t target, fake *pgmock.Server, poolSize int) string {
	tb.Helper()
	addr := fake.Addr()
	if t.poolMode != "" {
		// With Primary set the config needs no cluster.
		px := kinetictest.Start(tb, nil, kinetictest.Params{Primary: addr, PoolMode: t.poolMode, PoolSize: poolSize,
			ReadRoutingMode: "off", LogLevel: "warn"})
		addr = px.Addr
	}
	return kinetictest.DSN(addr, pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB)
}

// workload is the statement of one op and its parameters: pgbench -S's
// lookup for one row, a range of aids for 100.
type workload struct {
	rows     int
	simple   []string   // with the aid as a literal
	extended string     // with $1
	params   [][][]byte // $1 per op
}

func newWorkload(rows int) workload {
	w := workload{rows: rows}
	where := "aid = %s"
	if rows > 1 {
		where = "aid BETWEEN %s AND %[1]s + " + strconv.Itoa(rows-1)
	}
	w.extended = "SELECT * FROM pgbench_accounts WHERE " + fmt.Sprintf(where, "$1")
	// Random aids of pgbench -s 1, drawn before the clock runs.
	for range 1024 {
		aid := strconv.Itoa(1 + rand.IntN(100000-rows))
		w.simple = append(w.simple, "SELECT * FROM pgbench_accounts WHERE "+fmt.Sprintf(where, aid))
		w.params = append(w.params, [][]byte{[]byte(aid)})
	}
	return w
}

// roundTrip runs op i of w and returns the number of rows read. Rows are
// counted, not copied, so that the client costs little next to the proxy.
func (w workload) roundTrip(ctx context.Context, conn *pgconn.PgConn, extended bool, i int) (int, error) {
	n := 0
	if extended {
		rr := conn.ExecParams(ctx, w.extended, w.params[i%len(w.params)], nil, nil, nil)
		for rr.NextRow() {
			n++
		}
		_, err := rr.Close()
		return n, err
	}
	return benchutil.CountRows(conn.Exec(ctx, w.simple[i%len(w.simple)]))
}

// BenchmarkRelay measures one query round trip of a single client, direct
// to the fake server and through kineticd (pool_mode session, then
// transaction; routing off), for 1 and 100 result rows, with the simple and
// the extended protocol (Parse/Bind/Describe/Execute/Sync). The proxy's
// cost per round trip is the proxy figure minus the direct one, for ns/op
// and for allocs/op (everything runs in this process).
//
// A proxy that fails to connect or relay (say, a pool mode that does not
// work) fails the benchmark with the error.
func BenchmarkRelay(b *testing.B) {
	rowCounts := []int{1, 100}
	dsns := map[string]map[int]string{}
	for _, t := range targets {
		dsns[t.name] = map[int]string{}
	}
	for _, rows := range rowCounts {
		fake := startFake(b, rows)
		for _, t := range targets {
			dsns[t.name][rows] = dsn(b, t, fake, 4)
		}
	}
	for _, t := range targets {
		b.Run(t.name, func(b *testing.B) {
			for _, rows := range rowCounts {
				w := newWorkload(rows)
				b.Run("rows="+strconv.Itoa(rows), func(b *testing.B) {
					for _, proto := range []string{"simple", "extended"} {
						b.Run(proto, func(b *testing.B) { benchRoundTrip(b, dsns[t.name][rows], w, proto == "extended") })
					}
				})
			}
		})
	}
}

func benchRoundTrip(b *testing.B, dsn string, w workload, extended bool) {
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n, err := w.roundTrip(ctx, conn, extended, i)
		if err != nil {
			b.Fatalf("op %d: %v", i, err)
		}
		if n != w.rows {
			b.Fatalf("op %d: %d rows, want %d", i, n, w.rows)
		}
		i++
	}
}

// TestRelay checks what the benchmarks rely on, for every target: the fake
// server's answers reach a pgconn client intact over both protocols, with
// several statements in one Query, across a transaction, and a second
// client gets a server connection back from a pool of one (the first
// client's was reset and released).
func TestRelay(t *testing.T) {
	const rows = 3
	fake := startFake(t, rows)
	w := newWorkload(rows)
	ctx := context.Background()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			dsn := dsn(t, tg, fake, 1)
			for client := range 2 {
				conn, err := pgconn.Connect(ctx, dsn)
				if err != nil {
					t.Fatalf("client %d: connect: %v", client, err)
				}
				for _, extended := range []bool{false, true} {
					if n, err := w.roundTrip(ctx, conn, extended, client); err != nil || n != rows {
						t.Errorf("client %d, extended %v: %d rows, %v; want %d rows", client, extended, n, err, rows)
					}
				}
				res, err := conn.Exec(ctx, "SET application_name = 'a;b'; SELECT 1; DISCARD ALL; SELECT 2").ReadAll()
				if err != nil || len(res) != 4 {
					t.Fatalf("client %d: multi-statement query: %d results, %v", client, len(res), err)
				}
				var got []string
				for _, r := range res {
					got = append(got, fmt.Sprintf("%s/%d", r.CommandTag, len(r.Rows)))
				}
				if want := "[SET/0 SELECT 3/3 DISCARD ALL/0 SELECT 3/3]"; fmt.Sprint(got) != want {
					t.Errorf("client %d: multi-statement results %v, want %s", client, got, want)
				}
				if string(res[1].Rows[0][0]) != "1" || string(res[1].Rows[2][3][:1]) != " " {
					t.Errorf("client %d: first row %q, last row %q", client, res[1].Rows[0], res[1].Rows[2])
				}
				for _, step := range []struct {
					sql string
					tx  byte
				}{{"BEGIN", 'T'}, {"SELECT 1", 'T'}, {"COMMIT", 'I'}} {
					if _, err := conn.Exec(ctx, step.sql).ReadAll(); err != nil {
						t.Fatalf("client %d: %s: %v", client, step.sql, err)
					}
					if conn.TxStatus() != step.tx {
						t.Errorf("client %d: after %s: transaction status %q, want %q", client, step.sql, conn.TxStatus(), step.tx)
					}
				}
				if err := conn.Close(ctx); err != nil {
					t.Errorf("client %d: close: %v", client, err)
				}
			}
		})
	}
}
