// Package consistency is pg-kinetic's consistency checker: many concurrent
// client sessions write rows through kineticd and read them back (their own
// and other sessions', directly and through published WAL position tokens)
// while a fault loop pauses and resumes WAL replay and restarts the
// standbys. Every read is recorded and checked for read-your-writes,
// monotonic-read and cross-session token violations; the share of reads the
// replicas served is reported. It runs against its own PostgreSQL 15
// cluster (test/pgtest) and an in-process kineticd (test/kinetictest).
//
// Where a statement ran is asked of the server (inet_server_port()), never
// read from the proxy's logs.
package consistency
