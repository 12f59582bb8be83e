package classify

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseHints(t *testing.T) {
	long := strings.Repeat("x", 2*scanPrefix)
	tests := []struct {
		name string
		sql  string
		want Hints
		ok   bool
	}{
		{"primary", "/* pg-kinetic: primary */ SELECT 1", Hints{Primary: true}, true},
		{"all words", "/* pg-kinetic: primary replica stale-ok strict-fresh class=c min_lsn=1:0/1 */ SELECT 1",
			Hints{Primary: true, Replica: true, StaleOK: true, StrictFresh: true, Class: "c", MinLSN: "1:0/1"}, true},
		{"unknown words kept as written", "/* pg-kinetic: Fast replica */ SELECT 1", Hints{Replica: true, Unknown: []string{"Fast"}}, true},
		{"last class wins", "/* pg-kinetic: class=a class=b */ SELECT 1", Hints{Class: "b"}, true},
		{"no words", "/* pg-kinetic: */", Hints{}, true},
		{"only the hint", "/* pg-kinetic: replica */", Hints{Replica: true}, true},
		{"newlines inside", "/*\n  pg-kinetic:\n  replica\n  stale-ok\n*/\nSELECT 1", Hints{Replica: true, StaleOK: true}, true},
		{"after other comments", "-- x\n/* y */ /* pg-kinetic: stale-ok */ SELECT 1", Hints{StaleOK: true}, true},
		{"not first token", "SELECT /* pg-kinetic: primary */ 1", Hints{}, false},
		{"line comment", "-- pg-kinetic: primary\nSELECT 1", Hints{}, false},
		{"other comment", "/* hello */ SELECT 1", Hints{}, false},
		{"missing colon", "/* pg-kinetic primary */ SELECT 1", Hints{}, false},
		{"in a string", "SELECT '/* pg-kinetic: primary */'", Hints{}, false},
		{"in a dollar quote", "$$/* pg-kinetic: primary */$$", Hints{}, false},
		{"empty", "", Hints{}, false},
		{"unterminated comment", "/* pg-kinetic: primary", Hints{}, false},
		{"lexer error after the hint", "/* pg-kinetic: primary */ SELECT 'x", Hints{Primary: true}, true},
		{"lexer error before the hint", "/* a */ 'x /* pg-kinetic: primary */", Hints{}, false},
		{"hint after a nested comment", "/* a /* b */ c */ /* pg-kinetic: replica */ SELECT 1", Hints{Replica: true}, true},
		{"prefix cut between / and *", "/* a */" + strings.Repeat(" ", scanPrefix-1-len("/* a */")) + "/* pg-kinetic: primary */ SELECT 1", Hints{Primary: true}, true},
		{"prefix cut in a line comment", "/* a */ --" + strings.Repeat("x", scanPrefix) + "\n/* pg-kinetic: primary */ SELECT 1", Hints{Primary: true}, true},
		{"long text after the hint", "/* pg-kinetic: replica */ SELECT '" + long + "'", Hints{Replica: true}, true},
		{"long comment before the hint", "/* " + long + " */ /* pg-kinetic: primary */ SELECT 1", Hints{Primary: true}, true},
		{"long hint comment", "/* pg-kinetic: replica " + strings.Repeat(" ", 2*scanPrefix) + "*/ SELECT 1", Hints{Replica: true}, true},
		{"first token straddles the cut", strings.Repeat(" ", scanPrefix-3) + "/* pg-kinetic: primary */ SELECT 1", Hints{Primary: true}, true},
		{"long comment then SQL", "/* " + long + " */ SELECT 1", Hints{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseHints(tt.sql)
			if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseHints(%.80q) = %+v, %v; want %+v, %v", tt.sql, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestHintsNeverFromNonLeadingComments checks, across the corpus, that a
// text whose first token is not a comment never yields hints.
func TestHintsNeverFromNonLeadingComments(t *testing.T) {
	for _, e := range loadCorpus(t) {
		if startsWithComment(e.sql) {
			continue
		}
		if h, ok := ParseHints(e.sql); ok {
			t.Errorf("corpus.txt:%d: hints %+v from %q", e.line, h, e.sql)
		}
	}
}
