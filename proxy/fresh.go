package proxy

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

// Kinds of WAL position a session reads (positionDue, applyPosition).
const (
	captureWrite    = 'W' // after a unit on the primary that may have written: token and floor
	captureRead     = 'R' // after a read on the primary: floor only
	captureReplay   = 'r' // after a read on a replica: noted as seen (affinity.go), nothing is read (its replay position)
	capturePosition = 'P' // strict-fresh: the primary's position as a statement begins
)

// freshnessOn reports whether the session's route routes reads, so WAL
// positions matter. With routing off no position is ever read.
func (ss *session) freshnessOn() bool {
	return ss.routingMode() != config.RoutingOff && len(ss.route.Replicas) > 0
}

// routingMode is the route's read_routing_mode, except that a replication
// connection (walsender, COPY BOTH) is never routed: it talks to the
// primary only and the proxy adds nothing to it.
func (ss *session) routingMode() string {
	if ss.replication {
		return config.RoutingOff
	}
	return ss.route.ReadRouting.ReadRoutingMode
}

// unsureWrite is a write the session committed on the primary of
// timeline timeline whose position there was never read: its position
// query failed (the primary died, the reader's connection dropped), its
// server connection was lost with the query still due, it was a COPY FROM
// STDIN, or the query was answered by a later primary after a failover.
// All of it lies after after (the token when it was noted). A position
// read on that same timeline, asked for after it was noted (seq), covers
// it; once the route's primary is on a later timeline, the write may have
// been lost and the session is told so (planUnit: KN002). Zero: none.
type unsureWrite struct {
	timeline uint32
	after    freshness.Token
	seq      uint64 // fresh.requests when it was noted
	// The latest unsure write noted (it may be this one): an answer that
	// covers the earliest but was asked for before the latest leaves the
	// latest unsure.
	lastTimeline uint32
	lastSeq      uint64
}

// markUnsureLocked notes a write on the primary of timeline tl whose
// position will not be read (unsureWrite). The earliest such write is
// kept until it is covered or told. tl 0 (the primary's timeline is not
// known) notes nothing: nothing can be judged of it. Callers hold ss.mu.
func (ss *session) markUnsureLocked(tl uint32) {
	if tl == 0 {
		return
	}
	u := &ss.mu.fresh.unsure
	if u.timeline == 0 || tl < u.timeline {
		u.timeline, u.after, u.seq = tl, ss.mu.fresh.token, ss.mu.fresh.requests
	}
	u.lastTimeline, u.lastSeq = tl, ss.mu.fresh.requests
}

// oweCaptureLocked notes that the session owes itself a read of the
// primary's position (captureDebt): only an answer to a request made
// from now on pays it. Callers hold ss.mu.
func (ss *session) oweCaptureLocked() {
	ss.mu.fresh.captureDebt = true
	ss.mu.fresh.debtSeq = ss.mu.fresh.requests
}

// writeTimelineLocked is the timeline of the primary at addr, where a
// unit that may have written ran, as the probes last saw it: the timeline
// its commit is on. When its last probe failed (it may just have died), the
// route's elected timeline, then the token's; 0 when none is known.
// Callers hold ss.mu.
func (ss *session) writeTimelineLocked(addr string) uint32 {
	if ss.srv != nil && ss.route != nil {
		if snap := ss.srv.snapshotOf(ss.route.Name); snap != nil {
			if v, ok := snap.Get(addr); ok && v.Timeline != 0 {
				return v.Timeline
			}
			if e, ok := snap.Election(ss.route.Name); ok && e.Timeline != 0 {
				return e.Timeline
			}
		}
	}
	return ss.mu.fresh.token.Timeline
}

// applyPosition uncounts a position read for kind and, when ok, applies
// tok: a write's token (told to the client as ParameterStatus
// pg_kinetic.write_lsn, without waiting for it) and floor, a read's floor.
// clearsDebt: it was read to pay captureDebt. tl is the timeline of the
// primary the write ran on (0 unknown; captureWrite only) and seq the
// request's number (requestPositionLocked).
//
// A write's position read on a later timeline than its own does not name
// the write (the primary changed in between): the token stays, and the
// write is unsure (unsureWrite). A position read on an unsure write's
// timeline after it was noted covers it: the token rises to it.
func (ss *session) applyPosition(kind byte, tok freshness.Token, ok bool, clearsDebt bool, tl uint32, seq uint64) {
	var status2 *pgproto3.ParameterStatus
	ss.mu.Lock()
	ss.mu.fresh.captures--
	raiseToken := func() {
		if ss.mu.fresh.token.Less(tok) {
			if old := ss.mu.fresh.token; old.Timeline != 0 && old.Timeline < tok.Timeline && ss.mu.fresh.prior.Timeline == 0 &&
				old != ss.mu.fresh.told {
				// A later primary's position replaces a token that may
				// name a write the failover lost: kept to be judged
				// (unless the session was told KN002 with it: told).
				ss.mu.fresh.prior = old
			}
			ss.mu.fresh.token = tok
			status2 = &pgproto3.ParameterStatus{Name: "pg_kinetic.write_lsn", Value: tok.String()}
		}
	}
	if ok && kind != captureReplay {
		if u := ss.mu.fresh.unsure; u.timeline != 0 && tok.Timeline == u.timeline && seq > u.seq {
			raiseToken()
			ss.mu.fresh.unsure = unsureWrite{}
			if seq <= u.lastSeq {
				// A later unsure write was noted after this was asked
				// for: it is not covered.
				ss.mu.fresh.unsure = unsureWrite{timeline: u.lastTimeline, after: ss.mu.fresh.token, seq: u.lastSeq,
					lastTimeline: u.lastTimeline, lastSeq: u.lastSeq}
			}
		}
	}
	if ok {
		switch kind {
		case captureWrite:
			if tl != 0 && tok.Timeline > tl {
				ss.markUnsureLocked(tl)
			} else {
				raiseToken()
			}
			ss.raiseFloorLocked(tok)
		case captureRead:
			ss.raiseFloorLocked(tok)
		}
		if clearsDebt && seq > ss.mu.fresh.debtSeq {
			// (A debt incurred after this was asked for — a COPY FROM
			// STDIN run meanwhile — stays: the position may be before
			// that write's commit.)
			ss.mu.fresh.captureDebt = false
		}
	} else if kind != capturePosition {
		// What the unit wrote or saw is unknown: reads go to the primary
		// until a position is read (payCaptureDebt).
		ss.oweCaptureLocked()
		if kind == captureWrite {
			ss.markUnsureLocked(tl)
		}
	}
	ss.turn.Broadcast()
	ss.mu.Unlock()
	if status2 != nil {
		ss.tellToken(status2)
	}
}

// tellToken tells the client its new token: at once when no unit is in
// flight (the last message the client got is a ReadyForQuery and the
// proxy has sent the server nothing since), else just before the ReadyForQuery that ends the
// unit in flight (copyToClient, send), as PostgreSQL reports a parameter
// only before a ReadyForQuery. A client in a COPY FROM STDIN reads its
// messages until the ReadyForQuery in a loop of its own, and lib/pq's
// fails at anything it does not expect there ("unknown response during
// CopyIn": TestTokenNotInsideCopy). A later token replaces a held one.
func (ss *session) tellToken(ps *pgproto3.ParameterStatus) {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	ss.mu.Lock()
	// (pending falls under wmu, after the ReadyForQuery is written:
	// copyToClient.)
	busy := ss.mu.pending > 0 || ss.mu.unsynced || !ss.params.afterReady
	ss.mu.Unlock()
	if busy {
		ss.params.token = ps
		return
	}
	ss.params.token = nil
	buf, err := ps.Encode(nil)
	if err != nil {
		return
	}
	if _, err := ss.out().Write(buf); err != nil {
		return // the client is gone; its session sees it too
	}
	ss.flushOut()
}

// positionReader is the route's WAL position reader, or nil.
func (ss *session) positionReader() *freshness.Reader {
	if r := ss.runtime(); r != nil {
		return r.reader
	}
	return nil
}

// positionDue is a primary position the session reads once l's batch
// number batch is answered: after the unit it follows.
type positionDue struct {
	batch    uint64
	kind     byte
	timeline uint32 // captureWrite: the timeline of the primary it ran on (writeTimelineLocked)
}

// positionAfterLocked asks for the primary's position once l answers
// batch (a unit's last): the route's reader reads it on its own
// connection, after that ReadyForQuery, so it is at or after the unit's
// commit. Callers hold ss.mu.
func (ss *session) positionAfterLocked(l *link, batch uint64, kind byte) {
	ss.mu.fresh.captures++
	var tl uint32
	if kind == captureWrite {
		tl = ss.writeTimelineLocked(l.addr)
	}
	if l.rfqs >= batch {
		// Answered already (the unit was flushed as it was written): a
		// request now is after its ReadyForQuery.
		if ss.mu.tx != 'I' {
			ss.mu.fresh.captures--
			ss.turn.Broadcast()
			return
		}
		if kind == captureWrite {
			ss.mu.fresh.wrote = false // (the token will cover them)
		}
		ss.requestPositionLocked(kind, false, tl)
		return
	}
	if l.dead && l.kept {
		// The unit failed with its primary, and the session went on
		// (positionsLostLocked).
		ss.mu.fresh.captures--
		ss.turn.Broadcast()
		return
	}
	if l.dead {
		ss.mu.fresh.captures--
		ss.oweCaptureLocked()
		if kind == captureWrite {
			ss.markUnsureLocked(tl)
		}
		ss.turn.Broadcast()
		return
	}
	l.due = append(l.due, positionDue{batch: batch, kind: kind, timeline: tl})
}

// seenAfterLocked notes, once l answers batch (a read's last), that the
// session read from l's replica (noteSeenLocked). Callers hold ss.mu.
func (ss *session) seenAfterLocked(l *link, batch uint64) {
	if l.rfqs >= batch || l.dead {
		ss.noteSeenLocked(l.addr)
		return
	}
	l.due = append(l.due, positionDue{batch: batch, kind: captureReplay})
}

// seenBlockedNow reports whether the last decision found a replica
// eligible but for the session's unbounded reads elsewhere.
func (ss *session) seenBlockedNow() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.mu.fresh.seenBlocked && len(ss.mu.fresh.seen) > 0
}

// positionsDueLocked requests the positions due at l's ReadyForQuery
// with status. One inside a transaction block is not after a commit (the
// unit opened one): nothing is read. Callers hold ss.mu.
func (ss *session) positionsDueLocked(l *link, status byte) {
	for len(l.due) > 0 && l.due[0].batch <= l.rfqs {
		d := l.due[0]
		l.due = l.due[1:]
		if d.kind == captureReplay {
			ss.noteSeenLocked(l.addr) // (uncounted: nothing is read)
			continue
		}
		if status != 'I' {
			ss.mu.fresh.captures--
			continue
		}
		if d.kind == captureWrite {
			ss.mu.fresh.wrote = false // (the token will cover them)
		}
		ss.requestPositionLocked(d.kind, false, d.timeline)
	}
	if len(l.due) == 0 {
		l.due = nil
	}
}

// requestPositionLocked asks the route's reader for a position read after
// now. Callers hold ss.mu (Request never blocks, its answer comes on
// another goroutine).
//
// A session that has not read from a replica yet asks in no hurry
// (RequestLater): nothing of its own waits for the position, so it is
// read together with other sessions' within the reader's delay (10 ms),
// and a write-only workload costs the primary at most about a hundred
// position queries a second instead of one per transaction. Whatever
// needs the position first — a read to route (waitCaptures), SHOW
// pg_kinetic.write_lsn — hurries it.
func (ss *session) requestPositionLocked(kind byte, clearsDebt bool, tl uint32) {
	rd := ss.positionReader()
	if rd == nil {
		ss.mu.fresh.captures--
		if kind != capturePosition {
			ss.oweCaptureLocked()
		}
		if kind == captureWrite {
			ss.markUnsureLocked(tl)
		}
		ss.turn.Broadcast()
		return
	}
	ss.mu.fresh.requests++
	seq := ss.mu.fresh.requests
	done := func(tok freshness.Token, err error) {
		if err != nil {
			ss.log.Debug("WAL position not read", zap.Error(err))
		}
		ss.applyPosition(kind, tok, err == nil, clearsDebt, tl, seq)
	}
	if !ss.mu.fresh.usedReplica && !clearsDebt && (kind == captureWrite || kind == captureRead) {
		rd.RequestLater(done)
		return
	}
	rd.Request(done)
}

// positionsLostLocked uncounts the positions due on a link that failed.
// owed: what those units wrote is unknown (captureDebt; a write is an
// unsure one). Not owed: the units in flight failed with the primary and
// the session went on (keepAfterLoss); the client was told each failed
// (08006) or that its outcome is unknown (08007), so no read of its owes
// them anything. (positionsDueLocked has already asked for those of every
// unit answered.) A replica's replay note is kept either way. Callers
// hold ss.mu.
func (ss *session) positionsLostLocked(l *link, owed bool) {
	for _, d := range l.due {
		if d.kind == captureReplay {
			// The read may have reached the client: it counts as seen.
			ss.noteSeenLocked(l.addr)
			continue
		}
		ss.mu.fresh.captures--
		if !owed {
			continue
		}
		ss.oweCaptureLocked()
		if d.kind == captureWrite {
			ss.markUnsureLocked(d.timeline)
		}
	}
	l.due = nil
	ss.turn.Broadcast()
}

// raiseFloorLocked moves the monotonic-read floor up to t. Callers hold
// ss.mu.
func (ss *session) raiseFloorLocked(t freshness.Token) {
	if ss.mu.fresh.floor.Less(t) {
		ss.mu.fresh.floor = t
	}
}

// readRequirement is what a read of this session needs from a replica
// (SPEC §5), given the route's policy and the unit's hints.
func (ss *session) readRequirement(u unitInfo, primary health.Verdict) freshness.Requirement {
	ss.mu.Lock()
	floor, token, minLSN := ss.mu.fresh.floor, ss.mu.fresh.token, ss.mu.fresh.minLSN
	ss.mu.Unlock()
	return requirement(ss.route, u, primary.Timeline, floor, token, minLSN)
}

// requirement is readRequirement over its facts (pure): the route's
// freshness policy, the unit's hints, the primary's timeline and the
// session's floor, write token and SET pg_kinetic.min_lsn.
func requirement(rt *config.Route, u unitInfo, primaryTimeline uint32, floor, token, minLSN freshness.Token) freshness.Requirement {
	f := rt.Freshness
	req := freshness.Requirement{VerdictTTL: rt.HA.VerdictTTL(), PrimaryTimeline: primaryTimeline}
	lagBudget, useFloor := false, false
	switch f.FreshnessPolicy {
	case config.FreshnessMaxLag:
		lagBudget = true
	case config.FreshnessSessionWriteLSN:
		useFloor = true
	case config.FreshnessSessionWriteLSNAndMax:
		lagBudget, useFloor = true, true
	}
	if u.staleOK {
		// Bounded staleness: the lag budget, not the session's writes.
		lagBudget, useFloor = true, false
	}
	if lagBudget {
		req.MaxLagMS, req.MaxLagBytes = int64(f.MaxReplicaLagMS), f.MaxReplicaLagBytes
	}
	if useFloor {
		// The session's own positions: a newer timeline supersedes an
		// older one, because the session has since read from the new
		// primary (that is how its floor got there).
		req.Floor = floor
		if req.Floor.Less(token) {
			req.Floor = token
		}
	}
	req.Floor = mergeExternal(req.Floor, minLSN, primaryTimeline)
	req.Floor = mergeExternal(req.Floor, u.minLSN, primaryTimeline)
	return req
}

// mergeExternal adds a token from elsewhere (a min_lsn hint, SET
// pg_kinetic.min_lsn) to a floor. On one timeline the larger position
// wins. On different timelines the older one wins: nothing proves its
// position lies before the switch point, so it must send the read to the
// primary (Eligible says timeline_changed), whatever the session's own
// floor. A bare token (timeline 0) means the current timeline.
func mergeExternal(floor, ext freshness.Token, current uint32) freshness.Token {
	if ext.IsZero() {
		return floor
	}
	if ext.Timeline == 0 {
		ext.Timeline = current
	}
	switch {
	case floor.IsZero():
		return ext
	case floor.Timeline == ext.Timeline || floor.Timeline == 0 || ext.Timeline == 0:
		if floor.LSN < ext.LSN {
			if ext.Timeline == 0 {
				ext.Timeline = floor.Timeline
			}
			return ext
		}
		return floor
	case ext.Timeline < floor.Timeline:
		return ext
	}
	return floor
}

// strictPosition reads the primary's current WAL position for a
// strict-fresh read: one round trip of the route's reader (batched with
// other sessions'), only for such reads.
func (ss *session) strictPosition() (freshness.Token, bool) {
	rd := ss.positionReader()
	if rd == nil {
		return freshness.Token{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), captureWait)
	defer cancel()
	tok, err := rd.Read(ctx)
	if err != nil {
		return freshness.Token{}, false // the read goes to the primary
	}
	return tok, true
}

// captureWait bounds waitCaptures. A position query answers right after
// the unit it follows; waiting longer means a long statement pipelined
// ahead of the read, or a position query lost to a bug. Either way the read
// goes to the primary, which is always fresh, instead of waiting on.
var captureWait = 5 * time.Second

// waitCaptures waits until every WAL position query in flight has
// answered, so a read is routed with the session's latest token. It
// reports false when some are still unanswered after captureWait (or the
// session was killed): the caller must not rely on the token then.
func (ss *session) waitCaptures() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.mu.fresh.captures <= 0 || ss.mu.killed {
		return ss.mu.fresh.captures <= 0
	}
	if rd := ss.positionReader(); rd != nil {
		rd.Hurry() // positions asked for in no hurry (requestPositionLocked)
	}
	expired := false
	defer ss.wakeAfter(captureWait, &expired).Stop()
	// A capture on a link that fails is uncounted by linkFailed.
	for ss.mu.fresh.captures > 0 && !ss.mu.killed && !expired {
		ss.turn.Wait()
	}
	if ss.mu.fresh.captures > 0 && !ss.mu.killed {
		ss.log.Warn("WAL position query unanswered; this unit treats the session's token as unknown",
			zap.Duration("waited", captureWait), zap.Int("in_flight", ss.mu.fresh.captures))
	}
	return ss.mu.fresh.captures <= 0
}

// waitForReplica waits, up to the route's read_after_write_timeout_ms,
// until decide would send unit u (req, the servers tried for it) to a
// replica (judgeLocked), hurrying the probes of the replicas that are
// behind and of those the session read from, so fresh replay positions
// arrive quickly. It never sleeps a fixed time: it wakes on each new
// health snapshot.
//
// With primary (the primary's verdict the unit was planned with) it also
// returns, false, as soon as another primary is elected or that one is
// seen reachable again: the unit is then planned anew.
func (ss *session) waitForReplica(u unitInfo, tried map[string]bool, req freshness.Requirement, primary *health.Verdict) bool {
	checker := ss.runtime().checkerOf()
	if checker == nil {
		return false
	}
	deadline := time.NewTimer(ss.route.Freshness.ReadAfterWriteTimeout())
	defer deadline.Stop()
	start := time.Now()
	var hurry []string
	for {
		snap := checker.Snapshot()
		hurry = hurry[:0]
		ss.mu.Lock()
		cands, _ := ss.judgeLocked(snap, ss.routingMode(), u, tried, req)
		ready := false
		for _, c := range cands {
			if c.eligible && c.weight > 0 {
				ready = true
			} else if !tried[c.addr] {
				hurry = append(hurry, c.addr)
			}
		}
		for _, s := range ss.mu.fresh.seen {
			hurry = append(hurry, s.addr) // (a probe begun after its read bounds it)
		}
		ss.mu.Unlock()
		if ready {
			ss.srv.metrics.ReadWait(time.Since(start).Seconds())
			return true
		}
		for _, addr := range hurry {
			checker.Hurry(addr)
		}
		if primary != nil && primaryChanged(*primary, snap) {
			return false
		}
		select {
		case <-snap.Changed():
		case <-deadline.C:
			ss.srv.metrics.ReadWait(time.Since(start).Seconds())
			ss.log.Debug("no replica caught up within read_after_write_timeout_ms",
				zap.Duration("waited", time.Since(start)))
			return false
		}
	}
}

// primaryChanged reports whether snap's primary is reachable and another
// than was (another server or timeline), or was seen unreachable.
func primaryChanged(was health.Verdict, snap *health.Snapshot) bool {
	now, ok := snap.Primary()
	return ok && now.Reachable && (now.Addr != was.Addr || now.Timeline != was.Timeline || !was.Reachable)
}
