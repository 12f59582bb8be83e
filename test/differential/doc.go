// Package differential is pg-kinetic's differential protocol test (issue
// 11): seeded random client message sequences are replayed once directly
// against PostgreSQL 15 and once through kineticd in each of four modes,
// and the backend messages the client receives must be the same.
//
// # Targets
//
// One private cluster (test/pgtest: a primary and one streaming replica).
// "PostgreSQL" is the primary itself. kineticd runs in-process
// (test/kinetictest) in four modes, one after the other:
//
//	session              pool_mode session,     read_routing_mode off
//	session-routing      pool_mode session,     read_routing_mode prefer_replica
//	transaction          pool_mode transaction, read_routing_mode off
//	transaction-routing  pool_mode transaction, read_routing_mode prefer_replica
//
// The routing modes use freshness_policy session_write_lsn_and_max_lag and
// fallback_policy primary, and start only once a read has reached the
// replica. The client is pgconn for the startup and authentication
// (PostgreSQL directly as md5user; kineticd as a user with an md5 secret
// whose backend user is md5user, so both sessions are md5user's and
// logging in costs no SCRAM iterations), then pgproto3 on the hijacked
// connection for everything else.
//
// # Sequences
//
// Generate(seed, features) makes one session's messages: 1 to about 25 units,
// each what a client sends in one write before reading: a simple Query
// (one statement or several, COPY ... FROM STDIN with its CopyData and
// CopyDone or CopyFail), a batch ended by Sync, a batch ended by Flush
// alone (more batches follow until a Sync), or several Sync-ended batches
// pipelined. Inside batches: Parse (named and unnamed, with and without
// declared parameter types), Bind (text and binary results, wrong
// parameter counts), Describe of statements and portals, Execute with and
// without row limits (PortalSuspended, a portal continued in a later unit
// of the same transaction), Close. Patterns drivers use are generated on
// purpose: pgx's describe_exec (Parse "" + Describe S + Sync, then Bind "" +
// Execute + Sync, sometimes with another unit in between), statement
// caches (a named statement Parsed in one unit and Bound in later ones,
// closed and reused), SQL PREPARE/EXECUTE/DEALLOCATE (sharing the names of
// protocol statements). Errors are placed at Parse, Bind and Execute, after
// some rows, in the middle of batches and of transactions. Transactions
// (BEGIN, read-only, repeatable read, serializable read-only, SET
// TRANSACTION READ ONLY, COMMIT AND CHAIN, savepoints), SET/RESET/SHOW of
// harmless settings (DateStyle, TimeZone, IntervalStyle, extra_float_digits,
// bytea_output, application_name, search_path, work_mem, ...) with SET
// LOCAL, set_config, RESET ALL and a query whose output they change, COPY
// TO STDOUT, temp tables, advisory locks, LISTEN/NOTIFY, DISCARD ALL,
// /* pg-kinetic: ... */ hints (plain comments to PostgreSQL), and
// pg_kinetic.* commands (below). KINETIC_DIFF_FEATURES switches features
// off (see Features), to look for rarer mismatches behind frequent ones.
//
// Every statement gives the same answer on the primary and on the replica:
// reads of table ref (made at setup and replayed by the replica before any
// sequence runs), reads of the run's own rows of table rw (written by the
// same session: read-your-writes is kineticd's promise, so these reads
// must match too), constants and settings. Nothing reads the clock,
// random(), pg_backend_pid(), inet_server_port(), pg_is_in_recovery() or
// transaction_read_only; several rows always come with ORDER BY. Each run
// of a sequence gets its own run key (RunMark in the texts, a number unique
// to the run in what is sent), so runs never see each other's rows.
//
// # Comparison
//
// Each answer is a list of canonical lines, one per backend message: the
// type and its fields (RowDescription with names, types, sizes, modifiers,
// formats and table columns; DataRow values; command tags; ReadyForQuery
// status; COPY formats and data). What legitimately differs is masked:
//   - BackendKeyData (process ID, secret): never recorded;
//     NotificationResponse: the process ID is left out;
//   - ParameterStatus pg_kinetic.* (kineticd's write tokens) are dropped
//     and counted, but one that comes inside a response (after its first
//     message) and is followed by anything but a ParameterStatus or the
//     ReadyForQuery is a mismatch: PostgreSQL reports parameters only
//     before a ReadyForQuery, and lib/pq's COPY loop fails at one
//     elsewhere (seed 1207094, 3,000 a mode: 15 and 19 such in the
//     routed modes, a token sent while a SHOW pg_kinetic.write_lsn was
//     being answered, before the fix of 2026-12-07); the login's
//     ParameterStatus set is compared otherwise unmasked (server ports
//     are never asked for);
//   - ErrorResponse and NoticeResponse: compared by Severity, SQLSTATE and
//     Message only (no File/Line/Routine/Position/Detail); the message of
//     25006 is masked because a replica words a write refused inside a
//     read-only transaction "cannot execute COPY during recovery" where the
//     primary says "... in a read-only transaction" (a write where
//     PostgreSQL succeeds still mismatches);
//   - table OIDs in RowDescription: the setup tables' (the same on every
//     server) are named, others (a temp table) masked;
//   - the run key is masked back to RunMark;
//   - DataRow values of a unit with a pg_kinetic.* command, or a Bind of
//     a statement Parsed from one (PostgreSQL answers placeholders); the
//     runner also masks the rows of a one-column pg_kinetic.*
//     RowDescription, and of an Execute of a portal bound from an unnamed
//     statement that the answers show is still such a command (a Parse
//     replacing it skipped after an error, which the generator does not
//     follow).
//
// Answers are read per frontend message: Parse until ParseComplete, Bind
// until BindComplete, Describe until RowDescription or NoData, Execute
// until CommandComplete, PortalSuspended or EmptyQueryResponse, Close until
// CloseComplete, Query and Sync until ReadyForQuery; an ErrorResponse ends
// the message and the server skips to Sync. So a batch ended by Flush is
// read until its expected answers arrived. Waiting longer than
// KINETIC_DIFF_TIMEOUT_MS (10000) for a unit's answers records a hang and
// ends the run: a hang is a mismatch. (3000 until 2026-12-05: that day's
// clean-clone CI saw, in one 10,000-sequence run, PostgreSQL itself leave
// a sequence unanswered for 3 s among the parallel workers, and kineticd
// in transaction-routing leave the first answer of another sequence's
// first unit, a ROLLBACK, unanswered for 3 s; both answered at once when
// run again, and the whole mode again gave 0 mismatching. A real hang
// never answers, so the longer guard costs time only when one happens.)
//
// pg_kinetic.* commands (feature "kinetic"): SHOW pg_kinetic.write_lsn,
// min_lsn and query_class, SET/RESET pg_kinetic.min_lsn (to '0/0') and
// pg_kinetic.query_class, simple and extended. PostgreSQL does not know
// them, so the direct session declares them as placeholder variables in its
// startup packet: it answers SET with "SET" and SHOW with one text column of
// that name, the shapes SPEC §4 asks of kineticd. Their DataRow values are
// masked (tokens differ by design); only the shapes are compared. SHOW
// pg_kinetic.last_route is not generated (its value is the point and
// differs by design). KINETIC_DIFF_FEATURES=-kinetic leaves them all out.
//
// On a mismatch the test prints the sequence's reference (seed, kept
// units), the class, the sequence one message a line, and the first
// differing unit's answers side by side, the first difference marked. A
// class is the frontend message answered, the unit's shape, and the two
// first differing messages reduced to type and SQLSTATE, e.g. "Bind in
// batch ended by Sync: PostgreSQL BindComplete, kineticd ErrorResponse(26000)".
// Mismatches are reported up to KINETIC_DIFF_MAX_MISMATCHES per mode
// (then the mode stops), grouped by class with counts and the smallest
// sequence; KINETIC_DIFF_SHOW (2) are printed in full per class.
//
// # Running
//
// The test runs only with KINETIC_DIFFERENTIAL=1. `make test` replays the
// committed regression seeds (KINETIC_DIFF_N=0, every one of which passes
// in every mode), then 10 000 generated sequences per mode (base seed
// 616161); `make differential` runs 10 000 per mode with a time-based
// seed (below). First
// every sequence runs against PostgreSQL (one hash kept per sequence), then
// each mode runs them all and compares hashes; a sequence that differs is
// replayed against PostgreSQL for the full answer (a sequence PostgreSQL
// answers differently when replayed, or does not answer at all, is
// reported as the generator's fault). Workers run sequences in parallel, each on a fresh connection.
//
//	KINETIC_DIFFERENTIAL=1 go test ./test/differential -run TestDifferential -v
//
// Environment:
//   - KINETIC_DIFF_N: generated sequences per mode (default 10000);
//   - KINETIC_DIFF_SEED: base seed (default time-based, logged); sequence
//     i's seed is derived from it (seedOf);
//   - KINETIC_DIFF_WORKERS: parallel sessions (default 4);
//   - KINETIC_DIFF_MODES: a comma-separated subset of the modes;
//   - KINETIC_DIFF_FEATURES: "-flush,-kinetic" (off), "only:simple,tx",
//     "+flushsync" (an opt-in feature, OptInFeatures);
//   - KINETIC_DIFF_ONLY: "SEED [keep=..] [twice]; ...": just these;
//   - KINETIC_DIFF_MINIMIZE=1: shrink one sequence per class (delta
//     debugging over units) and print it as a regressions.txt line;
//   - KINETIC_DIFF_REGRESSIONS=0: skip testdata/regressions.txt;
//   - KINETIC_DIFF_WIDEN=1: widen the proxy's race windows
//     (proxy.SetRaceWindows: a server reader pauses after an error's
//     header, the session goroutine before a barrier), so that an order
//     of events a slow machine takes rarely is taken every time; the
//     regression seeds are then testdata/races.txt's (make test replays
//     them so);
//   - KINETIC_DIFF_HANGDUMP=/path/prefix: at each hang, every goroutine's
//     stack (kineticd runs in the test process) goes to prefix.<time>;
//   - KINETIC_DIFF_MAX_PREPARED: kineticd's max_prepared_statements
//     (default: the product default, 200). A small value (2) makes the
//     transaction modes close and prepare statements again all the time:
//     at 2 on 2026-12-03, 2,000 sequences of seeds 616161, 434343 and
//     525252 in both transaction modes mismatched 4 / 2 / 2 times, against
//     1 (transaction mode alone) / 2 / 2 unbounded (0), all in the open
//     classes below (the same sequences for 434343 and 525252);
//   - KINETIC_DIFF_TIMEOUT_MS, KINETIC_DIFF_MAX_MISMATCHES (1000),
//     KINETIC_DIFF_SHOW (2), KINETIC_DIFF_LIST (20 sequences listed per class).
//
// The default run (10 000 sequences per mode plus the regressions) took
// 205 s on the 2-core machine on 2026-12-01, with KINETIC_DIFF_MAX_MISMATCHES
// raised so that every mode ran them all: PostgreSQL 29 s (344
// sequences/s; a fresh backend per sequence), session 30 s, session-routing
// 44 s, transaction 39 s, transaction-routing 61 s (those times include
// replaying mismatching sequences against PostgreSQL and 3 s per hang, the
// guard then).
// A longer run, e.g. before a release (about 35 minutes):
//
//	KINETIC_DIFFERENTIAL=1 KINETIC_DIFF_N=100000 \
//	  go test ./test/differential -run TestDifferential -v -timeout 2h
//
// (while the known classes are open a mode stops at
// KINETIC_DIFF_MAX_MISMATCHES; raise it once they are fixed).
//
// Open classes. 10,000 sequences per mode, mismatching sequences
// (session / session-routing / transaction / transaction-routing): base
// seed 424242 at 3c6beaa (start of the day's third session) 1 / 11 / 7 /
// 11, at f92abf7 (after the issue-12 changes too) 0 / 3 / 1 / 4; base seed
// 434343 0 / 15 / 4 / 15 midway, 0 / 9 / 1 / 9 later. In the day's
// fourth session, base seed 616161: 1 / 13 / 5 / 12 at its start (2bf9c30;
// hangs in every mode), 0 / 8 / 2 / 13 after its fixes (no hang); base
// seed 424242 0 / 4 / 2 / 5 midway. What is left, by class (each has a
// smallest sequence in the run's output):
//   - a unit routed at a Flush to a replica that then moves to the
//     primary (a Bind of a write follows): a portal the replica's part
//     made was missing there (34000, 42P03), and its SETs did not hold in
//     the rest of the unit. Both fixed on 2026-12-04 (the part's open
//     portals are bound again on the primary, replay.go; its SETs are
//     made again inside the rest's transaction); what is left is the
//     cases docs/behaviour.md, "A write after a Flush-ended read", lists
//     as not replayed;
//   - a Describe, inside a failed transaction, of a statement prepared on
//     another server connection whose parameter types the server infers
//     and no earlier Describe told, or in pipelined batches sent before
//     the failure was known: PostgreSQL answers ParameterDescription, the
//     proxy's re-Parse 25P02 (docs/behaviour.md);
//   - rarely, in transaction pooling, a statement missing on a pooled
//     connection (26000 where PostgreSQL binds it) or a Parse refused as
//     a duplicate (42P05), never when the sequence is replayed alone or
//     twice: state left by a concurrent sequence on a shared connection;
//   - rarely, a server connection whose settings differ from what the
//     proxy recorded for it (SHOW application_name empty, work_mem of
//     another client) in transaction pooling with routing on, never when
//     replayed alone;
//   - a session setting made with set_config(…, false) inside a
//     transaction on a replica: set_config pins the session to the
//     primary, where the setting is not (6641354203045480159);
//   - rarely (0 to 2 in 40,000 sequences, never when replayed alone) a
//     hang after an error in a Flush-ended unit continued to its Sync;
//     none in the last 40,000 after the barrier fix (seed
//     4456736391099484453, reproducible, fixed);
//   - once in 20,000 session-pooling sequences on 2026-12-02 (two runs of
//     base seed 616161 at ee6afb1), a hang at unit 0, the session's first
//     simple Query (5644605187107151553; it passes replayed alone, three
//     times, and the second run, with KINETIC_DIFF_HANGDUMP set, had none):
//     cause not found.
//
// On 2026-12-04, 3,000 sequences per mode: base seed 707070 found the
// Bind-after-a-failed-pipelined-batch class (fixed: settleBatches), 808080
// the SET-after-the-block's-COMMIT class (fixed: endEffects), 909090 two
// classes of the proxy's own portals in every mode, session pooling
// included (fixed); after the fixes, 909090 gives 0 in session pooling and
// 1 in transaction pooling (the inferred-type Describe above, not
// reproducible alone). The routed modes still show 4 to 6 in 3,000, of the
// Flush-move class above. (A SHOW pg_kinetic.write_lsn bound again from
// the unnamed statement in a later unit, before that unit Parsed another,
// was compared unmasked: the generator now follows the unnamed statement
// message by message.)
//
// Later on 2026-12-04, 10,000 sequences per mode (transaction /
// session-routing / transaction-routing; session pooling 0 throughout):
// base seed 141414 at the day's start 1 / 11 / 11; 151515 after the first
// fixes 1 / 12 / 10 (one class found there, 42704, was new, made by one
// of those fixes, and fixed before the next run); 161616 2 / 9 / 10; 171717
// after the portal replay (replay.go) 1 / 2 / 1, of which one class fixed
// since (4731248715818244482), one DataRow difference not reproduced
// alone (11238577937359139688), and in transaction pooling one hang at a
// sequence's first message, not reproduced alone either
// (10963455043048781606; the unit-0 hang above). The inferred-type
// Describe class (above) is the only known one left that reproduces.
//
// In the day's last session, 10,000 sequences per mode (session /
// session-routing / transaction / transaction-routing), each class fixed
// at its root with a regression seed:
//
//   - 191919 (after the moved-unit Flush fix, 37e1e2f, and the inferred
//     types learnt by a Describe after the client's Parse, b3d450c): 0 /
//     1 / 0 / 1, one class: the portal replay ran a BEGIN READ ONLY
//     portal of the replica part again on the primary (25006; fixed,
//     8ecc230);
//
//   - 202020: 1 / 10 / 3 / 11, most of it a panic 8ecc230 had brought
//     (XX000, fixed 1e81b99); besides, a Bind of a local unnamed
//     statement after a pipelined Parse the server skipped (all modes,
//     fixed d05541b), and a read-your-writes violation, 1 run in 2 on the
//     old code: a COMMIT in the rest of a unit routed at a Flush got no
//     WAL position read after it (fixed f3ec2ea, and
//     TestCommitInOpenUnitThenRead in test/e2e fails on it every time);
//
//   - 616161: 0 / 2 / 1 / 3 (fixed: a committed SET's ParameterStatus
//     dropped with a failed moved rest, 7b4a6d7; the inferred types of a
//     statement Parsed after other messages of its batch, 3c10e49);
//
//   - 232323 (on 3c10e49): 0 / 2 / 2 / 3 (fixed: a ROLLBACK in a unit
//     left the session with the SETs it undid, d86d6f1).
//
//   - 242424 (next session, after the monotonic-read fix): 0 / 1 / 1 / 2.
//     One class was the harness's: a SHOW pg_kinetic.write_lsn bound
//     again as the unnamed statement after a Parse the server skipped
//     (an error earlier in its batch), whose rows the generator did not
//     know to mask (4824126268394001096, both routed modes); the runner
//     now masks the rows of any one-column pg_kinetic.* RowDescription.
//     The other two are of the shared-connection class below, neither
//     reproduced alone (three replays each): 26000 for a Bind of the
//     unnamed statement in transaction pooling (17898864605248219015)
//     and, in a failed block, 08P01 "bind message supplies 0 parameters,
//     but prepared statement requires 1" for a name another sequence
//     prepared with another text (5826723512045767604). The first has a
//     cause found by reading and shown by a test that fails every time
//     on the old code (TestFailedReparseDropsUnnamed, test/e2e): the
//     proxy's own Parse of a client's unnamed statement on a shared
//     server connection ran and failed, and the record of that
//     connection went back to the unnamed statement it held before,
//     which PostgreSQL had released before parsing; another session
//     whose unnamed statement that was then bound it there unparsed
//     (26000). Fixed; whether it was this sequence's cause cannot be
//     shown, since the sequence never failed alone.
//
//   - 181818 (next session, on aa3fcd3): 0 / 1 / 1 / 3, four causes, each
//     fixed with a test that fails on the old code. A stale read with a
//     success status after two COPY FROM STDIN in a row, the first
//     failing (5889086208397092577, session-routing; 1 replay in 3 alone):
//     the position answer that paid the first COPY's debt arrived after
//     the second COPY was written and paid that one's too
//     (TestCopyAfterCopyReadsItsWrites; now a regression seed). A real
//     Parse injected ahead of a pipelined batch in a failed transaction
//     failed ahead of a Describe's NoData (2630309524058918675, both
//     transaction modes): a stand-in now serves after an Execute whose
//     portal cannot end the failed transaction
//     (TestStandInAfterFailingExecute). 26000 at a Bind of the unnamed
//     statement (6054448934885829353, 13373058581582800924,
//     transaction-routing): another session's login ran its settings
//     query on the shared connection, which dropped the unnamed statement
//     the record still named (TestLoginSettingsDropUnnamed; likely the
//     cause of 17898864605248219015 above too). And the 08P01 of
//     5826723512045767604 above: the record of a stand-in did not name
//     its parameter types, so another client's stand-in of the same name
//     was taken for this one's (TestStandInOfAnotherClient). None of the
//     last three reproduces alone: they need another sequence's state on
//     the shared connection, which the tests build directly.
//
//   - 272727 (same session, after the COPY and stand-in fixes): 0 / 1 /
//     1 / 1. A moved unit's portal bound from a statement its replica
//     part Closed was not bound again on the primary (34000;
//     15105487470337724142, both routed modes; fixed,
//     TestMovedPortalOfClosedStatement, a regression seed). A hang of 3 s
//     at a session's first unit in transaction pooling
//     (1392953651081257010: Execute of a missing portal, then Sync),
//     while other test clusters ran on the machine; not reproduced alone
//     (three replays), not diagnosed.
//
//   - 292929 (same session, on 36ace0d): 0 / 1 / 0 / 1, one class, the
//     harness's: 4824126268394001096's without a Describe
//     (7572398058732295921); the runner now follows the unnamed statement
//     by the answers (above).
//
//   - 313131 (same session, on 5967951): 0 / 1 / 0 / 1, one class, a
//     regression of 36ace0d: a moved unit's portal bound from a
//     SQL-PREPAREd statement was not bound again on the primary (34000;
//     10606531178692132101, fails alone every time; fixed, a regression
//     seed).
//
//   - 616161 (2026-12-04, session 19, on f8bf190): 0 / 0 / 2 / 1. The
//     transaction modes' "shared-connection" class, which never failed
//     alone, reproduces with the four sequences of that class run together
//     (KINETIC_DIFF_ONLY with all four: their statements meet on the pooled
//     connections), and was two causes, both fixed with an e2e test that
//     fails on the old code: (1) a batch pipelined behind others needing a
//     statement prepared again wrote the Parse ahead of the batch before
//     the batches ahead had failed the transaction, and the server failed
//     it with 25P02 in place of the batch's first answer
//     (15569880947103983533, 2024141487199610067;
//     TestPipelinedBatchInFailedTx); (2) a Describe of a SQL-PREPAREd
//     statement kept no place in the queue of Describes awaiting answers,
//     so its parameter types and row shape were recorded for the next
//     Describe's statement, and that statement, prepared again elsewhere,
//     failed its Bind with 0A000 (17198292917881895050;
//     TestDescribeOfPreparedThenParsed). After them 616161 passes 10,000
//     in every mode (0 / 0 / 0 / 0).
//
//   - 343434 (same session): 0 / 1 / 0 / 1, one class, deterministic: COMMIT
//     AND CHAIN ending a failed READ ONLY transaction on a standby kept the
//     chained (read-write) transaction there, and its UPDATE failed with
//     25006 (4050215125046564123; fixed for the simple protocol,
//     TestChainAfterFailedReadOnlyTx, a regression seed; for the extended
//     protocol on 2026-12-05).
//
//   - 353535 (same session): 0 / 0 / 0 / 0. 363636 in the transaction
//     modes with KINETIC_DIFF_MAX_PREPARED=2: 0 / 0.
//
// Open after them: the 3 s hang of 1392953651081257010 (transaction
// pooling, 272727 above), not reproduced. 383838 (same session, after the
// fixes above) found two more deterministic sequences in three modes, one
// cause, pre-existing: the portals of a transaction ended by COMMIT AND
// CHAIN outlived it (997645668052297296, 10764206626928849785: fixed,
// regression seeds); 393939: 0 / 0 / 0 / 0.
//
// 2026-12-05 (session 20), on 034b30a and the fixes as they landed:
//
//   - 404040: 0 / 1 / 0 / 0: a Parse of a name in a batch pipelined behind
//     one whose Close of the name the server skipped after an error; the
//     proxy took the Close as done and sent the batch to a standby, which
//     accepted the Parse where PostgreSQL answers 42P05
//     (3433646377040350236, the whole sequence every time; fixed in
//     settleReferences, a regression seed).
//   - 414141: 0 / 0 / 0 / 0.
//   - 424242: 0 / 1 / 0 / 1, deterministic: the ParameterStatus of a
//     setting a ROLLBACK reverted in a standby's part of a moved unit was
//     withheld when the rest failed (2726224269824871064; fixed in
//     committedLast, a regression seed).
//   - 434343: 0 / 0 / 0 / 0.
//   - 444444: 1 / 2 / 1 / 2, two classes, both deterministic and
//     pre-existing: a Bind of a statement that never existed into a portal
//     name the proxy's own portal held got the proxy's 08P01 where
//     PostgreSQL answers 26000 (11085008348091833454, every mode); and an
//     open batch's replay log, taken after the batch was written, lost the
//     statement a portal was bound from when the batch also Closed it, so
//     a Parse of the name after the Flush passed for it (08P01 on the
//     primary where PostgreSQL binds; 18422407613234683055). Both fixed,
//     regression seeds.
//   - 454545: 1 / 2 / 1 / 2, two classes, deterministic. Fixed: a standby
//     part's SET that its own COMMIT settled was not reported when the
//     moved rest failed (11978386151710806781, a regression seed). Open:
//     a portal the proxy answers itself (RESET pg_kinetic.min_lsn bound to
//     p2) outlived a ROLLBACK TO SAVEPOINT of a savepoint set before it,
//     55000 where PostgreSQL answers 34000 (253629366981453510; the proxy
//     tracked no savepoints; fixed the next session, now a regression
//     seed, and with it the rolled-back SETs a ROLLBACK TO SAVEPOINT
//     undid, which the proxy had kept and replayed on the replicas).
//   - 464646 (after those fixes): 0 / 0 / 0 / 0.
//   - 2026-12-05, second session: 474747: 0 / 0 / 0 / 0; 484848 widened
//     (KINETIC_DIFF_WIDEN=1, 23 sequences/s a mode): 10,000 in session and
//     session-routing, 6,000 in transaction and transaction-routing, 0
//     mismatching in each.
//   - 2026-12-05, third session, with savepoints followed (649c737):
//     494949: 0 / 0 / 0 / 0; 505050 widened, 4,000 in session-routing and
//     transaction-routing: 0 / 0. 515151 on the session's final code
//     (after the issue 13 splits, 28c748d): 0 / 0 / 0 / 0.
//   - 2026-12-05, fifth session, on d4f01c7: 535353 widened with the
//     opt-in +flushsync feature, 3,000 sequences in every mode: 0 / 0 /
//     0 / 0.
//   - 2026-12-06, 262626 widened with +flushsync, 3,000 sequences in every
//     mode: 0 / 1 / 0 / 1, one sequence, deterministic and pre-existing:
//     a Describe of the unnamed statement came before a Parse of s1 in
//     the same batch (on a standby), so the proxy did not learn s1's
//     parameter types; Described in a failed transaction on the primary,
//     which lacked s1, it got 25P02 where PostgreSQL answers
//     ParameterDescription and NoData (9943076375906529190; fixed: the
//     proxy's learning Describe is told from the client's by their
//     order, learnTypes; a regression seed). 272727 widened, 4,000
//     sequences in the two routing modes, on that fix: 0 / 1 / - / 1, one
//     sequence the fix made: its learning Describe came between a
//     client's Close and a barrier, the client's CloseComplete did not
//     count for the barrier, whose own CloseComplete then reached the
//     client, and the batch hung (5085097148163703010; fixed,
//     closeAnsweredLocked, a regression seed). Again on that: 0 / 0.
//   - 2026-12-07: 120726, 1,500 a mode: 0 / 0 / 0 / 0. 7120726, 20,000 a
//     mode: 1 / 1 / 1 / 1, one sequence, deterministic and pre-existing: a
//     batch answered SHOW pg_kinetic.min_lsn into portal p1 among server
//     messages (runWithLocal, which predicts nothing of its end) and failed
//     at its Sync; the next batch, pipelined, Bound p1 again and got the
//     proxy's 42P03 where PostgreSQL binds, its Sync having dropped p1
//     (16826262521981934636; fixed, settleLocalPortals: a batch naming a
//     portal of the proxy's waits for the units before it; a regression
//     seed). 9120726 widened, 5,000 a mode (with the routing of a batch
//     the client stops inside, 7efc952): 0 / 0 / 0 / 0. 1207001, 20,000 a
//     mode, on the session's final code (8502b9d): 0 / 0 / 0 / 0.
//   - 2026-12-07 (second session): with BEGIN READ ONLY deferred to its
//     first statement (5a931b5), the regression seed 165219353907536178
//     mismatched in both routing modes: a block a proxy-answered
//     statement failed (a pg_kinetic.* portal run twice) before any of it
//     reached a server ran the next, extended-protocol, unit in a fresh
//     block on the server; pre-existing for a plain BEGIN, which no seed
//     had hit (fixed, 822bd09: the server's block is failed first).
//     1207301, 8,000 a mode, on that: 0 / 0 / 0 / 0. 9120727 widened,
//     5,000 a mode (51f57f1): 1 / 0 / 0 / 0, one sequence whose first
//     Query got no answer within the harness's 10 s in session pooling,
//     routing off, with no warning from kineticd
//     (11865074896951575445); replayed alone three times, widened, it
//     passes. The harness's pool (12) and acquire timeout (10 s) equal
//     that wait: a pool exhausted for a moment under the widened delays
//     would look so. Not explained; not a regression seed.
//   - 2026-12-07, third session, with SET TRANSACTION spellings drawn
//     from a stream of their own (6232dc4's generator): 1207071, 8,000 a
//     mode, before 6232dc4's proxy change: 0 / 25 / 0 / 25, all 25P02
//     where PostgreSQL answers: BEGIN then SET TRANSACTION READ WRITE,
//     READ ONLY, held with the BEGIN and placed on a standby, which fails
//     at READ WRITE; the failure was swallowed with the held text
//     (17381810680918992214; READ WRITE anywhere now opens on the
//     primary, a regression seed). After it: 0 / 1 / 0 / 1, pre-existing
//     and deterministic: a portal the proxy answers itself, bound after a
//     SHOW pg_kinetic.* and a deferred BEGIN (units answered by the proxy
//     alone), was taken for one ended with the SHOW's implicit
//     transaction; its Execute in the block, failed meanwhile, went to
//     the server: 34000 where PostgreSQL answers 25P02
//     (2797153498643118594; portal ages count every unit now, unitAge, a
//     regression seed). 1207072, 8,000 a mode, after both: 0 / 0 / 0 / 0.
//     1207073 with +flushsync, 8,000 a mode: 0 / 0 / 1 / 1, in
//     transaction pooling, pre-existing, in about one full run of two
//     (never alone): a SET of a block that failed was kept when the batch
//     ending the block went on after its COMMIT (a second COMMIT, outside
//     any block, answered COMMIT and was matched with the first, which had
//     rolled back); a pooled connection made the session's again later got
//     application_name 'diff b' where PostgreSQL has 'diff', and the
//     client's own SET of it went unreported (5658341513511382388; a COMMIT
//     in a failed block is recorded as the ROLLBACK it is now; e2e
//     TestFailedBlockEndedInABatch shows it deterministically, so not a
//     regression seed). After it, twice: 0 in transaction pooling.
//     1207074 with +flushsync, 8,000 a mode: 0 / 0 / 0 / 0. 1207075
//     widened, 3,000 a mode: 1 / in session pooling, routing off,
//     deterministic and pre-existing: a portal of the proxy's made in an
//     open batch before a COMMIT, then Flush, outlived the COMMIT (42P03 on
//     the next Bind into its name where PostgreSQL binds;
//     2841039418419940571 keep=0,1,2, fixed in runWithLocal, a regression
//     seed).
//     1207076 widened with +flushsync, 3,000 a mode, after that fix:
//     0 / 1 / 0 / 1, the same sequence in both routed modes, deterministic and
//     pre-existing, a documented deviation, not a regression seed
//     (16085799062053696390): a named statement parsed in a unit that
//     moved from a replica to the primary was prepared on the primary only
//     when a later block bound it, after a suspended portal of an UPDATE …
//     RETURNING; the proxy's Parse advanced the command counter, and the
//     statement updated rows PostgreSQL's same-command rule hides
//     (docs/behaviour.md, "A statement prepared again advances the command
//     counter").
//   - 2026-12-07, sixth session, after the linear statement-op queue
//     (6c6cb2c) and the primary's WAL flush for held-back reads (93512c6):
//     1207081 with +flushsync, 8,000 a mode: 0 / 0 / 0 / 0. 1207082
//     widened with +flushsync, 3,000 a mode: 0 / 0 / 0 / 0. 1207083, 8,000
//     a mode: 0 / 0 / 0 / 0.
//   - 2026-12-07, seventh session, after the settings epoch, the replay's
//     RESET of role and session authorization, SQL PREPARE on the primary
//     and sequences read there (75efc98, c0f77ee, a368f80): 1207085,
//     3,000 a mode: 0 / 0 / 0 / 0. 1207086 widened with +flushsync,
//     1,500 a mode: 0 / 0 / 0 / 0.
//   - 2026-12-07, eighth session, after pg_temp.name pinning, placeholder
//     RESETs and the re-Parse of EXECUTE name (18d3f8f, 6e5df55): 1207087,
//     3,000 a mode: 0 / 0 / 0 / 0. 1207088 widened with +flushsync, 1,500
//     a mode: 0 / 0 / 0 / 0.
//   - 2026-12-07, ninth session, after unqualified CREATEs under a
//     search_path naming pg_temp pin (8ce64e8): 1207089 and 1207090, 3,000
//     a mode: 0 / 0 / 0 / 0 each. 1207091 widened with +flushsync, 1,500 a
//     mode: 0 / 0 / 0 / 0.
//   - 2026-12-07, tenth session, after the write token's ParameterStatus
//     was held out of responses (ce94ea8): 1207092, 3,000 a mode: 0 / 0 /
//     0 / 0; 1207093 widened with +flushsync, 1,500 a mode: 0 / 0 / 0 /
//     0. With the token's place checked: 1207094, 3,000 a mode, 0 / 15 /
//     0 / 19 before the fix to proxy-answered units, 0 / 0 / 0 / 0 after.
//     616161, 10,000 a mode, run twice: once 1 / 0 / 0 / 0 (a session
//     mismatch without routing, where there are no tokens; the log was
//     not kept and a rerun of the mode passed), once 0 / 0 / 0 / 0.
//     2026-12-08, after the wait judged as decided (judgeLocked),
//     read_consistency and the EXECUTE-loop Describe (591b244): 1207095,
//     3,000 a mode: 0 / 0 / 0 / 0; 1207096 widened with +flushsync,
//     1,500 a mode: 0 / 0 / 0 / 0.
//
// So `make test` replays the regression seeds in every mode and runs
// 10,000 sequences (616161) in every mode: that run passed in every mode
// four times out of four after the shared-connection fixes of 2026-12-04
// (twice on the final code of that day, with the AND CHAIN fixes). A
// new seed still finds a class now and then (343434 and 383838 above, each
// deterministic); `make differential` with another KINETIC_DIFF_SEED is
// the way to look for them.
//
// Regressions: testdata/regressions.txt holds one sequence a line ("SEED
// [keep=I,J] [twice] [features=...] # mode: class"), replayed first in
// every mode. keep= lists the units a minimisation kept; twice marks a
// mismatch that needs the state a previous client left on a pooled server
// connection (transaction pooling): the sequence runs once before the
// compared run. The seeds mean what they say only as long as the generator
// makes the same sequences: a change to gen.go that alters them must
// re-minimise the file (KINETIC_DIFF_MINIMIZE=1 on the old seeds' classes).
//
// TestGenerate* check the generator without PostgreSQL (deterministic per
// seed, valid shapes, every feature produced) and run in every `go test`.
package differential
