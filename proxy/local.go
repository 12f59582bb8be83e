package proxy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// Rejections by the consistency contract (SPEC §7): one shape whatever
// failed, the cause in DETAIL.
const (
	codeConsistency      = "KN001"
	consistencyMessage   = "pg-kinetic: no server can serve this read within its consistency contract"
	codeInFailedTx       = "25P02"
	codeInvalidParameter = "22023"
	codeReadOnlyTx       = "25006"
	codeUndefinedObject  = "42704"
	// codeUndefinedPreparedStatement: PostgreSQL's
	// ERRCODE_UNDEFINED_PSTATEMENT.
	codeUndefinedPreparedStatement = "26000"

	codeObjectNotInPrerequisiteState = "55000"
)

// waitIdle blocks until every response the client is owed has been
// relayed, so a proxy-made answer cannot overtake them.
func (ss *session) waitIdle() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for ss.mu.pending > 0 && !ss.mu.killed && !(ss.mu.cur != nil && ss.mu.cur.dead) {
		ss.turn.Wait()
	}
}

// answerLocally handles single simple-protocol statements the proxy answers
// itself: SHOW pg_kinetic.last_route, a plain BEGIN whose server is chosen
// by the transaction's first statement (so SET TRANSACTION READ ONLY can
// still pick a replica), SET TRANSACTION READ ONLY right after such a
// BEGIN, and the end of such a transaction before it reached any server.
func (ss *session) answerLocally(b *batch, ds []*classified) (bool, error) {
	if len(ds) != 1 {
		return false, nil
	}
	d := ds[0]
	if name, ok := kineticShowName(d.text); ok {
		ss.waitIdle()
		if ss.txStatus() == 'E' {
			return true, ss.failUnit(abortedTx(), false)
		}
		value, e := ss.kineticShow(name)
		if e != nil {
			return true, ss.failUnit(e, false)
		}
		return true, ss.sendRows(name, value, "SHOW")
	}
	if len(d.Statements) != 1 {
		return false, nil
	}
	st := d.Statements[0]
	if st.Effect == classify.EffectSet && strings.HasPrefix(strings.ToLower(st.Setting.Name), "pg_kinetic.") {
		ss.waitIdle()
		if ss.txStatus() == 'E' {
			return true, ss.failUnit(abortedTx(), false)
		}
		tag, e := ss.kineticSet(st.Setting)
		if e != nil {
			return true, ss.failUnit(e, false)
		}
		return true, ss.sendTag(tag, ss.txStatus())
	}
	ss.mu.Lock()
	canDefer := ss.mu.tx == 'I' && ss.mu.pinned == "" && ss.routingMode() != config.RoutingOff
	ss.mu.Unlock()
	switch {
	case (st.Tx == classify.TxBegin && !d.Hints.Primary || st.Tx == classify.TxBeginReadOnly && d.Hints.None()) && canDefer:
		ss.waitIdle()
		ss.mu.Lock()
		if ss.mu.tx != 'I' || ss.mu.pending > 0 {
			ss.mu.Unlock()
			return false, nil
		}
		ss.mu.tx = 'T'
		ss.mu.Unlock()
		ss.deferred, ss.deferredRO = d.text, st.Tx == classify.TxBeginReadOnly
		tag := "BEGIN"
		if st.Start {
			tag = "START TRANSACTION" // (PostgreSQL's tag for it)
		}
		return true, ss.sendTag(tag, 'T')
	case st.Tx == classify.TxEnd && ss.deferred != "" && !st.Chain && st.Effect != classify.EffectPin:
		// The transaction never reached a server: nothing to commit. (Not
		// PREPARE TRANSACTION, the TxEnd that pins: even an empty
		// transaction is prepared, or refused when
		// max_prepared_transactions is 0, by the primary.)
		ss.deferred = ""
		ss.mu.Lock()
		failed := ss.mu.tx == 'E'
		ss.mu.tx = 'I'
		ss.mu.Unlock()
		tag := "COMMIT" // (END's tag too)
		if failed || st.Rollback {
			tag = "ROLLBACK" // (ABORT's too)
		}
		return true, ss.sendTag(tag, 'I')
	case st.Tx == classify.TxEnd && st.Chain && ss.deferred == "" && ss.routingMode() != config.RoutingOff:
		return ss.chainAfterFailedReplicaTx()
	case ss.deferred != "" && ss.txStatus() == 'E':
		return true, ss.send(errorf(codeInFailedTx, "current transaction is aborted, commands ignored until end of transaction block"),
			&pgproto3.ReadyForQuery{TxStatus: 'E'})
	case st.SetsTx && ss.deferred != "" && d.Hints.None() && (ss.deferredRO || st.Tx == classify.TxSetReadOnly):
		// SET TRANSACTION … READ ONLY first in a deferred block (pg_dump's
		// BEGIN; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ
		// ONLY): it waits with the BEGIN, and the block is placed by the
		// statement after it, as after BEGIN READ ONLY (a snapshot import
		// or pg_export_snapshot: the primary; a read: a replica). The
		// grammar's form cannot fail on a server before a query.
		ss.waitIdle()
		ss.deferred += "\n;" + d.text // (the newline ends a -- comment)
		ss.deferredRO = true
		return true, ss.sendTag("SET", 'T')
	}
	return false, nil
}

// chainAfterFailedReplicaTx answers COMMIT, ROLLBACK or ABORT AND CHAIN
// that ends a failed transaction on a replica. PostgreSQL rolls the failed
// transaction back and starts the next one with the session's defaults,
// not the failed one's characteristics: read-write (unless
// default_transaction_read_only), which a replica cannot run. So the
// replica's block is rolled back (the proxy's own ROLLBACK, its answers
// dropped) and the new transaction is a plain BEGIN not yet sent (as
// answerLocally defers one): it starts on the primary with the next
// statement. The client gets what PostgreSQL answers: ROLLBACK, in a
// transaction. (Before, the chained transaction stayed on the replica and
// its first write failed with 25006; differential 4050215125046564123.)
// Anywhere else (a transaction on the primary, one not failed: its
// chained successor keeps its characteristics) it is forwarded.
func (ss *session) chainAfterFailedReplicaTx() (bool, error) {
	ss.waitIdle()
	ss.mu.Lock()
	l := ss.mu.cur
	if ss.mu.tx != 'E' || ss.mu.pending > 0 || l == nil || !l.replica || !l.claimLocked() {
		ss.mu.Unlock()
		return false, nil
	}
	// No longer the session's transaction: in transaction pooling the
	// link goes back to its pool once the ROLLBACK is answered.
	ss.mu.cur = nil
	ss.mu.Unlock()
	if err := ss.rollbackClaimed(l); err != nil {
		return true, err
	}
	ss.mu.Lock()
	ss.mu.tx = 'T'
	ss.mu.Unlock()
	ss.deferred, ss.deferredRO = "BEGIN", false
	return true, ss.sendTag("ROLLBACK", 'T')
}

// noteChainOnReplica marks a synced batch whose last Execute ends the
// failed transaction open on a replica with COMMIT, ROLLBACK or ABORT AND
// CHAIN (the extended-protocol form of chainAfterFailedReplicaTx): the
// replica answers it as PostgreSQL does (ROLLBACK, status T), and the
// chained transaction it starts there, read-only in recovery where
// PostgreSQL's would be read-write, is ended before the next unit
// (endChainOnReplica). A batch with more after that Execute runs it on
// the replica, in the chained transaction (docs/behaviour.md).
func (ss *session) noteChainOnReplica(b *batch, u unitInfo, open bool) {
	if open || !u.chained || ss.deferred != "" || ss.routingMode() == config.RoutingOff {
		return
	}
	ss.mu.Lock()
	l := ss.mu.cur
	onReplica := ss.mu.tx == 'E' && l != nil && l.replica && !l.dead
	ss.mu.Unlock()
	if onReplica && ss.lastExecuteChains(b) {
		ss.chainedOn = l
	}
}

// lastExecuteChains reports whether b's last Execute runs COMMIT,
// ROLLBACK or ABORT AND CHAIN and nothing but a Sync follows it: a portal
// bound in b from a statement Parsed in b or held by the client.
func (ss *session) lastExecuteChains(b *batch) bool {
	texts := map[string]string{}   // statement name -> text, this batch's Parses
	portals := map[string]string{} // portal -> its statement's text, this batch's Binds
	last := ""
	found := false
	for _, m := range b.msgs {
		body := b.body(m)
		switch m.typ {
		case 'P':
			name, q, err := parseNames(body)
			if err != nil {
				return false
			}
			texts[name] = q
		case 'B':
			portal, _, err := cstring(body)
			stmt, err2 := bindStatement(body)
			if err != nil || err2 != nil {
				return false
			}
			q, ok := texts[stmt]
			if !ok {
				q, ok = ss.statementText(stmt)
			}
			if ok {
				portals[portal] = q
			} else {
				delete(portals, portal)
			}
		case 'E':
			portal, _, err := cstring(body)
			if err != nil {
				return false
			}
			last, found = portals[portal]
			if !found {
				return false
			}
		case 'S', 'H', 'D', 'C':
		default:
			return false
		}
	}
	if !found {
		return false
	}
	d := ss.classifier.Classify(last)
	return len(d.Statements) == 1 && d.Statements[0].Tx == classify.TxEnd && d.Statements[0].Chain
}

// endChainOnReplica, at the unit after one noteChainOnReplica marked, ends
// the chained transaction the replica started (the proxy's ROLLBACK, its
// answers dropped) and makes it a plain BEGIN not yet sent, as
// chainAfterFailedReplicaTx does: it opens on the primary with its first
// statement. Nothing changes when the replica did not run the chain (the
// batch failed before it: the status is still E) or the session moved on.
func (ss *session) endChainOnReplica() error {
	l := ss.chainedOn
	if l == nil {
		return nil
	}
	ss.chainedOn = nil
	ss.waitIdle()
	ss.mu.Lock()
	if ss.mu.cur != l || ss.mu.tx != 'T' || ss.mu.pending > 0 || !l.claimLocked() {
		ss.mu.Unlock()
		return nil
	}
	ss.mu.cur = nil // as in chainAfterFailedReplicaTx
	ss.mu.Unlock()
	if err := ss.rollbackClaimed(l); err != nil {
		return err
	}
	ss.deferred, ss.deferredRO = "BEGIN", false
	return nil
}

// proxyFailedStatement is what the proxy sends to make a server's
// transaction block (or batch) fail as a statement the proxy answered
// itself failed the client's: a syntax error, whose answer is dropped.
const proxyFailedStatement = "pg_kinetic: a proxy-answered statement failed"

// abortServerTx makes the transaction block open on the session's server
// fail, after the proxy failed a statement of it itself: the client's
// COMMIT then rolls back, as directly. (A statement of the proxy's that
// the server rejects; its answers are dropped.) Nothing to do when the
// block never reached a server (a deferred BEGIN): prepareLink fails it
// there when it does.
func (ss *session) abortServerTx() error {
	if ss.deferred != "" {
		return nil
	}
	ss.mu.Lock()
	l := ss.mu.cur
	ok := l != nil && l.claimLocked()
	ss.mu.Unlock()
	if !ok {
		return nil
	}
	defer ss.unclaim(l)
	if err := ss.inject(l, &pgproto3.Query{String: proxyFailedStatement}, 'Z'); err != nil {
		return errServerGone
	}
	ss.mu.Lock()
	l.swallow[len(l.swallow)-1].undoneParams = true
	want := l.batches
	ss.mu.Unlock()
	if err := l.conn.W.Flush(); err != nil {
		return errServerGone
	}
	// Its answer first (one round trip, on this rare path): the server
	// reports the values the failed block's SETs had changed, which the
	// client gets before the ReadyForQuery the proxy sends.
	ss.awaitReadyForQuery(l, want)
	return nil
}

// queryNotForwarded applies what a simple Query does to the session's
// statements when the proxy answered it itself (a pg_kinetic.* command, a
// deferred BEGIN or its end, a rejection): the unnamed statement is gone,
// as it would be on a server, whatever the answer was.
func (ss *session) queryNotForwarded() {
	ss.waitIdle()
	ss.mu.Lock()
	ss.client.unnamed = stmtInfo{}
	ss.mu.Unlock()
	ss.forgetLocalOnQuery()
}

// reject answers a unit with KN001. For an open batch (ended by Flush)
// the caller then drops messages until Sync, as a server would.
func (ss *session) reject(d decision, open bool) error {
	ss.setLastRoute(targetRejected, d.reason, "0", ss.queryClass)
	return ss.failUnit(withDetail(errorf(codeConsistency, consistencyMessage), "cause: "+d.reason), open)
}

// failUnit answers a unit with an error of the proxy's own, after every
// response still owed, like a server failing its first statement.
func (ss *session) failUnit(e *pgproto3.ErrorResponse, open bool) error {
	ss.waitIdle()
	ss.mu.Lock()
	abort := ss.mu.tx == 'T'
	if abort {
		ss.mu.tx = 'E' // like any error inside a transaction block
	}
	tx := ss.mu.tx
	ss.mu.Unlock()
	if abort {
		if err := ss.abortServerTx(); err != nil {
			return err
		}
	}
	msgs := []wire.Encoder{e}
	if !open {
		msgs = append(msgs, &pgproto3.ReadyForQuery{TxStatus: tx})
	}
	if err := ss.send(msgs...); err != nil {
		return errClientGone{err}
	}
	return nil
}

// answerClosesHere answers a unit of only Closes and its Sync (b,
// closesOnly), outside a transaction block, that found no primary to
// run on: as PostgreSQL answers a Close of what is not there,
// CloseComplete each, then ReadyForQuery. What the client closes was
// prepared on the primary it lost (or nowhere), so it is gone there: the
// client's records drop it as a forwarded Close would. pgx deallocates
// evicted statements right before its next query and takes a failed
// deallocation for a broken connection: a 08006 here would end its
// session, and a write of it the failover lost would go unreported.
// handled is false inside a transaction block: the unit fails there.
func (ss *session) answerClosesHere(b *batch) (handled bool, err error) {
	ss.waitIdle()
	if ss.txStatus() != 'I' {
		return false, nil
	}
	msgs := make([]wire.Encoder, 0, len(b.msgs))
	for _, m := range b.msgs[:len(b.msgs)-1] {
		if kind, name, err := describeTarget(b.body(m)); err == nil {
			ss.closeForClient(kind, name)
		}
		msgs = append(msgs, &pgproto3.CloseComplete{})
	}
	msgs = append(msgs, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := ss.send(msgs...); err != nil {
		return true, errClientGone{err}
	}
	return true, nil
}

func (ss *session) sendTag(tag string, tx byte) error {
	if err := ss.send(&pgproto3.CommandComplete{CommandTag: []byte(tag)}, &pgproto3.ReadyForQuery{TxStatus: tx}); err != nil {
		return errClientGone{err}
	}
	return nil
}

// sendRows answers a one-column, one-row text result.
func (ss *session) sendRows(column, value, tag string) error {
	err := ss.send(
		&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte(column), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}}},
		&pgproto3.DataRow{Values: [][]byte{[]byte(value)}},
		&pgproto3.CommandComplete{CommandTag: []byte(tag)},
		&pgproto3.ReadyForQuery{TxStatus: ss.txStatus()},
	)
	if err != nil {
		return errClientGone{err}
	}
	return nil
}

// isShow reports whether text is exactly SHOW name (any case, spacing,
// trailing semicolon). The classifier has already parsed the text; this
// only compares the words.
func isShow(text, name string) bool {
	s := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(text), ";"))
	if len(s) < 5 || !strings.EqualFold(s[:4], "show") {
		return false
	}
	rest := strings.TrimLeft(s[4:], " \t\r\n\f\v")
	return len(rest) < len(s)-4 && strings.EqualFold(rest, name)
}

// lastRouteText is SHOW pg_kinetic.last_route's value. Callers hold ss.mu.
func (ss *session) lastRouteText() string {
	if ss.mu.last.target == "" {
		return ""
	}
	return ss.mu.last.String()
}

// kineticShowNames are the pg_kinetic.* session variables SHOW answers.
var kineticShowNames = []string{"pg_kinetic.last_route", "pg_kinetic.query_class", "pg_kinetic.write_lsn", "pg_kinetic.min_lsn"}

// kineticShowName reports which pg_kinetic.* variable text SHOWs, if any.
func kineticShowName(text string) (string, bool) {
	for _, n := range kineticShowNames {
		if isShow(text, n) {
			return n, true
		}
	}
	return "", false
}

// kineticShow is the value SHOW name answers, in either protocol, after
// every answer the client is owed has been relayed (the caller waits).
func (ss *session) kineticShow(name string) (string, *pgproto3.ErrorResponse) {
	switch name {
	case "pg_kinetic.last_route":
		ss.mu.Lock()
		route := ss.lastRouteText()
		ss.mu.Unlock()
		if route == "" {
			route = "target= reason= lag_ms="
		}
		return route, nil
	case "pg_kinetic.query_class":
		return ss.queryClass, nil
	}
	if !ss.waitCaptures() && name == "pg_kinetic.write_lsn" {
		// An older token would not cover the session's last write.
		return "", withHint(errorf(codeObjectNotInPrerequisiteState, "pg-kinetic: the session's write position is not known yet"), "Try again.")
	}
	ss.mu.Lock()
	t := ss.mu.fresh.token
	if name == "pg_kinetic.min_lsn" {
		t = ss.mu.fresh.minLSN
	}
	ss.mu.Unlock()
	if t.IsZero() {
		return "", nil
	}
	return t.String(), nil
}

// kineticSet applies SET/RESET of a pg_kinetic.* session variable, in
// either protocol, and returns its command tag; they are the proxy's and
// never reach a server (SPEC §4).
func (ss *session) kineticSet(set classify.Setting) (string, *pgproto3.ErrorResponse) {
	name := strings.ToLower(set.Name)
	fail := func(code, msg string) (string, *pgproto3.ErrorResponse) {
		return "", errorf(code, "%s", msg)
	}
	switch name {
	case "pg_kinetic.min_lsn":
		var t freshness.Token
		if !set.Reset && set.Value != "" {
			var err error
			if t, err = freshness.ParseToken(strings.Trim(set.Value, "'")); err != nil {
				return fail(codeInvalidParameter, fmt.Sprintf("invalid value for parameter %q: %q", set.Name, set.Value))
			}
		}
		ss.mu.Lock()
		ss.mu.fresh.minLSN = t
		ss.mu.Unlock()
	case "pg_kinetic.query_class":
		v := strings.Trim(set.Value, "'")
		if set.Reset {
			v = ""
		}
		if v != "" {
			if _, ok := ss.route.QueryClass(v); !ok {
				return fail(codeInvalidParameter, fmt.Sprintf("invalid value for parameter %q: unknown query class %q", set.Name, v))
			}
		}
		ss.queryClass = v
	default:
		return fail(codeUndefinedObject, fmt.Sprintf("unrecognized configuration parameter %q", set.Name))
	}
	if set.Reset {
		return "RESET", nil
	}
	return "SET", nil
}

// rollbackClaimed ends the transaction open on l, which the caller has
// claimed and no longer counts as the session's current server, with a
// ROLLBACK of the proxy's own (its answer swallowed), and gives the claim
// back; errServerGone when l could not be written to.
func (ss *session) rollbackClaimed(l *link) error {
	err := ss.inject(l, &pgproto3.Query{String: "ROLLBACK"}, 'Z')
	if err == nil {
		err = l.conn.W.Flush()
	}
	ss.unclaim(l)
	if err != nil {
		return errServerGone
	}
	return nil
}

// lostBlockUnit answers a unit of a transaction block that was lost with
// the session's primary connection while the session went on
// (keepAfterLossLocked): the block and everything it did are gone with
// the server. As in a failed block, only its end is accepted: ROLLBACK
// (or ABORT) ends it, answered by the proxy in the simple protocol, and
// in the extended one sent to a replica as a stale-ok read (outside a
// block there, PostgreSQL answers it with a WARNING and ROLLBACK);
// COMMIT (or END) ends it with an error, never with a success tag the
// client could take for a commit. Anything else fails: 08006 the first
// time when the block was lost idle (the client was told nothing yet),
// then 25P02. stop: the unit was answered here.
func (ss *session) lostBlockUnit(b *batch, u *unitInfo, ds []*classified, open bool) (stop bool, err error) {
	ss.mu.Lock()
	lost := ss.mu.lostBlock
	ss.mu.Unlock()
	if lost == 0 {
		return false, nil
	}
	ss.deferred = "" // (a BEGIN the proxy answered: gone with the rest)
	var end, rollback bool
	if !open && len(ds) == 1 && len(ds[0].Statements) == 1 {
		st := ds[0].Statements[0]
		end = st.Tx == classify.TxEnd && !st.Chain && st.Effect != classify.EffectPin
		rollback = end && st.Rollback
	}
	simple := len(b.msgs) == 1 && b.msgs[0].typ == 'Q'
	switch {
	case rollback && simple:
		ss.endLostBlock()
		return true, ss.sendTag("ROLLBACK", 'I')
	case rollback:
		ss.endLostBlock()
		u.staleOK = true
		return false, nil
	case end:
		ss.endLostBlock()
		return true, ss.failUnit(withDetail(errorf(codeConnectionFailure,
			"pg-kinetic: the transaction was lost with the connection to the primary and did not commit"),
			"the transaction block ended when the primary's connection was lost; nothing of it committed"), open)
	}
	e := errorf(codeInFailedTx, "current transaction is aborted, commands ignored until end of transaction block")
	if lost == lostUntold {
		e = withDetail(errorf(codeConnectionFailure, "pg-kinetic: the transaction was lost with the connection to the primary"),
			"the transaction block was open when the primary's connection was lost; nothing of it committed; end it with ROLLBACK")
	}
	ss.mu.Lock()
	ss.mu.lostBlock, ss.mu.tx = lostTold, 'E'
	ss.mu.Unlock()
	return true, ss.failUnit(e, open)
}

// endLostBlock ends a lost transaction block (lostBlockUnit): the session
// is idle, and the session effects of the block's units (SETs) are undone,
// as a rollback undoes them.
func (ss *session) endLostBlock() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.mu.lostBlock, ss.mu.tx = 0, 'I'
	ss.mu.unitErr = false
	ss.settleEffects(len(ss.mu.effects), len(ss.mu.effects), false)
}

// errBlockLost: primaryLink found the session's transaction block open on
// a server that is no longer the primary, and the block is now lost
// (blockOnOldPrimary).
var errBlockLost = errors.New("the transaction block's server is no longer the primary")

// blockOnOldPrimary, before a unit inside a transaction block open on the
// session's primary connection, finds whether that server is still the
// route's primary. When another was elected since (a failover the
// connection has not seen end yet: its backend lingers after its
// postmaster was killed), the block is lost as if that server had gone:
// its connection is closed (the backend rolls the block back), and the
// block fails until the client ends it (lostBlockUnit), the session going
// on. No write reaches a server that is not the primary of the moment.
// (A pinned session's state is on that server: primaryLink ends it.)
func (ss *session) blockOnOldPrimary() {
	if !ss.freshnessOn() || ss.deferred != "" {
		return
	}
	ss.mu.Lock()
	l := ss.mu.primary
	inBlock := ss.mu.tx != 'I' && ss.mu.pending == 0 && ss.mu.lostBlock == 0 && ss.mu.pinned == "" &&
		l != nil && l == ss.mu.cur && !l.dead && !l.released
	ss.mu.Unlock()
	if !inBlock {
		return
	}
	addr, _ := ss.primaryAddr()
	if addr == "" || addr == l.addr {
		return
	}
	ss.mu.Lock()
	if l.dead || ss.mu.lostBlock != 0 {
		ss.mu.Unlock()
		return
	}
	l.kept = true
	ss.mu.lostBlock, ss.mu.tx = lostUntold, 'E'
	ss.mu.Unlock()
	ss.log.Warn("the primary changed under a transaction block: the block is lost, the session continues",
		zap.String("from", l.addr), zap.String("to", addr))
	l.conn.Close() // (its reader ends; the session goes on: keepAfterLoss)
}
