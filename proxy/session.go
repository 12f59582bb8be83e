package proxy

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/binary"
	"hash/maphash"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// clientStatements are the statements and portals the client holds, as it
// sees them, whatever server runs its units. Owned by the session
// goroutine alone: a server reader never touches them, and what a server
// refused or skipped comes back to the session goroutine as undo ops
// (applyClientUndo, takeUndo). (DISCARD ALL's were once reset by a reader:
// the data race TestDiscardAllPipelinedBeforeParse guards against.)
type clientStatements struct {
	stmts       map[string]stmtInfo // protocol-level named statements the client prepared
	unnamed     stmtInfo            // the client's unnamed statement
	sqlPrepared map[string]sqlPrep  // SQL-level PREPARE name -> statement
	kstmts      map[string]kcmd     // extended-protocol pg_kinetic.* statements the proxy answers (localext.go)
	kportals    map[string]kportal  // and their portals
	// srvPortals are the named portals the client Bound on servers in
	// its current transaction (a local Bind into one fails with 42P03).
	srvPortals map[string]portalAge
	// savepoints are the client's savepoints in its current transaction,
	// as its units are routed (noteSavepointLocked): the portals made
	// since one go when it is rolled back to.
	savepoints []clientSavepoint
	// unitNo numbers the client's units as they are prepared, those the
	// proxy answers alone too (unitAge).
	unitNo uint64
	// portalsEnd: the portals of units (unitNo) before it end with a unit
	// already routed (a COMMIT, ROLLBACK or an implicit transaction's Sync
	// not yet answered: a pipeline); predOpen: a routed unit opened a
	// block.
	portalsEnd uint64
	predOpen   bool
	// localOpen: a batch the proxy answered alone ended with Flush, so
	// its implicit transaction, and the portals it made, go on.
	localOpen bool
	// exitPortals are the portals the client Bound, by whether their
	// statement ends a failed transaction (exitsFailedTx): an Execute of
	// one that does not leaves a failed transaction failed (stand-ins,
	// injectStatements). A portal not in it may. Pruned as srvPortals
	// (localPlan).
	exitPortals map[string]portalExit
	// parses counts the client's Parses of each statement name, by a hash
	// of the name (parseTag), up to maxParsedNames names: a driver that
	// names statements by their text's hash leaves one per text it ever
	// prepared.
	parses map[uint64]uint32
}

// parseSeed hashes statement names for clientStatements.parses. Two names
// with one hash (about 1 in 2^52 for 4096 names) only give a first Parse a
// tag of its own: its server copies are not shared, nothing else changes.
var parseSeed = maphash.MakeSeed()

// maxParsedNames bounds clientStatements.parses; past it the count starts
// over (a statement Parsed again then shares its first copy's record).
const maxParsedNames = 4096

// parseTag is the tag (stmtInfo.tag) of the client's Parse of statement
// name in session: "" the first time, a tag of its own after that.
func (c *clientStatements) parseTag(session uint64, name string) string {
	if c.parses == nil || len(c.parses) >= maxParsedNames {
		c.parses = map[uint64]uint32{}
	}
	h := maphash.String(parseSeed, name)
	n := c.parses[h]
	c.parses[h] = n + 1
	if n == 0 {
		return ""
	}
	return "\x00#" + strconv.FormatUint(session, 10) + "." + strconv.FormatUint(uint64(n), 10)
}

// sessionFreshness is what the session knows of its positions (SPEC §5):
// what its reads must see, and where it read. Under session.mu: server
// readers record captured positions and what reads saw; the session
// goroutine reads them to route.
type sessionFreshness struct {
	token    freshness.Token // write token: at or after the session's last commit
	floor    freshness.Token // monotonic-read floor: token or what the last read saw
	minLSN   freshness.Token // SET pg_kinetic.min_lsn
	captures int             // WAL position queries in flight
	// wrote: a unit that may write ran on the primary since the last
	// position asked for as a write's (positionsDueLocked): the COMMIT of
	// a transaction block then moves the token, not only the floor.
	wrote bool
	// captureDebt: the session owes itself a read of the primary's WAL
	// position before its next unit: after COPY FROM STDIN (nothing else
	// may follow it on the wire), or after a position query was lost with
	// its connection, so token and floor may lag what the session wrote or
	// saw (forgetSwallowLocked).
	captureDebt bool
	debtSeq     uint64 // requests when the debt arose: answers to later requests pay it
	// unsure: a write of the session whose position on its primary was
	// never read (unsureWrite); requests numbers the position requests
	// made, so an answer can tell whether it was asked for after that
	// write.
	unsure   unsureWrite
	requests uint64
	// prior: the token of an earlier timeline that a later primary's
	// position replaced before it was judged against that timeline's
	// switch point (the history was not known yet); judged, and told if
	// lost, once the history is (planUnit). Zero: none.
	prior freshness.Token
	// told: the token as it stood when the session was told KN002 and it
	// stayed (a write that may have been lost, a prior told lost): that
	// report covers it, so a later primary's position replacing it does
	// not make it a prior to tell again (TestFailoverDrills: a ROLLBACK
	// failed with a second KN002 for the same loss). Zero: none.
	told freshness.Token
	// seen: replicas the session read from, what it saw there not yet
	// bounded; affine: the replica its last read-your-writes read used
	// (affinity.go).
	seen        []seenRead
	affine      string
	seenBlocked bool // the last decision: only unbounded reads kept it off a replica
	// usedReplica: a unit of the session was routed to a replica; until
	// then its positions are read in no hurry (requestPositionLocked).
	usedReplica bool
}

// clientParams is what the client was told of the server parameters and
// what is held back for it (more under session.mu: heldParams).
type clientParams struct {
	// reported is the last value of each parameter the client was told
	// in a ParameterStatus. Under wmu.
	reported map[string]string
	// startup: the client's startup settings by lower-case name (set at
	// connect, read-only after).
	startup map[string]string
	// undone: ParameterStatus a server sent when the proxy failed its
	// transaction block (abortServerTx: the block's SETs undone), for the
	// client before its next ReadyForQuery, which the proxy sends (send).
	// Under wmu.
	undone []pgproto3.ParameterStatus
	// resetHeld: ParameterStatus of a batch with a RESET, sent at its
	// ReadyForQuery (reportResets). Under wmu.
	resetHeld []pgproto3.ParameterStatus
	// token: the session's new token (pg_kinetic.write_lsn), held for the
	// ReadyForQuery that ends the unit in flight (tellToken). Under wmu.
	token *pgproto3.ParameterStatus
	// afterReady: the last message written to the client (a
	// ParameterStatus, notice or notification aside) is a ReadyForQuery:
	// the client is between units (tellToken). Under wmu.
	afterReady bool
}

// wroteLocked notes a message of type typ written to the client
// (clientParams.afterReady). Callers hold wmu.
func (ss *session) wroteLocked(typ byte) {
	switch typ {
	case 'Z':
		ss.params.afterReady = true
	case 'S', 'N', 'A':
	default:
		ss.params.afterReady = false
	}
}

// injection is what the proxy needs to know of the client's batch when it
// writes messages of its own among the client's (statements.go:
// injectStatements, ensureSQLStatement; forward.go: buffer). Owned by the
// session goroutine.
type injection struct {
	// midBatch: buffer is writing inside a client's extended batch, where
	// no simple Query may be injected.
	midBatch bool
	// restOpen: the rest of a unit moved from a replica began on the
	// current server with messages of the proxy's (its SETs made in the
	// unit, its portals replayed: prepareLink) in the server's implicit
	// transaction: until the client's Sync, nothing of the proxy's may
	// end that transaction (a Sync, a simple Query).
	restOpen bool
	extBatch bool // injectStatements runs for an extended-protocol batch (ensureSQLStatement)
	// batch, at: the batch injectStatements prepares for and the index of
	// the message it prepares now (skippedInFailedTx).
	batch *batch
	at    int
	// executedBy: how many ensureExecutedBy calls are under way, one
	// inside another (statements that EXECUTE each other: A is EXECUTE
	// B, B was Parsed again as EXECUTE A).
	executedBy int
}

// session is one client connection. Its fields outside mu are owned by
// the session goroutine; mu groups what it shares with its server
// readers, timers, Shutdown, PAUSE, cancels and the admin console.
type session struct {
	srv  *Server
	id   uint64
	log  *zap.Logger
	conn net.Conn      // the client, possibly *tls.Conn
	r    *bufio.Reader // session goroutine; swapped at idle points when idleIO

	// idleIO: in the relay phase of a plain TCP client, the read and write
	// buffers go back to shared pools whenever they are empty, so an idle
	// client costs no buffer memory (idle.go).
	idleIO   bool
	rc       syscall.RawConn
	peekFn   func(fd uintptr) bool
	peekWoke bool
	// held: a retryable read not waited for (retry.go); mayDefer: set
	// while routeUnit routes a unit after which the session goroutine
	// waits for the client.
	held     heldRead
	mayDefer bool
	tls      bool
	// tlsLeaf is the proxy certificate the client saw, for SCRAM channel
	// binding (tls-server-end-point); nil without TLS.
	tlsLeaf *x509.Certificate
	// clientCert is the client's certificate, verified against
	// tls_ca_file by the handshake; nil when it sent none (clientcert.go).
	clientCert *x509.Certificate
	cfg        *config.Config // snapshot taken at accept

	user, database string
	startupParams  map[string]string
	replication    bool // startupParams has "replication" (routingMode, per unit: no map lookup)
	counted        bool // counted in Server.clients
	userCfg        *config.User
	route          *config.Route
	key            cancelKey
	authFinal      *pgproto3.AuthenticationSASLFinal

	// params: the ParameterStatus the client was told, and those held
	// back for it.
	params clientParams

	wmu sync.Mutex    // serialises writes to the client
	w   *bufio.Writer // under wmu; nil between flushes when idleIO (use out)
	enc []byte        // scratch for encoding messages, under wmu

	// txPool: transaction pooling; server connections are held per unit
	// (link.go, releaseIdle), except by a pinned session.
	txPool bool

	// client: the statements and portals the client holds (session
	// goroutine).
	client clientStatements

	// Routing state owned by the session goroutine.
	classifier *classify.Classifier
	// flow: where clientToServer stands between units (collecting,
	// following a unit open on a server, skipping to a failed unit's
	// Sync) and what it keeps of the open unit (flow.go).
	flow unitFlow
	// unflushed: the connection the client's last messages were written
	// to without a flush, more of them being buffered (flushHeld).
	unflushed  *link
	classified []*classified // analyze's records, reused unit after unit
	deferred   string        // a BEGIN answered locally (and SET TRANSACTION … READ ONLY after it), not yet sent to a server (its text)
	// deferredRO: deferred opens a READ ONLY transaction, placed by its
	// first statement (a read pins a replica).
	deferredRO bool
	chainedOn  *link // the replica that ran an extended-protocol AND CHAIN ending a failed block (noteChainOnReplica)
	// tempPath: the session's search_path may have named pg_temp (at
	// startup, in a SET, SET LOCAL or set_config of it), so an unqualified
	// CREATE may make a temporary object and pins the session
	// (notePath). Once set it stays: at worst a CREATE pins without need.
	tempPath bool

	// inj: where the proxy's own messages stand among the client's.
	inj injection
	// seenTerminations is the Server's terminations count this session
	// last checked its primary backend at.
	seenTerminations uint64
	// hasUndo says, without mu, that mu.undo holds something.
	hasUndo atomic.Bool

	counters   []sessionCounter // decisionCounter
	queryClass string           // SET pg_kinetic.query_class / startup parameter
	lastWrite  time.Time        // for sticky_primary_window_ms
	connected  time.Time        // set before the session is listed; read-only after

	// turn and readers, on mu, are the session's two condition variables,
	// one per kind of waiter: a change is broadcast on the one whose
	// waiter may wait for it, and kill broadcasts both. Each predicate has
	// its own wait helper, and each wait also ends when the session is
	// killed (most also when the link they wait on dies).
	//
	// turn: waited on by the session goroutine alone (so one wait at a
	// time), for what server readers, timers (wakeAfter) and kill change:
	//
	//	waitIdle (local.go)                pending == 0: every ReadyForQuery owed arrived
	//	decideWhenReady (forward.go)       the server still answering is the one the unit goes to, or done
	//	awaitFirst (forward.go)            answered: the first byte of a replica read reached the client
	//	                                   (at once, or for a held read when the client sends again: retry.go)
	//	awaitReadyForQuery (forward.go)    l.rfqs reaches a Sync of the proxy's (syncPrimary, the end of a
	//	                                   replica stream moved to the primary), or 2 s passed
	//	barrier (localext.go)              l.barrier leaves barrierPending
	//	settleOps (statements.go)          no statement op of an earlier batch pending on l
	//	settleBatches (statements.go)      every batch sent to l answered (l.rfqs reaches l.batches)
	//	shapeChanged (statements.go)       the proxy's own Describe is answered (l.rfqs or l.shape)
	//	waitCaptures (fresh.go)            captures == 0: the session's write positions answered, or captureWait passed
	//	awaitPrimaryCheck (session.go)     !checkingPrimary
	//
	// readers: waited on by server readers (at most one per link), for
	// what the session goroutine, the cancel path and kill change:
	//
	//	releaseIdle (link.go)              parked: the link's claims end, more is written to it
	//	                                   (l.batches, l.swallow, mu.cur), or detach stops it
	//	awaitTimeoutCancel (timeouts.go)   !l.cancelling: query_timeout_ms's cancel was delivered
	turn, readers sync.Cond

	// mu guards what the session goroutine shares with the other
	// goroutines that act on the session: its server readers (one per
	// link), timers (wakeAfter, the janitor's timeouts), Shutdown and
	// PAUSE, CancelRequest handling and the admin console. The fields
	// above are the session goroutine's alone (some are set at connect,
	// before anything else sees the session), or say what guards them.
	//
	// Lock order: wmu, then mu (a server reader relaying to the client
	// holds wmu and takes mu to record what it relayed); wmu is never
	// taken while mu is held. A link's fields (link.go) are guarded by
	// the mu of the session that holds the link.
	mu struct {
		sync.Mutex

		started  bool             // connect set up routeName, replicas and the waits
		primary  *link            // attached at connect, for the whole session
		replicas map[string]*link // replica links used by this session, by address
		cur      *link            // the server of the current or last unit
		pending  int              // client-visible ReadyForQuery messages still owed
		unsynced bool             // extended-protocol messages sent since the last Sync
		tx       byte             // transaction status the client was last told
		draining bool             // Shutdown asked: close at the next idle point
		killed   bool             // the session is being closed
		// unitRuns: the client's last unit runs something (a Query, a
		// FunctionCall, or a synced batch with an Execute); openRuns: the
		// batch not yet synced has an Execute. A draining session closes
		// only when idle after such a unit: a fresh session has not sent
		// its first query yet, and a unit that only prepared (Parse,
		// Describe, Sync: pgx, libpq's PQprepare) is followed by the Bind
		// and Execute it prepared for.
		unitRuns, openRuns bool
		// checkingPrimary: the session's primary backend sent a FATAL
		// error and its reader is finding out whether the server is up
		// (then the backend was terminated, and so is the session); units
		// wait.
		checkingPrimary bool
		// queueCancel ends the wait of a unit for a server connection
		// (acquireConn) with errQueuedCancel: a CancelRequest that arrives
		// while nothing of the session runs (cancelRunning). Set only
		// during that wait.
		queueCancel context.CancelCauseFunc

		pinned  string // why the session is pinned to the primary; "" when it is not
		unitErr bool   // an ErrorResponse reached the client since the last idle point
		errDone uint64 // doneSeq when the last one did: the unit it answered
		lastTag string // the last CommandComplete tag relayed

		// settings: the session state replayed on every server it uses.
		settings replayedSettings
		// undo: statement changes the server refused or skipped, to undo
		// on the client's side (applyClientUndo); hasUndo says so without
		// mu.
		undo []stmtOp
		// movedEffects: the unit in progress moved from a replica to the
		// primary with SETs recorded (endReplicaStream); cleared when it
		// ends.
		movedEffects bool
		// movedOn: the server where the moved unit's SETs were made
		// inside its transaction (prepareLink), and the unit's number.
		// Only there do the settings a server holds stand for them: a
		// connection that merely holds the same settings, committed,
		// would not undo them when the unit fails.
		movedOn struct {
			st  *serverState
			seq uint64
		}
		// inferred: parameter types servers described for the client's
		// statements, by Parse body (stand-ins use them).
		inferred map[string][]uint32
		// shapes: the RowDescription body (shapeNoData for NoData) a
		// server gave the client for a Describe of its statement, by Parse
		// body (shapeChanged compares a re-Parse's with it).
		shapes  map[string]string
		effects []effect        // of the units in progress, applied when theirs ends well
		cancels []pendingCancel // pg_cancel_backend calls of units in progress (sqlcancel.go)
		// heldParams: ParameterStatus for the client from a Sync of the
		// proxy's own (reportHeldParams); heldCommitted: a COMMIT of the
		// unit followed every SET of the part those came from: they hold
		// whatever the rest of the unit does.
		heldParams    []pgproto3.ParameterStatus
		heldCommitted bool
		// commitSeq: the unit whose COMMIT last settled the effects before
		// it (committedLocked), so a replica part whose SETs it kept
		// reports them whatever the rest does (endReplicaStream).
		commitSeq uint64
		// unitSeq counts the client's units written to servers (each ended
		// by a Sync or Query), doneSeq their ReadyForQuery: pipelined
		// units' effects apply or not each with its own unit.
		unitSeq, doneSeq uint64
		lastIdleDone     uint64 // doneSeq at the last ReadyForQuery 'I' from a server
		// restored: the startup values a RESET of the unit reset were set
		// again on its server right after it (afterUnit), so the server's
		// settings are the session's (not settingsUnknown).
		restored bool

		last lastRoute // SHOW pg_kinetic.last_route, and the unit's start for its duration

		// Freshness (SPEC §5).
		fresh     sessionFreshness
		routeName string // the session's route, for PAUSE (set at connect)
		// commitInFlight: a unit that may commit (mayCommit) was sent to
		// the primary and not all ReadyForQuery are in yet.
		commitInFlight bool
		// unkeepable: a unit in flight on the primary is one whose loss
		// with the primary ends the session (keepAfterLoss): it may open
		// a transaction block or copy in, or was streamed open; cleared
		// with commitInFlight. writingKeepable: sendUnit is writing a
		// whole unit that is not (its Sync may not be counted yet).
		unkeepable, writingKeepable bool
		// fates: per ReadyForQuery owed (pending), in order, what its
		// unit's loss with the primary would mean (keepAfterLoss);
		// writingFate is that of the unit sendUnit is writing (count
		// appends it). lostBlock: the session's transaction block was
		// lost with its primary connection, and the session went on:
		// lostTold once the client got an error for it, lostUntold
		// before (lostBlockUnit).
		fates       []unitFate
		writingFate unitFate
		lostBlock   byte
		fallback    *fallbackSlot // a primary fallback this session holds until its unit ends

		// awaiting is a replica link running a retryable read; answered
		// turns true when the first byte of its answer is about to reach
		// the client.
		awaiting *link
		answered bool
		// idleWait: the session goroutine waits for the client while a
		// read is held (retry.go: watchHeld); heldWoken: its replica's
		// failure set a past read deadline to end that wait.
		idleWait, heldWoken bool

		// tmo: what the janitor needs for the client timeouts
		// (timeouts.go).
		tmo sessionTimeouts

		// scratch: room a decision reuses (decideLocked's candidates).
		scratch struct{ cands []candidate }
	}
}

// send writes proxy-generated messages to the client and flushes.
func (ss *session) send(msgs ...wire.Encoder) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if len(ss.params.undone) > 0 || ss.params.token != nil {
		if i := slices.IndexFunc(msgs, func(m wire.Encoder) bool { _, ok := m.(*pgproto3.ReadyForQuery); return ok }); i >= 0 {
			// Where the server would have sent them: before the
			// ReadyForQuery that ends the failed batch.
			ps := ss.unreportedLocked(ss.params.undone)
			ss.params.undone = nil
			if ss.params.token != nil {
				ps = append(ps, ss.params.token)
				ss.params.token = nil
			}
			msgs = slices.Concat(msgs[:i:i], ps, msgs[i:])
		}
	}
	var err error
	ss.enc, err = wire.Append(ss.enc[:0], msgs...)
	if err != nil {
		return err
	}
	for b := ss.enc; len(b) >= 5; {
		ss.wroteLocked(b[0])
		b = b[1+int(binary.BigEndian.Uint32(b[1:5])):]
	}
	if _, err := ss.out().Write(ss.enc); err != nil {
		return err
	}
	return ss.flushOut()
}

// idleLocked reports whether the server owes nothing and no transaction or
// unsynced batch is open. Callers hold ss.mu.
func (ss *session) idleLocked() bool {
	return ss.mu.pending == 0 && !ss.mu.unsynced && ss.mu.tx == 'I'
}

// drain asks the session to end at its next idle point (Shutdown): now
// if it is idle after a unit that ran something, else when it is idle
// after the next one (unitRuns), or when the shutdown timeout ends. A
// client that just connected (pgbench -C, a PHP request) is about to send
// its first query; closing it now would fail that query.
func (ss *session) drain() {
	ss.mu.Lock()
	ss.mu.draining = true
	idle := ss.mu.started && ss.idleLocked() && ss.mu.unitRuns
	ss.mu.Unlock()
	if idle {
		ss.killWithin(fatalf(codeAdminShutdown, "terminating connection due to administrator command"), idleKillPatience)
	}
}

// initWaits ties the session's condition variables to its lock.
func (ss *session) initWaits() {
	ss.turn.L = &ss.mu
	ss.readers.L = &ss.mu
}

// wakeAfter sets *expired and wakes the session goroutine's wait after d
// (a bounded wait on turn); the caller stops the timer when done.
func (ss *session) wakeAfter(d time.Duration, expired *bool) *time.Timer {
	return time.AfterFunc(d, func() {
		ss.mu.Lock()
		*expired = true
		ss.turn.Broadcast()
		ss.mu.Unlock()
	})
}

// idleKillPatience is how long drain waits for the write lock of an idle
// session before closing it without its FATAL. The lock is then held only
// for an instant: by the server reader that relayed the last ReadyForQuery,
// descheduled right after its write (seen under load: the client had its
// answer and the SIGTERM came before that goroutine ran again).
const idleKillPatience = 10 * time.Millisecond

// kill ends the session: the client gets err (if not nil) and the
// connection is closed, which unblocks the session goroutine.
func (ss *session) kill(err *clientError) { ss.killWithin(err, 0) }

// killWithin is kill waiting up to patience for the write lock to send err.
func (ss *session) killWithin(err *clientError, patience time.Duration) {
	ss.mu.Lock()
	if ss.mu.killed {
		ss.mu.Unlock()
		return
	}
	ss.mu.killed = true
	ss.turn.Broadcast()
	ss.readers.Broadcast()
	ss.mu.Unlock()
	// A writer blocked on a slow client holds wmu; never wait for it long
	// (Shutdown calls kill for every session): close, which unblocks it.
	if err != nil && ss.lockWriter(patience) {
		ss.enc, _ = wire.Append(ss.enc[:0], errorResponse(err))
		ss.conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, werr := ss.out().Write(ss.enc); werr == nil {
			ss.flushOut()
		}
		ss.wmu.Unlock()
	}
	ss.conn.Close()
}

// lockWriter takes wmu if it is free now or within patience (polled: a
// blocked Lock could not be given up).
func (ss *session) lockWriter(patience time.Duration) bool {
	if ss.wmu.TryLock() {
		return true
	}
	for end := time.Now().Add(patience); time.Now().Before(end); {
		time.Sleep(50 * time.Microsecond)
		if ss.wmu.TryLock() {
			return true
		}
	}
	return false
}

// endWithServerError relays a server's FATAL ErrorResponse body to the
// client as is and ends the session, as PostgreSQL ends a connection whose
// backend was terminated.
func (ss *session) endWithServerError(body []byte) {
	ss.wmu.Lock()
	if err := wire.WriteHeader(ss.out(), wire.Header{Type: 'E', Len: len(body)}); err == nil {
		if _, err := ss.out().Write(body); err == nil {
			ss.flushOut()
		}
	}
	ss.wmu.Unlock()
	ss.kill(nil)
}

// awaitPrimaryCheck waits while the primary's reader decides whether a
// FATAL error it got ends the session, and reports whether it did.
func (ss *session) awaitPrimaryCheck() (killed bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for ss.mu.checkingPrimary && !ss.mu.killed {
		ss.turn.Wait()
	}
	return ss.mu.killed
}

func (ss *session) isKilled() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mu.killed
}

var _ wire.Encoder = (*pgproto3.ErrorResponse)(nil)
