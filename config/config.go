package config

import "time"

// Enumerated words accepted by the configuration. They are the words of SPEC §2
// exactly; validation rejects anything else.
const (
	PoolModeSession     = "session"
	PoolModeTransaction = "transaction"

	TLSDisable = "disable"
	TLSAllow   = "allow"
	TLSRequire = "require"
	TLSPrefer  = "prefer" // backend_tls_mode only
	// TLSVerifyCA and TLSVerifyFull (tls_mode only) require TLS and a
	// client certificate signed by tls_ca_file; verify-full also requires
	// the certificate's CN to name the user logging in (User.CertCN).
	TLSVerifyCA   = "verify-ca"
	TLSVerifyFull = "verify-full"

	// Ways a [[users]] entry authenticates clients (User.Auth).
	AuthPassword = "password"
	AuthCert     = "cert"

	RoutingOff            = "off"
	RoutingPreferReplica  = "prefer_replica"
	RoutingRequireReplica = "require_replica"

	FallbackPrimary = "primary"
	FallbackWait    = "wait"
	FallbackReject  = "reject"

	FreshnessNone                  = "none"
	FreshnessMaxLag                = "max_lag"
	FreshnessSessionWriteLSN       = "session_write_lsn"
	FreshnessSessionWriteLSNAndMax = "session_write_lsn_and_max_lag"

	ConsistencySession = "session"
	ConsistencyStrict  = "strict"

	ClassPrimaryOnly               = "primary_only"
	ClassReplicaIfLagOK            = "replica_if_lag_ok"
	ClassReplicaToleratesStaleness = "replica_tolerates_staleness"
)

// Config is one validated, immutable configuration. Nothing mutates a *Config
// after Load returns it; a reload builds a new one and swaps it in a Holder.
type Config struct {
	Server  Server  `toml:"server"`
	Admin   Admin   `toml:"admin"`
	Metrics Metrics `toml:"metrics"`
	Log     Log     `toml:"log"`
	Users   []User  `toml:"users"`
	Routes  []Route `toml:"routes"`
	Rollout Rollout `toml:"rollout"`

	// UsersFile names a second TOML file that holds only [[users]]
	// entries, added to this file's (relative to this file's directory).
	// It lets the users' secrets live apart from the rest, e.g. in a
	// Kubernetes Secret next to a ConfigMap. Read again on every reload.
	UsersFile string `toml:"users_file"`

	// Path is the file the config was loaded from ("" when built in code).
	Path string `toml:"-"`
}

// Server is the [server] table: the client-facing listener.
type Server struct {
	// Listen is the host:port clients connect to (port 0 picks a free port).
	Listen string `toml:"listen"`
	// PoolMode is PoolModeSession or PoolModeTransaction.
	PoolMode string `toml:"pool_mode"`
	// MaxClientConn is the most client connections served at once (>= 1).
	MaxClientConn int `toml:"max_client_conn"`
	// ShutdownTimeoutMS bounds how long SIGTERM waits for in-flight
	// transactions (>= 0; 0 closes at once).
	ShutdownTimeoutMS int `toml:"shutdown_timeout_ms"`
	// ReusePort sets SO_REUSEPORT on the client and metrics listeners, so a
	// new kineticd can listen on the same addresses while the old one
	// drains (docs/operations.md, "Zero-downtime restart").
	ReusePort bool `toml:"reuse_port"`
	// TLSMode is TLSDisable, TLSAllow, TLSRequire, TLSVerifyCA or
	// TLSVerifyFull (client side).
	TLSMode string `toml:"tls_mode"`
	// TLSCertFile and TLSKeyFile are PEM files, required unless TLSMode is
	// TLSDisable. Load resolves a relative path against the directory of
	// the config file and stores the resolved path.
	TLSCertFile string `toml:"tls_cert_file"`
	TLSKeyFile  string `toml:"tls_key_file"`
	// TLSCAFile is a PEM file of the CA certificates client certificates
	// must chain to. When set (and TLSMode is not TLSDisable) the TLS
	// handshake asks clients for a certificate and refuses one that does
	// not verify; required by TLSVerifyCA, TLSVerifyFull and users with
	// auth = AuthCert. Resolved like TLSCertFile.
	TLSCAFile string `toml:"tls_ca_file"`
	// BackendTLSMode is TLSDisable, TLSPrefer or TLSRequire (proxy to servers).
	BackendTLSMode string `toml:"backend_tls_mode"`

	// Timeouts (PgBouncer's names with _ms; docs/behaviour.md, "Timeouts
	// and limits"). 0 disables each, except ServerLifetimeMS, where 0
	// means a server connection is used once (as PgBouncer's
	// server_lifetime = 0).
	ClientLoginTimeoutMS     int `toml:"client_login_timeout_ms"`
	QueryTimeoutMS           int `toml:"query_timeout_ms"`
	IdleTransactionTimeoutMS int `toml:"idle_transaction_timeout_ms"`
	ClientIdleTimeoutMS      int `toml:"client_idle_timeout_ms"`
	ServerLifetimeMS         int `toml:"server_lifetime_ms"`
	ServerIdleTimeoutMS      int `toml:"server_idle_timeout_ms"`

	// MaxPreparedStatements bounds the protocol-level named statements
	// kept prepared on one server connection in transaction pooling
	// (PgBouncer's max_prepared_statements): past it the least recently
	// used are closed on that server and prepared again when next used.
	// 0: no bound.
	MaxPreparedStatements int `toml:"max_prepared_statements"`
}

// Admin is the [admin] table.
type Admin struct {
	// Users may open the admin console (database AdminDatabase). Each must
	// be the name of a [[users]] entry: admins authenticate like any client.
	// An empty list disables the console.
	Users []string `toml:"users"`
	// RequireTLS refuses a console login (database AdminDatabase) over a
	// connection without TLS, before authentication (FATAL 28000).
	RequireTLS bool `toml:"require_tls"`
}

// Metrics is the [metrics] table.
type Metrics struct {
	// Listen is the host:port of the Prometheus endpoint; "" disables it.
	Listen string `toml:"listen"`
	// Pprof also serves Go's runtime profiles (net/http/pprof) at
	// /debug/pprof/ on that listener; off by default, for diagnosing
	// memory or CPU use (docs/operations.md "Profiling").
	Pprof bool `toml:"pprof"`
}

// Log is the [log] table.
type Log struct {
	// Level is LogDebug, LogInfo, LogWarn or LogError.
	Level string `toml:"level"`
	// Format is LogFormatJSON or LogFormatConsole.
	Format string `toml:"format"`
}

// User is a client identity. Password is plaintext, a "SCRAM-SHA-256$..."
// verifier or an "md5..." hash. BackendUser/BackendPassword are what kineticd
// uses towards the servers; they default to Name/Password. Without a
// BackendPassword a verifier logs in to the servers with what its clients
// prove (SCRAM pass-through) and an md5 hash answers md5 itself.
//
// Auth is AuthPassword (the default) or AuthCert: a cert user has no
// Password; it logs in with a TLS client certificate that verifies against
// [server] tls_ca_file and whose CN is CertCN (default: Name).
type User struct {
	Name            string `toml:"name"`     // required, unique
	Password        string `toml:"password"` // required unless Auth is AuthCert; see PasswordKind
	BackendUser     string `toml:"backend_user"`
	BackendPassword string `toml:"backend_password"` // always plaintext
	Auth            string `toml:"auth"`
	CertCN          string `toml:"cert_cn"`
}

// Route is one [[routes]] entry: the servers behind one client-visible
// database name. Name, Database and Primary.Address are required.
type Route struct {
	Name            string       `toml:"name"`
	Database        string       `toml:"database"`
	BackendDatabase string       `toml:"backend_database"`
	Primary         Endpoint     `toml:"primary"`
	Replicas        []Endpoint   `toml:"replicas"`
	ReadRouting     ReadRouting  `toml:"read_routing"`
	Freshness       Freshness    `toml:"freshness"`
	HA              HA           `toml:"ha"`
	Pool            Pool         `toml:"pool"`
	QueryClasses    []QueryClass `toml:"query_classes"`

	// AuthUser, when set, names the [[users]] entry whose backend
	// credentials run AuthQuery on the route's primary to fetch the secret
	// (a SCRAM verifier or an md5 hash) of a client user that is not in
	// [[users]] (proxy/authquery.go). AuthQuery binds the user name to $1.
	// AuthCacheTTLMS is how long a fetched secret is used without asking
	// the primary again (a pg-kinetic extension; 0: ask at every login);
	// an older one is still used while the primary cannot be asked.
	AuthUser       string `toml:"auth_user"`
	AuthQuery      string `toml:"auth_query"`
	AuthCacheTTLMS int    `toml:"auth_cache_ttl_ms"`
}

// Endpoint is a server of a route. Address is a required host:port. Weight
// is a replica's share of the reads (>= 0; 0 keeps the replica probed and
// visible but sends it no reads); the primary takes no weight and keeps 0.
type Endpoint struct {
	Address string `toml:"address"`
	Weight  int    `toml:"weight"`
}

// ReadRouting is [routes.read_routing]. Validated now; used by read routing.
type ReadRouting struct {
	ReadRoutingMode   string   `toml:"read_routing_mode"`
	FallbackPolicy    string   `toml:"fallback_policy"`
	DefaultQueryClass string   `toml:"default_query_class"`
	WriteFunctions    []string `toml:"write_functions"`
	ReadOnlyFunctions []string `toml:"read_only_functions"`
}

// Freshness is [routes.freshness]. Validated now; used by read routing.
// MaxReplicaLagMS must be > 0 when FreshnessPolicy bounds lag (max_lag,
// session_write_lsn_and_max_lag); MaxReplicaLagBytes 0 means no byte bound;
// MaxPrimaryFallbackInflight 0 means unlimited.
type Freshness struct {
	FreshnessPolicy            string `toml:"freshness_policy"`
	MaxReplicaLagMS            int    `toml:"max_replica_lag_ms"`
	MaxReplicaLagBytes         int64  `toml:"max_replica_lag_bytes"`
	ReadAfterWriteTimeoutMS    int    `toml:"read_after_write_timeout_ms"`
	StickyPrimaryWindowMS      int    `toml:"sticky_primary_window_ms"`
	MaxPrimaryFallbackInflight int    `toml:"max_primary_fallback_inflight"`
	// FlushPrimaryWAL has the primary write out WAL a held-back read
	// needs that it has not written yet (docs/behaviour.md, "WAL the
	// primary has not written out").
	FlushPrimaryWAL bool `toml:"flush_primary_wal"`
	// ReadConsistency "strict" makes every read that is not stale-ok
	// strict-fresh (SPEC §4): it sees every write committed before it
	// began, whichever connection made it, for applications whose
	// connection pool spreads one request's statements over several
	// connections (docs/behaviour.md, "Reads across connections").
	ReadConsistency string `toml:"read_consistency"`
}

// HA is [routes.ha]: replica health probing. VerdictTTLMS 0 means
// 2*interval + timeout; see VerdictTTL.
type HA struct {
	ReplicaHealthIntervalMS int `toml:"replica_health_interval_ms"`
	ReplicaHealthTimeoutMS  int `toml:"replica_health_timeout_ms"`
	VerdictTTLMS            int `toml:"verdict_ttl_ms"`
	// FollowFailover elects the route's primary among its configured
	// servers (SPEC §7): the one not in recovery, of the route's system,
	// on the highest timeline. false keeps fixed roles: a configured
	// replica that is promoted is a split brain, writes stay on the
	// configured primary.
	FollowFailover bool `toml:"follow_failover"`
}

// Pool sizes the server connection pools of a route. AcquireTimeoutMS is a
// pg-kinetic extension (SPEC §2 is silent): how long a client waits for a
// server connection of a full pool before it gets SQLSTATE 53300, like
// PgBouncer's query_wait_timeout.
//
// MaxDBConnections and MaxUserConnections bound the server connections of
// one server of the route (address and backend database) across users,
// and per user; 0 is unlimited. MaxConcurrentDials bounds the logins in
// progress to one server at once (a pg-kinetic extension: a storm of
// clients waits for its turn instead of hitting the server all at once).
//
// ServerLifetimeMS, when set, is the route's own server_lifetime_ms
// (PgBouncer's per-database server_lifetime); unset (nil), [server]'s
// applies.
type Pool struct {
	Size               int  `toml:"size"`
	AcquireTimeoutMS   int  `toml:"acquire_timeout_ms"`
	MaxDBConnections   int  `toml:"max_db_connections"`
	MaxUserConnections int  `toml:"max_user_connections"`
	MaxConcurrentDials int  `toml:"max_concurrent_dials"`
	ServerLifetimeMS   *int `toml:"server_lifetime_ms"`
}

// QueryClass is one [[routes.query_classes]] entry. Name is required;
// Routing defaults to ClassPrimaryOnly; FallbackPolicy "" inherits the
// route's. Validated now; used by read routing and rollout.
type QueryClass struct {
	Name           string `toml:"name"`
	Routing        string `toml:"routing"`
	Stage          int    `toml:"stage"`
	FallbackPolicy string `toml:"fallback_policy"`
	LabelStaleness bool   `toml:"label_staleness"`
}

// Rollout is the [rollout] table. StateFile, when set, is resolved against
// the directory of the config file like the TLS files. Validated now; used by
// rollout.
type Rollout struct {
	Stage          int    `toml:"stage"`
	StateFile      string `toml:"state_file"`
	AutoRollback   bool   `toml:"auto_rollback"`
	LagSLOWindowMS int    `toml:"lag_slo_window_ms"`
	// Shared keeps the stage and rollback of a route in a table on its
	// primary, shared by every kineticd of the route (proxy/rollout_shared.go).
	Shared bool `toml:"shared"`
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// ShutdownTimeout is shutdown_timeout_ms.
func (s Server) ShutdownTimeout() time.Duration { return ms(s.ShutdownTimeoutMS) }

// ClientLoginTimeout is client_login_timeout_ms (0: none).
func (s Server) ClientLoginTimeout() time.Duration { return ms(s.ClientLoginTimeoutMS) }

// QueryTimeout is query_timeout_ms (0: none).
func (s Server) QueryTimeout() time.Duration { return ms(s.QueryTimeoutMS) }

// IdleTransactionTimeout is idle_transaction_timeout_ms (0: none).
func (s Server) IdleTransactionTimeout() time.Duration { return ms(s.IdleTransactionTimeoutMS) }

// ClientIdleTimeout is client_idle_timeout_ms (0: none).
func (s Server) ClientIdleTimeout() time.Duration { return ms(s.ClientIdleTimeoutMS) }

// ServerLifetime is server_lifetime_ms (0: a connection is used once).
func (s Server) ServerLifetime() time.Duration { return ms(s.ServerLifetimeMS) }

// ServerLifetimeMSFor is the server_lifetime_ms of route r's server
// connections: the route's own when set, else s's.
func (s Server) ServerLifetimeMSFor(r *Route) int {
	if r != nil && r.Pool.ServerLifetimeMS != nil {
		return *r.Pool.ServerLifetimeMS
	}
	return s.ServerLifetimeMS
}

// ServerIdleTimeout is server_idle_timeout_ms (0: none).
func (s Server) ServerIdleTimeout() time.Duration { return ms(s.ServerIdleTimeoutMS) }

// AcquireTimeout is acquire_timeout_ms. Zero means wait without a limit, as
// PgBouncer's query_wait_timeout = 0 does.
func (p Pool) AcquireTimeout() time.Duration { return ms(p.AcquireTimeoutMS) }

// MaxReplicaLag is max_replica_lag_ms.
func (f Freshness) MaxReplicaLag() time.Duration { return ms(f.MaxReplicaLagMS) }

// ReadAfterWriteTimeout is read_after_write_timeout_ms.
func (f Freshness) ReadAfterWriteTimeout() time.Duration { return ms(f.ReadAfterWriteTimeoutMS) }

// StickyPrimaryWindow is sticky_primary_window_ms.
func (f Freshness) StickyPrimaryWindow() time.Duration { return ms(f.StickyPrimaryWindowMS) }

// HealthInterval is replica_health_interval_ms.
func (h HA) HealthInterval() time.Duration { return ms(h.ReplicaHealthIntervalMS) }

// HealthTimeout is replica_health_timeout_ms.
func (h HA) HealthTimeout() time.Duration { return ms(h.ReplicaHealthTimeoutMS) }

// VerdictTTL is how old a verdict may be before it counts as unknown:
// verdict_ttl_ms, or 2*interval + timeout when that is 0 (the defaults give
// 2*2000 + 750 = 4750ms: one probe may be lost before verdicts go unknown).
func (h HA) VerdictTTL() time.Duration {
	if h.VerdictTTLMS == 0 {
		return 2*h.HealthInterval() + h.HealthTimeout()
	}
	return ms(h.VerdictTTLMS)
}

// LagSLOWindow is lag_slo_window_ms.
func (r Rollout) LagSLOWindow() time.Duration { return ms(r.LagSLOWindowMS) }

// RouteByDatabase returns the route clients select with database name db.
func (c *Config) RouteByDatabase(db string) (*Route, bool) {
	for i := range c.Routes {
		if c.Routes[i].Database == db {
			return &c.Routes[i], true
		}
	}
	return nil, false
}

// UserByName returns the [[users]] entry called name.
func (c *Config) UserByName(name string) (*User, bool) {
	for i := range c.Users {
		if c.Users[i].Name == name {
			return &c.Users[i], true
		}
	}
	return nil, false
}

// AuthCacheTTL is auth_cache_ttl_ms.
func (r *Route) AuthCacheTTL() time.Duration { return ms(r.AuthCacheTTLMS) }

// BackendDB is the database name used towards the servers.
func (r *Route) BackendDB() string {
	if r.BackendDatabase != "" {
		return r.BackendDatabase
	}
	return r.Database
}

// Backend returns the credentials kineticd uses towards the servers for u.
func (u *User) Backend() (user, password string) {
	user, password = u.BackendUser, u.BackendPassword
	if user == "" {
		user = u.Name
	}
	if password == "" {
		password = u.Password
	}
	return user, password
}

// CertName is the certificate Common Name that identifies u: cert_cn, or
// the user's name when cert_cn is empty.
func (u *User) CertName() string {
	if u.CertCN != "" {
		return u.CertCN
	}
	return u.Name
}

// RequiresTLS reports whether tls_mode refuses clients without TLS.
func (s Server) RequiresTLS() bool {
	return s.TLSMode == TLSRequire || s.ClientCertRequired()
}

// ClientCertRequired reports whether tls_mode requires every client to
// present a certificate that verifies against tls_ca_file.
func (s Server) ClientCertRequired() bool {
	return s.TLSMode == TLSVerifyCA || s.TLSMode == TLSVerifyFull
}

// IsAdmin reports whether name is listed in [admin] users.
func (c *Config) IsAdmin(name string) bool {
	for _, u := range c.Admin.Users {
		if u == name {
			return true
		}
	}
	return false
}

// RouteByName returns the route called name.
func (c *Config) RouteByName(name string) (*Route, bool) {
	for i := range c.Routes {
		if c.Routes[i].Name == name {
			return &c.Routes[i], true
		}
	}
	return nil, false
}

// QueryClass returns the class called name as the route routes it: the
// route's [[routes.query_classes]] entry when there is one. A name of the
// shared vocabulary that the route does not define is returned as a
// primary_only class at stage 0 (ok is true): it is a known word with no
// permission to reach a replica. Any other name is not found.
func (r *Route) QueryClass(name string) (QueryClass, bool) {
	for _, qc := range r.QueryClasses {
		if qc.Name == name {
			return qc, true
		}
	}
	if IsSharedQueryClass(name) {
		return QueryClass{Name: name, Routing: ClassPrimaryOnly}, true
	}
	return QueryClass{}, false
}

// IsSharedQueryClass reports whether name is one of the shared vocabulary of
// query classes (SPEC §2).
func IsSharedQueryClass(name string) bool {
	switch name {
	case QueryClassSessionState, QueryClassReportingAggregate, QueryClassBillingBalance, QueryClassCatalogBrowse:
		return true
	}
	return false
}

// AlwaysPrimaryOnly reports whether a class may never be routed to a replica
// whatever the config says (billing_balance, session_state).
func AlwaysPrimaryOnly(name string) bool {
	return name == QueryClassBillingBalance || name == QueryClassSessionState
}

// EffectiveFallbackPolicy is the class's fallback_policy, or the route's when
// the class leaves it "".
func (r *Route) EffectiveFallbackPolicy(qc QueryClass) string {
	if qc.FallbackPolicy != "" {
		return qc.FallbackPolicy
	}
	return r.ReadRouting.FallbackPolicy
}
