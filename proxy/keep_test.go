package proxy

import "testing"

// TestFailedStatus: the transaction status a unit in flight is answered
// with when the primary is lost under it (keepAfterLoss) is PostgreSQL's
// after that unit failed, as the units ahead of it leave the block.
func TestFailedStatus(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tx    byte       // status of the last ReadyForQuery
		ahead []unitFate // units in flight ahead of it
		u     unitInfo
		want  byte
	}{
		{name: "autocommit write", tx: 'I', u: unitInfo{}, want: 'I'},
		{name: "BEGIN", tx: 'I', u: unitInfo{begins: true, lastTx: 'b'}, want: 'E'},
		{name: "BEGIN; INSERT; COMMIT", tx: 'I', u: unitInfo{begins: true, lastTx: 'e'}, want: 'I'},
		{name: "a statement in a block", tx: 'T', u: unitInfo{}, want: 'E'},
		{name: "a statement in a failed block", tx: 'E', u: unitInfo{}, want: 'E'},
		{name: "COMMIT", tx: 'T', u: unitInfo{txEnd: true, lastTx: 'e'}, want: 'I'},
		{name: "behind a pipelined BEGIN", tx: 'I', ahead: []unitFate{{status: 'E'}}, u: unitInfo{}, want: 'E'},
		{name: "behind a pipelined COMMIT", tx: 'T', ahead: []unitFate{{status: 'I'}}, u: unitInfo{}, want: 'I'},
	} {
		ss := &session{}
		ss.mu.tx = tc.tx
		ss.mu.fates = tc.ahead
		ss.mu.pending = len(tc.ahead)
		if got := ss.failedStatusLocked(tc.u); got != tc.want {
			t.Errorf("%s: %c, want %c", tc.name, got, tc.want)
		}
	}
}

// TestKeepableUnit: a unit whose loss with the primary leaves the session
// going on is one the proxy can answer whole.
func TestKeepableUnit(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    unitInfo
		want bool
	}{
		{"a write", unitInfo{}, true},
		{"a block", unitInfo{begins: true, lastTx: 'b'}, true},
		{"COPY FROM STDIN", unitInfo{copyIn: true}, false},
		{"COMMIT AND CHAIN", unitInfo{chained: true}, false},
		{"CREATE TEMP TABLE", unitInfo{pinEffect: true}, false},
	} {
		if got := keepableUnit(tc.u); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestClosesOnly: only a unit of Closes and its one Sync is answered
// CloseComplete when the primary is lost under it.
func TestClosesOnly(t *testing.T) {
	unit := func(types string) *batch {
		b := &batch{}
		for _, c := range []byte(types) {
			b.add(c, nil)
		}
		return b
	}
	for _, tc := range []struct {
		types string
		want  int
	}{
		{"CS", 1},
		{"CCCS", 3},
		{"S", 0},
		{"C", 0},     // no Sync yet (streamed on)
		{"CHS", 0},   // a Flush in it
		{"PBECS", 0}, // runs something
		{"CSCS", 0},  // (two units)
	} {
		if got := closesOnly(unit(tc.types)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.types, got, tc.want)
		}
	}
}
