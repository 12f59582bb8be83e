package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/test/kinetictest"
	"github.com/pg-kinetic/pg-kinetic/test/pgtest"
)

// TestDiscardAllPipelinedBeforeParse sends DISCARD ALL and, without
// waiting for its answer, a Parse of a statement name it drops, to the same
// server, again and again. The server reader sees DISCARD ALL complete
// while the session goroutine handles the Parse that follows it: the
// statements both sides keep must be owned by one of them (run with -race,
// as make test does). The answers must be PostgreSQL's: DISCARD ALL drops
// s1, so the new Parse of s1 succeeds and Describe shows its new shape.
func TestDiscardAllPipelinedBeforeParse(t *testing.T) {
	for _, tc := range []struct{ pool, routing string }{
		{"session", "off"}, {"session", "prefer_replica"}, {"transaction", "off"}, {"transaction", "prefer_replica"},
	} {
		pool, routing := tc.pool, tc.routing
		t.Run(pool+"/"+routing, func(t *testing.T) {
			cl := pgtest.Shared(t)
			p := kinetictest.Params{PoolMode: pool, ReadRoutingMode: routing}
			if routing != "off" {
				p.Replicas = []string{cl.Standbys[0].Addr()}
			}
			px := kinetictest.Start(t, cl, p)
			c := dialRaw(t, px.Addr)
			c.login()
			c.nc.SetDeadline(time.Now().Add(60 * time.Second))
			for i := range 100 {
				// s1 exists before: prepared in the previous round (or now).
				if i == 0 {
					if got := exchange(t, c, 1, &pgproto3.Parse{Name: "s1", Query: "SELECT 0 AS a"}, &pgproto3.Sync{}); fmt.Sprint(got) != "[1 Z I]" {
						t.Fatalf("Parse: %v", got)
					}
				}
				col := fmt.Sprintf("c%d", i)
				got := exchange(t, c, 2, &pgproto3.Query{String: "DISCARD ALL"},
					&pgproto3.Parse{Name: "s1", Query: fmt.Sprintf("SELECT %d AS %s", i, col)},
					&pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Bind{PreparedStatement: "s1"},
					&pgproto3.Execute{}, &pgproto3.Sync{})
				want := fmt.Sprintf("[C DISCARD ALL Z I 1 T %s 2 D %d C SELECT 1 Z I]", col, i)
				if fmt.Sprint(got) != want {
					t.Fatalf("round %d: got %v, want %s", i, got, want)
				}
			}
			// A DISCARD ALL the server refuses (25001, in a transaction
			// block) forgets nothing: s1 still runs.
			got := exchange(t, c, 4, &pgproto3.Query{String: "BEGIN"}, &pgproto3.Query{String: "DISCARD ALL"},
				&pgproto3.Query{String: "ROLLBACK"}, &pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{})
			if want := "[C BEGIN Z T E 25001 Z E C ROLLBACK Z I 2 D 99 C SELECT 1 Z I]"; fmt.Sprint(got) != want {
				t.Fatalf("after a refused DISCARD ALL: got %v, want %s", got, want)
			}
		})
	}
}
