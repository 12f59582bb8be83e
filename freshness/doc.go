// Package freshness decides whether a replica may serve a read: pure
// functions of a health verdict, the read's requirement and the current time
// passed in by the caller (SPEC §5). It reads no clock, opens no socket,
// starts no goroutine and keeps no state, so every function is safe to call
// concurrently and never blocks.
//
// It owns the vocabulary of positions: LSN (PostgreSQL's "X/Y", compared as
// a 64-bit number, never as text) and Token ("TIMELINE:LSN", the
// read-your-writes token of SPEC §5). Eligible applies, in a fixed order,
// the health rules (a recent verdict, reachable, a standby, same system
// identifier as the route primary), then the read's floor (timeline, then
// replay position), then its lag budget, and names the first rule that
// fails with a SPEC §8 reason word.
package freshness
