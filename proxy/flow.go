package proxy

// flowState is where the session goroutine stands in the client's stream
// of messages between one unit and the next: the state of clientToServer's
// loop. A unit is the client's messages up to a Sync, or a simple Query
// or FunctionCall; most units are collected whole and routed at their
// end, but a unit ended by Flush (a row-limited Execute, a cursor fetched
// in steps), one too big to hold, and one whose server is fixed before
// its Sync (routing off, an open transaction, a pinned session) are
// routed before their end, and the rest follows.
//
//	collecting  the client's messages gather into a batch until a Sync, a
//	            Flush, a Query or a FunctionCall ends it, and the batch is
//	            routed whole (routeBatch). COPY data follows the server
//	            the COPY runs on.
//	following   a unit already routed is open on a server (unitFlow.l):
//	            its messages go there as they arrive (followStream), until
//	            its Sync or Query (endStream). A write after the part a
//	            replica ran moves the rest of the unit (endReplicaStream):
//	            back to collecting, with the part's portals to bind again
//	            where the rest goes (replayDue).
//	skipping    the open unit failed before its server could fail it
//	            (rejected by the router, or an error of a message the
//	            proxy answers itself): as PostgreSQL does after an error,
//	            messages are dropped up to the unit's Sync (skipMessage),
//	            which the open unit's server answers if it has one (it
//	            skips to that Sync too), else the proxy.
//
// Transitions, all in clientToServer and the functions it calls:
//
//	collecting -> following   a unit routed open reached a server (open)
//	collecting -> skipping    a unit routed open failed first (open)
//	following  -> following   a message the proxy answers itself (open)
//	following  -> skipping    such a message failed (open)
//	following  -> collecting  the unit's Sync or Query was forwarded, or its
//	                          replica part ended and the rest is collected
//	                          anew (close)
//	skipping   -> collecting  the unit's Sync (close)
type flowState uint8

const (
	collecting flowState = iota
	following
	skipping
)

func (s flowState) String() string {
	switch s {
	case collecting:
		return "collecting"
	case following:
		return "following"
	case skipping:
		return "skipping"
	}
	return "unknown"
}

// unitFlow is the session goroutine's flow state (flowState) and what it
// keeps of the unit that is open: its server, what the router knew of it,
// and the portals a replica's part of it made.
type unitFlow struct {
	state flowState
	// l: following, the open unit's server; skipping, the server that
	// answers the unit's Sync (nil: the proxy answers it).
	l *link
	// unit is what the router knew of the open unit (for the position
	// query when its Sync comes), merged with what its later messages run
	// (noteStreamed).
	unit unitInfo
	// replay: the replica part of the open unit, while it is on a
	// replica; replayDue: that part once the unit moved to the primary,
	// until the rest is routed there (replay.go).
	replay, replayDue *replayLog
}

// open records a unit routed before its end: following l, or skipping to
// its Sync when it failed before a server could fail it (l, if any,
// answers that Sync). A unit answered by the proxy alone so far (no
// server, not failed) leaves the flow collecting.
func (f *unitFlow) open(l *link, failed bool) {
	switch {
	case failed:
		f.state = skipping
	case l != nil:
		f.state = following
	default:
		f.state = collecting
	}
	f.l = l
}

// close ends the open unit: the next messages form a new batch.
func (f *unitFlow) close() {
	f.state, f.l = collecting, nil
}
