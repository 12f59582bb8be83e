package proxy

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestPanicEndsOneSession: a panic in one session's relay loop or in one
// of its server readers ends that session only (FATAL XX000 when the
// client can still be told, or its connection closed), and the next
// client on the same proxy and pool gets exactly its own answer. Without
// the recovery in contain.go the test process itself dies.
func TestPanicEndsOneSession(t *testing.T) {
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			r := newRelayRig(t, mode)
			defer r.close()
			r.goodQuery(t)

			// The relay loop: a FunctionCall message panics it.
			failpoints.relay.Store('F')
			nc, fe := r.login(t)
			fe.Send(&pgproto3.FunctionCall{Function: 1})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			m, err := fe.Receive()
			failpoints.relay.Store(0)
			if e, ok := m.(*pgproto3.ErrorResponse); !ok || e.Code != "XX000" || e.Severity != "FATAL" {
				t.Fatalf("after a panic in the relay loop: %#v, %v; want FATAL XX000", m, err)
			}
			if _, err := fe.Receive(); err == nil {
				t.Fatal("the connection stayed open after FATAL XX000")
			}
			nc.Close()
			r.goodQuery(t)

			// A server reader: the server's RowDescription panics it.
			failpoints.reader.Store('T')
			nc, fe = r.login(t)
			fe.Send(&pgproto3.Query{String: "select aid from pgbench_accounts"})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			for {
				m, err := fe.Receive()
				if err != nil {
					if errors.Is(err, io.EOF) || isConnReset(err) || errors.Is(err, io.ErrUnexpectedEOF) {
						break // closed, as it should be
					}
					t.Fatalf("after a panic in a server reader: %v; want the connection closed", err)
				}
				if _, ok := m.(*pgproto3.DataRow); ok {
					t.Fatal("rows arrived although the reader panicked on their RowDescription")
				}
				if e, ok := m.(*pgproto3.ErrorResponse); ok && e.Severity == "FATAL" {
					continue // then the close
				}
			}
			failpoints.reader.Store(0)
			nc.Close()
			r.goodQuery(t)
		})
	}
}
