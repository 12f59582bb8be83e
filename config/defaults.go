package config

// Defaults of SPEC §2. Where the SPEC's example shows a value that is not the
// safe choice for an omitted key, the default here is the safe one and
// docs/configuration.md says so (read_routing_mode).
const (
	DefaultListen            = "127.0.0.1:6432"
	DefaultPoolMode          = PoolModeSession
	DefaultMaxClientConn     = 10000
	DefaultShutdownTimeoutMS = 30000
	DefaultReusePort         = false
	DefaultTLSMode           = TLSDisable
	DefaultBackendTLSMode    = TLSDisable
	DefaultAdminUser         = "kinetic_admin"
	DefaultAdminRequireTLS   = false
	DefaultUserAuth          = AuthPassword
	DefaultMetricsListen     = "127.0.0.1:9930"
	DefaultLogLevel          = "info"
	DefaultLogFormat         = "json"

	// DefaultReadRoutingMode is "off", not the SPEC example's
	// "prefer_replica": a route that does not ask for read routing sends
	// everything to the primary, which is what it did before pg-kinetic.
	DefaultReadRoutingMode            = RoutingOff
	DefaultFallbackPolicy             = FallbackPrimary
	DefaultFreshnessPolicy            = FreshnessSessionWriteLSNAndMax
	DefaultMaxReplicaLagMS            = 2500
	DefaultMaxReplicaLagBytes         = 0
	DefaultReadAfterWriteTimeoutMS    = 750
	DefaultStickyPrimaryWindowMS      = 0
	DefaultFlushPrimaryWAL            = true
	DefaultReadConsistency            = ConsistencySession
	DefaultMaxPrimaryFallbackInflight = 0
	DefaultReplicaHealthIntervalMS    = 2000
	DefaultReplicaHealthTimeoutMS     = 750
	DefaultVerdictTTLMS               = 0
	DefaultFollowFailover             = true
	DefaultPoolSize                   = 20
	DefaultAcquireTimeoutMS           = 10000
	DefaultMaxDBConnections           = 0
	DefaultMaxUserConnections         = 0
	DefaultMaxConcurrentDials         = 16
	DefaultReplicaWeight              = 1
	// DefaultAuthQuery is auth_query's default (SPEC §2): pg_shadow is
	// readable by superusers only; docs/operations.md has a SECURITY DEFINER
	// function for an auth_user that is not one.
	DefaultAuthQuery      = "SELECT usename, passwd FROM pg_shadow WHERE usename = $1"
	DefaultAuthCacheTTLMS = 60000

	// DefaultClassRouting applies to a [[routes.query_classes]] entry that
	// omits routing: the safe choice, never a replica.
	DefaultClassRouting = ClassPrimaryOnly

	DefaultRolloutStage   = 0
	DefaultLagSLOWindowMS = 60000
)

// Defaults of the [server] timeouts (SPEC §2).
const (
	DefaultClientLoginTimeoutMS     = 15000
	DefaultQueryTimeoutMS           = 0
	DefaultIdleTransactionTimeoutMS = 0
	DefaultClientIdleTimeoutMS      = 0
	DefaultServerLifetimeMS         = 3600000
	DefaultServerIdleTimeoutMS      = 600000
	// DefaultMaxPreparedStatements is PgBouncer's default (1.22 on).
	DefaultMaxPreparedStatements = 200
)

// Log levels and formats accepted by [log].
const (
	LogDebug = "debug"
	LogInfo  = "info"
	LogWarn  = "warn"
	LogError = "error"

	LogFormatJSON    = "json"
	LogFormatConsole = "console"
)

// The shared vocabulary of query classes (SPEC §2). A config may define more.
// QueryClassSessionState and QueryClassBillingBalance are always primary_only.
const (
	QueryClassSessionState       = "session_state"
	QueryClassReportingAggregate = "reporting_aggregate"
	QueryClassBillingBalance     = "billing_balance"
	QueryClassCatalogBrowse      = "catalog_browse"
)

// AdminDatabase is the database name that opens the admin console; no route
// may use it.
const AdminDatabase = "pgkinetic"

// Defaults returns a Config holding every default of SPEC §2. It has no
// users and no routes (those have no defaults); Load fills each [[routes]]
// entry from DefaultRoute and each [[routes.replicas]] entry from
// DefaultReplica. Every call returns fresh slices.
func Defaults() Config {
	return Config{
		Server: Server{
			Listen:            DefaultListen,
			PoolMode:          DefaultPoolMode,
			MaxClientConn:     DefaultMaxClientConn,
			ShutdownTimeoutMS: DefaultShutdownTimeoutMS,
			ReusePort:         DefaultReusePort,
			TLSMode:           DefaultTLSMode,
			BackendTLSMode:    DefaultBackendTLSMode,

			ClientLoginTimeoutMS:     DefaultClientLoginTimeoutMS,
			QueryTimeoutMS:           DefaultQueryTimeoutMS,
			IdleTransactionTimeoutMS: DefaultIdleTransactionTimeoutMS,
			ClientIdleTimeoutMS:      DefaultClientIdleTimeoutMS,
			ServerLifetimeMS:         DefaultServerLifetimeMS,
			ServerIdleTimeoutMS:      DefaultServerIdleTimeoutMS,
			MaxPreparedStatements:    DefaultMaxPreparedStatements,
		},
		Admin:   Admin{Users: []string{DefaultAdminUser}, RequireTLS: DefaultAdminRequireTLS},
		Metrics: Metrics{Listen: DefaultMetricsListen},
		Log:     Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Rollout: Rollout{Stage: DefaultRolloutStage, LagSLOWindowMS: DefaultLagSLOWindowMS, Shared: true},
	}
}

// DefaultRoute returns the defaults every [[routes]] entry starts from: all
// of SPEC §2's per-route defaults, with name, database and the primary's
// address empty (they are required) and no replicas or query classes.
func DefaultRoute() Route {
	return Route{
		AuthQuery:      DefaultAuthQuery,
		AuthCacheTTLMS: DefaultAuthCacheTTLMS,
		ReadRouting: ReadRouting{
			ReadRoutingMode: DefaultReadRoutingMode,
			FallbackPolicy:  DefaultFallbackPolicy,
		},
		Freshness: Freshness{
			FreshnessPolicy:            DefaultFreshnessPolicy,
			MaxReplicaLagMS:            DefaultMaxReplicaLagMS,
			MaxReplicaLagBytes:         DefaultMaxReplicaLagBytes,
			ReadAfterWriteTimeoutMS:    DefaultReadAfterWriteTimeoutMS,
			StickyPrimaryWindowMS:      DefaultStickyPrimaryWindowMS,
			FlushPrimaryWAL:            DefaultFlushPrimaryWAL,
			ReadConsistency:            DefaultReadConsistency,
			MaxPrimaryFallbackInflight: DefaultMaxPrimaryFallbackInflight,
		},
		HA: HA{
			ReplicaHealthIntervalMS: DefaultReplicaHealthIntervalMS,
			ReplicaHealthTimeoutMS:  DefaultReplicaHealthTimeoutMS,
			VerdictTTLMS:            DefaultVerdictTTLMS,
			FollowFailover:          DefaultFollowFailover,
		},
		Pool: Pool{Size: DefaultPoolSize, AcquireTimeoutMS: DefaultAcquireTimeoutMS,
			MaxDBConnections: DefaultMaxDBConnections, MaxUserConnections: DefaultMaxUserConnections,
			MaxConcurrentDials: DefaultMaxConcurrentDials},
	}
}

// DefaultReplica returns the defaults of a [[routes.replicas]] entry.
func DefaultReplica() Endpoint { return Endpoint{Weight: DefaultReplicaWeight} }

// DefaultUser returns the defaults of a [[users]] entry: auth "password",
// everything else empty (name and, for password users, password are
// required).
func DefaultUser() User { return User{Auth: DefaultUserAuth} }

// DefaultClass returns the defaults of a [[routes.query_classes]] entry:
// routing primary_only, stage 0, fallback_policy "" (inherit the route's),
// label_staleness false.
func DefaultClass() QueryClass { return QueryClass{Routing: DefaultClassRouting} }
