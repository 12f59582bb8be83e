package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/pg-kinetic/pg-kinetic/admin"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestMaxPreparedStatements: in transaction pooling one server connection
// collects the statements of every client it serves. With
// max_prepared_statements = 4 and one server connection, two clients
// that prepare 12 statements each leave at most 4 on the server (read from
// pg_prepared_statements on that backend), and every statement still
// answers right when used again after it was evicted. Without the bound
// (0) the same run leaves all 24 there: the measurement can tell.
func TestMaxPreparedStatements(t *testing.T) {
	cl := pgtest.Shared(t)
	for _, tc := range []struct {
		limit    int
		min, max int64 // statements left on the server
	}{{limit: 4, min: 1, max: 4}, {limit: 0, min: 24, max: 1 << 30}} {
		t.Run(fmt.Sprintf("limit=%d", tc.limit), func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			px := kinetictest.Start(t, cl, kinetictest.Params{PoolMode: "transaction", PoolSize: 1,
				ServerExtra: fmt.Sprintf("max_prepared_statements = %d", tc.limit)})
			var clients [2]*pgx.Conn
			for i := range clients {
				c, err := pgx.Connect(ctx, px.AppDSN())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(ctx)
				clients[i] = c
			}
			// Each statement text is its own (pgx names its statements
			// by a hash of the text): client i's statement k adds 1000*i+k.
			use := func(i, k int) {
				t.Helper()
				var got int64
				sql := fmt.Sprintf("select $1::int8 + %d", 1000*i+k)
				if err := clients[i].QueryRow(ctx, sql, int64(7)).Scan(&got); err != nil {
					t.Fatalf("client %d statement %d: %v", i, k, err)
				}
				if want := int64(7 + 1000*i + k); got != want {
					t.Fatalf("client %d statement %d: got %d, want %d", i, k, got, want)
				}
			}
			// An explicitly named statement, prepared first, used last.
			if _, err := clients[0].Prepare(ctx, "first", "select $1::text || '!'"); err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 2; round++ {
				for k := 0; k < 12; k++ {
					use(0, k)
					use(1, k)
				}
			}
			var s string
			if err := clients[0].QueryRow(ctx, "first", "hi").Scan(&s); err != nil || s != "hi!" {
				t.Fatalf("statement prepared before 24 others: %q, %v", s, err)
			}
			// The server's own count, on the one server connection (a
			// simple Query prepares nothing).
			n := queryInt(t, ctx, clients[1], "select count(*) from pg_prepared_statements", pgx.QueryExecModeSimpleProtocol)
			if n < tc.min || n > tc.max {
				t.Fatalf("max_prepared_statements = %d: the server holds %d statements, want %d..%d", tc.limit, n, tc.min, tc.max)
			}
			evicted := counterSum(t, px, admin.MetricStmtEvictions, "", "")
			if (tc.limit > 0) != (evicted > 0) {
				t.Fatalf("max_prepared_statements = %d: %v evictions counted", tc.limit, evicted)
			}
			t.Logf("max_prepared_statements = %d: %d statements on the server, %v evictions", tc.limit, n, evicted)
		})
	}
}

// counterSum adds up the series of a counter of the proxy's registry
// that have label = value (every series when label is "").
func counterSum(t *testing.T, px *kinetictest.Proxy, name, label, value string) float64 {
	t.Helper()
	mfs, err := px.Server.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
				return lp.GetName() == label && lp.GetValue() == value
			}) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
