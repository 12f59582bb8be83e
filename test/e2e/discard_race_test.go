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
					c.fe.Send(&pgproto3.Parse{Name: "s1", Query: "SELECT 0 AS a"})
					c.fe.Send(&pgproto3.Sync{})
					if err := c.fe.Flush(); err != nil {
						t.Fatal(err)
					}
					if _, err := c.fe.Receive(); err != nil { // ParseComplete
						t.Fatal(err)
					}
					if _, err := c.fe.Receive(); err != nil { // ReadyForQuery
						t.Fatal(err)
					}
				}
				col := fmt.Sprintf("c%d", i)
				c.fe.Send(&pgproto3.Query{String: "DISCARD ALL"})
				c.fe.Send(&pgproto3.Parse{Name: "s1", Query: fmt.Sprintf("SELECT %d AS %s", i, col)})
				c.fe.Send(&pgproto3.Describe{ObjectType: 'S', Name: "s1"})
				c.fe.Send(&pgproto3.Bind{PreparedStatement: "s1"})
				c.fe.Send(&pgproto3.Execute{})
				c.fe.Send(&pgproto3.Sync{})
				if err := c.fe.Flush(); err != nil {
					t.Fatal(err)
				}
				var got []string
				for ready := 0; ready < 2; {
					m, err := c.fe.Receive()
					if err != nil {
						t.Fatalf("round %d: %v (after %v)", i, err, got)
					}
					switch m := m.(type) {
					case *pgproto3.ErrorResponse:
						t.Fatalf("round %d: %s %s (after %v)", i, m.Code, m.Message, got)
					case *pgproto3.CommandComplete:
						got = append(got, "C "+string(m.CommandTag))
					case *pgproto3.RowDescription:
						got = append(got, "T "+string(m.Fields[0].Name))
					case *pgproto3.DataRow:
						got = append(got, "D "+string(m.Values[0]))
					case *pgproto3.ReadyForQuery:
						ready++
						got = append(got, "Z")
					}
				}
				want := fmt.Sprintf("[C DISCARD ALL Z T %s D %d C SELECT 1 Z]", col, i)
				if fmt.Sprint(got) != want {
					t.Fatalf("round %d: got %v, want %s", i, got, want)
				}
			}
			// A DISCARD ALL the server refuses (25001, in a transaction
			// block) forgets nothing: s1 still runs.
			c.fe.Send(&pgproto3.Query{String: "BEGIN"})
			c.fe.Send(&pgproto3.Query{String: "DISCARD ALL"})
			c.fe.Send(&pgproto3.Query{String: "ROLLBACK"})
			c.fe.Send(&pgproto3.Bind{PreparedStatement: "s1"})
			c.fe.Send(&pgproto3.Execute{})
			c.fe.Send(&pgproto3.Sync{})
			if err := c.fe.Flush(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for ready := 0; ready < 4; {
				m, err := c.fe.Receive()
				if err != nil {
					t.Fatalf("%v (after %v)", err, got)
				}
				switch m := m.(type) {
				case *pgproto3.ErrorResponse:
					got = append(got, "E "+m.Code)
				case *pgproto3.DataRow:
					got = append(got, "D "+string(m.Values[0]))
				case *pgproto3.ReadyForQuery:
					ready++
					got = append(got, "Z")
				}
			}
			if want := "[Z E 25001 Z Z D 99 Z]"; fmt.Sprint(got) != want {
				t.Fatalf("after a refused DISCARD ALL: got %v, want %s", got, want)
			}
		})
	}
}
