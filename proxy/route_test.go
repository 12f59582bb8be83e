package proxy

import (
	"testing"

	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

func TestDecide(t *testing.T) {
	prefer := sessionInfo{mode: "prefer_replica", fallback: "primary"}
	read := unitInfo{read: true}
	both := []candidate{{addr: "a", weight: 1, eligible: true}, {addr: "b", weight: 3, eligible: true}}
	down := []candidate{{addr: "a", weight: 1, reason: "replica_unavailable"}, {addr: "b", weight: 1, reason: "split_brain"}}
	for _, tc := range []struct {
		name  string
		s     sessionInfo
		u     unitInfo
		cands []candidate
		rnd   float64
		want  decision
	}{
		{"weighted low", prefer, read, both, 0.1, decision{target: targetReplica, addr: "a", reason: "read"}},
		{"weighted high", prefer, read, both, 0.5, decision{target: targetReplica, addr: "b", reason: "read"}},
		{"weight zero drains", prefer, read, []candidate{{addr: "a", weight: 0, eligible: true}, {addr: "b", weight: 2, eligible: true}}, 0, decision{target: targetReplica, addr: "b", reason: "read"}},
		{"no replica eligible", prefer, read, down, 0.3, decision{target: targetPrimary, addr: "", reason: "split_brain"}},
		{"no replicas configured", prefer, read, nil, 0.3, decision{target: targetPrimary, addr: "", reason: "replica_unavailable"}},
		{"a reachable replica's reason wins, either order", prefer, read, []candidate{{addr: "a", weight: 1, reason: "read_your_writes"}, {addr: "b", weight: 1, reason: "replica_unavailable"}}, 0, decision{target: targetPrimary, reason: "read_your_writes"}},
		{"a reachable replica's reason wins, other order", prefer, read, []candidate{{addr: "b", weight: 1, reason: "replica_unavailable"}, {addr: "a", weight: 1, reason: "read_your_writes"}}, 0, decision{target: targetPrimary, reason: "read_your_writes"}},
		{"require_replica rejects", sessionInfo{mode: "require_replica", fallback: "primary"}, read, down, 0, decision{target: targetRejected, addr: "", reason: "split_brain"}},
		{"fallback reject", sessionInfo{mode: "prefer_replica", fallback: "reject"}, read, nil, 0, decision{target: targetRejected, addr: "", reason: "replica_unavailable"}},
		{"write", prefer, unitInfo{reason: "write"}, both, 0, decision{target: targetPrimary, addr: "", reason: "write"}},
		{"unclassified", prefer, unitInfo{reason: "unclassified"}, both, 0, decision{target: targetPrimary, addr: "", reason: "unclassified"}},
		{"hint primary", prefer, unitInfo{read: true, hintPrim: true}, both, 0, decision{target: targetPrimary, addr: "", reason: "hint_primary"}},
		{"routing off", sessionInfo{mode: "off"}, read, both, 0, decision{target: targetPrimary, addr: "", reason: "routing_off"}},
		{"pinned session", sessionInfo{mode: "prefer_replica", pinned: "session_pinned"}, read, both, 0, decision{target: targetPrimary, addr: "", reason: "session_pinned"}},
		{"pinning statement", prefer, unitInfo{read: true, pinEffect: true}, both, 0, decision{target: targetPrimary, addr: "", reason: "session_pinned"}},
		{"in transaction on primary", sessionInfo{mode: "prefer_replica", inTx: true, cur: "p"}, read, both, 0, decision{target: targetPrimary, addr: "", reason: "in_transaction"}},
		{"in read-only transaction on a replica", sessionInfo{mode: "prefer_replica", inTx: true, cur: "b", curReplica: true}, unitInfo{reason: "write"}, both, 0, decision{target: targetReplica, addr: "b", reason: "in_transaction"}},
		{"pipelined read stays on its replica", sessionInfo{mode: "prefer_replica", cur: "b", curReplica: true}, read, both, 0, decision{target: targetReplica, addr: "b", reason: "read"}},
		{"pipelined read leaves an ineligible replica", sessionInfo{mode: "prefer_replica", cur: "b", curReplica: true}, read, []candidate{{addr: "a", weight: 1, eligible: true}, {addr: "b", weight: 1}}, 0.9, decision{target: targetReplica, addr: "a", reason: "read"}},
	} {
		if got := decide(tc.s, tc.u, tc.cands, tc.rnd); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestMergeExternal(t *testing.T) {
	tok := func(tli uint32, lsn uint64) freshness.Token {
		return freshness.Token{Timeline: tli, LSN: freshness.LSN(lsn)}
	}
	for _, tc := range []struct {
		name       string
		floor, ext freshness.Token
		current    uint32
		want       freshness.Token
	}{
		{"no external token", tok(2, 100), freshness.Token{}, 2, tok(2, 100)},
		{"same timeline, external higher", tok(2, 100), tok(2, 200), 2, tok(2, 200)},
		{"same timeline, floor higher", tok(2, 300), tok(2, 200), 2, tok(2, 300)},
		{"bare token is the current timeline", tok(2, 100), tok(0, 200), 2, tok(2, 200)},
		{"older timeline wins over a newer floor", tok(2, 900), tok(1, 50), 2, tok(1, 50)},
		{"newer external timeline than the floor", tok(1, 900), tok(2, 50), 2, tok(1, 900)},
		{"no floor", freshness.Token{}, tok(1, 50), 2, tok(1, 50)},
	} {
		if got := mergeExternal(tc.floor, tc.ext, tc.current); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPrimaryChanged: what ends a read's wait for a replica while the
// primary it was planned with is down (waitForReplica): a reachable
// primary other than the one planned with, or the same one reachable
// again after it was seen down. An elected primary that is down, or
// nothing elected, does not.
func TestPrimaryChanged(t *testing.T) {
	old := health.Verdict{Target: health.Target{Addr: "p:5432", Configured: health.RolePrimary}, Elected: true, Timeline: 1}
	oldUp := old
	oldUp.Reachable, oldUp.Detected = true, health.RolePrimary
	promoted := health.Verdict{Target: health.Target{Addr: "s1:5432", Configured: health.RoleStandby},
		Reachable: true, Elected: true, Timeline: 2, Detected: health.RolePrimary}
	promotedDown := promoted
	promotedDown.Reachable = false
	for _, tc := range []struct {
		name string
		was  health.Verdict
		snap *health.Snapshot
		want bool
	}{
		{"nothing in the snapshot", old, health.NewSnapshot(), false},
		{"the same primary, still down", old, health.NewSnapshot(old), false},
		{"the same primary, reachable again", old, health.NewSnapshot(oldUp), true},
		{"another primary elected", old, health.NewSnapshot(promoted), true},
		{"another primary elected, but down", old, health.NewSnapshot(promotedDown), false},
		{"planned reachable (a dial failed), the same seen down now", oldUp, health.NewSnapshot(old), false},
		{"planned reachable, the same still reachable", oldUp, health.NewSnapshot(oldUp), false},
		{"planned reachable, another elected", oldUp, health.NewSnapshot(promoted), true},
	} {
		if got := primaryChanged(tc.was, tc.snap); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
