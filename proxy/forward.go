package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// maxBatchBytes bounds how much of an extended-protocol batch the proxy
// holds to classify it before choosing a server. A batch that grows past
// it (huge statements or parameters) goes to the primary unclassified and
// the rest streams through.
const maxBatchBytes = 1 << 20

// frontendLimit returns the body limit of a frontend message type in the
// relay phase, and false for a type a client may not send there. The limits
// are PostgreSQL's own.
func frontendLimit(t byte) (int, bool) {
	switch t {
	case 'Q', 'P', 'B', 'F', 'd':
		return wire.MaxLargeBodyLen, true
	case 'S', 'H', 'X', 'C', 'D', 'E', 'c', 'f':
		return wire.MaxSmallBodyLen, true
	}
	return 0, false
}

// classified is one statement string of a unit with its classification.
type classified struct {
	text string
	classify.Decision
}

// batch is the client messages of one unit, held until a Sync, Query,
// FunctionCall or Flush says where the unit ends.
type batch struct {
	buf  []byte
	msgs []batchMsg
	// limit, when not 0, is how many of msgs are written: the unit is
	// routed by all of them, and the rest follow later (localext.go).
	limit int
}

type batchMsg struct {
	typ        byte
	start, end int // body in buf
}

func (b *batch) add(typ byte, body []byte) {
	start := len(b.buf)
	b.buf = append(b.buf, body...)
	b.msgs = append(b.msgs, batchMsg{typ: typ, start: start, end: len(b.buf)})
}

// read appends the body of the message h from r, without a copy.
func (b *batch) read(r *bufio.Reader, h wire.Header) error {
	start := len(b.buf)
	b.buf = slices.Grow(b.buf, h.Len)[:start+h.Len]
	if _, err := io.ReadFull(r, b.buf[start:]); err != nil {
		b.buf = b.buf[:start]
		return err
	}
	b.msgs = append(b.msgs, batchMsg{typ: h.Type, start: start, end: len(b.buf)})
	return nil
}

func (b *batch) body(m batchMsg) []byte { return b.buf[m.start:m.end] }

func (b *batch) reset() {
	b.buf = b.buf[:0]
	b.msgs = b.msgs[:0]
	b.limit = 0
}

// serve relays the session until the client leaves, a server connection it
// depends on fails, or the session is killed; then it returns each server
// connection to its pool when provably idle, and closes it otherwise.
func (ss *session) serve() {
	ss.startIdleIO()
	if ss.mu.primary != nil {
		ss.attach(ss.mu.primary)
	}
	ss.finish(ss.relayContained())
}

// finish closes a session after its relay loop ended.
func (ss *session) finish(atBoundary bool, err error) {
	var ce *clientError
	switch {
	case errors.As(err, &ce):
		ss.log.Info("closing client connection", zap.Error(err))
		ss.kill(ce)
	case errors.Is(err, errServerGone):
		// A server connection lost under a write; its reader has said
		// so already unless the session went on after it
		// (keepAfterLoss) and the write came just after.
		ss.log.Info("a server connection was lost under a write: the session ends")
		ss.kill(&clientError{severity: "FATAL", code: codeConnectionFailure, message: "pg-kinetic: lost the connection to the server"})
	}
	ss.mu.Lock()
	var links []*link
	if ss.mu.primary != nil {
		links = append(links, ss.mu.primary)
	}
	for _, l := range ss.mu.replicas {
		links = append(links, l)
	}
	ss.mu.Unlock()
	for _, l := range links {
		ss.detach(l, atBoundary)
	}
	ss.kill(nil)
	ss.mu.Lock()
	ss.holdFallbackLocked(nil)
	ss.mu.Unlock()
}

// clientToServer reads client messages, groups them into units, routes
// each unit and writes it to its server. atBoundary is false when it
// stopped inside a message, which leaves that server connection unusable.
func (ss *session) clientToServer() (atBoundary bool, err error) {
	var b batch
	for {
		if err := ss.awaitClient(); err != nil {
			return true, err
		}
		h, err := ss.readClientHeader()
		if err != nil {
			return true, err
		}
		if h.Type == 'X' || ss.isKilled() {
			return true, nil
		}
		if ss.flow.state == skipping {
			synced, boundary, err := ss.skipMessage(h)
			if err != nil {
				return boundary, err
			}
			if synced {
				ss.flow.close()
			}
			continue
		}

		if (h.Type == 'Q' || h.Type == 'F') && len(b.msgs) > 0 {
			// A Query or FunctionCall after extended messages with no
			// Sync: the messages before it are routed as an open unit,
			// and it follows them to their server as part of it
			// (streamedCall).
			if err := ss.openBefore(&b); err != nil {
				return true, err
			}
			if ss.flow.state == skipping {
				if err := wire.Discard(ss.r, h.Len); err != nil {
					return false, errClientGone{err}
				}
				continue
			}
		}

		// Messages of a unit already routed (after a Flush, or an
		// oversized batch), and COPY data, follow their unit's server.
		if ss.flow.state == following || len(b.msgs) == 0 && (h.Type == 'd' || h.Type == 'c' || h.Type == 'f') {
			if err := ss.followStream(h, &b); err != nil {
				return false, err
			}
			continue
		}

		if len(b.buf)+h.Len > maxBatchBytes {
			if stop, atBoundary, err := ss.routeOversized(&b, h); stop {
				return atBoundary, err
			}
			continue
		}
		if err := b.read(ss.r, h); err != nil {
			return false, errClientGone{err}
		}
		if h.Type == 'H' && len(b.msgs) == 1 {
			// A Flush with nothing before it since the last Sync (libpq's
			// pipeline mode ends a pipeline with Sync, Flush): every
			// answer owed is already on its way, so it asks the server
			// for nothing. It is not a unit; routed as one it would open
			// on some server, and the next statement would follow it
			// there unclassified.
			b.reset()
			continue
		}
		if h.Type != 'S' && h.Type != 'H' && h.Type != 'Q' && h.Type != 'F' && ss.r.Buffered() == 0 {
			// The client paused inside the batch.
			fixed := ss.serverFixed()
			if ss.localPlan(&b) == nil {
				if fixed {
					// Its server is already known (routing off, an
					// open transaction, a pinned session): what it sent
					// goes to the server now, as directly (a
					// statement_timeout between Parse and Describe
					// fires there), and the rest of the unit follows
					// as it arrives.
					l, err := ss.routeBatch(&b, true, false)
					b.reset()
					if err != nil {
						return true, err
					}
					ss.flow.open(l, l == nil) // nil: rejected, the server would skip to Sync too
					continue
				}
				if ss.clientStalled() {
					// Still to be routed, and its Sync has not come
					// within stallGrace: what it sent is routed now, as
					// at a Flush, and the rest of the unit follows it
					// as it arrives (a write moving it off a replica:
					// followStream), so the server's statement_timeout
					// runs from about when it would directly.
					if err := ss.routeUnit(&b, true); err != nil {
						return true, err
					}
					continue
				}
			}
		}
		if err := ss.endBatch(&b, h.Type); err != nil {
			return true, err
		}
	}
}

// stallGrace is how long the client may go quiet inside a batch before
// what it sent is routed without the rest (clientStalled): long against
// the gaps between the segments of one write, short against a
// statement_timeout.
const stallGrace = 5 * time.Millisecond

// clientStalled reports whether the client sends nothing more within
// stallGrace, its read buffer being empty. Session goroutine only; not
// while a held read may interrupt the wait for the client (retry.go).
func (ss *session) clientStalled() bool {
	if ss.held.active || ss.conn.SetReadDeadline(time.Now().Add(stallGrace)) != nil {
		return false
	}
	_, err := ss.r.Peek(1)
	ss.conn.SetReadDeadline(time.Time{})
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// openBefore routes the extended messages read so far, with no Sync after
// them, as an open unit: a Query or FunctionCall follows them to their
// server as part of it (streamedCall).
func (ss *session) openBefore(b *batch) error {
	l, skipRest, err := ss.openUnit(b)
	b.reset()
	if err != nil {
		return err
	}
	ss.flow.open(l, skipRest)
	return nil
}

// endBatch routes the batch when its last message, of type typ, ends a
// unit (Sync, Query, FunctionCall) or asks for its answers (Flush); any
// other message leaves the batch to grow. SHOW/SET/RESET pg_kinetic.* in
// the extended protocol is answered by the proxy (runWithLocal).
func (ss *session) endBatch(b *batch, typ byte) error {
	switch typ {
	case 'S', 'H':
		if plan := ss.localPlan(b); plan != nil {
			open, skipRest, err := ss.runWithLocal(b, plan, nil)
			b.reset()
			if err != nil {
				return err
			}
			ss.flow.open(open, skipRest)
			return nil
		}
		return ss.routeUnit(b, typ == 'H')
	case 'Q', 'F':
		return ss.routeUnit(b, false)
	}
	return nil
}

// readClientHeader reads the next client message's header and checks it:
// a known type, a length within its limit, no body on a Sync or Flush.
func (ss *session) readClientHeader() (wire.Header, error) {
	h, err := wire.ReadHeader(ss.r)
	if err != nil {
		if errors.Is(err, wire.ErrBadLength) {
			return h, protocolViolation("invalid message length")
		}
		return h, errClientGone{err}
	}
	ss.noteClientMessage() // timeouts.go
	failpoint(&failpoints.relay, h.Type, "relay")
	limit, ok := frontendLimit(h.Type)
	if !ok {
		return h, protocolViolation("invalid frontend message type %d", h.Type)
	}
	if h.Len > limit {
		return h, protocolViolation("invalid message length")
	}
	if (h.Type == 'S' || h.Type == 'H') && h.Len > 0 {
		// PostgreSQL fails such a Sync or Flush with an ERROR and, for a
		// Flush, skips to the next Sync; the proxy, which cannot tell
		// that error from an unsolicited one, ends the session instead
		// (docs/behaviour.md, Limits).
		return h, protocolViolation("invalid message format: %s with a body", map[byte]string{'S': "Sync", 'H': "Flush"}[h.Type])
	}
	return h, nil
}

// routeOversized routes a unit too big to hold (the batch b and the
// message h, whose body is still unread) as unclassifiable: b now, the
// rest of the unit streamed after it. stop ends clientToServer with
// atBoundary and err.
func (ss *session) routeOversized(b *batch, h wire.Header) (stop, atBoundary bool, err error) {
	l, err := ss.routeBatch(b, true, true)
	if err != nil || l == nil {
		return true, true, err
	}
	b.reset()
	ss.flow.open(l, false)
	if err := ss.forwardStreamed(l, h); err != nil {
		return true, false, err
	}
	if err := ss.endStream(l, h.Type); err != nil {
		return true, false, err
	}
	return false, false, nil
}

// routeUnit routes and writes a batch ended by Sync, Query or
// FunctionCall, or by Flush (open: the unit stays open on its server).
func (ss *session) routeUnit(b *batch, open bool) error {
	var replay *replayLog
	if open {
		// The log of what the batch binds, should it open on a replica,
		// is taken before it is written: the statements its Binds use as
		// they are then, not after a Close of one later in the batch
		// (whose portal outlives it; a Parse of the name after the Flush
		// must not pass for the statement the portal was bound from:
		// differential 18422407613234683055).
		ss.applyClientUndo()
		replay = newReplayLog(ss.client.unnamed.parse)
		replay.txOf, replay.stmtText, replay.stmtParse = ss.txOf, ss.preparedText, ss.preparedParse
		for _, m := range b.msgs {
			replay.add(m.typ, b.body(m))
		}
	}
	ss.mayDefer = !open // the session goroutine waits for the client next (retry.go)
	l, err := ss.routeBatch(b, open, false)
	ss.mayDefer = false
	if err != nil {
		return err
	}
	ss.flow.replay, ss.flow.replayDue = nil, nil
	if l != nil && open && l.replica {
		ss.flow.replay = replay
	}
	b.reset()
	if open {
		ss.flow.open(l, l == nil) // nil: rejected, the server would skip to Sync too
	}
	return nil
}

// skipMessage drops a message of a unit the proxy failed (a rejected open
// batch) up to its Sync, which it answers: the open unit's server, which
// skips to Sync after the error the proxy made it fail with, answers it;
// otherwise the proxy does. synced: this was the Sync. An error ends the
// session, at a message boundary when boundary.
func (ss *session) skipMessage(h wire.Header) (synced, boundary bool, err error) {
	if err := wire.Discard(ss.r, h.Len); err != nil {
		return false, false, errClientGone{err}
	}
	if h.Type == 'S' {
		if l := ss.flow.l; l != nil {
			// The open unit's server skips to Sync too, after the
			// error the proxy made it fail with: it answers.
			var sync batch
			sync.add('S', nil)
			if err := ss.write(l, &sync); err != nil {
				return true, false, err
			}
			if err := ss.endStream(l, 'S'); err != nil {
				return true, false, err
			}
			return true, false, nil
		}
		if err := ss.send(&pgproto3.ReadyForQuery{TxStatus: ss.txStatus()}); err != nil {
			return true, true, errClientGone{err}
		}
	}
	return h.Type == 'S', false, nil
}

// followStream forwards a message of a unit already routed (after a
// Flush, or an oversized batch), or COPY data, to that unit's server.
// A message of the open unit the proxy answers itself is answered
// (skip: the unit failed, drop the rest up to Sync); a write after a
// replica's part moves the rest of the unit, which b then collects.
func (ss *session) followStream(h wire.Header, b *batch) error {
	l := ss.flow.l
	if l == nil {
		l = ss.curLink()
	}
	if ss.flow.state == following && isLocalCandidate(h) {
		// A message of an open unit the proxy may answer itself.
		var one batch
		if err := one.read(ss.r, h); err != nil {
			return errClientGone{err}
		}
		if plan := ss.localPlan(&one); plan != nil {
			open, skipRest, err := ss.runWithLocal(&one, plan, l)
			if err != nil {
				return err
			}
			ss.flow.open(open, skipRest)
			return nil
		}
		if l.replica && ss.leavesReplica(&one) {
			// A write (or a statement for the primary) after a read
			// that a Flush sent to a replica: the replica's part
			// ends there, and the rest of the unit is routed anew
			// (with the part's open portals: replay.go).
			moved, err := ss.endReplicaStream(l)
			if err != nil {
				return err
			}
			if moved {
				ss.flow.replayDue, ss.flow.replay = ss.flow.replay, nil
				b.add(one.msgs[0].typ, one.body(one.msgs[0]))
				return nil
			}
		}
		if err := ss.forwardOne(l, &one); err != nil {
			return err
		}
		return nil
	}
	if ss.flow.state == following && !l.replica && (h.Type == 'B' || h.Type == 'Q' || h.Type == 'F') {
		// Not read before it is forwarded (large, or a call
		// that ends the unit): it may write, or end the block.
		ss.flow.unit.read, ss.flow.unit.txEnd = false, true
	}
	if ss.flow.state == following && (h.Type == 'Q' || h.Type == 'F') {
		if run, err := ss.streamedCall(l); err != nil {
			return err
		} else if !run {
			if err := wire.Discard(ss.r, h.Len); err != nil {
				return errClientGone{err}
			}
			return nil
		}
	}
	if ss.flow.state != following && l != nil && !ss.claimLink(l) {
		// (COPY data: the copy's connection, claimed while the
		// message is written, so it cannot go back to the pool
		// under the write; gone: the data is dropped.)
		l = nil
	}
	err := ss.forwardStreamed(l, h)
	if ss.flow.state != following {
		ss.unclaim(l)
	}
	if err != nil {
		return err
	}
	if err := ss.endStream(l, h.Type); err != nil {
		return err
	}
	return nil
}

// openUnit routes b, extended messages a Query or FunctionCall follows
// before any Sync, as an open unit (the messages that follow go to its
// server). l is nil when there is no server part; skip is true when the
// unit failed before reaching a server (rejected, or a proxy-answered
// message's error): the server would skip to Sync, and so does the proxy.
func (ss *session) openUnit(b *batch) (l *link, skip bool, err error) {
	if plan := ss.localPlan(b); plan != nil {
		return ss.runWithLocal(b, plan, nil)
	}
	l, err = ss.routeBatch(b, true, false)
	if err != nil {
		return nil, false, err
	}
	return l, l == nil, nil
}

// streamedCall decides whether a Query or FunctionCall that follows an
// open unit's extended messages is written to l. PostgreSQL skips it when
// one of those messages failed (it skips everything up to Sync, and no
// ReadyForQuery answers what it skipped); the proxy cannot tell from the
// bytes alone, and counting an answer that never comes would leave the
// session waiting for it. So the messages before it are answered first (a
// barrier, one round trip for this rare pattern): run is false when the
// server failed them, and the Query is then dropped as the server would
// drop it.
func (ss *session) streamedCall(l *link) (run bool, err error) {
	if l == nil {
		return true, nil
	}
	ss.mu.Lock()
	pendingExtended := l.sent > 0 || l.failed == l.batches+1
	ss.mu.Unlock()
	if !pendingExtended {
		return true, nil
	}
	return ss.barrier(l)
}

// serverFixed reports whether the next unit's server is known before its
// messages are: every unit goes to the primary (routing off), or a transaction block is open on the session's current
// server, or the session is pinned to its primary connection.
func (ss *session) serverFixed() bool {
	if ss.deferred != "" {
		return false // a BEGIN the proxy answered: the first statement decides
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case ss.routingMode() == config.RoutingOff:
		return true
	case ss.mu.tx != 'I' && ss.mu.cur != nil && !ss.mu.cur.dead && !ss.mu.cur.released:
		return true
	case ss.mu.pinned != "" && ss.mu.primary != nil && !ss.mu.primary.dead:
		return true
	}
	return false
}

// isLocalCandidate reports whether a message of an open unit may be one
// the proxy answers (localext.go): a small Parse, Bind, Describe, Execute
// or Close.
func isLocalCandidate(h wire.Header) bool {
	switch h.Type {
	case 'P', 'B', 'D', 'E', 'C':
		return h.Len <= wire.MaxSmallBodyLen
	}
	return false
}

// noteStreamed merges into the facts of the unit open on the primary
// (streamUnit, as routed at its Flush) what a Bind of its rest runs: a
// write, or a transaction's end, after a part that only read. The
// position read when the unit's Sync comes (afterUnit) depends on them:
// a COMMIT there ends the block its earlier units wrote in, and without
// a position read after it the session's next read could go to a
// replica that has not replayed the commit.
func (ss *session) noteStreamed(u unitInfo) {
	if !u.read {
		ss.flow.unit.read = false
	}
	if u.txEnd {
		ss.flow.unit.txEnd = true
	}
	if u.lastTx != 0 {
		ss.flow.unit.lastTx = u.lastTx
	}
}

// endStream closes an open unit (one routed at a Flush, or oversized) when
// its Sync or Query has been forwarded: the WAL position query that keeps
// the token current follows it, as for any other unit.
func (ss *session) endStream(l *link, typ byte) error {
	if ss.flow.l == nil || typ != 'S' && typ != 'Q' {
		return nil
	}
	ss.flow.close()
	ss.flow.replay = nil
	defer ss.unclaim(l) // claimed by routeBatch for the whole open unit
	u := ss.flow.unit
	u.mayWAL = true // (its later parts were not all classified)
	if err := ss.afterUnit(l, u, false); err != nil {
		return err
	}
	if err := l.conn.W.Flush(); err != nil {
		return errServerGone
	}
	return nil
}

// txStatus is the transaction status to report in a proxy-made
// ReadyForQuery.
func (ss *session) txStatus() byte {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mu.tx
}

func (ss *session) curLink() *link {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.mu.cur != nil {
		return ss.mu.cur
	}
	return ss.mu.primary
}

// flushHeld sends what the client's earlier messages left in the write
// buffer of the session's server connection (not flushed while more of
// the client's messages were buffered). The unit being routed may wait
// before it is written (for the session's positions, a connection), and
// the server must not wait meanwhile for what it was already sent: a COPY
// FROM STDIN's data followed by a Sync stalled until the position wait
// gave up (TestCopyAfterStreamedMessagesThenLeave).
//
// Only the connection those writes went to (ss.unflushed) is flushed: it
// cannot have gone back to its pool meanwhile (the server has not seen the
// rest of the unit, so it cannot have answered it), where ss.mu.cur, in
// transaction pooling, may already be another session's.
func (ss *session) flushHeld() error {
	l := ss.unflushed
	ss.unflushed = nil
	if l == nil {
		return nil
	}
	ss.mu.Lock()
	ok := !l.released && !l.dead
	ss.mu.Unlock()
	if !ok || l.conn.W.Buffered() == 0 {
		return nil
	}
	if err := l.conn.W.Flush(); err != nil {
		return errServerGone
	}
	return nil
}

// forwardStreamed relays one message of an already routed unit, reading
// small bodies for statement bookkeeping and streaming large ones. With no
// server (copy messages outside a copy in transaction pooling) the message
// is dropped, as PostgreSQL ignores copy messages outside copy mode.
func (ss *session) forwardStreamed(l *link, h wire.Header) error {
	if l == nil {
		if err := wire.Discard(ss.r, h.Len); err != nil {
			return errClientGone{err}
		}
		return nil
	}
	if h.Len <= maxBatchBytes && h.Type != 'd' {
		body, err := wire.ReadBody(ss.r, h.Len, nil)
		if err != nil {
			return errClientGone{err}
		}
		var b batch
		b.add(h.Type, body)
		return ss.forwardOne(l, &b)
	}
	ss.count(l, h.Type)
	if h.Type == 'D' {
		ss.mu.Lock()
		l.rawDescribe = l.batches + 1 // (untracked: see learnTypes)
		ss.mu.Unlock()
	}
	if err := wire.WriteHeader(l.conn.W, h); err != nil {
		return errServerGone
	}
	if err := wire.Copy(l.conn.W, ss.r, h.Len); err != nil {
		var we *wire.WriteError
		if errors.As(err, &we) {
			return errServerGone
		}
		return errClientGone{err}
	}
	if ss.r.Buffered() > 0 {
		ss.unflushed = l // (flushHeld)
		return nil
	}
	if ss.unflushed == l {
		ss.unflushed = nil
	}
	if err := l.conn.W.Flush(); err != nil {
		return errServerGone
	}
	return nil
}

// forwardOne writes one message of an open unit (b holds just it) to l,
// noting its session effects, and flushes unless more of the client's
// messages are already buffered.
func (ss *session) forwardOne(l *link, b *batch) error {
	ss.applyClientUndo()
	typ := b.msgs[0].typ
	if l.replica {
		ss.flow.replay.add(typ, b.body(b.msgs[0]))
	}
	if ss.needsStatements(l, b) {
		// A statement is to be prepared on l in the middle of the
		// client's batch: what the client sent before is answered first,
		// so the dropped ParseComplete is the proxy's.
		if ok, err := ss.barrier(l); err != nil {
			return err
		} else if !ok {
			// The server skips to Sync after an error: so does this.
			return ss.bufferRaw(l, b)
		}
	}
	if typ == 'P' || typ == 'B' {
		// Its session effects (SET, PREPARE, pinning) count as a routed
		// unit's do.
		u, ds := ss.analyze(b, false)
		if typ == 'B' {
			ss.discardNow(l, ds) // (the Bind of its Execute)
			if !l.replica {
				ss.noteStreamed(u)
			}
		}
		ss.recordEffects(ds)
		ss.noteCancels(l, u.cancels)
		ss.noteResets(l, ds)
		ss.noteSQLPrepares(l, ds)
		if q := ss.restoreQuery(ds); q != "" {
			// Its RESET's startup values are set again when the open
			// unit ends (endStream's afterUnit).
			if ss.flow.unit.restore != "" {
				q = ss.flow.unit.restore + "; " + q
			}
			ss.flow.unit.restore = q
		}
	}
	if err := ss.buffer(l, b); err != nil {
		return err
	}
	if ss.r.Buffered() > 0 && typ != 'H' && typ != 'S' {
		ss.unflushed = l // (flushHeld)
		return nil       // more of the client's messages follow in this write
	}
	if ss.unflushed == l {
		ss.unflushed = nil
	}
	if err := l.conn.W.Flush(); err != nil {
		return errServerGone
	}
	return nil
}

// replicaTxEndSplit, for a batch that continues a transaction block open
// on a replica, is the index right after the Execute that ends the block
// (COMMIT, ROLLBACK) when a later message of the batch may not run on the
// replica (a write): the batch is routed in two parts (routeSplit). 0 if
// there is no such point. A session pinned meanwhile splits too: a pinned
// session's units go to the primary once the block ends (decide), and a
// statement that pinned it in a read-only block may well have failed
// there (CREATE TEMP TABLE: 25006).
func (ss *session) replicaTxEndSplit(b *batch) int {
	if b.limit > 0 || len(b.msgs) < 2 || !ss.freshnessOn() {
		return 0
	}
	ss.mu.Lock()
	onReplica := ss.mu.tx != 'I' && ss.mu.cur != nil && ss.mu.cur.replica && !ss.mu.cur.dead
	ss.mu.Unlock()
	if !onReplica {
		return 0
	}
	texts := map[string]string{} // statement name -> text, this batch's Parses
	text := func(name string) (string, bool) {
		if q, ok := texts[name]; ok {
			return q, true
		}
		if name == "" {
			return ss.client.unnamed.query, ss.client.unnamed.parse != ""
		}
		st, ok := ss.client.stmts[name]
		return st.query, ok
	}
	endsTx := func(q string) bool {
		d := ss.classifier.Classify(q)
		return len(d.Statements) == 1 && d.Statements[0].Tx == classify.TxEnd && !d.Statements[0].Chain
	}
	bound, split := false, 0
	for i, m := range b.msgs {
		body := b.body(m)
		switch m.typ {
		case 'P':
			name, q, err := parseNames(body)
			if err != nil {
				return 0
			}
			if split > 0 {
				var one batch
				one.add(m.typ, body)
				if u, _ := ss.analyze(&one, false); !u.read || u.hintPrim {
					return split
				}
			}
			texts[name] = q
		case 'B':
			name, err := bindStatement(body)
			if err != nil {
				return 0
			}
			q, ok := text(name)
			if split > 0 && (!ok || ss.classifier.Classify(q).Kind != classify.KindRead) {
				return split
			}
			bound = ok && split == 0 && endsTx(q)
		case 'E':
			if bound && split == 0 {
				split = i + 1
			}
			bound = false
		}
	}
	return 0
}

// routeSplit routes b as two units: its first k messages on the replica
// whose transaction block they end, the rest anew (endReplicaStream).
func (ss *session) routeSplit(b *batch, k int, open, oversized bool) (*link, error) {
	front := batch{buf: b.buf, msgs: b.msgs[:k]}
	rest := batch{buf: b.buf, msgs: b.msgs[k:]}
	l, err := ss.routeBatch(&front, true, false)
	if err != nil || l == nil {
		return l, err
	}
	ss.flow.open(l, false)
	moved, err := ss.endReplicaStream(l)
	if err != nil {
		return nil, err
	}
	if !moved {
		// The replica failed the batch meanwhile: it skips the rest to
		// Sync, as a server would.
		if err := ss.bufferRaw(l, &rest); err != nil {
			return nil, err
		}
		if l.conn.W.Flush() != nil {
			return nil, errServerGone
		}
		if !open {
			ss.flow.close()
			ss.unclaim(l)
		}
		return l, nil
	}
	return ss.routeBatch(&rest, open, oversized)
}

// leavesReplica reports whether a message of a unit open on a replica,
// outside a transaction block, may not run there: a Parse or Bind of a
// statement that is not a read (or asks for the primary).
func (ss *session) leavesReplica(b *batch) bool {
	typ := b.msgs[0].typ
	// The open unit's own BEGIN or COMMIT/ROLLBACK decides whether a
	// transaction block is open on the replica, though no ReadyForQuery
	// said so yet.
	inTx := ss.txStatus() != 'I'
	switch ss.flow.unit.lastTx {
	case 'b':
		inTx = true
	case 'e':
		inTx = false
	}
	if typ != 'B' {
		// A Parse runs nothing (a write's too: a standby parses it): it
		// stays with the unit's portals, and is Parsed again wherever its
		// Bind lands.
		return false
	}
	u, _ := ss.analyze(b, false)
	if inTx {
		if u.lastTx != 0 {
			ss.flow.unit.lastTx = u.lastTx
		}
		return false
	}
	leaves := !u.read || u.hintPrim
	if !leaves && u.lastTx != 0 {
		ss.flow.unit.lastTx = u.lastTx // BEGIN READ ONLY, COMMIT: the unit stays there
	}
	return leaves
}

// endReplicaStream ends the replica's part of an open unit: once the
// replica has answered what it was sent, a Sync of the proxy's own ends
// its implicit transaction (its answer is dropped) and the unit's claim.
// moved is false when the replica failed the batch meanwhile: it skips to
// the client's Sync, and so does the rest of the unit, there.
func (ss *session) endReplicaStream(l *link) (moved bool, err error) {
	ok, err := ss.barrier(l)
	if err != nil || !ok {
		return false, err
	}
	if err := ss.inject(l, &pgproto3.Sync{}, 'Z'); err != nil {
		return false, errServerGone
	}
	ss.mu.Lock()
	l.swallow[len(l.swallow)-1].keepParams = true // (not flushed yet: unanswered)
	synced := l.batches                           // l.rfqs reaches it with the Sync's answer
	ss.mu.unsynced = false
	ss.mu.tx = 'I' // (a block the unit ended: the Sync leaves the replica idle)
	if len(ss.mu.effects) > 0 {
		// The Sync committed the replica's part, its SETs too, which the
		// rest of the unit may still roll back for the client: the
		// replica's settings are replayed before its next use. The
		// server the rest runs on lacks them (unitEnded).
		l.st.settings = settingsUnknown
		ss.mu.movedEffects = true
		ss.mu.heldCommitted = committedLast(ss.mu.effects, ss.mu.unitSeq)
	} else if ss.mu.commitSeq == ss.mu.unitSeq {
		// A COMMIT of the part settled its SETs already (committedLocked
		// took them off effects): kept, whatever the rest does
		// (differential 11978386151710806781).
		ss.mu.heldCommitted = true
	}
	ss.mu.Unlock()
	ss.flow.close()
	defer ss.unclaim(l)
	u := ss.flow.unit
	u.mayWAL = true // (its later parts were not all classified)
	if err := ss.afterUnit(l, u, false); err != nil {
		return false, err
	}
	if err := l.conn.W.Flush(); err != nil {
		return false, errServerGone
	}
	// The Sync's answer comes first (one round trip, on this rare path):
	// the ParameterStatus it carries reaches the client before the rest
	// of the unit's, from another server, is answered.
	ss.awaitReadyForQuery(l, synced)
	return true, nil
}

// committedLast reports whether the session's SETs in unit seq are all
// followed by a COMMIT or a ROLLBACK of the unit (the markers effects
// record): a later failure of the unit leaves the settings as that end
// made them, the SETs kept or undone. (A ROLLBACK of a block whose SETs
// came in earlier units reverts them there: the ParameterStatus the
// server then sends is the client's whatever follows; differential
// 2726224269824871064.)
func committedLast(effects []effect, seq uint64) bool {
	committed := false
	for _, e := range effects {
		switch {
		case e.seq != seq, e.savepoint.Op != 0:
		case e.commit, e.rollback:
			committed = true
		default:
			committed = false // a SET after the last COMMIT or ROLLBACK
		}
	}
	return committed
}

// noteSQLPrepares records on l the SQL PREPAREs of a message of an open
// unit (what prepareLink's ensureSQLPrepared records for a routed unit):
// the server will hold them, and another client sharing the connection
// must not collide with them.
func (ss *session) noteSQLPrepares(l *link, ds []*classified) {
	for _, d := range ds {
		if len(d.Statements) == 1 && d.Statements[0].Effect == classify.EffectPrepare {
			l.st.sqlPrepared[d.Statements[0].PrepareName] = strings.TrimSpace(d.text)
		}
	}
}

// bufferRaw writes a batch's messages to l as they are, with no statement
// bookkeeping (the server skips them), and flushes.
func (ss *session) bufferRaw(l *link, b *batch) error {
	for _, m := range b.msgs {
		body := b.body(m)
		ss.count(l, m.typ)
		if err := wire.WriteHeader(l.conn.W, wire.Header{Type: m.typ, Len: len(body)}); err != nil {
			return errServerGone
		}
		if _, err := l.conn.W.Write(body); err != nil {
			return errServerGone
		}
	}
	if err := l.conn.W.Flush(); err != nil {
		return errServerGone
	}
	return nil
}

// count updates the session's response accounting for a client message
// written to l.
func (ss *session) count(l *link, typ byte) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if typ == 'Q' || typ == 'F' || typ == 'S' {
		if !l.replica && !ss.mu.writingKeepable {
			ss.mu.unkeepable = true // (keepAfterLoss)
		}
		ss.mu.fates = append(ss.mu.fates, ss.mu.writingFate)
	}
	switch typ {
	case 'Q', 'F':
		ss.inj.restOpen = false
		ss.mu.pending++
		ss.noteUnitSentLocked() // timeouts.go
		ss.mu.unitSeq++
		ss.mu.unitRuns = true
		l.batches++
		l.sent = 0
		l.executed = false
	case 'S':
		ss.inj.restOpen = false
		ss.mu.pending++
		ss.noteUnitSentLocked()
		ss.mu.unitSeq++
		ss.mu.unitRuns, ss.mu.openRuns = ss.mu.openRuns, false
		l.batches++
		l.sent = 0
		l.executed = false
		l.closes = 0
		ss.mu.unsynced = false
	case 'C':
		l.closes++
		l.sent++
		ss.mu.unsynced = true
	case 'P', 'B', 'E', 'D':
		l.sent++
		ss.mu.unsynced = true
		if typ == 'E' {
			l.executed = true
			ss.mu.openRuns = true
		}
	}
	ss.mu.cur = l
	if l.parked {
		ss.readers.Broadcast() // its reader waits at an idle point: more is coming
	}
}

// write forwards a batch's messages to l, preceded by whatever l needs to
// run them (settings, statements, a deferred BEGIN), and flushes.
func (ss *session) write(l *link, b *batch) error {
	if err := ss.buffer(l, b); err != nil {
		return err
	}
	if err := l.conn.W.Flush(); err != nil {
		return errServerGone
	}
	return nil
}

// buffer is write without the flush, so what follows the unit (a WAL
// position query) leaves in the same syscall.
func (ss *session) buffer(l *link, b *batch) error {
	ss.takeUndo(l)
	// Behind pipelined batches, whether this one runs in a failed
	// transaction is known only once they are answered: a batch that
	// needs statements prepared waits for them first (settleBatches), so
	// that in a failed transaction those go right before the message that
	// needs them (below), not ahead of the batch, where the server fails
	// them (25P02) in place of the answer to the batch's first message
	// (differential 15569880947103983533, 2024141487199610067).
	ss.mu.Lock()
	behind := l.rfqs < l.batches && ss.mu.tx != 'E'
	ss.mu.Unlock()
	if behind && ss.needsStatements(l, b) {
		if _, err := ss.settleBatches(l); err != nil {
			return err
		}
	}
	front, late := ss.frontOf(b)
	ss.mu.Lock()
	ss.inj.midBatch = ss.mu.unsynced // the client's batch is already under way on a server
	ss.mu.Unlock()
	defer func() { ss.inj.midBatch = false }()
	if err := ss.injectStatements(l, &front); err != nil {
		return errServerGone
	}
	msgs := b.msgs
	if b.limit > 0 {
		msgs = msgs[:b.limit]
	}
	for i, m := range msgs {
		body := b.body(m)
		if late >= 0 && i >= len(front.msgs) && (m.typ == 'B' || m.typ == 'D' || m.typ == 'P') {
			if failed, err := ss.prepareLate(l, m.typ, body); err != nil {
				return err
			} else if failed {
				// The server failed the batch: it skips the rest.
				rest := batch{buf: b.buf, msgs: msgs[i:]}
				return ss.bufferRaw(l, &rest)
			}
		}
		if m.typ == 'B' {
			body = ss.bindToWrite(l, body)
		}
		learn := m.typ == 'P' && ss.learnTypes(l, body)
		if err := ss.trackFrontend(l, m.typ, body); err != nil {
			return errServerGone
		}
		ss.count(l, m.typ)
		if err := wire.WriteHeader(l.conn.W, wire.Header{Type: m.typ, Len: len(body)}); err != nil {
			return errServerGone
		}
		if _, err := l.conn.W.Write(body); err != nil {
			return errServerGone
		}
		if learn {
			name, _ := parseName(body)
			if err := ss.injectLearnTypes(l, name, body); err != nil {
				return errServerGone
			}
		}
	}
	return nil
}

// frontOf splits off the part of b whose statements are prepared ahead of
// it (front); those of its messages from late on are prepared where they
// are needed (prepareLate; late -1: none). Ahead, except after a
// transaction start with options: a Parse of the proxy's before it would
// take the transaction's snapshot first (25001 "SET TRANSACTION ISOLATION
// LEVEL must be called before any query"), so those are prepared after
// the server answered what came before (a barrier).
func (ss *session) frontOf(b *batch) (front batch, late int) {
	late = ss.txControlIndex(b)
	failedTx := ss.txStatus() == 'E'
	if failedTx {
		// In a failed transaction a statement of the proxy's fails (25P02)
		// where the client's own message would have: it goes right before
		// that message, once the server answered those before it (a Close
		// still succeeds there), and its error is the client's.
		late = -1
		if len(b.msgs) > 0 {
			late = 0
		}
	}
	front = *b
	if late >= 0 {
		front.msgs = b.msgs[:late+1]
	}
	if late == 0 && failedTx {
		front.msgs = nil
	}
	return front, late
}

// prepareLate prepares on l, right before the client's message (typ,
// body), the statement it needs, once the server answered what was
// written before it. failed: the server failed the batch before, and
// skips the rest.
func (ss *session) prepareLate(l *link, typ byte, body []byte) (failed bool, err error) {
	var one batch
	one.add(typ, body)
	if name, ok := stmtRef(typ, body); ok && typ != 'P' {
		// A statement of the proxy's still in flight for that name (a
		// re-Parse in a failed transaction) is answered first: the
		// record is then what the server holds. (Only earlier batches
		// count, already flushed.)
		ss.settleOps(l, name)
	}
	if !ss.needsStatements(l, &one) {
		return false, nil
	}
	if err := l.conn.W.Flush(); err != nil {
		return false, errServerGone
	}
	ok, err := ss.barrier(l)
	if err != nil {
		return false, err
	}
	if !ok {
		return true, nil
	}
	ss.inj.midBatch = true
	if err := ss.injectStatements(l, &one); err != nil {
		return false, errServerGone
	}
	return false, nil
}

// txControlIndex is the index of b's first Parse or Bind of a
// transaction start or SET TRANSACTION / SET SESSION CHARACTERISTICS, -1
// if none.
func (ss *session) txControlIndex(b *batch) int {
	for i, m := range b.msgs {
		switch m.typ {
		case 'P':
			body := b.body(m)
			n := bytes.IndexByte(body, 0)
			if n >= 0 && isTxControl(body[n+1:]) {
				return i
			}
		case 'B':
			name, err := bindStatement(b.body(m))
			if err != nil {
				continue
			}
			st := ss.client.unnamed
			if name != "" {
				st = ss.client.stmts[name]
			}
			if isTxControl(st.query) {
				return i
			}
		}
	}
	return -1
}

// isTxControl reports whether a statement text starts a transaction or
// sets its characteristics (BEGIN, START, SET TRANSACTION, SET SESSION).
func isTxControl[T string | []byte](q T) bool {
	q = q[leading(q, " \t\r\n\f\v("):]
	if hasPrefixFold(q, "begin") || hasPrefixFold(q, "start") {
		return true
	}
	if hasPrefixFold(q, "set") && len(q) > 3 {
		rest := q[3+leading(q[3:], " \t\r\n\f\v"):]
		return len(rest) < len(q)-3 && (hasPrefixFold(rest, "transaction") || hasPrefixFold(rest, "session"))
	}
	return false
}

// leading is the length of q's prefix of bytes in set.
func leading[T string | []byte](q T, set string) int {
	i := 0
	for i < len(q) && strings.IndexByte(set, q[i]) >= 0 {
		i++
	}
	return i
}

// hasPrefixFold reports whether q starts with the lower-case ASCII word w
// (letters only) in any case.
func hasPrefixFold[T string | []byte](q T, w string) bool {
	if len(q) < len(w) {
		return false
	}
	for i := 0; i < len(w); i++ {
		if q[i]|0x20 != w[i] {
			return false
		}
	}
	return true
}

// settleReferences waits, before b is classified, for the server's
// answers to Parses and Closes of earlier pipelined batches that define
// the statements b's Binds and Describes use: whether such a Parse ran or
// was skipped after an error decides which statement the name holds, and
// so whether the unit is a read (a Bind of the unnamed statement after a
// skipped Parse of a SELECT is the INSERT before it, and must not go to a
// replica). A Parse of a name waits likewise for a Close of it in flight:
// after an error before it the Close was skipped, the name is still taken,
// and the Parse must be refused (42P05) wherever it goes, not prepared on
// a server that never held the name (differential 3433646377040350236).
// Nothing waits when no such Parse or Close is in flight.
func (ss *session) settleReferences(b *batch) {
	ss.mu.Lock()
	l := ss.mu.cur
	pending := l != nil && !l.dead && len(l.ops) > 0 && l.claimLocked()
	ss.mu.Unlock()
	if !pending {
		return
	}
	defer ss.unclaim(l)
	var done map[string]bool
	for _, m := range b.msgs {
		name, ok := stmtRef(m.typ, b.body(m))
		if m.typ == 'P' {
			n, err := parseName(b.body(m))
			name, ok = n, err == nil && n != ""
		}
		if !ok || done[name] {
			continue
		}
		if done == nil {
			done = map[string]bool{}
		}
		done[name] = true
		ss.settleOps(l, name)
	}
	ss.applyClientUndo()
}

// routeBatch decides where a unit goes and sends it there. open means the
// unit continues after b (Flush, or oversized). It returns the link used,
// or nil when the proxy answered the unit itself (a rejection, a local
// command, a deferred BEGIN).
func (ss *session) routeBatch(b *batch, open, oversized bool) (routed *link, err error) {
	if !open && len(b.msgs) == 1 && b.msgs[0].typ == 'Q' {
		defer func() {
			if routed == nil && err == nil {
				ss.queryNotForwarded()
			}
		}()
	}
	if stop, err := ss.beforeUnit(); stop || err != nil {
		return nil, err
	}
	ss.settleReferences(b)
	if err := ss.endChainOnReplica(); err != nil {
		return nil, err
	}
	if k := ss.replicaTxEndSplit(b); k > 0 {
		return ss.routeSplit(b, k, open, oversized)
	}
	u, decisions, stop, err := ss.prepareUnit(b, open, oversized)
	if stop || err != nil {
		return nil, err
	}
	return ss.placeUnit(b, u, decisions, open)
}

// beforeUnit is what a unit waits for and settles before it is analysed:
// the client's undone statements, held-back messages, a paused route, a
// check of the session's primary backend. stop means the session ended
// meanwhile (killed, or its backend terminated).
func (ss *session) beforeUnit() (stop bool, err error) {
	ss.applyClientUndo()
	if err := ss.flushHeld(); err != nil {
		return true, err
	}
	if ss.awaitResume() {
		return true, nil // killed while its route was paused
	}
	if ss.awaitPrimaryCheck() || ss.syncPrimary() {
		return true, nil // the session's backend was terminated
	}
	return false, nil
}

// prepareUnit analyses a unit and notes what routing it implies for the
// session's record (portals, savepoints, AND CHAIN); stop means the unit
// was answered here (a bad hint, a local command) or failed.
func (ss *session) prepareUnit(b *batch, open, oversized bool) (u unitInfo, decisions []*classified, stop bool, err error) {
	ss.client.unitNo++
	u, decisions = ss.analyze(b, oversized)
	u.restore = ss.restoreQuery(decisions)
	ss.notePortalsEnd(b, u, open)
	ss.noteChainOnReplica(b, u, open)
	if open {
		ss.flow.unit = u // for the position query when the unit's Sync comes
	}
	if u.hintErr != "" {
		return u, nil, true, ss.failUnit(errorf(codeInvalidParameter, "%s", u.hintErr), open)
	}
	if e := ss.executeLoop(b); e != nil {
		return u, nil, true, ss.failUnit(e, open)
	}
	ss.blockOnOldPrimary()
	if stop, err := ss.lostBlockUnit(b, &u, decisions, open); stop || err != nil {
		return u, nil, true, err
	}
	if err := ss.payCaptureDebt(); err != nil {
		return u, nil, true, err
	}
	if !open && len(b.msgs) == 1 && b.msgs[0].typ == 'Q' {
		if handled, err := ss.answerLocally(b, decisions); handled || err != nil {
			return u, nil, true, err
		}
	}
	return u, decisions, false, nil
}

// placeUnit chooses a server for an analysed unit and sends it there,
// deciding again when a server refuses or is lost before the unit's
// first byte reached it.
func (ss *session) placeUnit(b *batch, u unitInfo, decisions []*classified, open bool) (*link, error) {
	p := placement{b: b, analyzed: u, decisions: decisions, open: open}
	return ss.place(&p)
}

// placement is placeUnit's progress with one unit: what it planned and
// which servers it tried. A retryable read whose answer has not begun
// keeps it (retry.go) until it is answered or runs again elsewhere.
type placement struct {
	b         *batch
	analyzed  unitInfo
	decisions []*classified
	open      bool

	u        unitInfo
	primaryV health.Verdict
	class    classPolicy
	fallback string
	req      freshness.Requirement
	d        decision
	ff       fallbackFacts
	tried    map[string]bool // nil until a server is tried (markTried)
	planned  bool
	replans  int
}

// place carries out placement p: plans the unit, decides, acquires and
// sends, until the unit is on a server or answered here.
func (ss *session) place(p *placement) (*link, error) {
	open := p.open
	for {
		if !p.planned {
			// Everything decided before a server is chosen (route.go:
			// planUnit); planned again when the primary changed
			// before the unit was sent (a failover: the token rules
			// judged against the old primary no longer hold).
			p.planned = true
			var pl unitPlan
			pl, p.primaryV = ss.plan(p.analyzed)
			if pl.priorJudged {
				ss.mu.Lock()
				ss.mu.fresh.prior = freshness.Token{}
				ss.mu.Unlock()
			}
			switch {
			case pl.quiet:
				ss.fallBackTold(*pl.lost)
			case pl.lost != nil || pl.unsureTold:
				ss.lostWrite(pl.lost)
			}
			if pl.fail != nil {
				if pl.rejected != "" {
					ss.setLastRoute(targetRejected, pl.rejected, "0", "")
				}
				return nil, ss.failUnit(pl.fail, open)
			}
			p.u, p.class, p.fallback, p.req = pl.unit, pl.class, pl.fallback, pl.req
			p.ff = fallbackFacts{fallback: p.fallback, needsFloor: ss.needsFloor(p.u), primaryInRecovery: p.primaryV.SplitBrain,
				primaryDown: p.primaryV.Addr != "" && !p.primaryV.Reachable, waited: p.ff.waited}
		}
		p.ff.hurried = false
		var retryable, killed bool
		if p.d, retryable, killed = ss.decideWhenReady(p.u, p.tried, p.req, p.fallback, open); killed {
			return nil, nil
		}

		// A read that fell back: the steps before the primary serves it
		// (route.go: planFallback).
		switch ss.fallBack(&p.d, p.u, p.tried, &p.req, p.primaryV, &p.ff) {
		case fallbackRedecide:
			continue
		case fallbackReplan:
			p.planned = false
			continue
		}
		if p.d.target == targetRejected {
			return nil, ss.reject(p.d, open)
		}
		l, step, err := ss.acquireLink(p)
		switch step {
		case acquireDone:
			return nil, err
		case acquireReplan:
			p.planned = false
			continue
		case acquireAgain:
			continue
		}
		lost, err := ss.sendTo(l, p, retryable)
		if err != nil {
			return nil, err
		}
		if !lost {
			return l, nil
		}
		if err := ss.readLostAt(l, p); err != nil {
			return nil, err
		}
	}
}

// acquireStep says what routeBatch does after acquireLink.
type acquireStep int

const (
	acquired      acquireStep = iota // the link is the unit's: send it
	acquireAgain                     // decide again (a replica refused, or the primary went down under a read)
	acquireReplan                    // another primary was elected since the plan: plan again
	acquireDone                      // the unit ends with acquireLink's error (nil: failed to the client, the session goes on)
)

// acquireLink gets the server connection placement p's decision names:
// the session's primary link or a replica's. A replica that refuses is
// marked tried (fallback_policy then applies); a read whose primary turns
// out to be down waits for a replica or the election (planFallback),
// once; a primary other than the one planned against means a new plan.
func (ss *session) acquireLink(p *placement) (l *link, _ acquireStep, err error) {
	d, b, u, primaryV, ff, open := p.d, p.b, p.u, p.primaryV, &p.ff, p.open
	if d.target == targetPrimary {
		if l, err = ss.primaryLink(); err != nil {
			if errors.Is(err, errQueuedCancel) {
				return nil, acquireDone, ss.failUnit(queryCanceled(), open)
			}
			if errors.Is(err, errBlockLost) {
				// The unit fails like the block's statements (lostBlockUnit);
				// one that ends the block ends it.
				ss.mu.Lock()
				ss.mu.lostBlock, ss.mu.tx = lostTold, 'E'
				if u.lastTx == 'e' && !u.chained {
					ss.mu.lostBlock, ss.mu.tx = 0, 'I'
				}
				ss.mu.Unlock()
				if u.lastTx == 'e' && !u.chained {
					ss.endLostBlock()
				}
				return nil, acquireDone, ss.failUnit(withDetail(errorf(codeConnectionFailure,
					"pg-kinetic: the primary changed under this transaction, which did not commit"),
					"another server was elected primary while the transaction block was open; end it with ROLLBACK"), open)
			}
			if ce, ok := err.(*clientError); ok && ce.severity == "FATAL" {
				return nil, acquireDone, ce // the session ends (a primary change under its transaction)
			}
			if u.read && isFallback(d.reason) && !ff.waited {
				// The primary went down before its probe told: a
				// replica, or the primary a failover elects, may
				// serve the read after a wait (planFallback).
				ff.primaryDown = true
				ss.mu.Lock()
				ss.holdFallbackLocked(nil)
				ss.mu.Unlock()
				return nil, acquireAgain, nil
			}
			if ce := (*clientError)(nil); !open && closesOnly(b) > 0 && !(errors.As(err, &ce) && ce.code == codeTooManyConnections) {
				// A driver's deallocation after the primary was lost:
				// what it closes went with that server. (Not when the
				// pool was full: the server holds them; 53300.)
				if handled, err := ss.answerClosesHere(b); handled {
					return nil, acquireDone, err
				}
			}
			e := errorResponse(err)
			if u.read && d.reason != "" {
				// A read no replica could serve: say why it needed
				// the primary.
				e.Detail = strings.TrimPrefix(e.Detail+"; ", "; ") + "the read needed the primary: " + d.reason
				ss.setLastRoute(targetRejected, d.reason, "", "")
			}
			return nil, acquireDone, ss.failUnit(e, open)
		}
		if primaryV.Addr != "" && l.addr != primaryV.Addr && p.replans < maxReplans {
			// Another primary was elected since the plan: plan
			// again against it (a write told lost, a token carried)
			// before anything goes there.
			ss.unclaim(l)
			p.replans++
			return nil, acquireReplan, nil
		}
	} else {
		if l, err = ss.replicaLink(d.addr); err != nil {
			if errors.Is(err, errQueuedCancel) {
				return nil, acquireDone, ss.failUnit(queryCanceled(), open)
			}
			// The replica refused: skip it for a while and decide
			// again, with the same unit, elsewhere (fallback_policy
			// applies).
			p.markTried(d.addr)
			ss.log.Info("replica unavailable for a read; trying elsewhere", zap.String("server", d.addr), zap.Error(err))
			return nil, acquireAgain, nil
		}
	}
	return l, acquired, nil
}

// sendTo prepares l for the unit of placement p (room for its
// statements, the session's settings and statements, the route record,
// the staleness notice) and writes the unit. lost: l was a retryable
// read's replica and failed before answering.
func (ss *session) sendTo(l *link, p *placement, retryable bool) (lost bool, err error) {
	b, u, d, decisions, class, open := p.b, p.u, p.d, p.decisions, p.class, p.open
	ss.takeUndo(l) // (the snapshot below is of the settled record)
	if err := ss.makeRoom(l, b, decisions); err != nil {
		ss.unclaim(l)
		return false, errServerGone
	}
	sqlOp, hasSQLOp := ss.sqlStatementOp(l, b, decisions)
	if err := ss.prepareLink(l, decisions); err != nil {
		ss.unclaim(l)
		return false, err
	}
	ss.recordRoute(d, decisions, !runsNothing(b))
	ss.noteCancels(l, u.cancels)
	if hasSQLOp {
		ss.noteStmtOp(l, sqlOp)
	}
	if len(b.msgs) == 1 && b.msgs[0].typ == 'Q' {
		ss.discardNow(l, decisions)
	}
	ss.noteResets(l, decisions)
	if d.target == targetReplica && class.label {
		// label_staleness: the answer says how stale it may be.
		ss.send(&pgproto3.NoticeResponse{Severity: "NOTICE", SeverityUnlocalized: "NOTICE", Code: "01000",
			Message: fmt.Sprintf("pg-kinetic: served by a replica with lag_ms=%d", d.lagMS)})
	}
	if !u.read {
		ss.mu.Lock()
		ss.lastWrite = time.Now()
		ss.mu.Unlock()
	}
	if !retryable {
		return false, ss.sendUnit(l, b, u, open)
	}
	return ss.sendRetryable(l, p)
}

// markTried notes that server addr failed this unit: it is not chosen
// again for it.
func (p *placement) markTried(addr string) {
	if p.tried == nil {
		p.tried = map[string]bool{}
	}
	p.tried[addr] = true
}

// readLostAt notes that placement p's read failed on l before answering:
// it runs again elsewhere, once per server.
func (ss *session) readLostAt(l *link, p *placement) error {
	if p.tried[p.d.addr] {
		return fatalf(codeConnectionFailure, "pg-kinetic: lost the connection to the server")
	}
	p.markTried(p.d.addr)
	ss.readLost(l, p.d.addr)
	return nil
}

// readLost notes a retryable read whose replica (addr, link l) failed
// before answering: the replica backs off, the retry is counted and
// logged.
func (ss *session) readLost(l *link, addr string) {
	ss.srv.backoff.failed(addr, time.Now())
	cause := "connection_lost"
	ss.mu.Lock()
	if l.abandoned {
		cause = "unreachable"
	}
	ss.mu.Unlock()
	ss.srv.metrics.ReadRetry(ss.route.Name, addr, cause)
	ss.log.Warn("replica failed before answering a read; retrying it elsewhere", zap.String("server", addr), zap.String("cause", cause))
}

// syncPrimary: after any session ran pg_terminate_backend, a
// session-pooled session with routing on (whose next unit may well go to
// a replica) sends its primary backend a Sync of the proxy's and waits for
// it: a backend that was sent SIGTERM ends at that read, with FATAL 57P01,
// as it would at the client's own next statement directly. It reports
// whether the session ended so.
func (ss *session) syncPrimary() bool {
	n := ss.srv.terminations.Load()
	if n == ss.seenTerminations || ss.txPool || !ss.freshnessOn() {
		return false
	}
	ss.seenTerminations = n
	ss.mu.Lock()
	l := ss.mu.primary
	if !ss.idleLocked() || !l.claimLocked() {
		ss.mu.Unlock()
		return false
	}
	ss.mu.Unlock()
	defer ss.unclaim(l)
	if err := ss.inject(l, &pgproto3.Sync{}, 'Z'); err != nil {
		return false
	}
	ss.mu.Lock()
	want := l.batches
	ss.mu.Unlock()
	if l.conn.W.Flush() != nil {
		return false
	}
	ss.awaitReadyForQuery(l, want)
	return ss.awaitPrimaryCheck()
}

// payCaptureDebt reads the primary's WAL position when the session owes
// it (captureDebt), before the unit being routed: one round trip, after a
// COPY FROM STDIN or a lost position query only. The answer raises token
// and floor to a position at or after everything the session wrote or
// saw. When the primary cannot be reached the debt stays, and reads go to
// the primary meanwhile (owesCapture).
//
// The debt is paid only once every answer the client is owed has arrived;
// until then it stays too. Waiting for those answers here would stop the
// session's only reader of the client while the server may be waiting for
// that client: a COPY FROM STDIN interrupted by a Sync, a Flush or a Query
// (a client's mistake, or a hostile one) never ends, and the session
// outlived its client with its server connection
// (TestHostileBytesNeverDisturbAGoodClient, TestSyncDuringCopyThenLeave).
func (ss *session) payCaptureDebt() error {
	if !ss.owesCapture() || !ss.freshnessOn() {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.mu.pending > 0 && !ss.mu.killed && !(ss.mu.cur != nil && ss.mu.cur.dead) {
		return nil
	}
	ss.mu.fresh.captures++
	// An unsure write's timeline: an answer from a later primary pays the
	// debt but does not name that write (applyPosition).
	ss.requestPositionLocked(captureWrite, true, ss.mu.fresh.unsure.timeline)
	return nil
}

// owesCapture reports captureDebt.
func (ss *session) owesCapture() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mu.fresh.captureDebt
}

// linkDead reports whether l's reader has ended on a failure.
func (ss *session) linkDead(l *link) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return l.dead
}

// afterUnit runs once a unit is written: it replays the client's startup
// values a RESET of the unit returned to the server's defaults, and asks
// for what keeps the session's token and floor current once the unit is
// answered — the route's position reader after a unit on the primary that
// ends outside a transaction (the token; SPEC §5), a note of what a read
// on a replica saw (affinity.go). Nothing is sent on l for positions. An
// open unit gets them when its Sync arrives.
func (ss *session) afterUnit(l *link, u unitInfo, open bool) error {
	ss.mu.Lock()
	unitBatch := l.batches // the unit's last ReadyForQuery is number unitBatch
	ss.mu.Unlock()
	if !open && !u.copyIn {
		// RESET returns a server connection to its own defaults, where
		// PostgreSQL returns a session to the values it logged in with:
		// the client's startup values are set again at once, in the
		// same transaction (a ROLLBACK undoes both), so the client's
		// next statement sees them as directly.
		if u.restore != "" {
			if err := ss.inject(l, &pgproto3.Query{String: u.restore}, 'Z'); err != nil {
				return errServerGone
			}
		}
		ss.mu.Lock()
		ss.mu.restored = true
		ss.mu.Unlock()
	}
	if open || !ss.freshnessOn() {
		return nil
	}
	if u.copyIn {
		// Nothing but copy messages may follow COPY FROM STDIN: the
		// position is read before the session's next unit instead.
		ss.mu.Lock()
		ss.oweCaptureLocked()
		ss.markUnsureLocked(ss.writeTimelineLocked(l.addr))
		ss.mu.Unlock()
		return nil
	}
	ss.mu.Lock()
	inTx := ss.mu.tx != 'I' && !u.txEnd
	if !l.replica && !u.read {
		ss.mu.fresh.wrote = true
	}
	if !l.replica && (!inTx || u.txEnd) && u.mayWAL {
		kind := byte(captureWrite)
		if u.read && !(u.commits && ss.mu.fresh.wrote) {
			// (A COMMIT is a read, unless it ends a block that wrote:
			// then its position is the block's writes' token.)
			kind = captureRead
		}
		ss.positionAfterLocked(l, unitBatch, kind)
	}
	if l.replica && !inTx && !u.txStart {
		// What the read saw is bounded later (affinity.go): nothing is
		// read after it.
		ss.seenAfterLocked(l, unitBatch)
	}
	ss.mu.Unlock()
	return nil
}

// executes reports whether batch b runs a statement (an Execute, a Query
// or a FunctionCall): one that only parses, binds and describes commits
// nothing.
func executes(b *batch) bool {
	for _, m := range b.msgs {
		if m.typ == 'E' || m.typ == 'Q' || m.typ == 'F' {
			return true
		}
	}
	return false
}

// countSyncs is the number of ReadyForQuery messages a batch asks for.
func countSyncs(b *batch) int {
	n := 0
	for _, m := range b.msgs {
		if m.typ == 'S' || m.typ == 'Q' || m.typ == 'F' {
			n++
		}
	}
	return n
}

// sendUnit writes unit b to l, with what l needs before it and the
// position query after it, and flushes. An open unit (no Sync yet) keeps
// its claim on l until its end (endStream).
func (ss *session) sendUnit(l *link, b *batch, u unitInfo, open bool) error {
	commits := !l.replica && (open || executes(b)) && ss.mayCommit(u, b)
	keepable := !l.replica && !open && keepableUnit(u)
	ss.mu.Lock()
	if commits {
		ss.mu.commitInFlight = true
	}
	fate := unitFate{mayCommit: commits, status: ss.failedStatusLocked(u)}
	if fate.status == 'I' { // (outside a block, as the units ahead leave it)
		fate.closes = closesOnly(b)
	}
	ss.mu.writingKeepable, ss.mu.writingFate = keepable, fate
	seq := ss.mu.unitSeq
	ss.mu.Unlock()
	err := ss.buffer(l, b)
	ss.mu.Lock()
	ss.mu.writingKeepable, ss.mu.writingFate = false, unitFate{}
	ss.mu.Unlock()
	if err == nil {
		err = ss.afterUnit(l, u, open)
	}
	if err == nil && l.conn.W.Flush() != nil {
		err = errServerGone
	}
	if keepable && (err == nil && ss.linkDead(l) || errors.Is(err, errServerGone)) && ss.answerLostUnit(l, b, seq, fate) {
		// The primary was lost under this unit and the session goes
		// on (keepAfterLoss): the unit got its error.
		ss.unclaim(l)
		return nil
	}
	if err == nil && ss.linkDead(l) {
		// Its reader ended before buffer made l the session's current
		// link, so linkFailed took it for an idle one: nobody will answer
		// this unit.
		err = fatalf(codeConnectionFailure, "pg-kinetic: lost the connection to the server")
	}
	if !open || err != nil {
		ss.unclaim(l)
	}
	return err
}

// sendRetryable writes a safe read to replica link l and waits until the
// first byte of its answer reached the client. lost reports that the
// replica failed before that: nothing reached the client, and the read
// may run once elsewhere (its counts are taken back). When the session
// goroutine would next wait for the client anyway, it does not wait here:
// the placement is kept (deferRetry) and settled when the client sends
// again or the replica fails (retry.go).
func (ss *session) sendRetryable(l *link, p *placement) (lost bool, err error) {
	ss.mu.Lock()
	ss.mu.awaiting, ss.mu.answered = l, false
	ss.mu.Unlock()
	l.awaitingFirst.Store(true)
	err = ss.buffer(l, p.b)
	if err == nil {
		err = ss.afterUnit(l, p.u, p.open)
	}
	if err == nil && l.conn.W.Flush() != nil {
		err = errServerGone
	}
	ss.unclaim(l)
	if err != nil && !errors.Is(err, errServerGone) {
		return false, err
	}
	if err == nil && ss.deferRetry(l, p) {
		return false, nil
	}
	return ss.awaitFirst(l, p.b), nil
}

// awaitFirst waits until the first byte of the retryable read (batch b)
// on l is about to reach the client, or l failed before that (lost: the
// read's counts are taken back, it runs again elsewhere).
func (ss *session) awaitFirst(l *link, b *batch) (lost bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for !ss.mu.answered && !l.dead && !ss.mu.killed {
		ss.turn.Wait()
	}
	lost = l.dead && !ss.mu.answered && !ss.mu.killed
	ss.mu.awaiting = nil
	l.awaitingFirst.Store(false)
	if lost {
		// Its ReadyForQuery will never come; forget what we counted.
		ss.mu.pending -= countSyncs(b)
		ss.mu.fates = ss.mu.fates[:max(0, len(ss.mu.fates)-countSyncs(b))]
		ss.mu.unitSeq -= uint64(countSyncs(b)) // it runs again elsewhere
		ss.mu.unsynced = false
		ss.mu.cur = nil
	}
	return lost
}

// mayCommit reports whether unit u (batch b), sent to the primary, may
// commit a transaction: a COMMIT, or anything outside a transaction block
// that is not provably a read (autocommit). With routing off in session
// pooling nothing is classified: then any unit outside a block, or one
// whose text begins with COMMIT or END. If the primary's connection is
// lost before its ReadyForQuery, the client is told the outcome is
// unknown (08007), never that it failed.
func (ss *session) mayCommit(u unitInfo, b *batch) bool {
	if u.commits {
		return true
	}
	ss.mu.Lock()
	autocommit := ss.mu.tx == 'I' && ss.deferred == ""
	ss.mu.Unlock()
	if !ss.settingsTracked() {
		if autocommit {
			return true
		}
		for _, m := range b.msgs {
			q := b.body(m)
			switch m.typ {
			case 'P':
				_, q, _ = cstring(q) // (after the statement name)
			case 'Q':
			default:
				continue
			}
			q = bytes.TrimLeft(q, " \t\r\n\f\v")
			if len(q) >= 3 && bytes.EqualFold(q[:3], []byte("end")) || len(q) >= 6 && bytes.EqualFold(q[:6], []byte("commit")) {
				return true
			}
		}
		return false
	}
	return autocommit && !u.read
}

// decideWhenReady decides where unit u goes, once the units in flight
// allow it: a unit for another server than the one still answering waits
// for those answers (results reach the client in order). retryable is
// whether the read may run again elsewhere if its replica fails before
// answering; killed, that the session ended meanwhile.
func (ss *session) decideWhenReady(u unitInfo, tried map[string]bool, req freshness.Requirement, fallback string, open bool) (d decision, retryable, killed bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for ss.mu.pending > 0 && !ss.mu.killed && ss.mu.cur != nil && !ss.mu.cur.dead {
		s := ss.sessionInfoLocked()
		s.fallback = fallback
		d = ss.decideLocked(s, u, tried, req)
		if d.target != targetRejected && ss.mu.cur == ss.linkFor(d) && (u.read || !ss.mu.cur.replica) && !ss.mu.movedEffects {
			// Same server: pipelining may continue. (Not a write after
			// units on a replica: whether a transaction is still open
			// there is known when they are answered. Nor after a unit
			// whose SETs ran partly on a replica: the session's settings
			// are known, and replayed here, when it ends.)
			break
		}
		ss.turn.Wait() // results from another server are still arriving
	}
	if ss.mu.killed {
		return d, false, true
	}
	s := ss.sessionInfoLocked()
	s.fallback = fallback
	d = ss.decideLocked(s, u, tried, req)
	retryable = d.target == targetReplica && u.read && !u.txStart && !s.inTx && !open && ss.deferred == ""
	return d, retryable, false
}

// What routeBatch does after fallBack.
type fallbackOutcome int

const (
	fallbackCarryOut fallbackOutcome = iota // carry out d (it may have become a rejection)
	fallbackRedecide                        // decide again: a replica may serve it now
	fallbackReplan                          // plan the unit again: the primary may have changed
)

// maxReplans bounds how often a unit is planned again because the primary
// changed under it (a flapping election ends in the last plan).
const maxReplans = 3

// fallBack takes the steps planFallback gives a decision d that fell back
// from the replicas, until it is to be carried out (d may become a
// rejection), decided again, or planned again.
func (ss *session) fallBack(d *decision, u unitInfo, tried map[string]bool, req *freshness.Requirement, primaryV health.Verdict, f *fallbackFacts) fallbackOutcome {
	for {
		if f.needsFloor && !f.boundTried {
			f.seenBlocked = ss.seenBlockedNow()
		}
		st := planFallback(*d, u, *f)
		if st.hurry {
			f.hurried = true
			ss.hurrySeen(*req) // so the next reads find a replica fresh
		}
		if st.reject != "" {
			*d = decision{target: targetRejected, reason: st.reject}
		}
		switch st.action {
		case fallbackGo:
			return fallbackCarryOut
		case fallbackRefresh:
			f.refreshed = true
			// (What it raises, decideLocked folds into the requirement.)
			if ss.refreshReplicas(*req) {
				return fallbackRedecide
			}
		case fallbackBound:
			f.boundTried = true
			if ss.boundSeenByPrimary() { // (decideLocked folds the raised floor in)
				return fallbackRedecide
			}
		case fallbackWait:
			f.waited = true
			if f.primaryDown {
				// A failover may be under way: wait for a replica or
				// for the election, then plan again against what it
				// left.
				ss.waitForReplica(u, tried, *req, &primaryV)
				return fallbackReplan
			}
			if ss.waitForReplica(u, tried, *req, nil) {
				return fallbackRedecide
			}
		case fallbackPrimary:
			slot, ok := ss.srv.takeFallback(ss.route)
			if !ok {
				*d = decision{target: targetRejected, reason: reasonFallbackOverload}
				return fallbackCarryOut
			}
			ss.mu.Lock()
			ss.holdFallbackLocked(slot)
			ss.mu.Unlock()
			if st.notice {
				ss.send(&pgproto3.NoticeResponse{Severity: "NOTICE", SeverityUnlocalized: "NOTICE", Code: "01000",
					Message: "pg-kinetic: degraded: this read was served by the primary", Detail: "cause: " + d.reason})
			}
			return fallbackCarryOut
		}
	}
}

// plan runs planUnit for u, gathering the facts that cost I/O only when
// it asks for them. It returns the primary's verdict too, for the rules
// after a decision (planFallback).
func (ss *session) plan(u unitInfo) (unitPlan, health.Verdict) {
	f, primaryV := ss.unitFacts(u)
	p := planUnit(f)
	for ; p.need != needNothing; p = planUnit(f) {
		switch p.need {
		case needPosition:
			// (The session's positions are read after its captures
			// answered: they move the token.)
			f.positionAsked, f.positionKnown = true, ss.waitCaptures() && !ss.owesCapture()
			ss.mu.Lock()
			f.floor, f.token, f.minLSN, f.unsure, f.prior = ss.mu.fresh.floor, ss.mu.fresh.token, ss.mu.fresh.minLSN, ss.mu.fresh.unsure, ss.mu.fresh.prior
			f.told = ss.mu.fresh.told
			ss.mu.Unlock()
		case needStrict:
			f.strictAsked = true
			f.strictPos, f.strictOK = ss.strictPosition()
		}
	}
	return p, primaryV
}

// unitFacts gathers what planUnit needs that costs no I/O, and the
// primary's verdict the fallback rules use after it.
func (ss *session) unitFacts(u unitInfo) (unitFacts, health.Verdict) {
	f := unitFacts{unit: u, route: ss.route, fresh: ss.freshnessOn(), queryClass: ss.queryClass}
	if !f.fresh {
		return f, health.Verdict{}
	}
	var primaryV health.Verdict
	primaryV, _ = ss.srv.primaryVerdict(ss.route)
	f.primaryTimeline, f.primaryInRecovery, f.primaryHistory = primaryV.Timeline, primaryV.SplitBrain, primaryV.History
	// The token as it stands, for a unit that asks for no position (a
	// write): a lost write is told at once (planUnit).
	ss.mu.Lock()
	if f.primaryHistory != nil {
		f.token, f.prior, f.told = ss.mu.fresh.token, ss.mu.fresh.prior, ss.mu.fresh.told
	}
	f.unsure = ss.mu.fresh.unsure
	f.serializable = serializableByDefault(ss.mu.settings.startup, ss.mu.settings.session)
	ss.mu.Unlock()
	f.stage, f.rolledBack = ss.srv.rollout.get(ss.route.Name)
	f.staysPut = (u.read || u.txStart) && ss.staysPut(u)
	sticky := ss.route.Freshness.StickyPrimaryWindow()
	if sticky > 0 {
		ss.mu.Lock()
		f.sticky = time.Since(ss.lastWrite) < sticky
		ss.mu.Unlock()
	}
	return f, primaryV
}

// staysPut reports whether decide will keep u where the session's
// transaction is (or send it to the primary after a deferred plain BEGIN)
// whatever the session's positions: then the unit need not wait for them.
// Only with nothing in flight: a pipelined COMMIT may still end the
// transaction the status shows.
func (ss *session) staysPut(u unitInfo) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.mu.pending > 0 {
		return false
	}
	s := ss.sessionInfoLocked()
	return s.inTx && s.cur != "" || ss.deferred != "" && !u.txStart
}

// sessionInfoLocked snapshots what decide needs. Callers hold ss.mu.
func (ss *session) sessionInfoLocked() sessionInfo {
	s := sessionInfo{
		mode:     ss.routingMode(),
		fallback: ss.route.ReadRouting.FallbackPolicy,
		inTx:     ss.mu.tx != 'I' && ss.deferred == "",
		pinned:   ss.mu.pinned,
	}
	if ss.mu.cur != nil && (ss.mu.pending > 0 || s.inTx) {
		s.cur, s.curReplica = ss.mu.cur.addr, ss.mu.cur.replica
	}
	return s
}

// judgeLocked judges the route's replicas for unit u as decide sees them
// now, in routing mode mode: against req with the session's floor as it
// stands (what a probe begun after a read there bounds is folded in
// first), with the replicas tried for the unit taken away, and, for a read
// that must see the session's writes, kept to the replica it read from
// while that read is unbounded (restrictToSeenLocked; blocked: that took
// the last eligible one away). decideLocked decides on it, and
// waitForReplica waits for it to offer a replica. (Judged apart, the
// wait could end at once on a replica eligible only for the plan's older
// floor, or on one the read may not leave its replica for, and the read
// then fell back to the primary without having waited.) The list is the
// session's scratch. Callers hold ss.mu.
func (ss *session) judgeLocked(snap *health.Snapshot, mode string, u unitInfo, tried map[string]bool, req freshness.Requirement) (cands []candidate, blocked bool) {
	floor := ss.needsFloor(u)
	if floor {
		ss.boundSeenLocked(snap)
		// The floor as it stands now, not only as the unit was planned
		// with: a bound applied since (by this call, by an earlier
		// decision of the same unit that found its replica refusing,
		// by refreshReplicas, by boundSeenByPrimary) forgot the reads it
		// bounded, so the requirement must carry it or those reads are
		// unprotected. (A floor on another timeline than the plan's was
		// judged by the plan: planUnit carries an old timeline's position
		// onto the primary's.)
		tl := req.Floor.Timeline
		if tl == 0 {
			tl = req.PrimaryTimeline // (a bare token: the current timeline)
		}
		if f := ss.mu.fresh.floor; !f.IsZero() && (req.Floor.IsZero() || f.Timeline == tl && req.Floor.LSN < f.LSN) {
			req.Floor = f
		}
	}
	if mode != config.RoutingOff && mode != "" {
		// (With routing off decide looks at none: judging every replica
		// for every unit was 2% of an unrouted session's CPU.)
		cands = ss.srv.appendCandidates(ss.mu.scratch.cands[:0], ss.route, snap, req)
		ss.mu.scratch.cands = cands // (decide keeps none of it)
	}
	for i := range cands {
		if tried[cands[i].addr] {
			cands[i].eligible, cands[i].reason = false, reasonReplicaUnavailable
		}
	}
	if floor {
		blocked = ss.restrictToSeenLocked(cands, snap)
	}
	return cands, blocked
}

// decideLocked decides where unit u goes on the replicas as judgeLocked
// finds them. Callers hold ss.mu.
func (ss *session) decideLocked(s sessionInfo, u unitInfo, tried map[string]bool, req freshness.Requirement) decision {
	cands, blocked := ss.judgeLocked(ss.snapshot(), s.mode, u, tried, req)
	ss.mu.fresh.seenBlocked = blocked
	floor := ss.needsFloor(u)
	if floor {
		s.affine = ss.mu.fresh.affine
		if ss.srv != nil {
			s.balance = &ss.srv.affine
		}
	}
	if ss.deferred != "" && !u.txStart {
		// A plain BEGIN opened a write-capable transaction.
		return decision{target: targetPrimary, reason: reasonWrite}
	}
	d := decide(s, u, cands, rand.Float64())
	if d.target == targetReplica {
		ss.mu.fresh.usedReplica = true
		if floor && ss.mu.fresh.affine != d.addr {
			if ss.srv != nil {
				ss.srv.affine.move(ss.mu.fresh.affine, d.addr)
			}
			ss.mu.fresh.affine = d.addr
		}
	}
	return d
}

// linkFor is the attached link a decision names, nil if not attached.
// Callers hold ss.mu.
func (ss *session) linkFor(d decision) *link {
	if d.target == targetPrimary {
		return ss.mu.primary
	}
	return ss.mu.replicas[d.addr]
}

// analyze classifies a batch's statements into what the router needs.
func (ss *session) analyze(b *batch, oversized bool) (unitInfo, []*classified) {
	// The previous unit's records are reused: nothing holds them past
	// routeBatch, or past settleHeld for a held read (retry.go), which
	// comes before the next unit is read.
	for _, c := range ss.classified {
		*c = classified{}
	}
	a := analysis{
		ss: ss,
		u:  unitInfo{read: true},
		ds: ss.classified[:0],
		// With routing off every unit goes to the primary, so nothing
		// needs classifying, except in transaction pooling: the
		// session's SETs, statements and pinning effects must still be
		// known there.
		routingOff:  !ss.settingsTracked(),
		effectsOnly: ss.routingMode() == config.RoutingOff && ss.txPool,
	}
	defer func() { ss.classified = a.ds }()
	if oversized {
		a.unclassified()
	}
	for _, m := range b.msgs {
		body := b.body(m)
		switch m.typ {
		case 'Q':
			text := body[:max(len(body)-1, 0)]
			if a.routingOff && !mayBeShow(text) && !mayReset(string(text)) {
				a.use("") // only SHOW pg_kinetic.* and RESET need the text
				continue
			}
			a.use(string(text))
			a.u.cancels = cancelPIDs(a.u.cancels, a.last(), nil)
		case 'P':
			name, query, err := parseNames(body)
			if err != nil {
				a.unclassified()
				continue
			}
			if a.local == nil {
				a.local = map[string]int{}
			}
			a.local[name] = len(a.ds)
			a.use(query)
		case 'B':
			a.bind(body)
		case 'F':
			a.u.read, a.u.reason, a.u.mayWAL = false, reasonWrite, true
		}
	}
	return a.u, a.ds
}

// analysis is analyze's work in progress over one batch.
type analysis struct {
	ss    *session
	u     unitInfo
	ds    []*classified  // one per statement text met, in order
	local map[string]int // statements parsed in this batch: their index in ds
	// routingOff, effectsOnly: see analyze.
	routingOff, effectsOnly bool
}

// last is the record of the statement met last.
func (a *analysis) last() *classified { return a.ds[len(a.ds)-1] }

// unclassified makes the unit a write of unknown effect: the batch has
// what the proxy cannot read.
func (a *analysis) unclassified() {
	a.u.read, a.u.reason, a.u.mayWAL = false, reasonUnclassified, true
}

// use records the statement query and merges its classification into
// the unit.
func (a *analysis) use(query string) {
	var c *classified
	if len(a.ds) < cap(a.ds) {
		c = a.ds[:len(a.ds)+1][len(a.ds)]
	}
	if c == nil {
		c = new(classified)
	}
	c.text = query
	a.ds = append(a.ds, c)
	if a.routingOff && !mayReset(query) || a.effectsOnly && classify.SessionNeutral(query) {
		// Every unit goes to the primary: nothing to classify (the
		// proxy still answers SHOW pg_kinetic.last_route by its text),
		// unless transaction pooling must learn the unit's session
		// effects, which a plain SELECT without calls provably has not.
		a.u.mayWAL = true
		return
	}
	c.Decision = a.ss.classifier.Classify(query)
	a.ss.merge(&a.u, &c.Decision, len(a.ds) == 1)
}

// bind classifies a Bind by the statement it binds: one parsed in this
// batch (classified with its Parse), the unnamed or a named protocol
// statement of the session's, or one PREPAREd in SQL.
func (a *analysis) bind(body []byte) {
	name, err := bindStatement(body)
	if err != nil {
		a.unclassified()
		return
	}
	client := &a.ss.client
	if i, ok := a.local[name]; ok {
		a.u.cancels = cancelPIDs(a.u.cancels, a.ds[i], body)
		return
	}
	if name == "" && client.unnamed.parse != "" {
		a.use(client.unnamed.query)
	} else if st, ok := client.stmts[name]; ok {
		a.use(st.query)
	} else if p, ok := client.sqlPrepared[name]; ok {
		// A Bind of a statement PREPAREd in SQL (one namespace) reads
		// when the prepared statement does.
		a.u.mayWAL = true
		if p.inner != classify.KindRead {
			a.u.read, a.u.reason = false, reasonWrite
		}
		return
	} else {
		a.unclassified()
		return
	}
	a.u.cancels = cancelPIDs(a.u.cancels, a.last(), body)
}

// mayReset reports whether a text may RESET a setting or DISCARD ALL:
// with routing off in session pooling only those are classified (their
// ParameterStatus answers are corrected, relayParameterStatus).
func mayReset(q string) bool {
	return containsFold(q, "reset") || containsFold(q, "discard")
}

// mayBeShow reports whether a simple query may be a SHOW (its first word,
// after blanks, starts with "show" in any case).
func mayBeShow(q []byte) bool {
	q = bytes.TrimLeft(q, " \t\r\n\f\v")
	return len(q) >= 4 && bytes.EqualFold(q[:4], []byte("show"))
}

// merge folds one statement string's classification into the unit.
func (ss *session) merge(u *unitInfo, d *classify.Decision, first bool) {
	u.mergeHints(d.Hints)
	read, reason := d.Kind == classify.KindRead, d.Reason
	if len(d.Statements) > 0 {
		read, reason = true, ""
	} else {
		u.mayWAL = true // (not parsed)
	}
	// The functions and relations to look up: the classifier's union
	// when it found a read; when it did not, the router may still (SQL
	// EXECUTE of a prepared read), so they are gathered here.
	funcs, rels := d.Funcs, d.Relations
	gather := d.Kind != classify.KindRead
	for i := range d.Statements {
		st := &d.Statements[i]
		if gather {
			funcs = append(funcs, st.Funcs...)
			rels = append(rels, st.Relations...)
		}
		stRead, stReason := ss.mergeStatement(u, st, first && i == 0, len(d.Statements) > 1)
		if st.Effect == classify.EffectExecute {
			p, ok := ss.client.sqlPrepared[st.PrepareName]
			stRead = ok && p.inner == classify.KindRead && !st.ParamsWrite
			stReason = reasonWrite
			if stRead {
				// The prepared read's functions and relations count as
				// this statement's own (EXECUTE names neither).
				funcs = append(slices.Clip(funcs), p.funcs...)
				rels = append(slices.Clip(rels), p.rels...)
			}
		}
		if !stRead && read {
			read, reason = false, stReason
		}
	}
	if read && len(funcs) > 0 && ss.routingMode() != config.RoutingOff && ss.srv.anyVolatile(ss, funcs) {
		read, reason = false, reasonWrite
	}
	if read && len(rels) > 0 && ss.routingMode() != config.RoutingOff && ss.srv.anyUnlogged(ss, rels) {
		// A hot standby cannot read an UNLOGGED relation (0A000): the
		// primary serves the read, as it serves a write.
		read, reason = false, reasonWrite
	}
	if !read && u.read {
		u.read = false
		if reason == "" || reason == reasonRead {
			reason = reasonWrite
		}
		u.reason = reason
	}
}

// mergeHints folds one statement string's hint comment into the unit.
func (u *unitInfo) mergeHints(h classify.Hints) {
	if h.Primary {
		u.hintPrim = true
	}
	if h.StaleOK {
		u.staleOK = true
	}
	if h.Class != "" && u.class == "" {
		u.class = h.Class
	}
	if h.StrictFresh {
		u.strict = true
	}
	if h.MinLSN != "" {
		if t, err := freshness.ParseToken(h.MinLSN); err != nil {
			u.hintErr = "pg-kinetic: invalid min_lsn hint " + strconv.Quote(h.MinLSN) + ": " + err.Error()
		} else if u.minLSN.Less(t) {
			u.minLSN = t
		}
	}
}

// mergeStatement folds one parsed statement's transaction control, WAL,
// COPY and pinning effects into the unit, and reports whether it may run
// on a replica on its own (an EXECUTE is settled by merge). opens says it
// is the unit's first statement; many that its string holds others.
func (ss *session) mergeStatement(u *unitInfo, st *classify.Statement, opens, many bool) (read bool, reason string) {
	read, reason = st.Kind == classify.KindRead, st.Reason
	if !st.NoWAL && st.Effect != classify.EffectPrepare {
		u.mayWAL = true
	}
	if opens && ss.deferred != "" && ss.deferredRO {
		// The first statement of a deferred BEGIN READ ONLY opens the
		// transaction: on a replica when it is a read, on the primary
		// (read only, as directly) when it must run there.
		u.txStart = true
	}
	switch st.Tx {
	case classify.TxBegin, classify.TxBeginReadWrite:
		read, reason = false, reasonWrite
		u.begins, u.lastTx = true, 'b'
	case classify.TxBeginReadOnly:
		u.begins, u.lastTx = true, 'b'
		u.txStart = u.txStart || opens
	case classify.TxSetReadOnly:
		u.txStart = u.txStart || opens && ss.deferred != ""
	case classify.TxEnd:
		u.txEnd = true
		if !st.Chain {
			u.lastTx = 'e'
		} else {
			u.chained = true
		}
		if !st.Rollback {
			u.commits = true
		}
	}
	if st.CopyIn {
		u.copyIn = true
	}
	if st.Unlogs {
		ss.srv.forgetUnlogged(ss)
	}
	if ss.pinsByPath(st) {
		u.pinEffect = true
	}
	switch st.Effect {
	case classify.EffectPin:
		u.pinEffect = true
	case classify.EffectPrepare:
		if many {
			u.pinEffect = true // its text cannot be replayed on its own
		}
		// A SQL PREPARE runs on the primary (and is replayed on a
		// replica where an EXECUTE of it goes): an EXECUTE the proxy
		// cannot see, in a function's dynamic SQL (plpgsql's EXECUTE
		// 'execute q'), runs with the function on the primary and must
		// find it there. Until 2026-12-07 a PREPARE of a read ran on a
		// replica, and such a function failed with 26000 (PostgreSQL's
		// regression suite, partition_prune.sql). It writes nothing: no
		// token is read for it.
		read, reason = false, reasonWrite
	}
	return read, reason
}

// pinsByPath notes a statement's search_path (notePath) and reports
// whether it creates an object by an unqualified name while the session's
// search_path may name pg_temp: PostgreSQL then makes it temporary
// (pg_temp first), and the session's later transactions must run where
// it is, as after CREATE TEMP TABLE. Until 2026-12-08 such a CREATE did
// not pin, and in transaction pooling the next transaction ran on a
// connection without the object.
func (ss *session) pinsByPath(st *classify.Statement) bool {
	if st.TempPath {
		ss.tempPath = true
	}
	if st.Effect == classify.EffectSet {
		ss.notePath(st.Setting)
		for _, more := range st.MoreSettings {
			ss.notePath(more)
		}
	}
	return st.CreatesUnqualified && ss.tempPath
}

// notePath marks the session's search_path as possibly naming pg_temp
// when a setting sets it to a value that does (Session.tempPath).
func (ss *session) notePath(s classify.Setting) {
	if strings.EqualFold(s.Name, "search_path") && !s.Reset && classify.NamesTempSchema(s.Value) {
		ss.tempPath = true
	}
}

// recordEffects notes the session effects of a unit's statements: pinning
// at once, settings and DISCARD ALL when the unit ends well, SQL prepared
// statements and their deallocation.
func (ss *session) recordEffects(ds []*classified) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := 0
	for _, dec := range ds {
		n += len(dec.Statements)
	}
	// failed: the unit begins in a failed transaction block (known: no
	// unit is pending), where a COMMIT rolls back (its tag is ROLLBACK) and
	// must count as one: a COMMIT after it in the same batch, outside any
	// block now, answers COMMIT, and was taken for the end of the failed
	// block, whose SETs were then kept (differential 5658341513511382388).
	failed := ss.mu.tx == 'E' && ss.mu.pending == 0
	for _, dec := range ds {
		for _, st := range dec.Statements {
			if st.Tx == classify.TxEnd && st.Effect == classify.EffectNone {
				commit := !st.Rollback && !failed
				ss.mu.effects = append(ss.mu.effects, effect{commit: commit, rollback: !commit, seq: ss.mu.unitSeq})
			}
			if st.Tx == classify.TxEnd || st.Tx == classify.TxSavepoint && st.Savepoint.Op == classify.SavepointRollback {
				failed = false // (ended, or back at a savepoint: it goes on)
			}
			if st.Tx == classify.TxSavepoint {
				ss.mu.effects = append(ss.mu.effects, effect{savepoint: st.Savepoint, alone: n == 1, seq: ss.mu.unitSeq})
				ss.noteSavepointLocked(st.Savepoint)
			}
			if st.CreatesUnqualified && ss.tempPath { // (the path noted when the unit was analysed: pinsByPath)
				ss.mu.pinned = reasonSessionPinned
			}
			switch st.Effect {
			case classify.EffectPin:
				ss.mu.pinned = reasonSessionPinned
			case classify.EffectSet, classify.EffectDiscardAll:
				ss.mu.effects = append(ss.mu.effects, effect{kind: st.Effect, setting: st.Setting, seq: ss.mu.unitSeq})
				for _, more := range st.MoreSettings {
					ss.mu.effects = append(ss.mu.effects, effect{kind: st.Effect, setting: more, seq: ss.mu.unitSeq})
				}
			case classify.EffectPrepare:
				_, taken := ss.client.sqlPrepared[st.PrepareName]
				if _, parsed := ss.client.stmts[st.PrepareName]; parsed {
					taken = true
				}
				if taken {
					continue // the server refuses it (42P05): the client's stays
				}
				if len(dec.Statements) == 1 && st.Inner != nil {
					ss.client.sqlPrepared[st.PrepareName] = sqlPrep{text: strings.TrimSpace(dec.text), inner: st.Inner.Kind, funcs: st.Inner.Funcs, rels: st.Inner.Relations}
				}
			case classify.EffectDeallocate:
				if st.PrepareName == "" {
					// (The unnamed statement is not a prepared statement
					// DEALLOCATE ALL knows: it survives.)
					ss.client.sqlPrepared = map[string]sqlPrep{}
					ss.client.stmts = map[string]stmtInfo{}
				} else {
					delete(ss.client.sqlPrepared, st.PrepareName)
					delete(ss.client.stmts, st.PrepareName) // one namespace
				}
			}
		}
	}
}

// prepareLink brings l in line with the session before a unit runs there:
// settings, SQL prepared statements, a deferred BEGIN. What it sends is
// injected (its responses never reach the client).
func (ss *session) prepareLink(l *link, ds []*classified) error {
	ss.mu.Lock()
	dgen := ss.mu.settings.discardGen
	st := l.st
	key, inUnit := ss.settingsForLocked(st)
	// The session's DEALLOCATE ALL reaches every server it uses; one that
	// holds none of its statements only needs to be marked.
	discard := dgen > 0 && (st.discardOwner != ss.id || st.discardGen != dgen)
	resync := st.settings != key || !ss.mu.movedEffects && st.settingsBy == ss.id && st.settingsEpoch != ss.mu.settings.epoch
	if !resync {
		ss.stampLocked(st) // (in line: a unit of this session's runs there)
	}
	ss.mu.Unlock()
	if discard {
		if err := ss.discardOn(l, dgen); err != nil {
			return err
		}
	}
	if resync {
		if err := ss.resetSettingsOn(l, key); err != nil {
			return err
		}
	}
	for _, d := range ds {
		if err := ss.ensureSQLPrepared(l, &d.Decision, d.text); err != nil {
			return errServerGone
		}
	}
	block := ss.deferred != ""
	failed := false
	if block {
		if err := ss.inject(l, &pgproto3.Query{String: ss.deferred}, 'Z'); err != nil {
			return errServerGone
		}
		ss.deferred = ""
		failed = ss.txStatus() == 'E'
	}
	if inUnit != "" {
		if err := ss.injectInUnit(l, inUnit, block); err != nil {
			return errServerGone
		}
		ss.inj.restOpen = !block
		ss.mu.Lock()
		st.settings = inUnit // (until the unit ends: then unknown, endEffects)
		ss.stampLocked(st)
		ss.mu.movedOn.st, ss.mu.movedOn.seq = st, ss.mu.unitSeq
		ss.mu.Unlock()
	}
	if failed {
		// A statement the proxy answered itself failed the block before
		// any of it reached a server (failUnit, localFailed: nothing to
		// abort then). The server's block fails too, so that it answers
		// the unit as PostgreSQL would in a failed block (25P02, a COMMIT
		// that rolls back), the extended protocol's messages included.
		if err := ss.inject(l, &pgproto3.Query{String: proxyFailedStatement}, 'Z'); err != nil {
			return errServerGone
		}
	}
	if r := ss.flow.replayDue; r != nil {
		ss.flow.replayDue = nil
		if !l.replica {
			if err := ss.replayPortals(l, r); err != nil {
				return errServerGone
			}
		}
	}
	return nil
}

// settingsForLocked returns the settings l's server session must carry
// before the unit's messages (key: a set_config statement, "" for the
// defaults) and those to make inside the unit's own transaction
// (inUnit). Callers hold ss.mu.
func (ss *session) settingsForLocked(st *serverState) (key, inUnit string) {
	key = ss.mu.settings.settingsKey
	if !ss.mu.movedEffects {
		return key, ""
	}
	// The rest of a unit whose first part ran on a replica: its SETs so
	// far must hold here too, in the unit's own transaction (the implicit
	// one, or the block a BEGIN of the unit opened): a failure undoes
	// them, and the server reports the undone values, as directly.
	if ss.mu.tx != 'I' {
		// Inside the block the rest opened nothing is replayed: what the
		// server holds is the block's.
		return st.settings, ""
	}
	moved := ss.movedSettingsKeyLocked()
	switch {
	case moved == key:
		return key, ""
	case st.settings == moved && ss.mu.movedOn.st == st && ss.mu.movedOn.seq == ss.mu.unitSeq:
		return moved, "" // made there already, in this unit
	case ss.pendingResetsLocked():
		return moved, "" // (not replayable in it: made before it)
	default:
		return key, moved
	}
}

// discardOn brings l's server up to the session's DEALLOCATE ALL number
// dgen: its statements are deallocated if it holds any, and it is marked.
func (ss *session) discardOn(l *link, dgen uint64) error {
	st := l.st
	ss.mu.Lock()
	held := len(st.prepared) > 0 || len(st.sqlPrepared) > 0 || st.unnamed != ""
	ss.mu.Unlock()
	if held {
		if err := ss.inject(l, &pgproto3.Query{String: "DEALLOCATE ALL"}, 'Z'); err != nil {
			return errServerGone
		}
		st.forgetStatements()
	}
	ss.mu.Lock() // (a server reader marks the server a DISCARD ALL ran on: unitEnded)
	st.discardOwner, st.discardGen = ss.id, dgen
	ss.mu.Unlock()
	return nil
}

// resetSettingsOn gives l's server session the settings key ("" for the
// server's defaults).
func (ss *session) resetSettingsOn(l *link, key string) error {
	// RESET ALL on its own: in one implicit transaction with the
	// set_config SELECT, a setting that fails every snapshot there
	// (default_transaction_isolation = serializable on a hot standby:
	// 0A000) failed the SELECT and so undid the RESET, and the connection
	// kept the previous client's settings.
	if err := ss.inject(l, &pgproto3.Query{String: resetAllQuery}, 'Z'); err != nil {
		return errServerGone
	}
	// One Query (one implicit transaction) per setting: a call that
	// fails there (a placeholder whose prefix a module loaded on this
	// connection has reserved since: SET plpgsql.x before LOAD 'plpgsql')
	// fails alone. In one SELECT it voided every other setting, and the
	// client's statement ran with the server's defaults (PostgreSQL's
	// regression suite, guc.sql in transaction pooling).
	for q := range settingsStatements(key) {
		if err := ss.inject(l, &pgproto3.Query{String: q}, 'Z'); err != nil {
			return errServerGone
		}
	}
	ss.mu.Lock()
	l.st.settings = key
	ss.stampLocked(l.st)
	ss.mu.Unlock()
	return nil
}

// stampLocked records on st that this session gave it its settings as of
// its current settings epoch. Callers hold ss.mu.
func (ss *session) stampLocked(st *serverState) {
	st.settingsBy, st.settingsEpoch = ss.id, ss.mu.settings.epoch
}

// resetAllQuery returns a server session to its defaults as far as a
// settings key can set them: RESET ALL leaves role and
// session_authorization alone (they are GUC_NO_RESET_ALL), which SET ROLE
// and SET SESSION AUTHORIZATION change and a key replays with set_config;
// a SET ROLE the session has since RESET would otherwise stay on the
// server (PostgreSQL's regression suite, insert.sql, found it).
const resetAllQuery = "RESET ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ROLE"

// injectInUnit runs query (one statement) on l ahead of the client's
// messages, inside the transaction they run in: after the deferred BEGIN
// (block) as a simple Query, else in the batch's implicit transaction as
// extended messages without a Sync. Its answers are dropped.
func (ss *session) injectInUnit(l *link, query string, block bool) error {
	if block {
		return ss.inject(l, &pgproto3.Query{String: query}, 'Z')
	}
	if err := ss.inject(l, &pgproto3.Parse{Query: query}, '1'); err != nil {
		return err
	}
	ss.mu.Lock()
	l.st.unnamed = "" // (the client's is Parsed again before its use)
	ss.mu.Unlock()
	if err := ss.inject(l, &pgproto3.Bind{}, '2'); err != nil {
		return err
	}
	return ss.inject(l, &pgproto3.Execute{}, expectExecute)
}

// pendingResetsLocked reports whether the session's pending effects hold
// a RESET ALL or DISCARD ALL, which set_config cannot replay inside a
// block. Callers hold ss.mu.
func (ss *session) pendingResetsLocked() bool {
	return slices.ContainsFunc(ss.mu.effects, func(e effect) bool {
		return e.seq == ss.mu.unitSeq && !e.marker() && (e.kind == classify.EffectDiscardAll || e.kind == classify.EffectSet && e.setting.Reset && e.setting.Name == "")
	})
}

// unitEnded applies the effects of a unit that reached an idle point.
// Callers hold ss.mu.
func (ss *session) unitEnded() {
	if ss.mu.unitErr && ss.mu.doneSeq > 0 && ss.mu.errDone < ss.mu.doneSeq-1 {
		// The transaction block failed in an earlier unit and ended in
		// this one, which reached an idle point without an error of its
		// own: a failed block ends rolled back (COMMIT answers ROLLBACK),
		// so the earlier units' effects are undone, and what this unit
		// ran after the block's end (in the same batch) is its own.
		restored, moved := ss.mu.restored, ss.mu.movedEffects
		ss.endEffects(ss.mu.doneSeq-1, false)
		ss.mu.restored, ss.mu.movedEffects = restored, moved
		ss.mu.unitErr = false
	}
	ss.endEffects(ss.mu.doneSeq, !ss.mu.unitErr && ss.mu.lastTag != "ROLLBACK")
}

// endEffects applies (ok) or drops the effects of the units before unit
// number upTo. Callers hold ss.mu.
func (ss *session) endEffects(upTo uint64, ok bool) {
	// Effects of units still to be answered (pipelined) wait for theirs.
	n := 0
	for n < len(ss.mu.effects) && ss.mu.effects[n].seq < upTo {
		n++
	}
	ss.settleEffects(n, n, ok)
}

// settleEffects applies (ok) or drops the first n of the session's
// effects, and removes the first drop of them (drop ≥ n: a COMMIT's
// marker goes with what it committed). Callers hold ss.mu.
func (ss *session) settleEffects(n, drop int, ok bool) {
	done, later := ss.mu.effects[:n], ss.mu.effects[drop:]
	if !slices.ContainsFunc(done, func(e effect) bool { return !e.marker() }) {
		done = nil // (markers alone change nothing)
	}
	if ok && len(done) > 0 {
		var uncertain bool
		if done, uncertain = keptEffects(done); uncertain && ss.mu.pinned == "" {
			// A savepoint command whose outcome its unit's error hides
			// (it may have run before the error or not): which of the
			// block's SETs the server kept is not known. The session
			// keeps the server that has them (docs/behaviour.md).
			ss.mu.pinned = reasonSessionPinned
			ss.log.Debug("savepoint outcome unknown among session settings: session pinned")
		}
		for _, e := range done {
			switch e.kind {
			case classify.EffectSet:
				ss.applySetting(e.setting)
			case classify.EffectDiscardAll:
				// (Its statements went when it was sent: discardNow.)
				// Its RESET ALL keeps placeholders, empty.
				ss.mu.settings.session = withSetting(ss.mu.settings.session, ss.mu.settings.startup, classify.Setting{Reset: true})
				ss.mu.pinned = ""
				ss.mu.settings.discardGen++
				if ss.mu.cur != nil {
					ss.mu.cur.st.discardOwner, ss.mu.cur.st.discardGen = ss.id, ss.mu.settings.discardGen
				}
			}
		}
		ss.mu.settings.settingsKey = settingsQuery(append(slices.Clip(ss.mu.settings.startup), ss.mu.settings.session...))
		if slices.ContainsFunc(done, func(e effect) bool { return e.kind == classify.EffectSet }) {
			// Every other server this session set up gets the settings
			// again before its next unit, even one whose key is the
			// same: the SET or RESET may be of a setting a function or
			// DO block set there (SET inside plpgsql), which no key
			// held. Without it, RESET enable_bitmapscan after a DO
			// block that turned it off on the primary ran on a replica
			// and left the primary planning without bitmap scans
			// (PostgreSQL's regression suite, brin_multi.sql).
			ss.mu.settings.epoch++
		}
		if ss.mu.cur != nil {
			ss.stampLocked(ss.mu.cur.st)
			// The server that ran them has them; after DISCARD ALL it is
			// back at its defaults, without the startup settings too.
			switch {
			case hasDiscard(done) && !ss.mu.restored:
				ss.mu.cur.st.settings = ""
			case hasReset(done) && !ss.mu.restored:
				// RESET returned the server to its defaults, not to the
				// client's startup values, which the session still holds:
				// replay them before the next unit there.
				ss.mu.cur.st.settings = settingsUnknown
			case ss.mu.movedEffects:
				// Part of the unit, with some of its SETs, ran on a
				// replica (endReplicaStream): this server has not seen
				// them all.
				ss.mu.cur.st.settings = settingsUnknown
			default:
				ss.mu.cur.st.settings = ss.mu.settings.settingsKey
			}
		}
	}
	if !ok && len(done) > 0 && ss.mu.cur != nil && ss.mu.pinned == "" && ss.settingsTracked() {
		// (A pinned session keeps its server, whose state is the
		// session's own, set_config calls included: a replay would
		// undo those. So does a session whose SETs are not tracked.)
		// The session drops the unit's SETs, but which of them the
		// server kept is not known (a SAVEPOINT rolled back to after an
		// error keeps those before it): its settings are replayed before
		// the next unit there, never taken for the session's.
		ss.mu.cur.st.settings = settingsUnknown
	}
	ss.mu.effects = append(ss.mu.effects[:0], later...)
	ss.mu.unitErr = false
	ss.mu.restored = false
	ss.mu.movedEffects = false
}

// keptEffects returns the effects (markers left out) that the transaction
// control among them did not undo: a ROLLBACK undoes those since the last
// COMMIT before it, the transaction it ended (a BEGIN makes what its batch
// ran before it part of the block, so nothing earlier of the unit
// survives it either); a ROLLBACK TO SAVEPOINT those since the latest
// savepoint of that name, which stays, and those above it go; a RELEASE
// drops the savepoint and those above it, keeping what they did. A
// savepoint command whose unit failed did nothing if it was the unit's
// only statement; otherwise it may have run before the error or not, and
// uncertain says so, as it does for a RELEASE or ROLLBACK TO of a
// savepoint the effects never set (the effects are then kept as if it had
// not run).
func keptEffects(done []effect) (out []effect, uncertain bool) {
	type savepoint struct {
		name string
		at   int // len(out) when it was set
	}
	var stack []savepoint
	since := 0 // where the current transaction's effects begin in out
	for _, e := range done {
		switch {
		case e.commit:
			since, stack = len(out), nil
		case e.rollback:
			out, stack = out[:since], nil
		case e.savepoint.Op != 0:
			if e.errored {
				uncertain = uncertain || !e.alone
				continue
			}
			i := len(stack) - 1
			for i >= 0 && stack[i].name != e.savepoint.Name {
				i--
			}
			switch {
			case e.savepoint.Op == classify.SavepointSet:
				stack = append(stack, savepoint{e.savepoint.Name, len(out)})
			case i < 0:
				uncertain = true
			case e.savepoint.Op == classify.SavepointRelease:
				stack = stack[:i]
			default: // ROLLBACK TO
				out, stack = out[:stack[i].at], stack[:i+1]
			}
		default:
			out = append(out, e)
		}
	}
	return out, uncertain
}

// settingsTracked reports whether the session's SETs are known: with
// routing off in session pooling they are not classified (the session
// keeps its server, which holds them), so its settings key lacks them and
// must never be replayed over the server's own state.
func (ss *session) settingsTracked() bool {
	return ss.routingMode() != config.RoutingOff || ss.txPool
}

// settingsUnknown is a serverState.settings no session's key equals.
const settingsUnknown = "\x00unknown"

func hasReset(es []effect) bool {
	for _, e := range es {
		if e.kind == classify.EffectSet && e.setting.Reset {
			return true
		}
	}
	return false
}

func hasDiscard(es []effect) bool {
	for _, e := range es {
		if e.kind == classify.EffectDiscardAll {
			return true
		}
	}
	return false
}

// applySetting records a SET/RESET in the session's settings. Callers hold
// ss.mu.
func (ss *session) applySetting(s classify.Setting) {
	ss.mu.settings.session = withSetting(ss.mu.settings.session, ss.mu.settings.startup, s)
}

// withSetting returns session (the session's settings, reused) with s
// applied; startup holds the client's startup values, which RESET
// returns to.
func withSetting(session, startup []setting, s classify.Setting) []setting {
	name := strings.ToLower(s.Name)
	if s.Reset && name == "" { // RESET ALL
		// Placeholders stay, empty (customized).
		var kept []setting
		for _, x := range session {
			if customized(x.name) && !slices.ContainsFunc(kept, func(k setting) bool { return strings.EqualFold(k.name, x.name) }) {
				kept = append(kept, setting{name: x.name, reset: true})
			}
		}
		return kept
	}
	value := s.Value
	if !s.Reset && name == "datestyle" {
		// (Read before session is reused below.)
		value = mergeDateStyle(effectiveValue(session, startup, name), value)
	}
	kept := session[:0]
	for _, x := range session {
		// SET and RESET SESSION AUTHORIZATION also return role to none
		// (SET ROLE's setting goes with them).
		if n := strings.ToLower(x.name); n != name && (name != "session_authorization" || n != "role") {
			kept = append(kept, x)
		}
	}
	if !s.Reset {
		return append(kept, setting{name: s.Name, value: value})
	}
	// RESET returns to the startup value, which set_config replays.
	fromStartup := false
	for _, st := range startup {
		if strings.ToLower(st.name) == name {
			// (Every one, in order: options' -c, then the parameter.)
			kept, fromStartup = append(kept, st), true
		}
	}
	if !fromStartup && customized(name) {
		// A placeholder, empty from now on where the session goes.
		return append(kept, setting{name: s.Name, reset: true})
	}
	return kept
}

// movedSettingsKeyLocked is the settings a server that takes over the rest
// of a unit from a replica (endReplicaStream) needs: the session's, with
// the SETs still pending, which the replica's part ran (inside the unit's
// transaction on PostgreSQL: a BEGIN after them keeps them in the block).
// Callers hold ss.mu.
func (ss *session) movedSettingsKeyLocked() string {
	// Only the unit's own (those of earlier units belong to a block the
	// unit's part on the replica ended, or that failed), and none a
	// ROLLBACK of the unit undid.
	sess := slices.Clone(ss.mu.settings.session)
	for _, e := range ss.mu.effects {
		switch {
		case e.seq != ss.mu.unitSeq || e.commit:
		case e.rollback:
			sess = slices.Clone(ss.mu.settings.session)
		case e.kind == classify.EffectSet:
			sess = withSetting(sess, ss.mu.settings.startup, e.setting)
		case e.kind == classify.EffectDiscardAll:
			sess = withSetting(sess, ss.mu.settings.startup, classify.Setting{Reset: true})
		}
	}
	return settingsQuery(append(slices.Clip(ss.mu.settings.startup), sess...))
}

// awaitReadyForQuery waits, at most 2 s, until l's server has answered
// its first want batches (l.rfqs reaches want), or l is gone.
func (ss *session) awaitReadyForQuery(l *link, want uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	expired := false
	defer ss.wakeAfter(2*time.Second, &expired).Stop()
	for l.rfqs < want && !l.dead && !ss.mu.killed && !expired {
		ss.turn.Wait()
	}
}
