// Package classify will decide, with the real PostgreSQL parser
// (pg_query_go), whether a unit of work is a read a replica may serve
// (SPEC §3) and parse leading-comment hints (SPEC §4). Decisions will be
// pure functions of the statement text and configuration, cached by text.
// It is empty in this release: read routing is off, every unit goes to the
// primary.
package classify
