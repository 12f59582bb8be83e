package classify

import (
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// listQuoteGUCs are PostgreSQL's GUC_LIST_QUOTE variables: their list
// elements are identifiers, quoted when they need it.
var listQuoteGUCs = toSet(
	"search_path", "temp_tablespaces", "local_preload_libraries",
	"session_preload_libraries", "shared_preload_libraries",
)

// setStatement classifies SET, RESET, SET TRANSACTION and SET SESSION
// CHARACTERISTICS. All are reads; what matters is Tx or Effect.
func setStatement(v *pg.VariableSetStmt) Statement {
	st := read()
	name := strings.ToLower(v.GetName())
	switch v.GetKind() {
	case pg.VariableSetKind_VAR_SET_MULTI:
		switch v.GetName() {
		case "TRANSACTION": // SET TRANSACTION …: this transaction only
			switch {
			case serializable(v.GetArgs()), readWrite(v.GetArgs()):
				return primaryTx()
			case accessMode(v.GetArgs()) == modeReadOnly:
				st.Tx = TxSetReadOnly
			}
			st.SetsTx = true
		case "TRANSACTION SNAPSHOT":
			// The snapshot exists only where it was exported, and
			// pg_export_snapshot runs on the primary.
			return primaryTx()
		case "SESSION CHARACTERISTICS":
			settings, ok := sessionCharacteristics(v.GetArgs())
			if !ok {
				st.Effect = EffectPin
				return st
			}
			if len(settings) > 0 {
				st.Effect = EffectSet
				st.Setting = settings[0]
				if len(settings) > 1 {
					st.MoreSettings = settings[1:]
				}
			}
		}
		return st
	case pg.VariableSetKind_VAR_RESET_ALL:
		st.Effect = EffectSet
		st.Setting = Setting{Reset: true}
		return st
	}

	// The transaction_* variables are reset from their defaults at every
	// transaction start: setting them is transaction-scoped whatever the
	// spelling. SET transaction_read_only = on is SET TRANSACTION READ ONLY.
	switch name {
	case "transaction_read_only":
		if v.GetKind() == pg.VariableSetKind_VAR_SET_VALUE && len(v.GetArgs()) == 1 {
			if defIsFalse(v.GetArgs()[0]) {
				return primaryTx()
			}
			st.Tx = TxSetReadOnly
		}
		return st
	case "transaction_isolation":
		if v.GetKind() == pg.VariableSetKind_VAR_SET_VALUE && len(v.GetArgs()) == 1 {
			if value, ok := flattenSetArgs(name, v.GetArgs()); ok && strings.EqualFold(value, "serializable") {
				return primaryTx()
			}
		}
		return st
	case "transaction_deferrable":
		return st
	}
	if v.GetIsLocal() {
		// SET LOCAL: ends with the transaction. Its search_path may put
		// the transaction's unqualified CREATEs in pg_temp.
		if name == "search_path" && v.GetKind() == pg.VariableSetKind_VAR_SET_VALUE {
			value, ok := flattenSetArgs(name, v.GetArgs())
			st.TempPath = !ok || NamesTempSchema(value)
		}
		return st
	}
	switch v.GetKind() {
	case pg.VariableSetKind_VAR_SET_VALUE:
		value, ok := flattenSetArgs(name, v.GetArgs())
		if !ok {
			// A value we cannot reproduce as set_config text: the only
			// safe place for the session is the server that has it.
			st.Effect = EffectPin
			return st
		}
		st.Effect = EffectSet
		st.Setting = Setting{Name: name, Value: value}
	case pg.VariableSetKind_VAR_SET_DEFAULT, pg.VariableSetKind_VAR_RESET:
		st.Effect = EffectSet
		st.Setting = Setting{Name: name, Reset: true}
	default:
		// VAR_SET_CURRENT (SET x FROM CURRENT) sets the current value: no
		// change.
	}
	return st
}

// sessionCharacteristics maps SET SESSION CHARACTERISTICS AS TRANSACTION
// modes to the default_transaction_* settings they change.
func sessionCharacteristics(args []*pg.Node) ([]Setting, bool) {
	var out []Setting
	for _, a := range args {
		de := a.GetDefElem()
		if de == nil {
			return nil, false
		}
		var s Setting
		switch de.GetDefname() {
		case "transaction_isolation":
			c := de.GetArg().GetAConst().GetSval()
			if c == nil {
				return nil, false
			}
			s = Setting{Name: "default_transaction_isolation", Value: c.GetSval()}
		case "transaction_read_only":
			s = Setting{Name: "default_transaction_read_only", Value: onOff(!defIsFalse(de.GetArg()))}
		case "transaction_deferrable":
			s = Setting{Name: "default_transaction_deferrable", Value: onOff(!defIsFalse(de.GetArg()))}
		default:
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// flattenSetArgs renders SET's arguments as the text set_config would
// accept for the same effect, following PostgreSQL's
// flatten_set_variable_args: strings as they are (quoted as identifiers for
// list variables like search_path), numbers as written, list elements
// joined by ", ", and INTERVAL 'x' for SET TIME ZONE INTERVAL. It reports
// false for anything it cannot reproduce exactly.
func flattenSetArgs(name string, args []*pg.Node) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	_, listQuote := listQuoteGUCs[name]
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteString(", ")
		}
		switch n := a.GetNode().(type) {
		case *pg.Node_AConst:
			c := n.AConst
			switch {
			case c.GetIsnull():
				return "", false
			case c.GetSval() != nil:
				if listQuote {
					b.WriteString(quoteIdent(c.GetSval().GetSval()))
				} else {
					b.WriteString(c.GetSval().GetSval())
				}
			case c.GetIval() != nil:
				b.WriteString(strconv.FormatInt(int64(c.GetIval().GetIval()), 10))
			case c.GetFval() != nil:
				b.WriteString(c.GetFval().GetFval())
			default:
				return "", false
			}
		case *pg.Node_TypeCast:
			// SET TIME ZONE INTERVAL 'x': the server stores
			// INTERVAL '<interval_out of x>'. Without a typmod the timezone
			// check re-reads it the same way; with one (HOUR TO MINUTE …)
			// the fields kept depend on it, which we do not reproduce.
			tc := n.TypeCast
			s := tc.GetArg().GetAConst().GetSval()
			if s == nil || len(tc.GetTypeName().GetTypmods()) > 0 || strings.ContainsRune(s.GetSval(), '\'') {
				return "", false
			}
			b.WriteString("INTERVAL '")
			b.WriteString(s.GetSval())
			b.WriteString("'")
		default:
			return "", false
		}
	}
	return b.String(), true
}

// quoteIdent is PostgreSQL's quote_identifier: an identifier stays bare
// when it is lower-case letters, digits and underscores, starts with a
// letter or underscore, and is not a keyword other than an unreserved one
// (asked of the real lexer).
func quoteIdent(s string) string {
	safe := s != ""
	for i := 0; i < len(s) && safe; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= '0' && c <= '9':
			safe = i > 0
		default:
			safe = false
		}
	}
	if safe {
		res, err := pg.Scan(s)
		if err != nil || len(res.GetTokens()) != 1 {
			safe = false
		} else if k := res.GetTokens()[0].GetKeywordKind(); k != pg.KeywordKind_NO_KEYWORD && k != pg.KeywordKind_UNRESERVED_KEYWORD {
			safe = false
		}
	}
	if safe {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// primaryTx is a statement that gives its transaction something only the
// primary has: SERIALIZABLE (a hot standby runs none: 0A000 "cannot use
// serializable mode in a hot standby"), READ WRITE (0A000 "cannot set
// transaction read-write mode during recovery"), or a snapshot imported
// with SET TRANSACTION SNAPSHOT (pg_export_snapshot runs on the primary).
// First in a transaction (after a BEGIN the proxy deferred), it opens the
// transaction on the primary, read only or not, as BEGIN ISOLATION LEVEL
// SERIALIZABLE READ ONLY does (pg_dump --serializable-deferrable sends
// BEGIN, then SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY,
// DEFERRABLE). It writes no WAL.
func primaryTx() Statement {
	st := write()
	st.NoWAL = true
	return st
}
