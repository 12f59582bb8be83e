// Package conformance runs the own test suites of four Go drivers, pgx,
// lib/pq, bun's pgdriver and go-pg, and PostgreSQL's regression suite
// through kineticd: a client that cannot
// tell kineticd from PostgreSQL passes its driver's tests through it exactly as it does
// directly.
//
// # The run
//
// TestPgxSuite takes pgx at the version go.mod requires from the module
// cache (go mod download -json gives its directory), copies the module to a
// temporary directory (the cache is read-only) and compiles the test
// binaries of the packages pgx, pgconn, pgproto3, pgxpool, stdlib (its
// database/sql driver) and pgtype (every type through the server, in each
// query exec mode) once, with go test -c
// -trimpath (a warm build cache makes that a second or two). It starts a
// PostgreSQL 15 primary with one streaming replica (test/pgtest) and sets
// it up as pgx's CI does (testsetup/postgresql_setup.sql,
// .github/workflows/ci.yml): superuser roles pgx_md5 (md5), pgx_scram
// (SCRAM) and pgx_pw (cleartext "password" in pg_hba.conf), a database
// pgx_test with the extensions hstore and ltree and the domain uint64. Then
// it runs each binary, one after another, against five targets:
//
//	direct              the primary itself: the baseline
//	session/off         kineticd, pool_mode = "session", read_routing_mode = "off"
//	session/routed      session pooling, read_routing_mode = "prefer_replica",
//	                    fallback_policy = "primary",
//	                    freshness_policy = "session_write_lsn_and_max_lag"
//	transaction/off     the same two in pool_mode = "transaction"
//	transaction/routed
//
// Each kineticd target is the real kineticd binary (kinetictest.StartProcess)
// with the pgx roles in [[users]] (pgx_md5 with an md5 hash, so clients do
// md5 with kineticd too) and a route for pgx_test in front of the primary
// and the replica. pgx_test is recreated from a template before every
// target, so no target sees what an earlier one's failures left behind.
//
// Every target gets the same PGX_TEST_* variables, only their port
// differs: PGX_TEST_DATABASE, _TCP_CONN_STRING, _MD5_PASSWORD_, _SCRAM_PASSWORD_,
// _PLAIN_PASSWORD_CONN_STRING and _PGBOUNCER_CONN_STRING, all TCP with
// sslmode=disable. The unix-socket, TLS, client-certificate and OAuth
// variables stay unset, so those tests skip on every target alike; a test
// that passes directly and skips through kineticd counts as a failure.
//
// TestPqSuite does the same with lib/pq at a pinned version (pqVersion in
// pq_test.go; this repository does not require lib/pq, so go mod download
// fetches it through the module proxy), on a cluster of its own with two
// standbys (kineticd routes to both), set up as lib/pq's CI does (testdata/postgres): the superuser pqgo, the roles
// pqgomd5 (md5), pqgopassword (cleartext) and pqgoscram, a database pqgo
// recreated before every target. Its tests are pointed at a target with
// PGPORT alone, as in its CI (PGHOST, PGUSER, PGDATABASE and PGSSLMODE are
// its defaults: localhost, pqgo, pqgo, disable), and pqgo's password comes
// from a ~/.pgpass in a HOME of the run's own. Its binary runs twice per
// target, as in its CI: with text parameters (package "pq") and with
// PQTEST_BINARY_PARAMETERS=yes ("pq-binary"); its TestPing runs on its own
// after each ("pq-ping", "pq-binary-ping"): it terminates the backend
// pg_backend_pid() names, in transaction pooling a pooled connection
// (deviation (b)) that another test's transaction may be using at that
// moment, which then failed with it (TestTxOptions, about one run in
// four). Three examples that dial a
// host named postgres or port 5432 whatever the variables say, and end the
// binary with log.Fatal, are skipped everywhere. Its TLS and
// client-certificate tests, and TestAuth (whose unknown role expects the
// trust its CI's pg_hba.conf gives every other role), fail directly and so
// are not compared.
//
// TestBunSuite does the same with bun's pgdriver (github.com/uptrace/bun/
// driver/pgdriver, pinned: bunVersion in bun_test.go), a database/sql
// driver with protocol code of its own, on a cluster of two standbys: a
// role bun and a database bun recreated before every target, the tests
// pointed at a target by the one DSN they read (PG). Its go.mod replaces
// bun with the repository's own directory (../..), which a module from the
// proxy does not have: buildModule drops such replaces and builds with the
// required version. Its suite is small (16 tests, about 4 s a target):
// cancellation by CancelRequest under load, statement_timeout, a startup
// parameter, and transactions opened at every isolation level, read only
// and not.
//
// TestGopgSuite does the same with go-pg (github.com/go-pg/pg/v10, pinned:
// gopgVersion in gopg_test.go), an ORM with a fourth protocol
// implementation, on a cluster of two standbys. Its tests log in as
// postgres, password postgres, to database postgres (the cluster's
// superuser, trusted directly; kineticd asks for the password) at PGHOST
// and PGPORT; public is recreated with hstore before every target. Its 87
// Go tests and examples count one by one; its 149 Ginkgo specs run inside
// one of them (TestGinkgo), whose output names a failing spec. Its
// examples open a pool each and close none: in session pooling its route's
// pool is 100 (40 is not enough, and the next login waits out
// acquire_timeout_ms, as behind PgBouncer).
//
// TestPgRegress runs PostgreSQL's own regression suite (src/test/regress:
// its parallel_schedule, 217 psql scripts run by pg_regress, with
// regress.so; scripts/pg-regress.sh fetches the release's source from
// Debian's archive and builds it, install-deps.sh runs it) directly
// against a primary with two standbys, then through kineticd in session
// and transaction pooling with routing off and with prefer_replica, each
// time in a new database regression as the superuser. Its judge is not the expected
// files but the same scripts' output directly: every script's output
// through kineticd must be the same byte for byte, except where
// regressAllowed (regress_test.go) names the statement whose output a
// pooler changes by design (a reused server connection) and the target it
// does it on; every hunk of a script's difference must be named so. In
// transaction pooling that includes what is the state of a server process
// and follows no client (currval, pg_prepared_statements, unflushed
// statistics, a C function's static variable), as behind PgBouncer;
// temporary tables, WITH HOLD cursors and advisory locks pin the session
// and differ in nothing. KINETIC_CONFORMANCE_REGRESS_TESTS="test_setup
// insert" runs those scripts instead of the schedule,
// KINETIC_CONFORMANCE_REGRESS_TARGETS="transaction/routed" those targets;
// with KINETIC_CONFORMANCE_OUT each target's results/ are kept under
// DIR/pg_regress. On its first
// runs it found eleven ways a routed session differed from PostgreSQL: its
// role, session authorization, DateStyle and prepared statements on one
// server and not another, a RESET that missed a setting a DO block made,
// a role passed on to the next client in transaction pooling, sequences
// read on a replica, DISCARD SEQUENCES run on one (docs/behaviour.md).
// Transaction pooling, added as a target on 2026-12-07, found three more:
// objects made in pg_temp by name (CREATE STATISTICS pg_temp.s, CREATE
// TABLE pg_temp.t AS …) did not pin the session, a placeholder
// (custom.name) RESET was undefined on the session's next server
// connection instead of empty, and psql's \gdesc of EXECUTE test
// described another client's statement test.
//
// Results come from go tool test2json (the binaries run with
// -test.v=test2json and -test.timeout=8m). Only top-level tests count; a
// subtest's failure is its parent's. A test still running when the timeout
// panic fires (the panic names it), one paused or unfinished when a binary
// crashed, and one that never ran because its binary ended early are
// failures, and a binary that did not run to the end fails the run. One
// exception: a binary that ends with a panic of the driver's own timing
// helper (timingPanics in deviations_test.go: lib/pq's wantEvent, which
// panics when a Listener's event takes over 100 ms, and ended pq-binary
// directly against PostgreSQL in CI) runs again, up to twice, and its last
// run is judged; the log says so each time.
//
// # The pass rule
//
// Every top-level test that passes directly must pass on each kineticd
// target. The only permitted deviations are the allowed table
// (deviations_test.go), keyed by target pattern and test, with the three
// classes issue 11 names: (a) with routing on a unit is routed whole (no
// test is allowed for it since a batch the client stops inside is routed
// at the pause); (b) in
// transaction pooling the BackendKeyData PID is the proxy's own, so
// terminating a session's backend by it ends nothing; (c) with routing on a
// statement running on a replica is not in the primary's pg_stat_activity.
// Failures of defects being fixed are listed separately in knownOpen: they
// show as "open" in the table, do not fail the run, and are not allowed;
// the run logs each knownOpen entry whose test now passes, to be removed.
// Any other failure fails TestPgxSuite.
//
// At the end the run logs a table of target × passed / failed / allowed /
// open / skipped (skipped: not passing directly, so not compared) with each
// target's wall time, the tests skipped directly with their reasons, and
// every test that did not pass on a kineticd target with its first error
// line.
//
// # Running it
//
// go test ./... skips TestPgxSuite (it takes about ten minutes on two
// cores); make conformance runs it, and make test runs that after its other
// steps:
//
//	make conformance
//	KINETIC_CONFORMANCE=1 go test -count=1 -timeout 40m -v ./test/conformance/
//
// The baseline (direct) always runs; -run selects the kineticd targets
// (go test splits its pattern at slashes, so match a target's two parts
// separately), and KINETIC_CONFORMANCE_PGX_RUN is passed to pgx's binaries
// as -test.run (KINETIC_CONFORMANCE_PQ_RUN to lib/pq's,
// KINETIC_CONFORMANCE_BUN_RUN to pgdriver's, KINETIC_CONFORMANCE_GOPG_RUN to
// go-pg's):
//
//	# one target
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run 'TestPgxSuite/transaction/routed' ./test/conformance/
//	# both transaction-pooling targets; both routed ones
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run 'TestPgxSuite/transaction/' ./test/conformance/
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run 'TestPgxSuite/.*/routed' ./test/conformance/
//	# one pgx test (in whichever of the three packages has it) on every target
//	KINETIC_CONFORMANCE=1 KINETIC_CONFORMANCE_PGX_RUN='^TestFatalTxError$' go test -count=1 -v ./test/conformance/
//	# only the baseline
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run 'TestPgxSuite/none' ./test/conformance/
//	# lib/pq's suite alone (about a minute); bun's pgdriver's (half a
//	# minute); go-pg's (three minutes, and one to build it the first time)
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run TestPqSuite ./test/conformance/
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run TestBunSuite ./test/conformance/
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run TestGopgSuite ./test/conformance/
//	# PostgreSQL's regression suite (five to six minutes: direct, then four targets)
//	KINETIC_CONFORMANCE=1 go test -count=1 -v -run TestPgRegress ./test/conformance/
//
// The table has only each failure's first error line. With
// KINETIC_CONFORMANCE_OUT=DIR the raw test2json stream of every binary and
// target is kept as DIR/TARGET-PKG.json (transaction_off-pgx.json), where
// a failing test's whole output is.
//
// kineticd is built from the working tree (kinetictest.Binary); the table's
// heading names it with git describe --dirty. The other tests of the
// package check the run's own logic (test2json parsing, the pass rule) and
// need no database.
package conformance
