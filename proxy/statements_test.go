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
