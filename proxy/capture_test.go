package proxy

import (
	"bufio"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

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
		return ss.captures
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

	t.Run("the link fails after the query was queued", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		if err := ss.injectCapture(l, captureReplay); err != nil {
			t.Fatal(err)
		}
		if n := captures(ss); n != 1 {
			t.Fatalf("captures = %d after queueing one, want 1", n)
		}
		ss.linkFailed(l, io.EOF, false)
		if n := captures(ss); n != 0 {
			t.Fatalf("captures = %d after the link failed, want 0", n)
		}
		if !ss.owesCapture() {
			t.Fatal("a lost replay-position query left no captureDebt: the floor may lag what the read saw")
		}
	})

	t.Run("a lost strict-fresh position leaves no debt", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		if err := ss.injectCapture(l, capturePosition); err != nil {
			t.Fatal(err)
		}
		ss.linkFailed(l, io.EOF, false)
		if ss.owesCapture() {
			t.Fatal("captureDebt after losing a strict-fresh position (that read goes to the primary by itself)")
		}
	})

	t.Run("the link failed before the query was queued", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		ss.linkFailed(l, io.EOF, false) // the reader saw EOF between claim and queueing
		if err := ss.injectCapture(l, captureReplay); !errors.Is(err, errServerGone) {
			t.Fatalf("injectCapture on a dead link = %v, want errServerGone", err)
		}
		if n := captures(ss); n != 0 {
			t.Fatalf("captures = %d after queueing on a dead link, want 0", n)
		}
	})

	t.Run("stale and abandoned entries", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		for range 3 {
			if err := ss.injectCapture(l, captureReplay); err != nil {
				t.Fatal(err)
			}
		}
		l.swallow = append(l.swallow, expect{kind: 'C', batch: l.batches}) // not a capture
		ss.mu.Lock()
		ss.forgetSwallowLocked(l, 2)
		ss.mu.Unlock()
		if n, left := captures(ss), len(l.swallow); n != 1 || left != 2 {
			t.Fatalf("after forgetting 2 of 4: captures = %d, entries left = %d; want 1 and 2", n, left)
		}
		ss.mu.Lock()
		ss.forgetSwallowLocked(l, len(l.swallow))
		ss.mu.Unlock()
		if n := captures(ss); n != 0 || l.swallow != nil {
			t.Fatalf("after forgetting all: captures = %d, swallow = %v; want 0 and nil", n, l.swallow)
		}
	})

	t.Run("a query never answered bounds the wait", func(t *testing.T) {
		defer func(d time.Duration) { captureWait = d }(captureWait)
		captureWait = 50 * time.Millisecond
		ss := newSession()
		ss.captures = 1 // counted, and nothing will ever answer it
		if ss.waitCaptures() {
			t.Fatal("waitCaptures = true with a query never answered")
		}
	})

	t.Run("an answered query ends the wait", func(t *testing.T) {
		ss, l := newSession(), newReplicaLink()
		if err := ss.injectCapture(l, captureReplay); err != nil {
			t.Fatal(err)
		}
		go ss.captured(l, captureReplay, 'I') // no row: counted down, token unchanged
		if !ss.waitCaptures() {
			t.Fatal("waitCaptures = false after the query was answered")
		}
	})
}
