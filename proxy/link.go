package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
	"github.com/pg-kinetic/pg-kinetic/pool"
)

// link is a server connection attached to a session: in session pooling
// the primary's for the whole session, and one per replica the session
// has used; in transaction pooling each lasts from the unit that needed it
// to the next idle point (or, for a pinned session, to the session's end).
// Fields other than conn/pool/addr/replica/st are guarded by session.mu.
type link struct {
	conn    *pool.Conn
	pool    *pool.Pool // nil for a dedicated (replication) connection
	addr    string
	replica bool
	// st is what the server session carries. It lives on the connection,
	// not the link: in transaction pooling it outlives this session's use.
	st *serverState

	// swallow lists responses to messages the proxy injected, which the
	// client must not see, in the order the server sends them.
	swallow  []expect
	injected uint64 // messages injected so far (ensureStatementSynced)
	// batches counts Sync/Query sent (each answered by one ReadyForQuery);
	// rfqs counts ReadyForQuery received. expect.batch ties an injected
	// message to the ReadyForQuery that ends its batch.
	batches, rfqs uint64
	// sent counts the client's messages written in batch batches (each
	// gets one answer: a completion or the batch's error); answered the
	// answers relayed in batch rfqs. An error answers message number
	// answered: that tells a Parse that failed from one skipped.
	sent, answered int
	// executed: an Execute of the client's was written in batch batches
	// (it may have ended the transaction before the ReadyForQuery that
	// reports it: see standInUse).
	executed bool
	// errInjected: the error being relayed is an injected message's,
	// given to the client as its first message's (batchFailedLocked).
	errInjected bool
	// describes: the client's Describes of statements written here, in
	// order, awaiting their ParameterDescription (paramsDescribedLocked);
	// describeSeq numbers them. rawDescribe is 1 + the batch in which a
	// Describe too large to read was streamed here untracked
	// (forwardStreamed): no learnTypes there.
	describes   []describeWait
	describeSeq uint64
	rawDescribe uint64
	// due: primary WAL positions to read once a batch is answered
	// (positionAfterLocked).
	due []positionDue

	readerDone chan error
	dead       bool // the reader ended; the link must not be used
	// kept: the primary was lost with units in flight and the session
	// went on, their answers the proxy's (keepAfterLoss); torn: the
	// reader failed inside a message it was relaying to the client, so
	// the client's stream can take nothing more.
	kept, torn bool
	// abandoned: a probe found the server unreachable while a retryable
	// read waited for its answer, and abandonRead closed the connection.
	abandoned bool

	// Transaction pooling (see releaseIdle): claims counts the session
	// goroutine's uses in progress (a unit being written, an open stream);
	// parked is set while the reader waits at an idle point for them to
	// end; released once the connection went back to its pool; stopping
	// when detach wants the reader to end.
	claims   int
	parked   bool
	released bool
	stopping bool
	// cancelled: a CancelRequest was sent to this connection's backend
	// (cancelRunning). The connection is closed, not pooled, when it is
	// released (docs/behaviour.md, "Pooling (transaction mode)").
	cancelled bool

	// barrier is the state of the barrier the session goroutine waits
	// for (barrierNone, …; localext.go); closes counts the client's
	// Close messages written in the current batch since the last barrier
	// and not answered yet.
	barrier int
	closes  int
	// failed is 1 + the batch (rfqs count) in which the server sent an
	// ErrorResponse, 0 if none: it skips the rest of that batch to Sync.
	failed uint64
	// ops are the client's Parses and Closes not answered yet; undo
	// those the server refused or skipped, for l.st (statements.go).
	ops, undo []stmtOp
	// resets are the batches with a RESET or DISCARD ALL (resetNote).
	resets []resetNote

	held []byte // messages held back for a retryable read (reader-owned)

	// awaitingFirst is set while a retryable read waits for the first
	// byte of its answer (see session.awaiting); atomic so the reader
	// checks it without the session lock on every message.
	awaitingFirst atomic.Bool
	// shapeNext: the Parse body of the statement whose RowDescription
	// (or NoData) comes next, the rest of the answer to a client's
	// Describe (reader-owned; paramsDescribedLocked sets it).
	shapeNext string
	// shape, shapeGot: the state and the answer of the proxy's own
	// Describe after a re-Parse (shapeChanged), under session.mu.
	shape    int
	shapeGot string
	// staleBinds: a Bind was written here with staleStatement in place
	// of a stale statement's name; its 26000 is rewritten to 0A000.
	staleBinds atomic.Bool
	// queryTimedOut: query_timeout_ms cancelled the unit running here;
	// its 57014 error is rewritten to say so (until its ReadyForQuery).
	queryTimedOut atomic.Bool
	// cancelling: that cancel is on its way (set and cleared under
	// session.mu, which the waiter holds; see awaitTimeoutCancel).
	cancelling atomic.Bool
}

// serverState is what one server session carries that the proxy must know
// to run a client's unit there: the statements prepared on it and the
// settings applied. It is kept in pool.Conn.State; a reset (DISCARD ALL on
// release in session pooling) forgets it.
type serverState struct {
	// prepared and unnamed hold the whole Parse body (name, text and
	// parameter types) each statement was prepared with: the same text
	// with other parameter types is another statement.
	prepared    map[string]string // protocol-level statement name -> Parse body
	unnamed     string            // Parse body of the unnamed statement, "" if none
	sqlPrepared map[string]string // SQL PREPARE name -> PREPARE text
	// settings is the settings query (settingsQuery) last applied after a
	// RESET ALL, "" for the server's defaults.
	settings string
	// settingsBy and settingsEpoch: the session that last gave this
	// server its settings, and that session's settings epoch then.
	settingsBy, settingsEpoch uint64
	// discardOwner/discardGen: the session and DISCARD ALL generation
	// whose DEALLOCATE ALL this server has seen (see prepareLink).
	discardOwner, discardGen uint64
	// used is when a batch last used each statement of prepared, by
	// clock (makeRoom evicts the least recently used). A name missing
	// here counts as never used; names no longer prepared are pruned.
	used  map[string]uint64
	clock uint64
}

func stateOf(c *pool.Conn) *serverState {
	if st, ok := c.State.(*serverState); ok {
		return st
	}
	st := &serverState{prepared: map[string]string{}, sqlPrepared: map[string]string{}}
	c.State = st
	return st
}

// holds reports whether the server holds a statement of that name, from
// a Parse or a SQL PREPARE (one namespace).
func (st *serverState) holds(name string) bool {
	_, parsed := st.prepared[name]
	_, prepared := st.sqlPrepared[name]
	return parsed || prepared
}

// drop forgets a statement of that name, of either kind.
func (st *serverState) drop(name string) {
	delete(st.prepared, name)
	delete(st.sqlPrepared, name)
}

func (st *serverState) forgetStatements() {
	st.prepared, st.sqlPrepared, st.unnamed = map[string]string{}, map[string]string{}, ""
}

// expect is one injected response to drop.
type expect struct {
	// kind: '1' ParseComplete, '3' CloseComplete, 'E' ErrorResponse, 'Z'
	// everything up to and including ReadyForQuery, 'b' a barrier's
	// CloseComplete (localext.go), after skip CloseCompletes of the
	// client's own, 'd' a Describe's ParameterDescription and
	// RowDescription or NoData (shapeChanged), 'i' the same for a
	// Describe whose ParameterDescription tells the types the server
	// inferred for parse (learnTypes; skip is 1 once it arrived).
	kind  byte
	skip  int
	batch uint64 // the batch (rfqs count) it belongs to
	parse string // 'i': the Parse body of the statement Described
	// after ('i'): the client's Describes of statements numbered up to
	// it (link.describeSeq) were written before the proxy's: their
	// ParameterDescriptions come first.
	after uint64
	// keepParams: the ParameterStatus messages before the ReadyForQuery
	// are the client's (its SETs, committed by the proxy's Sync): they
	// reach the client before its own next ReadyForQuery, where the
	// server would have sent them.
	keepParams bool
	// undoneParams: the ParameterStatus messages before the ReadyForQuery
	// report SETs the failure of the block undid (abortServerTx): they
	// reach the client before the proxy's ReadyForQuery (send).
	undoneParams bool
	// undo, for an injected statement the proxy recorded as done on the
	// server (a re-prepare), takes the record back if it fails or is
	// skipped.
	undo *stmtOp
}

// newLink wraps a connection the session holds; claimed, it starts with
// one claim (the unit it was acquired for).
func newLink(c *pool.Conn, p *pool.Pool, replica, claimed bool) *link {
	l := &link{conn: c, pool: p, addr: c.Addr, replica: replica, st: stateOf(c), readerDone: make(chan error, 1)}
	if claimed {
		l.claims = 1
	}
	return l
}

// attach starts the link's reader. The session owns the goroutine and
// joins it in detach.
func (ss *session) attach(l *link) {
	if !ss.txPool {
		go func() { l.readerDone <- ss.readContained(l) }()
		return
	}
	// Transaction pooling attaches a reader per unit: an idle reader
	// goroutine takes it (its stack already grown), or a new one starts.
	select {
	case ss.srv.readers <- readerJob{ss: ss, l: l}:
	default:
		go ss.srv.reader(readerJob{ss: ss, l: l})
	}
}

// readerJob is a link whose reader is to run.
type readerJob struct {
	ss *session
	l  *link
}

// maxIdleReaders bounds the reader goroutines kept waiting for work.
const maxIdleReaders = 256

// reader runs link readers one after the other, waiting for the next
// while fewer than maxIdleReaders wait, until the server closes.
func (s *Server) reader(j readerJob) {
	for {
		j.l.readerDone <- j.ss.readContained(j.l)
		j = readerJob{} // hold no session while idle
		if s.idleReaders.Add(1) > maxIdleReaders {
			s.idleReaders.Add(-1)
			return
		}
		select {
		case j = <-s.readers:
			s.idleReaders.Add(-1)
		case <-s.readersDone:
			s.idleReaders.Add(-1)
			return
		}
	}
}

// detach stops l's reader and returns the connection to its pool when it is
// provably idle, closing it otherwise.
func (ss *session) detach(l *link, clientAtBoundary bool) {
	ss.mu.Lock()
	if l.released {
		// Its reader gave the connection back (transaction pooling): it
		// may already serve another session.
		ss.mu.Unlock()
		return
	}
	l.stopping = true
	if l.parked {
		ss.readers.Broadcast()
	}
	ss.mu.Unlock()
	l.conn.SetReadDeadline(time.Now())
	rerr := <-l.readerDone
	l.conn.SetReadDeadline(time.Time{})
	ss.mu.Lock()
	// Nobody reads l any more: what it still owes will never be answered.
	ss.forgetSwallowLocked(l, len(l.swallow))
	// The record of the connection's statements goes back to its pool
	// with it: what the server refused or skipped is taken back now (the
	// session's next write, which would have done it, never comes).
	l.applyServerUndoLocked()
	busy := l.batches != l.rfqs
	// A server that failed a batch skips everything up to a Sync the
	// client never sent: a reset there would never be answered.
	skipping := l.failed == l.rfqs+1
	idle := !busy && !skipping && (l != ss.mu.cur || ss.idleLocked())
	// A claim still held is a CancelRequest on its way to this server
	// (cancelRunning), or a unit the session never finished writing. The
	// cancel may land after the connection went back to its pool and stop
	// another client's statement there, so a claimed connection is closed
	// instead, as is one a cancel was sent to (cancelRunning). No new
	// claim is taken from now on.
	claimed := l.claims > 0 || l.cancelled
	l.released = true
	ss.mu.Unlock()
	if errors.Is(rerr, errReleased) {
		return // already back in its pool
	}
	clean := clientAtBoundary && idle && !claimed && errors.Is(rerr, errInterrupted)
	if !clean && busy && !errors.Is(rerr, errServerGone) {
		// The client left mid-query: stop the query instead of letting it
		// run on a connection nobody reads.
		sendCancel(l.addr, l.conn.PID, l.conn.SecretKey, ss.srv.opts.connectTimeout)
	}
	ss.releaseServer(l.conn, l.pool, clean)
}

// forgetSwallowLocked drops the first n expected injected answers of l
// that will never be read, taking back the records of the statements
// among them. Callers hold ss.mu.
func (ss *session) forgetSwallowLocked(l *link, n int) {
	if n == 0 {
		return
	}
	for _, e := range l.swallow[:n] {
		if e.kind == 'b' {
			l.barrier = barrierFailed
		}
		if e.kind == 'd' {
			l.shape = shapeFailed
		}
		if e.undo != nil {
			l.undo = append(l.undo, *e.undo) // never ran, or failed
		}
	}
	l.swallow = l.swallow[n:]
	if len(l.swallow) == 0 {
		l.swallow = nil
	}
	ss.turn.Broadcast()
}

// failBarriersLocked fails the barriers l's current batch still waits
// for: the server skips to Sync and will not answer them. Callers hold
// ss.mu.
func (ss *session) failBarriersLocked(l *link) {
	kept := l.swallow[:0]
	for _, e := range l.swallow {
		if e.kind == 'b' && e.batch == l.rfqs {
			l.barrier = barrierFailed
			continue
		}
		kept = append(kept, e)
	}
	l.swallow = kept
	if len(l.swallow) == 0 {
		l.swallow = nil
	}
	ss.turn.Broadcast()
}

// serverErrorLocked records an error the server answered one of the
// client's messages with: the server now skips to Sync. A barrier the
// session goroutine registered after this reader took the error's header
// (and so before l.failed said the batch failed) is written after the
// error and never answered: it fails now, instead of waiting for ever.
// Callers hold ss.mu.
func (ss *session) serverErrorLocked(l *link) {
	ss.unitFailedLocked()
	l.failed = l.rfqs + 1
	ss.batchFailedLocked(l)
	ss.failBarriersLocked(l)
}

// unitFailedLocked records that the unit being answered failed, and marks
// its effects so (keptEffects). Callers hold ss.mu.
func (ss *session) unitFailedLocked() {
	ss.mu.unitErr, ss.mu.errDone = true, ss.mu.doneSeq
	for i := range ss.mu.effects {
		if ss.mu.effects[i].seq == ss.mu.doneSeq {
			ss.mu.effects[i].errored = true
		}
	}
}

// errInterrupted reports that a link's reader was stopped by the session
// between two messages, leaving the server connection's stream intact.
var errInterrupted = errors.New("server reader interrupted at a message boundary")

// errReleased reports that a link's reader returned the connection to its
// pool at an idle point (transaction pooling).
var errReleased = errors.New("server connection released at an idle point")

// errServerGone reports a failed server connection.
var errServerGone = errors.New("server connection lost")

// relayStep is what a server reader does with one backend message
// (stepLocked).
type relayStep struct {
	// drop: the message answers one of the proxy's own (or must not reach
	// the client): it is read and dropped, its effects recorded.
	drop bool
	// endInjected: it is the ReadyForQuery that ends an injected Sync or
	// Query (head).
	endInjected bool
	head        expect // the injected message a dropped message answers
	// deferFatal: an unsolicited error from the session's own backend in
	// session pooling: a FATAL there is checked (is the server up?) before
	// the session goes on.
	deferFatal bool
	// shape: it ends the answer to the proxy's Describe (shapeChanged).
	shape bool
	// inferred: it is the ParameterDescription a learnTypes Describe
	// asked for: the Parse body of its statement.
	inferred string
}

// stepLocked decides, from the header type of the next backend message on
// l and the link's state (the injected answers still expected, the
// barriers waiting, the batches written and answered), whether the
// message is relayed to the client or dropped, and records what its
// arrival settles: answered injections leave the queue, barriers pass or
// fail. The copy loop (serverToClient) then moves the bytes. Callers hold
// ss.mu.
func (ss *session) stepLocked(l *link, typ byte) relayStep {
	var st relayStep
	stale := 0
	for stale < len(l.swallow) && l.swallow[stale].batch < l.rfqs {
		stale++ // its batch already ended
	}
	ss.forgetSwallowLocked(l, stale)
	if len(l.swallow) > 0 && l.swallow[0].batch == l.rfqs {
		st = ss.swallowStepLocked(l, l.swallow[0], typ)
	}
	ss.unsolicitedStepLocked(l, typ, &st)
	if typ == '3' && !st.drop {
		l.closeAnsweredLocked() // a client's Close answered
	}
	return st
}

// unsolicitedStepLocked drops what a link sends that no one asked for (st
// says what the swallow queue decided): anything from a replica, and
// from the primary a FATAL the session handles itself.
func (ss *session) unsolicitedStepLocked(l *link, typ byte, st *relayStep) {
	// Solicited: answers to a Sync or Query still owed, or to messages
	// of a batch the client ended with Flush alone (unsynced).
	if unsolicited := !st.drop && l.batches == l.rfqs && !(l == ss.mu.cur && (ss.mu.tx != 'I' || ss.mu.unsynced)); unsolicited &&
		(l.replica || typ == 'E' && ss.mu.pinned == "" && ss.freshnessOn()) {
		switch {
		case !l.replica && !ss.txPool:
			// Session pooling: the client holds this backend's PID
			// (BackendKeyData), so its termination (pg_terminate_backend)
			// ends the session with its FATAL at once, as directly. A
			// primary that is shutting down or crashed is an outage the
			// session rides out on replicas instead (the 'E' case
			// below tells them apart).
			st.drop, st.deferFatal = true, true
		default:
			// Unsolicited, from a link nobody waits on: anything from
			// a replica (a FATAL before a shutdown, a ParameterStatus
			// after a reload), or in transaction pooling the primary's
			// FATAL before it goes away. The client is talking to
			// another server and must not see it. (NOTIFY and notices
			// from the primary still pass: LISTEN pins the session
			// there.)
			st.drop = true
		}
	}
}

// closeAnsweredLocked counts a client's CloseComplete relayed from l. It
// answers the oldest of the batch's Closes still counted: one a barrier
// waits past (expect.skip), else one written since the last barrier
// (l.closes, of the batch being written). The barrier need not be at the
// head of the swallow queue: an answer the proxy drops may come between
// the client's Close and the barrier (a learnTypes Describe after a
// Parse; differential 5085097148163703010, where the barrier's own
// CloseComplete then reached the client and the batch hung). Callers
// hold ss.mu.
func (l *link) closeAnsweredLocked() {
	for i := range l.swallow {
		e := &l.swallow[i]
		if e.batch < l.rfqs {
			continue // (forgotten: forgetSwallowLocked)
		}
		if e.batch > l.rfqs {
			break
		}
		if e.kind == 'b' && e.skip > 0 {
			e.skip--
			return
		}
	}
	if l.closes > 0 && l.rfqs == l.batches {
		l.closes--
	}
}

// clientDescribeFirstLocked reports whether a Describe of a statement the
// client wrote to l before the proxy's Describe that after dates (see
// expect.after) still awaits its ParameterDescription in the batch being
// answered. Callers hold ss.mu.
func clientDescribeFirstLocked(l *link, after uint64) bool {
	for _, w := range l.describes {
		if w.batch < l.rfqs {
			continue // (a batch that ended unanswered)
		}
		return w.batch == l.rfqs && w.seq <= after
	}
	return false
}

// swallowStepLocked decides a backend message against the head of l's
// swallow queue (e, of the batch being answered): answers to what the
// proxy injected are dropped, the client's own pass.
func (ss *session) swallowStepLocked(l *link, e expect, typ byte) relayStep {
	var st relayStep
	switch {
	case e.kind == 'b' && typ == '3' && e.skip > 0:
		// The client's own Close answered (counted by stepLocked:
		// closeAnsweredLocked).
	case e.kind == 'b' && typ == '3':
		st.drop = true
		l.swallow = l.swallow[1:]
		l.barrier = barrierPassed
		ss.turn.Broadcast()
	case e.kind == 'b' && typ == 'E':
		// The batch failed before the barrier: the server skips
		// to Sync, the barrier is never answered. The client
		// gets the error.
		n := 0
		for n < len(l.swallow) && l.swallow[n].batch == l.rfqs {
			n++
		}
		ss.forgetSwallowLocked(l, n)
	case e.kind == 'b':
	case e.kind == 'i' && e.skip == 0 && typ == 't' && clientDescribeFirstLocked(l, e.after):
		// The answer to a Describe of the client's written before the
		// proxy's: the client's.
	case e.kind == 'i' && e.skip == 0 && typ == 't':
		st.drop, st.inferred = true, e.parse
		l.swallow[0].skip = 1 // RowDescription or NoData follows
	case e.kind == 'i' && e.skip == 1 && (typ == 'T' || typ == 'n'):
		st.drop = true
		l.swallow = l.swallow[1:]
	case e.kind == 'i' && typ == 'E':
		// The client's Parse just before it failed: the server
		// skips the Describe. The error is the client's.
		l.swallow = l.swallow[1:]
	case e.kind == 'i':
		// The answer to the client's Parse, or an asynchronous
		// message: the client's.
	case e.kind == 'd' && typ == 't':
		st.drop = true // the rest of the answer follows
	case e.kind == 'd' && (typ == 'T' || typ == 'n'):
		st.drop, st.head, st.shape = true, e, true
		l.swallow = l.swallow[1:]
	case e.kind == 'Z' && typ == 'A':
		// Asynchronous: a notification. The client gets it.
	case e.kind == 'Z':
		st.drop, st.head = true, e
		st.endInjected = typ == 'Z'
	case e.kind == expectExecute && typ == 'A':
		// Asynchronous: a notification. The client gets it.
	case e.kind == expectExecute && typ != 'E':
		st.drop = true // its rows, COPY data, notices
		if typ == 'C' || typ == 's' || typ == 'I' {
			l.swallow = l.swallow[1:]
		}
	case e.kind == typ:
		st.drop = true
		l.swallow = l.swallow[1:]
		if typ == 'E' {
			// The proxy failed the batch on purpose (a local
			// error): the server skips to Sync, so no barrier of
			// the batch is answered, one written since or later.
			l.failed = l.rfqs + 1
			ss.failBarriersLocked(l)
		}
	case typ == 'E':
		ss.injectionFailedLocked(l, e, &st)
	}
	return st
}

// injectionFailedLocked handles an ErrorResponse to an injected Parse or
// Close (e): the server now skips the rest of the batch, so its other
// injections never answer.
func (ss *session) injectionFailedLocked(l *link, e expect, st *relayStep) {
	if e.kind == '1' && e.undo != nil && e.undo.kind == 'R' && e.undo.name == "" {
		// It was a Parse of the unnamed statement, and it ran:
		// PostgreSQL released the unnamed statement it held
		// before parsing the new one, so there is none now,
		// not the one the record had before.
		u := *e.undo
		u.prevServer = ""
		l.swallow[0].undo = &u
	}
	n := 0
	for n < len(l.swallow) && l.swallow[n].batch == l.rfqs && l.swallow[n].kind != 'Z' {
		n++
	}
	if n < len(l.swallow) && l.swallow[n].batch == l.rfqs {
		// The injection had a Sync of its own (before a
		// simple Query): the error and the skip end there,
		// unseen; the client's Query runs after it.
		ss.forgetSwallowLocked(l, n)
		st.drop, st.head = true, l.swallow[0]
	} else {
		// In the client's batch: the client sees the error as
		// its own statement's.
		ss.forgetSwallowLocked(l, n)
		l.errInjected = true
	}
}

// dropMessage reads and drops the backend message h on l (stepLocked
// said so), recording what it carries: a ParameterStatus, an injected
// statement's failure (taken back: undo), a FATAL of the session's own
// backend (the session may end with it), the ReadyForQuery that ends an
// injection. body is the reader's reusable buffer. errReleased: the
// connection went back to its pool (transaction pooling, idle now).
func (ss *session) dropMessage(l *link, h wire.Header, st relayStep, body []byte) ([]byte, error) {
	srv := l.conn
	var err error
	if h.Type == 'Z' || h.Type == 'S' || h.Type == 'E' || st.shape || st.inferred != "" {
		if body, err = wire.ReadBody(srv.R, h.Len, body); err != nil {
			ss.linkFailed(l, err, false)
			return body, errServerGone
		}
		if st.inferred != "" {
			ss.mu.Lock()
			ss.noteInferredLocked(st.inferred, body)
			ss.mu.Unlock()
		}
		if st.shape {
			ss.mu.Lock()
			l.shape, l.shapeGot = shapeDone, shapeOf(h.Type, body)
			ss.turn.Broadcast()
			ss.mu.Unlock()
		}
		switch h.Type {
		case 'S':
			ss.droppedParam(l, st, body)
		case 'E':
			ss.droppedError(l, st, body)
		}
	} else if err := wire.Discard(srv.R, h.Len); err != nil {
		ss.linkFailed(l, err, false)
		return body, errServerGone
	}
	if st.endInjected {
		ss.mu.Lock()
		l.rfqs++
		l.answered = 0
		if len(body) == 1 {
			ss.positionsDueLocked(l, body[0])
		}
		l.swallow = l.swallow[1:]
		ss.turn.Broadcast() // syncPrimary may wait for it
		ss.mu.Unlock()
	}
	if srv.R.Buffered() == 0 {
		// Client messages relayed before the dropped ones may still
		// sit in the client buffer: the flush is due now.
		ss.wmu.Lock()
		if ss.w != nil && ss.w.Buffered() > 0 {
			ss.flushOut()
		}
		ss.wmu.Unlock()
	}
	if st.endInjected && ss.txPool && ss.releaseIdle(l) {
		return body, errReleased
	}
	return body, nil
}

// droppedParam records a ParameterStatus dropped from l: the server's
// value, and for the client the values of a Sync of the proxy's own
// (heldParams) or of a batch that failed (params.undone).
func (ss *session) droppedParam(l *link, st relayStep, body []byte) {
	var ps pgproto3.ParameterStatus
	if ps.Decode(body) != nil {
		return
	}
	l.conn.Params[ps.Name] = ps.Value
	if st.head.keepParams {
		ss.mu.Lock()
		ss.mu.heldParams = append(ss.mu.heldParams, ps)
		ss.mu.Unlock()
	}
	if st.head.undoneParams {
		ss.wmu.Lock()
		ss.params.undone = append(ss.params.undone, ps)
		ss.wmu.Unlock()
	}
}

// droppedError handles an ErrorResponse dropped from l. A FATAL of the
// session's own primary backend (or in place of the answer to the proxy's
// own message there) ends the session with it when the server is still
// up: the backend was terminated. An injected statement's failure is
// logged and its undo recorded: the client was not told, so a failure
// that follows is reported to it by the proxy.
func (ss *session) droppedError(l *link, st relayStep, body []byte) {
	if (st.deferFatal || !l.replica && !ss.txPool) && isFatal(body) {
		// Units wait while this is decided (routeBatch).
		ss.mu.Lock()
		ss.mu.checkingPrimary = true
		ss.mu.Unlock()
		if ss.serverUp(l.addr) {
			// Terminated: the session ends with the error, also when a
			// replica was answering it (its statement is cancelled, as
			// the server's own would have been interrupted).
			ss.endWithServerError(body)
		}
		ss.mu.Lock()
		ss.mu.checkingPrimary = false
		ss.turn.Broadcast()
		ss.mu.Unlock()
	}
	if st.head.kind != 0 {
		ss.log.Warn("a statement the proxy injected failed", zap.String("server", l.addr), zap.String("error", errorText(body)))
	}
	if st.head.undo != nil {
		ss.mu.Lock()
		l.undo = append(l.undo, *st.head.undo)
		ss.mu.Unlock()
	}
}

// serverToClient relays l's messages to the client, dropping responses to
// injected messages. It tracks ReadyForQuery (pending count, transaction
// status) and ParameterStatus. A failed primary ends the session; a failed
// replica ends the session only when it was serving the client.
func (ss *session) serverToClient(l *link) error {
	srv := l.conn
	var body []byte
	sawFatal := false
	for {
		h, err := wire.ReadHeader(srv.R)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && srv.R.Buffered() == 0 {
				return errInterrupted
			}
			ss.linkFailed(l, err, sawFatal)
			return errServerGone
		}
		failpoint(&failpoints.reader, h.Type, "server reader")

		ss.mu.Lock()
		st := ss.stepLocked(l, h.Type)
		drop := st.drop
		ss.mu.Unlock()
		if h.Type == 'E' && !drop {
			raceWait(func(w *RaceWindows) time.Duration { return w.AfterErrorHeader })
		}

		if drop {
			if body, err = ss.dropMessage(l, h, st, body); err != nil {
				return err
			}
			continue
		}

		var held bool
		if body, held, err = ss.retryableAnswer(l, h, body); held {
			if err != nil {
				return err
			}
			continue
		}
		if h.Type == 'S' && h.Len <= wire.MaxSmallBodyLen {
			if body, err = wire.ReadBody(srv.R, h.Len, body); err != nil {
				ss.linkFailed(l, err, sawFatal)
				return errServerGone
			}
			if werr := ss.relayParameterStatus(l, body); werr != nil {
				ss.conn.Close()
				return werr
			}
			continue
		}
		if h.Type == 'Z' {
			if werr := ss.beforeReady(l); werr != nil {
				ss.conn.Close()
				return werr
			}
		}
		var preread bool
		if body, preread, err = ss.preread(l, &h, body); err != nil {
			ss.linkFailed(l, err, sawFatal)
			return errServerGone
		}
		var closeNow bool
		var werr error
		body, closeNow, werr, err = ss.copyToClient(l, h, body, preread, &sawFatal)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return err // interrupted mid-message: the stream is unusable
			}
			ss.mu.Lock()
			l.torn = true // (part of the message may be the client's)
			ss.mu.Unlock()
			ss.linkFailed(l, err, sawFatal)
			return errServerGone
		}
		if werr != nil {
			// The client is gone; the session goroutine sees it too.
			ss.conn.Close()
			return werr
		}
		if closeNow {
			ss.kill(fatalf(codeAdminShutdown, "terminating connection due to administrator command"))
			return errInterrupted
		}
		if h.Type == 'Z' && ss.txPool && ss.releaseIdle(l) {
			return errReleased
		}
	}
}

// beforeReady runs before l's ReadyForQuery reaches the client: a query
// timeout's cancel settles (timeouts.go), and the ParameterStatus messages
// held back or owed after a RESET go first. An error is the client's.
func (ss *session) beforeReady(l *link) error {
	ss.awaitTimeoutCancel(l)
	if err := ss.reportHeldParams(); err != nil {
		return err
	}
	return ss.reportResets(l)
}

// preread reads the body of a message the relay changes or notes before it
// goes on: an ErrorResponse after a query timeout or with stale binds
// (rewriteError), a row description whose shape is noted for a statement
// (noteShapeLocked). It reports whether it read the body, which h's
// length then measures; an error is the server's.
func (ss *session) preread(l *link, h *wire.Header, body []byte) ([]byte, bool, error) {
	if l.shapeNext != "" && h.Type != 'T' && h.Type != 'n' && h.Type != 't' {
		l.shapeNext = "" // (no row description follows: nothing to note)
	}
	downCheck := h.Type == 'E' && !l.replica && ss.mayKeepAfterLoss(l)
	if !(h.Type == 'E' && (l.queryTimedOut.Load() || l.staleBinds.Load() || downCheck) || l.shapeNext != "" && h.Type != 't') ||
		h.Len > wire.MaxSmallBodyLen*100 {
		return body, false, nil
	}
	body, err := wire.ReadBody(l.conn.R, h.Len, body)
	if err != nil {
		return body, false, err
	}
	if h.Type == 'E' {
		if downCheck && isFatal(body) && !ss.serverUp(l.addr) {
			// The primary's backend ended with the server (its
			// postmaster gone, or shutting down), not on its own: a
			// loss of the primary under the units in flight, which the
			// session may outlive (keepAfterLoss) instead of ending
			// with this FATAL. (A backend terminated alone, the server
			// up, ends the session with its FATAL as directly.)
			return body, false, errors.New("the primary's backend ended with the server: " + errorText(body))
		}
		body = ss.rewriteError(l, body)
	} else {
		ss.mu.Lock()
		ss.noteShapeLocked(l, h.Type, body)
		ss.mu.Unlock()
	}
	h.Len = len(body)
	return body, true, nil
}

// retryableAnswer handles a message from l while a retryable read there
// has not answered the client yet (l.awaitingFirst): its preamble is held
// back, a FATAL error fails the read over to another server (SPEC §7),
// and any other message first releases what was held. held: the message
// was consumed here, and err, if set, ends the reader; otherwise the
// caller relays it.
func (ss *session) retryableAnswer(l *link, h wire.Header, body []byte) (_ []byte, held bool, err error) {
	srv := l.conn
	if l.awaitingFirst.Load() && isPreamble(h.Type) && h.Len <= wire.MaxSmallBodyLen && len(l.held) < 1<<16 {
		// ParseComplete, BindComplete, parameter and row descriptions
		// of a retryable read are held back until its first row,
		// completion or error: a replica that fails after sending
		// only these has not answered, and the read may still run
		// elsewhere (SPEC §7).
		start := len(l.held)
		l.held = append(l.held, h.Type, 0, 0, 0, 0)
		binary.BigEndian.PutUint32(l.held[start+1:], uint32(h.Len+4))
		if body, err = wire.ReadBody(srv.R, h.Len, body); err != nil {
			l.held = l.held[:0]
			ss.linkFailed(l, err, false)
			return body, true, errServerGone
		}
		ss.mu.Lock()
		if h.Type == 't' {
			ss.paramsDescribedLocked(l, body)
		} else {
			ss.noteShapeLocked(l, h.Type, body)
		}
		ss.mu.Unlock()
		l.held = append(l.held, body...)
		return body, true, nil
	}
	if l.awaitingFirst.Load() && h.Type == 'E' && h.Len <= wire.MaxSmallBodyLen*100 {
		// A retryable read whose replica answers with a FATAL error
		// (a shutdown racing the read): nothing reached the client
		// yet, so the read runs once more elsewhere (SPEC §7).
		if body, err = wire.ReadBody(srv.R, h.Len, body); err != nil {
			ss.linkFailed(l, err, false)
			return body, true, errServerGone
		}
		if isFatal(body) {
			l.held = l.held[:0]
			ss.linkFailed(l, errors.New(errorText(body)), false)
			return body, true, errServerGone
		}
		if bytes.Contains(body, []byte(unloggedOnStandby)) {
			// A relation made UNLOGGED where the proxy did not see it
			// (another client of the primary): the next read of it looks
			// it up again, and goes to the primary.
			ss.srv.forgetUnlogged(ss)
		}
		body = ss.rewriteError(l, body)
		h.Len = len(body)
		// The held ParseCompletes confirm their Parses first: only
		// what comes after them failed.
		if err := ss.relayHeld(l); err != nil {
			ss.conn.Close()
			return body, true, err
		}
		ss.mu.Lock()
		ss.serverErrorLocked(l)
		ss.mu.Unlock()
		if err := ss.relay(h, body); err != nil {
			ss.conn.Close()
			return body, true, err
		}
		l.awaitingFirst.Store(false)
		ss.markAnswered(l)
		return body, true, nil
	}
	if l.awaitingFirst.Load() {
		l.awaitingFirst.Store(false)
		if err := ss.relayHeld(l); err != nil {
			ss.conn.Close()
			return body, true, err
		}
		ss.markAnswered(l)
	}
	return body, false, nil
}

// markAnswered notes that the first byte of the retryable read awaited
// on l is about to reach the client (awaitFirst waits for it).
func (ss *session) markAnswered(l *link) {
	ss.mu.Lock()
	if ss.mu.awaiting == l && !ss.mu.answered {
		ss.mu.answered = true
		ss.turn.Broadcast()
	}
	ss.mu.Unlock()
}

// copyToClient writes one message of l (header h; its body in body when
// preread) to the client under wmu, noting what its arrival settles:
// statement answers, ReadyForQuery (closeNow: the session is to close),
// ParameterStatus, errors (sawFatal), CommandComplete. err is a failure
// reading the server, werr one writing the client.
func (ss *session) copyToClient(l *link, h wire.Header, body []byte, preread bool, sawFatal *bool) (_ []byte, closeNow bool, werr, err error) {
	srv := l.conn
	ss.wmu.Lock()
	if h.Type == 'Z' && ss.params.token != nil {
		// (Under the same wmu as the ReadyForQuery: tellToken.)
		buf, _ := ss.params.token.Encode(nil)
		ss.params.token = nil
		_, werr = ss.out().Write(buf)
	}
	if werr == nil {
		werr = wire.WriteHeader(ss.out(), h)
	}
	switch {
	case werr != nil:
	case h.Type == '1' || h.Type == '3':
		if err = wire.Copy(ss.out(), srv.R, h.Len); err != nil {
			var we *wire.WriteError
			if errors.As(err, &we) {
				werr, err = we.Err, nil
			}
		}
		ss.mu.Lock()
		l.answered++
		l.stmtAnsweredLocked(h.Type)
		ss.turn.Broadcast() // settleOps may wait for it
		ss.mu.Unlock()
	case h.Type == 'Z' || h.Type == 'S' || (h.Type == 'E' || h.Type == 't') && h.Len <= wire.MaxSmallBodyLen*100 || h.Type == 'C':
		if !preread {
			if body, err = wire.ReadBody(srv.R, h.Len, body); err != nil {
				break
			}
		}
		_, werr = ss.out().Write(body)
		switch h.Type {
		case 'Z':
			if len(body) == 1 {
				closeNow = ss.readyForQuery(l, body[0])
			}
		case 'S':
			var ps pgproto3.ParameterStatus
			if ps.Decode(body) == nil {
				srv.Params[ps.Name] = ps.Value
			}
		case 'E':
			*sawFatal = isFatal(body)
			ss.mu.Lock()
			ss.serverErrorLocked(l)
			ss.mu.Unlock()
		case 't':
			ss.mu.Lock()
			ss.paramsDescribedLocked(l, body)
			ss.mu.Unlock()
		case 'C':
			ss.mu.Lock()
			l.answered++
			ss.mu.Unlock()
			ss.commandComplete(body)
		}
	case preread: // a RowDescription or NoData read for its shape
		_, werr = ss.out().Write(body)
		ss.mu.Lock()
		l.answered++
		ss.mu.Unlock()
	default:
		if answers(h.Type) {
			ss.mu.Lock()
			l.answered++
			ss.mu.Unlock()
		}
		err = wire.Copy(ss.out(), srv.R, h.Len)
		if err != nil {
			var we *wire.WriteError
			if errors.As(err, &we) {
				werr, err = we.Err, nil
			}
		}
	}
	ss.wroteLocked(h.Type)
	if werr == nil && err == nil && srv.R.Buffered() == 0 {
		werr = ss.flushOut()
	}
	ss.wmu.Unlock()
	return body, closeNow, werr, err
}

// resetNote marks a batch (link.batches) whose statements RESET settings
// (all of them, or names) or DISCARD ALL.
type resetNote struct {
	batch uint64
	all   bool
	names []string // lower case
}

// noteResets records on l the RESETs among a unit's statements, about to
// be written in l's current batch (session goroutine).
func (ss *session) noteResets(l *link, ds []*classified) {
	var n *resetNote
	for _, d := range ds {
		for _, st := range d.Statements {
			reset := st.Effect == classify.EffectDiscardAll || st.Effect == classify.EffectSet && st.Setting.Reset
			if !reset {
				continue
			}
			if n == nil {
				n = &resetNote{}
			}
			if st.Effect == classify.EffectDiscardAll || st.Setting.Name == "" {
				n.all = true
			} else {
				n.names = append(n.names, strings.ToLower(st.Setting.Name))
			}
		}
	}
	if n == nil {
		return
	}
	ss.mu.Lock()
	n.batch = l.batches
	l.resets = append(l.resets, *n)
	ss.mu.Unlock()
}

// relayParameterStatus relays a server's ParameterStatus to the client. A
// RESET (or DISCARD ALL) returns a server connection to the server's
// defaults, where PostgreSQL returns a session to the values it logged in
// with: for a client's startup setting the client is told that value, and
// nothing when it already knew it. The server itself gets the startup
// values back before its next unit (settingsUnknown).
func (ss *session) relayParameterStatus(l *link, body []byte) error {
	var ps pgproto3.ParameterStatus
	if ps.Decode(body) != nil {
		return ss.relay(wire.Header{Type: 'S', Len: len(body)}, body)
	}
	l.conn.Params[ps.Name] = ps.Value
	value := ps.Value
	ss.mu.Lock()
	for len(l.resets) > 0 && l.resets[0].batch < l.rfqs {
		l.resets = l.resets[1:]
	}
	inReset := len(l.resets) > 0 && l.resets[0].batch == l.rfqs
	if inReset {
		name := strings.ToLower(ps.Name)
		n := l.resets[0]
		if sv, ok := ss.params.startup[name]; ok && (n.all || slices.Contains(n.names, name)) && value == l.conn.Defaults[ps.Name] {
			value = sv
		}
	}
	ss.mu.Unlock()
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if inReset {
		// Held until the batch's ReadyForQuery, to go out in the server's
		// order (by name) with the startup values the RESET gave back
		// (reportResets).
		ss.params.resetHeld = append(ss.params.resetHeld, pgproto3.ParameterStatus{Name: ps.Name, Value: value})
		return nil
	}
	if last, ok := ss.params.reported[ps.Name]; ok && last == value {
		// Unchanged for the client: PostgreSQL reports a parameter only
		// when its value changed from the one it last reported.
		return nil
	}
	if value != ps.Value {
		ps.Value = value
		body, _ = ps.Encode(nil)
		body = body[5:]
	}
	if ss.params.reported != nil {
		ss.params.reported[ps.Name] = value
	}
	if err := wire.WriteHeader(ss.out(), wire.Header{Type: 'S', Len: len(body)}); err != nil {
		return err
	}
	if _, err := ss.out().Write(body); err != nil {
		return err
	}
	if l.conn.R.Buffered() == 0 {
		return ss.flushOut()
	}
	return nil
}

// reportHeldParams tells the client, before a ReadyForQuery of its own,
// the parameter changes a server reported where the proxy ended a part of
// the client's unit (endReplicaStream), unless it knows them already.
func (ss *session) reportHeldParams() error {
	ss.mu.Lock()
	held := ss.mu.heldParams
	ss.mu.heldParams = nil
	// A unit that failed or rolled back undid those SETs: PostgreSQL
	// reports nothing then (the value is the one it last reported),
	// unless a COMMIT of the unit made them first.
	undone := (ss.mu.unitErr || ss.mu.lastTag == "ROLLBACK") && !ss.mu.heldCommitted
	ss.mu.heldCommitted = false
	ss.mu.Unlock()
	if len(held) == 0 || undone {
		return nil
	}
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	for _, ps := range ss.unreportedLocked(held) {
		buf, err := ps.Encode(nil)
		if err != nil {
			return err
		}
		if _, err := ss.out().Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// unreportedLocked returns those of ps whose value the client was not told
// last, and notes them as told. Callers hold ss.wmu.
func (ss *session) unreportedLocked(ps []pgproto3.ParameterStatus) []wire.Encoder {
	var out []wire.Encoder
	for i := range ps {
		p := &ps[i]
		if last, ok := ss.params.reported[p.Name]; ok && last == p.Value {
			continue
		}
		if ss.params.reported != nil {
			ss.params.reported[p.Name] = p.Value
		}
		out = append(out, p)
	}
	return out
}

// reportResets, at the ReadyForQuery ending a batch with a RESET, tells
// the client the startup values the RESET returned it to that the server
// did not report (its own default did not change) and the client does not
// know yet, as PostgreSQL would have.
func (ss *session) reportResets(l *link) error {
	ss.mu.Lock()
	if len(l.resets) == 0 || l.resets[0].batch != l.rfqs {
		ss.mu.Unlock()
		return nil
	}
	n := l.resets[0]
	l.resets = l.resets[1:]
	failed := l.failed == l.rfqs+1
	ss.mu.Unlock()
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	out := ss.params.resetHeld
	ss.params.resetHeld = nil
	if !failed { // (a failed batch's RESET or DISCARD was rolled back)
		for _, st := range ss.mu.settings.startup {
			name := strings.ToLower(st.name)
			if !n.all && !slices.Contains(n.names, name) {
				continue
			}
			for server := range l.conn.Defaults { // reported parameters, in the server's spelling
				if strings.ToLower(server) == name && !slices.ContainsFunc(out, func(p pgproto3.ParameterStatus) bool { return p.Name == server }) {
					out = append(out, pgproto3.ParameterStatus{Name: server, Value: st.value})
				}
			}
		}
	}
	// A server reports parameters in the order of its settings' names.
	slices.SortStableFunc(out, func(a, b pgproto3.ParameterStatus) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	for _, ps := range out {
		if last, ok := ss.params.reported[ps.Name]; ok && last == ps.Value {
			continue // unchanged for the client
		}
		buf, _ := ps.Encode(nil)
		if _, err := ss.out().Write(buf); err != nil {
			return err
		}
		if ss.params.reported != nil {
			ss.params.reported[ps.Name] = ps.Value
		}
	}
	return nil
}

// releaseIdle is called by l's reader after each ReadyForQuery in
// transaction pooling. When l owes nothing, serves no open transaction,
// batch or retryable read, and the session is not pinned to it, the
// connection goes back to its pool without a reset (its state stays
// recorded in serverState) and true is returned: the reader ends. While
// the session goroutine still claims l (it is writing to it), the reader
// waits here rather than in a socket read, so the claim's end can still
// release it. A retryable read whose answer has begun reaching the client
// (answered) does not hold l: the session goroutine may not have seen
// that yet, and nothing would wake this reader again once it has (an
// idle client kept the connection until its next statement).
func (ss *session) releaseIdle(l *link) bool {
	ss.mu.Lock()
	for {
		if l.pool == nil || ss.mu.killed || l.stopping || l.batches != l.rfqs || len(l.swallow) > 0 ||
			ss.mu.awaiting == l && !ss.mu.answered || l == ss.mu.cur && (ss.mu.tx != 'I' || ss.mu.unsynced) || !l.replica && ss.mu.pinned != "" {
			ss.mu.Unlock()
			return false
		}
		if l.claims == 0 {
			break
		}
		l.parked = true
		ss.readers.Wait()
		l.parked = false
	}
	l.applyServerUndoLocked() // no claim is left: the reader owns l's state
	l.ops = nil
	l.released = true
	cancelled := l.cancelled
	if ss.mu.primary == l {
		ss.mu.primary = nil
	}
	if ss.mu.replicas[l.addr] == l {
		delete(ss.mu.replicas, l.addr)
	}
	if ss.mu.cur == l {
		ss.mu.cur = nil
	}
	ss.mu.Unlock()
	// What was relayed must not wait for a server message that will not
	// come to this reader any more.
	ss.wmu.Lock()
	if ss.w != nil && ss.w.Buffered() > 0 {
		ss.flushOut()
	}
	ss.wmu.Unlock()
	if cancelled {
		l.pool.Discard(l.conn)
	} else {
		l.pool.Release(l.conn)
	}
	return true
}

// claim marks l as used by the session goroutine; false when l was
// released or died meanwhile (the caller gets another connection).
// Callers hold ss.mu.
func (l *link) claimLocked() bool {
	if l == nil || l.released || l.dead {
		return false
	}
	l.claims++
	return true
}

// claimLink is claimLocked for callers holding no lock.
func (ss *session) claimLink(l *link) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return l.claimLocked()
}

// unclaim ends one claim of l, waking its reader if it waits to release.
func (ss *session) unclaim(l *link) {
	if l == nil {
		return
	}
	ss.mu.Lock()
	l.claims--
	if l.parked {
		ss.readers.Broadcast()
	}
	ss.mu.Unlock()
}

// isPreamble reports the message types that precede a statement's answer
// proper (see the held-back rule in serverToClient).
func isPreamble(t byte) bool {
	switch t {
	case '1', '2', 't', 'T', 'n':
		return true
	}
	return false
}

// relayHeld writes the messages held back for a retryable read, if any.
func (ss *session) relayHeld(l *link) error {
	if len(l.held) == 0 {
		return nil
	}
	// The held ParseCompletes and CloseCompletes confirm the client's
	// statement changes, as relayed ones do.
	ss.mu.Lock()
	for b := l.held; len(b) >= 5; {
		n := int(binary.BigEndian.Uint32(b[1:5])) + 1
		if n < 5 || n > len(b) {
			break
		}
		if b[0] == '1' || b[0] == '3' {
			l.stmtAnsweredLocked(b[0])
		}
		if answers(b[0]) {
			l.answered++
		}
		b = b[n:]
	}
	ss.mu.Unlock()
	ss.wmu.Lock()
	_, err := ss.out().Write(l.held)
	ss.wroteLocked(l.held[0]) // (preambles: isPreamble)
	ss.wmu.Unlock()
	l.held = l.held[:0]
	return err
}

// relay writes one already-read message to the client and flushes.
func (ss *session) relay(h wire.Header, body []byte) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	ss.wroteLocked(h.Type)
	if err := wire.WriteHeader(ss.out(), h); err != nil {
		return err
	}
	if _, err := ss.out().Write(body); err != nil {
		return err
	}
	return ss.flushOut()
}

// readyForQuery records a client-visible ReadyForQuery from l and reports
// whether a draining session must close now.
func (ss *session) readyForQuery(l *link, status byte) (closeNow bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.readyForQueryLocked(l, status)
}

// readyForQueryLocked is readyForQuery for callers holding ss.mu.
func (ss *session) readyForQueryLocked(l *link, status byte) (closeNow bool) {
	l.rfqs++
	l.answered = 0
	for len(l.ops) > 0 && l.ops[0].batch < l.rfqs {
		l.ops = l.ops[1:] // answered without a confirmation we could match
	}
	ss.mu.pending--
	if n := len(ss.mu.fates); n > 0 {
		// (Shifted in place, not resliced: the array is kept for the
		// next units, no allocation per unit.)
		copy(ss.mu.fates, ss.mu.fates[1:])
		ss.mu.fates = ss.mu.fates[:n-1]
	}
	if ss.mu.pending == 0 {
		ss.mu.fates = ss.mu.fates[:0]
		ss.mu.commitInFlight = false // its outcome is known
		ss.mu.unkeepable = false
	}
	ss.noteReadyLocked(l) // timeouts.go
	ss.mu.doneSeq++
	if len(ss.mu.cancels) > 0 {
		ss.relayCancelsLocked() // sqlcancel.go
	}
	if status == 'I' {
		ss.mu.lastIdleDone = ss.mu.doneSeq
	}
	ss.mu.tx = status
	ss.positionsDueLocked(l, status)
	if status == 'I' {
		ss.unitEnded()
		if ss.mu.pending == 0 {
			ss.holdFallbackLocked(nil)
			if !ss.mu.last.start.IsZero() {
				ss.srv.metrics.QueryDuration(ss.mu.last.target, time.Since(ss.mu.last.start).Seconds())
				ss.mu.last.start = time.Time{}
			}
		}
	}
	ss.turn.Broadcast()
	return ss.mu.draining && ss.idleLocked() && ss.mu.unitRuns
}

// linkFailed handles a server connection that broke. Losing the primary,
// or a replica while it served the client, ends the session; an idle
// replica link is simply dropped.
func (ss *session) linkFailed(l *link, err error, toldClient bool) {
	l.conn.MarkBroken()
	// The primary's units in flight may be the proxy's to answer
	// (keepAfterLoss): the writer is taken first (lock order), so that
	// nothing the session goroutine sends once l is dead overtakes them.
	wrote := !l.replica && ss.lockWriter(time.Second)
	ss.mu.Lock()
	l.dead = true
	serving := l == ss.mu.cur && (ss.mu.pending > 0 || ss.mu.tx != 'I')
	if ss.mu.awaiting == l && !ss.mu.answered {
		serving = false // the session goroutine retries the read elsewhere
		ss.wakeHeldLocked()
	}
	kept := wrote && serving && ss.keepAfterLossLocked(l, toldClient)
	idleGoesOn := !l.replica && !serving && ss.freshnessOn() && ss.mu.pinned == "" && !(toldClient && !ss.txPool)
	if idleGoesOn {
		l.kept = true // (for a unit being written to l: answerLostUnit)
	}
	ss.forgetSwallowLocked(l, len(l.swallow)) // they will never be answered
	if kept {
		l.kept = true
	}
	// The units in flight of a session that goes on fail
	// (answerLostLocked): the client relies on nothing they did.
	ss.positionsLostLocked(l, !kept)
	// Parses and Closes the server never confirmed did not happen for the
	// client (a read retried elsewhere writes them again).
	for _, op := range l.ops {
		if !op.noop {
			ss.mu.undo = append(ss.mu.undo, op)
			ss.hasUndo.Store(true)
		}
	}
	l.ops = nil
	unknown := serving && !l.replica && ss.mu.commitInFlight && ss.mu.pending > 0
	var closeNow bool
	if kept {
		closeNow = ss.answerLostLocked(l)
	}
	ss.turn.Broadcast()
	ss.mu.Unlock()
	if wrote {
		// What the reader relayed before the loss may still sit in the
		// client buffer (it flushes when the server's buffer runs dry,
		// and the error that ended l may have followed a ReadyForQuery
		// in the same read): it is due now, or the client waits for it
		// for ever (a drill's session in a block did, 10 s).
		if ss.w != nil && ss.w.Buffered() > 0 {
			ss.flushOut()
		}
		ss.wmu.Unlock()
	}
	if kept {
		// Writes the session goroutine may still make to l fail now, and
		// sendUnit answers them (answerLostUnit).
		l.conn.Close()
		ss.log.Warn("primary connection lost with units in flight: they failed, the session continues",
			zap.String("server", l.addr), zap.Bool("outcome_unknown", unknown), zap.Error(err))
		if closeNow {
			ss.kill(fatalf(codeAdminShutdown, "terminating connection due to administrator command"))
		}
		return
	}
	if l.replica && ss.srv != nil {
		// The replica may be restarting, and may come back behind the
		// replay positions read there on demand.
		ss.srv.observed.Delete(l.addr)
	}
	if l.replica && !serving {
		ss.log.Info("idle replica connection lost", zap.String("server", l.addr), zap.Error(err))
		return
	}
	if idleGoesOn {
		// The primary went away while the session was not using it: reads
		// can go on on replicas; the next unit for the primary reconnects
		// or fails with an error (reconnectPrimary). A unit the session
		// goroutine is writing to l meanwhile ran nowhere: it gets its
		// error and the session goes on (sendUnit, answerLostUnit).
		ss.log.Info("idle primary connection lost; the session continues", zap.String("server", l.addr), zap.Error(err))
		return
	}
	if unknown && !toldClient {
		// A COMMIT, or a write outside a transaction block, was sent and
		// its answer never came: it may have committed. Say so, and never
		// run it again (SQLSTATE 08007, as drivers and PostgreSQL name it).
		l.conn.MarkBroken()
		ss.log.Warn("primary connection lost with a commit in flight", zap.String("server", l.addr), zap.Error(err))
		ss.kill(&clientError{severity: "FATAL", code: codeTransactionResolutionUnknown,
			message: "pg-kinetic: the connection to the primary was lost before the outcome of the transaction was known",
			detail:  "server " + l.addr + ": the statement may or may not have committed; the proxy does not run it again"})
		return
	}
	ss.serverFailed(l.conn, err, toldClient)
}

// keepAfterLossLocked reports whether the session goes on after its
// primary connection l was lost while it served the client: with routing
// on (reads go on on replicas, the next write reconnects to the primary
// elected then: primaryLink), not pinned (the server session held state of
// the client's), every unit in flight whole (not open, not copying in, not
// a chain: sendUnit's keepable units), and no message of the server's cut
// short on its way to the client. The units in flight fail
// (answerLostLocked); a transaction block open after them, or open and
// idle, was lost with the server and fails until the client ends it
// (lostBlockUnit). Its token stays, and a write of it the failover lost is
// then reported (KN002), as for a session that was idle (docs/behaviour.md,
// "Losing the primary"). Callers hold ss.wmu and ss.mu.
func (ss *session) keepAfterLossLocked(l *link, toldClient bool) bool {
	return !l.replica && !toldClient && !l.torn && !ss.mu.killed && ss.freshnessOn() && ss.mu.pinned == "" &&
		(ss.mu.pending > 0 || ss.mu.tx != 'I') && !ss.mu.unkeepable && (!ss.mu.unsynced || ss.mu.writingKeepable) && ss.mu.awaiting != l
}

// mayKeepAfterLoss reports, before an error of primary connection l is
// relayed, whether losing l now could leave the session going on
// (keepAfterLossLocked, less what only the loss settles).
func (ss *session) mayKeepAfterLoss(l *link) bool {
	if !ss.freshnessOn() {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return l == ss.mu.cur && ss.mu.pinned == "" && (ss.mu.pending > 0 || ss.mu.tx != 'I') && !ss.mu.unkeepable && !ss.mu.unsynced && !ss.mu.killed
}

// keepableUnit reports whether the loss of the primary under unit u,
// about to be written there whole (ended by Sync or Query), can leave the
// session going on: not a COPY FROM STDIN (the client's data would follow
// it), nor an AND CHAIN, nor a unit that pins the session.
func keepableUnit(u unitInfo) bool {
	return !u.copyIn && !u.chained && !u.pinEffect
}

// unitFate is what the loss of the primary under a unit in flight means
// for the client: its error (mayCommit: 08007, else 08006) and the
// transaction status after it.
type unitFate struct {
	mayCommit bool
	status    byte // 'I', or 'E': a transaction block stays open, failed
	// closes: the unit is only Close messages and its Sync, outside a
	// transaction block (closesOnly), and has this many. Its loss is
	// answered as PostgreSQL answers a Close of what is not there:
	// CloseComplete; what it closed went with the server anyway.
	closes int
}

// closesOnly is the number of Close messages of b when b is only Closes
// and one Sync at its end (a driver's deallocation of cached
// statements), else 0.
func closesOnly(b *batch) int {
	n := len(b.msgs) - 1
	if n < 1 || b.msgs[n].typ != 'S' {
		return 0
	}
	for _, m := range b.msgs[:n] {
		if m.typ != 'C' {
			return 0
		}
	}
	return n
}

// failedStatusLocked is the transaction status after unit u, about to be
// written to the primary behind the units in flight, if it fails with the
// primary: idle if its last transaction statement ends the block, else
// failed if a block was open before it (as the units ahead leave it) or
// it opens one, else idle. Callers hold ss.mu.
func (ss *session) failedStatusLocked(u unitInfo) byte {
	before := ss.mu.tx
	if n := len(ss.mu.fates); n > 0 && ss.mu.pending > 0 {
		before = ss.mu.fates[n-1].status
	}
	switch {
	case u.lastTx == 'e':
		return 'I'
	case u.begins || before != 'I':
		return 'E'
	}
	return 'I'
}

// Values of session.mu.lostBlock.
const (
	lostTold   = 'T' // the client got an error in the lost block
	lostUntold = 'U' // the block was idle when it was lost
)

// answerLostLocked answers the units in flight on the lost primary
// connection l, each with an ErrorResponse and ReadyForQuery: 08007 for
// one that may have committed (its outcome is unknown and it is never run
// again), else 08006; the status its fate says. A transaction block left
// open, or one open with nothing in flight, is recorded lost (lostBlock).
// It reports whether a draining session is to close now. Callers hold
// ss.wmu and ss.mu.
func (ss *session) answerLostLocked(l *link) (closeNow bool) {
	failed := &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: codeConnectionFailure,
		Message: "pg-kinetic: lost the connection to the primary",
		Detail:  "server " + l.addr + ": the statement did not complete; the session goes on, its next write goes to the primary of the moment"}
	unknown := &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: codeTransactionResolutionUnknown,
		Message: "pg-kinetic: the connection to the primary was lost before the outcome of the transaction was known",
		Detail:  "server " + l.addr + ": the statement may or may not have committed; the proxy does not run it again"}
	if ss.mu.pending == 0 && ss.mu.tx != 'I' {
		if ss.mu.lostBlock == 0 {
			ss.mu.lostBlock = lostUntold
		}
		ss.mu.tx = 'E'
		return false
	}
	for ss.mu.pending > 0 {
		fate := unitFate{mayCommit: true, status: 'E'} // (not known: the safe words)
		if len(ss.mu.fates) > 0 {
			fate = ss.mu.fates[0]
		}
		if fate.closes > 0 { // (outside a block, committing nothing: sendUnit)
			if !ss.answerLostClosesLocked(l, fate.closes) {
				return false
			}
			closeNow = ss.readyForQueryLocked(l, 'I') || closeNow
			ss.mu.lostBlock = 0
			continue
		}
		e := failed
		if fate.mayCommit {
			e = unknown
		}
		ss.enc, _ = wire.Append(ss.enc[:0], e, &pgproto3.ReadyForQuery{TxStatus: fate.status})
		ss.wroteLocked('Z')
		if _, err := ss.out().Write(ss.enc); err != nil {
			ss.conn.Close() // the client is gone: the session goroutine sees it
			return false
		}
		ss.unitFailedLocked()
		closeNow = ss.readyForQueryLocked(l, fate.status) || closeNow
		ss.mu.lostBlock = 0
		if fate.status != 'I' {
			ss.mu.lostBlock = lostTold
		}
	}
	if err := ss.flushOut(); err != nil {
		ss.conn.Close()
	}
	return closeNow
}

// answerLostClosesLocked answers a unit of n Closes in flight on the
// lost primary connection l (the first still unanswered there) as
// PostgreSQL answers a Close of a statement or portal that does not
// exist: a CloseComplete for each the reader did not relay yet, and
// ReadyForQuery. The statements went with the server's session, so for
// the client they are closed, as it asked: the proxy's record of them
// stays closed too (the undo linkFailed queued for them is dropped).
// pgx treats a failed deallocation of its statement cache as fatal and
// closes its connection, which would hide a write the failover lost
// (KN002). false: the client is gone. Callers hold ss.wmu and ss.mu.
func (ss *session) answerLostClosesLocked(l *link, n int) bool {
	batch := l.rfqs // (the unit being answered: its ops carry its number)
	ss.mu.undo = slices.DeleteFunc(ss.mu.undo, func(op stmtOp) bool {
		return op.batch == batch && (op.kind == 'C' || op.kind == 'c')
	})
	ss.hasUndo.Store(len(ss.mu.undo) > 0)
	ss.enc = ss.enc[:0]
	for range max(n-l.answered, 0) {
		ss.enc, _ = wire.Append(ss.enc, &pgproto3.CloseComplete{})
	}
	ss.enc, _ = wire.Append(ss.enc, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	ss.wroteLocked('Z')
	if _, err := ss.out().Write(ss.enc); err != nil {
		ss.conn.Close() // the client is gone: the session goroutine sees it
		return false
	}
	return true
}

// answerLostUnit answers the unit sendUnit wrote to l (batch b; seq was
// the client's unit count before it; fate, what its loss means) when the primary was lost under it
// and the session goes on (keepAfterLoss): whatever of it the reader did
// not answer already, its Syncs never written included. false: the
// session ends instead.
func (ss *session) answerLostUnit(l *link, b *batch, seq uint64, fate unitFate) bool {
	ss.mu.Lock()
	if !l.dead && !ss.mu.killed {
		// The write failed before the reader saw the loss: closed, the
		// connection fails its read too.
		// (Bounded: a reader parked at an idle point with nothing of
		// the unit counted reads nothing until the unit's claim ends;
		// then the session ends as it did before keepAfterLoss.)
		ss.mu.Unlock()
		l.conn.Close()
		expired := false
		t := time.AfterFunc(2*time.Second, func() {
			ss.mu.Lock()
			expired = true
			ss.turn.Broadcast()
			ss.mu.Unlock()
		})
		defer t.Stop()
		ss.mu.Lock()
		for !l.dead && !ss.mu.killed && !expired {
			ss.turn.Wait()
		}
	}
	kept := l.kept && !ss.mu.killed
	ss.mu.Unlock()
	if !kept || !ss.lockWriter(time.Second) {
		return false
	}
	ss.mu.Lock()
	if n := uint64(countSyncs(b)); ss.mu.unitSeq-seq < n {
		missing := n - (ss.mu.unitSeq - seq)
		ss.mu.pending += int(missing)
		ss.mu.unitSeq += missing
		for range missing {
			ss.mu.fates = append(ss.mu.fates, fate)
		}
	}
	ss.mu.unsynced = false
	closeNow := ss.answerLostLocked(l)
	ss.turn.Broadcast()
	ss.mu.Unlock()
	ss.wmu.Unlock()
	if closeNow {
		ss.kill(fatalf(codeAdminShutdown, "terminating connection due to administrator command"))
	}
	return true
}

func (ss *session) pinnedReason() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mu.pinned
}

func errorText(body []byte) string {
	var e pgproto3.ErrorResponse
	if e.Decode(body) != nil {
		return "malformed ErrorResponse"
	}
	return e.Code + " " + e.Message
}

// isFatal reports whether an ErrorResponse body has severity FATAL or PANIC.
func isFatal(body []byte) bool {
	var e pgproto3.ErrorResponse
	if e.Decode(body) != nil {
		return false
	}
	return e.Severity == "FATAL" || e.Severity == "PANIC"
}

// commandComplete records the tag of a relayed CommandComplete (a
// ROLLBACK tag means the unit's session effects did not happen).
func (ss *session) commandComplete(body []byte) {
	tag := body
	if i := bytes.IndexByte(tag, 0); i >= 0 {
		tag = tag[:i]
	}
	ss.mu.Lock()
	if string(tag) != ss.mu.lastTag {
		ss.mu.lastTag = string(tag)
	}
	if ss.mu.lastTag == "COMMIT" {
		ss.committedLocked()
	}
	ss.mu.Unlock()
}

// committedLocked applies the session effects of the units before the one
// being answered when its COMMIT of their transaction block completed:
// they are kept whatever the rest of this unit does (an error after the
// COMMIT, in the same batch, rolls back only what follows it). Callers
// hold ss.mu.
func (ss *session) committedLocked() {
	if i := slices.IndexFunc(ss.mu.effects, func(e effect) bool { return e.commit }); i >= 0 {
		// The COMMIT's place among the effects is known: what the
		// session did before it is kept, also in this unit, also when
		// the block was the batch's implicit one (PostgreSQL commits it,
		// with a warning) and an error follows in the same batch.
		unitErr, restored, moved := ss.mu.unitErr, ss.mu.restored, ss.mu.movedEffects
		ss.mu.commitSeq = ss.mu.effects[i].seq
		ss.settleEffects(i, i+1, true)
		ss.mu.unitErr, ss.mu.restored, ss.mu.movedEffects = unitErr, restored, moved
		return
	}
	if ss.mu.tx == 'I' || len(ss.mu.effects) == 0 || ss.mu.effects[0].seq >= ss.mu.doneSeq {
		return
	}
	unitErr, restored, moved := ss.mu.unitErr, ss.mu.restored, ss.mu.movedEffects
	ss.mu.unitErr = false
	ss.unitEnded() // applies the effects of the units already answered
	ss.mu.unitErr, ss.mu.restored, ss.mu.movedEffects = unitErr, restored, moved
}

// serverFailed ends the session after a server connection it depends on
// failed. If the server already told the client why (a FATAL
// ErrorResponse, as for pg_terminate_backend), nothing is added.
func (ss *session) serverFailed(srv *pool.Conn, err error, toldClient bool) {
	srv.MarkBroken()
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		ss.log.Warn("server connection failed", zap.String("server", srv.Addr), zap.Error(err))
	} else {
		ss.log.Info("server connection closed by the server: the session ends", zap.String("server", srv.Addr))
	}
	if toldClient {
		ss.kill(nil)
		return
	}
	ss.kill(&clientError{severity: "FATAL", code: codeConnectionFailure,
		message: "pg-kinetic: lost the connection to the server", detail: "server " + srv.Addr})
}

// answers reports whether a backend message of type t is the last answer
// to one extended-protocol message: ParseComplete, BindComplete,
// CloseComplete, the row description (or NoData) ending a Describe, the
// CommandComplete, EmptyQueryResponse or PortalSuspended ending an
// Execute. (An ErrorResponse answers one too, and ends the batch.)
func answers(t byte) bool {
	switch t {
	case '1', '2', '3', 'T', 'n', 'C', 'I', 's':
		return true
	}
	return false
}
