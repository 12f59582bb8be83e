// Package pool owns kineticd's server connections: it dials PostgreSQL
// servers and logs in itself (TLS per backend_tls_mode; SCRAM with
// PostgreSQL's own SASLprep, md5 and cleartext with the raw password; see
// login.go for why not pgconn; or without a password, pass-through: SCRAM
// with the ClientKey a client proved for a verifier the server also holds,
// md5 with the stored hash, scramkey.go), and keeps idle ones per (server
// address, user, database).
//
// Contract:
//   - A Pool hands out at most Size connections at once. Acquire blocks until
//     one is free, the context ends, or the pool's acquire timeout passes
//     (ErrPoolTimeout, which the proxy reports as SQLSTATE 53300).
//   - A *Conn belongs to exactly one caller between Acquire and Release or
//     Discard. Release resets the connection (DISCARD ALL) before it is
//     handed out again; a connection that fails the reset or was seen broken
//     is closed and its slot freed.
//   - Idle connections are checked for a closed socket (a non-blocking peek)
//     before reuse, so a server restart or pg_terminate_backend on an idle
//     connection never reaches a client.
//   - Conn.Exec and Conn.Query run the proxy's own simple-protocol queries
//     (reset, settings; health probes and catalog lookups, which dial with
//     Dialer outside any Pool) on a connection the caller holds; Query
//     returns the rows as text and is bounded by its context. QueryParams
//     does the same in the extended protocol with text parameters bound
//     to $1, $2, ... (auth_query's user name). A Conn is not
//     safe for concurrent use.
//   - All Pool and Manager methods are safe for concurrent use. Close
//     closes idle connections and makes later Acquire calls fail;
//     connections out on loan are closed when returned.
package pool
