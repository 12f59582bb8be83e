// Package proxy is kineticd's client side: it accepts PostgreSQL protocol
// 3.0 connections, authenticates them against [[users]], picks a route by
// database name, binds the session to server connections from package pool
// and relays messages in both directions as bytes.
//
// A connection's life is a pipeline, one file per stage:
//
//	server.go        Server, Serve, Shutdown, reload; the listener and the session set
//	admit.go         SSLRequest/TLS, GSSENCRequest, CancelRequest, StartupMessage
//	authenticate.go  SCRAM-SHA-256 (plaintext or verifier secrets) or md5
//	clientcert.go    TLS client certificates: tls_ca_file, verify-ca/verify-full, auth = "cert"
//	passthrough.go   SCRAM pass-through: one ClientKey per verifier, servers logged in to with it
//	authquery.go     auth_query: secrets of users not in [[users]], from the route's primary, cached
//	session.go       session: one client connection's state and goroutine
//	connect.go       acquire a server connection, apply the client's settings
//	forward.go       the client->server side: batches, analysis, routeBatch, writing units
//	flow.go          where the client->server side stands between units: collecting, following, skipping
//	route.go         where a unit goes, pure: planUnit, decide, planFallback, reason words
//	failover.go      the elected primary (health.Elect) a unit's writes go to; sessions moved off a demoted one
//	record.go        what a unit's route is recorded and counted as (last_route, SHOW ROUTES, metrics)
//	link.go          a server connection attached to a session and its reader (server->client relay)
//	statements.go    the client's prepared statements, made to exist on whichever server runs a unit;
//	                 max_prepared_statements per server connection (makeRoom)
//	settings.go      startup and SET parameters, replayed where a unit runs
//	replay.go        the open portals of a unit's replica part, bound again where the unit moves
//	local.go         statements the proxy answers itself (SHOW/SET pg_kinetic.*, consistency rejections)
//	localext.go      the same in the extended protocol; barriers
//	fresh.go         WAL positions: write tokens, captures, the read requirement
//	affinity.go      monotonic reads: the replica a session's reads stay on
//	replicas.go      a runtime per route (classifier, health checker, position readers, counters,
//	                 volatility cache), swapped whole on reload; replica links; backoffs
//	rollout.go       routing stage and rollback (SPEC §6), query class policies
//	rollout_shared.go the state shared by every kineticd of a route: the conflict rule by version (pure: planSync)
//	rollout_sync.go  one syncer per route: LISTEN/poll the primary's pgkinetic.rollout_state, compare-and-set writes
//	monitor.go       health-derived metrics and auto_rollback
//	series.go        each route's labelled metric series, declared at 0 (start-up, reload)
//	ready.go         readiness for /readyz, from the health verdicts
//	console.go       the admin console (database pgkinetic)
//	pause.go         PAUSE/RESUME: units of a route held at the next idle point
//	cancel.go        BackendKeyData issued by the proxy, CancelRequest relay
//	sqlcancel.go     pg_cancel_backend(pid) of a session's primary backend relayed to where it runs
//	timeouts.go      client_login, query, idle_transaction and client_idle timeouts
//	janitor.go       closes pooled server connections past server_idle_timeout_ms or server_lifetime_ms
//	contain.go       a panic in one session's goroutines ends that session only
//	idle.go          client buffers lent only while a client has work
//	errors.go        SQLSTATEs and the ErrorResponses the proxy makes (errorf)
//	errno.go         accept errors the listener rides out
//	racewindows.go   widened race windows, for tests (SetRaceWindows)
//
// Concurrency: Server is safe for concurrent use. Each client session runs
// in one goroutine that reads the client and writes the server, plus one
// goroutine per attached server connection that reads the server and writes
// the client; both are owned by the session and joined before it ends.
// Serve owns the session goroutines; Shutdown drains them. A session's
// fields outside its mu are the session goroutine's, except those marked
// "under wmu" (what is written to the client); those the server
// readers, timers, Shutdown, PAUSE, cancels and the admin console also use
// are grouped in session.mu (lock order: session.wmu, then session.mu;
// see the session type).
//
// Errors seen by clients are PostgreSQL ErrorResponses with the SQLSTATE
// PostgreSQL itself would use (08P01 protocol violation, 28P01 bad password,
// 3D000 unknown database, 53300 too many connections, 57P01 shutdown, 08006
// lost server connection).
package proxy
