// Package classify decides, with the real PostgreSQL parser (pg_query_go,
// the PostgreSQL 17 grammar), what a query text does for routing (SPEC §3),
// and reads the hints of its leading comment (SPEC §4).
//
// A Classifier turns a text into a Decision: one Statement per statement,
// each a read or a write, with its transaction-control role (Tx) and the
// session effect the router must track (Effect: a replayable setting, a pin
// to the primary, PREPARE/EXECUTE/DEALLOCATE, DISCARD ALL, UNLISTEN). The
// text is a read only when every statement is. A text the parser rejects is
// a write with reason "unclassified". Function calls are sorted by name
// into writes (nextval, pg_advisory_*, set_config, lo_*, … and the
// configured write_functions), known-safe built-ins (functions.go), and
// the rest, which Decision.Funcs lists for the router's catalog lookup of
// volatility.
//
// Decisions are pure functions of the text and the Options: no I/O, no
// clock. They are cached at two levels, each a bounded, sharded LRU: by
// exact text, where a hit neither parses nor allocates; and by shape
// (shape.go), the text with its constants replaced (by a scanner in Go,
// scanshape.go, or pg_query's normaliser for what it declines), so that a
// statement sent with different literals costs one scan instead of a
// parse. Only decisions that cannot depend on a
// constant's value are shared by shape (plain queries; never SET,
// set_config, EXPLAIN options, COPY, PREPARE/EXECUTE…); hint comments are
// part of the shape. Stats counts the answers of each level. A Classifier
// is safe for concurrent use; nothing blocks but a short shard mutex.
// Returned Decisions share their slices with the cache and must not be
// modified.
//
// A miss costs one parse. Plain SELECTs are answered from pg_query's JSON
// output (fastpath.go), a few times cheaper than its protobuf tree; every
// other text is classified on the protobuf tree (statement.go). The two
// must agree, and the corpus test and FuzzClassify check that they do.
// Texts that are not valid UTF-8 (clients with another client_encoding)
// are classified through a reversible stand-in (encoding.go).
//
// testdata/corpus.txt pins the expected decision of every statement shape
// we route; add an entry with every rule change.
package classify
