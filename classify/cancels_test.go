package classify

import (
	"slices"
	"testing"
)

// TestCancels: the process IDs a SELECT cancels with pg_cancel_backend,
// as constants or parameters, for the router to relay (Statement.Cancels).
func TestCancels(t *testing.T) {
	c := New(Options{})
	for _, tc := range []struct {
		sql  string
		want []BackendArg
	}{
		{"SELECT pg_cancel_backend(4242)", []BackendArg{{PID: 4242}}},
		{"select PG_CATALOG.pg_cancel_backend($1)", []BackendArg{{Param: 1}}},
		{"SELECT pg_cancel_backend($2::int), pg_cancel_backend(7)", []BackendArg{{Param: 2}, {PID: 7}}},
		{"SELECT 1 WHERE pg_cancel_backend(CAST($1 AS integer))", []BackendArg{{Param: 1}}},
		// Not a constant or a parameter: the server finds the PIDs.
		{"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%sleep%'", nil},
		{"SELECT pg_cancel_backend(4000 + 2)", nil},
		// Another function, or another schema's function of that name.
		{"SELECT pg_terminate_backend(4242)", nil},
		{"SELECT myschema.pg_cancel_backend(4242)", nil},
		{"SELECT 1", nil},
	} {
		d := c.Classify(tc.sql)
		var got []BackendArg
		for _, st := range d.Statements {
			got = append(got, st.Cancels...)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: Cancels = %+v; want %+v", tc.sql, got, tc.want)
		}
		if tc.want != nil && d.Kind != KindWrite {
			t.Errorf("%q: Kind = %v; want a write (the primary signals its backend)", tc.sql, d.Kind)
		}
	}
}
