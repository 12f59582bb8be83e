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

// hintPrefix opens a hint comment's body (case-insensitive).
const hintPrefix = "pg-kinetic:"

// scanPrefix is how much of a text is lexed first when looking for a
// leading comment; the whole text is lexed only when a token reaches the cut.
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
	text := sql
	if len(text) > scanPrefix {
		text = text[:scanPrefix]
	}
	for {
		res, err := pg.Scan(text)
		cut := len(text) < len(sql)
		if err != nil {
			if cut { // perhaps a comment or string cut in two: lex it all
				text = sql
				continue
			}
			return Hints{}, false
		}
		for _, t := range res.GetTokens() {
			if cut && int(t.GetEnd()) >= len(text) {
				break // may be a part of a longer token
			}
			switch t.GetToken() {
			case pg.Token_C_COMMENT:
				if h, ok := parseHintComment(sql[t.GetStart():t.GetEnd()]); ok {
					return h, true
				}
				continue
			case pg.Token_SQL_COMMENT:
				continue
			}
			return Hints{}, false // the first real token
		}
		if !cut {
			return Hints{}, false // only comments
		}
		text = sql
	}
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
