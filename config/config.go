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

	// Path is the file the config was loaded from ("" when built in code).
	Path string `toml:"-"`
}

type Server struct {
	Listen            string `toml:"listen"`
	PoolMode          string `toml:"pool_mode"`
	MaxClientConn     int    `toml:"max_client_conn"`
	ShutdownTimeoutMS int    `toml:"shutdown_timeout_ms"`
	TLSMode           string `toml:"tls_mode"`
	TLSCertFile       string `toml:"tls_cert_file"`
	TLSKeyFile        string `toml:"tls_key_file"`
	BackendTLSMode    string `toml:"backend_tls_mode"`
}

type Admin struct {
	Users []string `toml:"users"`
}

type Metrics struct {
	Listen string `toml:"listen"`
}

type Log struct {
	Level  string `toml:"level"`
	Format string `toml:"format"`
}

// User is a client identity. Password is plaintext, a "SCRAM-SHA-256$..."
// verifier or an "md5..." hash. BackendUser/BackendPassword are what kineticd
// uses towards the servers; they default to Name/Password and are required
// (password) when Password is a verifier or hash, since a hash cannot log in.
type User struct {
	Name            string `toml:"name"`
	Password        string `toml:"password"`
	BackendUser     string `toml:"backend_user"`
	BackendPassword string `toml:"backend_password"`
}

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
}

type Endpoint struct {
	Address string `toml:"address"`
	Weight  int    `toml:"weight"`
}

type ReadRouting struct {
	ReadRoutingMode   string   `toml:"read_routing_mode"`
	FallbackPolicy    string   `toml:"fallback_policy"`
	DefaultQueryClass string   `toml:"default_query_class"`
	WriteFunctions    []string `toml:"write_functions"`
	ReadOnlyFunctions []string `toml:"read_only_functions"`
}

type Freshness struct {
	FreshnessPolicy            string `toml:"freshness_policy"`
	MaxReplicaLagMS            int    `toml:"max_replica_lag_ms"`
	MaxReplicaLagBytes         int64  `toml:"max_replica_lag_bytes"`
	ReadAfterWriteTimeoutMS    int    `toml:"read_after_write_timeout_ms"`
	StickyPrimaryWindowMS      int    `toml:"sticky_primary_window_ms"`
	MaxPrimaryFallbackInflight int    `toml:"max_primary_fallback_inflight"`
}

type HA struct {
	ReplicaHealthIntervalMS int `toml:"replica_health_interval_ms"`
	ReplicaHealthTimeoutMS  int `toml:"replica_health_timeout_ms"`
	VerdictTTLMS            int `toml:"verdict_ttl_ms"`
}

// Pool sizes the server connection pools of a route. AcquireTimeoutMS is a
// pg-kinetic extension (SPEC §2 is silent): how long a client waits for a
// server connection of a full pool before it gets SQLSTATE 53300, like
// PgBouncer's query_wait_timeout.
type Pool struct {
	Size             int `toml:"size"`
	AcquireTimeoutMS int `toml:"acquire_timeout_ms"`
}

type QueryClass struct {
	Name           string `toml:"name"`
	Routing        string `toml:"routing"`
	Stage          int    `toml:"stage"`
	FallbackPolicy string `toml:"fallback_policy"`
	LabelStaleness bool   `toml:"label_staleness"`
}

type Rollout struct {
	Stage          int    `toml:"stage"`
	StateFile      string `toml:"state_file"`
	AutoRollback   bool   `toml:"auto_rollback"`
	LagSLOWindowMS int    `toml:"lag_slo_window_ms"`
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func (s Server) ShutdownTimeout() time.Duration { return ms(s.ShutdownTimeoutMS) }
func (p Pool) AcquireTimeout() time.Duration    { return ms(p.AcquireTimeoutMS) }

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
