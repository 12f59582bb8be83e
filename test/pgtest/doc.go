// Package pgtest starts real PostgreSQL 15 servers for end-to-end tests: a
// primary plus streaming hot standbys on free loopback ports, in about two
// seconds.
//
// # Use
//
// One cluster serves a whole test package. Start it lazily with Shared and
// close it from TestMain with Main:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		c := pgtest.Shared(t)
//		db := c.Primary.DSN(pgtest.AppUser, pgtest.AppPassword, pgtest.AppDB)
//		...
//	}
//
// Tests that share the cluster must leave it as they found it: every server
// running, WAL replay resumed, the same primary. A test that damages a cluster
// for good (Promote) starts its own with New, which closes it when the test
// ends.
//
// When the PostgreSQL 15 binaries are missing, Shared and New skip the test,
// or fail it loudly when the environment variable CI is non-empty; the message
// says what to install (scripts/install-deps.sh does it). A server that fails
// to start reports the tail of its log.
//
// # What a cluster is
//
// Start creates a directory under os.TempDir() holding one data directory per
// server, the servers' unix sockets, and their logs (DataDir/postgresql.log).
// The primary is made by initdb with the roles and database of the constants
// below; standbys are pg_basebackup copies streaming from it. Servers listen
// on 127.0.0.1 only. Authentication (pg_hba.conf): the postgres superuser and
// replication connections are trusted, MD5User uses md5, everyone else
// scram-sha-256.
//
// When the process runs as root, every PostgreSQL program runs as the OS user
// "postgres" (initdb refuses root) and the directory belongs to that user;
// otherwise they run as the current user.
//
// # Processes and cleanup
//
// Each postmaster is a child of the test process, started like pg_ctl start
// would (postgres -D DataDir, output appended to the log) and stopped with the
// signals pg_ctl sends. It is started with a parent-death signal, so if the
// test binary dies (a -timeout panic, SIGKILL) its servers shut down too.
// Close stops every server the cluster ever started (immediate shutdown),
// kills any process still working inside the cluster directory, and removes
// the directory. Start removes directories left by test processes that died
// without closing theirs.
//
// # Concurrency
//
// Exec, QueryString, ReplayLSN, CurrentLSN, InRecovery and WaitReplay open
// their own connection and are safe to call concurrently. Start, Stop, Kill,
// Promote and Close change the cluster and are meant to be called from one
// goroutine at a time; none of them leaves a goroutine running.
package pgtest
