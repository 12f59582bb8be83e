// Package relay measures what kineticd adds to one query round trip. Its
// tests (relay_test.go) run a pgconn client against a scripted fake
// PostgreSQL server (package test/pgmock) directly, and through an
// in-process kineticd in front of the same server, for result sets of 1 and
// 100 rows over the simple and the extended protocol:
//
//	go test -run XXX -bench Relay -benchmem ./test/bench/relay/
//
// The fake server answers from pre-encoded bytes and does no work, so the
// difference between BenchmarkRelay/direct/... and BenchmarkRelay/proxy/...
// is the proxy's cost per round trip: its latency in ns/op, and its
// allocations (client, proxy and fake server share one process, so
// allocs/op of the proxy case minus the direct case is the proxy's).
//
// The package holds no code besides its tests; go test ./... runs only
// TestRelay, a quick check that the fake server and the proxy relay what
// the benchmarks rely on.
package relay
