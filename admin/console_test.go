package admin

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

type fakeSource struct {
	reloadErr, rollbackErr, stageErr error
	reloads, rollbacks               int
	stages                           []int
	paused, resumed                  []string
	pauseErr                         error
}

var connectedAt = time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.FixedZone("CET", 3600))

func (f *fakeSource) Servers() []ServerRow {
	return []ServerRow{
		{Route: "main", Address: "db1:5432", ConfiguredRole: "primary", DetectedRole: "primary",
			Healthy: true, Reachable: true, Timeline: 3, ReplayLSN: "", LagBytes: 0, LagMS: 0,
			ProbeAgeMS: 120, SplitBrain: false, Weight: 1, PoolActive: 2, PoolIdle: 5},
		{Route: "main", Address: "db2:5432", ConfiguredRole: "replica", DetectedRole: "",
			Healthy: false, Reachable: false, Timeline: 0, ReplayLSN: "0/3000060", LagBytes: -1, LagMS: -1,
			ProbeAgeMS: -1, SplitBrain: true, Weight: 3, PoolActive: 0, PoolIdle: 0},
	}
}

func (f *fakeSource) Clients() []ClientRow {
	return []ClientRow{
		{ID: 42, User: "app", Database: "shop", Addr: "10.0.0.7:51234", State: "active",
			Server: "db2:5432", LastRoute: "main", ConnectedAt: connectedAt},
		{ID: 43, User: "admin", Database: "pgkinetic", Addr: "[::1]:40000", State: "idle"},
	}
}

func (f *fakeSource) Routes() []RouteRow {
	return []RouteRow{
		{Route: "main", Class: "catalog_browse", Routing: "prefer_replica", Mode: "replica_tolerates_staleness",
			Stage: 1, Enabled: true, Primary: 10, Replica: 90, Rejected: 0},
		{Route: "main", Class: "billing_balance", Routing: "prefer_replica", Mode: "primary_only",
			Stage: 0, Enabled: false, Primary: 7, Replica: 0, Rejected: 1},
	}
}

func (f *fakeSource) Pools() []PoolRow {
	return []PoolRow{{Route: "main", Server: "db1:5432", User: "app", Database: "shop", Active: 2, Idle: 5, Waiting: 1, Size: 20}}
}

func (f *fakeSource) Stats() []StatRow {
	return []StatRow{{Name: "client_connections", Value: "2"}, {Name: "uptime_seconds", Value: "3600"}}
}

func (f *fakeSource) Rollout() []RolloutRow {
	return []RolloutRow{{Route: "main", Stage: 2, RolledBack: true, Shared: true, Version: 7, Pending: "", Sync: "synced"}}
}

func (f *fakeSource) ConfigLines() [][2]string {
	return [][2]string{{"listen", "127.0.0.1:6432"}, {"routes.main.password", "<redacted>"}}
}

func (f *fakeSource) Version() string { return "kineticd 0.5.0" }
func (f *fakeSource) Reload() error   { f.reloads++; return f.reloadErr }
func (f *fakeSource) RoutingRollback() error {
	f.rollbacks++
	return f.rollbackErr
}
func (f *fakeSource) RoutingStage(n int) error {
	f.stages = append(f.stages, n)
	return f.stageErr
}
func (f *fakeSource) Pause(route string) error  { f.paused = append(f.paused, route); return f.pauseErr }
func (f *fakeSource) Resume(route string) error { f.resumed = append(f.resumed, route); return nil }

func TestExecuteShow(t *testing.T) {
	tests := []struct {
		cmd     string
		columns []string
		rows    [][]string
	}{
		{"SHOW SERVERS",
			[]string{"route", "address", "configured_role", "detected_role", "healthy", "reachable", "timeline", "replay_lsn", "lag_bytes", "lag_ms", "probe_age_ms", "split_brain", "weight", "pool_active", "pool_idle"},
			[][]string{
				{"main", "db1:5432", "primary", "primary", "t", "t", "3", "", "0", "0", "120", "f", "1", "2", "5"},
				{"main", "db2:5432", "replica", "", "f", "f", "", "0/3000060", "", "", "", "t", "3", "0", "0"},
			}},
		{"SHOW CLIENTS",
			[]string{"id", "user", "database", "client_addr", "state", "server", "last_route", "connected_at"},
			[][]string{
				{"42", "app", "shop", "10.0.0.7:51234", "active", "db2:5432", "main", "2025-03-04 04:06:07.123456+00"},
				{"43", "admin", "pgkinetic", "[::1]:40000", "idle", "", "", ""},
			}},
		{"SHOW ROUTES",
			[]string{"route", "query_class", "routing", "mode", "stage", "enabled", "decisions_primary", "decisions_replica", "decisions_rejected"},
			[][]string{
				{"main", "catalog_browse", "prefer_replica", "replica_tolerates_staleness", "1", "t", "10", "90", "0"},
				{"main", "billing_balance", "prefer_replica", "primary_only", "0", "f", "7", "0", "1"},
			}},
		{"SHOW POOLS",
			[]string{"route", "server", "user", "database", "active", "idle", "waiting", "size"},
			[][]string{{"main", "db1:5432", "app", "shop", "2", "5", "1", "20"}}},
		{"SHOW STATS",
			[]string{"name", "value"},
			[][]string{{"client_connections", "2"}, {"uptime_seconds", "3600"}}},
		{"SHOW ROLLOUT",
			[]string{"route", "stage", "rolled_back", "shared", "version", "pending", "sync"},
			[][]string{{"main", "2", "t", "t", "7", "", "synced"}}},
		{"SHOW CONFIG",
			[]string{"key", "value"},
			[][]string{{"listen", "127.0.0.1:6432"}, {"routes.main.password", "<redacted>"}}},
		{"SHOW VERSION",
			[]string{"version"},
			[][]string{{"kineticd 0.5.0"}}},
	}
	for _, tt := range tests {
		// Every spelling of the command must give the same answer.
		lower := strings.ToLower(tt.cmd)
		mixed := strings.ToUpper(tt.cmd[:1]) + lower[1:5] + strings.ToUpper(lower[5:6]) + lower[6:]
		for _, spelling := range []string{
			tt.cmd, lower, mixed, tt.cmd + ";", "  " + lower + " ;  ", "\t" + strings.Replace(tt.cmd, " ", " \n\t ", 1) + ";\n",
		} {
			t.Run(spelling, func(t *testing.T) {
				res, err := Execute(spelling, &fakeSource{})
				if err != nil {
					t.Fatalf("Execute(%q): %v", spelling, err)
				}
				if !reflect.DeepEqual(res.Columns, tt.columns) {
					t.Errorf("columns = %q, want %q", res.Columns, tt.columns)
				}
				if !reflect.DeepEqual(res.Rows, tt.rows) {
					t.Errorf("rows = %q, want %q", res.Rows, tt.rows)
				}
				if res.Tag != "SHOW" {
					t.Errorf("tag = %q, want SHOW", res.Tag)
				}
				for i, row := range res.Rows {
					if len(row) != len(res.Columns) {
						t.Errorf("row %d has %d values for %d columns", i, len(row), len(res.Columns))
					}
				}
			})
		}
	}
}

func TestExecuteShowEmptySource(t *testing.T) {
	res, err := Execute("show pools", &emptySource{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Columns) != 8 || len(res.Rows) != 0 || res.Tag != "SHOW" {
		t.Errorf("got %+v, want 8 columns, no rows, tag SHOW", res)
	}
}

type emptySource struct{ fakeSource }

func (*emptySource) Pools() []PoolRow { return nil }

func TestExecuteActions(t *testing.T) {
	tests := []struct {
		cmd       string
		tag       string
		reloads   int
		rollbacks int
		stages    []int
	}{
		{"RELOAD", "RELOAD", 1, 0, nil},
		{"reload;", "RELOAD", 1, 0, nil},
		{"  Reload  ", "RELOAD", 1, 0, nil},
		{"ROUTING ROLLBACK", "ROUTING ROLLBACK", 0, 1, nil},
		{"routing   rollback ;", "ROUTING ROLLBACK", 0, 1, nil},
		{"ROUTING STAGE 2", "ROUTING STAGE", 0, 0, []int{2}},
		{"routing stage 0;", "ROUTING STAGE", 0, 0, []int{0}},
		{"Routing Stage 007", "ROUTING STAGE", 0, 0, []int{7}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			src := &fakeSource{}
			res, err := Execute(tt.cmd, src)
			if err != nil {
				t.Fatalf("Execute(%q): %v", tt.cmd, err)
			}
			if res.Tag != tt.tag || res.Columns != nil || res.Rows != nil {
				t.Errorf("result = %+v, want tag %q and no row set", res, tt.tag)
			}
			if src.reloads != tt.reloads || src.rollbacks != tt.rollbacks || !reflect.DeepEqual(src.stages, tt.stages) {
				t.Errorf("calls: reloads=%d rollbacks=%d stages=%v, want %d %d %v",
					src.reloads, src.rollbacks, src.stages, tt.reloads, tt.rollbacks, tt.stages)
			}
		})
	}
}

func TestExecuteErrors(t *testing.T) {
	tests := []struct {
		name    string
		cmd     string
		src     *fakeSource
		code    string
		message string // substring of Message
		calls   bool   // whether the Source's action ran
	}{
		{"unknown verb", "DROP TABLE x", nil, "42601", "commands are: SHOW SERVERS", false},
		{"sql select", "SELECT 1;", nil, "42601", "ROUTING STAGE n", false},
		{"unknown show", "SHOW DATABASES", nil, "42601", "unknown admin command", false},
		{"bare show", "SHOW", nil, "42601", "unknown admin command", false},
		{"show extra word", "SHOW SERVERS now", nil, "42601", "unknown admin command", false},
		{"two semicolons", "SHOW SERVERS;;", nil, "42601", "unknown admin command", false},
		{"reload extra word", "RELOAD now", nil, "42601", "unknown admin command", false},
		{"bare routing", "ROUTING", nil, "42601", "unknown admin command", false},
		{"routing unknown", "ROUTING OFF", nil, "42601", "unknown admin command", false},
		{"rollback extra", "ROUTING ROLLBACK 2", nil, "42601", "unknown admin command", false},
		{"stage extra", "ROUTING STAGE 1 2", nil, "42601", "unknown admin command", false},
		{"stage missing", "ROUTING STAGE", nil, "22023", "needs a stage number", false},
		{"stage missing semicolon", "routing stage;", nil, "22023", "needs a stage number", false},
		{"stage word", "ROUTING STAGE x", nil, "22023", "not an integer", false},
		{"stage negative", "ROUTING STAGE -1", nil, "22023", "must not be negative", false},
		{"stage minus", "ROUTING STAGE -", nil, "22023", "not an integer", false},
		{"stage plus", "ROUTING STAGE +1", nil, "22023", "not an integer", false},
		{"stage fraction", "ROUTING STAGE 1.5", nil, "22023", "not an integer", false},
		{"stage huge", "ROUTING STAGE 99999999999999999999999", nil, "22023", "out of range", false},
		{"reload refused", "RELOAD", &fakeSource{reloadErr: errors.New("routes.main: primary address missing")},
			"55000", "reload refused: routes.main: primary address missing", true},
		{"rollback refused", "ROUTING ROLLBACK", &fakeSource{rollbackErr: errors.New("state_file: read-only file system")},
			"55000", "rollback refused: state_file: read-only file system", true},
		{"stage refused", "ROUTING STAGE 9", &fakeSource{stageErr: errors.New("no class has stage 9")},
			"55000", "routing stage 9 refused: no class has stage 9", true},
		{"source code kept", "ROUTING STAGE 1", &fakeSource{stageErr: &Error{Code: "58030", Message: "io error"}},
			"58030", "io error", true},
		{"source code kept wrapped", "RELOAD", &fakeSource{reloadErr: fmtErr(&Error{Code: "F0000", Message: "bad config"})},
			"F0000", "bad config", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if src == nil {
				src = &fakeSource{}
			}
			res, err := Execute(tt.cmd, src)
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("Execute(%q) = %+v, %v; want *Error", tt.cmd, res, err)
			}
			if ae.Code != tt.code {
				t.Errorf("code = %s, want %s (%v)", ae.Code, tt.code, ae)
			}
			if !strings.Contains(ae.Message, tt.message) {
				t.Errorf("message = %q, want it to contain %q", ae.Message, tt.message)
			}
			if !strings.Contains(err.Error(), ae.Code) || !strings.Contains(err.Error(), ae.Message) {
				t.Errorf("Error() = %q lacks code or message", err.Error())
			}
			called := src.reloads+src.rollbacks+len(src.stages) > 0
			if called != tt.calls {
				t.Errorf("Source action called = %v, want %v", called, tt.calls)
			}
			if res.Tag != "" || res.Columns != nil {
				t.Errorf("result alongside error = %+v, want zero", res)
			}
		})
	}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func fmtErr(e error) error { return wrapped{e} }

func TestUnknownCommandListsAll(t *testing.T) {
	_, err := Execute("help", &fakeSource{})
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeSyntaxError {
		t.Fatalf("err = %v, want 42601", err)
	}
	for _, c := range []string{"SHOW SERVERS", "SHOW CLIENTS", "SHOW ROUTES", "SHOW POOLS", "SHOW STATS",
		"SHOW ROLLOUT", "SHOW CONFIG", "SHOW VERSION", "RELOAD", "ROUTING ROLLBACK", "ROUTING STAGE n"} {
		if !strings.Contains(ae.Message, c) {
			t.Errorf("message %q does not list %s", ae.Message, c)
		}
	}
}

func TestEmptyCommand(t *testing.T) {
	for _, cmd := range []string{"", "   ", ";", " ; \n"} {
		res, err := Execute(cmd, &fakeSource{})
		if err != nil || !reflect.DeepEqual(res, Result{}) {
			t.Errorf("Execute(%q) = %+v, %v; want zero Result, nil", cmd, res, err)
		}
	}
}

func TestNilSource(t *testing.T) {
	_, err := Execute("SHOW VERSION", nil)
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeInternalError {
		t.Fatalf("err = %v, want XX000", err)
	}
}

// The column slices handed out must not alias the package's, so a caller
// editing a Result cannot change the next one.
func TestColumnsNotShared(t *testing.T) {
	res, _ := Execute("SHOW VERSION", &fakeSource{})
	res.Columns[0] = "changed"
	res2, _ := Execute("SHOW VERSION", &fakeSource{})
	if res2.Columns[0] != "version" {
		t.Fatalf("columns aliased: %q", res2.Columns)
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{Code: "42601", Message: "m", Detail: "d"}
	if got := e.Error(); got != "m (SQLSTATE 42601): d" {
		t.Errorf("Error() = %q", got)
	}
	e.Detail = ""
	if got := e.Error(); got != "m (SQLSTATE 42601)" {
		t.Errorf("Error() = %q", got)
	}
}

func TestExecutePauseResume(t *testing.T) {
	f := &fakeSource{}
	for _, tc := range []struct{ cmd, tag string }{
		{"PAUSE", TagPause}, {"pause main;", TagPause}, {"RESUME main", TagResume}, {" resume ", TagResume},
	} {
		r, err := Execute(tc.cmd, f)
		if err != nil || r.Tag != tc.tag || r.Columns != nil {
			t.Errorf("%q: %+v, %v; want tag %s", tc.cmd, r, err, tc.tag)
		}
	}
	if fmt.Sprint(f.paused) != "[ main]" || fmt.Sprint(f.resumed) != "[main ]" {
		t.Errorf("routes passed: paused %q resumed %q", f.paused, f.resumed)
	}
	if _, err := Execute("PAUSE main other", f); err == nil {
		t.Error("PAUSE with two routes: no error")
	}
	f.pauseErr = &Error{Code: "42704", Message: `route "nosuch" does not exist`}
	if _, err := Execute("PAUSE nosuch", f); err == nil || err.(*Error).Code != "42704" {
		t.Errorf("PAUSE of an unknown route: %v, want 42704", err)
	}
}
