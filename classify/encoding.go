package classify

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Texts that are not valid UTF-8. A client whose client_encoding is not
// UTF8 (LATIN1, WIN1252, …) sends bytes that pg_query parses fine, but
// protobuf strings must be valid UTF-8, so the protobuf tree cannot carry
// them. Such a text is classified through a reversible stand-in: every
// byte of an invalid sequence becomes a private-use rune U+F780+(b-0x80).
// Its UTF-8 form is three bytes of 0x80 and above, which the PostgreSQL
// lexer treats exactly like the original byte (part of an identifier or of
// a literal; never case-folded in a UTF8 database), so the tree has the
// same shape; the names and values taken from it are mapped back.

const (
	escapeBase = 0xF780 // U+F780..U+F7FF stand for the bytes 0x80..0xFF
	escapeLast = escapeBase + 0x7F
)

// escapeInvalidUTF8 returns s with every byte of an invalid UTF-8 sequence
// replaced by its stand-in rune. It reports false when s already contains
// a stand-in rune, which would make the mapping ambiguous.
func escapeInvalidUTF8(s string) (string, bool) {
	var b strings.Builder
	b.Grow(len(s) + len(s)/2)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(rune(escapeBase + int(s[i]) - 0x80))
		case r >= escapeBase && r <= escapeLast:
			return "", false
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String(), true
}

// unescapeInvalidUTF8 maps stand-in runes back to their bytes. A string
// without stand-ins is returned as it is, so mapping twice is harmless.
func unescapeInvalidUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r >= escapeBase && r <= escapeLast {
			if b.Len() == 0 {
				b.Grow(len(s))
				b.WriteString(s[:i])
			}
			b.WriteByte(byte(r - escapeBase + 0x80))
		} else if b.Len() > 0 {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	if b.Len() == 0 {
		return s
	}
	return b.String()
}

// unescapeDecision maps back every name and value a decision took from the
// parse tree. Hints come from the original text and need nothing.
func unescapeDecision(d *Decision) {
	unescapeAll(d.Funcs)
	unescapeAll(d.Relations)
	for i := range d.Statements {
		unescapeStatement(&d.Statements[i])
	}
}

func unescapeStatement(st *Statement) {
	st.Setting.Name = unescapeInvalidUTF8(st.Setting.Name)
	st.Setting.Value = unescapeInvalidUTF8(st.Setting.Value)
	for i := range st.MoreSettings {
		st.MoreSettings[i].Name = unescapeInvalidUTF8(st.MoreSettings[i].Name)
		st.MoreSettings[i].Value = unescapeInvalidUTF8(st.MoreSettings[i].Value)
	}
	st.PrepareName = unescapeInvalidUTF8(st.PrepareName)
	unescapeAll(st.Funcs)
	unescapeAll(st.Relations)
	if st.Inner != nil {
		unescapeStatement(st.Inner)
	}
}

// unescapeAll maps back a sorted list in place and sorts it again (the
// bytes do not sort like their stand-ins).
func unescapeAll(s []string) {
	for i := range s {
		s[i] = unescapeInvalidUTF8(s[i])
	}
	slices.Sort(s)
}
