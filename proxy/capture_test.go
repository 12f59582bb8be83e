package proxy

import (
	"bufio"
	"io"
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
		ss := &session{log: zap.NewNop()}
		ss.mu.tx = 'I'
		ss.initWaits()
		return ss
	}
	newReplicaLink := func() *link {
		return newLink(&pool.Conn{Addr: "replica:5432", W: bufio.NewWriter(io.Discard)}, nil, true, true)
	}
	captures := func(ss *session) int {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.mu.fresh.captures
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
		ss.mu.pending = 1
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
		ss.mu.pending = 1
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
		ss.mu.pending = 1
		ss.seenAfterLocked(l, 1)
		ss.mu.Unlock()
		if n := captures(ss); n != 0 {
			t.Fatalf("captures = %d after a replica read, want 0 (nothing is read after it)", n)
		}
		ss.readyForQuery(l, 'I')
		ss.mu.Lock()
		seen := len(ss.mu.fresh.seen)
		ss.mu.Unlock()
		if seen != 1 {
			t.Fatalf("%d unbounded replica reads after its ReadyForQuery, want 1", seen)
		}
	})

	t.Run("a query never answered bounds the wait", func(t *testing.T) {
		defer func(d time.Duration) { captureWait = d }(captureWait)
		captureWait = 50 * time.Millisecond
		ss := newSession()
		ss.mu.fresh.captures = 1 // counted, and nothing will ever answer it
		if ss.waitCaptures() {
			t.Fatal("waitCaptures = true with a query never answered")
		}
	})

	t.Run("an answered position ends the wait", func(t *testing.T) {
		ss := newSession()
		ss.mu.fresh.captures = 1
		// (A read's position: a write's would also tell the client.)
		go ss.applyPosition(captureRead, freshness.Token{Timeline: 1, LSN: 42}, true, false, 0, 1)
		if !ss.waitCaptures() {
			t.Fatal("waitCaptures = false after the position arrived")
		}
		if ss.mu.fresh.floor.LSN != 42 || ss.owesCapture() {
			t.Fatalf("floor %v, debt %v; want 0/2A and none", ss.mu.fresh.floor, ss.owesCapture())
		}
	})
}

// A write whose position on its primary was never read is unsure: only a
// position read on that timeline after it covers it, and an answer from a
// later primary (a failover in between) does not name it (issue 14: such a
// write was lost in a failover drill and never reported).
func TestUnsureWrite(t *testing.T) {
	newSession := func() (*session, *link) {
		ss := &session{log: zap.NewNop(), w: bufio.NewWriter(io.Discard), route: planRoute("session_write_lsn", 0)}
		ss.mu.tx = 'I'
		ss.initWaits()
		ss.mu.fresh.token = freshness.Token{Timeline: 1, LSN: 100}
		l := newLink(&pool.Conn{Addr: "primary:5432", W: bufio.NewWriter(io.Discard)}, nil, false, true)
		return ss, l
	}
	state := func(ss *session) (unsureWrite, freshness.Token) {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.mu.fresh.unsure, ss.mu.fresh.token
	}
	at := func(tli uint32, lsn uint64) freshness.Token {
		return freshness.Token{Timeline: tli, LSN: freshness.LSN(lsn)}
	}
	// counted sets the position queries in flight and the requests made.
	counted := func(ss *session, captures int, requests uint64) {
		ss.mu.Lock()
		ss.mu.fresh.captures, ss.mu.fresh.requests = captures, requests
		ss.mu.Unlock()
	}

	t.Run("its link fails before the position is read", func(t *testing.T) {
		ss, l := newSession()
		ss.mu.Lock()
		ss.positionAfterLocked(l, 1, captureWrite)
		ss.mu.Unlock()
		ss.linkFailed(l, io.EOF, false)
		if u, _ := state(ss); u.timeline != 1 || u.after != at(1, 100) {
			t.Fatalf("unsure = %+v, want timeline 1 after 1:0/64", u)
		}
	})

	t.Run("its position query fails; a later primary's answer does not cover it", func(t *testing.T) {
		ss, _ := newSession()
		counted(ss, 2, 7)
		ss.applyPosition(captureWrite, freshness.Token{}, false, false, 1, 7)
		u, _ := state(ss)
		if u.timeline != 1 || u.seq != 7 || !ss.owesCapture() {
			t.Fatalf("after a failed position: unsure %+v, debt %v; want timeline 1 seq 7 and a debt", u, ss.owesCapture())
		}
		// The debt paid by the new primary, on timeline 2.
		ss.applyPosition(captureWrite, at(2, 900), true, true, 1, 8)
		if u, tok := state(ss); u.timeline != 1 || tok != at(1, 100) {
			t.Fatalf("after timeline 2's position: unsure %+v, token %v; want still unsure on 1 and the token 1:0/64", u, tok)
		}
	})

	t.Run("a position on its timeline asked before it does not cover it; one asked after does", func(t *testing.T) {
		ss, _ := newSession()
		counted(ss, 3, 5)
		ss.mu.Lock()
		ss.markUnsureLocked(1)
		ss.mu.Unlock()
		ss.applyPosition(captureRead, at(1, 300), true, false, 0, 4)
		if u, _ := state(ss); u.timeline != 1 {
			t.Fatalf("an answer asked for before the write cleared it: %+v", u)
		}
		ss.applyPosition(captureRead, at(1, 400), true, false, 0, 6)
		if u, tok := state(ss); u.timeline != 0 || tok != at(1, 400) {
			t.Fatalf("after a later answer on timeline 1: unsure %+v, token %v; want none and the token raised to 1:0/190", u, tok)
		}
	})

	// Two COPY FROM STDIN in a row (differential sequence
	// 5889086208397092577): the second unit pays the first one's debt
	// (request 4), then runs its own COPY, a new debt. The answer to
	// request 4 may arrive after that COPY was written: it was read before
	// the second COPY committed, so it pays neither that debt nor covers
	// that unsure write. Before the fix it cleared the debt, and the next
	// read went to a replica on a token below the second COPY (a stale
	// read with a success status).
	t.Run("a debt and an unsure write arising after the paying request stay", func(t *testing.T) {
		ss, _ := newSession()
		counted(ss, 0, 3)
		ss.mu.Lock()
		ss.oweCaptureLocked() // the first COPY
		ss.markUnsureLocked(1)
		ss.mu.fresh.captures, ss.mu.fresh.requests = 1, 4 // payCaptureDebt's request
		ss.oweCaptureLocked()                             // the second COPY, written before the answer
		ss.markUnsureLocked(1)
		ss.mu.Unlock()
		ss.applyPosition(captureWrite, at(1, 300), true, true, 1, 4)
		u, tok := state(ss)
		if !ss.owesCapture() || u.timeline != 1 || u.seq != 4 || u.after != at(1, 300) || tok != at(1, 300) {
			t.Fatalf("after the answer asked for before the second COPY: debt %v, unsure %+v, token %v; want the debt, unsure on 1 from request 4 after 1:0/12C, token 1:0/12C",
				ss.owesCapture(), u, tok)
		}
		counted(ss, 1, 5)
		ss.applyPosition(captureWrite, at(1, 400), true, true, 1, 5)
		if u, tok := state(ss); ss.owesCapture() || u.timeline != 0 || tok != at(1, 400) {
			t.Fatalf("after an answer asked for after both: debt %v, unsure %+v, token %v; want none, none, 1:0/190", ss.owesCapture(), u, tok)
		}
	})

	t.Run("a write's position answered by a later primary makes it unsure", func(t *testing.T) {
		ss, _ := newSession()
		counted(ss, 1, 0)
		ss.applyPosition(captureWrite, at(2, 900), true, false, 1, 1)
		if u, tok := state(ss); u.timeline != 1 || tok != at(1, 100) {
			t.Fatalf("unsure %+v, token %v; want unsure on 1 and the token kept at 1:0/64", u, tok)
		}
	})

	t.Run("a later timeline's position keeps the token it replaces to be judged", func(t *testing.T) {
		ss, _ := newSession()
		counted(ss, 2, 0)
		ss.applyPosition(captureWrite, at(2, 900), true, false, 2, 1)
		ss.applyPosition(captureWrite, at(2, 950), true, false, 2, 2)
		ss.mu.Lock()
		prior, tok := ss.mu.fresh.prior, ss.mu.fresh.token
		ss.mu.Unlock()
		if prior != at(1, 100) || tok != at(2, 950) {
			t.Fatalf("prior %v, token %v; want 1:0/64 kept and the token 2:0/3B6", prior, tok)
		}
	})

	t.Run("told: lostWrite clears it and keeps the token", func(t *testing.T) {
		ss, _ := newSession()
		ss.mu.Lock()
		ss.markUnsureLocked(1)
		ss.mu.Unlock()
		ss.lostWrite(nil)
		if u, tok := state(ss); u.timeline != 0 || tok != at(1, 100) {
			t.Fatalf("unsure %+v, token %v; want none and 1:0/64", u, tok)
		}
	})

	t.Run("told: the token it kept falls back quietly when the history shows it lost", func(t *testing.T) {
		ss, _ := newSession()
		ss.mu.Lock()
		ss.markUnsureLocked(1)
		ss.mu.fresh.floor = at(1, 100)
		ss.mu.Unlock()
		ss.lostWrite(nil)
		ss.fallBackTold(at(2, 80))
		ss.mu.Lock()
		told, tok, floor := ss.mu.fresh.told, ss.mu.fresh.token, ss.mu.fresh.floor
		ss.mu.Unlock()
		if told.Timeline != 0 || tok != at(2, 80) || floor != at(2, 80) {
			t.Fatalf("told %v, token %v, floor %v; want none, 2:0/50, 2:0/50", told, tok, floor)
		}
	})

	t.Run("told: the token it kept is not judged again when a later timeline's position replaces it", func(t *testing.T) {
		// TestFailoverDrills (transaction pooling): a block's BEGIN ran
		// on the new primary, its INSERT was told KN002 (a write that
		// may have been lost), the BEGIN's position arrived after that,
		// and the old token it replaced, made a prior, failed the
		// block's ROLLBACK with a second KN002 for the same loss.
		ss, _ := newSession()
		ss.mu.Lock()
		ss.markUnsureLocked(1)
		ss.mu.fresh.captures, ss.mu.fresh.requests = 1, 1
		ss.mu.Unlock()
		ss.lostWrite(nil)
		ss.applyPosition(captureWrite, at(2, 900), true, false, 2, 1)
		ss.mu.Lock()
		prior, tok := ss.mu.fresh.prior, ss.mu.fresh.token
		ss.mu.Unlock()
		if prior.Timeline != 0 || tok != at(2, 900) {
			t.Fatalf("prior %v, token %v; want none (told) and the token 2:0/384", prior, tok)
		}
	})
}
