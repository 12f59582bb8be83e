package proxy

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pg-kinetic/pg-kinetic/config"
	"github.com/pg-kinetic/pg-kinetic/freshness"
	"github.com/pg-kinetic/pg-kinetic/health"
)

// Monotonic reads without a statement per read (SPEC §5). A standby that
// keeps running never replays backwards, so a session's reads that need
// read-your-writes stay on the replica they last used (affine) while it
// is eligible: nothing needs to be read after them. To move to another
// replica the session needs an upper bound of what it saw on the one it
// read from: the first replay position probed there after its read
// (health.Verdict.ProbedAt is when a probe began), or the primary's
// position read after it. Until one is known the read may use that
// replica alone. A standby that restarted (its pg_postmaster_start_time
// changed) counts as another replica: after a crash it may accept queries
// at its minimum recovery point, behind what it showed before. Tolerant
// reads (stale-ok, a lag budget alone) balance per unit as before, and
// what they saw is bounded the same way.

// affineCounts counts, by replica address, the sessions whose
// read-your-writes reads stay there (sessionFreshness.affine). A read
// that will stay where it goes picks the replica with the fewest for its
// weight: picked at random, 16 sessions of two replicas of equal weight
// split 30/70 or worse in a third of the benchmark runs, and stayed so,
// the busier replica the bottleneck where each has its own host. Two
// routes on one cluster share the counts (the load is the server's).
type affineCounts struct {
	m sync.Map // address -> *atomic.Int64
}

func (a *affineCounts) counter(addr string) *atomic.Int64 {
	if v, ok := a.m.Load(addr); ok {
		return v.(*atomic.Int64)
	}
	v, _ := a.m.LoadOrStore(addr, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// count is how many sessions stay on addr.
func (a *affineCounts) count(addr string) int64 {
	if v, ok := a.m.Load(addr); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// move notes a session staying on to instead of from ("": none).
func (a *affineCounts) move(from, to string) {
	if from == to {
		return
	}
	if from != "" {
		a.counter(from).Add(-1)
	}
	if to != "" {
		a.counter(to).Add(1)
	}
}

// heavier reports whether a, with na sessions, carries more for its
// weight than b would with nb: na/wa > nb/wb.
func heavier(na int64, wa int, nb int64, wb int) bool {
	return na*int64(wb) > nb*int64(wa)
}

// lightest is the eligible candidate (weight above 0; there is one) with
// the fewest sessions staying on it for its weight; rnd in [0,1) breaks
// ties by weight, as decide's random pick does.
func (a *affineCounts) lightest(cands []candidate, rnd float64) candidate {
	var buf [8]int64
	counts := buf[:0]
	var best int64 = -1
	bestW, total := 0, 0
	for _, c := range cands {
		n := int64(-1) // (not a candidate)
		if c.eligible && c.weight > 0 {
			n = a.count(c.addr)
			switch {
			case best < 0 || heavier(best, bestW, n, c.weight):
				best, bestW, total = n, c.weight, c.weight
			case !heavier(n, c.weight, best, bestW):
				total += c.weight // as light: a tie
			}
		}
		counts = append(counts, n)
	}
	pick := int(rnd * float64(total))
	var last candidate
	for i, c := range cands {
		if n := counts[i]; n < 0 || heavier(n, c.weight, best, bestW) {
			continue
		}
		last = c
		if pick < c.weight {
			return c
		}
		pick -= c.weight
	}
	return last
}

// lighter returns the eligible candidate other than cur, the session's
// own replica, that cur's sessions (this one among them) outweigh even
// with this one moved there, if any: the lightest such. A move never
// makes the two uneven the other way, so sessions do not go back and
// forth. nil a: none.
func (a *affineCounts) lighter(cur candidate, cands []candidate) (candidate, bool) {
	if a == nil || !slices.ContainsFunc(cands, func(c candidate) bool { return c.addr != cur.addr && c.eligible && c.weight > 0 }) {
		// (No other replica it may use, as while what it read last is
		// not bounded: no count is looked at, on every read.)
		return candidate{}, false
	}
	n := a.count(cur.addr)
	var best candidate
	var bestN int64 = -1
	for _, c := range cands {
		if c.addr == cur.addr || !c.eligible || c.weight <= 0 {
			continue
		}
		m := a.count(c.addr)
		if heavier(n, cur.weight, m+1, c.weight) && (bestN < 0 || heavier(bestN, best.weight, m, c.weight)) {
			best, bestN = c, m
		}
	}
	return best, bestN >= 0
}

// leaveAffine uncounts the session's replica at its end.
func (ss *session) leaveAffine() {
	ss.mu.Lock()
	addr := ss.mu.fresh.affine
	ss.mu.fresh.affine = ""
	ss.mu.Unlock()
	if addr != "" && ss.srv != nil {
		ss.srv.affine.move(addr, "")
	}
}

// seenRead is a replica a session read from whose replay position since
// is not yet bounded.
type seenRead struct {
	addr    string
	at      time.Time // the read's ReadyForQuery
	started time.Time // the replica's StartedAt as probed then (zero: unknown)
}

// needsFloor reports whether u's read must see the session's writes and
// what it saw before (the route's policy has a floor, and no stale-ok).
func (ss *session) needsFloor(u unitInfo) bool {
	switch ss.route.Freshness.FreshnessPolicy {
	case config.FreshnessSessionWriteLSN, config.FreshnessSessionWriteLSNAndMax:
		return !u.staleOK
	}
	return false
}

// snapshot is the route's latest health snapshot, or nil.
func (ss *session) snapshot() *health.Snapshot {
	if c := ss.runtime().checkerOf(); c != nil {
		return c.Snapshot()
	}
	return nil
}

// noteSeenLocked records a read on replica addr that just ended.
// Callers hold ss.mu.
func (ss *session) noteSeenLocked(addr string) {
	s := seenRead{addr: addr, at: time.Now()}
	if snap := ss.snapshot(); snap != nil {
		if v, ok := snap.Get(addr); ok {
			s.started = v.StartedAt
		}
	}
	for i := range ss.mu.fresh.seen {
		if ss.mu.fresh.seen[i].addr == addr && ss.mu.fresh.seen[i].started.Equal(s.started) {
			ss.mu.fresh.seen[i].at = s.at // a later read: a later probe bounds both
			return
		}
	}
	ss.mu.fresh.seen = append(ss.mu.fresh.seen, s)
}

// boundSeenLocked raises the floor to the replay position probed on each
// replica the session read from, by a probe begun after the read there
// (the replica not restarted in between), and forgets those reads.
// Callers hold ss.mu.
func (ss *session) boundSeenLocked(snap *health.Snapshot) {
	if len(ss.mu.fresh.seen) == 0 || snap == nil {
		return
	}
	kept := ss.mu.fresh.seen[:0]
	for _, s := range ss.mu.fresh.seen {
		v, ok := snap.Get(s.addr)
		if ok && v.Reachable && v.Err == "" && v.Detected == health.RoleStandby && v.ReplayLSN != 0 &&
			v.ProbedAt.After(s.at) && !s.started.IsZero() && v.StartedAt.Equal(s.started) {
			ss.raiseFloorLocked(freshness.Token{Timeline: v.Timeline, LSN: freshness.LSN(v.ReplayLSN)})
			continue
		}
		kept = append(kept, s)
	}
	ss.mu.fresh.seen = kept
}

// restrictToSeenLocked makes a read that needs the floor ineligible on
// every replica but the one it read from while what it saw there is not
// bounded (on any replica, when it read from several), and on that one if
// it restarted since. Callers hold ss.mu.
// It reports whether it took away the last eligible replica (then a
// bound from the primary may open the others: boundSeenByPrimary).
func (ss *session) restrictToSeenLocked(cands []candidate, snap *health.Snapshot) (blocked bool) {
	if len(ss.mu.fresh.seen) == 0 {
		return false
	}
	before := slices.ContainsFunc(cands, func(c candidate) bool { return c.eligible && c.weight > 0 })
	defer func() {
		blocked = before && !slices.ContainsFunc(cands, func(c candidate) bool { return c.eligible && c.weight > 0 })
	}()
	for i := range cands {
		c := &cands[i]
		if !c.eligible {
			continue
		}
		for _, s := range ss.mu.fresh.seen {
			restarted := false
			if snap != nil {
				if v, ok := snap.Get(c.addr); ok && s.addr == c.addr && !v.StartedAt.Equal(s.started) {
					restarted = true
				}
			}
			if s.addr != c.addr || restarted {
				c.eligible, c.reason = false, reasonReadYourWrites
				break
			}
		}
	}
	return
}

// boundSeenByPrimary bounds every unbounded read with the primary's
// position read now (an upper bound of anything any standby replayed
// before), one round trip of the route's reader. It reports whether it
// did.
func (ss *session) boundSeenByPrimary() bool {
	ss.mu.Lock()
	n := len(ss.mu.fresh.seen)
	ss.mu.Unlock()
	rd := ss.positionReader()
	if n == 0 || rd == nil {
		return false
	}
	asked := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), captureWait)
	defer cancel()
	tok, err := rd.Read(ctx)
	if err != nil {
		return false
	}
	ss.mu.Lock()
	ss.raiseFloorLocked(tok)
	kept := ss.mu.fresh.seen[:0]
	for _, s := range ss.mu.fresh.seen {
		if s.at.After(asked) { // noted meanwhile: not covered
			kept = append(kept, s)
		}
	}
	ss.mu.fresh.seen = kept
	ss.mu.Unlock()
	return true
}

// hurrySeen asks for prompt probes of the replicas whose reads are not
// bounded yet, and of those behind req, so a read held back by them gets
// its answer within about a probe's round trip (the checker bounds hurried
// probes per server).
func (ss *session) hurrySeen(req freshness.Requirement) {
	if ss.srv == nil {
		return
	}
	checker := ss.runtime().checkerOf()
	if checker == nil {
		return
	}
	ss.mu.Lock()
	for _, s := range ss.mu.fresh.seen {
		checker.Hurry(s.addr)
	}
	ss.mu.Unlock()
	for _, c := range ss.srv.candidatesFrom(ss.route, checker.Snapshot(), req) {
		if !c.eligible {
			checker.Hurry(c.addr)
		}
	}
}

// replayWait bounds how long a read that would fall back waits for the
// replicas' current replay positions (refreshReplicas): a loopback round
// trip or two; past it the read falls back as it would have.
const replayWait = 20 * time.Millisecond

// refreshReplicas reads the current replay position of the replicas req
// found behind and of those the session read from without a bound yet
// (the route's replay readers, batched with other sessions' requests),
// and records them (Server.observe), so the read is decided again on
// them rather than on the last probe. A position read after the
// session's read on a replica that did not restart bounds what it saw
// there, and raises the floor to it. When none reached the floor and the
// primary may not have written the WAL up to it out yet, it has the
// primary do so (flushPrimary) and asks again for up to replayWait. It
// reports whether the decision may now differ.
func (ss *session) refreshReplicas(req freshness.Requirement) (changed bool) {
	if ss.srv == nil {
		return false
	}
	r := ss.runtime()
	if r == nil {
		return false
	}
	ask := map[string]bool{}
	ss.mu.Lock()
	for _, s := range ss.mu.fresh.seen {
		ask[s.addr] = true
	}
	ss.mu.Unlock()
	for _, c := range ss.srv.candidates(ss.route, req) {
		if !c.eligible && (c.reason == reasonReadYourWrites || c.reason == reasonStrictFresh) {
			ask[c.addr] = true
		}
	}
	changed, reached, behind := ss.askReplicas(r, ask, req, time.Now().Add(replayWait))
	if reached || !behind {
		return changed
	}
	// Still behind: when the WAL the floor needs is not written out on the
	// primary yet, no standby can have it; have the primary write it, and
	// ask again while it reaches them (a few milliseconds on a LAN).
	if !ss.flushPrimary(r, req.Floor) {
		return changed
	}
	deadline := time.Now().Add(replayWait)
	for pause := time.Millisecond; ; pause *= 3 {
		time.Sleep(pause)
		again, reached, behind := ss.askReplicas(r, ask, req, deadline)
		changed = changed || again
		if reached || !behind || time.Now().Add(pause).After(deadline) {
			return changed
		}
	}
}

// askReplicas is refreshReplicas' reading of the replay positions of the
// replicas in ask, until deadline at the latest. changed is
// refreshReplicas' answer; reached reports whether one of them answered
// at or past the floor, behind whether one answered on the floor's
// timeline below it (so writing the primary's WAL out may help).
func (ss *session) askReplicas(r *routeRuntime, ask map[string]bool, req freshness.Requirement, deadline time.Time) (changed, reached, behind bool) {
	type answer struct {
		addr string
		tok  freshness.Token
		err  error
	}
	asked, before := time.Now(), ss.snapshot()
	ch := make(chan answer, len(ask))
	n := 0
	for addr := range ask {
		rd := r.replays[addr]
		if rd == nil {
			continue
		}
		rd.Request(func(tok freshness.Token, err error) { ch <- answer{addr, tok, err} })
		n++
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for ; n > 0; n-- {
		var a answer
		select {
		case a = <-ch:
		case <-timer.C:
			return changed, reached, behind
		}
		if a.err != nil {
			continue
		}
		// The run of the server the answer belongs to: the reader checked
		// the server's start time against the probes' when it read, some
		// time between the snapshot taken before the requests and one
		// taken now. When both show the same start time, so did the
		// reader's; otherwise the run is unknown (zero: neither recorded
		// nor a bound).
		started := startedIn(before, a.addr)
		if !startedIn(ss.snapshot(), a.addr).Equal(started) {
			started = time.Time{}
		}
		ss.srv.observe(a.addr, a.tok, started)
		if !req.Floor.IsZero() && a.tok.Timeline == req.Floor.Timeline {
			if a.tok.LSN >= req.Floor.LSN {
				changed, reached = true, true
			} else {
				behind = true
			}
		}
		ss.mu.Lock()
		kept := ss.mu.fresh.seen[:0]
		for _, s := range ss.mu.fresh.seen {
			if s.addr == a.addr && s.at.Before(asked) && !s.started.IsZero() && s.started.Equal(started) {
				ss.raiseFloorLocked(a.tok)
				changed = true
				continue
			}
			kept = append(kept, s)
		}
		ss.mu.fresh.seen = kept
		ss.mu.Unlock()
	}
	return changed, reached, behind
}

// flushPrimary has the route's primary write its WAL out up to floor when
// it has not yet (the route's flusher, shared by the sessions: one query
// in flight at most, none while no read is held back, none when the
// position reader or the flusher saw it written out past floor already).
// It waits at most replayWait, and reports whether the primary had to
// write (so the replicas may now catch up with floor).
func (ss *session) flushPrimary(r *routeRuntime, floor freshness.Token) bool {
	if r.flusher == nil || floor.IsZero() || !ss.route.Freshness.FlushPrimaryWAL || r.flushed.covers(floor) {
		return false
	}
	for want := uint64(floor.LSN); ; {
		cur := r.flushWant.Load()
		if cur >= want || r.flushWant.CompareAndSwap(cur, want) {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), replayWait)
	defer cancel()
	tok, err := r.flusher.Read(ctx)
	return err == nil && !tok.IsZero()
}

// startedIn is the start time snap shows for server addr (zero: unknown).
func startedIn(snap *health.Snapshot, addr string) time.Time {
	if snap != nil {
		if v, ok := snap.Get(addr); ok {
			return v.StartedAt
		}
	}
	return time.Time{}
}
