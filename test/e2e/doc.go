// Package e2e drives kineticd with real clients (psql, pgbench, pgx) against
// a real PostgreSQL 15 primary with two streaming standbys started by
// test/pgtest, one cluster for the whole package. Where a statement ran is
// asserted by asking the server (inet_server_port(), pg_backend_pid()),
// never by reading the proxy's logs.
package e2e
