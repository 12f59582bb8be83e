package classify

import (
	"strings"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Shapes. Clients of the simple protocol inline their values, so a hot
// statement arrives with different literals every time
// ("… WHERE aid = 48213;", "… WHERE aid = 771;") and the exact-text cache
// never hits. The second cache level is keyed by the statement's shape:
// its text with every constant replaced by a placeholder, as pg_query's
// Normalize (pg_stat_statements' normalisation) writes it:
//
//	SELECT abalance FROM pgbench_accounts WHERE aid = $1;
//
// Normalize runs the real parser in C and copies the text with each
// constant's span (found by the real lexer) replaced; it builds no tree
// for Go, so it costs a fraction of a parse (bench_test.go).
//
// Why a shared decision is right for every text with the same key. The
// key is the text itself outside the constants' spans: comments (so the
// hint comment, byte for byte), identifiers, keywords, operators and
// whitespace. Normalize succeeded, so the text parses, and texts with equal
// keys differ only inside spans that are each one constant of the parse
// tree (an A_Const: a literal, or TRUE/FALSE/NULL, a negative number, a
// field word such as EXTRACT's YEAR). Constants the normaliser leaves alone
// (type modifiers like float(5), GROUP BY 1, ORDER BY 1) stay in the key
// verbatim, and a value the grammar itself rejects (float(0), a bad
// Unicode escape) fails Normalize and so never gets a key. Their trees
// therefore differ only in constants. A decision is stored under a key
// only when the classification could not see them: every statement is a
// plain query (statementShared), no rule read a constant's value (the
// walker's constRead: set_config's is_local), and the decision carries no
// Tx or Effect (so no Setting, PREPARE/EXECUTE, COPY, pin). Statement and
// Decision fields are then functions of node types, function names and
// TEMP keywords alone, and hints of the comments alone.
//
// What shapeKey declines (the text is classified by a full parse, and the
// exact-text level still caches it):
//   - a '$' anywhere: Normalize's placeholders are $n, and a text with its
//     own parameters ($1) or dollar quotes could not be told from a
//     normalised one;
//   - a NUL byte: the C side sees the text up to it only;
//   - invalid UTF-8: such texts are classified through stand-ins that
//     depend on the literals' bytes (encoding.go);
//   - a text Normalize rejects, and one without constants (its key is
//     the text: the exact level answers it).
//
// Every first sighting of a shape, and every text whose decision may
// depend on its constants (SET, set_config, EXPLAIN (ANALYZE …), BEGIN
// modes, COPY, PREPARE/EXECUTE, DDL), is parsed in full as before.

// shapeKey returns the key under which sql's decision may be shared with
// every text of the same shape, or "" when sql takes no part. The Go-side
// scanner (scanShape) answers most texts without leaving Go; a text it
// declines, but Normalize accepts, gets Normalize's key. The two kinds of
// key never meet: scanShape's placeholders are "$n" and "$s", Normalize's
// "$" and digits, and no text with a '$' of its own gets a key.
func shapeKey(sql string) string {
	if strings.IndexByte(sql, '$') >= 0 || strings.IndexByte(sql, 0) >= 0 || !utf8.ValidString(sql) {
		return ""
	}
	if key, ok := scanShape(sql, nil); ok {
		return key
	}
	key, err := pg.Normalize(sql)
	if err != nil || key == sql {
		return ""
	}
	return key
}
