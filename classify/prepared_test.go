package classify

import "testing"

func TestDescribePrepared(t *testing.T) {
	for _, c := range []struct {
		sql      string
		declared int
		want     Prepared
		ok       bool
	}{
		{"SELECT $1::int + $3", 0, Prepared{Params: 3, Rows: true, RowsKnown: true}, true},
		{"SELECT '$9', $1", 2, Prepared{Params: 2, Rows: true, RowsKnown: true}, true},
		{"UPDATE t SET v = $2", 0, Prepared{Params: 2, RowsKnown: true}, true},
		{"INSERT INTO t VALUES ($1) RETURNING k", 0, Prepared{Params: 1, Rows: true, RowsKnown: true}, true},
		{"SELECT 1 INTO t2", 0, Prepared{RowsKnown: true}, true},
		{"", 2, Prepared{Params: 2, Empty: true, RowsKnown: true}, true},
		{"  ;  ", 0, Prepared{Empty: true, RowsKnown: true}, true},
		{"ROLLBACK", 0, Prepared{TxExit: true, RowsKnown: true}, true},
		{"rollback to savepoint s", 0, Prepared{TxExit: true, RowsKnown: true}, true},
		{"BEGIN", 0, Prepared{RowsKnown: true}, true},
		{"SHOW work_mem", 0, Prepared{Rows: true, RowsKnown: true}, true},
		{"MOVE 1 IN c", 0, Prepared{RowsKnown: true}, true},
		{"FETCH 1 IN c", 0, Prepared{Rows: true, RowsKnown: true}, true},
		{"EXECUTE s(1)", 0, Prepared{}, true},
		{"COPY t TO STDOUT", 0, Prepared{RowsKnown: true}, true},
		{"SELECT 1; SELECT 2", 0, Prepared{}, false},
		{"SELEC 1", 0, Prepared{}, false},
	} {
		got, ok := DescribePrepared(c.sql, c.declared)
		if ok != c.ok || got != c.want {
			t.Errorf("DescribePrepared(%q, %d) = %+v, %v; want %+v, %v", c.sql, c.declared, got, ok, c.want, c.ok)
		}
	}
}

func TestDescribeSQLPrepare(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want Prepared
		ok   bool
	}{
		{"PREPARE s1 (int) AS SELECT k FROM ref WHERE k <= $1", Prepared{Params: 1, Rows: true, RowsKnown: true}, true},
		{"prepare s2 as update t set v = $2", Prepared{Params: 2, RowsKnown: true}, true},
		{"PREPARE s3 (int, text) AS SELECT 1", Prepared{Params: 2, Rows: true, RowsKnown: true}, true},
		{"SELECT 1", Prepared{}, false},
	} {
		got, ok := DescribeSQLPrepare(c.sql)
		if ok != c.ok || got != c.want {
			t.Errorf("DescribeSQLPrepare(%q) = %+v, %v; want %+v, %v", c.sql, got, ok, c.want, c.ok)
		}
	}
}
