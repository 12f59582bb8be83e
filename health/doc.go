// Package health probes PostgreSQL servers and publishes what it saw as
// immutable verdict snapshots that readers never block on (SPEC §5).
//
// A Checker runs one probe loop per target server address. Each loop probes
// at once, then again every Interval; a probe is bounded by Timeout and a
// late one fails. After a failure the loop backs off (Interval, 2·Interval,
// 4·Interval, ... capped at MaxBackoff), but the failed verdict (unreachable)
// is published at once. Every verdict replaces the previous one of its
// server in a new Snapshot, swapped in whole through an atomic pointer; the
// channel of the replaced snapshot is closed, so waiters wake on new
// verdicts instead of sleeping.
//
// The probe (PGProber) is one query on a connection kept open between
// probes: pg_is_in_recovery(), the system identifier, the timeline, and the
// WAL positions (a primary's insert position; a standby's receive and replay
// positions and whether replay is paused). A standby whose timeline the
// query could only take from its restartpoint (no pg_read_all_stats), while
// a primary of its system is on a later one, is also asked IDENTIFY_SYSTEM
// on a short replication connection (a role with REPLICATION), at most as
// often as identify.go says: the timeline it replays.
//
// Lag is derived, never asked of PostgreSQL: per route, the Checker keeps a
// short history of the configured primary's positions (Sample) and judges
// each standby's replay position against the samples read before it
// (EstimateLag): LagMS is 0 whenever the standby has replayed everything the
// primary was known to have written, so an idle pair is never lagging. A
// new primary sample updates every standby verdict of the route in the same
// snapshot, and so does a change of the primary's system identifier, which
// standbys are checked against (IdentityMismatch). Hurry asks a loop for an
// early probe, for reads waiting on a replay position.
//
// Deciding whether a verdict makes a server eligible for a read is package
// freshness's job, with the caller's clock; health only records what was
// seen and when.
//
// Contract:
//   - The Checker owns its loop goroutines. NewChecker starts them,
//     SetTargets starts and stops them, Close stops them all and returns
//     only after they have ended and the Prober has forgotten their servers.
//   - Snapshot, Changed and the Snapshot methods never block and are safe
//     from any goroutine, concurrently with everything else. A Snapshot is
//     never modified after publication; All returns a copy.
//   - SetTargets and Close are safe to call concurrently with each other and
//     with readers. SetTargets waits for removed loops to end; Close waits for
//     all of them. Both cancel a probe in flight, so the wait is short: the
//     Prober's return from a cancelled Probe plus its Forget (PGProber:
//     closing the connection, which is bounded for a server that stopped
//     answering).
//   - No lock is held across a probe. The Prober is the only I/O; the clock
//     and the timer are injected (Options.Clock, and a testing knob), so tests
//     drive time instead of sleeping.
//   - Logging is of state changes only: unreachable, reachable again, a
//     detected role, system identifier or timeline change, replay paused or
//     resumed, a role or identity mismatch starting or ending.
//   - Hurry never blocks; probes of one server never overlap, hurried or
//     not.
//   - A Checker is keyed by server address: a route whose servers are probed
//     with their own credentials and database uses its own Checker, and a
//     PGProber serves one Checker.
package health
