package classify

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The corpus (testdata/corpus.txt) is a list of entries:
//
//	=== EXPECTATION…
//	SQL text, any number of lines (the last newline is not part of it)
//
// Lines starting with "##" are comments; blank lines that end an entry are
// not part of its text. The expectation starts with
// read, write or unclassified (the decision's Kind and Reason), followed by
// space-separated keys; a value may be a Go double-quoted string. Every
// field not mentioned must be its zero value.
//
//	n=N                   statement count (default 1; 0 for unclassified)
//	[I.]kind=read|write   statement I's kind (default: the decision's for n=1, read otherwise)
//	[I.]tx=begin|begin_read_only|begin_read_write|set_read_only|end|savepoint
//	[I.]chain
//	[I.]rollback          a TxEnd that commits nothing (ROLLBACK, ABORT)
//	[I.]start             a BEGIN spelt START TRANSACTION
//	[I.]sets_tx           SET TRANSACTION of characteristics a standby runs (SetsTx)
//	[I.]savepoint=set|release|rollback:NAME  a TxSavepoint's command and name
//	[I.]effect=set|pin|discard_all|prepare|execute|deallocate|unlisten
//	[I.]setting=NAME [I.]value=V [I.]reset
//	[I.]more=NAME=VALUE   one of MoreSettings (repeatable, in order)
//	[I.]name=P            PrepareName
//	[I.]inner=read|write  Inner's kind; [I.]inner.effect=…, [I.]inner.funcs=a,b, [I.]inner.rels=a,b
//	[I.]params_write
//	[I.]copy_in           COPY ... FROM STDIN
//	[I.]funcs=a,b         statement I's Funcs; the decision's are their union when it is a read
//	[I.]unlogs            statement I may make a relation UNLOGGED
//	[I.]nowal             statement I writes no WAL (SET, RESET, LISTEN, UNLISTEN, NOTIFY)
//	[I.]bare              statement I creates an object by an unqualified name (CreatesUnqualified)
//	[I.]temp_path         statement I is a SET LOCAL/set_config(…, true) of search_path naming pg_temp (TempPath)
//	[I.]rels=a,b          statement I's Relations, likewise; an entry with no rels key
//	                      leaves Relations unchecked (the fast and full paths still agree)
//	hint.primary hint.replica hint.stale-ok hint.strict-fresh hint.class=X
//	hint.min_lsn=X hint.unknown=a,b hint.found (a hint comment without words)
//	opts=NAME             classify with a named Options set (see corpusOptions)

type corpusEntry struct {
	line   int
	expect string
	sql    string
}

// corpusOptions are the Options sets an entry may ask for.
var corpusOptions = map[string]Options{
	"": {},
	"custom": {
		WriteFunctions:    []string{"audit_touch", "billing.charge"},
		ReadOnlyFunctions: []string{"report_volatile", "stats.sample_rows", "nextval"},
	},
}

func loadCorpus(t testing.TB) []corpusEntry {
	t.Helper()
	f, err := os.Open("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		entries []corpusEntry
		cur     *corpusEntry
		lines   []string
		lineNo  int
	)
	flush := func() {
		if cur != nil {
			for len(lines) > 0 && lines[len(lines)-1] == "" {
				lines = lines[:len(lines)-1] // blank lines between entries
			}
			cur.sql = strings.Join(lines, "\n")
			entries = append(entries, *cur)
		}
		cur, lines = nil, nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lineNo++
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "##"):
		case strings.HasPrefix(l, "==="):
			flush()
			cur = &corpusEntry{line: lineNo, expect: strings.TrimSpace(l[3:])}
		case cur == nil:
			if strings.TrimSpace(l) != "" {
				t.Fatalf("corpus.txt:%d: text before the first entry", lineNo)
			}
		default:
			lines = append(lines, l)
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return entries
}

// splitExpect splits an expectation into words, honouring Go-quoted values
// (key="a b").
func splitExpect(s string) ([]string, error) {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		i := 0
		for i < len(s) && s[i] != ' ' {
			if s[i] == '"' {
				q, err := strconv.QuotedPrefix(s[i:])
				if err != nil {
					return nil, err
				}
				i += len(q)
				continue
			}
			i++
		}
		w := s[:i]
		if k, v, ok := strings.Cut(w, "="); ok && strings.HasPrefix(v, `"`) {
			uq, err := strconv.Unquote(v)
			if err != nil {
				return nil, err
			}
			w = k + "=" + uq
		}
		out = append(out, w)
		s = s[i:]
	}
	return out, nil
}

// expected builds the Decision an expectation describes, and whether a
// hint comment must be found.
func expected(e corpusEntry) (d Decision, hintFound bool, opts string, err error) {
	words, err := splitExpect(e.expect)
	if err != nil || len(words) == 0 {
		return d, false, "", fmt.Errorf("bad expectation %q: %v", e.expect, err)
	}
	n := 1
	switch words[0] {
	case "read":
		d.Kind, d.Reason = KindRead, ReasonRead
	case "write":
		d.Kind, d.Reason = KindWrite, ReasonWrite
	case "unclassified":
		d.Kind, d.Reason = KindWrite, ReasonUnclassified
		n = 0
	default:
		return d, false, "", fmt.Errorf("first word must be read, write or unclassified, not %q", words[0])
	}
	type stmtKey struct {
		idx      int
		key, val string
	}
	var keys []stmtKey
	for _, w := range words[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch {
		case k == "n":
			if n, err = strconv.Atoi(v); err != nil {
				return d, false, "", err
			}
		case k == "opts":
			opts = v
		case strings.HasPrefix(k, "hint."):
			hintFound = true
			switch k[len("hint."):] {
			case "primary":
				d.Hints.Primary = true
			case "replica":
				d.Hints.Replica = true
			case "stale-ok":
				d.Hints.StaleOK = true
			case "strict-fresh":
				d.Hints.StrictFresh = true
			case "class":
				d.Hints.Class = v
			case "min_lsn":
				d.Hints.MinLSN = v
			case "unknown":
				d.Hints.Unknown = strings.Split(v, ",")
			case "found":
			default:
				return d, false, "", fmt.Errorf("unknown hint key %q", k)
			}
		default:
			idx := 0
			if i := strings.IndexByte(k, '.'); i > 0 && k[0] >= '0' && k[0] <= '9' {
				if idx, err = strconv.Atoi(k[:i]); err != nil {
					return d, false, "", err
				}
				k = k[i+1:]
			}
			keys = append(keys, stmtKey{idx, k, v})
		}
	}
	if n == 0 {
		if len(keys) > 0 {
			return d, false, "", fmt.Errorf("statement keys without statements")
		}
		return d, hintFound, opts, nil
	}
	d.Statements = make([]Statement, n)
	for i := range d.Statements {
		st := &d.Statements[i]
		st.Kind = KindRead
		if n == 1 {
			st.Kind = d.Kind
		}
	}
	for _, k := range keys {
		if k.idx >= n {
			return d, false, "", fmt.Errorf("statement %d of %d", k.idx, n)
		}
		st := &d.Statements[k.idx]
		switch k.key {
		case "kind":
			st.Kind, err = parseKind(k.val)
		case "tx":
			st.Tx, err = parseTx(k.val)
		case "chain":
			st.Chain = true
		case "rollback":
			st.Rollback = true
		case "start":
			st.Start = true
		case "savepoint":
			op, name, _ := strings.Cut(k.val, ":")
			st.Savepoint.Name = name
			ops := map[string]SavepointOp{"set": SavepointSet, "release": SavepointRelease, "rollback": SavepointRollback}
			var known bool
			if st.Savepoint.Op, known = ops[op]; !known {
				err = fmt.Errorf("unknown savepoint command %q", op)
			}
		case "effect":
			st.Effect, err = parseEffect(k.val)
		case "setting":
			st.Setting.Name = k.val
		case "value":
			st.Setting.Value = k.val
		case "reset":
			st.Setting.Reset = true
		case "more":
			name, val, _ := strings.Cut(k.val, "=")
			st.MoreSettings = append(st.MoreSettings, Setting{Name: name, Value: val})
		case "name":
			st.PrepareName = k.val
		case "inner":
			if st.Inner == nil {
				st.Inner = &Statement{}
			}
			st.Inner.Kind, err = parseKind(k.val)
		case "inner.effect":
			if st.Inner == nil {
				st.Inner = &Statement{}
			}
			st.Inner.Effect, err = parseEffect(k.val)
		case "inner.funcs":
			if st.Inner == nil {
				st.Inner = &Statement{}
			}
			st.Inner.Funcs = strings.Split(k.val, ",")
		case "inner.rels":
			if st.Inner == nil {
				st.Inner = &Statement{}
			}
			st.Inner.Relations = strings.Split(k.val, ",")
		case "params_write":
			st.ParamsWrite = true
		case "copy_in":
			st.CopyIn = true
		case "funcs":
			st.Funcs = strings.Split(k.val, ",")
		case "rels":
			st.Relations = strings.Split(k.val, ",")
		case "unlogs":
			st.Unlogs = true
		case "nowal":
			st.NoWAL = true
		case "sets_tx":
			st.SetsTx = true
		case "bare":
			st.CreatesUnqualified = true
		case "temp_path":
			st.TempPath = true
		default:
			err = fmt.Errorf("unknown key %q", k.key)
		}
		if err != nil {
			return d, false, "", err
		}
	}
	var funcs, rels []string
	for i := range d.Statements {
		st := &d.Statements[i]
		st.Reason = reasonOf(st.Kind)
		if st.Inner != nil {
			st.Inner.Reason = reasonOf(st.Inner.Kind)
			if st.Effect == EffectPrepare {
				// PREPARE reports its inner statement's kind, functions
				// and relations.
				st.Kind, st.Reason, st.Funcs, st.Relations = st.Inner.Kind, st.Inner.Reason, st.Inner.Funcs, st.Inner.Relations
			}
		}
		if st.Tx != TxNone || st.Effect != EffectNone {
			d.Control = true
		}
		funcs = append(funcs, st.Funcs...)
		rels = append(rels, st.Relations...)
	}
	if d.Kind == KindRead {
		d.Funcs, d.Relations = sortedUnique(funcs), sortedUnique(rels)
	}
	return d, hintFound, opts, nil
}

func reasonOf(k Kind) string {
	if k == KindRead {
		return ReasonRead
	}
	return ReasonWrite
}

func parseKind(s string) (Kind, error) {
	switch s {
	case "read":
		return KindRead, nil
	case "write":
		return KindWrite, nil
	}
	return 0, fmt.Errorf("kind %q", s)
}

func parseTx(s string) (Tx, error) {
	for i, n := range txNames {
		if n == s {
			return Tx(i), nil
		}
	}
	return 0, fmt.Errorf("tx %q", s)
}

func parseEffect(s string) (Effect, error) {
	for i, n := range effectNames {
		if n == s {
			return Effect(i), nil
		}
	}
	return 0, fmt.Errorf("effect %q", s)
}

// normalize makes nil and empty slices compare equal.
// withoutRelations is d with no Relations anywhere (a copy), for entries
// that leave them unchecked.
func withoutRelations(d Decision) Decision {
	d.Relations = nil
	d.Statements = slices.Clone(d.Statements)
	for i := range d.Statements {
		d.Statements[i].Relations = nil
		if in := d.Statements[i].Inner; in != nil {
			c := *in
			c.Relations = nil
			d.Statements[i].Inner = &c
		}
	}
	return d
}

func normalize(d Decision) Decision {
	norm := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	d.Funcs = norm(d.Funcs)
	d.Relations = norm(d.Relations)
	d.Hints.Unknown = norm(d.Hints.Unknown)
	if len(d.Statements) == 0 {
		d.Statements = nil
	}
	sts := make([]Statement, len(d.Statements))
	for i, st := range d.Statements {
		st.Funcs = norm(st.Funcs)
		st.Relations = norm(st.Relations)
		if len(st.MoreSettings) == 0 {
			st.MoreSettings = nil
		}
		if st.Inner != nil {
			in := *st.Inner
			in.Funcs = norm(in.Funcs)
			in.Relations = norm(in.Relations)
			st.Inner = &in
		}
		sts[i] = st
	}
	if d.Statements != nil {
		d.Statements = sts
	}
	return d
}

func describe(d Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s control=%v funcs=%v rels=%v hints=%+v\n", d.Kind, d.Reason, d.Control, d.Funcs, d.Relations, d.Hints)
	for i, st := range d.Statements {
		fmt.Fprintf(&b, "  [%d] %s/%s tx=%s chain=%v rollback=%v start=%v sets_tx=%v effect=%s setting=%+v more=%+v name=%q params_write=%v copy_in=%v funcs=%v rels=%v unlogs=%v nowal=%v cancels=%v bare=%v temp_path=%v",
			i, st.Kind, st.Reason, st.Tx, st.Chain, st.Rollback, st.Start, st.SetsTx, st.Effect, st.Setting, st.MoreSettings, st.PrepareName, st.ParamsWrite, st.CopyIn, st.Funcs, st.Relations, st.Unlogs, st.NoWAL, st.Cancels, st.CreatesUnqualified, st.TempPath)
		if st.Inner != nil {
			fmt.Fprintf(&b, " inner={%s/%s effect=%s funcs=%v}", st.Inner.Kind, st.Inner.Reason, st.Inner.Effect, st.Inner.Funcs)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// compareInner compares only the Inner fields an expectation can state.
func trimInner(d Decision) Decision {
	d.Statements = slices.Clone(d.Statements) // (d's are the cache's)
	for i := range d.Statements {
		if in := d.Statements[i].Inner; in != nil {
			d.Statements[i].Inner = &Statement{Kind: in.Kind, Reason: in.Reason, Effect: in.Effect, Funcs: in.Funcs, Relations: in.Relations}
		}
	}
	return d
}

// fullPath returns an uncached Classifier that never takes the fast path.
func fullPath(o Options) *Classifier {
	o.CacheSize = -1
	c := New(o)
	c.noFastPath = true
	return c
}

func TestCorpus(t *testing.T) {
	entries := loadCorpus(t)
	classifiers := map[string]*Classifier{}
	for name, o := range corpusOptions {
		classifiers[name] = New(o)
	}
	seen := map[string]int{}
	fastCount := 0
	for _, e := range entries {
		key := e.expect + "\x00" + e.sql
		if prev, dup := seen[key]; dup {
			t.Errorf("corpus.txt:%d: duplicate of the entry at line %d", e.line, prev)
		}
		seen[key] = e.line
		want, hintFound, opts, err := expected(e)
		if err != nil {
			t.Errorf("corpus.txt:%d: %v", e.line, err)
			continue
		}
		c, ok := classifiers[opts]
		if !ok {
			t.Errorf("corpus.txt:%d: no options set %q", e.line, opts)
			continue
		}
		got := c.Classify(e.sql)
		checked := got
		if !strings.Contains(e.expect, "rels=") {
			checked = withoutRelations(got)
		}
		if g, w := normalize(trimInner(checked)), normalize(want); !reflect.DeepEqual(g, w) {
			t.Errorf("corpus.txt:%d: %q\n got: %s want: %s", e.line, e.sql, describe(g), describe(w))
		}
		if _, found := ParseHints(e.sql); found != hintFound {
			t.Errorf("corpus.txt:%d: ParseHints found=%v, want %v", e.line, found, hintFound)
		}
		// A second classification is a cache hit with the same answer.
		if again := c.Classify(e.sql); !reflect.DeepEqual(again, got) {
			t.Errorf("corpus.txt:%d: cached decision differs", e.line)
		}
		// The fast path and the full path agree.
		full := fullPath(corpusOptions[opts])
		if f := full.Classify(e.sql); !reflect.DeepEqual(f, got) {
			t.Errorf("corpus.txt:%d: %q: full path differs from fast path\n full: %s fast: %s", e.line, e.sql, describe(f), describe(got))
		}
		if _, fast, _ := c.fastSelects(e.sql); fast {
			fastCount++
		}
	}
	t.Logf("corpus: %d entries, %d answered by the fast path", len(entries), fastCount)
	if len(entries) < 150 {
		t.Errorf("corpus has %d entries, want at least 150", len(entries))
	}
}

// TestCorpusKinds guards the corpus itself: it must keep covering reads,
// writes and unparsable texts.
func TestCorpusKinds(t *testing.T) {
	count := map[string]int{}
	for _, e := range loadCorpus(t) {
		w, _, _ := strings.Cut(e.expect, " ")
		count[w]++
	}
	for _, k := range []string{"read", "write", "unclassified"} {
		if count[k] == 0 {
			t.Errorf("no %s entries", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(count)) {
		t.Logf("%s: %d", k, count[k])
	}
}
