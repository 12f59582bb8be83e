// Package proxy is kineticd's client side: it accepts PostgreSQL protocol
// 3.0 connections, authenticates them against [[users]], picks a route by
// database name, binds the session to server connections from package pool
// and relays messages in both directions as bytes.
//
// A connection's life is a pipeline, one file per stage:
//
//	admit.go         SSLRequest/TLS, GSSENCRequest, CancelRequest, StartupMessage
//	authenticate.go  SCRAM-SHA-256 (plaintext or verifier secrets) or md5
//	route.go         which server a unit of work goes to (pure decision)
//	connect.go       acquire a server connection, apply the client's settings
//	forward.go       relay client->server and server->client frames
//	cancel.go        BackendKeyData issued by the proxy, CancelRequest relay
//
// Concurrency: Server is safe for concurrent use. Each client session runs
// in one goroutine that reads the client and writes the server, plus one
// goroutine per attached server connection that reads the server and writes
// the client; both are owned by the session and joined before it ends.
// Serve owns the session goroutines; Shutdown drains them.
//
// Errors seen by clients are PostgreSQL ErrorResponses with the SQLSTATE
// PostgreSQL itself would use (08P01 protocol violation, 28P01 bad password,
// 3D000 unknown database, 53300 too many connections, 57P01 shutdown, 08006
// lost server connection).
package proxy
