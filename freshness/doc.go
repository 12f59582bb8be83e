// Package freshness will hold WAL positions, TIMELINE:LSN tokens and the
// pure eligibility decision "may replica R serve this read now" (SPEC §5).
// It is empty in this release.
package freshness
