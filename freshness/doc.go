// Package freshness decides whether a replica may serve a read: pure
// functions of a health verdict, the read's requirement and the current time
// passed in by the caller (SPEC §5). It reads no clock, opens no socket,
// starts no goroutine and keeps no state, so every function is safe to call
// concurrently and never blocks.
//
// This release decides on health alone: a replica is eligible when its
// latest verdict is recent, says it is reachable, and detected it as a
// standby. The next release adds WAL positions, TIMELINE:LSN tokens, lag
// budgets and strict-fresh reads as new Requirement fields and new rules in
// Eligible; existing callers keep their meaning.
package freshness
