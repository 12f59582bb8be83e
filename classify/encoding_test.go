package classify

import (
	"reflect"
	"testing"
)

// Texts from clients whose client_encoding is not UTF8 carry bytes that
// are not valid UTF-8; they classify like their UTF-8 counterparts, with
// names and values byte for byte.
func TestNonUTF8Texts(t *testing.T) {
	c := New(Options{})
	tests := []struct {
		sql  string
		want Decision
	}{
		{"SELECT caf\xe9(1) FROM t\xe9 WHERE n = 'r\xe9sum\xe9'", Decision{
			Kind: KindRead, Reason: ReasonRead, Funcs: []string{"caf\xe9"}, Relations: []string{"t\xe9"},
			Statements: []Statement{{Kind: KindRead, Reason: ReasonRead, Funcs: []string{"caf\xe9"}, Relations: []string{"t\xe9"}}},
		}},
		{"SET application_name = 'caf\xe9'", Decision{
			Kind: KindRead, Reason: ReasonRead, Control: true,
			Statements: []Statement{{Kind: KindRead, Reason: ReasonRead, Effect: EffectSet,
				Setting: Setting{Name: "application_name", Value: "caf\xe9"}, NoWAL: true}},
		}},
		{"SET search_path = sch\xe9ma, public", Decision{
			Kind: KindRead, Reason: ReasonRead, Control: true,
			Statements: []Statement{{Kind: KindRead, Reason: ReasonRead, Effect: EffectSet,
				Setting: Setting{Name: "search_path", Value: "\"sch\xe9ma\", public"}, NoWAL: true}},
		}},
		{"INSERT INTO t VALUES ('\xff\xfe')", Decision{
			Kind: KindWrite, Reason: ReasonWrite,
			Statements: []Statement{{Kind: KindWrite, Reason: ReasonWrite}},
		}},
		{"/* pg-kinetic: class=caf\xe9 */ SELECT 1", Decision{
			Kind: KindRead, Reason: ReasonRead, Hints: Hints{Class: "caf\xe9"},
			Statements: []Statement{{Kind: KindRead, Reason: ReasonRead}},
		}},
		{"SELEC '\xe9'", Decision{Kind: KindWrite, Reason: ReasonUnclassified}},
		// A stand-in rune already in the text makes the mapping ambiguous.
		{"SELECT '\uf790', '\xe9'", Decision{Kind: KindWrite, Reason: ReasonUnclassified}},
	}
	for _, tt := range tests {
		got := c.Classify(tt.sql)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q:\n got: %s want: %s", tt.sql, describe(got), describe(tt.want))
		}
		if full := fullPath(Options{}).Classify(tt.sql); !reflect.DeepEqual(full, got) {
			t.Errorf("%q: full path differs:\n full: %s fast: %s", tt.sql, describe(full), describe(got))
		}
	}
}

func TestPrepareNonUTF8Name(t *testing.T) {
	d := New(Options{}).Classify("PREPARE p\xe9 AS SELECT f\xe9()")
	if len(d.Statements) != 1 {
		t.Fatal(describe(d))
	}
	st := d.Statements[0]
	if st.PrepareName != "p\xe9" || st.Inner == nil || !reflect.DeepEqual(st.Inner.Funcs, []string{"f\xe9"}) ||
		!reflect.DeepEqual(st.Funcs, []string{"f\xe9"}) || !reflect.DeepEqual(d.Funcs, []string{"f\xe9"}) {
		t.Fatal(describe(d))
	}
}

func TestEscapeRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "caf\xe9", "\xff\xfe\x80", "mixed é and \xe9", "\xc3"} {
		e, ok := escapeInvalidUTF8(s)
		if !ok {
			t.Fatalf("%q: not escapable", s)
		}
		if back := unescapeInvalidUTF8(e); back != s {
			t.Errorf("%q: round trip gives %q", s, back)
		}
		if twice := unescapeInvalidUTF8(unescapeInvalidUTF8(e)); twice != s {
			t.Errorf("%q: unescaping twice gives %q", s, twice)
		}
	}
}
