package proxy

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/pool"
)

// What the session records by Parse body (inferred parameter types,
// result shapes) goes with the last statement that has the body: a driver
// whose statement cache prepares one statement per text and closes the
// evicted ones (pgx) grew kineticd's live heap by about 1 MiB a minute in
// the soak, 1,000 such clients keeping up to maxInferred entries each.
func TestClosedStatementsForgetTheirBodies(t *testing.T) {
	ss := &session{log: zap.NewNop()}
	ss.mu.tx = 'I'
	ss.initWaits()
	l := newLink(&pool.Conn{Addr: "primary:5432", W: bufio.NewWriter(io.Discard)}, nil, false, true)
	body := func(name, query string) string {
		b, err := (&pgproto3.Parse{Name: name, Query: query}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(b[5:])
	}
	one, two := body("", "select 1"), body("", "select 2")
	ss.client.stmts = map[string]stmtInfo{
		"a": {query: "select 1", parse: one},
		"b": {query: "select 1", parse: one},
		"c": {query: "select 2", parse: two},
	}
	ss.client.unnamed = stmtInfo{query: "select 3", parse: body("", "select 3")}
	ss.mu.inferred = map[string][]uint32{one: {23}, two: {25}, ss.client.unnamed.parse: {20}}
	ss.mu.shapes = map[string]string{one: "s1", two: "s2", ss.client.unnamed.parse: "s3"}
	closeStmt := func(name string) {
		t.Helper()
		b, err := (&pgproto3.Close{ObjectType: 'S', Name: name}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ss.trackFrontend(l, 'C', b[5:]); err != nil {
			t.Fatal(err)
		}
	}
	held := func(parse string) (bool, bool) {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		_, inf := ss.mu.inferred[parse]
		_, sh := ss.mu.shapes[parse]
		return inf, sh
	}

	closeStmt("c")
	if inf, sh := held(two); inf || sh {
		t.Errorf("after closing the only statement with its body: inferred %v, shape %v; want both forgotten", inf, sh)
	}
	closeStmt("a")
	if inf, sh := held(one); !inf || !sh {
		t.Errorf("after closing one of two statements with a body: inferred %v, shape %v; want both kept (b has it)", inf, sh)
	}
	closeStmt("b")
	if inf, sh := held(one); inf || sh {
		t.Errorf("after closing the last statement with a body: inferred %v, shape %v; want both forgotten", inf, sh)
	}
	if inf, sh := held(ss.client.unnamed.parse); !inf || !sh {
		t.Errorf("the unnamed statement's records: inferred %v, shape %v; want both kept", inf, sh)
	}
}

// A Parse written to a replica link whose reader found it dead a moment
// before (a standby restarting) did not happen: the retried read must not
// find the client holding the statement, or its own Parse of the name
// follows a re-Parse of the proxy's and fails with 42P05. The consistency
// checker hit this twice in CI (2026-12-04 and 2026-12-05) under standby
// restarts; on the old code the op was queued on the dead link, never
// undone.
func TestNoteStmtOpOnDeadLink(t *testing.T) {
	parse := func(name, query string) []byte {
		b, err := (&pgproto3.Parse{Name: name, Query: query}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b[5:]
	}
	for _, dead := range []bool{false, true} {
		ss := &session{log: zap.NewNop()}
		ss.mu.tx = 'I'
		ss.initWaits()
		ss.client.stmts = map[string]stmtInfo{}
		l := newLink(&pool.Conn{Addr: "standby:5432", W: bufio.NewWriter(io.Discard)}, nil, true, true)
		l.dead = dead // as linkFailed sets it, from the link's reader
		if err := ss.trackFrontend(l, 'P', parse("stmtcache_1", "select 1")); err != nil {
			t.Fatal(err)
		}
		ss.applyClientUndo() // what the retry's sendTo does first (takeUndo)
		_, held := ss.client.stmts["stmtcache_1"]
		if held == dead {
			t.Errorf("link dead %v: the client holds the statement: %v, want %v", dead, held, !dead)
		}
		if queued := len(l.ops) == 1; queued == dead {
			t.Errorf("link dead %v: op queued on the link: %v", dead, queued)
		}
	}
}

// TestStmtOpQueue: the ops of earlier batches are the queue's prefix
// (settleOps and settleLocalUnnamed look at them only, not at the batch
// being written, which may hold 100,000 Parses), and a ParseComplete
// confirms the first queued Parse whether or not another op is ahead of
// it.
func TestStmtOpQueue(t *testing.T) {
	ss := &session{log: zap.NewNop()}
	ss.initWaits()
	l := newLink(&pool.Conn{Addr: "primary:5432", W: bufio.NewWriter(io.Discard)}, nil, true, false)
	for batch := uint64(0); batch < 3; batch++ {
		l.batches = batch
		for i := 0; i < 4; i++ {
			kind := byte('P')
			if batch == 1 && i == 0 {
				kind = 'X'
			}
			ss.noteStmtOp(l, stmtOp{kind: kind, name: fmt.Sprintf("s%d_%d", batch, i)})
		}
	}
	for batch, want := range []int{0, 4, 8, 12} {
		l.batches = uint64(batch)
		if got := len(l.earlierOpsLocked()); got != want {
			t.Errorf("writing batch %d: %d earlier ops, want %d", batch, got, want)
		}
	}
	l.batches = 2
	for i := 0; i < 4; i++ {
		l.stmtAnsweredLocked('1')
	}
	l.stmtAnsweredLocked('1') // batch 1's first Parse, behind its 'X'
	var left []string
	for _, op := range l.ops {
		left = append(left, op.name)
	}
	if want := []string{"s1_0", "s1_2", "s1_3", "s2_0", "s2_1", "s2_2", "s2_3"}; !slices.Equal(left, want) {
		t.Errorf("ops left %v, want %v", left, want)
	}
	if got := len(l.earlierOpsLocked()); got != 3 {
		t.Errorf("%d earlier ops after the answers, want 3", got)
	}
}
