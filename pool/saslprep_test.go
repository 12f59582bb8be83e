package pool

import (
	"testing"

	"github.com/xdg-go/stringprep"
)

// TestSCRAMPassword: PostgreSQL's SASLprep (src/common/saslprep.c), the
// raw password wherever it fails. The cases marked "textbook differs" are
// where RFC 4013 as implemented by xdg-go/stringprep gives another answer;
// test/e2e TestServerLoginSASLprep logs in with them to a real server.
func TestSCRAMPassword(t *testing.T) {
	for _, tc := range []struct {
		name, in, want  string
		textbookDiffers bool
	}{
		{"ASCII", "app-secret", "app-secret", false},
		{"ASCII with a control character (no SASLprep at all)", "pass\x07word", "pass\x07word", false},
		{"empty", "", "", false},
		{"ROMAN NUMERAL NINE is NFKC IX", "pass\u2168", "passIX", false},
		{"no-break space is a space", "pa\u00a0ss", "pa ss", false},
		{"ideographic space is a space", "pa\u3000ss", "pa ss", false},
		{"soft hyphen maps to nothing", "pa\u00adss", "pass", false},
		{"zero width space: C.1.2 before B.1", "pa\u200bss", "pa ss", true},
		{"fullwidth letters", "\uff50\uff57", "pw", false},
		{"combining acute composes", "e\u0301t\u00e9", "\u00e9t\u00e9", false},
		{"ligature", "\ufb01x", "fix", false},
		{"prohibited before normalisation", "a\u0340", "a\u0340", true},
		{"prohibited control after a non-ASCII letter", "\u00e9\x07", "\u00e9\x07", false},
		{"private use", "pw\ue000", "pw\ue000", false},
		{"unassigned in Unicode 3.2 (emoji)", "pw\U0001F600", "pw\U0001F600", false},
		{"right-to-left only", "\u05d0\u05d1", "\u05d0\u05d1", false},
		{"right-to-left mixed with left-to-right fails bidi", "\u05d0a\u05d1", "\u05d0a\u05d1", false},
		{"right-to-left not last fails bidi", "\u05d01", "\u05d01", false},
		{"failing bidi keeps the raw bytes, not NFC", "\u05d0ae\u0301\u05d1", "\u05d0ae\u0301\u05d1", false},
		{"maps to nothing at all", "\u00ad", "\u00ad", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SCRAMPassword(tc.in); got != tc.want {
				t.Fatalf("SCRAMPassword(%+q) = %+q, want %+q", tc.in, got, tc.want)
			}
			textbook, err := stringprep.SASLprep.Prepare(tc.in)
			if err != nil {
				textbook = tc.in
			}
			if differs := textbook != tc.want; differs != tc.textbookDiffers {
				t.Errorf("textbook SASLprep gives %+q: the case's textbookDiffers should be %v", textbook, differs)
			}
		})
	}
}
