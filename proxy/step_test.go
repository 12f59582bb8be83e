package proxy

import (
	"testing"

	"github.com/pg-kinetic/pg-kinetic/config"
)

// stepSession is a session with the state stepLocked reads: routing on
// (freshnessOn), session pooling, cur = l.
func stepSession(l *link) *session {
	ss := &session{
		route: &config.Route{Replicas: []config.Endpoint{{Address: "r:5432"}},
			ReadRouting: config.ReadRouting{ReadRoutingMode: config.RoutingPreferReplica}},
	}
	ss.mu.tx = 'I'
	ss.initWaits()
	ss.mu.cur = l
	return ss
}

// linkState is the part of a link stepLocked reads (a link holds atomics:
// built per row).
type linkState struct {
	swallow       []expect
	barrier       int
	rfqs, batches uint64
	replica       bool
	describes     []describeWait
}

// TestStepLocked feeds backend message types to stepLocked over link
// states, one row per rule: what is dropped, what reaches the client, and
// what the arrival settles (barriers, the injection queue, failures).
func TestStepLocked(t *testing.T) {
	type check func(t *testing.T, l *link, st relayStep)
	dropped := func(want bool) check {
		return func(t *testing.T, _ *link, st relayStep) {
			if st.drop != want {
				t.Errorf("drop = %v, want %v", st.drop, want)
			}
		}
	}
	barrier := func(want int) check {
		return func(t *testing.T, l *link, _ relayStep) {
			if l.barrier != want {
				t.Errorf("barrier = %d, want %d", l.barrier, want)
			}
		}
	}
	queue := func(want int) check {
		return func(t *testing.T, l *link, _ relayStep) {
			if len(l.swallow) != want {
				t.Errorf("%d injected answers still expected, want %d", len(l.swallow), want)
			}
		}
	}
	undone := func(want int) check {
		return func(t *testing.T, l *link, _ relayStep) {
			if len(l.undo) != want {
				t.Errorf("%d records taken back, want %d", len(l.undo), want)
			}
		}
	}
	rec := &stmtOp{kind: 'R', name: "s1"}
	for _, tc := range []struct {
		rule    string
		link    linkState
		tx      byte
		types   string // message types, in order; the checks apply after the last
		checks  []check
		endInj  bool
		fatal   bool
		errInjd bool
	}{
		{"a barrier's CloseComplete: dropped, the barrier passes",
			linkState{swallow: []expect{{kind: 'b'}}, barrier: barrierPending}, 'T', "3",
			[]check{dropped(true), barrier(barrierPassed), queue(0)}, false, false, false},
		{"the client's own Close before the barrier: relayed, the barrier still waits",
			linkState{swallow: []expect{{kind: 'b', skip: 1}}, barrier: barrierPending}, 'T', "3",
			[]check{dropped(false), barrier(barrierPending), queue(1)}, false, false, false},
		{"... then the barrier's: dropped",
			linkState{swallow: []expect{{kind: 'b', skip: 1}}, barrier: barrierPending}, 'T', "33",
			[]check{dropped(true), barrier(barrierPassed), queue(0)}, false, false, false},
		{"the client's Close answered while another injected answer heads the queue still counts for the barrier behind it",
			linkState{swallow: []expect{{kind: '1'}, {kind: 'b', skip: 1}}, barrier: barrierPending}, 'T', "313",
			[]check{dropped(true), barrier(barrierPassed), queue(0)}, false, false, false},
		{"a learnTypes Describe between the client's Close and the barrier (differential 5085097148163703010)",
			linkState{swallow: []expect{{kind: 'i'}, {kind: 'b', skip: 1}}, barrier: barrierPending}, 'T', "31tn3",
			[]check{dropped(true), barrier(barrierPassed), queue(0)}, false, false, false},
		{"an error before the barrier: relayed, the barrier fails (the server skips to Sync)",
			linkState{swallow: []expect{{kind: 'b'}, {kind: '1', undo: rec}}, barrier: barrierPending}, 'T', "E",
			[]check{dropped(false), barrier(barrierFailed), queue(0), undone(1)}, false, false, false},
		{"an injected Parse answered: dropped",
			linkState{swallow: []expect{{kind: '1'}}}, 'T', "1",
			[]check{dropped(true), queue(0)}, false, false, false},
		{"an injected Query's answers up to its ReadyForQuery: dropped, the last ends it",
			linkState{swallow: []expect{{kind: 'Z'}}}, 'I', "CZ",
			[]check{dropped(true)}, true, false, false},
		{"a notification during an injected Query: relayed",
			linkState{swallow: []expect{{kind: 'Z'}}}, 'I', "A",
			[]check{dropped(false), queue(1)}, false, false, false},
		{"an injected Parse failed inside the client's batch: relayed as the client's error",
			linkState{swallow: []expect{{kind: '1', undo: rec}}}, 'T', "E",
			[]check{dropped(false), queue(0), undone(1)}, false, false, true},
		{"an injected Parse of the unnamed statement failed: the record goes back to none, not to the statement PostgreSQL released before parsing",
			linkState{swallow: []expect{{kind: '1', undo: &stmtOp{kind: 'R', prevServer: "Pold", hadServer: true}}}}, 'T', "E",
			[]check{dropped(false), queue(0), undone(1), func(t *testing.T, l *link, _ relayStep) {
				if u := l.undo[0]; u.prevServer != "" {
					t.Errorf("the failed Parse's undo restores %q, want none", u.prevServer)
				}
			}}, false, false, true},
		{"... but one skipped after an earlier injected statement's error keeps it",
			linkState{swallow: []expect{{kind: '3', undo: &stmtOp{kind: 'R', name: "s1"}}, {kind: '1', undo: &stmtOp{kind: 'R', prevServer: "Pold", hadServer: true}}}}, 'T', "E",
			[]check{dropped(false), queue(0), undone(2), func(t *testing.T, l *link, _ relayStep) {
				if u := l.undo[1]; u.prevServer != "Pold" {
					t.Errorf("the skipped Parse's undo restores %q, want the old statement", u.prevServer)
				}
			}}, false, false, true},
		{"an injected Parse failed before its own Sync: dropped with the injected Sync's answer",
			linkState{swallow: []expect{{kind: '1', undo: rec}, {kind: 'Z'}}}, 'T', "E",
			[]check{dropped(true), queue(1), undone(1)}, false, false, false},
		{"a local error the proxy failed the batch with: dropped, later barriers fail",
			linkState{swallow: []expect{{kind: 'E'}, {kind: 'b'}}, barrier: barrierPending}, 'T', "E",
			[]check{dropped(true), barrier(barrierFailed), queue(0)}, false, false, false},
		{"the client's ParseComplete ahead of the learnTypes Describe's answer: relayed",
			linkState{swallow: []expect{{kind: 'i', parse: "p"}}}, 'T', "1",
			[]check{dropped(false), queue(1)}, false, false, false},
		{"... then the Describe's ParameterDescription: dropped, its types noted",
			linkState{swallow: []expect{{kind: 'i', parse: "p"}}}, 'T', "1t",
			[]check{dropped(true), queue(1), func(t *testing.T, _ *link, st relayStep) {
				if st.inferred != "p" {
					t.Errorf("inferred = %q, want the statement's Parse body", st.inferred)
				}
			}}, false, false, false},
		{"... and its NoData: dropped, the Describe answered",
			linkState{swallow: []expect{{kind: 'i', parse: "p"}}}, 'T', "1tn",
			[]check{dropped(true), queue(0)}, false, false, false},
		{"the ParameterDescription of the client's Describe written before the proxy's: relayed (differential 9943076375906529190)",
			linkState{swallow: []expect{{kind: 'i', parse: "p", after: 1}}, describes: []describeWait{{seq: 1}}}, 'T', "t",
			[]check{dropped(false), queue(1)}, false, false, false},
		{"a client's Describe written after the proxy's does not hold it up: dropped",
			linkState{swallow: []expect{{kind: 'i', parse: "p", after: 1}}, describes: []describeWait{{seq: 2}}}, 'T', "t",
			[]check{dropped(true), queue(1)}, false, false, false},
		{"a RowDescription before the Describe's ParameterDescription is not its answer: relayed",
			linkState{swallow: []expect{{kind: 'i', parse: "p"}}}, 'T', "T",
			[]check{dropped(false), queue(1)}, false, false, false},
		{"the client's Parse failed: its error relayed as its own, the skipped Describe forgotten",
			linkState{swallow: []expect{{kind: 'i', parse: "p"}}}, 'T', "E",
			[]check{dropped(false), queue(0)}, false, false, false},
		{"answers expected for a batch already ended: forgotten, their records taken back",
			linkState{swallow: []expect{{kind: '1', undo: rec}}, rfqs: 1, batches: 2}, 'T', "C",
			[]check{dropped(false), queue(0), undone(1)}, false, false, false},
		{"from a replica nobody waits on: dropped",
			linkState{replica: true}, 'I', "S",
			[]check{dropped(true)}, false, false, false},
		{"an error from the session's primary while nothing is owed: dropped, FATAL checked",
			linkState{}, 'I', "E",
			[]check{dropped(true)}, false, true, false},
		{"an error from the primary answering the client: relayed",
			linkState{batches: 1}, 'I', "E",
			[]check{dropped(false)}, false, false, false},
		{"a notice from the primary while nothing is owed: relayed (LISTEN pins the session there)",
			linkState{}, 'I', "N",
			[]check{dropped(false)}, false, false, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			l := link{swallow: tc.link.swallow, barrier: tc.link.barrier, rfqs: tc.link.rfqs, batches: tc.link.batches, replica: tc.link.replica,
				describes: tc.link.describes}
			ss := stepSession(&l)
			ss.mu.tx = tc.tx
			if l.replica {
				ss.mu.cur = nil
			}
			var st relayStep
			ss.mu.Lock()
			for i := 0; i < len(tc.types); i++ {
				st = ss.stepLocked(&l, tc.types[i])
			}
			ss.mu.Unlock()
			for _, c := range tc.checks {
				c(t, &l, st)
			}
			if st.endInjected != tc.endInj || st.deferFatal != tc.fatal || l.errInjected != tc.errInjd {
				t.Errorf("endInjected %v deferFatal %v errInjected %v, want %v %v %v",
					st.endInjected, st.deferFatal, l.errInjected, tc.endInj, tc.fatal, tc.errInjd)
			}
		})
	}
}
