package pool

import (
	"unicode/utf8"

	"github.com/xdg-go/stringprep"
	"golang.org/x/text/unicode/norm"
)

// SCRAMPassword is the password SCRAM-SHA-256 hashes, derived from password
// exactly as PostgreSQL derives it (src/common/saslprep.c, pg_saslprep, used
// by the server when it stores a verifier and by libpq when it logs in):
// SASLprep (RFC 4013), and the password unchanged when SASLprep fails. Only
// SCRAM uses it; md5 and cleartext authentication use the password as is.
//
// PostgreSQL's SASLprep differs from a textbook one (xdg-go/stringprep's
// SASLprep, which pgx's PRECIS OpaqueString also differs from) in ways that
// decide whether a login works:
//
//   - An ASCII string is returned unchanged, control characters included.
//   - Non-ASCII spaces (C.1.2, U+200B included) map to U+0020 before the
//     "commonly mapped to nothing" table (B.1) is consulted, so U+200B
//     becomes a space, not nothing.
//   - The prohibited (C.1.2–C.9), unassigned (A.1) and bidirectional checks
//     look at the mapped string before NFKC normalisation, not at the
//     normalised output: "a\u0340" (U+0340 is prohibited, NFKC turns it into
//     U+0300) fails SASLprep, and the raw password is hashed.
//   - A string that maps to nothing fails SASLprep (no empty passwords).
//
// Worked examples:
//
//	"app-secret"       -> "app-secret"    (ASCII)
//	"pass\u2168"       -> "passIX"        (ROMAN NUMERAL NINE, NFKC)
//	"pa\u00a0ss"       -> "pa ss"         (non-ASCII space)
//	"pa\u00adss"       -> "pass"          (soft hyphen maps to nothing)
//	"pa\u200bss"       -> "pa ss"         (zero width space: C.1.2 first)
//	"\uff50\uff57"     -> "pw"            (fullwidth letters, NFKC)
//	"a\u0340"          -> "a\u0340"       (prohibited before normalisation)
//	"\u05d0a"          -> "\u05d0a"       (right-to-left mixed with L: fails bidi)
//	"pw\U0001F600"     -> "pw\U0001F600"  (unassigned in Unicode 3.2)
//	"\u00ad"           -> "\u00ad"        (maps to the empty string)
func SCRAMPassword(password string) string {
	ascii := true
	for i := 0; i < len(password); i++ {
		if password[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii || !utf8.ValidString(password) {
		return password
	}
	// 1) Map.
	mapped := make([]rune, 0, len(password))
	for _, r := range password {
		switch {
		case stringprep.TableC1_2.Contains(r):
			mapped = append(mapped, ' ')
		case isMappedToNothing(r):
		default:
			mapped = append(mapped, r)
		}
	}
	if len(mapped) == 0 {
		return password
	}
	// 3) Prohibit and 4) bidi, on the mapped runes as PostgreSQL does.
	randAL := false
	for _, r := range mapped {
		if isProhibitedOutput(r) || stringprep.TableA1.Contains(r) {
			return password
		}
		randAL = randAL || stringprep.TableD1.Contains(r)
	}
	if randAL {
		for _, r := range mapped {
			if stringprep.TableD2.Contains(r) {
				return password
			}
		}
		if !stringprep.TableD1.Contains(mapped[0]) || !stringprep.TableD1.Contains(mapped[len(mapped)-1]) {
			return password
		}
	}
	// 2) Normalise.
	return norm.NFKC.String(string(mapped))
}

func isMappedToNothing(r rune) bool {
	_, ok := stringprep.TableB1.Map(r)
	return ok
}

// prohibitedOutput are SASLprep's prohibited output tables (RFC 4013 2.3).
var prohibitedOutput = []stringprep.Set{
	stringprep.TableC1_2, stringprep.TableC2_1, stringprep.TableC2_2,
	stringprep.TableC3, stringprep.TableC4, stringprep.TableC5,
	stringprep.TableC6, stringprep.TableC7, stringprep.TableC8, stringprep.TableC9,
}

func isProhibitedOutput(r rune) bool {
	for _, s := range prohibitedOutput {
		if s.Contains(r) {
			return true
		}
	}
	return false
}
