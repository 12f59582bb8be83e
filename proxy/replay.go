package proxy

// Portals carried with a moving unit. A unit routed at a Flush to a replica
// that then needs the primary (a write, a BEGIN: leavesReplica) moves
// there for the rest of its messages (endReplicaStream). The portals its
// replica part bound would be missing on the primary, where the client may
// still use them (an Execute continuing a suspended portal, a Describe, or
// a Bind of the same name that must fail with 42P03): directly, they live
// on until the transaction ends. The replica part's Binds of portals still
// open, and their Executes, are therefore sent again on the primary ahead
// of the rest, their answers dropped: the portals exist there, at the same
// position (the rows come from the primary's data, which read-your-writes
// bounds below anyway). Only reads ran in the replica part, so running
// them again changes nothing.

import (
	"bytes"
	"encoding/binary"

	"github.com/pg-kinetic/pg-kinetic/classify"
)

// replayBudget bounds the bytes a replica part's log may hold; a larger
// part is not replayed (its portals stay behind, as before).
const replayBudget = 1 << 20

// replayLog is the replica part of an open unit, as far as its portals
// need: Binds, Executes and Closes, with the unnamed statement each Bind
// of it used.
type replayLog struct {
	msgs   []replayMsg
	size   int
	broken bool // over budget, or a statement changed under a Bind
	// unnamed is the client's unnamed statement (its Parse body) as the
	// part goes; parsed holds the Parse bodies of the statements it
	// Parsed by name, closed the names it Closed.
	unnamed string
	parsed  map[string]string
	closed  map[string]bool
	// txOf tells the transaction-control role of a statement text;
	// stmtText the text of a statement the client prepared before the
	// part began (nil: none, in tests).
	txOf     func(query string) classify.Tx
	stmtText func(name string) string
	// stmtParse is the Parse body of a statement the client prepared
	// before the part began ("" none or not known).
	stmtParse func(name string) string
}

type replayMsg struct {
	typ     byte
	body    []byte
	unnamed string      // a Bind of the unnamed statement: its Parse body
	parse   string      // a Bind of a named statement: its Parse body at the Bind, if known
	tx      classify.Tx // a Bind: its statement's transaction-control role
}

// newReplayLog starts the log of a replica part; unnamed is the client's
// unnamed statement (Parse body) when the part begins.
func newReplayLog(unnamed string) *replayLog {
	return &replayLog{unnamed: unnamed}
}

// bindTx is the transaction-control role of the statement a Bind (body)
// of the part uses.
func (r *replayLog) bindTx(body []byte) classify.Tx {
	if r.txOf == nil {
		return classify.TxNone
	}
	stmt, err := bindStatement(body)
	if err != nil {
		return classify.TxNone
	}
	var query string
	switch p, ok := r.parsed[stmt]; {
	case stmt == "":
		if r.unnamed != "" { // (a well-formed Parse body: trackFrontend took it)
			query = queryOf(r.unnamed)
		}
	case ok:
		query = queryOf(p)
	case r.stmtText != nil:
		query = r.stmtText(stmt)
	}
	if query == "" {
		return classify.TxNone
	}
	return r.txOf(query)
}

// add notes one client message of the replica part.
func (r *replayLog) add(typ byte, body []byte) {
	if r == nil || r.broken {
		return
	}
	switch typ {
	case 'P':
		name, _, err := parseNames(body)
		if err != nil {
			r.broken = true
			return
		}
		if name == "" {
			r.unnamed = string(body)
			return
		}
		if r.parsed == nil {
			r.parsed = map[string]string{}
		}
		r.parsed[name] = string(body)
		delete(r.closed, name)
		return
	case 'C':
		kind, name, err := describeTarget(body)
		if err != nil {
			r.broken = true
			return
		}
		if kind == 'S' {
			if name == "" {
				r.unnamed = ""
			} else {
				if r.closed == nil {
					r.closed = map[string]bool{}
				}
				r.closed[name] = true
			}
			return
		}
	case 'B', 'E':
	default:
		return
	}
	r.size += len(body)
	if r.size > replayBudget {
		r.broken = true
		r.msgs = nil
		return
	}
	m := replayMsg{typ: typ, body: bytes.Clone(body)}
	if typ == 'B' {
		if stmt, err := bindStatement(body); err == nil && stmt == "" {
			m.unnamed = r.unnamed
		} else if err == nil {
			if p, ok := r.parsed[stmt]; ok && !r.closed[stmt] {
				m.parse = p
			} else if !ok && !r.closed[stmt] && r.stmtParse != nil {
				m.parse = r.stmtParse(stmt)
			}
		}
		m.tx = r.bindTx(body)
	}
	r.msgs = append(r.msgs, m)
}

// open returns the messages that make the part's portals still open: for
// each, its last Bind and the Executes of it since, in the order sent.
// A transaction's end (an Execute of COMMIT, ROLLBACK, PREPARE
// TRANSACTION) destroys every portal before it, as on the server; a
// portal of a transaction-control statement (BEGIN, SAVEPOINT, SET
// TRANSACTION...) is never made again: running it again would change
// the transaction the rest of the unit runs in.
func (r *replayLog) open() []replayMsg {
	if r == nil || r.broken {
		return nil
	}
	live := map[string]bool{}
	txPortal := map[string]classify.Tx{} // portals of transaction-control statements
	keep := make([]bool, len(r.msgs))
	bindAt := map[string]int{}
	portalOf := func(m replayMsg) string {
		if m.typ == 'C' {
			_, name, _ := describeTarget(m.body)
			return name
		}
		name, _, _ := cstring(m.body)
		return name
	}
	for i, m := range r.msgs {
		name := portalOf(m)
		switch m.typ {
		case 'B':
			if m.tx != classify.TxNone {
				// Not made again; a portal bound earlier under the name
				// is gone all the same.
				if j, ok := bindAt[name]; ok {
					for k := j; k < i; k++ {
						if portalOf(r.msgs[k]) == name {
							keep[k] = false
						}
					}
				}
				delete(live, name)
				delete(bindAt, name)
				txPortal[name] = m.tx
				continue
			}
			delete(txPortal, name)
			if j, ok := bindAt[name]; ok {
				// Bound again (the unnamed portal; a named one only after
				// a Close): the earlier one and its Executes are gone.
				for k := j; k < i; k++ {
					if portalOf(r.msgs[k]) == name {
						keep[k] = false
					}
				}
			}
			bindAt[name], live[name], keep[i] = i, true, true
		case 'E':
			if txPortal[name] == classify.TxEnd {
				// The transaction ended: its portals are gone.
				for k := range i {
					keep[k] = false
				}
				clear(live)
				clear(bindAt)
				continue
			}
			keep[i] = live[name]
		case 'C':
			if live[name] {
				for k := bindAt[name]; k < i; k++ {
					if portalOf(r.msgs[k]) == name {
						keep[k] = false
					}
				}
				delete(live, name)
				delete(bindAt, name)
			}
		}
	}
	var out []replayMsg
	for i, m := range r.msgs {
		if keep[i] && m.typ != 'C' {
			out = append(out, m)
		}
	}
	return out
}

// replayPortals sends again on l (the primary, taking over the rest of a
// unit) the Binds and Executes that make the replica part's open portals,
// their answers dropped. Statements they use are prepared first, as for
// the client's own Binds. A Bind of a statement the part Closed by name
// since (the portal outlives it, as on the server), or whose name holds
// another statement now, is bound from the unnamed statement, Parsed with
// that statement's text; a statement PREPAREd in SQL is prepared again
// (ensureStatement); one Closed before its Bind and not Parsed again, or
// an unnamed statement not known, is not replayed (nor is the log's rest:
// the portals stay behind). An unnamed statement is Parsed again as it was at
// its Bind.
func (ss *session) replayPortals(l *link, r *replayLog) error {
	msgs := r.open()
	if len(msgs) == 0 {
		return nil
	}
	for _, m := range msgs {
		if m.typ != 'B' {
			continue
		}
		stmt, err := bindStatement(m.body)
		if err != nil || stmt == "" && m.unnamed == "" || stmt != "" && m.parse == "" && r.closed[stmt] {
			return nil
		}
	}
	// The portals live in the server's implicit transaction until the
	// client's Sync: nothing of the proxy's may end it before.
	ss.inj.restOpen = true
	for _, m := range msgs {
		switch m.typ {
		case 'B':
			stmt, _ := bindStatement(m.body)
			if stmt != "" && m.parse != "" && ss.client.stmts[stmt].parse != m.parse {
				// Closed since, or another statement under the name now:
				// the portal is bound from the unnamed statement with the
				// text it had.
				m.unnamed, m.body = unnamedParse(m.parse), unnamedBind(m.body)
				stmt = ""
			}
			if stmt != "" {
				if err := ss.ensureStatement(l, stmt, 'B'); err != nil {
					return err
				}
			} else if l.st.unnamed != m.unnamed {
				// The unnamed statement as it was at that Bind (the
				// client's may have changed since: it is Parsed again
				// before its own use, as l's record then tells).
				if err := ss.inject(l, rawMessage{typ: 'P', body: []byte(m.unnamed)}, '1'); err != nil {
					return err
				}
				ss.mu.Lock()
				l.st.unnamed = m.unnamed
				ss.mu.Unlock()
			}
			if err := ss.inject(l, rawMessage{typ: 'B', body: m.body}, '2'); err != nil {
				return err
			}
		case 'E':
			if err := ss.inject(l, rawMessage{typ: 'E', body: m.body}, expectExecute); err != nil {
				return err
			}
		}
	}
	return nil
}

// unnamedParse is a Parse body for the unnamed statement with parse's
// text and parameter types.
func unnamedParse(parse string) string {
	_, rest, err := cstring([]byte(parse))
	if err != nil {
		return parse
	}
	return "\x00" + string(rest)
}

// unnamedBind is a Bind body naming the unnamed statement in place of
// body's.
func unnamedBind(body []byte) []byte { return bindWithStatement(body, "") }

// expectExecute is the swallow kind of an injected Execute: its rows (or
// COPY data) and its end, CommandComplete, PortalSuspended or
// EmptyQueryResponse, are dropped.
const expectExecute = 'x'

// rawMessage is a client message sent again as it came.
type rawMessage struct {
	typ  byte
	body []byte
}

func (m rawMessage) Encode(dst []byte) ([]byte, error) {
	dst = append(dst, m.typ)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.body)+4))
	return append(dst, m.body...), nil
}

// txOf is the transaction-control role of a statement text (of its first
// such statement), by the session's classifier.
func (ss *session) txOf(query string) classify.Tx {
	for _, st := range ss.classifier.Classify(query).Statements {
		if st.Tx != classify.TxNone {
			return st.Tx
		}
	}
	return classify.TxNone
}

// preparedText is the text of the client's statement name prepared by
// Parse ("" if unknown; SQL PREPARE takes no transaction control).
func (ss *session) preparedText(name string) string {
	return ss.client.stmts[name].query
}

// preparedParse is the Parse body of the client's statement name ("" none).
func (ss *session) preparedParse(name string) string {
	return ss.client.stmts[name].parse
}
