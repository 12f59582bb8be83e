// Package compat holds the client-compatibility suite: real drivers talk to
// an in-process kineticd with the shared pgtest cluster's two standbys as
// replicas and read_routing_mode = "prefer_replica", each running the same
// realistic mix (autocommit writes and reads, read-write and read-only
// transactions, prepared statements executed often enough to become
// server-side, SQL PREPARE/EXECUTE, reads after writes).
//
// The drivers are programs in subdirectories, each printing one JSON line per
// statement with the inet_server_port() the server reported:
//
//	psycopg2/mix.py   psycopg2 (Debian python3-psycopg2, /usr/bin/python3)
//	psycopg3/mix.py   psycopg 3 (Debian python3-psycopg)
//	node/mix.js       node-postgres (`pg`, pinned by node/package-lock.json)
//	jdbc/Mix.java     pgJDBC (Debian libpostgresql-jdbc-java), compiled by the test
//
// plus pgx, run in-process by the test. scripts/install-deps.sh installs all
// of them. A missing runtime skips its test, or fails it when CI is set.
//
// TestClientFeatures (features_test.go) runs the same programs once per
// feature (COMPAT_FEATURE): SQL cursors fetched in steps, each driver's own
// row-limited fetch (server-side cursors, setFetchSize, node-postgres
// Query rows), LISTEN/NOTIFY between two connections, the unnamed
// statement (pgx describe_exec/exec, pgJDBC prepareThreshold=0, psycopg 3
// prepare_threshold=None, node-postgres queries with values), and SHOW
// pg_kinetic.write_lsn / SET pg_kinetic.min_lsn through the extended
// protocol; directly against the primary first where PostgreSQL has the
// feature, then through kineticd with read routing on.
//
// The package has no code of its own; everything is in its tests.
package compat
