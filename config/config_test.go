package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

const testFile = "test.toml"

// doc joins lines with newlines: line n of a test document is lines[n-1].
func doc(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// Valid endings appended after a case's own lines, so the case's line
// numbers start at 1.
var (
	usersTail  = []string{"[[users]]", `name = "app"`, `password = "secret"`}
	routesTail = []string{"[[routes]]", `name = "main"`, `database = "app"`, "[routes.primary]", `address = "127.0.0.1:5432"`}
	tail       = append(append([]string{}, usersTail...), routesTail...)
)

func withTail(tailLines []string, lines ...string) string {
	return doc(append(lines, tailLines...)...)
}

func problems(t *testing.T, err error) Errors {
	t.Helper()
	if err == nil {
		return nil
	}
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v (%T) is not *Errors", err, err)
	}
	return *errs
}

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	c, err := Parse(testFile, []byte(text))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return c
}

func TestDefaultsMatchSpec(t *testing.T) {
	want := Config{
		Server: Server{
			Listen:            "127.0.0.1:6432",
			PoolMode:          "session",
			MaxClientConn:     10000,
			ShutdownTimeoutMS: 30000,
			TLSMode:           "disable",
			BackendTLSMode:    "disable",

			ClientLoginTimeoutMS:  15000,
			ServerLifetimeMS:      3600000,
			ServerIdleTimeoutMS:   600000,
			MaxPreparedStatements: 200,
		},
		Admin:   Admin{Users: []string{"kinetic_admin"}},
		Metrics: Metrics{Listen: "127.0.0.1:9930"},
		Log:     Log{Level: "info", Format: "json"},
		Rollout: Rollout{Stage: 0, LagSLOWindowMS: 60000, Shared: true},
	}
	if got := Defaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("Defaults() =\n%+v\nwant\n%+v", got, want)
	}
	wantRoute := Route{
		ReadRouting: ReadRouting{ReadRoutingMode: "off", FallbackPolicy: "primary"},
		Freshness: Freshness{
			FreshnessPolicy:         "session_write_lsn_and_max_lag",
			MaxReplicaLagMS:         2500,
			ReadAfterWriteTimeoutMS: 750,
			FlushPrimaryWAL:         true,
			ReadConsistency:         "session",
		},
		HA:   HA{ReplicaHealthIntervalMS: 2000, ReplicaHealthTimeoutMS: 750, FollowFailover: true},
		Pool: Pool{Size: 20, AcquireTimeoutMS: 10000, MaxConcurrentDials: 16},

		AuthQuery:      "SELECT usename, passwd FROM pg_shadow WHERE usename = $1",
		AuthCacheTTLMS: 60000,
	}
	if got := DefaultRoute(); !reflect.DeepEqual(got, wantRoute) {
		t.Errorf("DefaultRoute() =\n%+v\nwant\n%+v", got, wantRoute)
	}
	if got := DefaultReplica(); got != (Endpoint{Weight: 1}) {
		t.Errorf("DefaultReplica() = %+v", got)
	}
	if got := DefaultClass(); got != (QueryClass{Routing: "primary_only"}) {
		t.Errorf("DefaultClass() = %+v", got)
	}
	// Fresh slices every call: a caller's edit cannot leak into the next.
	a := Defaults()
	a.Admin.Users[0] = "changed"
	if Defaults().Admin.Users[0] != "kinetic_admin" {
		t.Error("Defaults shares its slices between calls")
	}
}

func TestDefaultsAppliedToEveryEntry(t *testing.T) {
	c := mustParse(t, doc(
		"[[users]]",
		`name = "app"`,
		`password = "secret"`,
		"[[routes]]",
		`name = "main"`,
		`database = "app"`,
		"[routes.primary]",
		`address = "127.0.0.1:5432"`,
		"[[routes.replicas]]",
		`address = "127.0.0.1:5433"`,
		"[[routes.query_classes]]",
		`name = "catalog_browse"`,
		"[[routes]]",
		`name = "second"`,
		`database = "b"`,
		`primary = { address = "10.0.0.1:5432" }`,
		`replicas = [{ address = "10.0.0.2:5432" }]`,
	))
	wantTop := Defaults()
	c2 := *c
	c2.Users, c2.Routes, c2.Path = nil, nil, ""
	if !reflect.DeepEqual(c2, wantTop) {
		t.Errorf("top-level tables =\n%+v\nwant defaults\n%+v", c2, wantTop)
	}
	if c.Path != testFile {
		t.Errorf("Path = %q", c.Path)
	}
	if len(c.Routes) != 2 {
		t.Fatalf("routes = %d", len(c.Routes))
	}
	for i, r := range c.Routes {
		want := DefaultRoute()
		want.Name, want.Database, want.Primary = r.Name, r.Database, r.Primary
		want.Replicas, want.QueryClasses = r.Replicas, r.QueryClasses
		if !reflect.DeepEqual(r, want) {
			t.Errorf("routes[%d] =\n%+v\nwant defaults\n%+v", i, r, want)
		}
		if r.BackendDB() != r.Database {
			t.Errorf("routes[%d].BackendDB() = %q", i, r.BackendDB())
		}
		if len(r.Replicas) != 1 || r.Replicas[0].Weight != 1 {
			t.Errorf("routes[%d] replicas = %+v, want one of weight 1", i, r.Replicas)
		}
		if r.Primary.Weight != 0 {
			t.Errorf("routes[%d] primary weight = %d", i, r.Primary.Weight)
		}
		if got := r.HA.VerdictTTL(); got != 4750*time.Millisecond {
			t.Errorf("routes[%d] VerdictTTL = %v, want 4.75s", i, got)
		}
	}
	if qc := c.Routes[0].QueryClasses; len(qc) != 1 || qc[0] != (QueryClass{Name: "catalog_browse", Routing: "primary_only"}) {
		t.Errorf("query class = %+v", qc)
	}
	if u, _ := c.UserByName("app"); u.PasswordKind() != PasswordPlaintext {
		t.Errorf("password kind = %q", u.PasswordKind())
	}
}

func TestExplicitZeroIsNotOmitted(t *testing.T) {
	c := mustParse(t, doc(
		"[server]",
		"shutdown_timeout_ms = 0",
		"listen = \"127.0.0.1:0\"",
		"[admin]",
		"users = []",
		"[metrics]",
		`listen = ""`,
		"[[users]]",
		`name = "app"`,
		`password = "secret"`,
		"[[routes]]",
		`name = "zero"`,
		`database = "a"`,
		"primary = { address = \"127.0.0.1:5432\" }",
		"[[routes.replicas]]",
		`address = "127.0.0.1:5433"`,
		"weight = 0",
		"[routes.freshness]",
		`freshness_policy = "session_write_lsn"`,
		"max_replica_lag_ms = 0",
		"read_after_write_timeout_ms = 0",
		"[routes.ha]",
		"verdict_ttl_ms = 0",
		"[routes.pool]",
		"acquire_timeout_ms = 0",
		"[[routes]]",
		`name = "omitted"`,
		`database = "b"`,
		"primary = { address = \"127.0.0.1:5432\" }",
		"[[routes.replicas]]",
		`address = "127.0.0.1:5433"`,
	))
	if c.Server.ShutdownTimeoutMS != 0 || c.Server.ShutdownTimeout() != 0 {
		t.Errorf("shutdown_timeout_ms = %d", c.Server.ShutdownTimeoutMS)
	}
	if c.Admin.Users == nil || len(c.Admin.Users) != 0 {
		t.Errorf("admin.users = %#v, want empty", c.Admin.Users)
	}
	if c.Metrics.Listen != "" {
		t.Errorf("metrics.listen = %q", c.Metrics.Listen)
	}
	z, o := c.Routes[0], c.Routes[1]
	if z.Replicas[0].Weight != 0 || o.Replicas[0].Weight != 1 {
		t.Errorf("weights = %d, %d; want 0, 1", z.Replicas[0].Weight, o.Replicas[0].Weight)
	}
	if z.Freshness.MaxReplicaLagMS != 0 || o.Freshness.MaxReplicaLagMS != 2500 {
		t.Errorf("max_replica_lag_ms = %d, %d", z.Freshness.MaxReplicaLagMS, o.Freshness.MaxReplicaLagMS)
	}
	if z.Freshness.ReadAfterWriteTimeoutMS != 0 || o.Freshness.ReadAfterWriteTimeout() != 750*time.Millisecond {
		t.Errorf("read_after_write_timeout_ms = %d, %v", z.Freshness.ReadAfterWriteTimeoutMS, o.Freshness.ReadAfterWriteTimeout())
	}
	if z.Pool.AcquireTimeoutMS != 0 || o.Pool.AcquireTimeout() != 10*time.Second {
		t.Errorf("acquire_timeout_ms = %d, %v", z.Pool.AcquireTimeoutMS, o.Pool.AcquireTimeout())
	}
}

func TestDurationHelpers(t *testing.T) {
	h := HA{ReplicaHealthIntervalMS: 1000, ReplicaHealthTimeoutMS: 200}
	if h.VerdictTTL() != 2200*time.Millisecond || h.HealthInterval() != time.Second || h.HealthTimeout() != 200*time.Millisecond {
		t.Errorf("HA helpers: ttl %v interval %v timeout %v", h.VerdictTTL(), h.HealthInterval(), h.HealthTimeout())
	}
	h.VerdictTTLMS = 5000
	if h.VerdictTTL() != 5*time.Second {
		t.Errorf("explicit VerdictTTL = %v", h.VerdictTTL())
	}
	f := Freshness{MaxReplicaLagMS: 2500, ReadAfterWriteTimeoutMS: 750, StickyPrimaryWindowMS: 100}
	if f.MaxReplicaLag() != 2500*time.Millisecond || f.ReadAfterWriteTimeout() != 750*time.Millisecond || f.StickyPrimaryWindow() != 100*time.Millisecond {
		t.Error("Freshness helpers")
	}
	if (Rollout{LagSLOWindowMS: 60000}).LagSLOWindow() != time.Minute {
		t.Error("LagSLOWindow")
	}
	if (Server{ShutdownTimeoutMS: 30000}).ShutdownTimeout() != 30*time.Second {
		t.Error("ShutdownTimeout")
	}
}

// want is one expected problem: its line, its key and a fragment of its message.
type want struct {
	line int
	key  string
	msg  string
}

func checkProblems(t *testing.T, err error, wants []want) {
	t.Helper()
	got := problems(t, err)
	ok := len(got) == len(wants)
	for i := 0; ok && i < len(wants); i++ {
		prefix := fmt.Sprintf("%s:%d: %s: ", testFile, wants[i].line, wants[i].key)
		s := got[i].String()
		ok = strings.HasPrefix(s, prefix) && strings.Contains(s[len(prefix):], wants[i].msg)
	}
	if !ok {
		var w strings.Builder
		for _, x := range wants {
			fmt.Fprintf(&w, "%s:%d: %s: ...%s...\n", testFile, x.line, x.key, x.msg)
		}
		t.Errorf("problems:\n%v\nwant:\n%s", err, w.String())
	}
}

func TestProblems(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []want
	}{
		// Syntax.
		{"syntax error line", withTail(tail, "[server]", `listen = "127.0.0.1:6432"`, "pool_mode = "),
			[]want{{3, "server.pool_mode", "invalid TOML"}}},
		{"syntax error in second array entry", doc(
			"[[routes]]", `name = "a"`, "[[routes]]", "name = ",
		), []want{{4, "routes[1].name", "invalid TOML"}}},
		{"syntax error unterminated header", doc("[server", `listen = "x"`),
			[]want{{2, "toml", "invalid TOML"}}}, // the parser's line: it reads the newline first
		{"duplicate key is a syntax error", withTail(tail, "[server]", `listen = "127.0.0.1:1"`, `listen = "127.0.0.1:2"`),
			[]want{{3, "server.listen", "already been defined"}}},
		{"syntax error after multiline string", doc(
			"[[users]]", `name = "app"`, `password = """a`, `b # not a comment`, `"""`, "backend_user = [1,", "  2", "]", "x = ?",
		), []want{{9, "users[0].x", "invalid TOML"}}},

		// Unknown keys.
		{"unknown top-level key", withTail(tail, "bogus = 1"),
			[]want{{1, "bogus", "unknown key"}}},
		{"unknown top-level table", withTail(tail, "[serverx]", "listen = 1"),
			[]want{{1, "serverx", `did you mean "server"`}}},
		{"unknown nested key", withTail(tail, "[server]", `listen = "127.0.0.1:6432"`, "listn = 3"),
			[]want{{3, "server.listn", `did you mean "listen"`}}},
		{"unknown key inside array table", doc(
			"[[users]]", `name = "app"`, `password = "secret"`,
			"[[users]]", `name = "two"`, `pasword = "secret"`, `password = "x"`,
			"[[routes]]", `name = "main"`, `database = "app"`, "[routes.primary]", `address = "h:1"`,
			"[[routes]]", `name = "b"`, `database = "b"`, "[routes.primary]", `address = "h:1"`,
			"[routes.freshness]", "max_lag = 3", "[[routes.replicas]]", `address = "h:2"`, "colour = 1",
		), []want{
			{6, "users[1].pasword", `did you mean "password"`},
			{19, "routes[1].freshness.max_lag", "unknown key"},
			{22, "routes[1].replicas[0].colour", "unknown key"},
		}},
		{"misplaced key names its table", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, "[routes.primary]", `address = "h:1"`,
			"[routes.read_routing]", "max_replica_lag_ms = 3", "read_read_routing_mode = \"off\"",
		), []want{
			{7, "routes[0].read_routing.max_replica_lag_ms", `belongs in [routes.freshness]`},
			{8, "routes[0].read_routing.read_read_routing_mode", "unknown key"},
		}},
		{"weight on the primary", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, "[routes.primary]", `address = "h:1"`, "weight = 2",
		), []want{{6, "routes[0].primary.weight", "replicas"}}},
		{"unknown key in inline table", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1", port = 5 }`,
		), []want{{4, "routes[0].primary.port", "unknown key"}}},

		// Wrong types.
		{"wrong types", withTail(tail,
			"[server]", `max_client_conn = "100"`, "listen = 6432", "pool_mode = true",
			"[log]", "level = 1.5",
			"[admin]", `users = "kinetic_admin"`,
			"[rollout]", `auto_rollback = "yes"`, "stage = 1979-05-27",
		), []want{
			{2, "server.max_client_conn", `must be an integer (got string "100")`},
			{3, "server.listen", "must be a string (got integer 6432)"},
			{4, "server.pool_mode", "must be a string (got boolean true)"},
			{6, "log.level", "must be a string (got float 1.5)"},
			{8, "admin.users", "must be an array of strings"},
			{10, "rollout.auto_rollback", "must be a boolean"},
			{11, "rollout.stage", "must be an integer (got datetime)"},
		}},
		{"wrong element type on its own line", withTail(tail, "[admin]", "users = [", `  "app",`, "  7,", "]"),
			[]want{{4, "admin.users[1]", "must be a string (got integer 7)"}}},
		{"table instead of array of tables", withTail(usersTail, "[routes]", `name = "main"`),
			[]want{{1, "routes", "must be an array of tables, written [[routes]]"}}},
		{"array of tables instead of table", withTail(tail, "[[server]]", `listen = "127.0.0.1:1"`),
			[]want{{1, "server", "must be a table (got array of tables)"}}},
		{"scalar instead of table", withTail(tail, "metrics = 1"),
			[]want{{1, "metrics", "must be a table (got integer 1)"}}},

		// [server], [metrics], [log].
		{"listen not host:port", withTail(tail, "[server]", `listen = "127.0.0.1"`, "[metrics]", `listen = "localhost:http"`),
			[]want{
				{2, "server.listen", `"127.0.0.1" is not host:port (missing port in address)`},
				{4, "metrics.listen", `port "http" of "localhost:http" is not a number from 0 to 65535`},
			}},
		{"listen empty", withTail(tail, "[server]", `listen = ""`),
			[]want{{2, "server.listen", "required"}}},
		{"enums", withTail(tail,
			"[server]", `pool_mode = "statement"`, `tls_mode = "prefer"`, `backend_tls_mode = "allow"`,
			"[log]", `level = "trace"`, `format = "text"`,
		), []want{
			{2, "server.pool_mode", `unknown value "statement"; want one of "session", "transaction"`},
			{3, "server.tls_mode", `unknown value "prefer"; want one of "disable", "allow", "require", "verify-ca", "verify-full"`},
			{4, "server.backend_tls_mode", `unknown value "allow"; want one of "disable", "prefer", "require"`},
			{6, "log.level", `want one of "debug", "info", "warn", "error"`},
			{7, "log.format", `want one of "json", "console"`},
		}},
		{"numbers out of range", withTail(tail,
			"[server]", "max_client_conn = 0", "shutdown_timeout_ms = -1",
			"[rollout]", "stage = -1", "lag_slo_window_ms = 0",
		), []want{
			{2, "server.max_client_conn", "must be at least 1 (got 0)"},
			{3, "server.shutdown_timeout_ms", "must be at least 0 (got -1)"},
			{5, "rollout.stage", "must be at least 0"},
			{6, "rollout.lag_slo_window_ms", "must be at least 1 (got 0)"},
		}},
		{"number too large", withTail(tail, "[server]", "shutdown_timeout_ms = 9999999999"),
			[]want{{2, "server.shutdown_timeout_ms", "must be at most 2147483647"}}},
		{"tls files required unless disabled", withTail(tail, "[server]", `tls_mode = "require"`),
			[]want{
				{1, "server.tls_cert_file", `required when tls_mode is "require"`},
				{1, "server.tls_key_file", `required when tls_mode is "require"`},
			}},
		{"tls files not checked when disabled", withTail(tail, "[server]", `tls_cert_file = "/nonexistent.crt"`), nil},

		// [admin].
		{"explicit admin users must be users", withTail(tail, "[admin]", `users = ["kinetic_admin", "app", "app", ""]`),
			[]want{
				{2, "admin.users[0]", `"kinetic_admin" is not a [[users]] name`},
				{2, "admin.users[2]", `"app" is listed twice`},
				{2, "admin.users[3]", "empty user name"},
			}},

		// Whole document.
		{"empty document", "",
			[]want{
				{1, "users", "at least one [[users]] entry is required"},
				{1, "routes", "at least one [[routes]] entry is required"},
			}},
		{"empty arrays", doc("# nothing", "users = []", "routes = []"),
			[]want{{2, "users", "at least one"}, {3, "routes", "at least one"}}},

		// [[users]].
		{"user name and password required", withTail(routesTail, "[[users]]", "[[users]]", `name = ""`, `password = ""`),
			[]want{
				{1, "users[0].name", "required"},
				{1, "users[0].password", "required"},
				{3, "users[1].name", "required"},
				{4, "users[1].password", "required"},
			}},
		{"duplicate user names", withTail(routesTail,
			"[[users]]", `name = "app"`, `password = "a"`, "[[users]]", `name = "app"`, `password = "b"`,
		), []want{{5, "users[1].name", `duplicate user name "app" (first at users[0].name, line 2)`}}},
		// A verifier or an md5 hash needs no backend_password (SCRAM
		// pass-through, the hash answering md5), except a hash towards
		// another backend_user: it is md5(password || name).
		{"hashes and backend passwords", withTail(routesTail,
			"[[users]]", `name = "a"`, `password = "md5`+strings.Repeat("ab", 16)+`"`,
			"[[users]]", `name = "b"`, `password = "`+scramVerifier("pw")+`"`, `backend_user = "other"`,
			"[[users]]", `name = "c"`, `password = "x"`, `backend_password = "md5`+strings.Repeat("0", 32)+`"`,
			"[[users]]", `name = "d"`, `password = "md5`+strings.Repeat("ab", 16)+`"`, `backend_user = "other"`,
			"[[users]]", `name = "e"`, `password = "md5`+strings.Repeat("ab", 16)+`"`, `backend_user = "e"`,
		), []want{
			{11, "users[2].backend_password", "must be the plaintext password, not an MD5 hash"},
			{12, "users[3].backend_password", `required when password is an MD5 hash and backend_user is not the user's name: the hash logs in only as "d"`},
		}},
		{"malformed SCRAM verifiers", withTail(routesTail,
			"[[users]]", `name = "a"`, `password = "SCRAM-SHA-256$4096:c2FsdA=="`, `backend_password = "p"`,
			"[[users]]", `name = "b"`, `password = "SCRAM-SHA-256$0:c2FsdA==$`+b64(32)+":"+b64(32)+`"`, `backend_password = "p"`,
			"[[users]]", `name = "c"`, `password = "SCRAM-SHA-256$4096:c2FsdA==$`+b64(31)+":"+b64(32)+`"`, `backend_password = "p"`,
			"[[users]]", `name = "d"`, `password = "SCRAM-SHA-256$4096:!!!$`+b64(32)+":"+b64(32)+`"`, `backend_password = "p"`,
		), []want{
			{3, "users[0].password", "malformed SCRAM-SHA-256 verifier: want SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"},
			{7, "users[1].password", "iteration count"},
			{11, "users[2].password", "StoredKey is not 32 bytes"},
			{15, "users[3].password", "salt is not"},
		}},

		// [[routes]] identity.
		{"route name, database and primary required", withTail(usersTail, "[[routes]]", "[[routes]]", `name = ""`, `database = "x"`, "[routes.primary]"),
			[]want{
				{1, "routes[0].name", "required"},
				{1, "routes[0].database", "required"},
				{1, "routes[0].primary.address", "required"},
				{3, "routes[1].name", "required"},
				{5, "routes[1].primary.address", "required"},
			}},
		{"duplicate route names and databases, reserved database", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1" }`,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1" }`,
			"[[routes]]", `name = "admin"`, `database = "pgkinetic"`, `primary = { address = "h:1" }`,
		), []want{
			{6, "routes[1].name", `duplicate route name "main" (first at routes[0].name, line 2)`},
			{7, "routes[1].database", `duplicate route database "app" (first at routes[0].database, line 3)`},
			{11, "routes[2].database", `"pgkinetic" is reserved for the admin console`},
		}},

		// Servers.
		{"server addresses", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`,
			"[routes.primary]", `address = "localhost:5432"`,
			"[[routes.replicas]]", `address = "127.0.0.1:5432"`,
			"[[routes.replicas]]", `address = "db2:5433"`, "weight = -1",
			"[[routes.replicas]]", `address = "DB2.:5433"`,
			"[[routes.replicas]]", `address = ":5433"`,
			"[[routes.replicas]]", `address = "db3:70000"`,
			"[[routes.replicas]]",
		), []want{
			{7, "routes[0].replicas[0].address", `"127.0.0.1:5432" is the primary's address`},
			{10, "routes[0].replicas[1].weight", "must be at least 0 (got -1)"},
			{12, "routes[0].replicas[2].address", `duplicate replica "DB2.:5433" (first at routes[0].replicas[1].address, line 9)`},
			{14, "routes[0].replicas[3].address", `":5433" has no host`},
			{16, "routes[0].replicas[4].address", `port "70000" of "db3:70000" is not a number from 1 to 65535`},
			{17, "routes[0].replicas[5].address", "required"},
		}},
		{"ipv6 primary and replica equal", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`,
			`primary = { address = "[::1]:5432" }`,
			`replicas = [`, `  { address = "[0:0::1]:5432" },`, `]`,
		), []want{{6, "routes[0].replicas[0].address", "is the primary's address"}}},

		// [routes.read_routing].
		{"read routing", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1" }`,
			"[routes.read_routing]",
			`read_routing_mode = "always"`,
			`fallback_policy = "retry"`,
			`default_query_class = "nightly"`,
			`write_functions = ["bump", ""]`,
			`read_only_functions = ["bump"]`,
		), []want{
			{6, "routes[0].read_routing.read_routing_mode", `unknown value "always"; want one of "off", "prefer_replica", "require_replica"`},
			{7, "routes[0].read_routing.fallback_policy", `unknown value "retry"; want one of "primary", "wait", "reject"`},
			{8, "routes[0].read_routing.default_query_class", `"nightly" is neither`},
			{9, "routes[0].read_routing.write_functions[1]", "empty function name"},
			{10, "routes[0].read_routing.read_only_functions[0]", `"bump" is also in write_functions`},
		}},
		{"require_replica without replicas", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1" }`,
			"[routes.read_routing]", `read_routing_mode = "require_replica"`,
		), []want{{6, "routes[0].read_routing.read_routing_mode", "needs at least one [[routes.replicas]]"}}},
		{"default query class: defined or shared", withTail(usersTail,
			"[[routes]]", `name = "a"`, `database = "a"`, `primary = { address = "h:1" }`,
			"read_routing.default_query_class = \"nightly\"",
			"[[routes.query_classes]]", `name = "nightly"`,
			"[[routes]]", `name = "b"`, `database = "b"`, `primary = { address = "h:1" }`,
			"read_routing.default_query_class = \"reporting_aggregate\"",
		), nil},

		// [routes.freshness].
		{"freshness", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1" }`,
			"[routes.freshness]",
			`freshness_policy = "eventual"`,
			"max_replica_lag_bytes = -1",
			"read_after_write_timeout_ms = -1",
			"sticky_primary_window_ms = -5",
			"max_primary_fallback_inflight = -1",
			"[[routes]]", `name = "b"`, `database = "b"`, `primary = { address = "h:1" }`,
			"[routes.freshness]",
			`freshness_policy = "max_lag"`,
			"max_replica_lag_ms = 0",
		), []want{
			{6, "routes[0].freshness.freshness_policy", `want one of "none", "max_lag", "session_write_lsn", "session_write_lsn_and_max_lag"`},
			{7, "routes[0].freshness.max_replica_lag_bytes", "must be at least 0"},
			{8, "routes[0].freshness.read_after_write_timeout_ms", "must be at least 0"},
			{9, "routes[0].freshness.sticky_primary_window_ms", "must be at least 0 (got -5)"},
			{10, "routes[0].freshness.max_primary_fallback_inflight", "must be at least 0"},
			{17, "routes[1].freshness.max_replica_lag_ms", `must be at least 1 when freshness_policy is "max_lag"`},
		}},

		// [routes.ha] and [routes.pool].
		{"ha and pool", withTail(usersTail,
			"[[routes]]", `name = "a"`, `database = "a"`, `primary = { address = "h:1" }`,
			"[routes.ha]", "replica_health_interval_ms = 0", "replica_health_timeout_ms = 0", "verdict_ttl_ms = -1",
			"[routes.pool]", "size = 0", "acquire_timeout_ms = -1",
			"[[routes]]", `name = "b"`, `database = "b"`, `primary = { address = "h:1" }`,
			"ha = { replica_health_interval_ms = 1000, replica_health_timeout_ms = 1500 }",
			"[[routes]]", `name = "c"`, `database = "c"`, `primary = { address = "h:1" }`,
			"[routes.ha]", "verdict_ttl_ms = 2749",
		), []want{
			{6, "routes[0].ha.replica_health_interval_ms", "must be at least 1 (got 0)"},
			{7, "routes[0].ha.replica_health_timeout_ms", "must be at least 1 (got 0)"},
			{8, "routes[0].ha.verdict_ttl_ms", "must be at least 0"},
			{10, "routes[0].pool.size", "must be at least 1 (got 0)"},
			{11, "routes[0].pool.acquire_timeout_ms", "must be at least 0"},
			{16, "routes[1].ha.replica_health_timeout_ms", "must not exceed replica_health_interval_ms (1000)"},
			{22, "routes[2].ha.verdict_ttl_ms", "must be 0 or at least replica_health_interval_ms + replica_health_timeout_ms (2750)"},
		}},

		// Timeouts and limits (issue 16).
		{"timeouts and limits", withTail(usersTail,
			"[server]", "client_login_timeout_ms = -1", "query_timeout_ms = -2", "idle_transaction_timeout_ms = -3",
			"client_idle_timeout_ms = -4", "server_lifetime_ms = 9999999999", "server_idle_timeout_ms = -6",
			"[[routes]]", `name = "a"`, `database = "a"`, `primary = { address = "h:1" }`,
			"[routes.pool]", "max_db_connections = -1", "max_user_connections = -1", "max_concurrent_dials = 0",
			"[[routes]]", `name = "b"`, `database = "b"`, `primary = { address = "h:1" }`,
			"pool = { max_db_connections = 5, max_user_connections = 6 }",
		), []want{
			{2, "server.client_login_timeout_ms", "must be at least 0 (got -1)"},
			{3, "server.query_timeout_ms", "must be at least 0 (got -2)"},
			{4, "server.idle_transaction_timeout_ms", "must be at least 0 (got -3)"},
			{5, "server.client_idle_timeout_ms", "must be at least 0 (got -4)"},
			{6, "server.server_lifetime_ms", "must be at most 2147483647"},
			{7, "server.server_idle_timeout_ms", "must be at least 0 (got -6)"},
			{13, "routes[0].pool.max_db_connections", "must be at least 0 (got -1)"},
			{14, "routes[0].pool.max_user_connections", "must be at least 0 (got -1)"},
			{15, "routes[0].pool.max_concurrent_dials", "must be at least 1 (got 0)"},
			{20, "routes[1].pool.max_user_connections", "must not exceed max_db_connections (5)"},
		}},

		// [[routes.query_classes]].
		{"query classes", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1" }`,
			"[[routes.query_classes]]", `name = "billing_balance"`, `routing = "replica_if_lag_ok"`,
			"[[routes.query_classes]]", `name = "session_state"`, `routing = "replica_tolerates_staleness"`,
			"[[routes.query_classes]]", `name = "catalog_browse"`, `routing = "replica"`, "stage = -1", `fallback_policy = "later"`,
			"[[routes.query_classes]]", `name = "catalog_browse"`,
			"[[routes.query_classes]]", `name = "default"`,
			"[[routes.query_classes]]", `name = "two words"`,
			"[[routes.query_classes]]", "stage = 2",
		), []want{
			{7, "routes[0].query_classes[0].routing", `billing_balance is always primary_only (got "replica_if_lag_ok")`},
			{10, "routes[0].query_classes[1].routing", "session_state is always primary_only"},
			{13, "routes[0].query_classes[2].routing", `unknown value "replica"; want one of "primary_only", "replica_if_lag_ok", "replica_tolerates_staleness"`},
			{14, "routes[0].query_classes[2].stage", "must be at least 0"},
			{15, "routes[0].query_classes[2].fallback_policy", `want one of "", "primary", "wait", "reject"`},
			{17, "routes[0].query_classes[3].name", `duplicate query class "catalog_browse" (first at routes[0].query_classes[2].name, line 12)`},
			{19, "routes[0].query_classes[4].name", `"default" is reserved`},
			{21, "routes[0].query_classes[5].name", "letters, digits"},
			{22, "routes[0].query_classes[6].name", "required"},
		}},
		{"always-primary classes may say so", withTail(usersTail,
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h:1" }`,
			"[[routes.query_classes]]", `name = "billing_balance"`, `routing = "primary_only"`,
			"[[routes.query_classes]]", `name = "session_state"`,
			"[[routes.query_classes]]", `name = "catalog_browse"`, `routing = "replica_tolerates_staleness"`, "stage = 0", `fallback_policy = ""`,
		), nil},

		// [rollout].
		{"state file directory must exist", withTail(tail, "[rollout]", `state_file = "/nonexistent-dir/kinetic.state"`),
			[]want{{2, "rollout.state_file", `directory "/nonexistent-dir" of "/nonexistent-dir/kinetic.state" does not exist`}}},

		// Several kinds at once, in line order.
		{"multiple problems in line order", doc(
			"[[routes]]", `name = "main"`, `database = "app"`, `primary = { address = "h" }`,
			"[server]", `pool_mode = "x"`, "unknown = 1",
		), []want{
			{1, "users", "at least one"},
			{4, "routes[0].primary.address", "not host:port"},
			{6, "server.pool_mode", "unknown value"},
			{7, "server.unknown", "unknown key"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(testFile, []byte(tt.text))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("unexpected problems:\n%v", err)
				}
				return
			}
			if c != nil {
				t.Errorf("Parse returned a config with its error")
			}
			checkProblems(t, err, tt.want)
		})
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := Parse("/etc/kineticd.toml", []byte(withTail(tail, "[server]", "max_client_conn = 0", "nope = 1")))
	want := "/etc/kineticd.toml:2: server.max_client_conn: must be at least 1 (got 0)\n" +
		"/etc/kineticd.toml:3: server.nope: unknown key"
	if err == nil || err.Error() != want {
		t.Errorf("Error() =\n%v\nwant\n%s", err, want)
	}
	_, err = Load(filepath.Join(t.TempDir(), "missing.toml"))
	if ps := problems(t, err); len(ps) != 1 || !strings.Contains(err.Error(), "missing.toml: cannot read config: ") {
		t.Errorf("missing file: %v", err)
	}
}

func TestValidSCRAMVerifier(t *testing.T) {
	v := scramVerifier("secret")
	c := mustParse(t, withTail(routesTail, "[[users]]", `name = "app"`, `password = "`+v+`"`, `backend_password = "secret"`))
	u := c.Users[0]
	if u.PasswordKind() != PasswordSCRAMSHA256 {
		t.Errorf("kind = %q", u.PasswordKind())
	}
	if name, pw := u.Backend(); name != "app" || pw != "secret" {
		t.Errorf("Backend() = %q, %q", name, pw)
	}
	sv, err := ParseSCRAMVerifier(v)
	if err != nil || sv.Iterations != 4096 || len(sv.Salt) != 16 || len(sv.StoredKey) != 32 || len(sv.ServerKey) != 32 {
		t.Errorf("ParseSCRAMVerifier = %+v, %v", sv, err)
	}
}

func TestPasswordKind(t *testing.T) {
	for pw, kind := range map[string]string{
		"secret":                         PasswordPlaintext,
		"md5":                            PasswordPlaintext,
		"md5" + strings.Repeat("g", 32):  PasswordPlaintext,
		"md5" + strings.Repeat("A", 32):  PasswordMD5,
		"md5" + strings.Repeat("a1", 16): PasswordMD5,
		"SCRAM-SHA-256$garbage":          PasswordSCRAMSHA256,
		"scram-sha-256$4096:x$y:z":       PasswordPlaintext,
		"md5" + strings.Repeat("a", 33):  PasswordPlaintext,
		"SCRAM-SHA-256":                  PasswordPlaintext,
	} {
		if got := PasswordKind(pw); got != kind {
			t.Errorf("PasswordKind(%q) = %q, want %q", pw, got, kind)
		}
	}
}

func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir, "server")
	writeKeyPair(t, dir, "other")
	if err := os.WriteFile(filepath.Join(dir, "garbage.pem"), []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "kineticd.toml")
	tests := []struct {
		name       string
		cert, key  string
		wantKey    string
		wantSubstr string
	}{
		{"valid pair, absolute", filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), "", ""},
		{"valid pair, relative to the config file", "server.crt", "server.key", "", ""},
		{"missing cert", "absent.crt", "server.key", "server.tls_cert_file", `file "absent.crt" not found (resolved to ` + filepath.Join(dir, "absent.crt") + ")"},
		{"missing key", filepath.Join(dir, "server.crt"), "/nonexistent/k.key", "server.tls_key_file", `file "/nonexistent/k.key" not found`},
		{"directory", dir, "server.key", "server.tls_cert_file", "is a directory"},
		{"mismatched pair", "server.crt", "other.key", "server.tls_cert_file", "do not load as a key pair"},
		{"not PEM", "garbage.pem", "server.key", "server.tls_cert_file", "do not load as a key pair"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := withTail(tail, "[server]", `tls_mode = "allow"`,
				fmt.Sprintf("tls_cert_file = %q", tt.cert), fmt.Sprintf("tls_key_file = %q", tt.key))
			c, err := Parse(cfgPath, []byte(text))
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("unexpected problems:\n%v", err)
				}
				if c.Server.TLSCertFile != filepath.Join(dir, "server.crt") || c.Server.TLSKeyFile != filepath.Join(dir, "server.key") {
					t.Errorf("files not resolved: %q %q", c.Server.TLSCertFile, c.Server.TLSKeyFile)
				}
				return
			}
			ps := problems(t, err)
			line := map[string]int{"server.tls_cert_file": 3, "server.tls_key_file": 4}[tt.wantKey]
			prefix := fmt.Sprintf("%s:%d: %s: ", cfgPath, line, tt.wantKey)
			if len(ps) != 1 || !strings.HasPrefix(ps[0].String(), prefix) || !strings.Contains(ps[0].Msg, tt.wantSubstr) {
				t.Errorf("problems:\n%v\nwant one: %s...%s", err, prefix, tt.wantSubstr)
			}
		})
	}
}

func TestStateFileResolved(t *testing.T) {
	dir := t.TempDir()
	c, err := Parse(filepath.Join(dir, "k.toml"), []byte(withTail(tail, "[rollout]", `state_file = "kinetic.state"`)))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "kinetic.state"); c.Rollout.StateFile != want {
		t.Errorf("state_file = %q, want %q", c.Rollout.StateFile, want)
	}
}

func TestReusePort(t *testing.T) {
	if c := mustParse(t, withTail(tail, "[server]", "listen = \"127.0.0.1:0\"")); c.Server.ReusePort {
		t.Error("reuse_port is true when omitted, want false")
	}
	if c := mustParse(t, withTail(tail, "[server]", "reuse_port = true")); !c.Server.ReusePort {
		t.Error("reuse_port = true parsed as false")
	}
	_, err := Parse(testFile, []byte(withTail(tail, "[server]", "reuse_port = 1")))
	ps := problems(t, err)
	if len(ps) != 1 || ps[0].Line != 2 || ps[0].Key != "server.reuse_port" || !strings.Contains(ps[0].Msg, "must be a boolean") {
		t.Errorf("reuse_port = 1: problems %v, want one at line 2: server.reuse_port: must be a boolean", ps)
	}
}

func TestExampleConfig(t *testing.T) {
	const example = "../deploy/kineticd.example.toml"
	c, err := Load(example)
	if err != nil {
		t.Fatalf("the example config has problems:\n%v", err)
	}
	if c.Server.TLSMode != TLSDisable {
		t.Errorf("the example must not need TLS files")
	}
	if r, ok := c.RouteByDatabase("app"); !ok || r.Primary.Address != "127.0.0.1:5432" || len(r.Replicas) != 1 || r.Replicas[0].Address != "127.0.0.1:5433" {
		t.Errorf("example route = %+v", r)
	}
	if _, ok := c.UserByName("app"); !ok {
		t.Error("example has no user app")
	}

	// Every key of the schema appears in the example.
	var m map[string]any
	md, err := toml.DecodeFile(example, &m)
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, k := range md.Keys() {
		present[k.String()] = true
	}
	for _, k := range schemaKeys() {
		if !present[k] {
			t.Errorf("the example does not set %s", k)
		}
	}
}

func TestReferenceDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range schemaKeys() {
		leaf := k[strings.LastIndexByte(k, '.')+1:]
		if !strings.Contains(string(data), "`"+leaf+"`") {
			t.Errorf("docs/configuration.md does not document %s", k)
		}
	}
}

// schemaKeys lists every leaf key of the schema as a plain dotted path.
func schemaKeys() []string {
	var out []string
	for key, tables := range knownTables() {
		for _, tb := range tables {
			if tb.plain == "" {
				out = append(out, key)
			} else {
				out = append(out, tb.plain+"."+key)
			}
		}
	}
	return out
}

func TestLineIndex(t *testing.T) {
	src := doc(
		`# comment with key = "x" and [table]`, // 1
		`title = "a # not a comment"`,          // 2
		`multi = """`,                          // 3
		`[not.a.table]`,                        // 4
		`x = 1"""`,                             // 5
		`lit = '''`,                            // 6
		`'''`,                                  // 7
		`arr = [`,                              // 8
		`  "one", # c`,                         // 9
		`  [1, 2],`,                            // 10
		`  {a = 1,`,                            // 11
		`   b.c = 2}`,                          // 12
		`]`,                                    // 13
		`[a."quoted key".b]`,                   // 14
		`d.e = 1`,                              // 15
		`[[t]]`,                                // 16
		`[t.sub]`,                              // 17
		`[[t.list]]`,                           // 18
		`[[t]]`,                                // 19
		`  [[t.list]]  # indented`,             // 20
		`  y = "z"`,                            // 21
		`[[t.list]]`,                           // 22
	)
	if _, err := toml.Decode(src, new(map[string]any)); err != nil {
		t.Fatalf("test document is not TOML: %v", err)
	}
	idx := indexLines([]byte(src))
	for key, line := range map[string]int{
		"title":                2,
		"multi":                3,
		"lit":                  6,
		"arr":                  8,
		"arr[0]":               9,
		"arr[1]":               10,
		"arr[1][1]":            10,
		"arr[2]":               11,
		"arr[2].b.c":           12,
		`a."quoted key".b`:     14,
		`a."quoted key".b.d.e`: 15,
		"t":                    16,
		"t[0]":                 16,
		"t[0].sub":             17,
		"t[0].list[0]":         18,
		"t[1]":                 19,
		"t[1].list[0]":         20,
		"t[1].list[0].y":       21,
		"t[1].list[1]":         22,
		"not":                  0,
	} {
		got, ok := idx.lines[key]
		if line == 0 {
			if ok {
				t.Errorf("%s indexed at line %d; it is inside a string", key, got)
			}
			continue
		}
		if got != line {
			t.Errorf("line of %s = %d, want %d\nindex:\n%s", key, got, line, idx)
		}
	}
	// A key the document lacks falls back to its table.
	if got := idx.lineOf(path{"t[1]", "list[1]", "missing"}); got != 22 {
		t.Errorf("lineOf missing key = %d, want 22", got)
	}
	if got := idx.lineOf(path{"nowhere"}); got != 1 {
		t.Errorf("lineOf unknown = %d, want 1", got)
	}
}

func TestHolderReload(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "kineticd.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	valid := func(listen string) string {
		return withTail(tail, "[server]", fmt.Sprintf("listen = %q", listen))
	}
	write(valid("127.0.0.1:6432"))
	first, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHolder(first)

	// Readers run throughout; under -race they check the swaps publish
	// whole, consistent configs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := h.Load()
				if c == nil || len(c.Routes) != 1 || c.Routes[0].Pool.Size != 20 ||
					(c.Server.Listen != "127.0.0.1:6432" && c.Server.Listen != "127.0.0.1:7432") {
					t.Errorf("reader saw %+v", c)
					return
				}
			}
		})
	}

	write(valid("127.0.0.1:6432") + "[log]\nlevel = \"loud\"\n")
	c, err := h.Reload()
	if c != nil || err == nil {
		t.Fatalf("Reload of an invalid file = %v, %v", c, err)
	}
	checkReloadProblem(t, err, p+":12: log.level: unknown value")
	if h.Load() != first {
		t.Error("an invalid reload replaced the running config")
	}

	write("[server\n")
	if _, err := h.Reload(); err == nil || !strings.HasPrefix(err.Error(), p+":2: toml: invalid TOML") {
		t.Errorf("Reload of a syntax error: %v", err)
	}
	if h.Load() != first {
		t.Error("a syntax error replaced the running config")
	}

	for i := range 20 {
		listen := "127.0.0.1:6432"
		if i%2 == 0 {
			listen = "127.0.0.1:7432"
		}
		write(valid(listen))
		c, err := h.Reload()
		if err != nil {
			t.Fatal(err)
		}
		if h.Load() != c || c.Server.Listen != listen || c.Path != p {
			t.Fatalf("after Reload, Load() = %+v, want the new config", h.Load())
		}
	}
	close(stop)
	wg.Wait()

	if _, err := NewHolder(&Config{}).Reload(); err == nil {
		t.Error("Reload of a config without a Path succeeded")
	}
}

func checkReloadProblem(t *testing.T, err error, prefix string) {
	t.Helper()
	ps := problems(t, err)
	if len(ps) != 1 || !strings.HasPrefix(ps[0].String(), prefix) {
		t.Errorf("problems:\n%v\nwant one starting %q", err, prefix)
	}
}

// FuzzParse checks that no input makes Parse or the line scanner panic or
// hang, and that every problem is well formed.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../deploy/kineticd.example.toml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(withTail(tail, "[server]", "pool_mode = ")))
	f.Add([]byte(`a = """x` + "\n" + `[[b]]`))
	f.Add([]byte("x = [{a = 'b', c = [1, {d = 2}]}]\n[[x]]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		indexLines(data)
		c, err := Parse(testFile, data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v", c, err)
		}
		if err != nil {
			for _, p := range problems(t, err) {
				if p.Line < 1 || p.Key == "" || p.Msg == "" {
					t.Fatalf("malformed problem %+v", p)
				}
			}
		}
	})
}

// scramVerifier computes a real SCRAM-SHA-256 verifier for password, as
// PostgreSQL stores it.
func scramVerifier(password string) string {
	salt := []byte("0123456789abcdef")
	salted, err := pbkdf2.Key(sha256.New, password, salt, 4096, 32)
	if err != nil {
		panic(err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	serverKey := mac(salted, "Server Key")
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$4096:%s$%s:%s", enc(salt), enc(stored[:]), enc(serverKey))
}

func b64(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

// writeKeyPair writes a self-signed ECDSA certificate and its key to
// dir/name.crt and dir/name.key.
func writeKeyPair(t *testing.T, dir, name string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kineticd test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		name + ".crt": {Type: "CERTIFICATE", Bytes: der},
		name + ".key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
