package proxy

import (
	"reflect"
	"testing"
)

func TestStartupSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		want    []setting
		wantErr bool
	}{
		{"plain", map[string]string{"user": "u", "database": "d", "application_name": "psql", "client_encoding": "UTF8"},
			[]setting{{"application_name", "psql"}, {"client_encoding", "UTF8"}}, false},
		{"options first", map[string]string{"user": "u", "options": "-c search_path=a,b --statement-timeout=5s", "DateStyle": "ISO"},
			[]setting{{"search_path", "a,b"}, {"statement_timeout", "5s"}, {"DateStyle", "ISO"}}, false},
		{"escaped space", map[string]string{"options": `-c application_name=my\ app -cwork_mem=64MB`},
			[]setting{{"application_name", "my app"}, {"work_mem", "64MB"}}, false},
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
	got := settingsQuery([]setting{{"application_name", "it's"}, {"search_path", `"$user", public`}})
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
		{[]setting{{"default_transaction_isolation", "serializable"}}, nil, true},
		{[]setting{{"Default_Transaction_Isolation", "'SERIALIZABLE'"}}, nil, true},
		{[]setting{{"default_transaction_isolation", "serializable"}}, []setting{{"default_transaction_isolation", "read committed"}}, false},
		{nil, []setting{{"application_name", "x"}, {"default_transaction_isolation", "serializable"}}, true},
		{[]setting{{"default_transaction_isolation", "repeatable read"}}, nil, false},
	} {
		if got := serializableByDefault(tc.startup, tc.session); got != tc.want {
			t.Errorf("serializableByDefault(%v, %v) = %v, want %v", tc.startup, tc.session, got, tc.want)
		}
	}
}
