package classify

import "testing"

// checkNeutral fails when SessionNeutral admits a text whose full
// classification has a session effect, transaction control or more than
// one statement. (Its kind may be a write: SELECT ... FOR UPDATE locks rows
// for the transaction, not the session.)
func checkNeutral(t *testing.T, c *Classifier, sql string) bool {
	t.Helper()
	if !SessionNeutral(sql) {
		return false
	}
	d := c.Classify(sql)
	if d.Control || len(d.Statements) > 1 {
		t.Fatalf("SessionNeutral admits %q, classified %s", sql, describe(d))
	}
	return true
}

func TestSessionNeutralAgrees(t *testing.T) {
	c := New(Options{CacheSize: -1})
	admitted := 0
	for _, e := range loadCorpus(t) {
		if checkNeutral(t, c, e.sql) {
			admitted++
		}
	}
	for _, sql := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;",
		"  select x from t where y = 'it''s (not) a call' ;;",
		"SELECT current_user, session_user",
		"select * from t for update",
	} {
		checkNeutral(t, c, sql)
	}
	for _, sql := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;",
		"  select x from t where y = 'it''s not a call' ;;",
		"SELECT current_user, session_user",
	} {
		if !SessionNeutral(sql) {
			t.Errorf("SessionNeutral(%q) = false, want true", sql)
		}
	}
	for _, sql := range []string{
		"SELECT set_config('a', 'b', false)",
		"SELECT pg_advisory_lock(1)",
		"SELECT * INTO TEMP t FROM u",
		"select 1; set x = 1",
		"SET search_path = a",
		"/* pg-kinetic: primary */ SELECT 1",
		"SELECT 1 -- c",
		"SELECT $1",
		"selectx 1",
		"SELECT 'é'",
		"",
		"SELECT",
	} {
		if SessionNeutral(sql) {
			t.Errorf("SessionNeutral(%q) = true, want false", sql)
		}
	}
	if admitted == 0 {
		t.Fatal("no corpus text admitted: the check proves nothing")
	}
	t.Logf("%d corpus texts admitted, none with a session effect", admitted)
}

func FuzzSessionNeutral(f *testing.F) {
	addCorpusSeeds(f)
	c := New(Options{CacheSize: -1})
	f.Fuzz(func(t *testing.T, sql string) {
		checkNeutral(t, c, sql)
	})
}
