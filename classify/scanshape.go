package classify

import "strings"

// The Go-side shape scanner. Normalize costs a round trip through cgo and
// a raw parse (about 2 µs for a pgbench statement), which is most of a
// shape hit; scanShape reads the text once in Go instead, replacing only
// the constants it is sure of, and declines (ok false) everything else.
//
// What makes its keys sound. Two texts with one key are, byte for byte,
// the same outside the replaced spans, and each replaced span is one
// complete constant token of PostgreSQL's lexer in both: an unsigned
// number of digits with at most one '.', or a standard string '…' (doubled quotes
// inside, no backslash, so standard_conforming_strings cannot change where
// it ends). Everything else — keywords, identifiers, quoted identifiers,
// operators, comments (nested /* */ and --), whitespace — is kept
// verbatim, so the lexer cuts both texts into the same tokens but for
// those constants' values, and the grammar builds the same tree but for
// the values of A_Const nodes, as with Normalize. The one place where the
// grammar itself reads a number's value is float(p) (float4 or float8,
// or an error): a number in parentheses right after the word float is
// kept as it is. (Other type modifiers, varchar(10) or numeric(10, 2),
// are only checked by the server's type, when the text runs, the same on
// every server.) The one place where it reads a string's value is the
// UESCAPE of a U&'…' or U&"…", which are declined.
//
// It declines whatever it is unsure of: a quote or a number right after a
// letter, digit or '&' (the prefixes of E'…', B'…', X'…', N'…', U&'…'
// and U&"…", and trailing junk after a number), an exponent or a second '.', a '.' that
// starts a number, a backslash in a string, a string followed by another
// (the lexer joins them across a newline), an unterminated string,
// comment or quoted identifier, and a text without a constant to replace
// (the exact level answers it). shapeKey screens '$', NUL and invalid
// UTF-8 first.
//
// spans, when not nil, receives the replaced spans (for the tests that
// hold them against the real lexer).
func scanShape(sql string, spans *[][2]int) (key string, ok bool) {
	var b strings.Builder
	b.Grow(len(sql))
	last := 0 // sql[last:i] is still to be copied
	replaced := false
	var parens []bool // per open '(': numbers inside are kept verbatim (float(p))
	prevWord := ""    // the previous significant token, when it was a word
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
			continue // a comment is not a token: prevWord stays
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth := 0
			for {
				if i+1 >= len(sql) {
					return "", false
				}
				if sql[i] == '/' && sql[i+1] == '*' {
					depth++
					i += 2
				} else if sql[i] == '*' && sql[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
			continue
		case isSpace(c):
			i++
			continue
		case c == '"':
			if i > 0 && sql[i-1] == '&' {
				return "", false // U&"…", whose UESCAPE string is part of the name
			}
			j := i + 1
			for {
				k := strings.IndexByte(sql[j:], '"')
				if k < 0 {
					return "", false
				}
				j += k + 1
				if j < len(sql) && sql[j] == '"' {
					j++
					continue
				}
				break
			}
			i, prevWord = j, ""
			continue
		case c == '\'':
			if i > 0 && (isIdentByte(sql[i-1]) || sql[i-1] == '&') {
				return "", false // E'', B'', X'', N'', U&'', or junk
			}
			j := i + 1
			for {
				k := strings.IndexAny(sql[j:], `'\`)
				if k < 0 || sql[j+k] == '\\' {
					return "", false
				}
				j += k + 1
				if j < len(sql) && sql[j] == '\'' {
					j++
					continue
				}
				break
			}
			if nextIsQuote(sql[j:]) {
				return "", false // 'a'<newline>'b' is one constant
			}
			b.WriteString(sql[last:i])
			b.WriteString("$s")
			if spans != nil {
				*spans = append(*spans, [2]int{i, j})
			}
			last, i, replaced, prevWord = j, j, true, ""
			continue
		case isDigit(c):
			if i > 0 && (isIdentByte(sql[i-1]) || sql[i-1] == '.') {
				return "", false
			}
			j := i
			for j < len(sql) && isDigit(sql[j]) {
				j++
			}
			if j < len(sql) && sql[j] == '.' {
				j++
				for j < len(sql) && isDigit(sql[j]) {
					j++
				}
			}
			if j < len(sql) && (isIdentByte(sql[j]) || sql[j] == '.') {
				return "", false // an exponent, 1.2.3, 1..2, trailing junk
			}
			if len(parens) == 0 || !parens[len(parens)-1] {
				b.WriteString(sql[last:i])
				b.WriteString("$n")
				if spans != nil {
					*spans = append(*spans, [2]int{i, j})
				}
				last, replaced = j, true
			}
			i, prevWord = j, ""
			continue
		case c == '.' && i+1 < len(sql) && isDigit(sql[i+1]):
			return "", false // .5
		case isIdentStart(c):
			j := i + 1
			for j < len(sql) && isIdentByte(sql[j]) {
				j++
			}
			i, prevWord = j, sql[i:j]
			continue
		case c == '(':
			parens = append(parens, strings.EqualFold(prevWord, "float"))
		case c == ')':
			if len(parens) > 0 {
				parens = parens[:len(parens)-1]
			}
		}
		i++
		prevWord = ""
	}
	if !replaced {
		return "", false
	}
	b.WriteString(sql[last:])
	return b.String(), true
}

// nextIsQuote reports whether s, after whitespace and -- comments, starts
// with a quote: the lexer joins strings separated by a newline.
func nextIsQuote(s string) bool {
	for i := 0; i < len(s); {
		switch {
		case isSpace(s[i]):
			i++
		case s[i] == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' && s[i] != '\r' {
				i++
			}
		default:
			return s[i] == '\''
		}
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isSpace is the lexer's whitespace: space, tab, newline, carriage
// return, form feed (and vertical tab, which PostgreSQL 16 added; an
// older server's syntax error is the same on every server).
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// isIdentStart: a byte that starts an unquoted identifier or keyword
// (letters, '_', and every byte of a multibyte character).
func isIdentStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c >= 0x80
}

// isIdentByte: a byte that continues one ('$' never reaches here).
func isIdentByte(c byte) bool { return isIdentStart(c) || isDigit(c) }
