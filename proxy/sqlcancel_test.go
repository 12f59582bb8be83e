package proxy

import (
	"testing"

	"github.com/pg-kinetic/pg-kinetic/pool"
)

// TestCancelTargetIsTheStatementOfTheMoment: a pg_cancel_backend relayed to
// a replica names the statement the session ran there when the call was
// sent, and reaches only that one: not one the session began after it
// (the rare TestSQLCancelReachesTheReplica failure: the server's own
// signal had stopped the session's statement on the primary, and the
// relay cancelled its next read on a replica).
func TestCancelTargetIsTheStatementOfTheMoment(t *testing.T) {
	const primaryPID = 4242
	newSession := func() (*session, *link) {
		ss := &session{key: cancelKey{pid: primaryPID, secret: 1}}
		ss.mu.primary = &link{addr: "primary:5432", conn: &pool.Conn{PID: primaryPID}}
		r := &link{addr: "replica:5432", replica: true, conn: &pool.Conn{PID: 777}}
		return ss, r
	}

	t.Run("a read running on a replica", func(t *testing.T) {
		ss, r := newSession()
		r.batches, r.rfqs = 3, 2 // the third batch runs
		ss.mu.cur = r
		tg, ok := ss.replicaStatement("primary:5432")
		if !ok || tg.l != r || tg.until != 3 {
			t.Fatalf("target %+v %v, want the replica link until its third ReadyForQuery", tg, ok)
		}
		if !ss.stillRunsLocked(tg) {
			t.Fatal("the statement still runs: the cancel must reach it")
		}
		r.rfqs = 3    // answered (stopped by the server's own signal, say)
		r.batches = 4 // and the session's next read sent to the same replica
		if ss.stillRunsLocked(tg) {
			t.Fatal("a read begun after the pg_cancel_backend was sent would be cancelled")
		}
	})
	t.Run("a batch still being sent (no Sync yet)", func(t *testing.T) {
		ss, r := newSession()
		r.batches, r.rfqs = 2, 2
		ss.mu.cur, ss.mu.unsynced = r, true
		tg, ok := ss.replicaStatement("primary:5432")
		if !ok || tg.until != 3 {
			t.Fatalf("target %+v %v, want until the batch being sent is answered (3)", tg, ok)
		}
		ss.mu.unsynced, r.batches = false, 3 // its Sync went out
		if !ss.stillRunsLocked(tg) {
			t.Fatal("the same batch, synced, still runs")
		}
		r.rfqs = 3
		if ss.stillRunsLocked(tg) {
			t.Fatal("answered: nothing of it runs")
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(ss *session, r *link)
		addr  string
	}{
		{"nothing runs", func(ss *session, r *link) { r.batches, r.rfqs = 2, 2; ss.mu.cur = r }, "primary:5432"},
		{"the statement runs on the primary", func(ss *session, r *link) {
			ss.mu.cur = ss.mu.primary
			ss.mu.primary.batches = 1
		}, "primary:5432"},
		{"another server's PID", func(ss *session, r *link) { r.batches = 1; ss.mu.cur = r }, "elsewhere:5432"},
		{"transaction pooling", func(ss *session, r *link) { r.batches = 1; ss.mu.cur = r; ss.txPool = true }, "primary:5432"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss, r := newSession()
			tc.setup(ss, r)
			if tg, ok := ss.replicaStatement(tc.addr); ok {
				t.Fatalf("a target %+v: nothing of the session runs on a replica for that call", tg)
			}
		})
	}
}
