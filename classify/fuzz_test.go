package classify

import (
	"reflect"
	"slices"
	"testing"
)

// addCorpusSeeds seeds a fuzz target with every corpus text (the committed
// testdata/fuzz files add the interesting inputs found while fuzzing).
func addCorpusSeeds(f *testing.F) {
	for _, e := range loadCorpus(f) {
		f.Add(e.sql)
	}
}

func FuzzClassify(f *testing.F) {
	addCorpusSeeds(f)
	cached := New(Options{CacheSize: 128})
	f.Fuzz(func(t *testing.T, sql string) {
		d := cached.Classify(sql)
		checkDecision(t, sql, d)
		// Deterministic: a cache hit, and a fresh uncached classifier, agree.
		if again := cached.Classify(sql); !reflect.DeepEqual(again, d) {
			t.Fatalf("%q: second classification differs:\n%s\n%s", sql, describe(again), describe(d))
		}
		if fresh := New(Options{CacheSize: -1}).Classify(sql); !reflect.DeepEqual(fresh, d) {
			t.Fatalf("%q: fresh classification differs:\n%s\n%s", sql, describe(fresh), describe(d))
		}
		// The fast path (JSON) and the full path (protobuf tree) agree.
		if full := fullPath(Options{}).Classify(sql); !reflect.DeepEqual(full, d) {
			t.Fatalf("%q: full path differs from fast path:\nfull: %s\nfast: %s", sql, describe(full), describe(d))
		}
	})
}

// checkDecision asserts the invariants every Decision keeps.
func checkDecision(t *testing.T, sql string, d Decision) {
	t.Helper()
	switch d.Reason {
	case ReasonRead:
		if d.Kind != KindRead {
			t.Fatalf("%q: reason read with kind %s", sql, d.Kind)
		}
	case ReasonWrite, ReasonUnclassified:
		if d.Kind != KindWrite {
			t.Fatalf("%q: reason %s with kind %s", sql, d.Reason, d.Kind)
		}
	default:
		t.Fatalf("%q: reason %q outside the vocabulary", sql, d.Reason)
	}
	if d.Reason == ReasonUnclassified && len(d.Statements) != 0 {
		t.Fatalf("%q: unclassified with statements", sql)
	}
	control := false
	anyWrite := false
	for _, st := range d.Statements {
		if st.Kind == KindWrite {
			anyWrite = true
		}
		if (st.Kind == KindRead) != (st.Reason == ReasonRead) {
			t.Fatalf("%q: statement kind %s with reason %q", sql, st.Kind, st.Reason)
		}
		if st.Tx != TxNone || st.Effect != EffectNone {
			control = true
		}
		if (st.Effect == EffectPrepare) != (st.Inner != nil) {
			t.Fatalf("%q: Inner set without PREPARE or missing", sql)
		}
		if !slices.IsSorted(st.Funcs) || len(slices.Compact(slices.Clone(st.Funcs))) != len(st.Funcs) {
			t.Fatalf("%q: statement Funcs %v not sorted and unique", sql, st.Funcs)
		}
	}
	if d.Reason != ReasonUnclassified && anyWrite != (d.Kind == KindWrite) {
		t.Fatalf("%q: decision kind %s but statement writes=%v", sql, d.Kind, anyWrite)
	}
	if control != d.Control {
		t.Fatalf("%q: Control=%v, statements say %v", sql, d.Control, control)
	}
	if d.Kind == KindWrite && d.Funcs != nil {
		t.Fatalf("%q: a write with Funcs %v", sql, d.Funcs)
	}
	if !slices.IsSorted(d.Funcs) {
		t.Fatalf("%q: Funcs %v not sorted", sql, d.Funcs)
	}
	if h, _ := ParseHints(sql); !reflect.DeepEqual(h, d.Hints) {
		t.Fatalf("%q: Hints %+v, ParseHints %+v", sql, d.Hints, h)
	}
}

func FuzzParseHints(f *testing.F) {
	addCorpusSeeds(f)
	f.Add("/* pg-kinetic: primary replica stale-ok strict-fresh class=x min_lsn=1:0/1 bogus */")
	f.Add("/* a */ -- b\n/* pg-kinetic: class=c */ SELECT 1")
	f.Fuzz(func(t *testing.T, sql string) {
		h, ok := ParseHints(sql)
		if !ok && !reflect.DeepEqual(h, Hints{}) {
			t.Fatalf("%q: hints %+v without a hint comment", sql, h)
		}
		if ok && !startsWithComment(sql) {
			t.Fatalf("%q: hints from a text that does not start with a comment", sql)
		}
		if h2, ok2 := ParseHints(sql); ok2 != ok || !reflect.DeepEqual(h2, h) {
			t.Fatalf("%q: not deterministic", sql)
		}
		// After a real first token nothing is a hint.
		if h3, ok3 := ParseHints("SELECT 1 " + sql); ok3 {
			t.Fatalf("%q: hints %+v after SELECT", sql, h3)
		}
	})
}
