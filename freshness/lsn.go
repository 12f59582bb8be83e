package freshness

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL WAL position (pg_lsn): a byte offset into the
// cluster's write-ahead log. Positions compare as 64-bit integers, never as
// text: "0/FFFFFFFF" < "1/0" although the strings sort the other way.
type LSN uint64

// ParseLSN parses PostgreSQL's text form "X/Y": the high and low 32 bits in
// hexadecimal, each one to eight digits, either case, nothing else (no
// spaces, signs or "0x"), as pg_lsn's input function accepts.
//
//	ParseLSN("0/16B6C50")  = 0x00000000016B6C50
//	ParseLSN("1/0")        = 0x0000000100000000
//	ParseLSN("ff/0000000a") = 0x000000FF0000000A
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("invalid LSN %q: want X/Y in hexadecimal", s)
	}
	h, err1 := parseHex32(hi)
	l, err2 := parseHex32(lo)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("invalid LSN %q: want X/Y, each 1 to 8 hexadecimal digits", s)
	}
	return LSN(uint64(h)<<32 | uint64(l)), nil
}

// parseHex32 parses 1 to 8 hexadecimal digits and nothing else.
func parseHex32(s string) (uint32, error) {
	if len(s) < 1 || len(s) > 8 {
		return 0, errors.New("want 1 to 8 hexadecimal digits")
	}
	var v uint32
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, errors.New("not a hexadecimal digit")
		}
		v = v<<4 | uint32(d)
	}
	return v, nil
}

// String returns PostgreSQL's form: upper-case hexadecimal halves without
// leading zeros, "0/16B6C50". ParseLSN(l.String()) == l for every l.
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xFFFFFFFF)
}

// Token is a read-your-writes position (SPEC §5): a WAL position with the
// timeline it was written on. Its text form is "TIMELINE:LSN", the timeline
// in decimal, e.g. "1:0/16B6C50"; a bare "0/16B6C50" has Timeline 0, which
// means "the route's current timeline" to whoever checks it (Eligible takes
// the primary's). The zero Token is "no token".
type Token struct {
	// Timeline is the PostgreSQL timeline ID (1 for a cluster never
	// promoted, +1 per promotion); 0 means "current".
	Timeline uint32
	LSN      LSN
}

// ParseToken parses "TIMELINE:LSN" or a bare "LSN" (Timeline 0). The
// timeline is a decimal number from 1 to 4294967295: an explicit "0:" is
// refused, so that every token has one text form.
//
//	ParseToken("1:0/16B6C50") = Token{Timeline: 1, LSN: 0x16B6C50}
//	ParseToken("0/16B6C50")   = Token{Timeline: 0, LSN: 0x16B6C50}
//	ParseToken("0:0/16B6C50") → error
func ParseToken(s string) (Token, error) {
	tl, pos, hasTL := strings.Cut(s, ":")
	if !hasTL {
		pos, tl = tl, ""
	}
	l, err := ParseLSN(pos)
	if err != nil {
		return Token{}, fmt.Errorf("invalid token %q: %w", s, err)
	}
	t := Token{LSN: l}
	if hasTL {
		n, err := parseTimeline(tl)
		if err != nil {
			return Token{}, fmt.Errorf("invalid token %q: timeline %q: %w", s, tl, err)
		}
		t.Timeline = n
	}
	return t, nil
}

// parseTimeline parses a decimal timeline ID, 1 to 4294967295, digits only.
func parseTimeline(s string) (uint32, error) {
	if s == "" || len(s) > 10 {
		return 0, errors.New("want a decimal number from 1 to 4294967295")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("want a decimal number from 1 to 4294967295")
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, errors.New("want a decimal number from 1 to 4294967295")
	}
	return uint32(n), nil
}

// String returns "TIMELINE:LSN", or the bare LSN when Timeline is 0 (the
// zero Token prints as "0/0"). ParseToken(t.String()) == t for every t.
func (t Token) String() string {
	if t.Timeline == 0 {
		return t.LSN.String()
	}
	return strconv.FormatUint(uint64(t.Timeline), 10) + ":" + t.LSN.String()
}

// IsZero reports whether t is the zero Token: no position required.
func (t Token) IsZero() bool { return t == Token{} }

// Less orders tokens by timeline, then by position: a token of a later
// timeline is after every token of an earlier one (a session that read
// from a promoted primary is past the old timeline). It is the order of a
// session's own positions; a token from elsewhere whose timeline may be
// older is merged with the rules of timeline_changed instead.
//
//	Token{1, 0x200}.Less(Token{1, 0x300}) = true
//	Token{1, 0x900}.Less(Token{2, 0x100}) = true
//	Token{2, 0x100}.Less(Token{2, 0x100}) = false
func (t Token) Less(u Token) bool {
	if t.Timeline != u.Timeline {
		return t.Timeline < u.Timeline
	}
	return t.LSN < u.LSN
}
