package proxy

import (
	"encoding/binary"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pg-kinetic/pg-kinetic/classify"
	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/internal/wire"
)

// The extended protocol's SHOW/SET/RESET pg_kinetic.* (SPEC §4): the proxy
// answers them as it does in the simple protocol, and never forwards them.
// A Parse of such a command makes a local statement; a Bind of it a local
// portal; Describe, Execute and Close of those are answered by the proxy
// in their place in the response stream. A batch that mixes them with
// server messages runs on one server, as a unit does; before answering a
// local message the proxy waits until the server has answered every
// message before it (a barrier), and a local error makes the server skip
// to Sync as its own error would.

// kcmd is a pg_kinetic.* command held as a local statement.
type kcmd struct {
	show string           // the variable SHOW names, or ""
	set  classify.Setting // for SET/RESET when show is ""
}

// kportal is a local statement bound to a portal.
type kportal struct {
	cmd     kcmd
	textFmt bool // the result column's format is text (else binary)
	// ran: Executed once. A SHOW's portal has then sent its row (later
	// Executes complete with none), a SET's cannot run again (55000).
	ran bool
	portalAge
}

// unitAge is the unit that made a portal or set a savepoint, counted two
// ways: seq, the units sent to servers before it (unitSeq: it ended when a
// server's ReadyForQuery 'I' answered a unit from it on, lastIdleDone), and
// no, the units and batches with messages the proxy answers counted as
// they are prepared (client.unitNo, prepareUnit and runWithLocal: it ended
// when a unit from it on was routed that ends the transaction,
// portalsEnd). A unit the proxy answers alone sends nothing, so seq alone
// cannot tell a portal it made from one an earlier such unit ended
// (differential 2797153498643118594: SHOW pg_kinetic.write_lsn, BEGIN, a
// portal of RESET pg_kinetic.min_lsn: the portal was taken for ended, and
// its Execute went to the server, 34000 where PostgreSQL answers 25P02).
type unitAge struct {
	seq uint64
	no  uint64
}

// portalAge is when a portal was made: in which unit and under how many
// of the client's savepoints (a ROLLBACK TO of one drops the portals made
// since, a RELEASE hands them to the savepoint below).
type portalAge struct {
	unitAge
	sp int // len(client.savepoints) then
}

// clientSavepoint is a savepoint of the client's transaction.
type clientSavepoint struct {
	name string
	unitAge
}

// unitAgeNow is the age of what the messages being handled make.
func (ss *session) unitAgeNow() unitAge {
	return unitAge{seq: ss.unitSeqNow(), no: ss.client.unitNo}
}

// portalAgeNow is the age of a portal made by the messages being handled.
func (ss *session) portalAgeNow() portalAge {
	return portalAge{unitAge: ss.unitAgeNow(), sp: len(ss.client.savepoints)}
}

// noteSavepointLocked follows a savepoint command of the client's, as its
// unit is routed, in client.savepoints and the ages of its portals,
// PostgreSQL's way (AtSubCleanup_Portals): a ROLLBACK TO drops the
// portals made since the savepoint, which stays; a RELEASE drops it and
// those above, their portals going to the one below. A name not set fails
// there, and so changes nothing. The outcome is predicted (pipelined units
// are routed before their answers): a SAVEPOINT in a block known to have
// failed is not set; one outside a block errs there and is forgotten when
// the session is next idle (localPlan). Runs on the session goroutine;
// callers hold ss.mu.
func (ss *session) noteSavepointLocked(sp classify.Savepoint) {
	c := &ss.client
	if sp.Op == classify.SavepointSet {
		if ss.mu.pending > 0 || ss.mu.tx != 'E' {
			c.savepoints = append(c.savepoints, clientSavepoint{name: sp.Name, unitAge: unitAge{seq: ss.mu.unitSeq, no: c.unitNo}})
		}
		return
	}
	i := len(c.savepoints) - 1
	for i >= 0 && c.savepoints[i].name != sp.Name {
		i--
	}
	if i < 0 {
		return
	}
	rollback := sp.Op == classify.SavepointRollback
	if rollback {
		c.savepoints = c.savepoints[:i+1]
	} else {
		c.savepoints = c.savepoints[:i]
	}
	unwindPortals(c.kportals, func(p *kportal) *portalAge { return &p.portalAge }, i, rollback)
	unwindPortals(c.srvPortals, func(p *portalAge) *portalAge { return p }, i, rollback)
}

// unwindPortals applies a ROLLBACK TO (rollback) or RELEASE of savepoint i
// to portals: those made under it go, or pass to the savepoint below.
func unwindPortals[P any](portals map[string]P, age func(*P) *portalAge, i int, rollback bool) {
	for name, p := range portals {
		switch a := age(&p); {
		case a.sp <= i:
		case rollback:
			delete(portals, name)
		default:
			a.sp = i
			portals[name] = p
		}
	}
}

// kineticCommand reports whether query is one SHOW/SET/RESET of a
// pg_kinetic.* variable that the proxy answers.
func (ss *session) kineticCommand(query string) (kcmd, bool) {
	if !containsFold(query, "pg_kinetic") {
		return kcmd{}, false
	}
	if name, ok := kineticShowName(query); ok {
		return kcmd{show: name}, true
	}
	d := ss.classifier.Classify(query)
	if len(d.Statements) == 1 && d.Statements[0].Effect == classify.EffectSet &&
		strings.HasPrefix(strings.ToLower(d.Statements[0].Setting.Name), "pg_kinetic.") {
		return kcmd{set: d.Statements[0].Setting}, true
	}
	return kcmd{}, false
}

// containsFold reports whether s contains the lower-case ASCII word w in
// any case, without allocating.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		j := 0
		for j < len(w) {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != w[j] {
				break
			}
			j++
		}
		if j == len(w) {
			return true
		}
	}
	return false
}

// settleLocalUnnamed makes a batch that Binds or Describes the unnamed
// statement (before Parsing one of its own) wait while a Parse of the
// unnamed statement that replaced a local one (a pg_kinetic.* command) is
// still unanswered in a pipelined batch before it: if the server skips
// that Parse (an error earlier in its batch), the client's unnamed
// statement is the local one again (undoClient), and the Bind is the
// proxy's to answer, with 25P02 in a failed transaction, as directly.
// Decided before the answer, the Bind went to the server, which held no
// unnamed statement: 26000. Only this case waits (one round trip); any
// other pipelined batch is planned at once.
func (ss *session) settleLocalUnnamed(b *batch) {
	uses := false
scan:
	for _, m := range b.msgs {
		body := b.body(m)
		switch m.typ {
		case 'P':
			if n, err := parseName(body); err == nil && n == "" {
				break scan
			}
		case 'B':
			if st, err := bindStatement(body); err == nil && st == "" {
				uses = true
				break scan
			}
		case 'D':
			if k, n, err := describeTarget(body); err == nil && k == 'S' && n == "" {
				uses = true
				break scan
			}
		}
	}
	if !uses {
		return
	}
	ss.mu.Lock()
	l := ss.mu.cur // (a server reader releases it in transaction pooling)
	if l == nil {
		ss.mu.Unlock()
		return
	}
	replaced := func(op stmtOp) bool {
		return op.kind == 'P' && op.name == "" && op.prevLocal != nil && !op.noop
	}
	for !l.dead && !ss.mu.killed && slices.ContainsFunc(l.earlierOpsLocked(), replaced) {
		ss.turn.Wait()
	}
	ss.mu.Unlock()
}

// settleLocalPortals makes a batch that names a portal of the proxy's (a
// Bind into its name, an Execute, Describe or Close of it) wait while units
// pipelined before it are unanswered: whether the portal lives on depends
// on how they end (a Sync ending their implicit transaction drops it, a
// block they open keeps it), known for sure from their ReadyForQuery.
// Planned before it, a Bind into the name of a portal the unit before had
// made and its Sync had dropped got 42P03 from the proxy where the server
// binds it (differential 16826262521981934636: that unit had answered a
// SHOW pg_kinetic.* into the portal, with server messages, so no
// prediction of its end was made). Only this case waits (one round trip);
// not inside an open unit, whose own end is still to come.
func (ss *session) settleLocalPortals(b *batch) {
	if len(ss.client.kportals) == 0 || ss.flow.state == following {
		return
	}
	names := false
	for _, m := range b.msgs {
		body := b.body(m)
		var name string
		var err error
		switch m.typ {
		case 'B', 'E':
			name, _, err = cstring(body)
		case 'D', 'C':
			var kind byte
			if kind, name, err = describeTarget(body); kind != 'P' {
				continue
			}
		default:
			continue
		}
		if _, ok := ss.client.kportals[name]; ok && err == nil {
			names = true
			break
		}
	}
	if !names {
		return
	}
	ss.mu.Lock()
	pending := ss.mu.pending > 0
	ss.mu.Unlock()
	if !pending {
		return
	}
	// What earlier messages left in a server's write buffer goes now, or
	// their answers never come; a failed flush leaves that link dead,
	// which ends the wait and fails the next write to it.
	_ = ss.flushHeld()
	ss.waitIdle()
}

// localSplit is localPlan's answer for a batch.
type localSplit struct {
	local []bool // per message: the proxy answers it
	// blockEnds are the indexes of the batch's Executes of a server
	// statement that ends the transaction block (COMMIT, ROLLBACK; not
	// ROLLBACK TO): every portal made before one is gone once it ran, the
	// proxy's too.
	blockEnds []int
	// exits marks the Binds answered here (into a portal name taken) of
	// a statement that may run in a failed transaction (COMMIT,
	// ROLLBACK [TO], PREPARE TRANSACTION): PostgreSQL checks the portal
	// name for them, where any other gets 25P02.
	exits map[int]bool
}

// localPlan marks which messages of a batch the proxy answers itself,
// following the names the batch defines in order. nil when there are none
// (the common case costs one scan of the Parse texts).
func (ss *session) localPlan(b *batch) *localSplit {
	ss.settleLocalUnnamed(b)
	ss.settleLocalPortals(b)
	ss.applyClientUndo()
	ss.pruneEndedPortals()
	if len(ss.client.kstmts) == 0 && len(ss.client.kportals) == 0 {
		any := false
		for _, m := range b.msgs {
			if m.typ == 'P' {
				if _, q, err := parseNames(b.body(m)); err == nil && containsFold(q, "pg_kinetic") {
					any = true
					break
				}
			}
		}
		if !any {
			return nil
		}
	}
	lp := localPlanner{
		ss:         ss,
		plan:       &localSplit{local: make([]bool, len(b.msgs))},
		stmts:      map[string]bool{},
		portals:    map[string]bool{},
		ends:       map[string]bool{},
		exits:      map[string]bool{},
		portalEnds: map[string]bool{},
	}
	for n := range ss.client.kstmts {
		lp.stmts[n] = true
	}
	for n := range ss.client.kportals {
		lp.portals[n] = true
	}
	found := false
	for i, m := range b.msgs {
		local := lp.message(i, m.typ, b.body(m))
		lp.plan.local[i] = local
		found = found || local
	}
	if !found {
		return nil
	}
	return lp.plan
}

// pruneEndedPortals forgets the client's portals (the proxy's and the
// servers') and savepoints of transactions that ended: portals end with
// their transaction, the proxy's as the server's: a portal made in unit k
// is gone once a unit from k on ended outside a transaction block (or
// now, all idle).
func (ss *session) pruneEndedPortals() {
	c := &ss.client
	if len(c.kportals) == 0 && len(c.srvPortals) == 0 && len(c.exitPortals) == 0 && len(c.savepoints) == 0 {
		return
	}
	ss.mu.Lock()
	idleDone, idle := ss.mu.lastIdleDone, ss.idleLocked() && !ss.client.localOpen
	ss.mu.Unlock()
	gone := func(a unitAge) bool { return idle || a.seq < idleDone || a.no < c.portalsEnd }
	maps.DeleteFunc(c.kportals, func(_ string, p kportal) bool { return gone(p.unitAge) })
	maps.DeleteFunc(c.srvPortals, func(_ string, p portalAge) bool { return gone(p.unitAge) })
	maps.DeleteFunc(c.exitPortals, func(_ string, p portalExit) bool { return gone(p.unitAge) })
	c.savepoints = slices.DeleteFunc(c.savepoints, func(sp clientSavepoint) bool { return gone(sp.unitAge) })
}

// localPlanner follows the names a batch defines, in order, for
// localPlan.
type localPlanner struct {
	ss             *session
	plan           *localSplit
	stmts, portals map[string]bool // the proxy's statements and portals
	ends           map[string]bool // statement names Parsed in b, to a server: one that ends a block
	exits          map[string]bool // and one that may run in a failed transaction
	portalEnds     map[string]bool // server portals bound in b: to one that does
}

// message reports whether the proxy answers b's message i.
func (lp *localPlanner) message(i int, typ byte, body []byte) (local bool) {
	switch typ {
	case 'P':
		name, q, err := parseNames(body)
		if err != nil {
			break
		}
		if _, ok := lp.ss.kineticCommand(q); ok {
			local = true
			lp.stmts[name] = true
		} else if name == "" {
			delete(lp.stmts, "")
			lp.ends[""] = txWord(q) == 'e'
			lp.exits[""] = exitsFailedTx(q)
		} else {
			local = lp.stmts[name] // already exists: answered with 42P05
			lp.ends[name] = !local && txWord(q) == 'e'
			lp.exits[name] = !local && exitsFailedTx(q)
		}
	case 'B':
		return lp.bind(i, body)
	case 'D', 'C':
		kind, name, err := describeTarget(body)
		if err != nil {
			break
		}
		if kind == 'S' {
			local = lp.stmts[name]
		} else {
			local = lp.portals[name]
		}
		if local && typ == 'C' {
			if kind == 'S' {
				delete(lp.stmts, name)
			} else {
				delete(lp.portals, name)
			}
		}
	case 'E':
		portal, _, err := cstring(body)
		local = err == nil && lp.portals[portal]
		if !local && lp.portalEnds[portal] {
			clear(lp.portals)
			lp.plan.blockEnds = append(lp.plan.blockEnds, i)
		}
	}
	return local
}

// bind is message for a Bind: the proxy answers one of its own statement,
// and one of a server's into its own portal's name (42P03, or the error
// PostgreSQL checks first: plan.exits).
func (lp *localPlanner) bind(i int, body []byte) (local bool) {
	portal, rest, err := cstring(body)
	if err != nil {
		return false
	}
	stmt, _, err := cstring(rest)
	if err != nil {
		return false
	}
	switch {
	case lp.stmts[stmt]:
		lp.portals[portal] = true
		return true
	case portal == "":
		delete(lp.portals, "")
	case lp.portals[portal]: // already exists: 42P03
		exit, ok := lp.exits[stmt]
		if !ok { // prepared before this batch
			text, known := lp.ss.statementText(stmt)
			exit = known && exitsFailedTx(text)
		}
		if exit {
			if lp.plan.exits == nil {
				lp.plan.exits = map[int]bool{}
			}
			lp.plan.exits[i] = true
		}
		return true
	}
	end, ok := lp.ends[stmt]
	if !ok { // prepared before this batch
		text, known := lp.ss.statementText(stmt)
		end = known && txWord(text) == 'e'
	}
	lp.portalEnds[portal] = end
	return false
}

// runWithLocal runs a batch ended by Sync or Flush (its last message) some
// of whose messages the proxy answers (plan). Server messages go to one
// server, routed by all of them together; l is that server when the batch
// continues an open unit (a stream), else nil. It returns the link left
// open for the messages that follow a Flush, or nil; skip is true when
// the client's messages up to its Sync are to be dropped (a local error in
// an open batch, as the server skips them after an error).
func (ss *session) runWithLocal(b *batch, plan *localSplit, l *link) (open *link, skip bool, err error) {
	ss.client.unitNo++ // (its server part, if any, counts once more: prepareUnit)
	term := b.msgs[len(b.msgs)-1].typ
	end := len(b.msgs)
	if term == 'S' || term == 'H' {
		end--
	} else {
		term = 0 // a message of an open unit, more follow
	}
	r := newLocalRun(ss, b, plan, end, l)
	ended := 0 // plan.blockEnds passed
	for i := 0; i < end && !r.failed; i++ {
		if !plan.local[i] {
			continue
		}
		if err := r.writeUpTo(i); err != nil {
			return nil, false, err
		}
		if r.failed {
			break
		}
		if err := r.settle(); err != nil {
			return nil, false, err
		}
		if r.failed {
			break
		}
		if ended < len(plan.blockEnds) && plan.blockEnds[ended] < i {
			// A COMMIT or ROLLBACK ran since the last message answered
			// here (answered: settle): the portals made before it are
			// gone, on the server and here.
			for ended < len(plan.blockEnds) && plan.blockEnds[ended] < i {
				ended++
			}
			clear(ss.client.kportals)
		}
		if e := ss.answerLocal(b.msgs[i].typ, b.body(b.msgs[i]), plan.exits[i]); e != nil {
			if err := ss.localFailed(e, r.l); err != nil {
				return nil, false, err
			}
			r.failed = true
		}
	}
	if !r.failed {
		if err := r.writeUpTo(end); err != nil {
			return nil, false, err
		}
	}
	if !r.failed && term != 'S' && ended < len(plan.blockEnds) && len(ss.client.kportals) > 0 {
		// A COMMIT or ROLLBACK after the last message answered here, and
		// no Sync: the implicit transaction goes on, but the portals made
		// before it are gone once it ran, on the server and here
		// (differential 2841039418419940571: a portal of the proxy's,
		// then COMMIT, then Flush; a Bind into its name in the next batch
		// got the proxy's 42P03 where PostgreSQL binds).
		if err := r.settle(); err != nil {
			return nil, false, err
		}
		if !r.failed {
			clear(ss.client.kportals)
		}
	}
	return ss.endLocalBatch(term, r.l, r.failed)
}

// localRun is runWithLocal's way through a batch: its server messages,
// how many of them are written, and the server they go to.
type localRun struct {
	ss      *session
	srv     batch // the batch's server messages, for routing and writing in segments
	srvIdx  []int // index in the batch of each of srv's messages
	written int   // srv messages written to l
	l       *link // the unit's server; nil until its first server messages are routed
	failed  bool  // a message failed: the rest, up to Sync, is skipped
}

// newLocalRun collects the server messages among b's first end.
func newLocalRun(ss *session, b *batch, plan *localSplit, end int, l *link) *localRun {
	r := &localRun{ss: ss, l: l}
	for i := 0; i < end; i++ {
		if !plan.local[i] {
			m := b.msgs[i]
			r.srv.add(m.typ, b.body(m))
			r.srvIdx = append(r.srvIdx, i)
		}
	}
	return r
}

// writeUpTo writes the server messages before the batch's message i. The
// unit's first ones route the unit, by all of its server messages; a
// routing that answers with an error fails the run (the server would
// skip to Sync).
func (r *localRun) writeUpTo(i int) error {
	n := r.written
	for n < len(r.srvIdx) && r.srvIdx[n] < i {
		n++
	}
	if n == r.written {
		return nil
	}
	if r.l == nil {
		r.srv.limit = n
		routed, err := r.ss.routeBatch(&r.srv, true, false)
		r.srv.limit = 0
		if err != nil {
			return err
		}
		if routed == nil {
			r.failed = true
			return nil
		}
		r.l = routed
		r.ss.flow.open(r.l, false)
	} else {
		var seg batch
		for _, m := range r.srv.msgs[r.written:n] {
			seg.add(m.typ, r.srv.body(m))
		}
		if err := r.ss.write(r.l, &seg); err != nil {
			return err
		}
	}
	r.written = n
	return nil
}

// settle waits until everything before a message the proxy answers is
// answered: this batch's server messages, or an open unit's earlier ones
// (a barrier on its server). An error there fails the run.
func (r *localRun) settle() error {
	if r.l == nil {
		r.ss.waitIdle()
		return nil
	}
	ok, err := r.ss.barrier(r.l)
	if !ok && err == nil {
		r.failed = true // the server failed the batch: it skips to Sync
	}
	return err
}

// localFailed sends the client the error of a message the proxy answered
// and fails the unit with it, on the server too: l's part of the batch
// (its implicit transaction rolls back, the rest is skipped), or the
// session's open transaction block when no server has the unit yet.
func (ss *session) localFailed(e *pgproto3.ErrorResponse, l *link) error {
	ss.mu.Lock()
	ss.unitFailedLocked()
	abort := ss.mu.tx == 'T' && l == nil
	if abort {
		ss.mu.tx = 'E'
	}
	ss.mu.Unlock()
	if abort {
		if err := ss.abortServerTx(); err != nil {
			return err
		}
	}
	if err := ss.send(e); err != nil {
		return errClientGone{err}
	}
	if l != nil {
		if err := ss.inject(l, &pgproto3.Parse{Query: proxyFailedStatement}, 'E'); err != nil {
			return errServerGone
		}
	}
	return nil
}

// endLocalBatch ends a batch with messages the proxy answered, by its last
// message (term: Sync, Flush, or 0 for a message of an open unit): a Sync
// goes to l, or is answered here when no server has the unit; a Flush
// keeps the unit open on l. Its results are runWithLocal's.
func (ss *session) endLocalBatch(term byte, l *link, failed bool) (open *link, skip bool, err error) {
	switch {
	case term == 'S' && l != nil:
		var sync batch
		sync.add('S', nil)
		if err := ss.write(l, &sync); err != nil {
			return nil, false, err
		}
		return nil, false, ss.endStream(l, 'S')
	case term == 'S':
		ss.waitIdle()
		ss.client.localOpen = false
		ss.clearLocalPortals()
		if err := ss.send(&pgproto3.ReadyForQuery{TxStatus: ss.txStatus()}); err != nil {
			return nil, false, errClientGone{err}
		}
		return nil, false, nil
	case term == 0:
		return l, failed, nil
	case l != nil: // Flush: the unit stays open on l
		if !failed {
			var flush batch
			flush.add('H', nil)
			if err := ss.write(l, &flush); err != nil {
				return nil, false, err
			}
		}
		return l, false, nil
	default: // Flush with no server: what was answered is already flushed
		ss.client.localOpen = !failed // its implicit transaction goes on: its portals live
		return nil, failed, nil
	}
}

// clearLocalPortals drops the local portals at the end of a transaction,
// as the server drops its own.
func (ss *session) clearLocalPortals() {
	if ss.txStatus() == 'I' {
		clear(ss.client.kportals)
	}
}

// barrier waits until l has answered every message written before it in
// the current batch: it writes a Close of a portal nobody has (answered by
// CloseComplete, never an error) and a Flush. The CloseCompletes of the
// client's own Closes before it pass (link.closes counts them). ok is
// false when the server failed the batch first (it then skips to Sync).
func (ss *session) barrier(l *link) (ok bool, err error) {
	raceWait(func(w *RaceWindows) time.Duration { return w.BeforeBarrier })
	buf, _ := (&pgproto3.Close{ObjectType: 'P', Name: "pg_kinetic barrier"}).Encode(nil)
	buf, _ = (&pgproto3.Flush{}).Encode(buf)
	ss.mu.Lock()
	if l.dead {
		ss.mu.Unlock()
		return false, errServerGone
	}
	if l.failed == l.batches+1 {
		// The batch already failed: the server skips to Sync, and would
		// never answer the barrier.
		ss.mu.Unlock()
		return false, nil
	}
	// The client's Closes of this batch written since the last barrier
	// are answered before it, with the same message.
	skip := l.closes
	l.closes = 0
	l.swallow = append(l.swallow, expect{kind: 'b', batch: l.batches, skip: skip})
	l.barrier = barrierPending
	if l.parked {
		ss.readers.Broadcast()
	}
	ss.mu.Unlock()
	if _, err := l.conn.W.Write(buf); err != nil {
		return false, errServerGone
	}
	if err := l.conn.W.Flush(); err != nil {
		return false, errServerGone
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for l.barrier == barrierPending && !l.dead && !ss.mu.killed {
		ss.turn.Wait()
	}
	if l.barrier == barrierPending {
		return false, errServerGone
	}
	return l.barrier == barrierPassed, nil
}

// Barrier states of a link (link.barrier).
const (
	barrierNone = iota
	barrierPending
	barrierPassed
	barrierFailed
)

// answerLocal answers one local message of the extended protocol and
// returns the error it fails with, if any.
//
// exit: a Bind of a server statement that may run in a failed transaction
// (localSplit.exits).
func (ss *session) answerLocal(typ byte, body []byte, exit bool) *pgproto3.ErrorResponse {
	if ss.client.kstmts == nil {
		ss.client.kstmts, ss.client.kportals = map[string]kcmd{}, map[string]kportal{}
	}
	if typ == 'P' && len(body) > 0 && body[0] == 0 {
		// A Parse of the unnamed statement drops the old one first,
		// whether or not it then fails (in a failed transaction too).
		ss.client.unnamed = stmtInfo{}
		delete(ss.client.kstmts, "")
	}
	if ss.txStatus() == 'E' && typ != 'C' {
		if e, answered := ss.localInFailedTx(typ, body, exit); answered {
			return e
		}
	}
	switch typ {
	case 'P':
		return ss.localParse(body)
	case 'B':
		return ss.localBind(body, exit)
	case 'D':
		kind, name, _ := describeTarget(body)
		if kind == 'S' {
			cmd := ss.client.kstmts[name]
			if cmd.show == "" {
				return ss.sendLocal(&pgproto3.ParameterDescription{}, &pgproto3.NoData{})
			}
			return ss.sendLocal(&pgproto3.ParameterDescription{}, rowDescription(cmd.show, true))
		}
		p := ss.client.kportals[name]
		if p.cmd.show == "" {
			return ss.sendLocal(&pgproto3.NoData{})
		}
		return ss.sendLocal(rowDescription(p.cmd.show, p.textFmt))
	case 'E':
		return ss.localExecute(body)
	case 'C':
		kind, name, _ := describeTarget(body)
		if kind == 'S' {
			delete(ss.client.kstmts, name)
		} else {
			delete(ss.client.kportals, name)
		}
		return ss.sendLocal(&pgproto3.CloseComplete{})
	}
	return errorf(codeProtocolViolation, "unexpected message type %q", typ)
}

// sendLocal sends the proxy's answer to a message it answers itself; a
// client that is gone is closed, which the session goroutine sees at its
// next read.
func (ss *session) sendLocal(msgs ...wire.Encoder) *pgproto3.ErrorResponse {
	if err := ss.send(msgs...); err != nil {
		ss.conn.Close()
	}
	return nil
}

// localInFailedTx answers, as PostgreSQL in a failed transaction, a local
// message other than Close: a Describe of a statement or portal that
// returns no rows (SET) is answered as usual (answered false); a Bind is
// checked against its statement first; anything else fails with 25P02.
func (ss *session) localInFailedTx(typ byte, body []byte, exit bool) (e *pgproto3.ErrorResponse, answered bool) {
	switch typ {
	case 'D':
		kind, name, _ := describeTarget(body)
		if kind == 'S' && ss.client.kstmts[name].show == "" || kind == 'P' && ss.client.kportals[name].cmd.show == "" {
			return nil, false
		}
	case 'B':
		var bd pgproto3.Bind
		if err := bd.Decode(body); err != nil {
			return errorf(codeProtocolViolation, "invalid Bind message"), true
		}
		if _, local := ss.client.kstmts[bd.PreparedStatement]; !local {
			return ss.serverBindErr(&bd, exit, true), true
		}
		if len(bd.Parameters) > 0 {
			return bindParamsErr(&bd), true
		}
	}
	return abortedTx(), true
}

// localParse answers a Parse of a pg_kinetic.* command.
func (ss *session) localParse(body []byte) *pgproto3.ErrorResponse {
	var p pgproto3.Parse
	if err := p.Decode(body); err != nil {
		return errorf(codeProtocolViolation, "invalid Parse message")
	}
	cmd, ok := ss.kineticCommand(p.Query)
	if !ok {
		return errorf("42P05", "prepared statement %q already exists", p.Name)
	}
	if _, exists := ss.client.kstmts[p.Name]; exists && p.Name != "" {
		return errorf("42P05", "prepared statement %q already exists", p.Name)
	}
	if _, exists := ss.client.stmts[p.Name]; exists && p.Name != "" {
		return errorf("42P05", "prepared statement %q already exists", p.Name)
	}
	if len(p.ParameterOIDs) > 0 {
		return errorf("42P02", "there is no parameter $1")
	}
	if p.Name == "" {
		ss.client.unnamed = stmtInfo{} // replaced on the client's side too
	}
	ss.client.kstmts[p.Name] = cmd
	return ss.sendLocal(&pgproto3.ParseComplete{})
}

// localBind answers a Bind the proxy answers: of its own statement, or
// (serverBindErr) of a server statement into its own portal's name.
func (ss *session) localBind(body []byte, exit bool) *pgproto3.ErrorResponse {
	var bd pgproto3.Bind
	if err := bd.Decode(body); err != nil {
		return errorf(codeProtocolViolation, "invalid Bind message")
	}
	cmd, localStmt := ss.client.kstmts[bd.PreparedStatement]
	if !localStmt {
		return ss.serverBindErr(&bd, exit, false)
	}
	_, local := ss.client.kportals[bd.DestinationPortal]
	_, onServer := ss.client.srvPortals[bd.DestinationPortal]
	if (local || onServer) && bd.DestinationPortal != "" {
		return errorf("42P03", "cursor %q already exists", bd.DestinationPortal) // PostgreSQL's words
	}
	if len(bd.Parameters) > 0 {
		return bindParamsErr(&bd)
	}
	text := true
	if len(bd.ResultFormatCodes) > 0 {
		text = bd.ResultFormatCodes[0] == 0
	}
	ss.client.kportals[bd.DestinationPortal] = kportal{cmd: cmd, textFmt: text, portalAge: ss.portalAgeNow()}
	return ss.sendLocal(&pgproto3.BindComplete{})
}

// localExecute runs a portal of the proxy's: a SHOW sends its one row
// (once), a SET or RESET runs once (then 55000, as a server's utility
// portal).
func (ss *session) localExecute(body []byte) *pgproto3.ErrorResponse {
	portal, rest, _ := cstring(body)
	var maxRows uint32
	if len(rest) >= 4 {
		maxRows = binary.BigEndian.Uint32(rest)
	}
	p := ss.client.kportals[portal]
	ran := p.ran
	p.ran = true
	ss.client.kportals[portal] = p
	if p.cmd.show != "" {
		done := &pgproto3.CommandComplete{CommandTag: []byte("SHOW")}
		if ran {
			return ss.sendLocal(done) // its one row was sent
		}
		value, e := ss.kineticShow(p.cmd.show)
		if e != nil {
			return e
		}
		row := &pgproto3.DataRow{Values: [][]byte{[]byte(value)}}
		if maxRows == 1 {
			// As a server does: the limit is reached before it knows
			// there are no more rows.
			return ss.sendLocal(row, &pgproto3.PortalSuspended{})
		}
		return ss.sendLocal(row, done)
	}
	if ran {
		return errorf(codeObjectNotInState, "portal %q cannot be run", portal)
	}
	tag, e := ss.kineticSet(p.cmd.set)
	if e != nil {
		return e
	}
	return ss.sendLocal(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
}

// abortedTx is PostgreSQL's answer to a statement in a failed transaction.
func abortedTx() *pgproto3.ErrorResponse {
	return errorf(codeInFailedTx, "current transaction is aborted, commands ignored until end of transaction block")
}

// rowDescription describes SHOW's one text column.
func rowDescription(column string, text bool) *pgproto3.RowDescription {
	f := pgproto3.FieldDescription{Name: []byte(column), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}
	if !text {
		f.Format = 1 // text's binary form is its bytes
	}
	return &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{f}}
}

// forgetServerUnnamed notes a client's Parse (statement "") or Bind
// (portal "") that goes to a server: it replaces a local unnamed
// statement or portal, as on a server.
func (ss *session) forgetServerUnnamed(typ byte, name string) {
	if name != "" {
		return
	}
	if typ == 'P' {
		delete(ss.client.kstmts, "")
	} else {
		delete(ss.client.kportals, "")
	}
}

// forgetLocalOnQuery: a simple Query destroys the unnamed statement and
// portal, local ones too.
func (ss *session) forgetLocalOnQuery() {
	delete(ss.client.kstmts, "")
	delete(ss.client.kportals, "")
}

// unitSeqNow is the unit the messages being handled belong to.
func (ss *session) unitSeqNow() uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mu.unitSeq
}

// notePortalsEnd predicts, as a unit is routed, whether the transaction
// its portals belong to ends with it (pipelined units are routed before
// the ReadyForQuery that says so arrives).
func (ss *session) notePortalsEnd(b *batch, u unitInfo, open bool) {
	if ss.routingMode() == config.RoutingOff && !ss.txPool {
		// (Elsewhere recordEffects follows them.)
		for _, sp := range ss.savepointCommands(b) {
			ss.mu.Lock()
			ss.noteSavepointLocked(sp)
			ss.mu.Unlock()
		}
	}
	if open {
		return
	}
	ss.client.localOpen = false // (a unit a Sync ends: its answer ends the implicit transaction)
	if ss.routingMode() == config.RoutingOff && !ss.txPool {
		// Units are not classified there: the statements' first words
		// tell BEGIN from COMMIT/ROLLBACK well enough for this.
		u.lastTx = txWords(b)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.mu.pending == 0 {
		ss.client.predOpen = ss.mu.tx != 'I'
	}
	switch u.lastTx {
	case 'b':
		ss.client.predOpen = true
	case 'e':
		ss.client.predOpen = false
	}
	if !ss.client.predOpen || u.chained {
		// (AND CHAIN: the block goes on, but the transaction that made
		// the portals of the units before ended; differential
		// 997645668052297296, a portal bound again after it got 42P03.)
		ss.client.portalsEnd = ss.client.unitNo + 1
	}
}

// savepointCommands returns the savepoint commands of b's Parses and
// Queries, for a session whose units are not classified: only texts with
// one of the words are.
func (ss *session) savepointCommands(b *batch) []classify.Savepoint {
	var out []classify.Savepoint
	for text := range b.statementTexts() {
		if !containsFold(text, "savepoint") && !containsFold(text, "release") && !containsFold(text, "rollback") {
			continue
		}
		for _, st := range ss.classifier.Classify(text).Statements {
			if st.Tx == classify.TxSavepoint {
				out = append(out, st.Savepoint)
			}
		}
	}
	return out
}

// statementTexts yields the texts of b's Parses (well-formed ones) and
// Queries, in order.
func (b *batch) statementTexts() iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, m := range b.msgs {
			var text string
			switch m.typ {
			case 'P':
				_, q, err := parseNames(b.body(m))
				if err != nil {
					continue
				}
				text = q
			case 'Q':
				text = string(b.body(m))
			default:
				continue
			}
			if !yield(text) {
				return
			}
		}
	}
}

// txWords is the last transaction statement of b's Parses and Queries by
// their first words ('b' BEGIN/START, 'e' COMMIT/END/ROLLBACK/ABORT but
// not ROLLBACK TO), 0 if none.
func txWords(b *batch) byte {
	var last byte
	for text := range b.statementTexts() {
		if w := txWord(text); w != 0 {
			last = w
		}
	}
	return last
}

// serverBindErr answers a Bind of a statement on the servers (not one
// the proxy answers) into a portal name the proxy's own portal takes
// (localPlan): it fails, and with PostgreSQL's first error in the order
// it checks (exec_bind_message): the statement must exist (26000); in a
// failed transaction only a statement that may end it gets further
// (25P02; exit); the parameter count, where a server described the
// statement (08P01); and last the portal's name (42P03). (Before, the
// portal's name came first, or in a failed transaction the proxy's own
// statements' parameter count: differential 11085008348091833454.)
func (ss *session) serverBindErr(bd *pgproto3.Bind, exit, failed bool) *pgproto3.ErrorResponse {
	name := bd.PreparedStatement
	parse, exists := ss.client.unnamed.parse, ss.client.unnamed.parse != ""
	if name != "" {
		var st stmtInfo
		st, exists = ss.client.stmts[name]
		parse = st.parse
		if !exists {
			_, exists = ss.client.sqlPrepared[name]
		}
	}
	switch {
	case !exists && name == "":
		return errorf(codeUndefinedPreparedStatement, "unnamed prepared statement does not exist")
	case !exists:
		return errorf(codeUndefinedPreparedStatement, "prepared statement %q does not exist", name)
	case failed && !exit:
		return abortedTx()
	}
	if parse != "" {
		ss.mu.Lock()
		types, known := ss.mu.inferred[parse]
		ss.mu.Unlock()
		if known && len(types) != len(bd.Parameters) {
			return errorf(codeProtocolViolation, "bind message supplies %d parameters, but prepared statement %q requires %d",
				len(bd.Parameters), name, len(types))
		}
	}
	return errorf("42P03", "cursor %q already exists", bd.DestinationPortal) // PostgreSQL's words
}

// bindParamsErr is PostgreSQL's error for a Bind with parameters of a
// statement the proxy answers (they take none).
func bindParamsErr(bd *pgproto3.Bind) *pgproto3.ErrorResponse {
	return errorf(codeProtocolViolation, "bind message supplies %d parameters, but prepared statement %q requires 0",
		len(bd.Parameters), bd.PreparedStatement)
}

// exitsFailedTx reports whether text is a statement PostgreSQL runs in a
// failed transaction (its IsTransactionExitStmt: COMMIT, END, ROLLBACK,
// ABORT, ROLLBACK TO, PREPARE TRANSACTION).
func exitsFailedTx(text string) bool {
	// (Without allocating: it runs for every Bind a client sends.)
	first, rest := nextField(strings.TrimRight(strings.TrimSpace(text), ";"))
	switch {
	case strings.EqualFold(first, "commit"), strings.EqualFold(first, "end"),
		strings.EqualFold(first, "abort"), strings.EqualFold(first, "rollback"):
		return true
	case strings.EqualFold(first, "prepare"):
		second, _ := nextField(rest)
		return strings.EqualFold(second, "transaction")
	}
	return false
}

// nextField splits s's first field (as strings.Fields splits, at Unicode
// white space) off the rest.
func nextField(s string) (field, rest string) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// txWord is txWords for one text. (Without allocating: with routing off
// it runs for every unit a Sync ends.)
func txWord(text string) byte {
	var last byte
	for rest, more := text, true; more; {
		var st string
		st, rest, more = strings.Cut(rest, ";")
		first, tail := nextField(st)
		switch {
		case strings.EqualFold(first, "begin"), strings.EqualFold(first, "start"):
			last = 'b'
		case strings.EqualFold(first, "commit"), strings.EqualFold(first, "end"), strings.EqualFold(first, "abort"):
			last = 'e'
		case strings.EqualFold(first, "rollback"):
			if second, _ := nextField(tail); !strings.EqualFold(second, "to") {
				last = 'e'
			}
		}
	}
	return last
}
