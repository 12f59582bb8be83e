package classify

import (
	"strconv"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Prepared is what PostgreSQL stores for a statement prepared from a
// query text, as far as its extended-protocol answers depend on it
// without catalog access: what a Bind or Describe of it in a failed
// transaction answers (postgres.c: exec_bind_message checks the parameter
// count before the failed transaction, exec_describe_statement_message
// refuses only statements that return rows).
type Prepared struct {
	// Params is the statement's parameter count: the declared types or the
	// highest $n the text uses, whichever is more.
	Params int
	// Empty: the text holds no statement (an empty query).
	Empty bool
	// TxExit: COMMIT, ROLLBACK, ROLLBACK TO, PREPARE TRANSACTION, which
	// PostgreSQL parses and runs in a failed transaction too.
	TxExit bool
	// Rows: the statement returns rows (a Describe answers RowDescription).
	// RowsKnown is false where that depends on the catalog (EXECUTE of a
	// prepared statement, CALL with OUT parameters).
	Rows, RowsKnown bool
}

// DescribePrepared parses sql as the one statement of a Parse message
// with declared parameter types. ok is false when the text does not parse
// or holds more than one statement (such a Parse fails on the server).
func DescribePrepared(sql string, declared int) (p Prepared, ok bool) {
	tree, err := pg.Parse(sql)
	if err != nil {
		return Prepared{}, false
	}
	switch len(tree.Stmts) {
	case 0:
		return Prepared{Params: declared, Empty: true, RowsKnown: true}, true
	case 1:
		return describePrepared(sql, declared, tree.Stmts[0].Stmt)
	}
	return Prepared{}, false
}

// DescribeSQLPrepare is DescribePrepared for the statement a SQL
// "PREPARE name [(types)] AS statement" makes; ok is false for any other
// text.
func DescribeSQLPrepare(sql string) (p Prepared, ok bool) {
	tree, err := pg.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return Prepared{}, false
	}
	prep := tree.Stmts[0].Stmt.GetPrepareStmt()
	if prep == nil || prep.Query == nil {
		return Prepared{}, false
	}
	return describePrepared(sql, len(prep.Argtypes), prep.Query)
}

// describePrepared fills in Prepared for statement n of text sql.
func describePrepared(sql string, declared int, n *pg.Node) (p Prepared, ok bool) {
	p.Params = declared
	toks, err := pg.Scan(sql)
	if err != nil {
		return Prepared{}, false
	}
	for _, t := range toks.Tokens {
		start, end := int(t.Start), int(t.End)
		if t.Token != pg.Token_PARAM || end > len(sql) || start+1 >= end {
			continue
		}
		if n, err := strconv.Atoi(sql[start+1 : end]); err == nil && n > p.Params {
			p.Params = n
		}
	}
	p.RowsKnown = true
	switch n := n.Node.(type) {
	case *pg.Node_SelectStmt:
		p.Rows = n.SelectStmt.IntoClause == nil
	case *pg.Node_InsertStmt:
		p.Rows = len(n.InsertStmt.ReturningList) > 0
	case *pg.Node_UpdateStmt:
		p.Rows = len(n.UpdateStmt.ReturningList) > 0
	case *pg.Node_DeleteStmt:
		p.Rows = len(n.DeleteStmt.ReturningList) > 0
	case *pg.Node_MergeStmt:
		p.Rows = len(n.MergeStmt.ReturningList) > 0
	case *pg.Node_VariableShowStmt, *pg.Node_ExplainStmt:
		p.Rows = true
	case *pg.Node_FetchStmt:
		p.Rows = !n.FetchStmt.Ismove
	case *pg.Node_ExecuteStmt, *pg.Node_CallStmt:
		p.RowsKnown = false
	case *pg.Node_TransactionStmt:
		switch n.TransactionStmt.Kind {
		case pg.TransactionStmtKind_TRANS_STMT_COMMIT, pg.TransactionStmtKind_TRANS_STMT_ROLLBACK,
			pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO, pg.TransactionStmtKind_TRANS_STMT_PREPARE:
			p.TxExit = true
		}
	}
	return p, true
}
