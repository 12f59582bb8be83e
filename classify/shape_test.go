package classify

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
)

func uncached(o Options) *Classifier {
	o.CacheSize = -1
	return New(o)
}

func TestShapeSharesLiterals(t *testing.T) {
	for _, format := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = %d;",
		"UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = 7;",
		"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 2, %d, -5, CURRENT_TIMESTAMP);",
		"/* pg-kinetic: class=browse replica */ SELECT * FROM items WHERE id = %d AND name = 'x' LIMIT 10",
		"SELECT f(%d), nextval('seq')",             // unknown function and a write function by name
		"SELECT pg_advisory_xact_lock(%d)",         // a write, not a pin
		"SELECT * FROM t WHERE id = %d FOR UPDATE", // a write
		"CALL transfer(%d, 2, 100.5)",
		"SELECT %d; INSERT INTO t VALUES ('a')",
	} {
		t.Run(format, func(t *testing.T) {
			c := New(Options{})
			ref := uncached(Options{})
			const n = 50
			for i := range n {
				sql := fmt.Sprintf(format, i*7919)
				if got, want := c.Classify(sql), ref.Classify(sql); !reflect.DeepEqual(got, want) {
					t.Fatalf("%q:\n got %s want %s", sql, describe(got), describe(want))
				}
			}
			st := c.Stats()
			if st.Misses != 1 || st.ShapeHits != n-1 || st.TextHits != 0 || st.ShapeEntries != 1 {
				t.Fatalf("Stats() = %+v; want 1 miss, %d shape hits, 1 shape entry", st, n-1)
			}
		})
	}
}

// TestShapeNeverSharesConstantDependent: texts whose decision depends, or
// may depend, on a constant's value are each classified by their own
// parse, never served from the shape level.
func TestShapeNeverSharesConstantDependent(t *testing.T) {
	groups := [][]string{
		{"SET search_path = 'a'", "SET search_path = 'b'", "SET search_path = 'pg_temp'"},
		{"SET statement_timeout = 5", "SET statement_timeout = 6000"},
		{"SET LOCAL work_mem = '4MB'", "SET LOCAL work_mem = '8MB'"},
		{"SET transaction_read_only = 'on'", "SET transaction_read_only = 'off'", "SET transaction_read_only = 0"},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "SET TIME ZONE INTERVAL '+02:00' HOUR TO MINUTE"},
		{"RESET work_mem", "SET work_mem TO DEFAULT"},
		{
			"SELECT set_config('search_path', 'a', false)", "SELECT set_config('search_path', 'b', false)",
			"SELECT set_config('search_path', 'a', true)", "SELECT set_config('search_path', 'a', 'on')",
			"SELECT set_config('search_path', 'a', 'off')", "SELECT 1 FROM t WHERE set_config('x.y', '1', true) = '1'",
		},
		{"EXPLAIN (ANALYZE true) DELETE FROM t WHERE id = 1", "EXPLAIN (ANALYZE false) DELETE FROM t WHERE id = 1", "EXPLAIN (ANALYZE 'off') DELETE FROM t WHERE id = 2", "EXPLAIN (ANALYZE 0) DELETE FROM t WHERE id = 3"},
		{"EXPLAIN SELECT * FROM t WHERE id = 1", "EXPLAIN SELECT * FROM t WHERE id = 2"},
		{"COPY t FROM 'a.csv'", "COPY t FROM 'b.csv'", "COPY t FROM ''"},
		{"PREPARE p AS SELECT 1", "PREPARE p AS SELECT 2", "EXECUTE p(1)", "EXECUTE p(2)", "EXECUTE p(nextval('s'))"},
		{"DECLARE c CURSOR FOR SELECT 1", "DECLARE c CURSOR FOR SELECT 2", "DECLARE c CURSOR WITH HOLD FOR SELECT 3"},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE, READ ONLY", "START TRANSACTION READ WRITE"},
		{"SELECT pg_advisory_lock(1)", "SELECT pg_advisory_lock(2)"},       // a pin: Effect set
		{"SELECT pg_cancel_backend(101)", "SELECT pg_cancel_backend(102)"}, // Statement.Cancels
		{"CREATE TEMP TABLE x AS SELECT 1", "CREATE TEMP TABLE x AS SELECT 2"},
		{"SELECT 1 INTO TEMP x", "SELECT 2 INTO TEMP x"},
		{"ALTER TABLE t ALTER COLUMN a SET DEFAULT 1", "ALTER TABLE t ALTER COLUMN a SET DEFAULT 2"},
		{"NOTIFY ch, 'a'", "NOTIFY ch, 'b'"},
		{"DO 'BEGIN NULL; END'", "DO 'BEGIN PERFORM 1; END'"},
		// Declined: parameters, dollar quotes, invalid UTF-8, NUL.
		{"SELECT * FROM t WHERE id = $1 AND n = 1", "SELECT * FROM t WHERE id = $1 AND n = 2"},
		{"SELECT $$a$$, 1", "SELECT $$b$$, 2"},
		{"SELECT 'caf\xe9', 1", "SELECT 'caf\xe8', 2"},
		{"SELECT 1\x00x", "SELECT 2\x00x"},
	}
	for _, g := range groups {
		c := classifyLikeUncached(t, g)
		if st := c.Stats(); st.ShapeHits != 0 || st.ShapeEntries != 0 {
			t.Errorf("%q: Stats() = %+v; want no shape hits or entries", g, st)
		}
	}
}

// TestShapeDistinct: texts that share a shape entry only with texts of
// exactly their hints and type modifiers.
func TestShapeDistinct(t *testing.T) {
	groups := [][]string{
		// Hints: different words never share (comments are kept in the key).
		{
			"/* pg-kinetic: class=a */ SELECT * FROM t WHERE id = 1",
			"/* pg-kinetic: class=b */ SELECT * FROM t WHERE id = 1",
			"/* pg-kinetic: class=c */ SELECT * FROM t WHERE id = 2",
			"/* pg-kinetic: min_lsn=0/16B3748 */ SELECT * FROM t WHERE id = 3",
			"/* pg-kinetic: min_lsn=0/16B3750 */ SELECT * FROM t WHERE id = 4",
			"/* pg-kinetic: primary */ SELECT * FROM t WHERE id = 5",
			"/* pg-kinetic: stale-ok */ SELECT * FROM t WHERE id = 6",
			"/* pg-kinetic: strict-fresh bogus */ SELECT * FROM t WHERE id = 7",
			"/* not a hint */ SELECT * FROM t WHERE id = 8",
			"SELECT * FROM t WHERE id = 9 /* pg-kinetic: primary */",
		},
		// The grammar rejects some constants: float precision is a type
		// modifier, kept in the key, and an error fails Normalize.
		{"SELECT x::float(5) FROM t WHERE a = 1", "SELECT x::float(0) FROM t WHERE a = 1", "SELECT x::float(54) FROM t WHERE a = 1"},
		{"SELECT U&'d\\0061t' UESCAPE '\\', 1", "SELECT U&'d!0061t' UESCAPE '!', 2", "SELECT U&'d!0061t' UESCAPE 'ab', 3"},
	}
	for _, g := range groups {
		c := classifyLikeUncached(t, g)
		if st := c.Stats(); st.ShapeHits != 0 {
			t.Errorf("%q: Stats() = %+v; want no shape hits", g, st)
		}
	}
}

// TestShapeHintsExact: texts of one shape with one hint comment share a
// decision, hints included; the hint comment is part of the key.
func TestShapeHintsExact(t *testing.T) {
	c := New(Options{})
	a := c.Classify("/* pg-kinetic: class=reports min_lsn=1:0/16B3748 replica */ SELECT * FROM t WHERE id = 1")
	b := c.Classify("/* pg-kinetic: class=reports min_lsn=1:0/16B3748 replica */ SELECT * FROM t WHERE id = 2")
	if st := c.Stats(); st.ShapeHits != 1 {
		t.Fatalf("Stats() = %+v; want 1 shape hit", st)
	}
	want := Hints{Class: "reports", MinLSN: "1:0/16B3748", Replica: true}
	if !reflect.DeepEqual(a.Hints, want) || !reflect.DeepEqual(b.Hints, want) {
		t.Fatalf("hints %+v, %+v; want %+v", a.Hints, b.Hints, want)
	}
	d := c.Classify("/* pg-kinetic: class=report min_lsn=1:0/16B3748 replica */ SELECT * FROM t WHERE id = 3")
	if d.Hints.Class != "report" {
		t.Fatalf("class %q served from another hint's entry", d.Hints.Class)
	}
	if st := c.Stats(); st.ShapeHits != 1 {
		t.Fatalf("Stats() = %+v; a different hint was served from the shape level", st)
	}
}

func TestShapeKey(t *testing.T) {
	for _, tc := range []struct{ sql, key string }{
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;", "SELECT abalance FROM pgbench_accounts WHERE aid = $n;"},
		{"/* pg-kinetic: class=a */ SELECT 'x', -5 -- c\n", "/* pg-kinetic: class=a */ SELECT $s, -$n -- c\n"},
		{"SELECT x::varchar(5) FROM t ORDER BY 1", "SELECT x::varchar($n) FROM t ORDER BY $n"},
		{"SELECT x::float(5), y::FLOAT (  24) FROM t WHERE a = 1", "SELECT x::float(5), y::FLOAT (  24) FROM t WHERE a = $n"},
		{"SELECT 'it''s', \"a\"\"b\" FROM t WHERE c IN (1, 2.5)", "SELECT $s, \"a\"\"b\" FROM t WHERE c IN ($n, $n)"},
		{"SELECT 1 /* 2 /* 3 */ 4 */ -- 5\n", "SELECT $n /* 2 /* 3 */ 4 */ -- 5\n"},
		{"SELECT t1.c2 FROM t1", ""}, // digits in names only
		// Declined by the Go scanner, keyed by Normalize.
		{"SELECT E'\\n', 1", "SELECT $1, $2"},
		{"SELECT 1e3", "SELECT $1"},
		{"SELECT * FROM t", ""},
		{"SELECT $1, 5", ""},
		{"SELECT 'a$b'", ""},
		{"SELECT 5\x00", ""},
		{"SELECT '\xff'", ""},
		{"SELECT FROM WHERE 5", "SELECT FROM WHERE $n"}, // never stored: it does not parse
		{"", ""},
	} {
		if got := shapeKey(tc.sql); got != tc.key {
			t.Errorf("shapeKey(%q) = %q, want %q", tc.sql, got, tc.key)
		}
	}
}

// TestScanShapeDeclines: texts the Go scanner leaves to Normalize.
func TestScanShapeDeclines(t *testing.T) {
	for _, sql := range []string{
		"SELECT E'x', 1", "SELECT e'x', 1", "SELECT B'101', 1", "SELECT X'ff', 1", "SELECT N'x', 1",
		"SELECT U&'d!0061t' UESCAPE '!', 1", "SELECT U&\"d!0061t\" UESCAPE '!' FROM t WHERE a = 1",
		"SELECT 'a\\b', 1", "SELECT 1e5", "SELECT 1.5e5", "SELECT 1.2.3", "SELECT .5", "SELECT 1..2",
		"SELECT 123abc", "SELECT 0x1F", "SELECT 1_000", "SELECT date'2020-01-01'",
		"SELECT 'unterminated", "SELECT \"unterminated", "SELECT 1 /* unterminated /* */",
		"SELECT 1, 'a'\n'b'", "SELECT 'a' -- c\n'b', 1",
		"SELECT * FROM t", "SELECT t1.c2 FROM t1",
	} {
		if key, ok := scanShape(sql, nil); ok {
			t.Errorf("scanShape(%q) = %q; want it declined", sql, key)
		}
	}
}

// TestScanShapeAgreesWithLexer is the property the Go scanner's keys rest
// on: every span it replaces is exactly one constant token of the real
// lexer (pg_query's Scan), for every corpus text, its variants with other
// constants, and texts made to confuse a scanner.
func TestScanShapeAgreesWithLexer(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	texts := []string{
		"SELECT 1-1, 1 - -1, 2--3\n, 4/*5*/6, '7''8'\n'9', \"1\"\"2\"3, a1, _2, é3, x::float(4)",
		"SELECT 1+-2, 3*/**/4, '--', '/*', \"--\", \"/*\" FROM t WHERE a <> 1 AND b !=2 OR c>=3",
		"SELECT 1::int, 2.::numeric, 3.25, 00012, 99999999999999999999, 'a' 'b'",
		"select-1,+2,(3),[4],{5},;6:7", "SELECT 1\f+\v2\r\n-3",
	}
	for _, e := range loadCorpus(t) {
		texts = append(texts, e.sql)
		spans := literalSpans(e.sql)
		for range 4 {
			texts = append(texts, substitute(e.sql, spans, r))
		}
	}
	checked := 0
	for _, sql := range texts {
		if scanAgrees(t, sql) {
			checked++
		}
	}
	t.Logf("%d of %d texts keyed by the Go scanner", checked, len(texts))
	if checked < 200 {
		t.Errorf("only %d texts keyed by the Go scanner: the property is hardly exercised", checked)
	}
}

// scanAgrees checks scanShape's spans of sql against the lexer's tokens;
// it reports whether scanShape keyed sql.
func scanAgrees(t testing.TB, sql string) bool {
	t.Helper()
	if strings.IndexByte(sql, '$') >= 0 || strings.IndexByte(sql, 0) >= 0 || !utf8.ValidString(sql) {
		return false // shapeKey screens them out before scanShape
	}
	var spans [][2]int
	if _, ok := scanShape(sql, &spans); !ok {
		return false
	}
	res, err := pg.Scan(sql)
	if err != nil {
		// Harmless when the text does not parse either: its decision is
		// never stored, and no text of its key parses (the lexer's errors
		// do not depend on the values of the constants replaced).
		if _, perr := pg.Parse(sql); perr == nil {
			t.Fatalf("scanShape keyed %q, which the lexer rejects (%v) but the parser accepts", sql, err)
		}
		return true
	}
	tokens := map[[2]int]pg.Token{}
	for _, tok := range res.GetTokens() {
		tokens[[2]int{int(tok.GetStart()), int(tok.GetEnd())}] = tok.GetToken()
	}
	for _, sp := range spans {
		switch tok, ok := tokens[sp]; {
		case !ok:
			t.Errorf("%q: scanShape replaced %q (%d:%d), not one token of the lexer", sql, sql[sp[0]:sp[1]], sp[0], sp[1])
		case tok != pg.Token_ICONST && tok != pg.Token_FCONST && tok != pg.Token_SCONST:
			t.Errorf("%q: scanShape replaced %q, a %s token", sql, sql[sp[0]:sp[1]], tok)
		}
	}
	return true
}

// FuzzScanShape: the lexer agreement for any text.
func FuzzScanShape(f *testing.F) {
	for _, e := range loadCorpus(f) {
		f.Add(e.sql)
	}
	f.Add("SELECT 1 /* /* */ */ 'a''b' \"c\"\"d\" -- e\n")
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4096 {
			return
		}
		scanAgrees(t, sql)
	})
}

// TestShapePromotesRepeats: a text answered by the shape level twice in a
// row gets an exact entry; texts seen once do not.
func TestShapePromotesRepeats(t *testing.T) {
	c := New(Options{})
	c.Classify("SELECT * FROM t WHERE id = 1") // parsed: an exact and a shape entry
	for i := 2; i < 10; i++ {
		c.Classify(fmt.Sprintf("SELECT * FROM t WHERE id = %d", i))
	}
	if st := c.Stats(); st.TextEntries != 1 || st.ShapeHits != 8 {
		t.Fatalf("Stats() = %+v; want 1 text entry, 8 shape hits", st)
	}
	c.Classify("SELECT * FROM t WHERE id = 9") // the same text again: promoted
	c.Classify("SELECT * FROM t WHERE id = 9") // an exact hit
	if st := c.Stats(); st.TextEntries != 2 || st.ShapeHits != 9 || st.TextHits != 1 || st.Misses != 1 {
		t.Fatalf("Stats() = %+v; want 2 text entries, 9 shape hits, 1 text hit, 1 miss", st)
	}
}

func TestShapeDisabled(t *testing.T) {
	c := New(Options{ShapeCacheSize: -1})
	c.Classify("SELECT 1")
	c.Classify("SELECT 2")
	if st := c.Stats(); st.Misses != 2 || st.ShapeHits != 0 {
		t.Fatalf("Stats() = %+v; want 2 misses", st)
	}
}

// literalPool holds constants of every kind, and the values that the
// classifier's constant-reading rules look at.
var literalPool = []string{
	"0", "1", "-1", "42", "2147483647", "2147483648", "99999999999999999999", "1.5", "-0.5", "5e3",
	"'x'", "''", "'on'", "'off'", "'true'", "'false'", "'t'", "'f'", "'0'", "'1'", "'yes'", "'no'",
	"'it''s'", "'a\"b'", "'pg_temp'", "'search_path'", "'/* pg-kinetic: primary */'", "'--'", "'$1'",
	"E'\\n'", "e'\\''", "B'101'", "X'ff'", "U&'\\0061'", "N'x'", "'a'\n'b'",
	"TRUE", "FALSE", "NULL", "DEFAULT", "x", "$1", "$$q$$",
}

// literalSpans returns the spans of sql's constants as the real lexer
// sees them.
func literalSpans(sql string) [][2]int {
	res, err := pg.Scan(sql)
	if err != nil {
		return nil
	}
	var spans [][2]int
	for _, tok := range res.GetTokens() {
		switch tok.GetToken() {
		case pg.Token_ICONST, pg.Token_FCONST, pg.Token_SCONST, pg.Token_BCONST, pg.Token_XCONST,
			pg.Token_USCONST, pg.Token_TRUE_P, pg.Token_FALSE_P, pg.Token_NULL_P:
			if s, e := int(tok.GetStart()), int(tok.GetEnd()); 0 <= s && s < e && e <= len(sql) {
				spans = append(spans, [2]int{s, e})
			}
		}
	}
	return spans
}

// substitute replaces sql's constants: mostly by one of the same kind
// (numbers by numbers, strings by strings), sometimes by anything in the
// pool, so that the variant usually has the same shape.
func substitute(sql string, spans [][2]int, r *rand.Rand) string {
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(sql[last:sp[0]])
		old := sql[sp[0]:sp[1]]
		var lit string
		switch {
		case r.IntN(4) == 0:
			lit = literalPool[r.IntN(len(literalPool))]
		case old[0] >= '0' && old[0] <= '9' || old[0] == '.':
			lit = literalPool[r.IntN(10)]
		case old[0] == '\'':
			lit = literalPool[10+r.IntN(19)]
		default:
			lit = old
		}
		b.WriteString(lit)
		last = sp[1]
	}
	b.WriteString(sql[last:])
	return b.String()
}

// TestShapeLiteralSubstitution is the property the shape level rests on:
// for every corpus text and random replacements of its constants, a
// classifier that has seen the original (and so may answer from the shape
// level) agrees with an uncached one.
func TestShapeLiteralSubstitution(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	variants := 12
	if testing.Short() {
		variants = 3
	}
	var shapeHits uint64
	for _, e := range loadCorpus(t) {
		_, _, opts, err := expected(e)
		if err != nil {
			t.Fatal(err)
		}
		o := corpusOptions[opts]
		c, ref := New(o), uncached(o)
		c.Classify(e.sql)
		spans := literalSpans(e.sql)
		if len(spans) == 0 {
			continue
		}
		for range variants {
			v := substitute(e.sql, spans, r)
			if got, want := c.Classify(v), ref.Classify(v); !reflect.DeepEqual(got, want) {
				t.Errorf("corpus.txt:%d: variant %q of %q:\n cached %s uncached %s", e.line, v, e.sql, describe(got), describe(want))
			}
		}
		shapeHits += c.Stats().ShapeHits
	}
	t.Logf("%d variants answered by the shape level", shapeHits)
	if shapeHits < 500 && !testing.Short() {
		t.Errorf("only %d shape hits: the property is hardly exercised", shapeHits)
	}
}

// FuzzShape: a text classified after another one (which may have left a
// shape entry) gets the decision an uncached classifier gives it. The
// second text is the first with its constants replaced (pick seeds the
// choice), or, when the fuzzer makes one, any other text.
func FuzzShape(f *testing.F) {
	for i, e := range loadCorpus(f) {
		f.Add(e.sql, uint64(i), "")
	}
	f.Add("SELECT * FROM t WHERE a = 1", uint64(0), "SELECT * FROM t WHERE a = 'x'")
	f.Add("SELECT set_config('a', 'b', true)", uint64(0), "SELECT set_config('a', 'b', false)")
	f.Fuzz(func(t *testing.T, sql string, pick uint64, other string) {
		if len(sql) > 4096 || len(other) > 4096 {
			return
		}
		if other == "" {
			other = substitute(sql, literalSpans(sql), rand.New(rand.NewPCG(pick, pick>>32)))
		}
		c := New(Options{})
		c.Classify(sql)
		got := c.Classify(other)
		checkDecision(t, other, got)
		if want := uncached(Options{}).Classify(other); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q after %q:\n cached %s uncached %s", other, sql, describe(got), describe(want))
		}
	})
}

// TestShapeSameKeyPairs: texts that share a key although their constants
// differ in kind, or are words (ALL, YEAR, TRUE) or negative numbers.
// The second is answered by the shape level and must equal its own parse.
func TestShapeSameKeyPairs(t *testing.T) {
	for _, p := range [][2]string{
		{"SELECT * FROM t LIMIT 5", "SELECT * FROM t LIMIT 600"},
		{"SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE a = 2.5"},
		{"SELECT * FROM t WHERE a = -5", "SELECT * FROM t WHERE a = -2147483648"},
		{"SELECT x @ -5 FROM t", "SELECT x @ -0.5 FROM t"},
		{"SELECT extract('year' FROM d) FROM t", "SELECT extract('epoch' FROM d) FROM t"},
		{"SELECT 'a'\n'b' FROM t", "SELECT 'c'\n'it''s' FROM t"},
		{"SELECT x + 1 FROM t GROUP BY x + 1", "SELECT x + 1 FROM t GROUP BY x + 2"},
		{"SELECT x::varchar(5) FROM t ORDER BY 1", "SELECT x::varchar(7) FROM t ORDER BY 2"},
		{"SELECT x::float(5) FROM t WHERE a = 1", "SELECT x::float(5) FROM t WHERE a = 2"},
		{"SELECT nextval('a'), f('x') FROM t", "SELECT nextval('b'), f('y') FROM t"},
		{"UPDATE t SET a = 1 WHERE b = 'x' RETURNING f(1)", "UPDATE t SET a = 0 WHERE b = '' RETURNING f(2)"},
		{"INSERT INTO t VALUES (1, 'a'), (2, 'b')", "INSERT INTO t VALUES (3, 'c'), (4, 'd')"},
		{"/* pg-kinetic: class=c */ SELECT g(1)", "/* pg-kinetic: class=c */ SELECT g(2)"},
		{"-- */\n/* pg-kinetic: primary */ SELECT '*/'", "-- */\n/* pg-kinetic: primary */ SELECT 'x'"},
		// Normalize's keys, for texts the Go scanner declines.
		{"SELECT * FROM t WHERE a = 1e3", "SELECT * FROM t WHERE a = NULL"},
		{"SELECT U&'d\\0061t' FROM t", "SELECT E'\\n' FROM t"},
		{"SELECT B'101', x FROM t", "SELECT X'ff', x FROM t"},
	} {
		if ka, kb := shapeKey(p[0]), shapeKey(p[1]); ka == "" || ka != kb {
			t.Errorf("%q and %q: keys %q and %q; want one key", p[0], p[1], ka, kb)
			continue
		}
		c := New(Options{})
		c.Classify(p[0])
		got := c.Classify(p[1])
		if st := c.Stats(); st.ShapeHits != 1 {
			t.Errorf("%q after %q: Stats() = %+v; want a shape hit", p[1], p[0], st)
		}
		if want := uncached(Options{}).Classify(p[1]); !reflect.DeepEqual(got, want) {
			t.Errorf("%q after %q:\n cached %s uncached %s", p[1], p[0], describe(got), describe(want))
		}
	}
}

// classifyLikeUncached classifies texts, in order, with one new cached
// classifier and checks each decision against an uncached one; it returns
// the cached classifier for a look at its Stats.
func classifyLikeUncached(t *testing.T, texts []string) *Classifier {
	t.Helper()
	c := New(Options{})
	ref := uncached(Options{})
	for _, sql := range texts {
		if got, want := c.Classify(sql), ref.Classify(sql); !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %s want %s", sql, describe(got), describe(want))
		}
	}
	return c
}
