package proxy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// stmtInfo is a statement the client prepared with a Parse message: its raw
// body (name, query, parameter types) so it can be prepared again, verbatim,
// on another server.
type stmtInfo struct {
	// query is the text, a substring of parse (one copy of the text per
	// statement: a client may hold hundreds).
	query string
	parse string // Parse message body, "" for none
	// stale: the statement's result shape changed under it (shapeChanged):
	// its Binds fail with 0A000, as on the server it was prepared on,
	// until the client Parses it again.
	stale bool
	// tag tells a statement the client Parsed again under a name it used
	// before in this session (after a Close) from the earlier one with
	// the same body: a server copy of that one was planned before, maybe
	// before DDL that changed its result (PostgreSQL's fresh statement
	// would not fail with 0A000, the old copy does). "" for the first.
	tag string
}

// key is how a server's record (serverState.prepared) names this
// statement: its Parse body and tag.
func (s stmtInfo) key() string {
	if s.tag == "" {
		return s.parse
	}
	return s.parse + s.tag
}

// sqlPrep is a statement the client prepared with SQL PREPARE.
type sqlPrep struct {
	text  string // the whole PREPARE statement, replayed as is
	inner classify.Kind
	// funcs and rels: the prepared read's Statement.Funcs and .Relations,
	// looked up at each EXECUTE as the read's own would be.
	funcs, rels []string
}

// effect is a change to session state made by a statement of the unit in
// progress. It takes effect when the unit ends outside a transaction
// without an error (a rolled-back SET did not happen).
type effect struct {
	kind    classify.Effect
	setting classify.Setting
	seq     uint64 // the unit it belongs to (session.unitSeq when it was routed)
	// commit marks where a COMMIT (END, COMMIT AND CHAIN) stands among
	// the effects: when its CommandComplete arrives, the effects before
	// it are kept whatever follows in the same batch (committed).
	commit bool
	// rollback marks where a ROLLBACK (ABORT) stands: what the unit did
	// before it in its block is undone (movedSettingsKeyLocked).
	rollback bool
	// savepoint marks where a SAVEPOINT, RELEASE or ROLLBACK TO stands
	// (keptEffects).
	savepoint classify.Savepoint
	// alone: the only statement of its unit, so an error of the unit was
	// its own (it did nothing).
	alone bool
	// errored: its unit failed (serverErrorLocked). Where in the unit is
	// not known.
	errored bool
}

// marker reports whether e only marks a place among the effects.
func (e effect) marker() bool { return e.commit || e.rollback || e.savepoint.Op != 0 }

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte, error) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", nil, errors.New("missing string terminator")
	}
	return string(b[:i]), b[i+1:], nil
}

// queryOf is the query of a well-formed Parse body, sharing its memory.
func queryOf(parse string) string {
	q := parse[strings.IndexByte(parse, 0)+1:]
	return q[:strings.IndexByte(q, 0)]
}

// parseNames reads a Parse body's statement name and query.
func parseNames(body []byte) (name, query string, err error) {
	name, rest, err := cstring(body)
	if err != nil {
		return "", "", err
	}
	query, _, err = cstring(rest)
	return name, query, err
}

// parseName reads a Parse body's statement name, checking that its query
// is terminated too, without copying the query.
func parseName(body []byte) (string, error) {
	name, rest, err := cstring(body)
	if err == nil && bytes.IndexByte(rest, 0) < 0 {
		err = errors.New("missing string terminator")
	}
	return name, err
}

// bindStatement reads the statement name of a Bind body.
func bindStatement(body []byte) (string, error) {
	_, rest, err := cstring(body) // portal
	if err != nil {
		return "", err
	}
	name, _, err := cstring(rest)
	return name, err
}

// stmtRef is the statement a Bind or a Describe of a statement uses.
func stmtRef(typ byte, body []byte) (string, bool) {
	switch typ {
	case 'B':
		n, err := bindStatement(body)
		return n, err == nil
	case 'D':
		kind, n, err := describeTarget(body)
		return n, err == nil && kind == 'S'
	}
	return "", false
}

// describeTarget reads the kind ('S' or 'P') and name of a Describe or
// Close body.
func describeTarget(body []byte) (byte, string, error) {
	if len(body) < 2 {
		return 0, "", errors.New("message too short")
	}
	name, _, err := cstring(body[1:])
	return body[0], name, err
}

// inject writes a message of the proxy's own to l ahead of the client's,
// and registers its response to be dropped. Callers hold no lock; the
// session goroutine is the only writer of l.
func (ss *session) inject(l *link, msg wire.Encoder, drop byte) error {
	return ss.injectUndo(l, msg, drop, nil)
}

// injectUndo is inject for a statement whose effect the caller records on
// l.st at once: undo takes the record back if the server fails or skips it.
func (ss *session) injectUndo(l *link, msg wire.Encoder, drop byte, undo *stmtOp) error {
	buf, err := msg.Encode(nil)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	l.swallow = append(l.swallow, expect{kind: drop, batch: l.batches, undo: undo})
	l.injected++
	if drop == 'Z' {
		l.batches++
		l.sent = 0
		l.executed = false
	}
	if _, simple := msg.(*pgproto3.Query); simple {

		// A simple Query destroys the server's unnamed statement: the
		// client's is Parsed again before its next Bind or Describe.
		l.st.unnamed = ""
	}
	if l.parked {
		ss.readers.Broadcast()
	}
	ss.mu.Unlock()
	_, err = l.conn.W.Write(buf)
	return err
}

// ensureStatement makes sure statement name exists on l with the text the
// client prepared, before a message of type use ('B' Bind, 'D' Describe,
// 'P' a Parse of the same name, 0 other) that uses it. In a failed
// transaction a stand-in may take its place (standIn).
func (ss *session) ensureStatement(l *link, name string, use byte) error {
	return ss.ensureStatementCheck(l, name, use, true)
}

// ensureStatementCheck is ensureStatement; check: a re-Parse of a
// statement the client Described is Described and compared
// (shapeChanged).
func (ss *session) ensureStatementCheck(l *link, name string, use byte, check bool) error {
	ss.settleOps(l, name)
	want, done, err := ss.statementWanted(l, name, use)
	if done || err != nil {
		return err
	}
	if waited, err := ss.settleBatches(l); err != nil {
		return err
	} else if waited {
		return ss.ensureStatementCheck(l, name, use, check) // the record and the status may have changed
	}
	if ss.skippedInFailedTx() {
		return nil
	}
	if err := ss.ensureExecutedBy(l, want.query); err != nil {
		return err
	}
	var p pgproto3.Parse
	if err := p.Decode([]byte(want.parse)); err != nil {
		return err
	}
	set := want.key()
	standIn := false
	if stand, mark, ok := ss.standIn(l, &p, want.parse, use); ok {
		if name == "" && l.st.unnamed == mark || name != "" && l.st.prepared[name] == mark {
			return nil
		}
		p, set, standIn = *stand, mark, true
	}
	if name != "" {
		if l.st.holds(name) {
			// Another statement of that name (of either kind: one
			// namespace) is in the way: close it first.
			if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S', Name: name}, '3', l.record(name)); err != nil {
				return err
			}
			l.st.drop(name)
		}
	}
	// (In a failed transaction the Parse fails, 25P02, the error the
	// client's message would have had; the record is taken back then.)
	if err := ss.injectUndo(l, &p, '1', l.record(name)); err != nil {
		return err
	}
	if ss.txStatus() == 'E' {
		// Likely to fail: a pipelined batch that uses the name again
		// waits for the answer (settleOps) instead of trusting the record.
		ss.noteStmtOp(l, stmtOp{kind: 'i', name: name})
	}
	if name == "" {
		l.st.unnamed = set
		return nil
	}
	l.st.prepared[name] = set
	if standIn || want.stale || !check || !planned(want.query) {
		return nil
	}
	return ss.recheckShape(l, name, want, use)
}

// statementWanted returns the client's statement called name (the
// unnamed one for ""), and done when l's server holds it already or
// nothing is to be Parsed there: a statement PREPAREd in SQL is made by
// ensureSQLStatement, and an unnamed statement the client no longer has
// is closed on the server.
func (ss *session) statementWanted(l *link, name string, use byte) (want stmtInfo, done bool, err error) {
	if name != "" {
		w, ok := ss.client.stmts[name]
		if !ok {
			// SQL PREPARE and Parse share one namespace: a statement the
			// client PREPAREd may be Bound or Described too.
			return w, true, ss.ensureSQLStatement(l, name, use)
		}
		have, ok := l.st.prepared[name]
		return w, ok && have == w.key(), nil
	}
	want = ss.client.unnamed
	if want.parse == "" && l.st.unnamed != "" {
		// The client has no unnamed statement any more (a simple Query
		// the proxy answered, or a local Parse, replaced it), but the
		// server still holds an old one: drop it, so the Bind fails with
		// 26000 as directly.
		if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S'}, '3', l.record("")); err != nil {
			return want, true, err
		}
		l.st.unnamed = ""
		return want, true, nil
	}
	return want, want.parse == "" || l.st.unnamed == want.parse, nil
}

// recheckShape asks l's server for the result columns of the statement
// name just Parsed there again (shapeChanged); when they differ from the
// client's, the statement is stale for the client, as PostgreSQL would
// find it.
func (ss *session) recheckShape(l *link, name string, want stmtInfo, use byte) error {
	changed, redo, err := ss.shapeChanged(l, name, want.parse)
	if err != nil {
		return err
	}
	if redo {
		return ss.ensureStatementCheck(l, name, use, false)
	}
	if changed {
		want.stale = true
		ss.client.stmts[name] = want
	}
	return nil
}

// Stand-ins. A statement the client prepared on another server connection
// (or that this one dropped) cannot be Parsed again inside a failed
// transaction: the server refuses the Parse (25P02), where PostgreSQL,
// holding the statement, would check the client's message against it
// first: a Bind with the wrong parameter count fails with 08P01 naming
// the count, a Parse of an empty query under the taken name with 42P05,
// a Describe of a statement that returns no rows answers
// ParameterDescription and NoData. So in a failed transaction, with
// nothing in flight on l (the status is l's own, no ROLLBACK ahead), the
// proxy prepares an empty query with the statement's parameter count and
// types in its place: the server, which accepts that Parse there, then
// gives the client's message the answer it would have given. The record
// marks the stand-in with its parameter types, so the first use after the transaction ends Parses
// the real statement (a Close first, as for any other in the way).
const standInMark = "\x00stand-in"

// describeWait is a client's Describe of a statement written to a link,
// whose ParameterDescription is still to come; parse is the statement's
// Parse body.
type describeWait struct {
	batch uint64
	parse string
	seq   uint64 // link.describeSeq when it was written
}

// maxInferred bounds session.inferred (statements whose parameter types
// the proxy learned); past it the map starts over.
const maxInferred = 1024

// paramsDescribedLocked notes a ParameterDescription the client receives
// from l: the answer to the oldest Describe of a statement waiting there.
// Callers hold ss.mu.
func (ss *session) paramsDescribedLocked(l *link, body []byte) {
	for len(l.describes) > 0 && l.describes[0].batch < l.rfqs {
		l.describes = l.describes[1:] // (a batch that ended unanswered)
	}
	if len(l.describes) == 0 {
		return
	}
	w := l.describes[0]
	l.describes = l.describes[1:]
	if w.parse == "" {
		return // (a statement whose Parse the proxy did not see)
	}
	var pd pgproto3.ParameterDescription
	if pd.Decode(body) != nil || slices.Contains(pd.ParameterOIDs, 0) {
		return // (a stand-in's, with a type left to the server)
	}
	l.shapeNext = w.parse
	ss.noteInferredLocked(w.parse, body)
}

// noteInferredLocked records the parameter types a ParameterDescription
// (body) tells for the statement of Parse body parse. Callers hold ss.mu.
func (ss *session) noteInferredLocked(parse string, body []byte) {
	var pd pgproto3.ParameterDescription
	if pd.Decode(body) != nil || slices.Contains(pd.ParameterOIDs, 0) {
		return // (a stand-in's, with a type left to the server)
	}
	if ss.mu.inferred == nil || len(ss.mu.inferred) >= maxInferred {
		ss.mu.inferred = map[string][]uint32{}
	}
	ss.mu.inferred[parse] = pd.ParameterOIDs
}

// learnTypes reports whether the client's Parse (body), about to be
// written to l, is followed by a Describe of the proxy's, whose
// ParameterDescription tells the parameter types the server infers
// (answer dropped, types noted: noteInferredLocked). A stand-in needs
// them (standIn): in a failed transaction, on a server that lacks the
// statement, a client's Describe of it is answered with its
// ParameterDescription and NoData as directly only if the proxy knows
// the types. So it is asked for a named statement of no rows (the only
// kind described in a failed transaction) with a parameter type left to
// the server, when the statement may be used on another server
// (routing, transaction pooling). The client's Describes of statements
// written before it in the batch answer their ParameterDescriptions
// first; the Describe's is told from theirs by their place
// (expect.after, clientDescribeFirstLocked). Until 2026-12-06 the types
// were learnt only when no such Describe came first in the batch, which
// left a statement Parsed after a Describe of another in one batch, and
// later Described in a failed transaction on a server lacking it,
// answered 25P02 where PostgreSQL describes it (differential
// 9943076375906529190). The Describe adds no statement and no round trip.
func (ss *session) learnTypes(l *link, body []byte) bool {
	if !ss.txPool && !ss.freshnessOn() {
		return false
	}
	var p pgproto3.Parse
	if p.Decode(body) != nil || p.Name == "" || !strings.Contains(p.Query, "$") {
		return false
	}
	ss.mu.Lock()
	_, known := ss.mu.inferred[string(body)]
	// (Batches pipelined before this one may be in flight: their
	// answers come before this batch's, and the Describe's answer is
	// matched within this batch only: stepLocked.)
	failed := l.failed == l.batches+1 || l.rawDescribe == l.batches+1
	ss.mu.Unlock()
	if known || failed {
		return false
	}
	info, ok := classify.DescribePrepared(p.Query, len(p.ParameterOIDs))
	if !ok || !info.RowsKnown || info.Rows || info.Params == 0 {
		return false
	}
	return len(p.ParameterOIDs) < info.Params || slices.Contains(p.ParameterOIDs, 0)
}

// injectLearnTypes writes the Describe learnTypes asked for, right after
// the client's Parse of statement name (body).
func (ss *session) injectLearnTypes(l *link, name string, body []byte) error {
	buf, _ := (&pgproto3.Describe{ObjectType: 'S', Name: name}).Encode(nil)
	ss.mu.Lock()
	l.swallow = append(l.swallow, expect{kind: 'i', batch: l.batches, parse: string(body), after: l.describeSeq})
	l.injected++
	ss.mu.Unlock()
	_, err := l.conn.W.Write(buf)
	return err
}

// describesFailedLocked drops the Describes of batch l.rfqs still
// waiting: the batch failed, the server skips them. Callers hold ss.mu.
func (l *link) describesFailedLocked() {
	kept := l.describes[:0]
	for _, w := range l.describes {
		if w.batch != l.rfqs {
			kept = append(kept, w)
		}
	}
	l.describes = kept
}

// standIn returns the stand-in for p on l before a message of type use,
// and its record mark; ok is false where the real Parse is to be sent:
// outside a failed transaction, with batches in flight on l, for a text
// that runs in a failed transaction (COMMIT, ROLLBACK, an empty query),
// and before a Describe whose answer the stand-in cannot give (a
// statement that returns rows, 25P02 from the real Parse as from
// PostgreSQL; a parameter type the server infers, unless a Describe of
// the statement told it: session.inferred).
func (ss *session) standIn(l *link, p *pgproto3.Parse, parse string, use byte) (_ *pgproto3.Parse, mark string, ok bool) {
	if !ss.standInUse(l, use) {
		return nil, "", false
	}
	info, ok := classify.DescribePrepared(p.Query, len(p.ParameterOIDs))
	if !ok {
		return nil, "", false
	}
	oids := p.ParameterOIDs
	if len(oids) < info.Params || slices.Contains(oids, 0) {
		// Types the server infers: known if a Describe of the same
		// statement told them.
		ss.mu.Lock()
		if have, ok := ss.mu.inferred[parse]; ok && len(have) == info.Params {
			oids = have
		}
		ss.mu.Unlock()
	}
	return standInFor(p.Name, info, oids, use)
}

// standInUse reports whether a message of type use on l may get a
// stand-in: l's transaction is failed and nothing is in flight there.
func (ss *session) standInUse(l *link, use byte) bool {
	if use != 'B' && use != 'D' && use != 'P' {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mu.tx == 'E' && l.batches == l.rfqs && !l.executed
}

// standInFor is the stand-in Parse of statement name, described by info,
// whose declared parameter types are oids.
func standInFor(name string, info classify.Prepared, oids []uint32, use byte) (_ *pgproto3.Parse, mark string, ok bool) {
	if info.Empty || info.TxExit {
		return nil, "", false
	}
	describable := info.RowsKnown && !info.Rows && len(oids) == info.Params && !slices.Contains(oids, 0)
	if use == 'D' && !describable {
		return nil, "", false
	}
	all := make([]uint32, info.Params)
	copy(all, oids)
	// The mark names the parameter types: the record of a shared server
	// connection may hold another client's stand-in of the same name,
	// which is the same statement only with the same types (a Bind of
	// zero parameters to a one-parameter stand-in fails with 08P01 where
	// PostgreSQL answers 25P02).
	var mb strings.Builder
	mb.WriteString(standInMark)
	for _, o := range all {
		mb.WriteByte(' ')
		mb.WriteString(strconv.FormatUint(uint64(o), 10))
	}
	if describable {
		mb.WriteString(" describable")
	}
	return &pgproto3.Parse{Name: name, ParameterOIDs: all}, mb.String(), true
}

// makeRoom keeps l's server within max_prepared_statements named
// statements in transaction pooling, where a server connection collects
// the statements of every client it serves (PgBouncer's
// max_prepared_statements). Before the unit b (ds, its statements) is
// prepared for on l, it closes the least recently used statements the
// unit does not name, as many as the unit may add past the bound; a
// client that uses one again gets it prepared again (ensureStatement), as
// on any other server connection. It evicts only at the start of a
// client's batch outside a transaction block, never a name with an
// answer or an undo still to come on l, and not while a DEALLOCATE ALL or
// DISCARD ALL that may fail is in flight there (its undo would put back
// what was closed); the bound may be passed until then. Every statement
// the unit names, in its messages or its SQL, is marked used.
func (ss *session) makeRoom(l *link, b *batch, ds []*classified) error {
	limit := ss.cfg.Server.MaxPreparedStatements
	if !ss.txPool || limit <= 0 {
		return nil
	}
	var names [8]string
	used := unitStatementNames(names[:0], b, ds)
	over := len(l.st.prepared) + l.st.touch(used) - limit
	if over <= 0 || ss.txStatus() != 'I' {
		// In a transaction block the statements it found stay to its end:
		// one missing inside a failed transaction could not be prepared
		// again in time to answer as the client's own server would
		// (docs/behaviour.md, "prepared on another connection").
		return nil
	}
	used, busy := ss.inFlightOn(l, used)
	if busy {
		return nil
	}
	victims := make([]string, 0, len(l.st.prepared))
	for n := range l.st.prepared {
		if !slices.Contains(used, n) {
			victims = append(victims, n)
		}
	}
	slices.SortFunc(victims, func(a, b string) int { return cmp.Compare(l.st.used[a], l.st.used[b]) })
	victims = victims[:min(over, len(victims))]
	for _, n := range victims {
		if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S', Name: n}, '3', l.record(n)); err != nil {
			return err
		}
		l.st.drop(n)
		delete(l.st.used, n)
	}
	if len(victims) > 0 {
		ss.srv.metrics.StatementsEvicted(ss.route.Name, len(victims))
	}
	return nil
}

// unitStatementNames appends to names, once each, the statements the unit
// b (ds, its statements) names: in Parse, Describe, Close, Bind messages
// and in SQL PREPARE, EXECUTE and DEALLOCATE.
func unitStatementNames(names []string, b *batch, ds []*classified) []string {
	add := func(n string) { // few per unit: a slice beats a map
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, m := range b.msgs {
		body := b.body(m)
		switch m.typ {
		case 'P':
			n, _ := parseName(body)
			add(n)
		case 'C':
			if kind, n, err := describeTarget(body); err == nil && kind == 'S' {
				add(n)
			}
		default:
			n, _ := stmtRef(m.typ, body)
			add(n)
		}
	}
	for _, d := range ds {
		for _, st := range d.Statements {
			add(st.PrepareName)
		}
	}
	return names
}

// touch marks the statements names as used now and reports how many of
// them the server does not hold (the most the unit may add). The use
// record forgets names no longer prepared once it outgrows the prepared.
func (st *serverState) touch(names []string) (adds int) {
	if st.used == nil {
		st.used = map[string]uint64{}
	}
	for _, n := range names {
		st.clock++
		st.used[n] = st.clock
		if !st.holds(n) {
			adds++
		}
	}
	if len(st.used) > 2*len(st.prepared)+64 {
		for n := range st.used {
			if _, ok := st.prepared[n]; !ok {
				delete(st.used, n)
			}
		}
	}
	return adds
}

// inFlightOn appends to keep the statements with an answer or an undo
// still to come on l (the record of them is settled when it arrives), and
// reports busy when nothing may be evicted there now: a client's batch is
// under way (the answer to a Close of the proxy's could not be told from
// those due to the client's messages before it, a Close of its own), or a
// DEALLOCATE ALL or DISCARD ALL is in flight.
func (ss *session) inFlightOn(l *link, keep []string) ([]string, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	busy := ss.mu.unsynced
	for _, ops := range [][]stmtOp{l.ops, l.undo} {
		for _, op := range ops {
			busy = busy || op.kind == 'X'
			keep = append(keep, op.name)
		}
	}
	for _, e := range l.swallow {
		if e.undo != nil {
			busy = busy || e.undo.kind == 'X'
			keep = append(keep, e.undo.name)
		}
	}
	return keep, busy
}

// skippedInFailedTx reports whether the server will skip the message
// injectStatements prepares for (injAt of injBatch) because the
// transaction is failed and a message of the batch before it fails for
// certain: a Parse of a statement that is not a transaction exit, with no
// Execute before it (a ROLLBACK run could end the failed state). What the
// proxy would prepare for it would fail too, ahead of every message of
// the batch, in place of the first one's answer (a Close's CloseComplete,
// which PostgreSQL sends in a failed transaction). Callers know the
// status: batches pipelined before are answered (settleBatches).
func (ss *session) skippedInFailedTx() bool {
	b := ss.inj.batch
	if b == nil || ss.txStatus() != 'E' {
		return false
	}
	for _, m := range b.msgs[:min(ss.inj.at, len(b.msgs))] {
		switch m.typ {
		case 'E':
			return false
		case 'P':
			_, q, err := parseNames(b.body(m))
			q = strings.TrimSpace(q)
			if err != nil || q == "" || strings.HasPrefix(q, "/*") || strings.HasPrefix(q, "--") || exitsFailedTx(q) {
				continue // (accepted there, or not known to fail)
			}
			return true
		}
	}
	return false
}

// injectStatements prepares on l, ahead of every message of b, the
// statements that b's Binds and Describes use but that l does not hold as
// the client prepared them (it prepared them on another server, or l
// dropped them), and closes what a Parse of b needs out of the way. All
// injected messages precede the client's, so their answers are the first
// of their kinds in the batch's response stream, where the reader drops
// them; one injected among the client's messages would take the place of
// the client's own ParseComplete (pipelines got their answers out of
// step).
func (ss *session) injectStatements(l *link, b *batch) error {
	ss.inj.extBatch = !slices.ContainsFunc(b.msgs, func(m batchMsg) bool { return m.typ == 'Q' || m.typ == 'F' })
	ss.inj.batch = b
	defer func() { ss.inj.extBatch, ss.inj.batch = false, nil }()
	// SQL PREPAREs to replay go first: outside a batch under way they are
	// simple Queries, which destroy the unnamed statement a re-Parse
	// below may have just prepared.
	// A stand-in (standIn) serves until the failed transaction ends: not
	// after an Execute of the batch (it may be a COMMIT or ROLLBACK), nor
	// for a Describe in a batch with one (a Bind after it would run the
	// stand-in).
	execAt := -1
	for i, m := range b.msgs {
		if m.typ == 'E' && ss.mayExitFailedTx(b, i) {
			execAt = i
			break
		}
	}
	useOf := func(i int, typ byte) byte {
		if execAt >= 0 && (i > execAt || typ == 'D') {
			return 0
		}
		return typ
	}
	if !ss.inj.midBatch {
		if err := ss.injectSQLPrepares(l, b, useOf); err != nil {
			return err
		}
	}
	return ss.injectProtocolStatements(l, b, useOf)
}

// injectSQLPrepares is injectStatements' first pass: the client's SQL
// PREPAREd statements that b uses by name (a Parse of one, to be refused
// with 42P05, or a Bind, Describe or Close) are made on l first. useOf
// gives the use each is made for (a stand-in's, or 0: a real one).
func (ss *session) injectSQLPrepares(l *link, b *batch, useOf func(int, byte) byte) error {
	var own map[string]bool // names b Parses or Closes itself before using them
	for i, m := range b.msgs {
		body := b.body(m)
		var n string
		switch m.typ {
		case 'P':
			n, _ = parseName(body)
			if n != "" && !own[n] {
				// A Parse of a name the client PREPAREd: the server
				// must hold that one to refuse the Parse (42P05).
				if _, parsed := ss.client.stmts[n]; !parsed {
					if _, prepared := ss.client.sqlPrepared[n]; prepared {
						ss.inj.at = i
						if err := ss.ensureSQLStatement(l, n, useOf(i, 'P')); err != nil {
							return err
						}
					}
				}
			}
		case 'C':
			if kind, cn, err := describeTarget(body); err == nil && kind == 'S' {
				n = cn
			}
		default:
			ref, ok := stmtRef(m.typ, body)
			if !ok || ref == "" || own[ref] {
				continue
			}
			if _, parsed := ss.client.stmts[ref]; parsed {
				continue
			}
			if _, prepared := ss.client.sqlPrepared[ref]; prepared {
				ss.inj.at = i
				if err := ss.ensureSQLStatement(l, ref, useOf(i, m.typ)); err != nil {
					return err
				}
			}
			continue
		}
		if own == nil {
			own = map[string]bool{}
		}
		own[n] = true
	}
	return nil
}

// injectProtocolStatements is injectStatements' second pass: each
// statement name b uses before Parsing or Closing it itself is made on l
// as the client holds it (ensureStatement), once; a Parse of a name the
// client holds makes it too (the server refuses the duplicate, 42P05),
// and one of a name l holds for nobody closes that first.
func (ss *session) injectProtocolStatements(l *link, b *batch, useOf func(int, byte) byte) error {
	var seen nameSet // statement names b itself Parses or Closes, or used, in order
	// With a limit (localext.go) the whole batch is prepared for now:
	// its later messages follow without injections between them.
	for i, m := range b.msgs {
		body := b.body(m)
		ss.inj.at = i
		var name string
		switch m.typ {
		case 'P':
			n, err := parseName(body)
			if err != nil {
				continue
			}
			if !seen.has(n) && n != "" {
				if _, known := ss.client.stmts[n]; known {
					// The client's statement of that name must exist where
					// the Parse runs, so the server refuses the duplicate
					// (42P05) as the client's own server would.
					if err := ss.ensureStatement(l, n, useOf(i, 'P')); err != nil {
						return err
					}
				} else if _, known := ss.client.sqlPrepared[n]; known {
					if err := ss.ensureStatement(l, n, useOf(i, 'P')); err != nil {
						return err
					}
				} else {
					if l.st.holds(n) {
						// Left on this server after the client closed it
						// elsewhere, or another client's (transaction
						// pooling): make room for the client's new one.
						if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S', Name: n}, '3', l.record(n)); err != nil {
							return err
						}
						l.st.drop(n)
					}
				}
			}
			seen.add(n)
			continue
		case 'C':
			if kind, n, err := describeTarget(body); err == nil && kind == 'S' {
				seen.add(n)
			}
			continue
		default:
			n, ok := stmtRef(m.typ, body)
			if !ok {
				continue
			}
			name = n
		}
		if !seen.has(name) {
			// Once per name: every injection precedes the batch, so its
			// first use decides (a stand-in must not be replaced by a
			// later one's real Parse).
			if err := ss.ensureStatement(l, name, useOf(i, m.typ)); err != nil {
				return err
			}
			seen.add(name)
		}
	}
	return nil
}

// nameSet is a set of statement names that holds the few a batch usually
// names without allocating (a map per unit showed in the routed profile).
type nameSet struct {
	few  [4]string
	n    int
	many map[string]bool // past len(few)
}

func (s *nameSet) has(name string) bool {
	for _, f := range s.few[:s.n] {
		if f == name {
			return true
		}
	}
	return s.many[name]
}

func (s *nameSet) add(name string) {
	switch {
	case s.has(name):
	case s.n < len(s.few):
		s.few[s.n] = name
		s.n++
	default:
		if s.many == nil {
			s.many = map[string]bool{}
		}
		s.many[name] = true
	}
}

// mayExitFailedTx reports whether the Execute b.msgs[i] may end a failed
// transaction: its portal's statement, bound earlier in b or in an earlier
// batch (client.exitPortals), is a COMMIT, ROLLBACK or the like, or is not
// known. (PostgreSQL refuses every other Execute in a failed
// transaction, 25P02, and so a stand-in prepared ahead of the batch
// serves the messages after it as it would before it.)
func (ss *session) mayExitFailedTx(b *batch, i int) bool {
	portal, _, err := cstring(b.body(b.msgs[i]))
	if err != nil {
		return true
	}
	for j := i - 1; j >= 0; j-- {
		m := b.msgs[j]
		if m.typ != 'B' {
			continue
		}
		body := b.body(m)
		dest, _, err := cstring(body)
		if err != nil || dest != portal {
			continue
		}
		stmt, err := bindStatement(body)
		if err != nil {
			return true
		}
		for k := j - 1; k >= 0; k-- {
			if b.msgs[k].typ != 'P' {
				continue
			}
			if n, q, err := parseNames(b.body(b.msgs[k])); err == nil && n == stmt {
				return mayExitText(q)
			}
		}
		text, ok := ss.statementText(stmt)
		return !ok || mayExitText(text)
	}
	pe, ok := ss.client.exitPortals[portal]
	return !ok || pe.exit
}

// mayExitText reports whether a statement text may end a failed
// transaction: a COMMIT, ROLLBACK or the like (exitsFailedTx), or a text
// that starts with a comment, which the first word does not tell (a hint
// before a ROLLBACK).
func mayExitText(q string) bool {
	q = strings.TrimSpace(q)
	return strings.HasPrefix(q, "/*") || strings.HasPrefix(q, "--") || exitsFailedTx(q)
}

// portalExit is what session.exitPortals knows of a portal: whether its
// statement ends a failed transaction, and the unit that made it.
type portalExit struct {
	exit bool
	unitAge
}

// statementText is the text of the client's statement name as it Parsed
// it (false: not known, or PREPAREd in SQL).
func (ss *session) statementText(name string) (string, bool) {
	if name == "" {
		return ss.client.unnamed.query, ss.client.unnamed.parse != ""
	}
	st, ok := ss.client.stmts[name]
	return st.query, ok
}

// ensureStatementSynced is ensureStatement ahead of a simple Query (an
// EXECUTE, PREPARE or DEALLOCATE of a Parsed statement): what it injects
// gets a Sync of its own, so a failure of it cannot make the server skip
// the client's Query waiting for a Sync that never comes.
func (ss *session) ensureStatementSynced(l *link, name string) error {
	ss.mu.Lock()
	before := l.injected
	ss.mu.Unlock()
	if err := ss.ensureStatement(l, name, 0); err != nil {
		return err
	}
	ss.mu.Lock()
	// (Counted, not read off the queue: a re-Parse whose shape is
	// checked has been answered already, and left it.)
	injected := l.injected > before
	ss.mu.Unlock()
	if !injected {
		return nil
	}
	return ss.inject(l, &pgproto3.Sync{}, 'Z')
}

// ensureAllPrepared makes l hold exactly the named statements the client
// has, of its Parses and of its SQL PREPAREs: it prepares the missing
// ones and closes those the client does not hold (deallocated on another
// server: DEALLOCATE ran where it was routed), in name order.
func (ss *session) ensureAllPrepared(l *link) error {
	names := map[string]bool{}
	for _, m := range []map[string]string{l.st.prepared, l.st.sqlPrepared} {
		for name := range m {
			names[name] = true
		}
	}
	for name := range ss.client.stmts {
		names[name] = true
	}
	for name := range ss.client.sqlPrepared {
		names[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if name == "" {
			continue
		}
		// (One the client does not hold is closed.)
		if err := ss.ensureExecutable(l, name); err != nil {
			return err
		}
	}
	return nil
}

// ensureExecutedBy makes l hold the SQL-prepared statements a statement
// text names (EXECUTE name, EXPLAIN EXECUTE name, CREATE TABLE … AS
// EXECUTE name) ahead of a Parse of that text there: PostgreSQL looks
// the name up at Parse, and a Describe of the statement answers that
// statement's result columns (psql's \gdesc of EXECUTE is a Parse, then
// a Describe in a batch of its own, which in transaction pooling may run
// on another server connection, one holding another client's statement
// of the same name).
func (ss *session) ensureExecutedBy(l *link, query string) error {
	if !containsFold(query, "execute") || ss.inj.executedBy > 2 {
		return nil
	}
	ss.inj.executedBy++
	defer func() { ss.inj.executedBy-- }()
	for _, st := range ss.classifier.Classify(query).Statements {
		name := st.Executes
		if st.Effect == classify.EffectExecute {
			name = st.PrepareName
		}
		if name == "" {
			continue
		}
		if err := ss.ensureExecutable(l, name); err != nil {
			return err
		}
	}
	return nil
}

// ensureExecutable makes l hold the client's statement name as SQL
// EXECUTE name finds it: of a Parse or of a SQL PREPARE (one namespace),
// or none (a statement of that name l holds is closed).
func (ss *session) ensureExecutable(l *link, name string) error {
	if _, parsed := ss.client.stmts[name]; parsed {
		return ss.ensureStatementSynced(l, name)
	}
	return ss.ensureSQLStatement(l, name, 0)
}

// ensureSQLStatement replays the client's SQL PREPARE of name on l when
// l does not hold it as the client prepared it; nothing when the client
// has no such statement (the server reports it).
func (ss *session) ensureSQLStatement(l *link, name string, use byte) error {
	want, ok := ss.client.sqlPrepared[name]
	if !ok {
		_, parsed := l.st.prepared[name]
		_, prepared := l.st.sqlPrepared[name]
		if name != "" && (parsed || prepared) {
			// The server holds a statement of that name that is not the
			// client's (another client's, on a pooled connection, or one
			// the client closed elsewhere): close it, so the client's use
			// fails with 26000 as directly instead of running it.
			if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S', Name: name}, '3', l.record(name)); err != nil {
				return err
			}
			l.st.drop(name)
		}
		return nil
	}
	if l.st.sqlPrepared[name] == want.text {
		return nil
	}
	if waited, err := ss.settleBatches(l); err != nil {
		return err
	} else if waited {
		return ss.ensureSQLStatement(l, name, use)
	}
	if ss.skippedInFailedTx() {
		return nil
	}
	if ss.standInUse(l, use) {
		if info, ok := classify.DescribeSQLPrepare(want.text); ok {
			if stand, mark, ok := standInFor(name, info, nil, use); ok {
				if l.st.prepared[name] == mark {
					return nil
				}
				if l.st.holds(name) {
					if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S', Name: name}, '3', l.record(name)); err != nil {
						return err
					}
					l.st.drop(name)
				}
				if err := ss.injectUndo(l, stand, '1', l.record(name)); err != nil {
					return err
				}
				l.st.prepared[name] = mark
				return nil
			}
		}
	}
	if ss.inj.midBatch || ss.inj.restOpen || ss.inj.extBatch && ss.txStatus() == 'E' {
		// Inside the client's extended batch a simple Query would end it
		// half-way: the PREPARE runs as an extended statement of the
		// proxy's own, under names no client uses. So it does ahead of
		// a Bind, Describe or Parse in a failed transaction: it fails
		// there (25P02) as the client's message would have, and the
		// client gets that error for it (a simple Query's failure would
		// go unseen, and the message then failed with 26000).
		return ss.replayPrepareExtended(l, name, want.text)
	}
	if l.st.holds(name) {
		// Another statement of that name, of either kind (one
		// namespace), is in the way: a protocol Close removes both kinds,
		// also in a failed transaction.
		if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S', Name: name}, '3', l.record(name)); err != nil {
			return err
		}
		l.st.drop(name)
	}
	if err := ss.injectUndo(l, &pgproto3.Query{String: want.text}, 'Z', l.record(name)); err != nil {
		return err
	}
	if ss.txStatus() == 'E' {
		ss.noteStmtOp(l, stmtOp{kind: 'i', name: name}) // likely to fail: see ensureStatement
	}
	l.st.sqlPrepared[name] = want.text
	return nil
}

// replayPrepareExtended runs a client's SQL PREPARE on l in the extended
// protocol (Parse/Bind/Execute of the PREPARE itself, then Close), inside
// the client's batch. A statement of that name in the way is closed first
// (a protocol Close closes a PREPAREd one too).
func (ss *session) replayPrepareExtended(l *link, name, text string) error {
	const tmp = "pg_kinetic prepare"
	if l.st.holds(name) {
		if err := ss.injectUndo(l, &pgproto3.Close{ObjectType: 'S', Name: name}, '3', l.record(name)); err != nil {
			return err
		}
		l.st.drop(name)
	}
	steps := []struct {
		msg  pgproto3.FrontendMessage
		drop byte
	}{
		{&pgproto3.Parse{Name: tmp, Query: text}, '1'},
		{&pgproto3.Bind{DestinationPortal: tmp, PreparedStatement: tmp}, '2'},
		{&pgproto3.Execute{Portal: tmp}, 'C'},
		{&pgproto3.Close{ObjectType: 'P', Name: tmp}, '3'},
		{&pgproto3.Close{ObjectType: 'S', Name: tmp}, '3'},
	}
	undo := l.record(name)
	for i, s := range steps {
		var u *stmtOp
		if i == 2 { // the Execute that prepares it
			u = undo
		}
		if err := ss.injectUndo(l, s.msg, s.drop, u); err != nil {
			return err
		}
	}
	// (In a failed transaction the Parse fails with 25P02, the error the
	// client's own Bind would have had; the record is taken back then.)
	if ss.txStatus() == 'E' {
		ss.noteStmtOp(l, stmtOp{kind: 'i', name: name})
	}
	l.st.sqlPrepared[name] = text
	return nil
}

// needsStatements reports whether writing b to l would first prepare or
// close a statement there (injectStatements): the conditions of
// ensureStatement, without writing.
func (ss *session) needsStatements(l *link, b *batch) bool {
	for _, m := range b.msgs {
		body := b.body(m)
		var name string
		switch m.typ {
		case 'P':
			n, err := parseName(body)
			if err != nil || n == "" {
				continue
			}
			_, known := ss.client.stmts[n]
			_, sqlKnown := ss.client.sqlPrepared[n]
			if known || sqlKnown || l.st.holds(n) {
				return true
			}
			continue
		default:
			n, ok := stmtRef(m.typ, body)
			if !ok {
				continue
			}
			name = n
		}
		if name == "" {
			if ss.client.unnamed.parse != l.st.unnamed {
				return true
			}
			continue
		}
		if want, ok := ss.client.stmts[name]; ok {
			if l.st.prepared[name] != want.key() {
				return true
			}
		} else if want, ok := ss.client.sqlPrepared[name]; ok {
			if l.st.sqlPrepared[name] != want.text {
				return true
			}
		} else {
			_, parsed := l.st.prepared[name]
			_, prepared := l.st.sqlPrepared[name]
			if parsed || prepared {
				return true // not the client's: closed first
			}
		}
	}
	return false
}

// stmtOp is a change a client's Parse or Close makes to the statements
// it holds, kept on the link until the server answers it: a ParseComplete
// or CloseComplete confirms it; an ErrorResponse before that means the
// server refused or skipped it, and the change is undone (undoStmtOps),
// on the client's side and on the server's record, so a statement the
// server never took is never prepared elsewhere in its name.
type stmtOp struct {
	// 'P' Parse, 'C' Close of a statement, 'c' Close of a portal; 'q' a
	// SQL PREPARE, 'x' a SQL DEALLOCATE (a simple Query of that statement
	// alone: its batch fails if and only if it does); 'i' a Parse of the
	// proxy's own in a failed transaction, only waited for (settleOps).
	kind  byte
	name  string // statement name
	batch uint64 // the link's batch it was written in
	// idx is the number of the client's messages written in its batch
	// before it (the server answers each in turn: see link.answered).
	idx  int
	noop bool // changes nothing (a Parse the server will refuse, a portal)
	// set is the record written (stmtInfo.key; "" for a Close); prev/had what the
	// client held before, prevServer/hadServer what the server held.
	set                  string
	prev                 stmtInfo
	had                  bool
	prevServer           string
	hadServer, dropAfter bool
	// A Close of a statement the client PREPAREd in SQL (one namespace):
	// what the client and the server held.
	prevSQL       *sqlPrep
	prevServerSQL *string
	// A Parse of the unnamed statement: the local pg_kinetic statement it
	// replaced, if any (restored when the server skipped the Parse).
	prevLocal *kcmd
	serverSet string // 'q': the PREPARE text recorded for the server
	// 'X', a DEALLOCATE ALL or DISCARD ALL: everything it would forget,
	// to restore if it fails.
	allStmts                map[string]stmtInfo
	allSQL                  map[string]sqlPrep
	allServer, allServerSQL map[string]string
}

// record snapshots l's record of statement name ("" the unnamed) as an
// undo op ('R') for a statement of the proxy's own that changes it.
func (l *link) record(name string) *stmtOp {
	op := &stmtOp{kind: 'R', name: name}
	if name == "" {
		op.prevServer, op.hadServer = l.st.unnamed, l.st.unnamed != ""
		return op
	}
	op.prevServer, op.hadServer = l.st.prepared[name]
	if v, ok := l.st.sqlPrepared[name]; ok {
		op.prevServerSQL = &v
	}
	return op
}

// sqlStatementOp, for a simple Query that is one SQL PREPARE or one
// DEALLOCATE of a name, is the op that undoes its bookkeeping if the
// server refuses it (before prepareLink and recordEffects apply it).
func (ss *session) sqlStatementOp(l *link, b *batch, ds []*classified) (stmtOp, bool) {
	if len(b.msgs) != 1 || b.msgs[0].typ != 'Q' || len(ds) != 1 || len(ds[0].Statements) != 1 {
		return stmtOp{}, false
	}
	st := ds[0].Statements[0]
	name := st.PrepareName
	switch {
	case st.Effect == classify.EffectPrepare && st.Inner != nil:
		_, taken := ss.client.sqlPrepared[name]
		if _, parsed := ss.client.stmts[name]; parsed || taken {
			return stmtOp{}, false // refused (42P05): nothing is recorded
		}
		text := strings.TrimSpace(ds[0].text)
		return stmtOp{kind: 'q', name: name, set: text, serverSet: text}, true
	case st.Effect == classify.EffectDeallocate && name == "":
		return stmtOp{kind: 'X', allStmts: maps.Clone(ss.client.stmts), allSQL: maps.Clone(ss.client.sqlPrepared),
			allServer: maps.Clone(l.st.prepared), allServerSQL: maps.Clone(l.st.sqlPrepared)}, true
	case st.Effect == classify.EffectDeallocate && name != "":
		op := stmtOp{kind: 'x', name: name}
		if p, ok := ss.client.sqlPrepared[name]; ok {
			op.prevSQL = &p
			if have, ok := l.st.sqlPrepared[name]; ok && have == p.text {
				op.hadServer, op.prevServerSQL = true, &have
			}
		} else if info, ok := ss.client.stmts[name]; ok {
			op.prev, op.had = info, true
			if have, ok := l.st.prepared[name]; ok && have == info.key() {
				op.hadServer, op.prevServer = true, have
			}
		}
		if ss.txStatus() != 'E' && (op.prevSQL != nil || op.had) {
			op.hadServer = true // replayed there first (ensureSQLPrepared)
			if op.prevSQL != nil {
				op.prevServerSQL = &op.prevSQL.text
			} else {
				op.prevServer = op.prev.parse
			}
		}
		return op, true
	}
	return stmtOp{}, false
}

// discardNow, for a unit that is one DISCARD ALL, forgets every named
// statement the client and l's server hold when the unit is sent (the
// unnamed one survives it, as DEALLOCATE ALL; a simple Query drops it
// anyway: trackFrontend): on the session
// goroutine, which owns both records, and in the order of the client's
// messages (a Parse pipelined after it prepares the client's next
// statement). The 'X' op it queues restores them if the server refuses it
// (25001 in a transaction block). Its settings and the other servers'
// statements wait for it to succeed (unitEnded, prepareLink).
func (ss *session) discardNow(l *link, ds []*classified) {
	if len(ds) != 1 || len(ds[0].Statements) != 1 || ds[0].Statements[0].Effect != classify.EffectDiscardAll {
		return
	}
	ss.noteStmtOp(l, stmtOp{kind: 'X', allStmts: maps.Clone(ss.client.stmts), allSQL: maps.Clone(ss.client.sqlPrepared),
		allServer: maps.Clone(l.st.prepared), allServerSQL: maps.Clone(l.st.sqlPrepared)})
	ss.client.stmts = map[string]stmtInfo{}
	ss.client.sqlPrepared = map[string]sqlPrep{}
	clear(l.st.prepared)
	clear(l.st.sqlPrepared)
}

// noteStmtOp queues op on l, in the order the server answers. Callers
// hold no lock (session goroutine).
//
// A link that died meanwhile (linkFailed, from its reader, while the
// session goroutine was still writing the batch to it) never answers:
// the op did not happen for the client, as linkFailed says of the ops
// queued before it. Queued on the dead link it would never be undone,
// and a read retried elsewhere would find the client holding a
// statement it never got: its own Parse then followed a re-Parse of
// the proxy's, 42P05 "already exists" (the consistency checker under
// standby restarts, 2026-12-04 and 2026-12-05; TestNoteStmtOpOnDeadLink).
func (ss *session) noteStmtOp(l *link, op stmtOp) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	op.batch, op.idx = l.batches, l.sent
	if l.dead {
		if !op.noop {
			ss.mu.undo = append(ss.mu.undo, op)
			ss.hasUndo.Store(true)
		}
		return
	}
	l.ops = append(l.ops, op)
}

// stmtAnswered confirms the first queued op answered by a ParseComplete
// ('1') or CloseComplete ('3') the client receives. Callers hold ss.mu.
func (l *link) stmtAnsweredLocked(t byte) {
	for i, op := range l.ops {
		if t == '1' && op.kind == 'P' || t == '3' && (op.kind == 'C' || op.kind == 'c') {
			if i == 0 {
				// The usual case, resliced: a batch of 100,000 Parses
				// (pgx's TestConnExecBatchHuge) took 45 s when every
				// answer moved the rest of the queue.
				l.ops = l.ops[1:]
			} else {
				l.ops = append(l.ops[:i], l.ops[i+1:]...)
			}
			return // (the caller wakes settleOps)
		}
	}
}

// earlierOpsLocked is the part of l.ops queued in batches before the one
// being written: ops are queued in batch order (noteStmtOp), so it is a
// prefix, found without looking at the current batch's (which may be
// many). Callers hold ss.mu.
func (l *link) earlierOpsLocked() []stmtOp {
	n, _ := slices.BinarySearchFunc(l.ops, l.batches, func(op stmtOp, b uint64) int { return cmp.Compare(op.batch, b) })
	return l.ops[:n]
}

// batchFailedLocked is called when the client receives a server's error
// in batch l.rfqs: that batch's unanswered statement ops did not happen.
// Callers hold ss.mu.
func (ss *session) batchFailedLocked(l *link) {
	kept := l.ops[:0]
	first := true
	for _, op := range l.ops {
		if op.batch == l.rfqs && !op.noop && first && op.kind == 'P' && op.name == "" && op.idx == l.answered {
			if l.errInjected {
				// The error is an injected statement's, ahead of this
				// Parse, which the server skipped: its unnamed statement
				// stays. The client takes the error as this Parse's, and
				// directly that Parse would have dropped the unnamed
				// statement before it failed: there is none for the client.
				op.prev, op.had, op.prevLocal = stmtInfo{}, false, nil
			} else {
				// The error is this Parse's own: the server dropped its
				// unnamed statement before it parsed the new one, so
				// there is none now, on either side.
				op.prev, op.had, op.prevServer, op.hadServer, op.prevLocal = stmtInfo{}, false, "", false, nil
			}
		}
		if op.batch == l.rfqs && op.kind != 'i' {
			first = false
		}
		if op.batch == l.rfqs && !op.noop {
			l.undo = append(l.undo, op)
			ss.mu.undo = append(ss.mu.undo, op)
			ss.hasUndo.Store(true)
		} else if op.batch != l.rfqs {
			kept = append(kept, op)
		}
	}
	l.ops = kept
	ss.turn.Broadcast() // settleOps may wait for them
	l.describesFailedLocked()
	l.errInjected = false
}

// applyClientUndo undoes, on the client's side, statement changes the
// server did not make (session goroutine).
func (ss *session) applyClientUndo() {
	if !ss.hasUndo.Load() {
		return
	}
	ss.mu.Lock()
	ops := ss.mu.undo
	ss.mu.undo = nil
	ss.hasUndo.Store(false)
	ss.mu.Unlock()
	ss.undoClient(ops)
}

// takeUndo applies the pending undos of l's record and of the client's
// side together: an error arriving in between would leave them apart. The
// session goroutine calls it holding a claim on l.
func (ss *session) takeUndo(l *link) {
	ss.mu.Lock()
	if len(l.undo) > 0 {
		l.applyServerUndoLocked()
	}
	ops := ss.mu.undo
	ss.mu.undo = nil
	ss.hasUndo.Store(false)
	ss.mu.Unlock()
	ss.undoClient(ops)
}

// settleBatches waits, before the proxy prepares a client's statement
// again on l, until the batches already sent there (pipelined) are
// answered, and reports whether it waited. One of them may fail the
// transaction: the proxy's Parse or PREPARE would then fail too (25P02,
// swallowed), and the client's Bind after it with 26000, where
// PostgreSQL, holding the statement, answers 25P02 (or 08P01 for a wrong
// parameter count). Once the status is known, standIn answers as
// PostgreSQL does. A statement that is on l already needs no wait, so
// this costs a round trip only when a pipelined unit uses a statement
// the client prepared on another server connection.
func (ss *session) settleBatches(l *link) (bool, error) {
	ss.mu.Lock()
	inFlight := l.rfqs < l.batches
	ss.mu.Unlock()
	if !inFlight {
		return false, nil
	}
	if err := l.conn.W.Flush(); err != nil { // (the batches' Syncs may be buffered still)
		return false, errServerGone
	}
	ss.mu.Lock()
	for l.rfqs < l.batches && !l.dead && !ss.mu.killed {
		ss.turn.Wait()
	}
	gone := l.dead || ss.mu.killed
	ss.mu.Unlock()
	if gone {
		return false, errServerGone
	}
	ss.takeUndo(l)
	return true, nil
}

// settleOps waits until l's server has answered the client's Parses and
// Closes of statement name still in flight (pipelined batches), so the
// statement is known to exist or not before it is prepared again there.
func (ss *session) settleOps(l *link, name string) {
	ss.mu.Lock()
	waited := false
	// Only ops of batches already ended by a Sync (and so flushed); this
	// batch's own are ahead of the message being written.
	// A DEALLOCATE ALL or DISCARD ALL ('X') forgot every name: one the
	// server refuses brings them back (undoClient).
	pending := func(op stmtOp) bool { return (op.name == name || op.kind == 'X') && !op.noop }
	for !l.dead && !ss.mu.killed && slices.ContainsFunc(l.earlierOpsLocked(), pending) {
		ss.turn.Wait()
		waited = true
	}
	ss.mu.Unlock()
	if waited {
		ss.takeUndo(l)
	}
}

// undoClient undoes ops on the client's side, last first.
func (ss *session) undoClient(ops []stmtOp) {
	for i := len(ops) - 1; i >= 0; i-- {
		op := ops[i]
		switch {
		case op.kind == 'P' && op.name == "":
			if ss.client.unnamed.parse == op.set {
				ss.client.unnamed = op.prev // had or not: prev is the zero stmtInfo then
				if op.prevLocal != nil {
					ss.client.kstmts[""] = *op.prevLocal
				}
			}
		case op.kind == 'P':
			if cur, ok := ss.client.stmts[op.name]; ok && cur.key() == op.set {
				if op.had {
					ss.client.stmts[op.name] = op.prev
				} else {
					delete(ss.client.stmts, op.name)
				}
			}
		case op.kind == 'C' && op.had:
			if op.name == "" {
				if ss.client.unnamed.parse == "" {
					ss.client.unnamed = op.prev
				}
			} else if _, ok := ss.client.stmts[op.name]; !ok {
				ss.client.stmts[op.name] = op.prev
			}
		case op.kind == 'C' && op.prevSQL != nil:
			if _, ok := ss.client.sqlPrepared[op.name]; !ok {
				ss.client.sqlPrepared[op.name] = *op.prevSQL
			}
		case op.kind == 'q':
			// A PREPARE that failed (42P05, 25P02, a syntax error)
			// prepared nothing.
			if p, ok := ss.client.sqlPrepared[op.name]; ok && p.text == op.set {
				delete(ss.client.sqlPrepared, op.name)
			}
		case op.kind == 'X':
			for k, v := range op.allStmts {
				if _, ok := ss.client.stmts[k]; !ok {
					ss.client.stmts[k] = v
				}
			}
			for k, v := range op.allSQL {
				if _, ok := ss.client.sqlPrepared[k]; !ok {
					ss.client.sqlPrepared[k] = v
				}
			}
		case op.kind == 'x':
			// A DEALLOCATE that failed deallocated nothing.
			if op.prevSQL != nil {
				if _, ok := ss.client.sqlPrepared[op.name]; !ok {
					ss.client.sqlPrepared[op.name] = *op.prevSQL
				}
			} else if op.had {
				if _, ok := ss.client.stmts[op.name]; !ok {
					ss.client.stmts[op.name] = op.prev
				}
			}
		}
	}
}

// applyServerUndoLocked undoes l's record of statement changes its server
// did not make. Callers hold ss.mu and own l's state: the session
// goroutine before it writes to l, or l's reader once no claim is left.
func (l *link) applyServerUndoLocked() {
	for i := len(l.undo) - 1; i >= 0; i-- {
		op := l.undo[i]
		switch {
		case op.kind == 'P' && op.name == "":
			if l.st.unnamed == op.set {
				l.st.unnamed = op.prevServer
			}
		case op.kind == 'P':
			if l.st.prepared[op.name] == op.set {
				if op.hadServer {
					l.st.prepared[op.name] = op.prevServer
				} else {
					delete(l.st.prepared, op.name)
				}
			}
		case op.kind == 'C' && op.hadServer:
			if op.name == "" {
				if l.st.unnamed == "" {
					l.st.unnamed = op.prevServer
				}
			} else if _, ok := l.st.prepared[op.name]; !ok {
				l.st.prepared[op.name] = op.prevServer
			}
		case op.kind == 'C' && op.prevServerSQL != nil:
			if _, ok := l.st.sqlPrepared[op.name]; !ok {
				l.st.sqlPrepared[op.name] = *op.prevServerSQL
			}
		case op.kind == 'q':
			if l.st.sqlPrepared[op.name] == op.serverSet {
				delete(l.st.sqlPrepared, op.name)
			}
		case op.kind == 'R':
			// A statement of the proxy's own that failed or was skipped:
			// the record is what it was before it.
			if op.name == "" {
				l.st.unnamed = op.prevServer
				break
			}
			l.st.drop(op.name)
			if op.hadServer {
				l.st.prepared[op.name] = op.prevServer
			}
			if op.prevServerSQL != nil {
				l.st.sqlPrepared[op.name] = *op.prevServerSQL
			}
		case op.kind == 'X':
			for k, v := range op.allServer {
				if !l.st.holds(k) {
					l.st.prepared[k] = v
				}
			}
			for k, v := range op.allServerSQL {
				if !l.st.holds(k) {
					l.st.sqlPrepared[k] = v
				}
			}
		case op.kind == 'x' && op.hadServer:
			if !l.st.holds(op.name) {
				if op.prevServerSQL != nil {
					l.st.sqlPrepared[op.name] = *op.prevServerSQL
				} else {
					l.st.prepared[op.name] = op.prevServer
				}
			}
		}
	}
	l.undo = nil
}

// trackFrontend updates the session's statement bookkeeping for a client
// message about to be written to l, injecting what l needs first.
func (ss *session) trackFrontend(l *link, typ byte, body []byte) error {
	ss.mu.Lock()
	skipped := l.failed == l.batches+1 && typ != 'S'
	ss.mu.Unlock()
	if skipped {
		// The batch already failed (an error arrived before this message
		// was written): the server skips it to Sync, it changes nothing.
		return nil
	}
	switch typ {
	case 'P':
		ss.trackParse(l, body)
	case 'B':
		ss.trackBind(body)
	case 'C':
		ss.trackClose(l, body)
	case 'D':
		ss.trackDescribe(l, body)
	case 'Q':
		// A simple Query drops the unnamed statement, on the server and so
		// for the client too (a later Bind of it fails there as here).
		l.st.unnamed = ""
		ss.client.unnamed = stmtInfo{}
		ss.forgetLocalOnQuery()
	}
	return nil
}

// trackParse follows a Parse written to l: the client's statement and l's.
func (ss *session) trackParse(l *link, body []byte) {
	name, rest, err := cstring(body)
	if err != nil || bytes.IndexByte(rest, 0) < 0 {
		return // malformed: the server rejects it
	}
	parse := string(body)
	info := stmtInfo{query: queryOf(parse), parse: parse}
	if name != "" {
		info.tag = ss.client.parseTag(ss.id, name)
	}
	op := stmtOp{kind: 'P', name: name, set: info.key()}
	ss.forgetShape(info.parse)
	if name == "" {
		if k, ok := ss.client.kstmts[""]; ok {
			op.prevLocal = &k
		}
		ss.forgetServerUnnamed('P', name)
		op.prev, op.had = ss.client.unnamed, ss.client.unnamed.parse != ""
		op.prevServer, op.hadServer = l.st.unnamed, l.st.unnamed != ""
		ss.noteStmtOp(l, op)
		ss.client.unnamed = info
		l.st.unnamed = info.parse
		return
	}
	_, known := ss.client.stmts[name]
	_, sqlKnown := ss.client.sqlPrepared[name]
	if known || sqlKnown {
		// The server refuses it (42P05): the client's stays.
		op.noop = true
		ss.noteStmtOp(l, op)
		return
	}
	op.prevServer, op.hadServer = l.st.prepared[name]
	ss.noteStmtOp(l, op)
	ss.client.stmts[name] = info
	l.st.prepared[name] = info.key()
}

// trackBind follows a Bind: the portal it makes, and whether its
// statement may end a failed transaction.
func (ss *session) trackBind(body []byte) {
	if portal, _, err := cstring(body); err == nil {
		ss.forgetServerUnnamed('B', portal)
		if portal != "" {
			if ss.client.srvPortals == nil {
				ss.client.srvPortals = map[string]portalAge{}
			}
			ss.client.srvPortals[portal] = ss.portalAgeNow()
		}
		if stmt, err := bindStatement(body); err == nil {
			if ss.client.exitPortals == nil {
				ss.client.exitPortals = map[string]portalExit{}
			}
			text, ok := ss.statementText(stmt)
			ss.client.exitPortals[portal] = portalExit{exit: !ok || mayExitText(text), unitAge: ss.unitAgeNow()}
		}
	}
	// The statement it uses was prepared ahead (injectStatements):
	// nothing is injected here, among the client's messages.
}

// trackClose follows a Close written to l: of a portal, or of a statement
// (the client's and l's, a SQL-PREPAREd one too).
func (ss *session) trackClose(l *link, body []byte) {
	kind, name, err := describeTarget(body)
	if err != nil {
		return
	}
	if kind != 'S' {
		ss.closeForClient(kind, name)
		ss.noteStmtOp(l, stmtOp{kind: 'c', name: name, noop: true})
		return
	}
	op := stmtOp{kind: 'C', name: name}
	if name == "" {
		op.prev, op.had = ss.client.unnamed, ss.client.unnamed.parse != ""
		op.prevServer, op.hadServer = l.st.unnamed, l.st.unnamed != ""
		ss.noteStmtOp(l, op)
		l.st.unnamed = ""
	} else {
		op.prev, op.had = ss.client.stmts[name]
		op.prevServer, op.hadServer = l.st.prepared[name]
		if p, ok := ss.client.sqlPrepared[name]; ok {
			op.prevSQL = &p
		}
		if p, ok := l.st.sqlPrepared[name]; ok {
			op.prevServerSQL = &p
		}
		ss.noteStmtOp(l, op)
		l.st.drop(name)
	}
	ss.closeForClient(kind, name)
}

// closeForClient applies a Close (kind 'S' statement, 'P' portal) to the
// client's records: what the client closed it no longer has.
func (ss *session) closeForClient(kind byte, name string) {
	switch {
	case kind != 'S':
		delete(ss.client.srvPortals, name)
		delete(ss.client.exitPortals, name)
	case name == "":
		ss.client.unnamed = stmtInfo{}
	default:
		prev, had := ss.client.stmts[name]
		delete(ss.client.stmts, name)
		delete(ss.client.sqlPrepared, name) // one namespace: Close closes a PREPAREd one too
		if had {
			ss.forgetUnusedBody(prev.parse)
		}
	}
}

// trackDescribe follows a Describe written to l.
func (ss *session) trackDescribe(l *link, body []byte) {
	// A Describe of a statement: its ParameterDescription tells the
	// types the server inferred, which a stand-in needs (standIn).
	// Every Describe of a statement waits in l.describes, one whose
	// Parse body the proxy does not know (a SQL-PREPAREd statement)
	// too: the answers come in order, and without its place the next
	// wait took its answer (the parameter types and the result
	// shape of a PREPAREd SELECT recorded for a DELETE Parsed after
	// it: a 0A000 "cached plan must not change result type" when the
	// DELETE was prepared again elsewhere; differential
	// 17198292917881895050).
	if kind, name, err := describeTarget(body); err == nil && kind == 'S' {
		info := ss.client.unnamed
		if name != "" {
			info = ss.client.stmts[name]
		}
		ss.mu.Lock()
		l.describeSeq++
		l.describes = append(l.describes, describeWait{batch: l.batches, parse: info.parse, seq: l.describeSeq})
		ss.mu.Unlock()
	}
}

// ensureSQLPrepared replays SQL PREPAREs a batch's EXECUTEs need on l, and
// removes from l statements the client deallocated (or names it is about
// to PREPARE again).
func (ss *session) ensureSQLPrepared(l *link, d *classify.Decision, text string) error {
	for _, st := range d.Statements {
		if st.Executes != "" {
			// CREATE TABLE AS EXECUTE name: as EXECUTE name.
			if err := ss.ensureExecutable(l, st.Executes); err != nil {
				return err
			}
		}
		if slices.Contains(st.Relations, "pg_prepared_statements") && !ss.txPool && ss.routingMode() != config.RoutingOff {
			// A read of the session's prepared statements sees those
			// of the server it runs on: every one of the client's must
			// be there, as on the client's own server. (In transaction
			// pooling the view is the pooled connection's, other
			// clients' statements among them, within
			// max_prepared_statements, as behind PgBouncer.)
			if err := ss.ensureAllPrepared(l); err != nil {
				return err
			}
		}
		switch st.Effect {
		case classify.EffectExecute:
			if err := ss.ensureExecutable(l, st.PrepareName); err != nil {
				return err
			}
		case classify.EffectPrepare:
			if _, parsed := ss.client.stmts[st.PrepareName]; parsed {
				// A statement of the client's Parse holds the name (one
				// namespace): there, the server refuses it with 42P05.
				if err := ss.ensureStatementSynced(l, st.PrepareName); err != nil {
					return err
				}
				continue
			}
			if _, known := ss.client.sqlPrepared[st.PrepareName]; known {
				// The client's statement of that name must exist here,
				// so the server refuses the duplicate (42P05) as the
				// client's own server would.
				if err := ss.ensureSQLStatement(l, st.PrepareName, 0); err != nil {
					return err
				}
				continue
			}
			if l.st.holds(st.PrepareName) {
				// Not the client's (it knows none of that name): another
				// client's, or one it closed elsewhere. Make room.
				if err := ss.injectUndo(l, &pgproto3.Query{String: "DEALLOCATE " + quoteIdent(st.PrepareName)}, 'Z', l.record(st.PrepareName)); err != nil {
					return err
				}
				l.st.drop(st.PrepareName)
			}
			if len(d.Statements) == 1 {
				// The server will hold it (another session sharing this
				// connection must not collide with it).
				l.st.sqlPrepared[st.PrepareName] = strings.TrimSpace(text)
			}
		case classify.EffectDeallocate:
			if st.PrepareName == "" {
				// Every named statement, of either kind (not the unnamed).
				clear(l.st.sqlPrepared)
				clear(l.st.prepared)
				continue
			}
			// DEALLOCATE runs where the session's statement may never
			// have been prepared: replay it first, as for EXECUTE. A
			// statement of the client's Parse is deallocated by name too
			// (one namespace).
			if _, ok := ss.client.stmts[st.PrepareName]; ok {
				if err := ss.ensureStatementSynced(l, st.PrepareName); err != nil {
					return err
				}
				l.st.drop(st.PrepareName)
				continue
			}
			if err := ss.ensureSQLStatement(l, st.PrepareName, 0); err != nil {
				return err
			}
			l.st.drop(st.PrepareName) // whatever kind the server held
		}
	}
	return nil
}

// Result shapes. PostgreSQL fixes a prepared statement's result columns
// when it is prepared: a later Bind after DDL changed them fails with
// 0A000 "cached plan must not change result type", and drivers rely on it
// (pgx drops its cached description and prepares again). A statement the
// proxy prepares again on another server gets the new columns silently:
// the client's Bind then failed there with another error (08P01, result
// formats for columns that are gone) or, with as many columns of other
// types, ran and returned rows the client decodes by the old description.
// So the RowDescription each client Describe of a statement got is kept
// (session.shapes), a re-Parse of a described statement is Described too
// and compared, and on a change the statement is stale: its Binds fail
// with 0A000 at the same point of the batch, as on its first server.

// shapeNoData is the shape of a statement that returns no rows.
const shapeNoData = "\x00NoData"

// staleStatement is the statement name a stale statement's Bind is sent
// with: no server has it, so the Bind fails where the client's would
// have, the server skips to Sync, and rewriteError makes its 26000 the
// 0A000 PostgreSQL gives.
const staleStatement = "pg_kinetic stale statement"

// States of a link's shape check (link.shape).
const (
	shapeNone = iota
	shapePending
	shapeDone
	shapeFailed
)

// shapeOf is the result shape a RowDescription ('T') or NoData ('n')
// tells, as PostgreSQL compares it when it checks a cached plan
// (equalTupleDescs): each column's name, type and type modifier. The
// table OID and column number are not part of it: a table dropped and
// created again with the same columns leaves a statement valid.
func shapeOf(typ byte, body []byte) string {
	if typ == 'n' {
		return shapeNoData
	}
	var rd pgproto3.RowDescription
	if rd.Decode(body) != nil {
		return string(body)
	}
	var b strings.Builder
	for _, f := range rd.Fields {
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00", f.Name, f.DataTypeOID, f.TypeModifier)
	}
	return b.String()
}

// noteShapeLocked records the RowDescription or NoData that ends the
// answer to a client's Describe of a statement (l.shapeNext). Called by
// l's reader for the message after that Describe's ParameterDescription.
// Callers hold ss.mu.
func (ss *session) noteShapeLocked(l *link, typ byte, body []byte) {
	if l.shapeNext == "" {
		return
	}
	if typ == 'T' || typ == 'n' {
		if ss.mu.shapes == nil || len(ss.mu.shapes) >= maxInferred {
			ss.mu.shapes = map[string]string{}
		}
		ss.mu.shapes[l.shapeNext] = shapeOf(typ, body)
	}
	l.shapeNext = ""
}

// forgetUnusedBody drops what the session recorded by Parse body
// (inferred parameter types, the result shape) for parse once no
// statement of the client has that body any more: a client that prepares
// a statement per text and closes the old ones (a driver's LRU statement
// cache over texts with literals or hints) would otherwise leave up to
// maxInferred of each per session, long after the statements are gone. A
// Close undone (its unit failed) gets the statement back without them:
// its next stand-in leaves the types to the server and its result is not
// compared, as for a statement never described.
func (ss *session) forgetUnusedBody(parse string) {
	if parse == "" || ss.client.unnamed.parse == parse {
		return
	}
	for _, st := range ss.client.stmts {
		if st.parse == parse {
			return
		}
	}
	ss.mu.Lock()
	delete(ss.mu.inferred, string(parse))
	delete(ss.mu.shapes, string(parse))
	ss.mu.Unlock()
}

// forgetShape drops the shape recorded for a Parse body the client sends
// again: the Describe that follows it tells the current one.
func (ss *session) forgetShape(parse string) {
	ss.mu.Lock()
	delete(ss.mu.shapes, parse)
	ss.mu.Unlock()
}

// shapeChanged Describes statement name, just Parsed again on l by the
// proxy, and reports whether its result columns differ from those the
// client was told (session.shapes, by Parse body). It waits for the
// answer (one round trip, only for a re-Parse of a statement the client
// Described): the client's Bind must be changed before it is written.
// Nothing is compared in a failed transaction (the Parse fails there),
// when the batch fails first, or while answers to earlier units are owed
// (pipelined: what they answer, a failed transaction, would change the
// decisions the rest of this unit's injections take while this waited).
//
// Outside a transaction block the proxy's Parse and Describe end with a
// Sync of their own (none of the client's messages of the unit has been
// written yet): the server's statement_timeout, which runs from a batch's
// first message to its Sync, then never counts the round trip the proxy
// waits (a 1 ms timeout set by the client would otherwise fire on it,
// pgx's TestSendBatchStatementTimeout). If what the proxy sent fails there
// (the table is gone; the timeout fired anyway) the client was told
// nothing: redo is true, the record is taken back, and the caller
// prepares the statement again inside the client's batch, unchecked, so
// the client sees the error as its own. In a transaction block a Sync
// would hide such an error and leave the block failed: the Describe ends
// with a Flush there, inside the client's batch. So it does in the rest
// of a unit moved from a replica (restOpen): a Sync would end the
// implicit transaction holding the portals and SETs made again for it.
func (ss *session) shapeChanged(l *link, name, parse string) (changed, redo bool, err error) {
	ss.mu.Lock()
	told, ok := ss.mu.shapes[parse]
	if !ok || ss.mu.tx == 'E' || ss.mu.pending > 0 || ss.inj.midBatch || l.failed == l.batches+1 {
		ss.mu.Unlock()
		return false, false, nil
	}
	synced := ss.mu.tx == 'I' && !ss.inj.restOpen
	batch := l.batches
	l.swallow = append(l.swallow, expect{kind: 'd', batch: batch})
	l.shape, l.shapeGot = shapePending, ""
	if synced {
		l.swallow = append(l.swallow, expect{kind: 'Z', batch: batch})
		l.batches++
		l.sent = 0
		l.executed = false
	}
	if l.parked {
		ss.readers.Broadcast()
	}
	ss.mu.Unlock()
	buf, _ := (&pgproto3.Describe{ObjectType: 'S', Name: name}).Encode(nil)
	if synced {
		buf, _ = (&pgproto3.Sync{}).Encode(buf)
	} else {
		buf, _ = (&pgproto3.Flush{}).Encode(buf)
	}
	if _, err := l.conn.W.Write(buf); err != nil {
		return false, false, errServerGone
	}
	if err := l.conn.W.Flush(); err != nil {
		return false, false, errServerGone
	}
	ss.mu.Lock()
	if synced {
		for l.rfqs <= batch && !l.dead && !ss.mu.killed {
			ss.turn.Wait()
		}
	} else {
		for l.shape == shapePending && !l.dead && !ss.mu.killed && l.failed != batch+1 {
			ss.turn.Wait()
		}
	}
	shape, got := l.shape, l.shapeGot
	l.shape = shapeNone
	dead := l.dead || ss.mu.killed
	ss.mu.Unlock()
	switch {
	case shape == shapeDone:
		return got != told, false, nil
	case dead:
		return false, false, errServerGone
	case synced:
		ss.takeUndo(l)
		return false, true, nil
	}
	return false, false, nil // the server failed the batch: it skips the rest
}

// planned reports whether query is a statement PostgreSQL plans, whose
// result columns are fixed when it is prepared (SELECT, VALUES, TABLE,
// WITH, INSERT, UPDATE, DELETE, MERGE): only those fail with 0A000 after
// DDL. A utility statement's columns are its run's: a FETCH prepared
// before its cursor exists is described as NoData and returns the
// cursor's columns (pgx's TestConnExecStatementCursorFetch).
func planned(query string) bool {
	q := query
	for {
		q = strings.TrimLeft(q, " \t\r\n\f(")
		switch {
		case strings.HasPrefix(q, "--"):
			i := strings.IndexByte(q, '\n')
			if i < 0 {
				return false
			}
			q = q[i+1:]
			continue
		case strings.HasPrefix(q, "/*"):
			i := strings.Index(q, "*/")
			if i < 0 {
				return false
			}
			q = q[i+2:]
			continue
		}
		break
	}
	end := 0
	for end < len(q) && (q[end] >= 'a' && q[end] <= 'z' || q[end] >= 'A' && q[end] <= 'Z') {
		end++
	}
	switch strings.ToLower(q[:end]) {
	case "select", "values", "table", "with", "insert", "update", "delete", "merge":
		return true
	}
	return false
}

// staleBind returns the Bind body b with staleStatement in place of its
// statement name.
func staleBind(b []byte) []byte { return bindWithStatement(b, staleStatement) }

// bindWithStatement returns the Bind body b naming statement stmt in
// place of its own (b itself if it is malformed).
func bindWithStatement(b []byte, stmt string) []byte {
	portal, rest, err := cstring(b)
	if err != nil {
		return b
	}
	_, rest, err = cstring(rest)
	if err != nil {
		return b
	}
	out := make([]byte, 0, len(portal)+len(stmt)+2+len(rest))
	out = append(append(out, portal...), 0)
	out = append(append(out, stmt...), 0)
	return append(out, rest...)
}

// rewriteError is a server error as the client is to see it: a query
// cancelled by query_timeout_ms says so, and a stale statement's Bind
// fails as PostgreSQL fails it.
func (ss *session) rewriteError(l *link, body []byte) []byte {
	if l.queryTimedOut.Load() {
		body = ss.queryTimeoutError(body)
	}
	if !l.staleBinds.Load() || !bytes.Contains(body, []byte(staleStatement)) {
		return body
	}
	msg, err := withDetail(errorf(codeFeatureNotSupported, "cached plan must not change result type"),
		"pg-kinetic: the statement was prepared again on another server, where its result columns differ from those it was described with").Encode(nil)
	if err != nil || len(msg) < 5 {
		return body
	}
	return msg[5:]
}

// bindToWrite is the client's Bind body as it is written to l: the Bind
// of a stale statement names staleStatement instead (outside a failed
// transaction, where the server's 25P02 comes first either way).
func (ss *session) bindToWrite(l *link, body []byte) []byte {
	name, err := bindStatement(body)
	if err != nil || name == "" || !ss.client.stmts[name].stale || ss.txStatus() == 'E' {
		return body
	}
	l.staleBinds.Store(true)
	return staleBind(body)
}

// codeStatementTooComplex is PostgreSQL's ERRCODE_STATEMENT_TOO_COMPLEX,
// the SQLSTATE of "stack depth limit exceeded".
const codeStatementTooComplex = "54001"

// maxExecuteChain bounds the statements executeLoop follows.
const maxExecuteChain = 64

// executeLoop checks each Describe of a named statement in batch b: when
// the statement is EXECUTE of another that is EXECUTE of another … back to
// one of them (a Close and a Parse again make it: b = EXECUTE a after
// a = EXECUTE b), it returns the error the unit fails with instead of
// being sent. PostgreSQL 15 follows such a chain without end describing
// the statement, and its backend dies of a stack overflow (signal 11),
// which restarts the server and ends every session on it
// (TestTxPoolDescribeOfExecute hit it now and then; a test of its own:
// TestExecuteLoopDescribe). Executing the statement is left to the
// server: that recursion is bounded (54001). The batch's Parses and
// Closes before the Describe count, as the server would apply them.
func (ss *session) executeLoop(b *batch) *pgproto3.ErrorResponse {
	if !slices.ContainsFunc(b.msgs, func(m batchMsg) bool {
		if m.typ != 'D' {
			return false
		}
		body := b.body(m)
		return len(body) > 2 && body[0] == 'S' && body[1] != 0 // (a named statement)
	}) {
		return nil // (most batches: nothing allocated)
	}
	overlay := map[string]string{} // name -> query ("" closed) of the batch's own Parses and Closes so far
	for _, m := range b.msgs {
		switch m.typ {
		case 'P':
			name, rest, err := cstring(b.body(m))
			if err != nil || name == "" {
				continue
			}
			q, _, err := cstring(rest)
			prev, seen := overlay[name]
			_, held := ss.client.stmts[name]
			if err == nil && (seen && prev == "" || !seen && !held) {
				overlay[name] = q // (a name the client holds is refused, 42P05: it stays)
			}
		case 'C':
			if kind, name, err := describeTarget(b.body(m)); err == nil && kind == 'S' && name != "" {
				overlay[name] = ""
			}
		case 'D':
			kind, name, err := describeTarget(b.body(m))
			if err != nil || kind != 'S' || name == "" {
				continue
			}
			if chain := ss.executeChain(name, overlay); chain != nil {
				return withDetail(errorf(codeStatementTooComplex, "pg-kinetic: prepared statement %s executes itself: %s",
					quoteIdent(name), strings.Join(chain, " → ")),
					"describing a statement whose EXECUTEs loop crashes the PostgreSQL server process (a stack overflow), and every session on the server with it; close one of them and prepare it again")
			}
		}
	}
	return nil
}

// executeChain follows the EXECUTEs from statement name (the batch's own
// Parses and Closes in overlay first, then the client's statements) and
// returns the names up to the first one met again, nil when the chain
// ends.
func (ss *session) executeChain(name string, overlay map[string]string) []string {
	query := func(n string) string {
		if q, ok := overlay[n]; ok {
			return q
		}
		return ss.client.stmts[n].query
	}
	var chain []string
	for n := name; len(chain) < maxExecuteChain; {
		q := query(n)
		if !containsFold(q, "execute") {
			return nil
		}
		d := ss.classifier.Classify(q)
		if len(d.Statements) != 1 || d.Statements[0].Effect != classify.EffectExecute {
			return nil
		}
		chain = append(chain, n)
		n = d.Statements[0].PrepareName
		if slices.Contains(chain, n) {
			return append(chain, n)
		}
	}
	return nil
}
