package proxy

import "testing"

func TestPlanned(t *testing.T) {
	for q, want := range map[string]bool{
		"select 1":                                   true,
		"  (SELECT 1) union (select 2)":              true,
		"/* pg-kinetic: replica */ SELECT 1":         true,
		"-- c\nwith x as (select 1) select * from x": true,
		"insert into t values (1)":                   true,
		"Update t set a = 1":                         true,
		"delete from t":                              true,
		"merge into t using s on true when matched then do nothing": true,
		"values (1)":       true,
		"table t":          true,
		`fetch all in "c"`: false,
		"show work_mem":    false,
		"explain select 1": false,
		"execute p":        false,
		"/* unterminated":  false,
		"":                 false,
		"selectx":          false,
	} {
		if got := planned(q); got != want {
			t.Errorf("planned(%q) = %v, want %v", q, got, want)
		}
	}
}

// A stand-in may serve after an Execute only if that Execute cannot end
// the failed transaction (injectStatements): a text may end it if it is a
// transaction exit or starts with a comment (a hint before a ROLLBACK).
func TestMayExitText(t *testing.T) {
	for q, want := range map[string]bool{
		"rollback":                               true,
		"  ROLLBACK TO SAVEPOINT a ":             true,
		"commit;":                                true,
		"end":                                    true,
		"abort":                                  true,
		"prepare transaction 'x'":                true,
		"/* pg-kinetic: primary */ rollback":     true,
		"-- why\nrollback":                       true,
		"/* pg-kinetic: primary */ select 1":     true, // (not known without a parser: may)
		"release savepoint x1":                   false,
		"COMMIT\tAND CHAIN":                      true,
		"Prepare\n  Transaction 'x'":             true,
		"\u00a0end":                              true,
		"prepared":                               false,
		"prepare x as select 1":                  false,
		"rollbacks":                              false,
		"commit_log()":                           false,
		"select 1":                               false,
		"update t set v = v || '+' where k <= 1": false,
		"":                                       false,
	} {
		if got := mayExitText(q); got != want {
			t.Errorf("mayExitText(%q) = %v, want %v", q, got, want)
		}
	}
	// It runs for every Bind: no allocation.
	q := "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
	if n := testing.AllocsPerRun(100, func() { mayExitText(q) }); n != 0 {
		t.Errorf("mayExitText allocates %v times per call", n)
	}
}

// TestNameSet: the few names a batch usually uses live in the array, more
// go to the map, and a name is found either way.
func TestNameSet(t *testing.T) {
	var s nameSet
	names := []string{"", "s1", "s2", "s3", "s4", "s5", "s6"}
	for i, n := range names {
		if s.has(n) {
			t.Fatalf("has(%q) before add", n)
		}
		s.add(n)
		s.add(n) // twice: still once
		for _, m := range names[:i+1] {
			if !s.has(m) {
				t.Fatalf("after adding %q, has(%q) = false", n, m)
			}
		}
	}
	if s.n != len(s.few) || len(s.many) != len(names)-len(s.few) {
		t.Errorf("%d in the array, %d in the map; want %d and %d", s.n, len(s.many), len(s.few), len(names)-len(s.few))
	}
}

// TestRunsNothing: only a whole unit without Execute, Query or
// FunctionCall runs nothing; a unit streamed on (no Sync yet) may.
func TestRunsNothing(t *testing.T) {
	for _, tc := range []struct {
		msgs string
		want bool
	}{
		{"CS", true},   // a driver's deallocation
		{"PDS", true},  // a prepare
		{"BES", false}, // an execution
		{"PBDES", false},
		{"Q", false},
		{"F", false},
		{"PBDH", false}, // streamed on: its Execute may follow
		{"", false},
	} {
		var b batch
		for _, typ := range []byte(tc.msgs) {
			b.add(typ, []byte{})
		}
		if got := runsNothing(&b); got != tc.want {
			t.Errorf("runsNothing(%q) = %v, want %v", tc.msgs, got, tc.want)
		}
	}
}

// TestTxWord: with routing off, a unit's last transaction statement is
// told by first words alone; ROLLBACK TO does not end the block.
func TestTxWord(t *testing.T) {
	for text, want := range map[string]byte{
		"":                             0,
		"SELECT 1":                     0,
		" begin;select 1":              'b',
		"START TRANSACTION":            'b',
		"select 1; COMMIT":             'e',
		"End":                          'e',
		"abort;begin":                  'b',
		"rollback":                     'e',
		"rollback;":                    'e',
		"ROLLBACK   ":                  'e',
		"ROLLBACK TO s":                0,
		"rollback\tTo s; ":             0,
		"begin;rollback to a":          'b',
		"rollback prepared 'x'":        'e',
		"beginx; commitx":              0,
		"\nBEGIN\n":                    'b',
		"BEGIN; SELECT 1; ROLLBACK; ;": 'e',
	} {
		if got := txWord(text); got != want {
			t.Errorf("txWord(%q) = %q, want %q", text, got, want)
		}
	}
}
