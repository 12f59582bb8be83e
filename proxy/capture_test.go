package proxy

import (
	"bufio"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// Every WAL position query the session counts must be uncounted exactly
// once (answered, or its link gone), or the session's next read waits for
// it for ever in waitCaptures. A CI run hung that way: a read waited 10 s
// while a replica restarted.
func TestCaptureAccounting(t *testing.T) {
	newSession := func() *session {
		ss := &session{tx: 'I', log: zap.NewNop()}
		ss.cond = sync.NewCond(&ss.mu)
		return ss
	}
	newReplicaLink := func() *link {
		return newLink(&pool.Conn{Addr: "replica:5432", W: bufio.NewWriter(io.Discard)}, nil, true, true)
	}
	captures := func(ss *session) int {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.fresh.captures
	}

	t.Run("a position due after a unit whose link fails", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		ss.mu.Lock()
		ss.positionAfterLocked(l, 1, captureWrite)
		ss.mu.Unlock()
		if n := captures(ss); n != 1 {
			t.Fatalf("captures = %d with one position due, want 1", n)
		}
		ss.linkFailed(l, io.EOF, false)
		if n := captures(ss); n != 0 || !ss.owesCapture() {
			t.Fatalf("after the link failed: captures = %d, debt %v; want 0 and a debt (the unit's write is unknown)", n, ss.owesCapture())
		}
	})

	t.Run("a position due inside a transaction block is not read", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		ss.mu.Lock()
		ss.pending = 1
		ss.positionAfterLocked(l, 1, captureWrite)
		ss.mu.Unlock()
		ss.readyForQuery(l, 'T')
		if n := captures(ss); n != 0 || ss.owesCapture() {
			t.Fatalf("captures = %d, debt %v after ReadyForQuery T; want 0 and none", n, ss.owesCapture())
		}
	})

	t.Run("no reader: the position is owed", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		ss.mu.Lock()
		ss.pending = 1
		ss.positionAfterLocked(l, 1, captureWrite)
		ss.mu.Unlock()
		ss.readyForQuery(l, 'I')
		if n := captures(ss); n != 0 || !ss.owesCapture() {
			t.Fatalf("captures = %d, debt %v; want 0 and a debt", n, ss.owesCapture())
		}
	})

	t.Run("a replica read is noted as seen, nothing counted", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		ss.mu.Lock()
		ss.pending = 1
		ss.seenAfterLocked(l, 1)
		ss.mu.Unlock()
		if n := captures(ss); n != 0 {
			t.Fatalf("captures = %d after a replica read, want 0 (nothing is read after it)", n)
		}
		ss.readyForQuery(l, 'I')
		ss.mu.Lock()
		seen := len(ss.fresh.seen)
		ss.mu.Unlock()
		if seen != 1 {
			t.Fatalf("%d unbounded replica reads after its ReadyForQuery, want 1", seen)
		}
	})

	t.Run("a query never answered bounds the wait", func(t *testing.T) {
		defer func(d time.Duration) { captureWait = d }(captureWait)
		captureWait = 50 * time.Millisecond
		ss := newSession()
		ss.fresh.captures = 1 // counted, and nothing will ever answer it
		if ss.waitCaptures() {
			t.Fatal("waitCaptures = true with a query never answered")
		}
	})

	t.Run("an answered position ends the wait", func(t *testing.T) {
		ss := newSession()
		ss.fresh.captures = 1
		// (A read's position: a write's would also tell the client.)
		go ss.applyPosition(captureRead, freshness.Token{Timeline: 1, LSN: 42}, true, "", false)
		if !ss.waitCaptures() {
			t.Fatal("waitCaptures = false after the position arrived")
		}
		if ss.fresh.floor.LSN != 42 || ss.owesCapture() {
			t.Fatalf("floor %v, debt %v; want 0/2A and none", ss.fresh.floor, ss.owesCapture())
		}
	})
}
