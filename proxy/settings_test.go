package proxy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pg-kinetic/pg-kinetic/classify"
)

func TestStartupSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		want    []setting
		wantErr bool
	}{
		{"plain", map[string]string{"user": "u", "database": "d", "application_name": "psql", "client_encoding": "UTF8"},
			[]setting{{name: "application_name", value: "psql"}, {name: "client_encoding", value: "UTF8"}}, false},
		{"options first", map[string]string{"user": "u", "options": "-c search_path=a,b --statement-timeout=5s", "DateStyle": "ISO"},
			[]setting{{name: "search_path", value: "a,b"}, {name: "statement_timeout", value: "5s"}, {name: "DateStyle", value: "ISO"}}, false},
		{"escaped space", map[string]string{"options": `-c application_name=my\ app -cwork_mem=64MB`},
			[]setting{{name: "application_name", value: "my app"}, {name: "work_mem", value: "64MB"}}, false},
		{"protocol extensions dropped", map[string]string{"_pq_.foo": "x", "replication": "database"}, nil, false},
		{"unsupported switch", map[string]string{"options": "-d 5"}, nil, true},
		{"dangling -c", map[string]string{"options": "-c"}, nil, true},
	} {
		got, err := startupSettings(tc.params)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v", tc.name, err)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSettingsQueryQuotes(t *testing.T) {
	got := settingsQuery([]setting{{name: "application_name", value: "it's"}, {name: "search_path", value: `"$user", public`}})
	want := `SELECT pg_catalog.set_config('application_name', 'it''s', false), pg_catalog.set_config('search_path', '"$user", public', false)`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestSerializableByDefault(t *testing.T) {
	for _, tc := range []struct {
		startup, session []setting
		want             bool
	}{
		{nil, nil, false},
		{[]setting{{name: "default_transaction_isolation", value: "serializable"}}, nil, true},
		{[]setting{{name: "Default_Transaction_Isolation", value: "'SERIALIZABLE'"}}, nil, true},
		{[]setting{{name: "default_transaction_isolation", value: "serializable"}}, []setting{{name: "default_transaction_isolation", value: "read committed"}}, false},
		{nil, []setting{{name: "application_name", value: "x"}, {name: "default_transaction_isolation", value: "serializable"}}, true},
		{[]setting{{name: "default_transaction_isolation", value: "repeatable read"}}, nil, false},
	} {
		if got := serializableByDefault(tc.startup, tc.session); got != tc.want {
			t.Errorf("serializableByDefault(%v, %v) = %v, want %v", tc.startup, tc.session, got, tc.want)
		}
	}
}

// TestWithSetting: the session's settings after a SET or RESET are what
// the server holds after it, so that replaying them elsewhere gives the
// same session (PostgreSQL's regression suite found both of the cases
// below differing on a replica: date.sql, rowsecurity.sql).
func TestWithSetting(t *testing.T) {
	startup := []setting{{name: "DateStyle", value: "Postgres, MDY"}}
	set := func(name, value string) classify.Setting { return classify.Setting{Name: name, Value: value} }
	reset := func(name string) classify.Setting { return classify.Setting{Name: name, Reset: true} }
	for _, tc := range []struct {
		name    string
		startup []setting
		steps   []classify.Setting
		want    string
	}{
		{"datestyle keeps the style a later SET does not name", startup,
			[]classify.Setting{set("datestyle", "iso"), set("datestyle", "ymd")}, "datestyle=ISO, YMD"},
		{"datestyle merges with the startup value", startup,
			[]classify.Setting{set("datestyle", "dmy")}, "datestyle=Postgres, DMY"},
		{"datestyle German means DMY unless an order is named", startup,
			[]classify.Setting{set("datestyle", "german")}, "datestyle=German, DMY"},
		{"datestyle German with an order", startup,
			[]classify.Setting{set("datestyle", "German, YMD")}, "datestyle=German, YMD"},
		{"datestyle without a known value stays as set", nil,
			[]classify.Setting{set("datestyle", "ymd")}, "datestyle=ymd"},
		{"datestyle DEFAULT is not merged", startup,
			[]classify.Setting{set("datestyle", "iso"), set("datestyle", "default")}, "datestyle=default"},
		{"datestyle RESET returns to the startup value", startup,
			[]classify.Setting{set("datestyle", "iso"), reset("datestyle")}, "DateStyle=Postgres, MDY"},
		{"SET SESSION AUTHORIZATION drops SET ROLE", nil,
			[]classify.Setting{set("role", "bob"), set("session_authorization", "alice")}, "session_authorization=alice"},
		{"RESET SESSION AUTHORIZATION drops SET ROLE", nil,
			[]classify.Setting{set("session_authorization", "alice"), set("role", "bob"), reset("session_authorization")}, ""},
		{"SET ROLE after SET SESSION AUTHORIZATION stays", nil,
			[]classify.Setting{set("session_authorization", "alice"), set("role", "bob")}, "session_authorization=alice role=bob"},
		{"RESET of a placeholder leaves it defined, empty", nil,
			[]classify.Setting{set("custom.my_guc", "foo"), reset("custom.my_guc")}, "custom.my_guc=NULL"},
		{"RESET ALL leaves placeholders defined, empty", nil,
			[]classify.Setting{set("work_mem", "1MB"), set("custom.a", "1"), set("Custom.A", "2"), set("custom.b", "3"), {Reset: true}}, "Custom.A=NULL custom.b=NULL"},
		{"RESET of a placeholder set at startup returns to it", []setting{{name: "custom.a", value: "x"}},
			[]classify.Setting{set("custom.a", "y"), reset("custom.a")}, "custom.a=x"},
		{"RESET returns to every startup value of the name, in order", []setting{{name: "search_path", value: "a"}, {name: "search_path", value: "b"}},
			[]classify.Setting{set("search_path", "c"), reset("search_path")}, "search_path=a search_path=b"},
		{"RESET of a built-in setting forgets it", nil,
			[]classify.Setting{set("work_mem", "1MB"), reset("work_mem")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var session []setting
			for _, s := range tc.steps {
				session = withSetting(session, tc.startup, s)
			}
			var got []string
			for _, s := range session {
				if s.reset {
					got = append(got, s.name+"=NULL")
				} else {
					got = append(got, s.name+"="+s.value)
				}
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("got %q, want %q", g, tc.want)
			}
		})
	}
}

func TestSettingsStatements(t *testing.T) {
	settings := []setting{
		{name: "application_name", value: "it's, pg_catalog.set_config('x', 'y', false)"},
		{name: "search_path", value: `"$user", public`},
		{name: "custom.x", reset: true},
	}
	var got []string
	for q := range settingsStatements(settingsQuery(settings)) {
		got = append(got, q)
	}
	want := []string{
		"SELECT pg_catalog.set_config('application_name', 'it''s, pg_catalog.set_config(''x'', ''y'', false)', false)",
		`SELECT pg_catalog.set_config('search_path', '"$user", public', false)`,
		"SELECT pg_catalog.set_config('custom.x', NULL, false)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	for i, s := range settings {
		var one []string
		for q := range settingsStatements(settingsQuery(settings[i : i+1])) {
			one = append(one, q)
		}
		if len(one) != 1 || one[0] != want[i] {
			t.Errorf("%s alone: %q", s.name, one)
		}
	}
	for range settingsStatements("") {
		t.Error("a statement for no settings")
	}
}
