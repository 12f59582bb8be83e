package classify

import (
	"strings"

	"google.golang.org/protobuf/proto"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// cursorOptHold is CURSOR_OPT_HOLD of PostgreSQL's parsenodes.h.
const cursorOptHold = 0x0020

func read() Statement  { return Statement{Kind: KindRead, Reason: ReasonRead} }
func write() Statement { return Statement{Kind: KindWrite, Reason: ReasonWrite} }

// statement classifies one parsed statement (the Stmt of a RawStmt).
func (c *Classifier) statement(n *pg.Node) Statement {
	st, _ := c.statementShared(n)
	return st
}

// statementShared classifies one parsed statement and reports whether the
// classification holds for every statement that differs from it only in
// its constants, so that it may be shared by shape (shape.go). Only the
// plain queries qualify (SELECT, VALUES, TABLE, INSERT, UPDATE, DELETE,
// MERGE, CALL), and only when no rule read a constant's value: their
// classification depends on node types, function names and TEMP, never on
// what a literal says. Everything else (SET, EXPLAIN's options, COPY's
// file name, transaction modes, PREPARE/EXECUTE…) is never shared.
func (c *Classifier) statementShared(n *pg.Node) (Statement, bool) {
	st, shared := c.statementOrPin(n)
	if st.Effect == EffectPin {
		st.CreatesUnqualified = false // (it pins anyway)
	}
	return st, shared
}

func (c *Classifier) statementOrPin(n *pg.Node) (Statement, bool) {
	switch s := n.GetNode().(type) {
	// Queries: executed, so every function call counts.
	case *pg.Node_SelectStmt:
		return c.query(s.SelectStmt)
	case *pg.Node_InsertStmt:
		return c.executed(write(), s.InsertStmt)
	case *pg.Node_UpdateStmt:
		return c.executed(write(), s.UpdateStmt)
	case *pg.Node_DeleteStmt:
		return c.executed(write(), s.DeleteStmt)
	case *pg.Node_MergeStmt:
		return c.executed(write(), s.MergeStmt)
	case *pg.Node_CallStmt:
		return c.executed(write(), s.CallStmt)
	}
	return c.utility(n), false
}

// utility classifies every statement but the plain queries.
func (c *Classifier) utility(n *pg.Node) Statement {
	switch s := n.GetNode().(type) {
	case nil:
		return write() // not produced by the parser; never a read by accident

	case *pg.Node_ExplainStmt:
		return c.explain(s.ExplainStmt)

	// Transaction control and session settings.
	case *pg.Node_TransactionStmt:
		return transaction(s.TransactionStmt)
	case *pg.Node_VariableSetStmt:
		st := setStatement(s.VariableSetStmt)
		st.NoWAL = true
		return st
	case *pg.Node_VariableShowStmt:
		if serverRoleSetting(s.VariableShowStmt.GetName()) {
			return write() // the session's primary answers (walk.go)
		}
		return read()
	case *pg.Node_ConstraintsSetStmt: // SET CONSTRAINTS: transaction-scoped
		return read()
	case *pg.Node_DiscardStmt:
		st := read()
		switch s.DiscardStmt.GetTarget() {
		case pg.DiscardMode_DISCARD_ALL:
			st.Effect = EffectDiscardAll
		case pg.DiscardMode_DISCARD_SEQUENCES, pg.DiscardMode_DISCARD_TEMP:
			// What they discard is the primary's: nextval's cache for
			// currval and lastval, temporary tables.
			st = write()
		}
		st.NoWAL = true
		return st

	// Prepared statements.
	case *pg.Node_PrepareStmt:
		inner := c.statement(s.PrepareStmt.GetQuery())
		return Statement{
			Kind: inner.Kind, Reason: inner.Reason, Effect: EffectPrepare,
			PrepareName: s.PrepareStmt.GetName(), Inner: &inner, Funcs: inner.Funcs, Relations: inner.Relations,
		}
	case *pg.Node_ExecuteStmt:
		return c.execute(s.ExecuteStmt)
	case *pg.Node_DeallocateStmt:
		st := read()
		st.Effect = EffectDeallocate
		if !s.DeallocateStmt.GetIsall() {
			st.PrepareName = s.DeallocateStmt.GetName()
		}
		return st

	// Cursors.
	case *pg.Node_DeclareCursorStmt:
		st := c.statement(s.DeclareCursorStmt.GetQuery())
		if s.DeclareCursorStmt.GetOptions()&cursorOptHold != 0 {
			st.Effect = EffectPin
		}
		return st
	case *pg.Node_FetchStmt: // FETCH and MOVE
		return read()
	case *pg.Node_ClosePortalStmt:
		return read()

	// Notifications.
	// (The notification queue is not WAL-logged.)
	case *pg.Node_ListenStmt:
		st := write()
		st.Effect, st.NoWAL = EffectPin, true
		return st
	case *pg.Node_UnlistenStmt:
		st := write()
		st.Effect, st.NoWAL = EffectUnlisten, true
		return st
	case *pg.Node_NotifyStmt:
		st := write()
		st.NoWAL = true
		return st

	// Writes whose expressions are executed (pins may hide in them).
	case *pg.Node_CreateTableAsStmt: // CREATE TABLE AS, SELECT INTO's analysed form, CREATE MATERIALIZED VIEW
		st, _ := c.executed(write(), s.CreateTableAsStmt)
		st.CreatesUnqualified = s.CreateTableAsStmt.GetInto().GetRel().GetSchemaname() == ""
		if ex := s.CreateTableAsStmt.GetQuery().GetExecuteStmt(); ex != nil {
			st.Executes = ex.GetName()
		}
		return st
	case *pg.Node_CopyStmt:
		st, _ := c.executed(write(), s.CopyStmt)
		// COPY ... FROM STDIN puts the connection in copy-in mode, where
		// the server accepts nothing but copy messages until CopyDone.
		st.CopyIn = s.CopyStmt.IsFrom && s.CopyStmt.Filename == "" && !s.CopyStmt.IsProgram
		return st
	case *pg.Node_DoStmt:
		return write()

	// LOAD changes the backend it runs on in ways nothing can replay.
	case *pg.Node_LoadStmt:
		st := write()
		st.Effect = EffectPin
		return st

	default:
		// DDL and every other utility statement: VACUUM, ANALYZE,
		// CHECKPOINT, REINDEX, CLUSTER, LOCK, GRANT, CREATE …, ALTER …
		st := write()
		if temp, bare := createsTemp(s); temp {
			st.Effect = EffectPin
		} else if bare {
			st.CreatesUnqualified = true
		}
		var w walker // exec false: only TEMP relations count, nothing here runs
		w.walk(n.ProtoReflect())
		if w.temp {
			st.Effect = EffectPin
		}
		return st
	}
}

// query classifies a SELECT (also VALUES and TABLE); shared is false when
// a rule read a constant's value.
func (c *Classifier) query(sel *pg.SelectStmt) (st Statement, shared bool) {
	w := walker{c: c, exec: true}
	w.walk(sel.ProtoReflect())
	st = read()
	if w.write || w.locking || w.dml || w.into {
		st = write()
	}
	if w.pin || w.temp {
		st.Effect = EffectPin
		if settings, ok := setConfigSettings(sel); ok && !w.temp {
			// SELECT set_config('name', 'value', false), …: a SET in
			// another spelling, tracked and replayed like one instead of
			// pinning the session (still for the primary, SPEC §3).
			st = write()
			st.Effect, st.Setting = EffectSet, settings[0]
			if len(settings) > 1 {
				st.MoreSettings = settings[1:]
			}
			return st, false
		}
	}
	if st.Kind == KindRead {
		st.Funcs, st.Relations = sortedUnique(w.funcs), w.relations()
	}
	st.TempPath = w.tempPath
	st.CreatesUnqualified = w.into && w.intoBare
	st.Cancels = w.cancels
	return st, !w.constRead
}

// setConfigSettings recognises a SELECT whose every output column is a
// call set_config('name', 'value', false) with literal arguments, and
// nothing else (no FROM, WHERE, or any clause that could run a call
// several times, or not at all): the settings it makes, as SET would.
func setConfigSettings(sel *pg.SelectStmt) ([]Setting, bool) {
	if len(sel.GetTargetList()) == 0 || len(sel.GetFromClause()) > 0 || sel.GetWhereClause() != nil ||
		len(sel.GetGroupClause()) > 0 || sel.GetHavingClause() != nil || len(sel.GetWindowClause()) > 0 ||
		len(sel.GetValuesLists()) > 0 || len(sel.GetSortClause()) > 0 || sel.GetLimitCount() != nil ||
		sel.GetLimitOffset() != nil || len(sel.GetLockingClause()) > 0 || sel.GetWithClause() != nil ||
		sel.GetIntoClause() != nil || len(sel.GetDistinctClause()) > 0 || sel.GetOp() != pg.SetOperation_SETOP_NONE {
		return nil, false
	}
	var out []Setting
	for _, t := range sel.GetTargetList() {
		f := t.GetResTarget().GetVal().GetFuncCall()
		if f == nil || f.GetAggFilter() != nil || f.GetOver() != nil || f.GetAggStar() || f.GetFuncVariadic() ||
			len(f.GetAggOrder()) > 0 || len(f.GetArgs()) != 3 {
			return nil, false
		}
		names := f.GetFuncname()
		if len(names) == 0 || len(names) > 2 || !strings.EqualFold(names[len(names)-1].GetString_().GetSval(), "set_config") ||
			len(names) == 2 && names[0].GetString_().GetSval() != "pg_catalog" {
			return nil, false
		}
		args := f.GetArgs()
		name, value := args[0].GetAConst().GetSval(), args[1].GetAConst().GetSval()
		if name == nil || value == nil || name.GetSval() == "" || setConfigIsLocal(args) || !setConfigIsFalse(args[2]) {
			return nil, false
		}
		out = append(out, Setting{Name: strings.ToLower(name.GetSval()), Value: value.GetSval()})
	}
	return out, true
}

// setConfigIsFalse reports whether set_config's is_local argument is a
// literal false.
func setConfigIsFalse(n *pg.Node) bool {
	a := n.GetAConst()
	if a == nil || a.GetIsnull() {
		return false
	}
	if b := a.GetBoolval(); b != nil {
		return !b.GetBoolval()
	}
	if s := a.GetSval(); s != nil {
		switch strings.ToLower(s.GetSval()) {
		case "f", "false", "off", "no", "n", "0":
			return true
		}
	}
	return false
}

// executed completes st (a write) with the pins that the statement's
// executed expressions and created relations leave behind; shared is false
// when a rule read a constant's value.
func (c *Classifier) executed(st Statement, m proto.Message) (_ Statement, shared bool) {
	w := walker{c: c, exec: true}
	w.walk(m.ProtoReflect())
	if w.pin || w.temp {
		st.Effect = EffectPin
	}
	st.TempPath = w.tempPath
	st.CreatesUnqualified = w.intoBare
	return st, !w.constRead
}

// explain: without ANALYZE nothing runs, so any EXPLAIN is a read; with
// ANALYZE the statement runs and is classified as itself. EXPLAIN EXECUTE
// needs the prepared statement wherever it runs: it is an EXECUTE.
func (c *Classifier) explain(e *pg.ExplainStmt) Statement {
	if ex, ok := e.GetQuery().GetNode().(*pg.Node_ExecuteStmt); ok {
		return c.execute(ex.ExecuteStmt)
	}
	if !explainAnalyze(e.GetOptions()) {
		return read()
	}
	st := c.statement(e.GetQuery())
	// EXPLAIN ANALYZE DECLARE does not create the cursor; but a pin
	// found in the executed query stays (conservative).
	return st
}

func explainAnalyze(opts []*pg.Node) bool {
	on := false
	for _, o := range opts {
		de := o.GetDefElem()
		if de == nil || !strings.EqualFold(de.GetDefname(), "analyze") {
			continue
		}
		// Only an explicit false/off/0 turns it off; anything else is on
		// (or an error on the server, where routing does not matter).
		on = !defIsFalse(de.GetArg())
	}
	return on
}

// defIsFalse reports whether a DefElem argument is literally false.
func defIsFalse(arg *pg.Node) bool {
	if arg == nil {
		return false
	}
	switch a := arg.GetNode().(type) {
	case *pg.Node_String_:
		switch strings.ToLower(a.String_.GetSval()) {
		case "false", "off", "no", "0":
			return true
		}
	case *pg.Node_Integer:
		return a.Integer.GetIval() == 0
	case *pg.Node_Boolean:
		return !a.Boolean.GetBoolval()
	case *pg.Node_AConst:
		return aConstIsFalse(a.AConst)
	}
	return false
}

func aConstIsFalse(a *pg.A_Const) bool {
	switch {
	case a.GetBoolval() != nil:
		return !a.GetBoolval().GetBoolval()
	case a.GetIval() != nil:
		return a.GetIval().GetIval() == 0
	case a.GetSval() != nil:
		switch strings.ToLower(a.GetSval().GetSval()) {
		case "false", "off", "no", "f", "n", "0":
			return true
		}
	}
	return false
}

// execute: EXECUTE name [(params)]. A write until the router refines it by
// the remembered PREPARE; its parameter expressions are checked here.
func (c *Classifier) execute(ex *pg.ExecuteStmt) Statement {
	st := write()
	st.Effect = EffectExecute
	st.PrepareName = ex.GetName()
	w := walker{c: c, exec: true}
	w.walk(ex.ProtoReflect())
	st.ParamsWrite = w.write || w.dml || w.locking
	st.Funcs = sortedUnique(w.funcs)
	return st
}

var savepointOps = map[pg.TransactionStmtKind]SavepointOp{
	pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT:   SavepointSet,
	pg.TransactionStmtKind_TRANS_STMT_RELEASE:     SavepointRelease,
	pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO: SavepointRollback,
}

// transaction classifies BEGIN/START/COMMIT/ROLLBACK/SAVEPOINT/… and the
// two-phase commands.
func transaction(t *pg.TransactionStmt) Statement {
	st := read()
	switch t.GetKind() {
	case pg.TransactionStmtKind_TRANS_STMT_BEGIN, pg.TransactionStmtKind_TRANS_STMT_START:
		switch {
		case serializable(t.GetOptions()), readWrite(t.GetOptions()):
			// A hot standby refuses a serializable transaction and READ
			// WRITE (0A000), even when a later READ ONLY would make the
			// transaction read only; the primary runs it.
			st.Tx = TxBeginReadWrite
		case accessMode(t.GetOptions()) == modeReadOnly:
			st.Tx = TxBeginReadOnly
		default:
			st.Tx = TxBegin
		}
		st.Start = t.GetKind() == pg.TransactionStmtKind_TRANS_STMT_START
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT, pg.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		st.Tx = TxEnd
		st.Chain = t.GetChain()
		st.Rollback = t.GetKind() == pg.TransactionStmtKind_TRANS_STMT_ROLLBACK
	case pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT, pg.TransactionStmtKind_TRANS_STMT_RELEASE,
		pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		st.Tx = TxSavepoint
		st.Savepoint = Savepoint{Op: savepointOps[t.GetKind()], Name: t.GetSavepointName()}
	case pg.TransactionStmtKind_TRANS_STMT_PREPARE:
		// The prepared transaction lives on the primary, and the session's
		// transaction block ends here.
		st = write()
		st.Tx = TxEnd
		st.Effect = EffectPin
	default: // COMMIT PREPARED, ROLLBACK PREPARED
		st = write()
	}
	return st
}

// serializable reports whether transaction options ask for the
// SERIALIZABLE isolation level.
func serializable(opts []*pg.Node) bool {
	for _, o := range opts {
		de := o.GetDefElem()
		if de == nil || de.GetDefname() != "transaction_isolation" {
			continue
		}
		var v string
		switch a := de.GetArg().GetNode().(type) {
		case *pg.Node_String_:
			v = a.String_.GetSval()
		case *pg.Node_AConst:
			v = a.AConst.GetSval().GetSval()
		}
		if strings.EqualFold(v, "serializable") {
			return true
		}
	}
	return false
}

type accessModeT uint8

const (
	modeNone accessModeT = iota
	modeReadOnly
	modeReadWrite
)

// readWrite reports whether transaction options set READ WRITE at all: a
// hot standby applies them in order and fails at that one (0A000 "cannot
// set transaction read-write mode during recovery").
func readWrite(opts []*pg.Node) bool {
	for _, o := range opts {
		if de := o.GetDefElem(); de != nil && de.GetDefname() == "transaction_read_only" && defIsFalse(de.GetArg()) {
			return true
		}
	}
	return false
}

// accessMode returns the last access mode among transaction options; the
// server applies them in order, so the last wins.
func accessMode(opts []*pg.Node) accessModeT {
	mode := modeNone
	for _, o := range opts {
		de := o.GetDefElem()
		if de == nil || de.GetDefname() != "transaction_read_only" {
			continue
		}
		if defIsFalse(de.GetArg()) {
			mode = modeReadWrite
		} else {
			mode = modeReadOnly
		}
	}
	return mode
}

// createsTemp reports whether a utility statement creates an object in the
// session's temporary schema by naming it (CREATE TABLE pg_temp.t, CREATE
// FUNCTION pg_temp.f …), and bare whether it creates one by an
// unqualified name (which pg_temp first in search_path makes temporary
// too). TEMP/TEMPORARY relations are found by the walker.
func createsTemp(n any) (temp, bare bool) {
	var schema string
	switch n := n.(type) {
	case *pg.Node_CreateStmt:
		schema = n.CreateStmt.GetRelation().GetSchemaname()
	case *pg.Node_ViewStmt:
		schema = n.ViewStmt.GetView().GetSchemaname()
	case *pg.Node_CreateSeqStmt:
		schema = n.CreateSeqStmt.GetSequence().GetSchemaname()
	case *pg.Node_CompositeTypeStmt:
		schema = n.CompositeTypeStmt.GetTypevar().GetSchemaname()
	case *pg.Node_CreateFunctionStmt:
		schema = qualifier(n.CreateFunctionStmt.GetFuncname())
	case *pg.Node_DefineStmt:
		schema = qualifier(n.DefineStmt.GetDefnames())
	case *pg.Node_CreateEnumStmt:
		schema = qualifier(n.CreateEnumStmt.GetTypeName())
	case *pg.Node_CreateRangeStmt:
		schema = qualifier(n.CreateRangeStmt.GetTypeName())
	case *pg.Node_CreateDomainStmt:
		schema = qualifier(n.CreateDomainStmt.GetDomainname())
	case *pg.Node_CreateStatsStmt:
		if len(n.CreateStatsStmt.GetDefnames()) == 0 {
			return false, false // a name PostgreSQL chooses, in the table's schema
		}
		schema = qualifier(n.CreateStatsStmt.GetDefnames())
	case *pg.Node_CreateConversionStmt:
		schema = qualifier(n.CreateConversionStmt.GetConversionName())
	default:
		return false, false
	}
	return isTempSchema(schema), schema == ""
}

func isTempSchema(s string) bool {
	return s == "pg_temp" || strings.HasPrefix(s, "pg_temp_")
}

// qualifier is the schema of a qualified name list ([catalog.]schema.name),
// "" when the name is unqualified.
func qualifier(names []*pg.Node) string {
	if len(names) < 2 {
		return ""
	}
	return names[len(names)-2].GetString_().GetSval()
}
