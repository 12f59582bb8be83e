package classify

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Hints are the words of a leading /* pg-kinetic: … */ comment (SPEC §4).
type Hints struct {
	Primary     bool
	Replica     bool
	StaleOK     bool
	StrictFresh bool
	Class       string   // class=NAME, NAME as written
	MinLSN      string   // min_lsn=TOKEN, raw text; validated elsewhere
	Unknown     []string // words not understood, as written; the router rejects them (SQLSTATE 22023)
}

// None reports whether h holds no hint at all.
func (h Hints) None() bool {
	return !h.Primary && !h.Replica && !h.StaleOK && !h.StrictFresh && h.Class == "" && h.MinLSN == "" && len(h.Unknown) == 0
}

// hintPrefix opens a hint comment's body (case-insensitive).
const hintPrefix = "pg-kinetic:"

// scanPrefix is the second prefix length tried by ParseHints.
const scanPrefix = 4096

// ParseHints returns the hints of sql's leading comment. A hint comment is
// a C-style comment whose body starts with "pg-kinetic:" and that stands
// before the first token of the text (other comments may precede it; the
// first such comment counts). Tokens come from PostgreSQL's own lexer, so
// a comment inside a string, a dollar-quoted body, or after the first
// token is never a hint, nor is a -- line comment. ok reports that a hint
// comment was found, even one without words.
//
// Words (case-insensitive, separated by spaces or commas): primary,
// replica, stale-ok, strict-fresh, class=NAME, min_lsn=TOKEN. Any other
// word is collected in Unknown.
func ParseHints(sql string) (h Hints, ok bool) {
	if !startsWithComment(sql) {
		return Hints{}, false // the first token is no comment: no lexing needed
	}
	// Lex as little as answers: first up to the end of the first comment,
	// then a few KiB, then everything.
	var buf [3]int
	for _, n := range prefixLengths(sql, buf[:0]) {
		h, ok, sure := leadingHint(sql, n)
		if sure {
			return h, ok
		}
	}
	return Hints{}, false
}

// prefixLengths appends to out the prefix lengths of sql that ParseHints
// lexes in turn; the last is len(sql).
func prefixLengths(sql string, out []int) []int {
	if i := strings.Index(sql, "*/"); i >= 0 && i+2 < len(sql) && i+2 < scanPrefix {
		out = append(out, i+2)
	}
	if len(sql) > scanPrefix {
		out = append(out, scanPrefix)
	}
	return append(out, len(sql))
}

// leadingHint lexes sql[:n] and looks for a hint comment before the first
// token. sure is false when the answer may change with more text: the
// lexer failed on a cut text, or the first token, or a line comment, runs
// into the cut. A C comment is always whole once the lexer returns it.
func leadingHint(sql string, n int) (h Hints, ok, sure bool) {
	cut := n < len(sql)
	res, err := pg.Scan(sql[:n])
	if err != nil {
		return Hints{}, false, !cut
	}
	for _, t := range res.GetTokens() {
		switch t.GetToken() {
		case pg.Token_C_COMMENT:
			if h, ok := parseHintComment(sql[t.GetStart():t.GetEnd()]); ok {
				return h, true, true
			}
			continue
		case pg.Token_SQL_COMMENT:
			if cut && int(t.GetEnd()) >= n {
				return Hints{}, false, false
			}
			continue
		}
		if cut && int(t.GetEnd()) >= n {
			return Hints{}, false, false // may be a part of a longer token, or of "/*"
		}
		return Hints{}, false, true // the first real token
	}
	return Hints{}, false, !cut // only comments so far
}

// startsWithComment reports whether sql, after PostgreSQL whitespace,
// starts with "/*" or "--". It only decides whether lexing can find a
// leading comment at all.
func startsWithComment(sql string) bool {
	i := 0
	for i < len(sql) {
		switch sql[i] {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			i++
			continue
		}
		break
	}
	rest := sql[i:]
	return strings.HasPrefix(rest, "/*") || strings.HasPrefix(rest, "--")
}

// parseHintComment parses one C comment's text, "/*" and "*/" included.
func parseHintComment(c string) (Hints, bool) {
	if len(c) < 4 || !strings.HasPrefix(c, "/*") || !strings.HasSuffix(c, "*/") {
		return Hints{}, false
	}
	body := strings.TrimLeft(c[2:len(c)-2], " \t\n\r\f\v")
	if len(body) < len(hintPrefix) || !strings.EqualFold(body[:len(hintPrefix)], hintPrefix) {
		return Hints{}, false
	}
	var h Hints
	words := strings.FieldsFunc(body[len(hintPrefix):], func(r rune) bool {
		switch r {
		case ' ', '\t', '\n', '\r', '\f', '\v', ',':
			return true
		}
		return false
	})
	for _, w := range words {
		lw := strings.ToLower(w)
		switch {
		case lw == "primary":
			h.Primary = true
		case lw == "replica":
			h.Replica = true
		case lw == "stale-ok":
			h.StaleOK = true
		case lw == "strict-fresh":
			h.StrictFresh = true
		case strings.HasPrefix(lw, "class=") && len(w) > len("class="):
			h.Class = w[len("class="):]
		case strings.HasPrefix(lw, "min_lsn=") && len(w) > len("min_lsn="):
			h.MinLSN = w[len("min_lsn="):]
		default:
			h.Unknown = append(h.Unknown, w)
		}
	}
	return h, true
}
