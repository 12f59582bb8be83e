package conformance

// allowed are the only permitted deviations from PostgreSQL: the three
// classes issue 11 names, each a consequence of what kineticd is, not a
// defect. An entry may list only a test that fails for exactly that reason.
//
//	(a) With read routing on, a unit (an extended-protocol batch up to Sync)
//	    is classified and routed whole, so the server receives Parse and
//	    Describe together: a statement_timeout that would fire while the
//	    server waits between them never does.
//	(b) In transaction pooling the BackendKeyData PID is the proxy's own (as
//	    with PgBouncer): pg_terminate_backend of that PID terminates no
//	    server process, so the session it names lives on.
//	(c) With read routing on, a statement running on a replica is not in the
//	    primary's pg_stat_activity, so another connection cannot find or
//	    cancel it there. (No pgx test fails for this reason today.)
var allowed = []deviation{
	// (a) Each test delays the Describe after Parse by 200 ms with
	// statement_timeout = 100ms and expects 57014.
	{"*/routed", "pgx.TestPrepareHandlesTimeoutBetweenParseAndDescribe", "(a) unit routed whole: statement_timeout cannot fire between Parse and Describe"},
	{"*/routed", "pgx.TestPrepareWithDigestedNameHandlesTimeoutBetweenParseAndDescribe", "(a) unit routed whole: statement_timeout cannot fire between Parse and Describe"},
	{"*/routed", "pgx.TestSendBatchHandlesTimeoutBetweenParseAndDescribe", "(a) unit routed whole: statement_timeout cannot fire between Parse and Describe"},

	// (b) Each runs pg_terminate_backend(conn.PgConn().PID()) from another
	// connection and expects conn to fail.
	{"transaction/*", "pgx.TestFatalRxError", "(b) transaction pooling: the BackendKeyData PID is the proxy's, pg_terminate_backend of it ends nothing"},
	{"transaction/*", "pgx.TestFatalTxError", "(b) transaction pooling: the BackendKeyData PID is the proxy's, pg_terminate_backend of it ends nothing"},
	{"transaction/*", "pgconn.TestConnCheckConn", "(b) transaction pooling: the BackendKeyData PID is the proxy's, pg_terminate_backend of it ends nothing"},
	{"transaction/*", "pgconn.TestConnPing", "(b) transaction pooling: the BackendKeyData PID is the proxy's, pg_terminate_backend of it ends nothing"},
}

// knownOpen are failures of open defects that other work is fixing. They
// are reported as "open" and do not fail the run, but they are not
// permitted deviations: an entry goes when its test passes (the run logs
// each entry whose test passed).
var knownOpen = []deviation{
	// A statement prepared on one server and re-Parsed by the proxy on
	// another after an ALTER TABLE changed its result: PostgreSQL fails the
	// Bind with "cached plan must not change result type" (0A000), the
	// fresh Parse elsewhere with 08P01 (result formats for 3 columns, 2
	// now). Depends on which servers the three units land on (replica lag
	// from earlier tests): failed in 1 of 3 full runs of session/routed on
	// 2026-12-02, never alone. The fix: a re-Parse also Describes, and a
	// result shape other than the one the client was told fails the
	// client's Bind with 0A000.
	{"*/routed", "pgx.TestStmtCacheInvalidationConn", "open: re-Parse on another server after DDL hides 'cached plan must not change result type'"},
	// The same class through a batch: failed once in transaction/routed
	// in the clean-clone CI run of 882b62f on 2026-12-02 ("cached plan must
	// not change result type" where pgx expected its cache to recover), and
	// passed in every run before it.
	{"*/routed", "pgx.TestStmtCacheInvalidationConnWithBatch", "open: re-Parse on another server after DDL hides 'cached plan must not change result type'"},
}
